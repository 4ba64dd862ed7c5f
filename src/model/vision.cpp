// The vision tower (Qwen3VLVisionModel): patch embedding, interpolated position embedding, 2-D rotary
// attention blocks, DeepStack mergers and the final merger — image patches in, LLM-width tokens out.
#include "model/vision.h"

#include <algorithm>
#include <cmath>

#include "kernels/attention.h"
#include "kernels/ops.h"
#include "util/phase_clock.h"

namespace qvl {

namespace {

// fast_pos_embed_interpolate for one image: bilinear (align_corners) resampling of the learned G x G grid
// to gh x gw, in merge-window row order, float32 weights as transformers computes them.
void add_position_embedding(const VisionW& w, const VisionConfig& c, int gh, int gw, int merge, float* h) {
  const int G = static_cast<int>(std::lround(std::sqrt(static_cast<double>(c.num_position_embeddings))));
  const int64_t D = c.hidden_size;
  // h_idxs = torch.linspace(0, G - 1, gh): start + step * i below the halfway point, end - step * (n - 1 - i)
  // from it (ATen's linspace), in float32.
  auto linspace = [&](int n) {
    std::vector<float> v(static_cast<size_t>(n));
    if (n == 1) {
      v[0] = 0.0f;
      return v;
    }
    const float end = static_cast<float>(G - 1);
    const float step = end / static_cast<float>(n - 1);
    for (int i = 0; i < n; ++i) v[i] = i < n / 2 ? step * static_cast<float>(i) : end - step * static_cast<float>(n - 1 - i);
    return v;
  };
  const std::vector<float> hs = linspace(gh), ws = linspace(gw);
  std::vector<float> row(static_cast<size_t>(D));
  for (int r = 0; r < gh; ++r) {
    const int hf = static_cast<int>(hs[r]), hc = std::min(hf + 1, G - 1);
    const float dh = hs[r] - static_cast<float>(hf);
    for (int col = 0; col < gw; ++col) {
      const int wf = static_cast<int>(ws[col]), wc = std::min(wf + 1, G - 1);
      const float dw = ws[col] - static_cast<float>(wf);
      const float w00 = (1 - dh) * (1 - dw), w01 = (1 - dh) * dw, w10 = dh * (1 - dw), w11 = dh * dw;
      const float* e00 = &w.pos_embed[static_cast<size_t>((hf * G + wf) * D)];
      const float* e01 = &w.pos_embed[static_cast<size_t>((hf * G + wc) * D)];
      const float* e10 = &w.pos_embed[static_cast<size_t>((hc * G + wf) * D)];
      const float* e11 = &w.pos_embed[static_cast<size_t>((hc * G + wc) * D)];
      // Merge-window order: patch (r, col) sits at row ((r/m * gw/m + col/m) * m + r%m) * m + col%m.
      const int64_t idx = ((static_cast<int64_t>(r / merge) * (gw / merge) + col / merge) * merge + r % merge) * merge + col % merge;
      float* out = h + idx * D;
      for (int64_t d = 0; d < D; ++d) {
        // pos_embeds[0] + pos_embeds[1] + pos_embeds[2] + pos_embeds[3], each embedding * weight
        const float p = e00[d] * w00 + e01[d] * w01 + e10[d] * w10 + e11[d] * w11;
        out[d] += p;
      }
    }
  }
}

// rot_pos_emb: per patch, cos and sin of [row * inv ‖ col * inv ‖ row * inv ‖ col * inv] (head_dim values),
// inv[j] = 1 / 10000^(2j / (head_dim / 2)).
void rotary_tables(const VisionConfig& c, int gh, int gw, int merge, float* cos_out, float* sin_out) {
  const int hd = c.head_dim(), quarter = hd / 4, dim = hd / 2;
  std::vector<float> inv(static_cast<size_t>(quarter));
  for (int j = 0; j < quarter; ++j)
    inv[j] = 1.0f / std::pow(10000.0f, static_cast<float>(2 * j) / static_cast<float>(dim));
  int64_t idx = 0;
  for (int bh = 0; bh < gh / merge; ++bh)
    for (int bw = 0; bw < gw / merge; ++bw)
      for (int mh = 0; mh < merge; ++mh)
        for (int mw = 0; mw < merge; ++mw, ++idx) {
          const float row = static_cast<float>(bh * merge + mh), col = static_cast<float>(bw * merge + mw);
          float* co = cos_out + idx * hd;
          float* si = sin_out + idx * hd;
          for (int j = 0; j < quarter; ++j) {
            const float a = row * inv[j], b = col * inv[j];
            co[j] = co[j + dim] = std::cos(a);
            si[j] = si[j + dim] = std::sin(a);
            co[j + quarter] = co[j + quarter + dim] = std::cos(b);
            si[j + quarter] = si[j + quarter + dim] = std::sin(b);
          }
        }
}

// Bidirectional multi-head attention within one image: qkv [L, 3 * D] (rotary already applied to q and k),
// out [L, D] (kernels/attention.h: flash blocks, tasks of one head's query block).
void attention(ThreadPool& pool, const float* qkv, int64_t L, int heads, int hd, float* out, AttentionPrecision precision,
               FlashScratch& scratch) {
  const int64_t D = static_cast<int64_t>(heads) * hd, stride = 3 * D;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  attention_multihead(pool, qkv, qkv + D, qkv + 2 * D, stride, L, heads, hd, scale, out, D, precision, scratch);
}

// Qwen3VLVisionPatchMerger: [n, D] patches -> [n / m², out] tokens; its norm's output in act.normed and its
// hidden layer in act.tmp (both [n, D] floats), free between blocks.
std::vector<float> patch_merger(ThreadPool& pool, const MergerW& w, const VisionConfig& c, const float* x, int64_t n,
                                bool postshuffle, VisionActivations& act) {
  const int64_t D = c.hidden_size, M = c.merged_dim(), rows = n / (M / D);
  if (act.normed.size() < static_cast<size_t>(n * D)) act.normed.resize(static_cast<size_t>(n * D));
  if (act.tmp.size() < static_cast<size_t>(n * D)) act.tmp.resize(static_cast<size_t>(n * D));
  std::vector<float>& normed = act.normed;  // [n, D]
  if (postshuffle) {
    // x = self.norm(x.view(-1, self.hidden_size)): LayerNorm over the concatenated 2x2 window
    layer_norm(pool, x, rows, M, w.norm.w.data(), w.norm.b.data(), c.layer_norm_eps, normed.data());
  } else {
    // x = self.norm(x).view(-1, self.hidden_size): LayerNorm per patch, then the window concatenation
    layer_norm(pool, x, n, D, w.norm.w.data(), w.norm.b.data(), c.layer_norm_eps, normed.data());
  }
  // x = self.linear_fc2(self.act_fn(self.linear_fc1(x))), act_fn = nn.GELU() (erf)
  std::vector<float>& hidden = act.tmp;  // [rows, M] = [n, D]
  matmul(pool, normed.data(), rows, w.fc1.w, w.fc1.bias(), hidden.data());
  gelu_erf(pool, hidden.data(), rows * M);
  std::vector<float> out(static_cast<size_t>(rows * c.out_hidden_size));
  matmul(pool, hidden.data(), rows, w.fc2.w, w.fc2.bias(), out.data());
  return out;
}

}  // namespace

namespace {
// Patches per slice of the vision MLP (see encode_images): 512 x 4096 floats = 8 MiB.
constexpr int64_t kMlpRows = 512;
}  // namespace

VisionEncoder::VisionEncoder(const Model& model, ThreadPool& pool, std::vector<const PreprocessedImage*> images,
                             VisionActivations& act, const DumpFn* dump)
    : model_(model), images_(std::move(images)), dump_(dump), act_(act) {
  const VisionConfig& c = model.config().vision;
  const VisionW& w = model.vision();
  const int64_t D = c.hidden_size, P = c.patch_dim(), hd = c.head_dim();
  const int merge = c.spatial_merge_size;
  N_ = 0;
  for (const PreprocessedImage* im : images_) N_ += im->num_patches();
  const int64_t N = N_;

  // hidden_states = self.patch_embed(hidden_states): Conv3d with stride = kernel, i.e. a matrix product.
  std::vector<float>& pixels = act_.pixels;  // [N, P]
  pixels.resize(static_cast<size_t>(N * P));
  if (act_.h.size() < static_cast<size_t>(N * D)) act_.h.resize(static_cast<size_t>(N * D));
  {
    int64_t off = 0;
    for (const PreprocessedImage* im : images_) {
      QVL_CHECK(im->patch_dim == P);
      std::copy(im->pixel_values.begin(), im->pixel_values.end(), pixels.begin() + off);
      off += static_cast<int64_t>(im->pixel_values.size());
    }
  }
  matmul(pool, pixels.data(), N, w.patch_embed.w, w.patch_embed.bias(), act_.h.data());
  std::vector<float>().swap(pixels);  // not read again: give its memory back before the blocks' buffers
  if (act_.cos.size() < static_cast<size_t>(N * hd)) act_.cos.resize(static_cast<size_t>(N * hd));
  if (act_.sin.size() < static_cast<size_t>(N * hd)) act_.sin.resize(static_cast<size_t>(N * hd));
  emit("model.visual.patch_embed", act_.h.data(), {N, D});

  // hidden_states = hidden_states + self.fast_pos_embed_interpolate(grid_thw); cos/sin of rot_pos_emb.
  {
    int64_t off = 0;
    for (const PreprocessedImage* im : images_) {
      const int64_t per_frame = static_cast<int64_t>(im->grid_h) * im->grid_w;
      for (int t = 0; t < im->grid_t; ++t) {
        add_position_embedding(w, c, im->grid_h, im->grid_w, merge, act_.h.data() + (off + t * per_frame) * D);
        rotary_tables(c, im->grid_h, im->grid_w, merge, act_.cos.data() + (off + t * per_frame) * hd,
                      act_.sin.data() + (off + t * per_frame) * hd);
      }
      off += im->num_patches();
    }
  }
  emit("model.visual.pos_embed_added", act_.h.data(), {N, D});
  out_.deepstack.resize(c.deepstack_visual_indexes.size());
  out_.dim = c.out_hidden_size;
  out_.n_tokens = N / (merge * merge);
}

void VisionEncoder::emit(const std::string& name, const float* data, std::vector<int64_t> shape) const {
  if (dump_) (*dump_)(name, data, shape);
}

int VisionEncoder::blocks_left() const { return model_.config().vision.depth - layer_ + (merged_ ? 0 : 1); }

int64_t VisionEncoder::block_macs(const VisionConfig& c, int64_t patches) {
  const int64_t D = c.hidden_size;
  // qkv, proj and the two MLP matrices, per patch; attention within an image adds less and is left out.
  return patches * (4 * D * D + 2 * D * c.intermediate_size);
}

bool VisionEncoder::step(ThreadPool& pool, int max_blocks) {
  const VisionConfig& c = model_.config().vision;
  const VisionW& w = model_.vision();
  const int64_t N = N_, D = c.hidden_size, hd = c.head_dim();
  if (layer_ < c.depth && max_blocks > 0) {
    // The blocks' buffers (model/activations.h): sized by the constructor, and again here after a
    // scheduler gave them back between slices (release_blocks).
    act_.reserve(c, N, kMlpRows);
    std::vector<float>& h = act_.h;            // [N, D]
    std::vector<float>& normed = act_.normed;  // [N, D]
    std::vector<float>& qkv = act_.qkv;        // [N, 3 D]
    std::vector<float>& attn = act_.attn;      // [N, D]
    std::vector<float>& tmp = act_.tmp;        // [N, D]
    std::vector<float>& mlp = act_.mlp;        // [min(N, kMlpRows), I]
    const std::vector<float>& cos = act_.cos;  // [N, head_dim]
    const std::vector<float>& sin = act_.sin;  // [N, head_dim]
    for (int done = 0; done < max_blocks && layer_ < c.depth; ++done, ++layer_) {
      const int layer = layer_;
      const VisionBlockW& b = w.blocks[layer];
      // hidden_states = hidden_states + self.attn(self.norm1(hidden_states), ...)
      layer_norm(pool, h.data(), N, D, b.norm1.w.data(), b.norm1.b.data(), c.layer_norm_eps, normed.data());
      {
        ScopedPhase ph(Phase::kVisionGemm);
        matmul(pool, normed.data(), N, b.qkv.w, b.qkv.bias(), qkv.data());
      }
      // query_states, key_states = apply_rotary_pos_emb_vision(q, k, cos, sin), per head
      pool.parallel_for(N, 64, [&](int, int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i)
          for (int hh = 0; hh < c.num_heads; ++hh) {
            rope_rotate_half(&qkv[static_cast<size_t>(i * 3 * D + hh * hd)], hd, &cos[i * hd], &sin[i * hd]);
            rope_rotate_half(&qkv[static_cast<size_t>(i * 3 * D + D + hh * hd)], hd, &cos[i * hd], &sin[i * hd]);
          }
      });
      // Attention is block-diagonal: each image (each frame group) attends only to itself (cu_seqlens).
      {
        ScopedPhase ph(Phase::kVisionAttention);
        int64_t off = 0;
        for (const PreprocessedImage* im : images_) {
          const int64_t per_frame = static_cast<int64_t>(im->grid_h) * im->grid_w;
          for (int t = 0; t < im->grid_t; ++t, off += per_frame)
            attention(pool, &qkv[static_cast<size_t>(off * 3 * D)], per_frame, c.num_heads, static_cast<int>(hd),
                      &attn[static_cast<size_t>(off * D)], model_.vision_attention(), act_.flash);
        }
      }
      {
        ScopedPhase ph(Phase::kVisionGemm);
        matmul(pool, attn.data(), N, b.proj.w, b.proj.bias(), tmp.data());
      }
      add_inplace(pool, h.data(), tmp.data(), N * D);
      // hidden_states = hidden_states + self.mlp(self.norm2(hidden_states))
      layer_norm(pool, h.data(), N, D, b.norm2.w.data(), b.norm2.b.data(), c.layer_norm_eps, normed.data());
      // The MLP runs kMlpRows patches at a time: its [rows, intermediate] activations are the largest
      // buffer of the tower (50 MB for a 1024x768 image whole).
      for (int64_t r0 = 0; r0 < N; r0 += kMlpRows) {
        const int64_t rows = std::min(kMlpRows, N - r0);
        {
          ScopedPhase ph(Phase::kVisionGemm);
          matmul(pool, &normed[static_cast<size_t>(r0 * D)], rows, b.fc1.w, b.fc1.bias(), mlp.data());
        }
        gelu_tanh(pool, mlp.data(), rows * c.intermediate_size);
        ScopedPhase ph(Phase::kVisionGemm);
        matmul(pool, mlp.data(), rows, b.fc2.w, b.fc2.bias(), &tmp[static_cast<size_t>(r0 * D)]);
      }
      add_inplace(pool, h.data(), tmp.data(), N * D);
      emit("model.visual.blocks." + std::to_string(layer), h.data(), {N, D});
      // if layer_num in self.deepstack_visual_indexes: deepstack_merger_list[...](hidden_states)
      auto ds = std::find(c.deepstack_visual_indexes.begin(), c.deepstack_visual_indexes.end(), layer);
      if (ds != c.deepstack_visual_indexes.end()) {
        const size_t j = static_cast<size_t>(ds - c.deepstack_visual_indexes.begin());
        ScopedPhase ph(Phase::kVisionMerger);
        out_.deepstack[j] = patch_merger(pool, w.deepstack[j], c, h.data(), N, /*postshuffle=*/true, act_);
        emit("model.visual.deepstack_merger_list." + std::to_string(j), out_.deepstack[j].data(),
             {out_.n_tokens, out_.dim});
      }
    }
    return done();
  }
  if (layer_ == c.depth && !merged_) {
    // hidden_states = self.merger(hidden_states)
    ScopedPhase ph(Phase::kVisionMerger);
    out_.embeds = patch_merger(pool, w.merger, c, act_.h.data(), N, /*postshuffle=*/false, act_);
    emit("model.visual.merger", out_.embeds.data(), {out_.n_tokens, out_.dim});
    merged_ = true;
    act_.release();  // the pass is over: its buffers go back (their peak stays counted)
  }
  return done();
}

VisionOutput VisionEncoder::take() {
  QVL_CHECK(done());
  return std::move(out_);
}

VisionOutput encode_images(const Model& model, ThreadPool& pool, const std::vector<const PreprocessedImage*>& images,
                           const DumpFn* dump, VisionActivations* act) {
  VisionActivations local;
  VisionEncoder enc(model, pool, images, act ? *act : local, dump);
  while (!enc.step(pool, model.config().vision.depth)) {
  }
  return enc.take();
}

}  // namespace qvl
