// Scaled dot-product attention of one head, tiled over query rows so that long image sequences never
// materialise the full score matrix: scores and probabilities exist for kQueryBlock rows at a time.
#pragma once

#include <cstdint>
#include <vector>

namespace qvl {

struct AttentionScratch {
  std::vector<float> scores;  // [kQueryBlock, n_kv rounded up to whole panels]
  std::vector<float> kt;      // [n_kv / cols][head_dim][cols]: K transposed in panels of the tile's columns
  std::vector<float> vc;      // [n_kv, head_dim]: V packed (its rows may be far apart, as in the fused qkv)
};

// out[i] = softmax(q[i] · k[0..limit(i))ᵀ * scale) · v[0..limit(i)) for i < nq, where limit(i) = n_kv
// (bidirectional) or causal_offset + i + 1 (causal when causal_offset >= 0). Rows of q, k, v and out are
// ldq, ldk, ldv, ldo floats apart; each row holds head_dim values. row_invariant: each row's result does not
// depend on how many rows come with it (q · kᵀ always by the few-queries tiles), so a token read in a
// prefill slice and the same token decoded alone give the same bits (the text decoder's prefix cache).
void attention_head(const float* q, int64_t ldq, int64_t nq, const float* k, int64_t ldk, const float* v, int64_t ldv,
                    int64_t n_kv, int64_t head_dim, float scale, int64_t causal_offset, float* out, int64_t ldo,
                    AttentionScratch& scratch, bool row_invariant = false);

}  // namespace qvl
