// Scaled dot-product attention of one head, tiled over query rows so that long image sequences never
// materialise the full score matrix: scores and probabilities exist for kQueryBlock rows at a time.
#include "kernels/attention.h"

#include <algorithm>
#include <cmath>

#include "kernels/kernels.h"
#include "kernels/ops.h"

namespace qvl {

namespace {
// 64 query rows x n_kv scores: 64 x 3136 floats = 784 KiB for a 1024x768 image's 3072+ patches.
constexpr int64_t kQueryBlock = 64;
}  // namespace

void attention_head(const float* q, int64_t ldq, int64_t nq, const float* k, int64_t ldk, const float* v, int64_t ldv,
                    int64_t n_kv, int64_t head_dim, float scale, int64_t causal_offset, float* out, int64_t ldo,
                    AttentionScratch& s) {
  const KernelTable& K = kernels();
  // Both products run on row-times-panel tiles (kRows query rows x kCols columns of B). B is packed panel
  // by panel, each panel's rows contiguous (kCols floats = one cache line): read in place, a panel's rows
  // would sit 256-3136 bytes apart and fall into a few L1 sets, missing L1 on almost every load.
  constexpr int kRows = 6, kCols = 16;
  // Few queries (decode steps): q · kᵀ as dot products with k's rows, no transposition (which would cost
  // more than the product). Many: kᵀ packed in panels of 16 keys.
  const bool pack_k = nq >= kRows;
  const int64_t panels = (n_kv + kCols - 1) / kCols;
  // Score rows padded to whole panels, so every tile is full; the padding is never read.
  const int64_t lds = panels * kCols;
  s.scores.resize(static_cast<size_t>(std::min(nq, kQueryBlock) * lds));
  if (pack_k) {
    // kt[p][t][c] = k[16 p + c][t], zero past n_kv.
    s.kt.assign(static_cast<size_t>(panels * head_dim * kCols), 0.0f);
    for (int64_t j = 0; j < n_kv; ++j) {
      float* dst = &s.kt[static_cast<size_t>((j / kCols) * head_dim * kCols + j % kCols)];
      for (int64_t d = 0; d < head_dim; ++d) dst[d * kCols] = k[j * ldk + d];
    }
  }
  // v[t][16 p + c] -> vp[p][t][c] (head_dim is a multiple of 16 in these models; a partial panel is
  // zero-filled and its columns not written back).
  const int64_t vpanels = (head_dim + kCols - 1) / kCols;
  s.vc.assign(static_cast<size_t>(vpanels * n_kv * kCols), 0.0f);
  for (int64_t t = 0; t < n_kv; ++t)
    for (int64_t d = 0; d < head_dim; ++d) s.vc[static_cast<size_t>(((d / kCols) * n_kv + t) * kCols + d % kCols)] = v[t * ldv + d];
  float tail[kRows * kCols];
  for (int64_t q0 = 0; q0 < nq; q0 += kQueryBlock) {
    const int64_t rows = std::min(kQueryBlock, nq - q0);
    // Keys any row of this block may see.
    const int64_t kv_end = causal_offset >= 0 ? std::min(n_kv, causal_offset + q0 + rows) : n_kv;
    float* sc = s.scores.data();
    // scores = q · kᵀ
    if (pack_k) {
      for (int64_t i = 0; i < rows; i += kRows) {
        const int mr = static_cast<int>(std::min<int64_t>(kRows, rows - i));
        for (int64_t j = 0; j < kv_end; j += kCols)
          K.gemm_f32_nn_tile(q + (q0 + i) * ldq, ldq, &s.kt[static_cast<size_t>((j / kCols) * head_dim * kCols)], kCols,
                             head_dim, sc + i * lds + j, lds, mr, kCols);
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
    // softmax(scores * scale) over each row's visible keys; the rest get probability 0.
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t limit = causal_offset >= 0 ? std::min(n_kv, causal_offset + q0 + i + 1) : n_kv;
      float* row = sc + i * lds;
      K.softmax_scaled(row, limit, scale);
      std::fill(row + limit, row + kv_end, 0.0f);
    }
    // out = P · v
    for (int64_t i = 0; i < rows; i += kRows) {
      const int mr = static_cast<int>(std::min<int64_t>(kRows, rows - i));
      for (int64_t d = 0; d < head_dim; d += kCols) {
        const float* panel = &s.vc[static_cast<size_t>((d / kCols) * n_kv * kCols)];
        if (d + kCols <= head_dim) {
          K.gemm_f32_nn_tile(sc + i * lds, lds, panel, kCols, kv_end, out + (q0 + i) * ldo + d, ldo, mr, kCols);
        } else {
          K.gemm_f32_nn_tile(sc + i * lds, lds, panel, kCols, kv_end, tail, kCols, mr, kCols);
          for (int r = 0; r < mr; ++r)
            std::copy(tail + r * kCols, tail + r * kCols + (head_dim - d), out + (q0 + i + r) * ldo + d);
        }
      }
    }
  }
}

}  // namespace qvl
