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
  s.scores.resize(static_cast<size_t>(std::min(nq, kQueryBlock) * n_kv));
  s.vt.resize(static_cast<size_t>(head_dim * n_kv));
  for (int64_t j = 0; j < n_kv; ++j)
    for (int64_t d = 0; d < head_dim; ++d) s.vt[static_cast<size_t>(d * n_kv + j)] = v[j * ldv + d];
  for (int64_t q0 = 0; q0 < nq; q0 += kQueryBlock) {
    const int64_t rows = std::min(kQueryBlock, nq - q0);
    // Keys any row of this block may see.
    const int64_t kv_end = causal_offset >= 0 ? std::min(n_kv, causal_offset + q0 + rows) : n_kv;
    float* sc = s.scores.data();
    // scores = q · kᵀ
    for (int64_t i = 0; i < rows; i += 4) {
      const int mr = static_cast<int>(std::min<int64_t>(4, rows - i));
      for (int64_t j = 0; j < kv_end; j += 3) {
        const int nr = static_cast<int>(std::min<int64_t>(3, kv_end - j));
        K.gemm_f32_tile(q + (q0 + i) * ldq, ldq, k + j * ldk, ldk, head_dim, sc + i * n_kv + j, n_kv, mr, nr);
      }
    }
    // softmax(scores * scale) over each row's visible keys; the rest get probability 0.
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t limit = causal_offset >= 0 ? std::min(n_kv, causal_offset + q0 + i + 1) : n_kv;
      float* row = sc + i * n_kv;
      for (int64_t j = 0; j < limit; ++j) row[j] *= scale;
      softmax(row, limit);
      std::fill(row + limit, row + kv_end, 0.0f);
    }
    // out = P · v, as dot products of P's rows with vᵀ's rows
    for (int64_t i = 0; i < rows; i += 4) {
      const int mr = static_cast<int>(std::min<int64_t>(4, rows - i));
      for (int64_t d = 0; d < head_dim; d += 3) {
        const int nr = static_cast<int>(std::min<int64_t>(3, head_dim - d));
        K.gemm_f32_tile(sc + i * n_kv, n_kv, s.vt.data() + d * n_kv, n_kv, kv_end, out + (q0 + i) * ldo + d, ldo, mr,
                        nr);
      }
    }
  }
}

}  // namespace qvl
