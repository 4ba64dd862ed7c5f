// The AVX2 + FMA + F16C kernels (compiled with only those flags; see CMakeLists.txt). Each computes what its
// twin in generic.cpp computes, up to float summation order.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/bf16.h"
#include "kernels/kernels.h"

namespace qvl {
namespace avx2 {
namespace {

// Local scalar conversions: the shared inline helpers of dtype.h must not be compiled with AVX2 flags here,
// or the linker could pick this file's copy for generic code (an ODR trap).
inline float h2f(uint16_t h) { return _cvtsh_ss(h); }
inline uint16_t f2h(float f) { return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT)); }
inline float bf2f(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

#include "kernels/x86_tile_helpers.h"

inline __m256i load_q4_0_as_i8(const BlockQ4_0& b) {
  // Low nibbles are values 0..15, high nibbles 16..31; subtract 8 to centre them.
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs));
  const __m256i both = _mm256_insertf128_si256(_mm256_castsi128_si256(raw), _mm_srli_epi16(raw, 4), 1);
  return _mm256_sub_epi8(_mm256_and_si256(both, _mm256_set1_epi8(0x0F)), _mm256_set1_epi8(8));
}

void row_to_f32(WeightType type, const void* row, float* out, int64_t cols) {
  switch (type) {
    case WeightType::kF32:
      std::memcpy(out, row, static_cast<size_t>(cols) * sizeof(float));
      return;
    case WeightType::kBF16: {
      const uint16_t* p = static_cast<const uint16_t*>(row);
      int64_t i = 0;
      for (; i + 8 <= cols; i += 8) {
        const __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i)));
        _mm256_storeu_ps(out + i, _mm256_castsi256_ps(_mm256_slli_epi32(h, 16)));
      }
      for (; i < cols; ++i) out[i] = bf2f(p[i]);
      return;
    }
    case WeightType::kF16: {
      const uint16_t* p = static_cast<const uint16_t*>(row);
      int64_t i = 0;
      for (; i + 8 <= cols; i += 8)
        _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i))));
      for (; i < cols; ++i) out[i] = h2f(p[i]);
      return;
    }
    case WeightType::kQ8_0: {
      const BlockQ8_0* b = static_cast<const BlockQ8_0*>(row);
      for (int64_t k = 0; k < cols / kQK; ++k) {
        const __m256 d = _mm256_set1_ps(h2f(b[k].d));
        for (int j = 0; j < kQK; j += 8) {
          const __m256i q = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b[k].qs + j)));
          _mm256_storeu_ps(out + k * kQK + j, _mm256_mul_ps(d, _mm256_cvtepi32_ps(q)));
        }
      }
      return;
    }
    case WeightType::kQ4_0: {
      const BlockQ4_0* b = static_cast<const BlockQ4_0*>(row);
      alignas(32) int8_t q[kQK];
      for (int64_t k = 0; k < cols / kQK; ++k) {
        _mm256_store_si256(reinterpret_cast<__m256i*>(q), load_q4_0_as_i8(b[k]));
        const __m256 d = _mm256_set1_ps(h2f(b[k].d));
        for (int j = 0; j < kQK; j += 8) {
          const __m256i v = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + j)));
          _mm256_storeu_ps(out + k * kQK + j, _mm256_mul_ps(d, _mm256_cvtepi32_ps(v)));
        }
      }
      return;
    }
    // K-quants: read by rows only for the token embedding, as the generic table reads them.
    case WeightType::kQ4_K:
    case WeightType::kQ5_K:
    case WeightType::kQ6_K:
      return generic_kernels().row_to_f32(type, row, out, cols);
  }
}

// Weight rows stored as float32, or as bf16 or f16 widened in registers (exactly, as row_to_f32 widens them).
struct Bf16 {
  uint16_t v;
};
struct F16 {
  uint16_t v;
};
inline __m256 load_w(const float* w) { return _mm256_loadu_ps(w); }
inline __m256 load_w(const Bf16* w) {
  const __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(h, 16));
}
inline __m256 load_w(const F16* w) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w))); }
inline float w_at(const float* w, int64_t u) { return w[u]; }
inline float w_at(const Bf16* w, int64_t u) { return bf2f(w[u].v); }
inline float w_at(const F16* w, int64_t u) { return h2f(w[u].v); }

