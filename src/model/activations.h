// Every buffer of a forward pass, one struct per pass (as llama2.c's RunState and gemma.cpp's
// Activations): the text decoder's for a batch of n stacked rows, the vision tower's for N patches. Each is
// owned by who runs the passes (a Session for its own, the Scheduler for its batched rounds and for each
// encoding in flight) and sized by reserve(): grown, never shrunk, so a pass of no more rows than the last
// allocates nothing. bytes() is the activation memory; qvl bench reports its peak.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/attention.h"
#include "model/config.h"

namespace qvl {

// One pool thread's attention scratch: the query tile's scores and the packed K and V (kernels/attention.h),
// and a KV head's keys and values widened from the f16 cache.
struct AttentionThreadScratch {
  AttentionScratch attention;
  std::vector<float> keys;    // [panels][head_dim][panel_cols]: kᵀ panels, KVCache::key_floats(n_kv) floats
  std::vector<float> values;  // [n_kv, head_dim]
};

// The text decoder over n rows (every sequence's rows stacked), `rows` of which want logits.
struct TextActivations {
  std::vector<float> h;       // [n, H]: the hidden states
  std::vector<float> cos;     // [n, head_dim]: M-RoPE tables
  std::vector<float> sin;     // [n, head_dim]
  std::vector<float> x;       // [n, H]: a norm's output (input_layernorm, post_attention_layernorm, norm)
  std::vector<float> q;       // [n, heads * head_dim]
  std::vector<float> k;       // [n, kv_heads * head_dim]
  std::vector<float> v;       // [n, kv_heads * head_dim]
  std::vector<float> attn;    // [n, heads * head_dim]: attention's output
  std::vector<float> tmp;     // [n, H]: o_proj's and down_proj's output, before the residual add
  std::vector<float> gate;    // [n, I]: gate_proj, then silu(gate) * up
  std::vector<float> up;      // [n, I]
  std::vector<float> picked;  // [rows, H]: the rows that want logits, gathered for the LM head
  std::vector<float> logits;  // [rows, V]: several sequences' logits before they are handed out
  std::vector<AttentionThreadScratch> threads;  // [pool threads]
  std::vector<std::array<int64_t, 4>> attention_items;  // [work items]: (sequence, kv head, first row, end row)
  // An f16 cache's keys and values widened once per (sequence, kv head) pair, when there are fewer pairs
  // than threads (text.cpp): pair p's positions [0, its length) at shared_offsets[p], its keys in the cache's
  // kᵀ panels (KVCache::key_floats of its length), its values as rows.
  std::vector<float> shared_keys;             // per pair: [panels][head_dim][panel_cols]
  std::vector<float> shared_values;           // per pair: [length, head_dim]
  std::vector<int64_t> shared_offsets;        // [pairs + 1]
  std::vector<char> direct_f16;               // [sequences]: its attention reads the f16 cache as it is
  std::vector<std::array<int64_t, 3>> widen_blocks;  // [blocks]: (pair, first position, end position)

  // Sizes every buffer for n rows, `rows` of them wanting logits (logits: only when several sequences
  // share the pass) and `threads` pool threads.
  void reserve(const TextConfig& c, int64_t n, int64_t rows, bool gathered_logits, int threads);
  // Sizes shared_keys and shared_values for `floats` floats each.
  void reserve_shared(int64_t floats);
  size_t bytes() const;
};

// The vision tower over N patches (all images of one pass); `mlp_rows` patches go through the MLP at a time.
struct VisionActivations {
  std::vector<float> pixels;  // [N, patch_dim]: the patches, freed once embedded (before reserve())
  std::vector<float> h;       // [N, D]: the hidden states between blocks
  std::vector<float> cos;     // [N, head_dim]: 2-D rotary tables
  std::vector<float> sin;     // [N, head_dim]
  std::vector<float> normed;  // [N, D]: norm1 / norm2 / a merger's norm
  std::vector<float> qkv;     // [N, 3 D]
  std::vector<float> attn;    // [N, D]: attention's output
  std::vector<float> tmp;     // [N, D]: proj's and fc2's output; a merger's hidden [N / m², m² D]
  std::vector<float> mlp;     // [min(N, mlp_rows), I]: fc1's output
  FlashScratch flash;         // attention: every head's packed keys and values (heads x N x head_dim each), the threads' blocks
  size_t peak = 0;            // the most bytes() has been

  // Sizes every buffer but pixels for N patches (the patch embedding sizes pixels, h, cos and sin itself,
  // and frees pixels before the blocks' buffers are sized).
  void reserve(const VisionConfig& c, int64_t N, int64_t mlp_rows);
  // Gives the blocks' scratch back (normed, qkv, attn, tmp, mlp, flash), keeping the hidden states and
  // rotary tables: a scheduler does so between slices of a pass, so that the decode rounds it runs in
  // between do not hold it; the next step() sizes it again.
  void release_blocks();
  // Gives every buffer back (a tower pass is over; its peak is kept).
  void release();
  size_t bytes() const;
};

}  // namespace qvl
