// The AVX512_BF16 panel tile (vdpbf16ps): bf16 attention's q · kᵀ and P · v at twice the float32 tile's
// multiplies per instruction. Its own file, compiled with -mavx512bf16, so that nothing else in the AVX-512
// table can pick the instructions up; dispatch.cpp adds it to that table where CPUID has AVX512_BF16.
#include <immintrin.h>

#include <cstring>

#include "kernels/x86_avx512vnni.h"

namespace qvl {
namespace avx512bf16 {
namespace {

#include "kernels/x86_avx512_exp.h"

// A pair of bf16 values as one int32 (the even one in the low half).
inline int pair_at(const uint16_t* p) {
  int v;
  std::memcpy(&v, p, 4);
  return v;
}

// MR rows of pairs of A times up to 64 columns of B's pairs (NV vectors of 16 per row, MR x NV accumulators
// as in the float tile): one broadcast of a's pair per row and NV loads of b per pair step, each broadcast
// feeding NV vdpbf16ps (two multiplies per lane each). A panel narrower than NV vectors goes through masks.
template <int MR, int NV>
void bf16_tile(const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, int64_t kp, float* c, int64_t ldc,
               const __mmask16 (&m)[4]) {
  __m512 acc[MR][NV];
#pragma GCC unroll 6
  for (int i = 0; i < MR; ++i)
    for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_setzero_ps();
  for (int64_t t = 0; t < kp; ++t) {
    __m512bh bv[NV];
    for (int v = 0; v < NV; ++v) bv[v] = (__m512bh)_mm512_maskz_loadu_epi32(m[v], b + t * ldb + 32 * v);
#pragma GCC unroll 6
    for (int i = 0; i < MR; ++i) {
      const __m512bh av = (__m512bh)_mm512_set1_epi32(pair_at(a + i * lda + 2 * t));
      for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_dpbf16_ps(acc[i][v], av, bv[v]);
    }
  }
#pragma GCC unroll 6
  for (int i = 0; i < MR; ++i)
    for (int v = 0; v < NV; ++v) _mm512_mask_storeu_ps(c + i * ldc + 16 * v, m[v], acc[i][v]);
}

}  // namespace

void gemm_bf16_nn_tile(const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, int64_t kp, float* c,
                       int64_t ldc, int mr, int nc) {
  using Fn = void (*)(const uint16_t*, int64_t, const uint16_t*, int64_t, int64_t, float*, int64_t, const __mmask16 (&)[4]);
#define QVL_BF16_ROW(R) {bf16_tile<R, 1>, bf16_tile<R, 2>, bf16_tile<R, 3>, bf16_tile<R, 4>}
  static constexpr Fn kTiles[6][4] = {QVL_BF16_ROW(1), QVL_BF16_ROW(2), QVL_BF16_ROW(3),
                                      QVL_BF16_ROW(4), QVL_BF16_ROW(5), QVL_BF16_ROW(6)};
#undef QVL_BF16_ROW
  __mmask16 m[4];
  for (int v = 0; v < 4; ++v) {
    const int n = nc - 16 * v;  // columns left for vector v: none, some (masked) or all 16
    m[v] = n <= 0 ? 0 : n >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << n) - 1);
  }
  kTiles[mr - 1][(nc + 15) / 16 - 1](a, lda, b, ldb, kp, c, ldc, m);
}

// exp_scaled_from_bf16 (kernels.h): exp_scaled_from_16 with each 16 exponentials converted by vcvtneps2bf16
// as they are made.
float exp_scaled_from_bf16(const float* x, int64_t n, float scale, float* running_max, uint16_t* out) {
  return exp_scaled_from_16(x, n, scale, running_max, [out](int64_t i, __m512 e, __mmask16 m) {
    _mm256_mask_storeu_epi16(out + i, m, (__m256i)_mm512_cvtneps_pbh(e));
  });
}

}  // namespace avx512bf16
}  // namespace qvl