// MR x NR dot products, 8 lanes each: kMR = 4 x-rows by kNR = 3 w-rows is 12 accumulators, leaving 4
// registers for the 4 x loads (float32 w loads are folded into the FMAs' memory operands; a 16-bit row's
// widened vector takes a register of its own). The same arithmetic for every weight type, so bf16 and f16
// rows give the bits their float32 widening gives.
template <int MR, int NR, class W>
void tile(const float* x, int64_t ldx, const W* w, int64_t ldw, int64_t k, float* y, int64_t ldy) {
  __m256 acc[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) acc[i][j] = _mm256_setzero_ps();
  int64_t t = 0;
  for (; t + 8 <= k; t += 8) {
    __m256 xv[MR];
    for (int i = 0; i < MR; ++i) xv[i] = _mm256_loadu_ps(x + i * ldx + t);
    for (int j = 0; j < NR; ++j) {
      const __m256 wv = load_w(w + j * ldw + t);
      for (int i = 0; i < MR; ++i) acc[i][j] = _mm256_fmadd_ps(xv[i], wv, acc[i][j]);
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) {
      float s = hsum(acc[i][j]);
      // The tail in explicit FMAs: left to the compiler, a product may be contracted in one tile shape and
      // not another, and a row's sum would depend on how many rows shared its tile.
      for (int64_t u = t; u < k; ++u) s = __builtin_fmaf(x[i * ldx + u], w_at(w + j * ldw, u), s);
      y[i * ldy + j] = s;
    }
}

template <class W>
void gemm_tile(const float* x, int64_t ldx, const W* w, int64_t ldw, int64_t k, float* y, int64_t ldy, int mr, int nr) {
  using Fn = void (*)(const float*, int64_t, const W*, int64_t, int64_t, float*, int64_t);
  static constexpr Fn kTiles[4][3] = {
      {tile<1, 1, W>, tile<1, 2, W>, tile<1, 3, W>},
      {tile<2, 1, W>, tile<2, 2, W>, tile<2, 3, W>},
      {tile<3, 1, W>, tile<3, 2, W>, tile<3, 3, W>},
      {tile<4, 1, W>, tile<4, 2, W>, tile<4, 3, W>},
  };
  // One or two rows (decode): up to 6 weight rows, whose 6 or 12 accumulation chains hide the FMA latency.
  static constexpr Fn kWide[2][3] = {{tile<1, 4, W>, tile<1, 5, W>, tile<1, 6, W>}, {tile<2, 4, W>, tile<2, 5, W>, tile<2, 6, W>}};
  if (nr > 3) return kWide[mr - 1][nr - 4](x, ldx, w, ldw, k, y, ldy);
  kTiles[mr - 1][nr - 1](x, ldx, w, ldw, k, y, ldy);
}

void gemm_f32_tile(const float* x, int64_t ldx, const float* w, int64_t ldw, int64_t k, float* y, int64_t ldy,
                   int mr, int nr) {
  gemm_tile(x, ldx, w, ldw, k, y, ldy, mr, nr);
}

void gemm_w16_tile(WeightType type, const float* x, int64_t ldx, const uint16_t* w, int64_t ldw, int64_t k, float* y,
                   int64_t ldy, int mr, int nr) {
  QVL_CHECK((type == WeightType::kBF16 || type == WeightType::kF16) && (nr <= 3 || mr <= 2));
  if (type == WeightType::kBF16) return gemm_tile(x, ldx, reinterpret_cast<const Bf16*>(w), ldw, k, y, ldy, mr, nr);
  gemm_tile(x, ldx, reinterpret_cast<const F16*>(w), ldw, k, y, ldy, mr, nr);
}

// MR rows of A times a 16-column panel of B: 2 vectors per row, 2 * MR accumulators (12 for MR = 6), one
// broadcast of a[i][t] per row and 2 loads of b per step. kMasked: a partial panel of nc < 16 columns (an 8B
// vision head's last 8 of 72), b's and c's columns past nc neither read nor written (masked loads and stores),
// the same FMA per lane and step. (It was a scalar loop, one serial chain of k FMAs per output; a loop left to
// the compiler also multiplied and added short sums apart and fused long ones, so a causal row read alone and in
// a prefill slice differed.)
template <int MR, bool kMasked>
void nn_tile(const float* a, int64_t lda, const float* b, int64_t ldb, int64_t k, float* c, int64_t ldc, int nc) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i m0 = _mm256_cmpgt_epi32(_mm256_set1_epi32(nc), lane);
  const __m256i m1 = _mm256_cmpgt_epi32(_mm256_set1_epi32(nc - 8), lane);
  __m256 acc0[MR], acc1[MR];
#pragma GCC unroll 6
  for (int i = 0; i < MR; ++i) {
    acc0[i] = _mm256_setzero_ps();
    acc1[i] = _mm256_setzero_ps();
  }
  for (int64_t t = 0; t < k; ++t) {
    const float* bt = b + t * ldb;
    const __m256 b0 = kMasked ? _mm256_maskload_ps(bt, m0) : _mm256_loadu_ps(bt);
    const __m256 b1 = kMasked ? _mm256_maskload_ps(bt + 8, m1) : _mm256_loadu_ps(bt + 8);
    // Fully unrolled, so the accumulators live in registers (GCC kept them on the stack otherwise,
    // a store and reload in every FMA's dependency chain: vision attention 43 -> 79 GFLOP/s, bench_kernels).
#pragma GCC unroll 6
    for (int i = 0; i < MR; ++i) {
      const __m256 av = _mm256_broadcast_ss(a + i * lda + t);
      acc0[i] = _mm256_fmadd_ps(av, b0, acc0[i]);
      acc1[i] = _mm256_fmadd_ps(av, b1, acc1[i]);
    }
  }
#pragma GCC unroll 6
  for (int i = 0; i < MR; ++i) {
    if (kMasked) {
      _mm256_maskstore_ps(c + i * ldc, m0, acc0[i]);
      _mm256_maskstore_ps(c + i * ldc + 8, m1, acc1[i]);
    } else {
      _mm256_storeu_ps(c + i * ldc, acc0[i]);
      _mm256_storeu_ps(c + i * ldc + 8, acc1[i]);
    }
  }
}

void gemm_f32_nn_tile(const float* a, int64_t lda, const float* b, int64_t ldb, int64_t k, float* c, int64_t ldc,
                      int mr, int nc) {
  using Fn = void (*)(const float*, int64_t, const float*, int64_t, int64_t, float*, int64_t, int);
  static constexpr Fn kTiles[2][6] = {
      {nn_tile<1, false>, nn_tile<2, false>, nn_tile<3, false>, nn_tile<4, false>, nn_tile<5, false>, nn_tile<6, false>},
      {nn_tile<1, true>, nn_tile<2, true>, nn_tile<3, true>, nn_tile<4, true>, nn_tile<5, true>, nn_tile<6, true>}};
  kTiles[nc != 16][mr - 1](a, lda, b, ldb, k, c, ldc, nc);
}

