// Scaled dot-product attention of one head, tiled over query rows so that long image sequences never
// materialise the full score matrix: scores and probabilities exist for kQueryBlock rows at a time.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "util/thread_pool.h"

namespace qvl {

struct KernelTable;

struct AttentionScratch {
  std::vector<float> scores;  // [kQueryBlock, n_kv rounded up to whole panels]
  std::vector<float> kt;      // [n_kv / cols][head_dim][cols]: K transposed in panels of the tile's columns
  std::vector<float> vc;      // V packed: in column panels (many queries, a large v) or as [n_kv, head_dim] rows
};

// out[i] = softmax(q[i] · k[0..limit(i))ᵀ * scale) · v[0..limit(i)) for i < nq, where limit(i) = n_kv
// (bidirectional) or causal_offset + i + 1 (causal when causal_offset >= 0). Rows of q, k, v and out are
// ldq, ldk, ldv, ldo floats apart; each row holds head_dim values. row_invariant: each row's result does not
// depend on how many rows come with it (q · kᵀ always on kᵀ panels, whose tile sums each score in one FMA
// chain along head_dim whatever its row count, one row included), so a token read in a prefill slice and the
// same token decoded alone give the same bits (the text decoder's prefix cache). kt: k already transposed in
// panels of the table's nn_cols keys, kt[p][d][c] = k[p nn_cols + c][d] for p < ceil(n_kv / nn_cols) (keys past
// n_kv finite, their scores never read), as the KV cache holds them; k is not read then. Null: k is packed
// so here when the product runs on panels.
void attention_head(const float* q, int64_t ldq, int64_t nq, const float* k, int64_t ldk, const float* v, int64_t ldv,
                    int64_t n_kv, int64_t head_dim, float scale, int64_t causal_offset, float* out, int64_t ldo,
                    AttentionScratch& scratch, bool row_invariant = false, const float* kt = nullptr);

// attention_head's row-invariant attention with the keys and values in f16 as the KV cache holds them (kt: kᵀ
// panels of the table's nn_cols keys, v: rows ldv apart), each value widened inside the tile: the same bits as
// attention_head(.., row_invariant, kt) on them widened to float32, without the widened copies (a decode step
// reads each cached value once). Only where attention_f16_supported(head_dim): the table has
// gemm_f16_nn_panels and head_dim is whole panels.
bool attention_f16_supported(int64_t head_dim);
void attention_head_f16(const float* q, int64_t ldq, int64_t nq, const uint16_t* kt, const uint16_t* v, int64_t ldv,
                        int64_t n_kv, int64_t head_dim, float scale, int64_t causal_offset, float* out, int64_t ldo,
                        AttentionScratch& scratch);

// ---- Many queries against the same keys: the vision tower's bidirectional attention -------------------

// The arithmetic of the vision tower's attention (--vision-attention): kF32 exact to float32 rounding;
// kBF16 rounds q, k, the probabilities and v to bfloat16 and multiplies them with vdpbf16ps (float32 sums),
// where the kernel table has the tile (AVX512_BF16), else it runs as kF32.
enum class AttentionPrecision { kF32, kBF16 };
const char* attention_precision_name(AttentionPrecision p);
// "f32" or "bf16"; false for anything else.
bool parse_attention_precision(const std::string& text, AttentionPrecision* out);
// What a request for p runs as with the kernel table in use (kBF16 without the tile: kF32); table: null for
// kernels().
AttentionPrecision effective_attention_precision(AttentionPrecision p, const KernelTable* table = nullptr);

// One pool thread's blocks: a query block's scores (then probabilities) and its running output.
struct FlashThreadScratch {
  std::vector<float> s;       // [q_block, kv_block]: q · kᵀ, then exp(scores - running max)
  std::vector<float> o;       // [q_block, head_dim]: the running output (not yet divided by the sum)
  std::vector<float> pv;      // [q_block, head_dim]: one key block's P · v
  std::vector<float> m, l;    // [q_block]: running max (scaled) and running sum of exponentials
  std::vector<float> qf;      // f32: [q_block, head_dim] the query rows, packed
  std::vector<uint16_t> qb;   // bf16: [q_block, head_dim] the query rows
  std::vector<uint16_t> pb;   // bf16: [q_block, kv_block] the probabilities
  std::vector<uint16_t> row;  // bf16: [head_dim] one key or value row converted (packing)
};

// Every head's keys and values packed as the tiles read them, and the threads' blocks.
struct FlashScratch {
  std::vector<float> kt;      // f32: [heads][panels][head_dim][cols] kᵀ in panels of the table's nn_cols keys
  std::vector<float> v;       // f32: [heads] v in panels of nn_cols columns (the last may be narrower): [n][width]
  std::vector<uint16_t> kt2;  // bf16: [heads][panels][head_dim / 2][cols][2] kᵀ in pairs along head_dim
  std::vector<uint16_t> v2;   // bf16: [heads][ceil(n / 2)][head_dim][2] v in pairs of consecutive keys
  std::vector<FlashThreadScratch> threads;  // [pool threads]
  size_t bytes() const;
};

// out[i] (head h's head_dim values at out + i * ldo + h * head_dim) = softmax(q_h[i] · k_hᵀ * scale) · v_h for
// i < n, every head h < heads, where head h's row i of q, k and v is at q / k / v + i * ld + h * head_dim:
// blocked online-softmax ("flash") attention that never holds more than a q_block x kv_block block of
// scores, in tasks of one head's q_block query rows handed to the pool's threads as they come free.
// q_block / kv_block: 0 takes tile_choice()'s; a q_block must be a multiple of 6, a kv_block of 64. A row's
// result depends only on its own query and the blocking, not on the thread count; with nn_rows <= n <=
// kv_block (one block) it is attention_head's bit for bit. table: the kernels to use (tests; null: kernels()).
void attention_multihead(ThreadPool& pool, const float* q, const float* k, const float* v, int64_t ld, int64_t n,
                         int heads, int64_t head_dim, float scale, float* out, int64_t ldo, AttentionPrecision precision,
                         FlashScratch& scratch, int q_block = 0, int kv_block = 0, const KernelTable* table = nullptr);

}  // namespace qvl
