// Scaled dot-product attention of one head, tiled over query rows so that long image sequences never
// materialise the full score matrix: scores and probabilities exist for kQueryBlock rows at a time.
#include "kernels/attention.h"

#include <algorithm>
#include <cmath>

#include "kernels/kernels.h"
#include "kernels/ops.h"

namespace qvl {

namespace {
// 72 query rows (a multiple of every table's tile rows) x n_kv scores: 72 x 3136 floats = 882 KiB for a
// 1024x768 image's 3072+ patches.
constexpr int64_t kQueryBlock = 72;
}  // namespace

void attention_head(const float* q, int64_t ldq, int64_t nq, const float* k, int64_t ldk, const float* v, int64_t ldv,
                    int64_t n_kv, int64_t head_dim, float scale, int64_t causal_offset, float* out, int64_t ldo,
                    AttentionScratch& s, bool row_invariant) {
  const KernelTable& K = kernels();
  // Both products run on row-times-panel tiles (tile_rows query rows x tile_cols columns of B, the kernel table's
  // sizes): q · kᵀ with kᵀ packed panel by panel (tile_cols keys per panel row), P · v with v as it is.
  const int tile_rows = K.nn_rows, tile_cols = K.nn_cols;
  // Few queries (decode steps): q · kᵀ as dot products with k's rows, no transposition (which would cost
  // more than the product). Many: kᵀ packed in panels of tile_cols keys.
  const bool pack_k = nq >= tile_rows && !row_invariant;
  const int64_t panels = (n_kv + tile_cols - 1) / tile_cols;
  // Score rows padded to whole panels, so every tile is full; the padding is never read.
  const int64_t lds = panels * tile_cols;
  s.scores.resize(static_cast<size_t>(std::min(nq, kQueryBlock) * lds));
  if (pack_k) {
    // kt[p][t][c] = k[tile_cols p + c][t]; only the last panel has columns past n_kv, zeroed.
    s.kt.resize(static_cast<size_t>(panels * head_dim * tile_cols));
    std::fill(s.kt.end() - head_dim * tile_cols, s.kt.end(), 0.0f);
    for (int64_t j = 0; j < n_kv; ++j) {
      float* dst = &s.kt[static_cast<size_t>((j / tile_cols) * head_dim * tile_cols + j % tile_cols)];
      for (int64_t d = 0; d < head_dim; ++d) dst[d * tile_cols] = k[j * ldk + d];
    }
  }
  // v's rows are read in sequence by the panel tiles: pack them when they are far apart.
  const float* vp = v;
  int64_t ldvp = ldv;
  if (ldv != head_dim) {
    s.vc.resize(static_cast<size_t>(n_kv * head_dim));
    for (int64_t j = 0; j < n_kv; ++j)
      std::copy(v + j * ldv, v + j * ldv + head_dim, &s.vc[static_cast<size_t>(j * head_dim)]);
    vp = s.vc.data();
    ldvp = head_dim;
  }
  for (int64_t q0 = 0; q0 < nq; q0 += kQueryBlock) {
    const int64_t rows = std::min(kQueryBlock, nq - q0);
    // Keys any row of this block may see.
    const int64_t kv_end = causal_offset >= 0 ? std::min(n_kv, causal_offset + q0 + rows) : n_kv;
    float* sc = s.scores.data();
    // scores = q · kᵀ
    if (pack_k) {
      for (int64_t i = 0; i < rows; i += tile_rows) {
        const int mr = static_cast<int>(std::min<int64_t>(tile_rows, rows - i));
        for (int64_t j = 0; j < kv_end; j += tile_cols)
          K.gemm_f32_nn_tile(q + (q0 + i) * ldq, ldq, &s.kt[static_cast<size_t>((j / tile_cols) * head_dim * tile_cols)], tile_cols,
                             head_dim, sc + i * lds + j, lds, mr, tile_cols);
      }
    } else {
      for (int64_t i = 0; i < rows; i += 4) {
        const int mr = static_cast<int>(std::min<int64_t>(4, rows - i));
        for (int64_t j = 0; j < kv_end; j += 3) {
          const int nr = static_cast<int>(std::min<int64_t>(3, kv_end - j));
          K.gemm_f32_tile(q + (q0 + i) * ldq, ldq, k + j * ldk, ldk, head_dim, sc + i * lds + j, lds, mr, nr);
        }
      }
    }
    // softmax(scores * scale) over each row's visible keys, the rest 0: exp here, the division by the
    // row's sum applied to its output row after P · v (one multiply per output value, not per score).
    float inv_sum[kQueryBlock];
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t limit = causal_offset >= 0 ? std::min(n_kv, causal_offset + q0 + i + 1) : n_kv;
      float* row = sc + i * lds;
      inv_sum[i] = 1.0f / K.exp_scaled(row, limit, scale);
      std::fill(row + limit, row + kv_end, 0.0f);
    }
    // out = P · v
    for (int64_t i = 0; i < rows; i += tile_rows) {
      const int mr = static_cast<int>(std::min<int64_t>(tile_rows, rows - i));
      for (int64_t d = 0; d < head_dim; d += tile_cols) {
        const int nc = static_cast<int>(std::min<int64_t>(tile_cols, head_dim - d));
        K.gemm_f32_nn_tile(sc + i * lds, lds, vp + d, ldvp, kv_end, out + (q0 + i) * ldo + d, ldo, mr, nc);
      }
    }
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t d = 0; d < head_dim; ++d) out[(q0 + i) * ldo + d] *= inv_sum[i];
  }
}

}  // namespace qvl