// G full panels at once for a tile of MR rows: 2 G MR accumulators, each the same FMA chain as nn_tile's. A tile
// of few rows (a decode step's one) alone has too few chains in flight to hide the FMA latency (2 for one row:
// 5 cycles each on a Zen 2), so its panels run in groups: the text decoder's q · kᵀ and P · v. B in float32, or in
// f16 (the KV cache's), each 8 values widened in a register (vcvtph2ps, exact) before their FMAs.
inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }

template <int MR, int G, class T>
void nn_panel_group(const float* a, int64_t lda, const T* b, int64_t ldb, int64_t panel_stride, int64_t k, float* c,
                    int64_t ldc) {
  __m256 acc[G][MR][2];
#pragma GCC unroll 4
  for (int g = 0; g < G; ++g)
#pragma GCC unroll 6
    for (int i = 0; i < MR; ++i) acc[g][i][0] = acc[g][i][1] = _mm256_setzero_ps();
  for (int64_t t = 0; t < k; ++t) {
    __m256 bv[G][2];
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) {
      const T* bt = b + g * panel_stride + t * ldb;
      bv[g][0] = load8(bt);
      bv[g][1] = load8(bt + 8);
    }
#pragma GCC unroll 6
    for (int i = 0; i < MR; ++i) {
      const __m256 av = _mm256_broadcast_ss(a + i * lda + t);
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) {
        acc[g][i][0] = _mm256_fmadd_ps(av, bv[g][0], acc[g][i][0]);
        acc[g][i][1] = _mm256_fmadd_ps(av, bv[g][1], acc[g][i][1]);
      }
    }
  }
#pragma GCC unroll 4
  for (int g = 0; g < G; ++g)
#pragma GCC unroll 6
    for (int i = 0; i < MR; ++i) {
      _mm256_storeu_ps(c + i * ldc + 16 * g, acc[g][i][0]);
      _mm256_storeu_ps(c + i * ldc + 16 * g + 8, acc[g][i][1]);
    }
}

// `panels` panels for MR rows: groups of G (8 accumulators for 1 or 2 rows), then one at a time.
template <int MR, class T>
void nn_panels(const float* a, int64_t lda, const T* b, int64_t ldb, int64_t panel_stride, int64_t k, float* c,
               int64_t ldc, int64_t panels) {
  constexpr int G = MR == 1 ? 4 : MR == 2 ? 2 : 1;
  int64_t p = 0;
  if constexpr (G > 1)
    for (; p + G <= panels; p += G)
      nn_panel_group<MR, G>(a, lda, b + p * panel_stride, ldb, panel_stride, k, c + p * 16, ldc);
  for (; p < panels; ++p) nn_panel_group<MR, 1>(a, lda, b + p * panel_stride, ldb, panel_stride, k, c + p * 16, ldc);
}

void gemm_f16_nn_panels(const float* a, int64_t lda, const uint16_t* b, int64_t ldb, int64_t panel_stride, int64_t k,
                        float* c, int64_t ldc, int mr, int64_t panels) {
  using Fn = void (*)(const float*, int64_t, const uint16_t*, int64_t, int64_t, int64_t, float*, int64_t, int64_t);
  static constexpr Fn kPanels[6] = {nn_panels<1, uint16_t>, nn_panels<2, uint16_t>, nn_panels<3, uint16_t>,
                                    nn_panels<4, uint16_t>, nn_panels<5, uint16_t>, nn_panels<6, uint16_t>};
  kPanels[mr - 1](a, lda, b, ldb, panel_stride, k, c, ldc, panels);
}

void gemm_f32_nn_panels(const float* a, int64_t lda, const float* b, int64_t ldb, int64_t panel_stride, int64_t k,
                        float* c, int64_t ldc, int mr, int64_t panels) {
  using Fn = void (*)(const float*, int64_t, const float*, int64_t, int64_t, int64_t, float*, int64_t, int64_t);
  static constexpr Fn kPanels[6] = {nn_panels<1, float>, nn_panels<2, float>, nn_panels<3, float>,
                                    nn_panels<4, float>, nn_panels<5, float>, nn_panels<6, float>};
  kPanels[mr - 1](a, lda, b, ldb, panel_stride, k, c, ldc, panels);
}

// exp8_n's and exp8_softmax_n's range reduction: x = n ln2 + r, ln2 in two parts (the first exact in few bits, so
// n times it is exact), |r| <= ln2 / 2, and e = (n + kBias) << 23, 2^n's exponent bits (kBias 127: as a float) or
// an increment for a float's exponent field (kBias 0). n = round(x log2e) comes from adding the shifter
// 1.5 * 2^23, whose sum's bits are 0x4B400000 + n: shifted by 23 they leave n << 23 (0x4B400000's low 9 bits are
// zero), with no round or convert instruction.
template <int N, int kBias>
inline void reduce8_n(const __m256 (&x)[N], __m256 (&r)[N], __m256i (&e)[N]) {
  const __m256 shifter = _mm256_set1_ps(12582912.0f);
  __m256 n[N];
  for (int j = 0; j < N; ++j) {
    const __m256 t = _mm256_fmadd_ps(x[j], _mm256_set1_ps(1.44269504088896341f), shifter);
    n[j] = _mm256_sub_ps(t, shifter);
    __m256i bits = _mm256_castps_si256(t);
    if constexpr (kBias != 0) bits = _mm256_add_epi32(bits, _mm256_set1_epi32(kBias));
    e[j] = _mm256_slli_epi32(bits, 23);
  }
  for (int j = 0; j < N; ++j) r[j] = _mm256_fnmadd_ps(n[j], _mm256_set1_ps(0.693359375f), x[j]);
  for (int j = 0; j < N; ++j) r[j] = _mm256_fnmadd_ps(n[j], _mm256_set1_ps(-2.12194440e-4f), r[j]);
}

