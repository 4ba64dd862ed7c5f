// The text decoder (Qwen3VLTextModel + the tied LM head): embeddings with image features scattered in,
// Qwen3 layers with q/k RMSNorm, GQA and interleaved M-RoPE, DeepStack additions after the first layers,
// and a KV cache so that each generated token costs one step.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/activations.h"
#include "model/kv_type.h"
#include "model/model.h"
#include "util/thread_pool.h"

namespace qvl {

// Keys and values of every layer for the tokens seen so far. Values: [layer][kv_head][position][head_dim].
// Keys transposed, as attention's q · kᵀ tile reads them: [layer][kv_head][panel][head_dim][panel_cols], key at
// position p in panel p / panel_cols, column p % panel_cols, with panel_cols the kernel table's nn_cols. A
// decode step and a prefill read the same panels, so a row's scores do not depend on how many rows come with
// it (attention_head's row_invariant), and no step transposes the keys again. A panel's columns past the
// positions stored hold finite values (zeros when it was begun), never read as scores.
class KVCache {
 public:
  KVCache(const TextConfig& c, int64_t capacity, KVType type = KVType::kF16);
  int64_t capacity() const { return capacity_; }
  int64_t panel_cols() const { return panel_cols_; }
  // Floats that keys(.., n, ..) and widen(.., 0, n, ..) give: n positions rounded up to whole panels.
  int64_t key_floats(int64_t n) const { return (n + panel_cols_ - 1) / panel_cols_ * panel_cols_ * head_dim_; }
  int64_t length() const { return length_; }
  KVType type() const { return type_; }
  void clear() { length_ = 0; }
  // Forgets everything from position n on (n <= length).
  void truncate(int64_t n);

  // Writes the head_dim keys and values of (layer, head) at position pos.
  void store(int layer, int head, int64_t pos, const float* k, const float* v);
  // The float32 keys of (layer, head) at positions [0, n) in their panels (key_floats(n) floats), and the values,
  // head_dim apart: a view into the cache (f32) or widened into buf (f16).
  const float* keys(int layer, int head, int64_t n, std::vector<float>& buf) const;
  const float* values(int layer, int head, int64_t n, std::vector<float>& buf) const;
  // An f16 cache's keys (panels) and values (rows) of (layer, head) as stored, for kernels that widen them as
  // they read (attention_head_f16).
  const uint16_t* keys_f16(int layer, int head) const;
  const uint16_t* values_f16(int layer, int head) const;
  // Positions [p0, p1) of (layer, head) as float32 (p0 a multiple of panel_cols()): the panels that hold them
  // into keys_out (key_floats(p1) - key_floats(p0) floats), the values head_dim apart into values_out (their
  // position p0 first); copied (f32) or widened (f16).
  void widen(int layer, int head, int64_t p0, int64_t p1, float* keys_out, float* values_out) const;
  void advance(int64_t n) {
    length_ += n;
    high_water_ = std::max(high_water_, length_);
  }
  // Same layers, heads, head size and storage type (so positions can be copied from one to the other).
  bool same_shape(const KVCache& o) const {
    return n_layers_ == o.n_layers_ && n_kv_ == o.n_kv_ && head_dim_ == o.head_dim_ && panel_cols_ == o.panel_cols_ &&
           type_ == o.type_;
  }
  // Makes this cache hold the first n positions of `from` (same_shape; n <= from.length(), capacity()).
  void copy_prefix_from(const KVCache& from, int64_t n);
  // Memory in use: the positions ever written (the pages touched), keys and values. A begun key panel is
  // zeroed whole, so up to panel_cols() - 1 positions more of keys per layer and kv head are touched than
  // counted (under 1 MiB on the 2b shapes with 16-key panels): the prefix cache's budget counts positions.
  size_t committed_bytes() const {
    return 2 * static_cast<size_t>(n_layers_) * n_kv_ * static_cast<size_t>(high_water_) * head_dim_ * elem_bytes();
  }
  // Reserved size; pages are committed only when positions are written (the buffers are not zero-filled),
  // so a short conversation in a 4096-token cache costs only what it uses.
  size_t bytes() const { return 2 * size_ * elem_bytes(); }

 private:
  size_t elem_bytes() const { return type_ == KVType::kF16 ? 2 : 4; }
  // Position pos's first value (values), or its panel's first (keys), of (layer, head).
  size_t index(int layer, int head, int64_t pos) const {
    return ((static_cast<size_t>(layer) * n_kv_ + head) * stride_ + pos) * head_dim_;
  }
  size_t panel_index(int layer, int head, int64_t pos) const { return index(layer, head, pos - pos % panel_cols_); }
  const float* read(const uint8_t* base, int layer, int head, int64_t floats, std::vector<float>& buf) const;
  int n_layers_, n_kv_, head_dim_;
  int64_t panel_cols_;
  int64_t capacity_, stride_, length_ = 0, high_water_ = 0;  // stride_: capacity_ rounded up to whole panels
  KVType type_;
  size_t size_ = 0;  // values per buffer
  std::unique_ptr<uint8_t[]> k_, v_;
};

// The visual inputs of one forward call: rows of `embeds` replace the embeddings of the image-pad tokens
// in order of appearance; deepstack[j] rows are added after layer j at those same positions.
struct VisualInputs {
  const float* embeds = nullptr;                 // [n_visual, hidden]
  std::vector<const float*> deepstack;           // each [n_visual, hidden]
  int64_t n_visual = 0;
};

// kLastHidden: the last token's final hidden state after the model's norm ([hidden], not logits): what an
// embedding model pools and a reranker scores (no LM head is run for it).
enum class LogitsMode { kNone, kLast, kAll, kLastHidden };

// One sequence's part of a forward pass: n tokens (ids) at the 3-D positions pos[axis][i], placed after its
// cache's current length; logits for its last token ([vocab]) or for all of them ([n, vocab]), or the last
// token's normed hidden state ([hidden]).
struct TextSeq {
  KVCache* cache = nullptr;
  const int32_t* ids = nullptr;
  int64_t n = 0;
  const int32_t* pos[3] = {nullptr, nullptr, nullptr};
  const VisualInputs* visual = nullptr;
  LogitsMode mode = LogitsMode::kLast;
  float* logits = nullptr;
};

// Runs several sequences in one pass: their rows are stacked so that every weight matrix is read once for
// all of them (a decode round of many slots, or decode rows beside a prefill slice); attention reads each
// sequence's own cache. Each row's result is the same as when its sequence runs alone. The buffers are
// act's (model/activations.h; a local one when null), kept for the next pass.
void text_forward_batch(const Model& model, ThreadPool& pool, const std::vector<TextSeq>& seqs,
                        const DumpFn* dump = nullptr, TextActivations* act = nullptr);

// Runs n tokens (ids) at the given 3-D positions (pos[axis][i]) after the cache's current length, appends
// their keys/values to the cache, and writes logits for the last token ([vocab]) or for all ([n, vocab]).
void text_forward(const Model& model, ThreadPool& pool, KVCache& cache, const int32_t* ids, int64_t n,
                  const int32_t* const pos[3], const VisualInputs* visual, LogitsMode mode, float* logits,
                  const DumpFn* dump = nullptr);

}  // namespace qvl
