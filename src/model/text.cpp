// The text decoder (Qwen3VLTextModel + the tied LM head): embeddings with image features scattered in,
// Qwen3 layers with q/k RMSNorm, GQA and interleaved M-RoPE, DeepStack additions after the first layers,
// and a KV cache so that each generated token costs one step.
#include "model/text.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/attention.h"
#include "kernels/ops.h"

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
    : n_kv_(c.num_key_value_heads), head_dim_(c.head_dim), capacity_(capacity), type_(type) {
  size_ = static_cast<size_t>(c.num_hidden_layers) * n_kv_ * capacity_ * head_dim_;
  k_.reset(new uint8_t[size_ * elem_bytes()]);  // uninitialised on purpose: untouched pages stay out of RSS
  v_.reset(new uint8_t[size_ * elem_bytes()]);
}

void KVCache::store(int layer, int head, int64_t pos, const float* k, const float* v) {
  const size_t at = index(layer, head, pos);
  if (type_ == KVType::kF32) {
    std::copy(k, k + head_dim_, reinterpret_cast<float*>(k_.get()) + at);
    std::copy(v, v + head_dim_, reinterpret_cast<float*>(v_.get()) + at);
    return;
  }
  uint16_t* kd = reinterpret_cast<uint16_t*>(k_.get()) + at;
  uint16_t* vd = reinterpret_cast<uint16_t*>(v_.get()) + at;
  for (int j = 0; j < head_dim_; ++j) {
    kd[j] = f32_to_f16(k[j]);
    vd[j] = f32_to_f16(v[j]);
  }
}

const float* KVCache::read(const uint8_t* base, int layer, int head, int64_t n, std::vector<float>& buf) const {
  const size_t at = index(layer, head, 0);
  if (type_ == KVType::kF32) return reinterpret_cast<const float*>(base) + at;
  buf.resize(static_cast<size_t>(n * head_dim_));
  Mat{WeightType::kF16, 1, n * head_dim_, reinterpret_cast<const uint16_t*>(base) + at}.row_to_f32(0, buf.data());
  return buf.data();
}

const float* KVCache::keys(int layer, int head, int64_t n, std::vector<float>& buf) const {
  return read(k_.get(), layer, head, n, buf);
}