// exp(x) for N vectors of 8 floats: range reduction x = n ln2 + r (ln2 split in two for exactness), a degree-7
// polynomial for e^r on |r| <= ln2 / 2, and 2^n built in the exponent bits. Relative error about 2e-7; inputs
// below -87.3 give 0, above 88.7 give +inf (GELU's and SiLU's exp; the softmax has exp8_softmax_n below). Every
// step is done for all N vectors before the next, so N independent chains of ~60 cycles are in flight: on a
// Zen 2 (small FP scheduler) exp_scaled over 3,072 values took 2.22 us one vector at a time and 1.70 us four at
// a time (BENCHMARKS.md). The range reduction is reduce8_n's, 2^n its exponent bits as a float.
template <int N>
inline void exp8_n(__m256 (&x)[N]) {
  const __m256 hi = _mm256_set1_ps(88.7f), lo = _mm256_set1_ps(-87.3f);
  __m256 under[N], r[N], p[N];
  __m256i e[N];
  for (int j = 0; j < N; ++j) {
    under[j] = _mm256_cmp_ps(x[j], lo, _CMP_LT_OQ);
    x[j] = _mm256_min_ps(_mm256_max_ps(x[j], lo), hi);
  }
  reduce8_n<N, 127>(x, r, e);
  for (int j = 0; j < N; ++j) p[j] = _mm256_fmadd_ps(_mm256_set1_ps(1.9875691500e-4f), r[j], _mm256_set1_ps(1.3981999507e-3f));
  for (int j = 0; j < N; ++j) p[j] = _mm256_fmadd_ps(p[j], r[j], _mm256_set1_ps(8.3334519073e-3f));
  for (int j = 0; j < N; ++j) p[j] = _mm256_fmadd_ps(p[j], r[j], _mm256_set1_ps(4.1665795894e-2f));
  for (int j = 0; j < N; ++j) p[j] = _mm256_fmadd_ps(p[j], r[j], _mm256_set1_ps(1.6666665459e-1f));
  for (int j = 0; j < N; ++j) p[j] = _mm256_fmadd_ps(p[j], r[j], _mm256_set1_ps(5.0000001201e-1f));
  for (int j = 0; j < N; ++j)
    p[j] = _mm256_fmadd_ps(p[j], _mm256_mul_ps(r[j], r[j]), _mm256_add_ps(r[j], _mm256_set1_ps(1.0f)));
  // 2^n: n in [-126, 128] after the clamp; 128 overflows to inf as wanted.
  for (int j = 0; j < N; ++j) x[j] = _mm256_andnot_ps(under[j], _mm256_mul_ps(p[j], _mm256_castsi256_ps(e[j])));
}

// exp(x) of a softmax's x - max (x <= 0) for N vectors of 8 floats, with fewer operations than exp8_n (14 rather than
// 18, 2 fewer on the FMA pipes; on a Zen 2 exp_scaled over 3,072 values 1.60 -> 1.31 us and vision attention at
// 3,072 patches 252 -> 240 ms, BENCHMARKS.md):
// - a degree-6 polynomial, 1 + r + r^2 q(r) with q's coefficients fitted for least maximum relative error on
//   |r| <= ln2 / 2 (3.1e-9 before float rounding, against 4e-9 for exp8_n's degree-7 one): the result is within
//   1 ulp of exp, as exp8_n's is;
// - 2^n added to the polynomial's exponent bits (an integer add, not a multiply), which needs p 2^n normal: x is
//   clamped at -86.6 (n >= -125), so x below -86.6 gives exp(-86.6) = 2.4e-38 rather than 0 (exp8_n: 0 below
//   -87.3; x86_avx512_exp.h: denormals). In a softmax's sum, which is >= 1, such terms vanish either way.
// The range reduction is reduce8_n's, with n << 23 to add to p's bits.
template <int N>
inline void exp8_softmax_n(__m256 (&x)[N]) {
  const __m256 lo = _mm256_set1_ps(-86.6f);
  __m256 r[N], p[N];
  __m256i e[N];
  for (int j = 0; j < N; ++j) x[j] = _mm256_max_ps(x[j], lo);
  reduce8_n<N, 0>(x, r, e);
  for (int j = 0; j < N; ++j) p[j] = _mm256_fmadd_ps(_mm256_set1_ps(1.3814612757e-3f), r[j], _mm256_set1_ps(8.3687100559e-3f));
  for (int j = 0; j < N; ++j) p[j] = _mm256_fmadd_ps(p[j], r[j], _mm256_set1_ps(4.1668388993e-2f));
  for (int j = 0; j < N; ++j) p[j] = _mm256_fmadd_ps(p[j], r[j], _mm256_set1_ps(1.6666521132e-1f));
  for (int j = 0; j < N; ++j) p[j] = _mm256_fmadd_ps(p[j], r[j], _mm256_set1_ps(4.9999994040e-1f));
  for (int j = 0; j < N; ++j)
    p[j] = _mm256_fmadd_ps(p[j], _mm256_mul_ps(r[j], r[j]), _mm256_add_ps(r[j], _mm256_set1_ps(1.0f)));
  for (int j = 0; j < N; ++j) x[j] = _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(p[j]), e[j]));
}

inline float hmax(__m256 v) {
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
  return _mm_cvtss_f32(m4);
}

inline __m256 exp8(__m256 x) {
  __m256 v[1] = {x};
  exp8_n<1>(v);
  return v[0];
}

