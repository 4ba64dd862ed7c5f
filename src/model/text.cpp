// The text decoder (Qwen3VLTextModel + the tied LM head): embeddings with image features scattered in,
// Qwen3 layers with q/k RMSNorm, GQA and interleaved M-RoPE, DeepStack additions after the first layers,
// and a KV cache so that each generated token costs one step.
#include "model/text.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <string>

#include "kernels/attention.h"
#include "kernels/kernels.h"
#include "kernels/ops.h"
#include "util/phase_clock.h"

namespace qvl {

const char* kv_type_name(KVType t) { return t == KVType::kF16 ? "f16" : "f32"; }

bool kv_type_from_name(const std::string& name, KVType* out) {
  for (KVType t : {KVType::kF32, KVType::kF16})
    if (name == kv_type_name(t)) {
      *out = t;
      return true;
    }
  return false;
}

KVCache::KVCache(const TextConfig& c, int64_t capacity, KVType type)
    : n_layers_(c.num_hidden_layers),
      n_kv_(c.num_key_value_heads),
      head_dim_(c.head_dim),
      panel_cols_(kernels().nn_cols),
      capacity_(capacity),
      stride_((capacity + panel_cols_ - 1) / panel_cols_ * panel_cols_),
      type_(type) {
  size_ = static_cast<size_t>(c.num_hidden_layers) * n_kv_ * stride_ * head_dim_;
  k_.reset(new uint8_t[size_ * elem_bytes()]);  // uninitialised on purpose: untouched pages stay out of RSS
  v_.reset(new uint8_t[size_ * elem_bytes()]);
}

void KVCache::store(int layer, int head, int64_t pos, const float* k, const float* v) {
  const size_t at = index(layer, head, pos);
  // The key as column c of its panel; a panel begun here is zeroed first, so its columns past the positions
  // stored are finite (their scores are computed with the panel's and never read).
  const int64_t c = pos % panel_cols_, panel_size = head_dim_ * panel_cols_;
  const size_t kat = panel_index(layer, head, pos);
  if (type_ == KVType::kF32) {
    float* kd = reinterpret_cast<float*>(k_.get()) + kat;
    if (c == 0) std::fill(kd, kd + panel_size, 0.0f);
    for (int j = 0; j < head_dim_; ++j) kd[j * panel_cols_ + c] = k[j];
    std::copy(v, v + head_dim_, reinterpret_cast<float*>(v_.get()) + at);
    return;
  }
  uint16_t* kd = reinterpret_cast<uint16_t*>(k_.get()) + kat;
  uint16_t* vd = reinterpret_cast<uint16_t*>(v_.get()) + at;
  if (c == 0) std::fill(kd, kd + panel_size, uint16_t{0});
  for (int j = 0; j < head_dim_; ++j) {
    kd[j * panel_cols_ + c] = f32_to_f16(k[j]);
    vd[j] = f32_to_f16(v[j]);
  }
}

const float* KVCache::read(const uint8_t* base, int layer, int head, int64_t floats, std::vector<float>& buf) const {
  const size_t at = index(layer, head, 0);
  if (type_ == KVType::kF32) return reinterpret_cast<const float*>(base) + at;
  buf.resize(static_cast<size_t>(floats));
  row_to_f32(Mat{WeightType::kF16, 1, floats, reinterpret_cast<const uint16_t*>(base) + at}, 0, buf.data());
  return buf.data();
}

void KVCache::widen(int layer, int head, int64_t p0, int64_t p1, float* keys_out, float* values_out) const {
  QVL_CHECK(p0 >= 0 && p0 <= p1 && p1 <= capacity_ && p0 % panel_cols_ == 0);
  const size_t at = index(layer, head, p0);
  const int64_t count = (p1 - p0) * head_dim_, key_count = key_floats(p1) - key_floats(p0);
  if (type_ == KVType::kF32) {
    std::copy_n(reinterpret_cast<const float*>(k_.get()) + at, key_count, keys_out);
    std::copy_n(reinterpret_cast<const float*>(v_.get()) + at, count, values_out);
    return;
  }
  row_to_f32(Mat{WeightType::kF16, 1, key_count, reinterpret_cast<const uint16_t*>(k_.get()) + at}, 0, keys_out);
  row_to_f32(Mat{WeightType::kF16, 1, count, reinterpret_cast<const uint16_t*>(v_.get()) + at}, 0, values_out);
}

const float* KVCache::keys(int layer, int head, int64_t n, std::vector<float>& buf) const {
  return read(k_.get(), layer, head, key_floats(n), buf);
}

const float* KVCache::values(int layer, int head, int64_t n, std::vector<float>& buf) const {
  return read(v_.get(), layer, head, n * head_dim_, buf);
}

const uint16_t* KVCache::keys_f16(int layer, int head) const {
  QVL_CHECK(type_ == KVType::kF16);
  return reinterpret_cast<const uint16_t*>(k_.get()) + index(layer, head, 0);
}

const uint16_t* KVCache::values_f16(int layer, int head) const {
  QVL_CHECK(type_ == KVType::kF16);
  return reinterpret_cast<const uint16_t*>(v_.get()) + index(layer, head, 0);
}

void KVCache::copy_prefix_from(const KVCache& from, int64_t n) {
  QVL_CHECK(same_shape(from) && n >= 0 && n <= from.length() && n <= capacity_);
  // Whole key panels: the last one's columns past n are the source's, finite.
  const size_t bytes = static_cast<size_t>(n) * head_dim_ * elem_bytes(),
               key_bytes = static_cast<size_t>(key_floats(n)) * elem_bytes();
  for (int layer = 0; layer < n_layers_; ++layer)
    for (int head = 0; head < n_kv_; ++head) {
      const size_t dst = index(layer, head, 0) * elem_bytes(), src = from.index(layer, head, 0) * elem_bytes();
      std::memcpy(k_.get() + dst, from.k_.get() + src, key_bytes);
      std::memcpy(v_.get() + dst, from.v_.get() + src, bytes);
    }
  length_ = n;
  high_water_ = std::max(high_water_, n);
}

void KVCache::truncate(int64_t n) {
  QVL_CHECK(n >= 0 && n <= length_);
  length_ = n;
}

namespace {

// Qwen3VLTextRotaryEmbedding with interleaved M-RoPE: frequency slot j takes its position from axis H when
// j % 3 == 1 and j < 3 * section[1], W when j % 3 == 2 and j < 3 * section[2], else T; emb = [freqs ‖ freqs].
void mrope_tables(const TextConfig& c, const int32_t* const pos[3], int64_t n, float* cos_out, float* sin_out) {
  const int hd = c.head_dim, half = hd / 2;
  std::vector<float> inv(static_cast<size_t>(half));
  // inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))
  for (int j = 0; j < half; ++j)
    inv[j] = 1.0f / std::pow(static_cast<float>(c.rope_theta), static_cast<float>(2 * j) / static_cast<float>(hd));
  for (int64_t i = 0; i < n; ++i) {
    for (int j = 0; j < half; ++j) {
      int axis = 0;
      if (j % 3 == 1 && j < 3 * c.mrope_section[1]) axis = 1;
      else if (j % 3 == 2 && j < 3 * c.mrope_section[2]) axis = 2;
      const float angle = static_cast<float>(pos[axis][i]) * inv[j];
      cos_out[i * hd + j] = cos_out[i * hd + j + half] = std::cos(angle);
      sin_out[i * hd + j] = sin_out[i * hd + j + half] = std::sin(angle);
    }
  }
}

}  // namespace

void text_forward(const Model& model, ThreadPool& pool, KVCache& cache, const int32_t* ids, int64_t n,
                  const int32_t* const pos[3], const VisualInputs* visual, LogitsMode mode, float* logits,
                  const DumpFn* dump) {
  TextSeq s;
  s.cache = &cache;
  s.ids = ids;
  s.n = n;
  for (int a = 0; a < 3; ++a) s.pos[a] = pos[a];
  s.visual = visual;
  s.mode = mode;
  s.logits = logits;
  text_forward_batch(model, pool, {s}, dump);
}

void text_forward_batch(const Model& model, ThreadPool& pool, const std::vector<TextSeq>& seqs, const DumpFn* dump,
                        TextActivations* act) {
  const TextConfig& c = model.config().text;
  const TextW& w = model.text();
  const int64_t H = c.hidden_size, hd = c.head_dim, nh = c.num_attention_heads, nkv = c.num_key_value_heads;
  const int64_t qd = nh * hd, kvd = nkv * hd, I = c.intermediate_size, V = c.vocab_size;
  const int64_t S = static_cast<int64_t>(seqs.size());
  // Row offsets of each sequence in the stacked activations, and its cache length before this call.
  std::vector<int64_t> row0(static_cast<size_t>(S + 1), 0), past(static_cast<size_t>(S));
  for (int64_t s = 0; s < S; ++s) {
    const TextSeq& q = seqs[s];
    QVL_CHECK(q.cache && q.n > 0 && q.cache->length() + q.n <= q.cache->capacity());
    for (int64_t t = 0; t < s; ++t) QVL_CHECK(seqs[t].cache != q.cache);
    past[s] = q.cache->length();
    row0[s + 1] = row0[s] + q.n;
  }
  const int64_t n = row0[S];
  if (n == 0) return;
  // The rows that will want logits (the LM head reads them gathered), to size the buffers.
  int64_t logit_rows = 0;
  for (const TextSeq& q : seqs)
    logit_rows += q.mode == LogitsMode::kNone ? 0 : q.mode == LogitsMode::kAll ? q.n : 1;
  TextActivations local;
  TextActivations& a = act ? *act : local;
  a.reserve(c, n, logit_rows, /*gathered_logits=*/S > 1, pool.size());
  auto emit = [&](const std::string& name, const float* data, std::vector<int64_t> shape) {
    if (dump) (*dump)(name, data, shape);
  };

  // inputs_embeds = self.embed_tokens(input_ids); inputs_embeds.masked_scatter(image_mask, image_embeds)
  std::vector<float>& h = a.h;  // [n, H]: every sequence's rows, stacked
  std::vector<std::vector<int64_t>> visual_rows(static_cast<size_t>(S));  // per sequence: stacked rows of its image pads
  for (int64_t s = 0; s < S; ++s) {
    const TextSeq& q = seqs[s];
    const bool has_visual = q.visual && q.visual->n_visual > 0;
    for (int64_t i = 0; i < q.n; ++i) {
      QVL_CHECK(q.ids[i] >= 0 && q.ids[i] < V);
      const int64_t r = row0[s] + i;
      if (has_visual && (q.ids[i] == model.config().image_token_id || q.ids[i] == model.config().video_token_id))
        visual_rows[s].push_back(r);
      row_to_f32(w.embed, q.ids[i], &h[static_cast<size_t>(r * H)]);
    }
    if (has_visual) {
      QVL_CHECK(static_cast<int64_t>(visual_rows[s].size()) == q.visual->n_visual);
      for (size_t j = 0; j < visual_rows[s].size(); ++j)
        std::copy(q.visual->embeds + j * H, q.visual->embeds + (j + 1) * H, &h[static_cast<size_t>(visual_rows[s][j] * H)]);
    }
  }
  emit("model.language_model.embed_tokens", h.data(), {n, H});

  std::vector<float>& cos_t = a.cos;  // [n, hd]
  std::vector<float>& sin_t = a.sin;  // [n, hd]
  for (int64_t s = 0; s < S; ++s)
    mrope_tables(c, seqs[s].pos, seqs[s].n, &cos_t[static_cast<size_t>(row0[s] * hd)], &sin_t[static_cast<size_t>(row0[s] * hd)]);

  // The layers' buffers (model/activations.h).
  std::vector<float>& x = a.x;        // [n, H] normed input
  std::vector<float>& q = a.q;        // [n, nh * hd]
  std::vector<float>& k = a.k;        // [n, nkv * hd]
  std::vector<float>& v = a.v;        // [n, nkv * hd]
  std::vector<float>& attn = a.attn;  // [n, nh * hd]
  std::vector<float>& tmp = a.tmp;    // [n, H]
  std::vector<float>& gate = a.gate;  // [n, I]
  std::vector<float>& up = a.up;      // [n, I]
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const int64_t group = nh / nkv;
  // qvl bench's breakdown (util/phase_clock.h): passes of several rows are prefill, of one row decode (a batched
  // decode round of several sequences counts as prefill; bench runs one sequence).
  const Phase gemm_phase = n > 1 ? Phase::kPrefillGemm : Phase::kDecodeGemm;
  const Phase attention_phase = n > 1 ? Phase::kPrefillAttention : Phase::kDecodeAttention;
  for (int layer = 0; layer < c.num_hidden_layers; ++layer) {
    const TextLayerW& L = w.layers[layer];
    // hidden_states = self.input_layernorm(hidden_states)
    rms_norm(pool, h.data(), n, H, L.input_norm.data(), c.rms_norm_eps, x.data());
    // query_states = self.q_norm(self.q_proj(hidden_states).view(hidden_shape)); key_states likewise
    {
      ScopedPhase ph(gemm_phase);
      matmul(pool, x.data(), n, L.q, nullptr, q.data());
      matmul(pool, x.data(), n, L.k, nullptr, k.data());
      matmul(pool, x.data(), n, L.v, nullptr, v.data());
    }
    rms_norm(pool, q.data(), n * nh, hd, L.q_norm.data(), c.rms_norm_eps, q.data());
    rms_norm(pool, k.data(), n * nkv, hd, L.k_norm.data(), c.rms_norm_eps, k.data());
    // query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin)
    pool.parallel_for(n, 16, [&](int, int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        for (int64_t hh = 0; hh < nh; ++hh) rope_rotate_half(&q[i * qd + hh * hd], hd, &cos_t[i * hd], &sin_t[i * hd]);
        for (int64_t hh = 0; hh < nkv; ++hh) rope_rotate_half(&k[i * kvd + hh * hd], hd, &cos_t[i * hd], &sin_t[i * hd]);
      }
    });
    // key_states, value_states = past_key_values.update(key_states, value_states, self.layer_idx)
    ScopedPhase attention_clock(attention_phase);
    pool.parallel_for(S * nkv, 1, [&](int, int64_t w0, int64_t w1) {
      for (int64_t item = w0; item < w1; ++item) {
        const int64_t s = item / nkv, kv = item % nkv;
        for (int64_t i = 0; i < seqs[s].n; ++i)
          seqs[s].cache->store(layer, static_cast<int>(kv), past[s] + i, &k[(row0[s] + i) * kvd + kv * hd],
                               &v[(row0[s] + i) * kvd + kv * hd]);
      }
    });
    // Causal attention over each sequence's cache; query heads kv * group .. + group read kv head kv
    // (repeat_kv), whose keys and values are read back for the group: widened from f16 into buffers, or (a
    // decode step) read as they are by attention_head_f16.
    // Work items: (sequence, kv head, a chunk of its query rows): a prompt's rows are cut into chunks when
    // the (sequence, kv head) pairs alone would leave threads idle (8 kv heads, 16 threads); each row's
    // result is the same whichever chunk it is in (row_invariant), so the split never changes the bits.
    const int64_t pairs = S * nkv, threads = pool.size();
    // Where an f16 cache's keys and values are widened: with fewer pairs than threads, once per pair into
    // a.shared_keys / a.shared_values by all threads (pairs x context floats, and no chunk widens its prefix
    // again); else by each thread into its own buffers, per item (threads x context floats). Either way
    // min(pairs, threads) contexts of floats, not one per thread: 64 threads at a 32K context would hold
    // 2 GiB of copies (2b shapes) where the 8 kv heads need 256 MiB. The widened values are the same.
    // A sequence of few rows (a decode step) with an f16 cache reads it as it is instead (attention_head_f16:
    // each value widened in the tile, read once; the same bits).
    std::vector<char>& direct = a.direct_f16;  // [S]
    direct.assign(static_cast<size_t>(S), 0);
    for (int64_t s = 0; s < S; ++s)
      direct[s] = seqs[s].cache->type() == KVType::kF16 && seqs[s].n < kernels().nn_rows && attention_f16_supported(hd);
    bool shared = pairs < threads;
    for (int64_t s = 0; s < S; ++s) shared = shared && seqs[s].cache->type() == KVType::kF16;
    std::vector<int64_t>& pair_at = a.shared_offsets;  // [pairs + 1]: pair (s, kv)'s first float
    if (shared) {
      // Each pair's keys in whole panels (key_floats), its values in as many floats.
      pair_at.assign(static_cast<size_t>(pairs + 1), 0);
      for (int64_t s = 0; s < S; ++s)
        for (int64_t kv = 0; kv < nkv; ++kv)
          pair_at[s * nkv + kv + 1] =
              pair_at[s * nkv + kv] + (direct[s] ? 0 : seqs[s].cache->key_floats(past[s] + seqs[s].n));
      a.reserve_shared(pair_at[pairs]);
      // Blocks of kWidenBlock positions (whole key panels), dealt to the threads as they come free.
      constexpr int64_t kWidenBlock = 512;
      QVL_CHECK(kWidenBlock % seqs[0].cache->panel_cols() == 0);
      std::vector<std::array<int64_t, 3>>& blocks = a.widen_blocks;  // (pair, first position, end position)
      blocks.clear();
      for (int64_t pr = 0; pr < pairs; ++pr) {
        if (direct[pr / nkv]) continue;
        const int64_t len = past[pr / nkv] + seqs[pr / nkv].n;
        for (int64_t p0 = 0; p0 < len; p0 += kWidenBlock) blocks.push_back({pr, p0, std::min(len, p0 + kWidenBlock)});
      }
      pool.parallel_for_dynamic(static_cast<int64_t>(blocks.size()), 1, [&](int, int64_t b0, int64_t b1) {
        for (int64_t b = b0; b < b1; ++b) {
          const auto [pr, p0, p1] = blocks[static_cast<size_t>(b)];
          seqs[pr / nkv].cache->widen(layer, static_cast<int>(pr % nkv), p0, p1,
                                      &a.shared_keys[pair_at[pr] + p0 * hd], &a.shared_values[pair_at[pr] + p0 * hd]);
        }
      });
    }
    std::vector<std::array<int64_t, 4>>& items = a.attention_items;  // (sequence, kv head, first row, end row)
    items.clear();
    for (int64_t s = 0; s < S; ++s) {
      const int64_t ns = seqs[s].n;
      const int64_t chunks =
          pairs >= threads ? 1 : std::clamp<int64_t>((4 * threads + pairs - 1) / pairs, 1, std::max<int64_t>(1, ns / 16));
      for (int64_t kv = 0; kv < nkv; ++kv)
        for (int64_t c = 0; c < chunks; ++c) items.push_back({s, kv, c * ns / chunks, (c + 1) * ns / chunks});
    }
    pool.parallel_for_dynamic(static_cast<int64_t>(items.size()), 1, [&](int t, int64_t w0, int64_t w1) {
      AttentionThreadScratch& mine = a.threads[static_cast<size_t>(t)];
      AttentionScratch& scratch = mine.attention;
      std::vector<float>& kbuf = mine.keys;
      std::vector<float>& vbuf = mine.values;
      for (int64_t item = w0; item < w1; ++item) {
        const auto [s, kv, c0, c1] = items[static_cast<size_t>(item)];
        const KVCache& cache = *seqs[s].cache;
        const int64_t r0 = row0[s] + c0, p0 = past[s] + c0, rows = c1 - c0;
        const int head = static_cast<int>(kv);
        // The keys as the cache holds them, in kᵀ panels of the table's tile width: no step transposes them.
        QVL_CHECK(cache.panel_cols() == kernels().nn_cols);
        if (direct[s]) {
          for (int64_t hh = kv * group; hh < (kv + 1) * group; ++hh)
            attention_head_f16(&q[r0 * qd + hh * hd], qd, rows, cache.keys_f16(layer, head), cache.values_f16(layer, head),
                               hd, p0 + rows, hd, scale, /*causal_offset=*/p0, &attn[r0 * qd + hh * hd], qd, scratch);
          continue;
        }
        const float* kt = shared ? &a.shared_keys[pair_at[s * nkv + kv]] : cache.keys(layer, head, p0 + rows, kbuf);
        const float* vf = shared ? &a.shared_values[pair_at[s * nkv + kv]] : cache.values(layer, head, p0 + rows, vbuf);
        for (int64_t hh = kv * group; hh < (kv + 1) * group; ++hh)
          attention_head(&q[r0 * qd + hh * hd], qd, rows, /*k=*/nullptr, 0, vf, hd, p0 + rows, hd, scale,
                         /*causal_offset=*/p0, &attn[r0 * qd + hh * hd], qd, scratch, /*row_invariant=*/true, kt);
      }
    });
    attention_clock.stop();
    // hidden_states = residual + self.o_proj(attn_output)
    {
      ScopedPhase ph(gemm_phase);
      matmul(pool, attn.data(), n, L.o, nullptr, tmp.data());
    }
    add_inplace(pool, h.data(), tmp.data(), n * H);
    // hidden_states = residual + self.mlp(self.post_attention_layernorm(hidden_states))
    rms_norm(pool, h.data(), n, H, L.post_norm.data(), c.rms_norm_eps, x.data());
    {
      ScopedPhase ph(gemm_phase);
      matmul(pool, x.data(), n, L.gate, nullptr, gate.data());
      matmul(pool, x.data(), n, L.up, nullptr, up.data());
    }
    silu_mul(pool, gate.data(), up.data(), n * I);
    {
      ScopedPhase ph(gemm_phase);
      matmul(pool, gate.data(), n, L.down, nullptr, tmp.data());
    }
    add_inplace(pool, h.data(), tmp.data(), n * H);
    // hidden_states = self._deepstack_process(hidden_states, visual_pos_masks, deepstack_visual_embeds[layer_idx])
    for (int64_t s = 0; s < S; ++s) {
      const VisualInputs* vis = seqs[s].visual;
      if (!vis || vis->n_visual == 0 || layer >= static_cast<int>(vis->deepstack.size())) continue;
      for (size_t j = 0; j < visual_rows[s].size(); ++j)
        add_inplace(pool, &h[static_cast<size_t>(visual_rows[s][j] * H)], vis->deepstack[layer] + j * H, H);
    }
    emit("model.language_model.layers." + std::to_string(layer), h.data(), {n, H});
  }
  for (const TextSeq& s : seqs) s.cache->advance(s.n);