const float* KVCache::values(int layer, int head, int64_t n, std::vector<float>& buf) const {
  return read(v_.get(), layer, head, n, buf);
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
  const TextConfig& c = model.config().text;
  const TextW& w = model.text();
  const int64_t H = c.hidden_size, hd = c.head_dim, nh = c.num_attention_heads, nkv = c.num_key_value_heads;
  const int64_t qd = nh * hd, kvd = nkv * hd, I = c.intermediate_size, V = c.vocab_size;
  const int64_t past = cache.length();
  QVL_CHECK(past + n <= cache.capacity());
  auto emit = [&](const std::string& name, const float* data, std::vector<int64_t> shape) {
    if (dump) (*dump)(name, data, shape);
  };

  // inputs_embeds = self.embed_tokens(input_ids); inputs_embeds.masked_scatter(image_mask, image_embeds)
  std::vector<float> h(static_cast<size_t>(n * H));
  std::vector<int64_t> visual_rows;  // positions (within this call) of the image-pad tokens
  for (int64_t i = 0; i < n; ++i) {
    QVL_CHECK(ids[i] >= 0 && ids[i] < V);
    if (visual && visual->n_visual > 0 && ids[i] == model.config().image_token_id) visual_rows.push_back(i);
    w.embed.row_to_f32(ids[i], &h[static_cast<size_t>(i * H)]);
  }
  if (visual && visual->n_visual > 0) {
    QVL_CHECK(static_cast<int64_t>(visual_rows.size()) == visual->n_visual);
    for (size_t r = 0; r < visual_rows.size(); ++r)
      std::copy(visual->embeds + r * H, visual->embeds + (r + 1) * H, &h[static_cast<size_t>(visual_rows[r] * H)]);
  }
  emit("model.language_model.embed_tokens", h.data(), {n, H});

  std::vector<float> cos_t(static_cast<size_t>(n * hd)), sin_t(static_cast<size_t>(n * hd));
  mrope_tables(c, pos, n, cos_t.data(), sin_t.data());

  std::vector<float> x(static_cast<size_t>(n * H)), q(static_cast<size_t>(n * qd)), k(static_cast<size_t>(n * kvd)),
      v(static_cast<size_t>(n * kvd)), attn(static_cast<size_t>(n * qd)), tmp(static_cast<size_t>(n * H)),
      gate(static_cast<size_t>(n * I)), up(static_cast<size_t>(n * I));
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  for (int layer = 0; layer < c.num_hidden_layers; ++layer) {
    const TextLayerW& L = w.layers[layer];
    // hidden_states = self.input_layernorm(hidden_states)
    rms_norm(pool, h.data(), n, H, L.input_norm.data(), c.rms_norm_eps, x.data());
    // query_states = self.q_norm(self.q_proj(hidden_states).view(hidden_shape)); key_states likewise
    matmul(pool, x.data(), n, L.q, nullptr, q.data());
    matmul(pool, x.data(), n, L.k, nullptr, k.data());
    matmul(pool, x.data(), n, L.v, nullptr, v.data());
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
    // Causal attention over the cache; query heads kv * group .. + group read kv head kv (repeat_kv), whose
    // keys and values are appended to the cache and read back (widened from f16) once for the group.
    const int64_t group = nh / nkv;
    pool.parallel_for(nkv, 1, [&](int, int64_t kv0, int64_t kv1) {
      thread_local AttentionScratch scratch;
      thread_local std::vector<float> kbuf, vbuf;
      for (int64_t kv = kv0; kv < kv1; ++kv) {
        for (int64_t i = 0; i < n; ++i)
          cache.store(layer, static_cast<int>(kv), past + i, &k[i * kvd + kv * hd], &v[i * kvd + kv * hd]);
        const float* kf = cache.keys(layer, static_cast<int>(kv), past + n, kbuf);
        const float* vf = cache.values(layer, static_cast<int>(kv), past + n, vbuf);
        for (int64_t hh = kv * group; hh < (kv + 1) * group; ++hh)
          attention_head(&q[hh * hd], qd, n, kf, hd, vf, hd, past + n, hd, scale, /*causal_offset=*/past,
                         &attn[hh * hd], qd, scratch);
      }
    });
    // hidden_states = residual + self.o_proj(attn_output)
    matmul(pool, attn.data(), n, L.o, nullptr, tmp.data());
    add_inplace(pool, h.data(), tmp.data(), n * H);
    // hidden_states = residual + self.mlp(self.post_attention_layernorm(hidden_states))
    rms_norm(pool, h.data(), n, H, L.post_norm.data(), c.rms_norm_eps, x.data());
    matmul(pool, x.data(), n, L.gate, nullptr, gate.data());
    matmul(pool, x.data(), n, L.up, nullptr, up.data());
    silu_mul(pool, gate.data(), up.data(), n * I);
    matmul(pool, gate.data(), n, L.down, nullptr, tmp.data());
    add_inplace(pool, h.data(), tmp.data(), n * H);
    // hidden_states = self._deepstack_process(hidden_states, visual_pos_masks, deepstack_visual_embeds[layer_idx])
    if (visual && visual->n_visual > 0 && layer < static_cast<int>(visual->deepstack.size())) {
      for (size_t r = 0; r < visual_rows.size(); ++r)
        add_inplace(pool, &h[static_cast<size_t>(visual_rows[r] * H)], visual->deepstack[layer] + r * H, H);
    }
    emit("model.language_model.layers." + std::to_string(layer), h.data(), {n, H});
  }
  cache.advance(n);
  if (mode == LogitsMode::kNone) return;
  // hidden_states = self.norm(hidden_states); logits = self.lm_head(hidden_states)
  const int64_t first = mode == LogitsMode::kLast ? n - 1 : 0, rows = n - first;
  rms_norm(pool, &h[static_cast<size_t>(first * H)], rows, H, w.norm.data(), c.rms_norm_eps, x.data());
  emit("model.language_model.norm", x.data(), {rows, H});
  matmul(pool, x.data(), rows, w.lm_head, nullptr, logits);
  emit("lm_head", logits, {rows, V});
}

}  // namespace qvl