float exp_scaled_from(float* x, int64_t n, float scale, float* running_max) {
  const __m256 sv = _mm256_set1_ps(scale);
  float mx;
  int64_t i = 0;
  if (scale > 0.0f) {
    // max(x) * scale rounds to max(x * scale): rounding is monotonic. One multiply instead of n (the softmax
    // step's max pass, ~5 % of its time on a Zen 2).
    __m256 mv = _mm256_set1_ps(-INFINITY), mv2 = mv;
    for (; i + 16 <= n; i += 16) {
      mv = _mm256_max_ps(mv, _mm256_loadu_ps(x + i));
      mv2 = _mm256_max_ps(mv2, _mm256_loadu_ps(x + i + 8));
    }
    if (i + 8 <= n) mv = _mm256_max_ps(mv, _mm256_loadu_ps(x + i)), i += 8;
    mx = hmax(_mm256_max_ps(mv, mv2));
    for (; i < n; ++i) mx = std::max(mx, x[i]);
    mx = std::max(*running_max, mx * scale);
  } else {
    __m256 mv = _mm256_set1_ps(*running_max);
    for (; i + 8 <= n; i += 8) mv = _mm256_max_ps(mv, _mm256_mul_ps(_mm256_loadu_ps(x + i), sv));
    mx = hmax(mv);
    for (; i < n; ++i) mx = std::max(mx, x[i] * scale);
  }
  const __m256 mxv = _mm256_set1_ps(mx);
  __m256 sumv = _mm256_setzero_ps();
  i = 0;
  for (; i + 64 <= n; i += 64) {
    __m256 e[8];
    for (int j = 0; j < 8; ++j) e[j] = _mm256_fmsub_ps(_mm256_loadu_ps(x + i + 8 * j), sv, mxv);
    exp8_softmax_n<8>(e);
    for (int j = 0; j < 8; ++j) {
      _mm256_storeu_ps(x + i + 8 * j, e[j]);
      sumv = _mm256_add_ps(sumv, e[j]);
    }
  }
  for (; i + 8 <= n; i += 8) {
    __m256 e[1] = {_mm256_fmsub_ps(_mm256_loadu_ps(x + i), sv, mxv)};
    exp8_softmax_n<1>(e);
    _mm256_storeu_ps(x + i, e[0]);
    sumv = _mm256_add_ps(sumv, e[0]);
  }
  float sum = hsum(sumv);
  for (; i < n; ++i) {
    __m256 t[1] = {_mm256_fmsub_ps(_mm256_set1_ps(x[i]), sv, mxv)};  // the same fused rounding as the vectors'
    exp8_softmax_n<1>(t);
    x[i] = _mm256_cvtss_f32(t[0]);
    sum += x[i];
  }
  *running_max = mx;
  return sum;
}

float exp_scaled(float* x, int64_t n, float scale) {
  float mx = -INFINITY;
  return exp_scaled_from(x, n, scale, &mx);
}

// f32_to_bf16 (kernels.h) 8 values at a time in integer arithmetic (bf16.h's rounding), the tail by bf16.h.
void f32_to_bf16(const float* x, uint16_t* out, int64_t n) {
  const __m256i one = _mm256_set1_epi32(1), half = _mm256_set1_epi32(0x7FFF), inf = _mm256_set1_epi32(0x7F800000),
                abs = _mm256_set1_epi32(0x7FFFFFFF), quiet = _mm256_set1_epi32(0x40);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i u = _mm256_castps_si256(_mm256_loadu_ps(x + i));
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs), inf);  // |u| fits int32: signed compare is right
    const __m256i rounded =
        _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(half, _mm256_and_si256(_mm256_srli_epi32(u, 16), one))), 16);
    const __m256i v = _mm256_blendv_epi8(rounded, _mm256_or_si256(_mm256_srli_epi32(u, 16), quiet), nan);
    // 32 -> 16 bits: packus within lanes (values < 65536), then the two lanes' halves together.
    const __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), packed);
  }
  for (; i < n; ++i) out[i] = to_bf16(x[i]);
}

// tanh(u) = 1 - 2 / (exp(2u) + 1), exact limits at +-inf through exp8's saturation.
inline __m256 tanh8(__m256 u) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 e = exp8(_mm256_add_ps(u, u));
  return _mm256_sub_ps(one, _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e, one)));
}

void gelu_tanh(float* x, int64_t n) {
  const __m256 beta = _mm256_set1_ps(0.7978845608028654f), kappa = _mm256_set1_ps(0.044715f),
               half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.0f);
  int64_t i = 0;
  // Four vectors at a time, their exponentials interleaved (exp8_n); the same arithmetic as tanh8's below.
  for (; i + 32 <= n; i += 32) {
    __m256 v[4], e[4];
    for (int j = 0; j < 4; ++j) {
      v[j] = _mm256_loadu_ps(x + i + 8 * j);
      const __m256 inner = _mm256_mul_ps(beta, _mm256_fmadd_ps(_mm256_mul_ps(kappa, v[j]), _mm256_mul_ps(v[j], v[j]), v[j]));
      e[j] = _mm256_add_ps(inner, inner);
    }
    exp8_n<4>(e);
    for (int j = 0; j < 4; ++j) {
      const __m256 t = _mm256_sub_ps(one, _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e[j], one)));
      _mm256_storeu_ps(x + i + 8 * j, _mm256_mul_ps(_mm256_mul_ps(half, v[j]), _mm256_add_ps(one, t)));
    }
  }
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    const __m256 inner = _mm256_mul_ps(beta, _mm256_fmadd_ps(_mm256_mul_ps(kappa, v), _mm256_mul_ps(v, v), v));
    _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_mul_ps(half, v), _mm256_add_ps(one, tanh8(inner))));
  }
  for (; i < n; ++i) {
    alignas(32) float t[8] = {x[i]};
    gelu_tanh(t, 8);
    x[i] = t[0];
  }
}