  // hidden_states = self.norm(hidden_states); logits = self.lm_head(hidden_states)
  // The rows that want logits, gathered so that the LM head (the largest matrix) is read once.
  std::vector<int64_t> want;  // stacked row indices
  for (int64_t s = 0; s < S; ++s) {
    if (seqs[s].mode == LogitsMode::kNone) continue;
    for (int64_t i = seqs[s].mode == LogitsMode::kAll ? 0 : seqs[s].n - 1; i < seqs[s].n; ++i) want.push_back(row0[s] + i);
  }
  if (want.empty()) return;
  const int64_t rows = static_cast<int64_t>(want.size());
  std::vector<float>& picked = a.picked;  // [rows, H]
  for (int64_t r = 0; r < rows; ++r)
    std::copy(&h[static_cast<size_t>(want[r] * H)], &h[static_cast<size_t>((want[r] + 1) * H)], &picked[static_cast<size_t>(r * H)]);
  rms_norm(pool, picked.data(), rows, H, w.norm.data(), c.rms_norm_eps, x.data());
  emit("model.language_model.norm", x.data(), {rows, H});
  // Hidden-state rows are copied out; the LM head runs only when some sequence wants logits.
  bool any_logits = false;
  {
    int64_t r = 0;
    for (const TextSeq& s : seqs) {
      if (s.mode == LogitsMode::kNone) continue;
      if (s.mode == LogitsMode::kLastHidden) std::copy_n(x.data() + r * H, H, s.logits);
      else any_logits = true;
      r += s.mode == LogitsMode::kAll ? s.n : 1;
    }
  }
  if (!any_logits) return;
  const bool one_out = S == 1;  // one sequence: its logits buffer takes all rows directly
  float* out = one_out ? seqs[0].logits : a.logits.data();  // [rows, V]
  {
    ScopedPhase ph(gemm_phase);
    matmul(pool, x.data(), rows, w.lm_head, nullptr, out);
  }
  emit("lm_head", out, {rows, V});
  if (one_out) return;
  int64_t r = 0;
  for (const TextSeq& s : seqs) {
    if (s.mode == LogitsMode::kNone) continue;
    const int64_t count = s.mode == LogitsMode::kAll ? s.n : 1;
    if (s.mode != LogitsMode::kLastHidden) std::copy(out + r * V, out + (r + count) * V, s.logits);
    r += count;
  }
}

}  // namespace qvl
