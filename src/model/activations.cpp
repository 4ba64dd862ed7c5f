// Sizing and counting the forward passes' buffers (model/activations.h).
#include "model/activations.h"

#include <algorithm>

namespace qvl {

namespace {

void grow(std::vector<float>& v, int64_t n) {
  if (v.size() < static_cast<size_t>(n)) v.resize(static_cast<size_t>(n));
}

size_t floats(const std::vector<float>& v) { return v.capacity() * sizeof(float); }

size_t scratch_bytes(const std::vector<AttentionThreadScratch>& threads) {
  size_t b = 0;
  for (const AttentionThreadScratch& t : threads)
    b += floats(t.attention.scores) + floats(t.attention.kt) + floats(t.attention.vc) + floats(t.keys) + floats(t.values);
  return b;
}

}  // namespace

void TextActivations::reserve(const TextConfig& c, int64_t n, int64_t rows, bool gathered_logits, int n_threads) {
  const int64_t H = c.hidden_size, hd = c.head_dim, qd = c.num_attention_heads * hd,
                kvd = c.num_key_value_heads * hd, I = c.intermediate_size;
  grow(h, n * H);
  grow(cos, n * hd);
  grow(sin, n * hd);
  grow(x, std::max(n, rows) * H);
  grow(q, n * qd);
  grow(k, n * kvd);
  grow(v, n * kvd);
  grow(attn, n * qd);
  grow(tmp, n * H);
  grow(gate, n * I);
  grow(up, n * I);
  grow(picked, rows * H);
  if (gathered_logits) grow(logits, rows * c.vocab_size);
  if (threads.size() < static_cast<size_t>(n_threads)) threads.resize(static_cast<size_t>(n_threads));
}

void TextActivations::reserve_shared(int64_t n) {
  grow(shared_keys, n);
  grow(shared_values, n);
}

size_t TextActivations::bytes() const {
  size_t b = 0;
  for (const std::vector<float>* v :
       {&h, &cos, &sin, &x, &q, &k, &v, &attn, &tmp, &gate, &up, &picked, &logits, &shared_keys, &shared_values})
    b += floats(*v);
  return b + scratch_bytes(threads);
}

void VisionActivations::reserve(const VisionConfig& c, int64_t N, int64_t mlp_rows) {
  const int64_t D = c.hidden_size, hd = c.head_dim();
  grow(h, N * D);
  grow(cos, N * hd);
  grow(sin, N * hd);
  grow(normed, N * D);
  grow(qkv, N * 3 * D);
  grow(attn, N * D);
  grow(tmp, N * D);
  grow(mlp, std::min(N, mlp_rows) * c.intermediate_size);
  peak = std::max(peak, bytes());
}

void VisionActivations::release_blocks() {
  peak = std::max(peak, bytes());
  for (std::vector<float>* v : {&normed, &qkv, &attn, &tmp, &mlp}) std::vector<float>().swap(*v);
  flash = FlashScratch{};
}

void VisionActivations::release() {
  peak = std::max(peak, bytes());
  for (std::vector<float>* v : {&pixels, &h, &cos, &sin, &normed, &qkv, &attn, &tmp, &mlp}) std::vector<float>().swap(*v);
  flash = FlashScratch{};
}

size_t VisionActivations::bytes() const {
  size_t b = 0;
  for (const std::vector<float>* v : {&pixels, &h, &cos, &sin, &normed, &qkv, &attn, &tmp, &mlp}) b += floats(*v);
  return b + flash.bytes();
}

}  // namespace qvl