void silu_mul(float* gate, const float* up, int64_t n) {
  const __m256 one = _mm256_set1_ps(1.0f);
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {  // four vectors' exponentials interleaved (exp8_n), the loop below's arithmetic
    __m256 g[4], e[4];
    for (int j = 0; j < 4; ++j) {
      g[j] = _mm256_loadu_ps(gate + i + 8 * j);
      e[j] = _mm256_sub_ps(_mm256_setzero_ps(), g[j]);
    }
    exp8_n<4>(e);
    for (int j = 0; j < 4; ++j) {
      const __m256 sig = _mm256_div_ps(one, _mm256_add_ps(one, e[j]));
      _mm256_storeu_ps(gate + i + 8 * j, _mm256_mul_ps(_mm256_mul_ps(g[j], sig), _mm256_loadu_ps(up + i + 8 * j)));
    }
  }
  for (; i + 8 <= n; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    const __m256 sig = _mm256_div_ps(one, _mm256_add_ps(one, exp8(_mm256_sub_ps(_mm256_setzero_ps(), g))));
    _mm256_storeu_ps(gate + i, _mm256_mul_ps(_mm256_mul_ps(g, sig), _mm256_loadu_ps(up + i)));
  }
  for (; i < n; ++i) {
    alignas(32) float g[8] = {gate[i]}, u[8] = {up[i]};
    silu_mul(g, u, 8);
    gate[i] = g[0];
  }
}

// One block of 32 values quantized as the reference quantizers do: d = amax / 127, q = nearbyint(x * (1 / d));
// stores the 32 int8 values in order at q, returns d and (in *sum) the sum of the values.
inline float quantize_block(const float* xb, int8_t* q, int32_t* sum) {
  const __m256 sign_mask = _mm256_set1_ps(-0.0f);
  __m256 v[4];
  __m256 amax = _mm256_setzero_ps();
  for (int j = 0; j < 4; ++j) {
    v[j] = _mm256_loadu_ps(xb + 8 * j);
    amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign_mask, v[j]));
  }
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  const float d = _mm_cvtss_f32(m) / 127.0f;
  const float id = d != 0 ? 1.0f / d : 0.0f;
  const __m256 idv = _mm256_set1_ps(id);
  __m256i qi[4];
  for (int j = 0; j < 4; ++j)
    qi[j] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v[j], idv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  if (sum) {
    const __m256i sum4 = _mm256_add_epi32(_mm256_add_epi32(qi[0], qi[1]), _mm256_add_epi32(qi[2], qi[3]));
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sum4), _mm256_extracti128_si256(sum4, 1));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
    *sum = _mm_cvtsi128_si32(s4);
  }
  // Pack 32 int32 -> 32 int8 in order (packs work per 128-bit lane, so fix the order with a permute).
  const __m256i p01 = _mm256_packs_epi32(qi[0], qi[1]);
  const __m256i p23 = _mm256_packs_epi32(qi[2], qi[3]);
  __m256i p = _mm256_packs_epi16(p01, p23);
  p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), p);
  return d;
}

void quantize_q8_0(const float* x, BlockQ8_0* out, int64_t cols) {
  for (int64_t b = 0; b < cols / kQK; ++b) out[b].d = f2h(quantize_block(x + b * kQK, out[b].qs, nullptr));
}

// Quantizes one activation row as quantize_row_act_ref (float32 scales, int32 sums).
void quantize_act(const float* x, int64_t cols, int8_t* q, float* d, int32_t* sum) {
  for (int64_t b = 0; b < cols / kQK; ++b) d[b] = quantize_block(x + b * kQK, q + b * kQK, sum + b);
}

// Signed int8 dot of 32 pairs via maddubs: |w| (unsigned) times x with w's sign, pairs summed to int16,
// then to int32 lanes.
inline __m256i dot_i8(__m256i w_abs, __m256i w, __m256i x) {
  const __m256i p16 = _mm256_maddubs_epi16(w_abs, _mm256_sign_epi8(x, w));
  return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
}

// One activation row (decode): two blocks per step into two accumulators, so the loads and integer
// multiplies of one block overlap the float accumulation of the other.
template <class Block, class Load>
void dot_row(const Block* w, const BlockQ8_0* x, int64_t nb, float* y, Load load) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    const __m256i w0 = load(w[b]), w1 = load(w[b + 1]);
    const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].qs));
    const __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b + 1].qs));
    const __m256 s0 = _mm256_cvtepi32_ps(dot_i8(_mm256_sign_epi8(w0, w0), w0, x0));
    const __m256 s1 = _mm256_cvtepi32_ps(dot_i8(_mm256_sign_epi8(w1, w1), w1, x1));
    acc0 = _mm256_fmadd_ps(s0, _mm256_set1_ps(h2f(w[b].d) * h2f(x[b].d)), acc0);
    acc1 = _mm256_fmadd_ps(s1, _mm256_set1_ps(h2f(w[b + 1].d) * h2f(x[b + 1].d)), acc1);
  }
  for (; b < nb; ++b) {
    const __m256i w0 = load(w[b]);
    const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].qs));
    const __m256 s0 = _mm256_cvtepi32_ps(dot_i8(_mm256_sign_epi8(w0, w0), w0, x0));
    acc0 = _mm256_fmadd_ps(s0, _mm256_set1_ps(h2f(w[b].d) * h2f(x[b].d)), acc0);
  }
  *y = hsum(_mm256_add_ps(acc0, acc1));
}

template <int MR, class Block, class Load>
void dot_rows(const Block* w, const BlockQ8_0* x, int64_t nb, float* y, int64_t ldy, Load load) {
  __m256 acc[MR];
  for (int i = 0; i < MR; ++i) acc[i] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const __m256i wq = load(w[b]);
    const __m256i wa = _mm256_sign_epi8(wq, wq);
    const float dw = h2f(w[b].d);
    for (int i = 0; i < MR; ++i) {
      const BlockQ8_0& xb = x[i * nb + b];
      const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.qs));
      const __m256 s = _mm256_cvtepi32_ps(dot_i8(wa, wq, xq));
      acc[i] = _mm256_fmadd_ps(s, _mm256_set1_ps(dw * h2f(xb.d)), acc[i]);
    }
  }
  for (int i = 0; i < MR; ++i) y[i * ldy] = hsum(acc[i]);
}

void dot_q8_0_rows(const BlockQ8_0* w, const BlockQ8_0* x, int64_t nb, float* y, int64_t ldy, int mr) {
  auto load = [](const BlockQ8_0& b) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs)); };
  switch (mr) {
    case 1: return dot_row(w, x, nb, y, load);
    case 2: return dot_rows<2>(w, x, nb, y, ldy, load);
    case 3: return dot_rows<3>(w, x, nb, y, ldy, load);
    default: return dot_rows<4>(w, x, nb, y, ldy, load);
  }
}

void dot_q4_0_rows(const BlockQ4_0* w, const BlockQ8_0* x, int64_t nb, float* y, int64_t ldy, int mr) {
  auto load = [](const BlockQ4_0& b) { return load_q4_0_as_i8(b); };
  switch (mr) {
    case 1: return dot_row(w, x, nb, y, load);
    case 2: return dot_rows<2>(w, x, nb, y, ldy, load);
    case 3: return dot_rows<3>(w, x, nb, y, ldy, load);
    default: return dot_rows<4>(w, x, nb, y, ldy, load);
  }
}

// Pins a vector to a register at this point: without it GCC reassociates the integer sums of a block into
// a tree over all 32 products and spills them to the stack (2x slower, bench_kernels).
#define QVL_KEEP_IN_REGISTER(v) asm("" : "+x"(v))

// The integer GEMM tiles (see kernels.h). Each 32-byte weight load holds 4 values of each of the group's
// 8 rows; it is multiplied by the activation row's matching 4 values broadcast to every lane, so the
// int32 lanes of the sums are the 8 rows' dot products and one vector of scales finishes a block.
//
// Q8_0: maddubs needs one unsigned operand: |w| times x with w's sign (|w| <= 127, |x| <= 127, so a pair
// sum fits int16); the pairs go to int32 at every chunk.
template <int MR>
void gemm_q8_0x8_mr(const BlockQ8_0x8* w, const int8_t* xq, const float* xd, int64_t nb, float* y, int64_t ldy) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[MR];
  for (int i = 0; i < MR; ++i) acc[i] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    __m256i isum[MR];
    for (int i = 0; i < MR; ++i) isum[i] = _mm256_setzero_si256();
    prefetch_ahead(w + b);
    for (int t = 0; t < 8; ++t) {
      const __m256i wq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].qs + 32 * t));
      const __m256i wa = _mm256_abs_epi8(wq);
      for (int i = 0; i < MR; ++i) {
        const __m256i x = bcast4(xq + (i * nb + b) * kQK + 4 * t);
        const __m256i p = _mm256_maddubs_epi16(wa, _mm256_sign_epi8(x, wq));
        isum[i] = _mm256_add_epi32(isum[i], _mm256_madd_epi16(p, ones));
        QVL_KEEP_IN_REGISTER(isum[i]);
      }
    }
    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w[b].d)));
    for (int i = 0; i < MR; ++i) {
      const __m256 scale = _mm256_mul_ps(dw, _mm256_set1_ps(xd[i * nb + b]));
      acc[i] = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(isum[i]), acc[i]);
    }
  }
  for (int i = 0; i < MR; ++i) _mm256_storeu_ps(y + i * ldy, acc[i]);
}

// Q4_0: the nibbles u in [0, 15] are maddubs's unsigned operand; a pair sum is at most 2 * 15 * 127 and
// all 8 chunks of a block at most 30480, so the block's products add up in int16 before one madd. The
// offset of 8 comes off in integers: sum((u - 8) x) = sum(u x) - 8 sum(x).
template <int MR>
void gemm_q4_0x8_mr(const BlockQ4_0x8* w, const int8_t* xq, const float* xd, const int32_t* xsum, int64_t nb,
                    float* y, int64_t ldy) {
  const __m256i ones = _mm256_set1_epi16(1), low4 = _mm256_set1_epi8(0x0F);
  __m256 acc[MR];
  for (int i = 0; i < MR; ++i) acc[i] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    __m256i s16[MR];
    for (int i = 0; i < MR; ++i) s16[i] = _mm256_setzero_si256();
    prefetch_ahead(w + b);
    for (int s = 0; s < 4; ++s) {
      const __m256i packed = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].qs + 32 * s));
      const __m256i lo = _mm256_and_si256(packed, low4);
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(packed, 4), low4);
      for (int i = 0; i < MR; ++i) {
        const int8_t* x = xq + (i * nb + b) * kQK;
        s16[i] = _mm256_add_epi16(s16[i], _mm256_maddubs_epi16(lo, bcast4(x + 4 * s)));
        s16[i] = _mm256_add_epi16(s16[i], _mm256_maddubs_epi16(hi, bcast4(x + 16 + 4 * s)));
        QVL_KEEP_IN_REGISTER(s16[i]);
      }
    }
    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w[b].d)));
    for (int i = 0; i < MR; ++i) {
      const __m256i isum =
          _mm256_sub_epi32(_mm256_madd_epi16(s16[i], ones), _mm256_set1_epi32(8 * xsum[i * nb + b]));
      const __m256 scale = _mm256_mul_ps(dw, _mm256_set1_ps(xd[i * nb + b]));
      acc[i] = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(isum), acc[i]);
    }
  }
  for (int i = 0; i < MR; ++i) _mm256_storeu_ps(y + i * ldy, acc[i]);
}

void gemm_q8_0x8(const BlockQ8_0x8* w, const int8_t* xq, const float* xd, const int32_t* xsum, int64_t nb, float* y,
                 int64_t ldy, int mr) {
  (void)xsum;
  switch (mr) {
    case 1: return gemm_q8_0x8_mr<1>(w, xq, xd, nb, y, ldy);
    case 2: return gemm_q8_0x8_mr<2>(w, xq, xd, nb, y, ldy);
    case 3: return gemm_q8_0x8_mr<3>(w, xq, xd, nb, y, ldy);
    default: return gemm_q8_0x8_mr<4>(w, xq, xd, nb, y, ldy);
  }
}

void gemm_q4_0x8(const BlockQ4_0x8* w, const int8_t* xq, const float* xd, const int32_t* xsum, int64_t nb, float* y,
                 int64_t ldy, int mr) {
  switch (mr) {
    case 1: return gemm_q4_0x8_mr<1>(w, xq, xd, xsum, nb, y, ldy);
    case 2: return gemm_q4_0x8_mr<2>(w, xq, xd, xsum, nb, y, ldy);
    case 3: return gemm_q4_0x8_mr<3>(w, xq, xd, xsum, nb, y, ldy);
    default: return gemm_q4_0x8_mr<4>(w, xq, xd, xsum, nb, y, ldy);
  }
}

// ---- K-quant GEMM tiles (x86_kquant_tiles.h; kernels.h for the arithmetic every table follows) ----------

// maddubs: unsigned weights times signed activations, pairs summed in int16 (a 5-bit value's pair is at
// most 2 * 31 * 127, so four chunks fit), then madd by 1 to int32.
struct MaddubsDot {
  using Part = __m256i;
  static __m256i zero() { return _mm256_setzero_si256(); }
  static __m256i part(__m256i acc, __m256i u, __m256i s) { return _mm256_add_epi16(acc, _mm256_maddubs_epi16(u, s)); }
  static __m256i flush(__m256i sum, __m256i acc) { return _mm256_add_epi32(sum, _mm256_madd_epi16(acc, _mm256_set1_epi16(1))); }
};

#include "kernels/x86_kquant_tiles.h"

void gemm_q4_kx8(const BlockQ4_Kx8* w, const int8_t* xq, const float* xd, const int32_t* xsum, int64_t nb, float* y,
                 int64_t ldy, int mr) {
  gemm_q4_kx8_t<MaddubsDot>(w, xq, xd, xsum, nb, y, ldy, mr);
}

void gemm_q5_kx8(const BlockQ5_Kx8* w, const int8_t* xq, const float* xd, const int32_t* xsum, int64_t nb, float* y,
                 int64_t ldy, int mr) {
  gemm_q5_kx8_t<MaddubsDot>(w, xq, xd, xsum, nb, y, ldy, mr);
}

void gemm_q6_kx8(const BlockQ6_Kx8* w, const int8_t* xq, const float* xd, const int32_t* xsum, int64_t nb, float* y,
                 int64_t ldy, int mr) {
  gemm_q6_kx8_256(w, xq, xd, xsum, nb, y, ldy, mr);
}

}  // namespace
}  // namespace avx2

const KernelTable* avx2_kernels() {
  static const KernelTable table{
      .name = "avx2",
      .row_to_f32 = avx2::row_to_f32,
      .gemm_f32_tile = avx2::gemm_f32_tile,
      .gemm_w16_tile = avx2::gemm_w16_tile,
      .gemm_f32_nn_tile = avx2::gemm_f32_nn_tile,
      .nn_rows = 6,
      .nn_cols = 16,
      .gemm_f32_nn_panels = avx2::gemm_f32_nn_panels,
      .gemm_f16_nn_panels = avx2::gemm_f16_nn_panels,
      .exp_scaled = avx2::exp_scaled,
      .gelu_tanh = avx2::gelu_tanh,
      .silu_mul = avx2::silu_mul,
      .quantize_q8_0 = avx2::quantize_q8_0,
      .dot_q8_0_rows = avx2::dot_q8_0_rows,
      .dot_q4_0_rows = avx2::dot_q4_0_rows,
      .quantize_act = avx2::quantize_act,
      .gemm_q8_0x8 = avx2::gemm_q8_0x8,
      .gemm_q4_0x8 = avx2::gemm_q4_0x8,
      .gemm_q8_0x16 = two_groups<BlockQ8_0x8, avx2::gemm_q8_0x8>,
      .gemm_q4_0x16 = two_groups<BlockQ4_0x8, avx2::gemm_q4_0x8>,
      .gemm_q4_kx8 = avx2::gemm_q4_kx8,
      .gemm_q5_kx8 = avx2::gemm_q5_kx8,
      .gemm_q6_kx8 = avx2::gemm_q6_kx8,
      .gemm_q4_kx16 = two_kgroups<BlockQ4_Kx8, avx2::gemm_q4_kx8>,
      .gemm_q5_kx16 = two_kgroups<BlockQ5_Kx8, avx2::gemm_q5_kx8>,
      .gemm_q6_kx16 = two_kgroups<BlockQ6_Kx8, avx2::gemm_q6_kx8>,
      // No panels (AMX only) and no four-group tiles (AVX-512 only): null.
      .exp_scaled_from = avx2::exp_scaled_from,
      .f32_to_bf16 = avx2::f32_to_bf16,
      // No bf16 dot product in AVX2: null (bf16 attention runs in float32).
  };
  const CpuFeatures f = cpu_features();
  return f.avx2 && f.fma && f.f16c && f.os_ymm ? &table : nullptr;
}

}  // namespace qvl
