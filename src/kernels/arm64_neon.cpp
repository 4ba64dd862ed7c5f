// The ARM64 table (ARMv8.2 with the dot-product extension: Apple silicon, Graviton 2 and later, Ampere,
// Kunpeng, Snapdragon laptops, Cortex-A76 and later): the generic table with the integer GEMM tiles and
// the activation quantizer written for NEON. `sdot` multiplies 4 signed bytes by 4 signed bytes and adds
// them into an int32 lane, and its by-element form takes the 4 activation values from one 32-bit lane of
// a register, so one instruction covers 4 values of 4 weight rows: no broadcast and (the operands being
// signed) no offset for Q8_0. Same interleaved layouts, same exact integer sums, same float32 scaling
// (dw * dx rounded, then one fused multiply-add): bit-identical to generic.
// The float kernels are NEON's too: the GEMM tile (its 16-bit weights widened in registers), attention's panel
// tile and the exponentials (softmax, GELU, SiLU) with x86_avx2.cpp's arithmetic on 4 lanes.
// Compiled only for aarch64 with -march=armv8.2-a+dotprod; dispatch.cpp builds the table after checking
// the CPU's HWCAP_ASIMDDP, so nothing here runs on a CPU without sdot.
#include <arm_neon.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/arm64_neon.h"

namespace qvl {
namespace neon {
namespace {

// The weight blocks kPrefetchBlocks ahead are asked for (the x86 tables' distance).
constexpr int kPrefetchBlocks = 16;
template <class Block>
inline void prefetch_ahead(const Block* w) {
  const char* p = reinterpret_cast<const char*>(w + kPrefetchBlocks);
  for (size_t off = 0; off < sizeof(Block); off += 64) __builtin_prefetch(p + off);
}

// The 8 rows' scales of a block: rows 0-3 and 4-7.
inline void scales(const uint16_t* d, float32x4_t& lo, float32x4_t& hi) {
  const float16x8_t h = vreinterpretq_f16_u16(vld1q_u16(d));
  lo = vcvt_f32_f16(vget_low_f16(h));
  hi = vcvt_high_f32_f16(h);
}

// acc += (dw * dx) * (isum - offset), the product dw * dx rounded to float32 first as in generic.
inline float32x4_t finish(float32x4_t acc, float32x4_t dw, float dx, int32x4_t isum, int32_t offset) {
  const int32x4_t s = vsubq_s32(isum, vdupq_n_s32(offset));
  return vfmaq_f32(acc, vmulq_n_f32(dw, dx), vcvtq_f32_s32(s));
}

// Q8_0 chunk T (values 4T..4T+3 of each of the 8 rows: 16 bytes for rows 0-3, 16 for rows 4-7) times the
// activation row's values 4T..4T+3, which sit in lane T % 4 of its register T / 4.
template <int T, int MR>
inline void q8_chunk(const int8_t* qs, const int8x16_t (&x)[MR][2], int32x4_t (&s)[MR][2]) {
  const int8x16_t w0 = vld1q_s8(qs + 32 * T), w1 = vld1q_s8(qs + 32 * T + 16);
  for (int i = 0; i < MR; ++i) {
    s[i][0] = vdotq_laneq_s32(s[i][0], w0, x[i][T / 4], T % 4);
    s[i][1] = vdotq_laneq_s32(s[i][1], w1, x[i][T / 4], T % 4);
  }
}

// Q4_0 packed vector S: the low nibbles are values 4S..4S+3 of each row (activations in lane S of
// register 0), the high ones values 16+4S.. (lane S of register 1); nibbles u in [0, 15] are non-negative
// signed bytes, and sum((u - 8) x) = sum(u x) - 8 sum(x).
template <int S, int MR>
inline void q4_chunk(const uint8_t* qs, const int8x16_t (&x)[MR][2], int32x4_t (&s)[MR][2]) {
  const uint8x16_t low4 = vdupq_n_u8(0x0F);
  const uint8x16_t p0 = vld1q_u8(qs + 32 * S), p1 = vld1q_u8(qs + 32 * S + 16);
  const int8x16_t lo0 = vreinterpretq_s8_u8(vandq_u8(p0, low4)), hi0 = vreinterpretq_s8_u8(vshrq_n_u8(p0, 4));
  const int8x16_t lo1 = vreinterpretq_s8_u8(vandq_u8(p1, low4)), hi1 = vreinterpretq_s8_u8(vshrq_n_u8(p1, 4));
  for (int i = 0; i < MR; ++i) {
    s[i][0] = vdotq_laneq_s32(s[i][0], lo0, x[i][0], S);
    s[i][1] = vdotq_laneq_s32(s[i][1], lo1, x[i][0], S);
    s[i][0] = vdotq_laneq_s32(s[i][0], hi0, x[i][1], S);
    s[i][1] = vdotq_laneq_s32(s[i][1], hi1, x[i][1], S);
  }
}

// One group (8 output columns) by MR activation rows: per block, the rows' 32 int8 values in two
// registers, 16 sdot per row (Q8_0 and Q4_0 alike) into two int32x4 sums (rows 0-3, 4-7).
template <bool kQ4, int MR, class Block>
void gemm_x8(const Block* w, const int8_t* xq, const float* xd, const int32_t* xsum, int64_t nb, float* y,
             int64_t ldy) {
  float32x4_t acc[MR][2];
  for (int i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = vdupq_n_f32(0.0f);
  for (int64_t b = 0; b < nb; ++b) {
    prefetch_ahead(w + b);
    int8x16_t x[MR][2];
    int32x4_t s[MR][2];
    for (int i = 0; i < MR; ++i) {
      const int8_t* xi = xq + (i * nb + b) * kQK;
      x[i][0] = vld1q_s8(xi);
      x[i][1] = vld1q_s8(xi + 16);
      s[i][0] = s[i][1] = vdupq_n_s32(0);
    }
    if constexpr (kQ4) {
      q4_chunk<0>(w[b].qs, x, s);
      q4_chunk<1>(w[b].qs, x, s);
      q4_chunk<2>(w[b].qs, x, s);
      q4_chunk<3>(w[b].qs, x, s);
    } else {
      q8_chunk<0>(w[b].qs, x, s);
      q8_chunk<1>(w[b].qs, x, s);
      q8_chunk<2>(w[b].qs, x, s);
      q8_chunk<3>(w[b].qs, x, s);
      q8_chunk<4>(w[b].qs, x, s);
      q8_chunk<5>(w[b].qs, x, s);
      q8_chunk<6>(w[b].qs, x, s);
      q8_chunk<7>(w[b].qs, x, s);
    }
    float32x4_t dw0, dw1;
    scales(w[b].d, dw0, dw1);
    for (int i = 0; i < MR; ++i) {
      const int32_t off = kQ4 ? 8 * xsum[i * nb + b] : 0;
      acc[i][0] = finish(acc[i][0], dw0, xd[i * nb + b], s[i][0], off);
      acc[i][1] = finish(acc[i][1], dw1, xd[i * nb + b], s[i][1], off);
    }
  }
  for (int i = 0; i < MR; ++i) {
    vst1q_f32(y + i * ldy, acc[i][0]);
    vst1q_f32(y + i * ldy + 4, acc[i][1]);
  }
}

}  // namespace

void gemm_q8_0x8(const BlockQ8_0x8* w, const int8_t* xq, const float* xd, const int32_t* xsum, int64_t nb, float* y,
                 int64_t ldy, int mr) {
  switch (mr) {
    case 1: return gemm_x8<false, 1>(w, xq, xd, xsum, nb, y, ldy);
    case 2: return gemm_x8<false, 2>(w, xq, xd, xsum, nb, y, ldy);
    case 3: return gemm_x8<false, 3>(w, xq, xd, xsum, nb, y, ldy);
    default: return gemm_x8<false, 4>(w, xq, xd, xsum, nb, y, ldy);
  }
}

void gemm_q4_0x8(const BlockQ4_0x8* w, const int8_t* xq, const float* xd, const int32_t* xsum, int64_t nb, float* y,
                 int64_t ldy, int mr) {
  switch (mr) {
    case 1: return gemm_x8<true, 1>(w, xq, xd, xsum, nb, y, ldy);
    case 2: return gemm_x8<true, 2>(w, xq, xd, xsum, nb, y, ldy);
    case 3: return gemm_x8<true, 3>(w, xq, xd, xsum, nb, y, ldy);
    default: return gemm_x8<true, 4>(w, xq, xd, xsum, nb, y, ldy);
  }
}

// ---- Float tiles (gemm_f32_tile, gemm_w16_tile) ------------------------------------------------------------
// Weight rows as float32, or bf16 / f16 widened in registers (exactly, as row_to_f32 widens them).

namespace {

struct Bf16 {
  uint16_t v;
};
struct F16 {
  uint16_t v;
};
inline float32x4_t load_w(const float* w) { return vld1q_f32(w); }
inline float32x4_t load_w(const Bf16* w) {
  return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(reinterpret_cast<const uint16_t*>(w)), 16));
}
inline float32x4_t load_w(const F16* w) { return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(reinterpret_cast<const uint16_t*>(w)))); }
inline float w_at(const float* w, int64_t u) { return w[u]; }
inline float w_at(const Bf16* w, int64_t u) {
  const uint32_t b = static_cast<uint32_t>(w[u].v) << 16;
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}
inline float w_at(const F16* w, int64_t u) { return vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(w[u].v))), 0); }

// MR x NR dot products, 4 lanes each, added across lanes at the end (faddp, faddp), the tail in explicit
// FMAs (a sum must not depend on the tile's shape): 4 x 3 is 12 accumulators, 1 or 2 x 6 for decode (6 or 12
// independent chains to hide the FMA latency). The same arithmetic for every weight type.
template <int MR, int NR, class W>
void tile(const float* x, int64_t ldx, const W* w, int64_t ldw, int64_t k, float* y, int64_t ldy) {
  float32x4_t acc[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) acc[i][j] = vdupq_n_f32(0.0f);
  int64_t t = 0;
  for (; t + 4 <= k; t += 4) {
    float32x4_t xv[MR];
    for (int i = 0; i < MR; ++i) xv[i] = vld1q_f32(x + i * ldx + t);
    for (int j = 0; j < NR; ++j) {
      const float32x4_t wv = load_w(w + j * ldw + t);
      for (int i = 0; i < MR; ++i) acc[i][j] = vfmaq_f32(acc[i][j], xv[i], wv);
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) {
      float s = vaddvq_f32(acc[i][j]);
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
  static constexpr Fn kWide[2][3] = {{tile<1, 4, W>, tile<1, 5, W>, tile<1, 6, W>}, {tile<2, 4, W>, tile<2, 5, W>, tile<2, 6, W>}};
  if (nr > 3) return kWide[mr - 1][nr - 4](x, ldx, w, ldw, k, y, ldy);
  kTiles[mr - 1][nr - 1](x, ldx, w, ldw, k, y, ldy);
}

}  // namespace

void gemm_f32_tile(const float* x, int64_t ldx, const float* w, int64_t ldw, int64_t k, float* y, int64_t ldy, int mr,
                   int nr) {
  gemm_tile(x, ldx, w, ldw, k, y, ldy, mr, nr);
}

void gemm_w16_tile(WeightType type, const float* x, int64_t ldx, const uint16_t* w, int64_t ldw, int64_t k, float* y,
                   int64_t ldy, int mr, int nr) {
  QVL_CHECK((type == WeightType::kBF16 || type == WeightType::kF16) && (nr <= 3 || mr <= 2));
  if (type == WeightType::kBF16) return gemm_tile(x, ldx, reinterpret_cast<const Bf16*>(w), ldw, k, y, ldy, mr, nr);
  gemm_tile(x, ldx, reinterpret_cast<const F16*>(w), ldw, k, y, ldy, mr, nr);
}

// ---- The panel tile and the element-wise kernels (attention, GELU, SiLU) ------------------------------------

namespace {

// MR rows of A times a 16-column panel of B: 4 vectors per row, 4 * MR accumulators (24 for MR = 6) and 4
// loads of b per step, a[i][t] taken by fmla's by-element form; each output an FMA chain in t's order.
template <int MR>
void nn_tile(const float* a, int64_t lda, const float* b, int64_t ldb, int64_t k, float* c, int64_t ldc) {
  float32x4_t acc[MR][4];
#pragma GCC unroll 6
  for (int i = 0; i < MR; ++i)
    for (int v = 0; v < 4; ++v) acc[i][v] = vdupq_n_f32(0.0f);
  for (int64_t t = 0; t < k; ++t) {
    const float32x4_t b0 = vld1q_f32(b + t * ldb), b1 = vld1q_f32(b + t * ldb + 4), b2 = vld1q_f32(b + t * ldb + 8),
                      b3 = vld1q_f32(b + t * ldb + 12);
    // Fully unrolled, so the accumulators stay in registers (x86_avx2.cpp's nn_tile: GCC kept them on the
    // stack otherwise).
#pragma GCC unroll 6
    for (int i = 0; i < MR; ++i) {
      const float av = a[i * lda + t];
      acc[i][0] = vfmaq_n_f32(acc[i][0], b0, av);
      acc[i][1] = vfmaq_n_f32(acc[i][1], b1, av);
      acc[i][2] = vfmaq_n_f32(acc[i][2], b2, av);
      acc[i][3] = vfmaq_n_f32(acc[i][3], b3, av);
    }
  }
#pragma GCC unroll 6
  for (int i = 0; i < MR; ++i)
    for (int v = 0; v < 4; ++v) vst1q_f32(c + i * ldc + 4 * v, acc[i][v]);
}

// exp(x) for N vectors of 4 floats, x86_avx2.cpp's exp8_n step for step (the same constants, the same FMAs,
// so the same bits lane by lane for inputs that are not NaN): x = n ln2 + r with n from a 1.5 * 2^23 shifter, a degree-7 polynomial for
// e^r, 2^n built in the exponent bits; inputs below -87.3 give 0, above 88.7 +inf (kClampHigh false: the
// caller's inputs are <= 0). The N vectors' steps interleaved, so N chains are in flight.
template <int N, bool kClampHigh = true>
inline void exp4_n(float32x4_t (&x)[N]) {
  const float32x4_t hi = vdupq_n_f32(88.7f), lo = vdupq_n_f32(-87.3f), shifter = vdupq_n_f32(12582912.0f);
  uint32x4_t under[N];
  float32x4_t n[N], r[N], p[N];
  int32x4_t e[N];
  for (int j = 0; j < N; ++j) {
    under[j] = vcltq_f32(x[j], lo);
    x[j] = vmaxq_f32(x[j], lo);
    if (kClampHigh) x[j] = vminq_f32(x[j], hi);
  }
  for (int j = 0; j < N; ++j) {
    const float32x4_t t = vfmaq_f32(shifter, x[j], vdupq_n_f32(1.44269504088896341f));
    n[j] = vsubq_f32(t, shifter);
    e[j] = vshlq_n_s32(vaddq_s32(vreinterpretq_s32_f32(t), vdupq_n_s32(127)), 23);
  }
  for (int j = 0; j < N; ++j) r[j] = vfmsq_f32(x[j], n[j], vdupq_n_f32(0.693359375f));
  for (int j = 0; j < N; ++j) r[j] = vfmsq_f32(r[j], n[j], vdupq_n_f32(-2.12194440e-4f));
  for (int j = 0; j < N; ++j) p[j] = vfmaq_f32(vdupq_n_f32(1.3981999507e-3f), vdupq_n_f32(1.9875691500e-4f), r[j]);
  for (int j = 0; j < N; ++j) p[j] = vfmaq_f32(vdupq_n_f32(8.3334519073e-3f), p[j], r[j]);
  for (int j = 0; j < N; ++j) p[j] = vfmaq_f32(vdupq_n_f32(4.1665795894e-2f), p[j], r[j]);
  for (int j = 0; j < N; ++j) p[j] = vfmaq_f32(vdupq_n_f32(1.6666665459e-1f), p[j], r[j]);
  for (int j = 0; j < N; ++j) p[j] = vfmaq_f32(vdupq_n_f32(5.0000001201e-1f), p[j], r[j]);
  for (int j = 0; j < N; ++j) p[j] = vfmaq_f32(vaddq_f32(r[j], vdupq_n_f32(1.0f)), p[j], vmulq_f32(r[j], r[j]));
  for (int j = 0; j < N; ++j)
    x[j] = vreinterpretq_f32_u32(
        vbicq_u32(vreinterpretq_u32_f32(vmulq_f32(p[j], vreinterpretq_f32_s32(e[j]))), under[j]));
}

inline float32x4_t exp4(float32x4_t x) {
  float32x4_t v[1] = {x};
  exp4_n<1>(v);
  return v[0];
}

}  // namespace

void gemm_f32_nn_tile(const float* a, int64_t lda, const float* b, int64_t ldb, int64_t k, float* c, int64_t ldc,
                      int mr, int nc) {
  if (nc != 16) {  // a partial panel: the loads above would read past it
    for (int i = 0; i < mr; ++i)
      for (int j = 0; j < nc; ++j) {
        float s = 0;
        for (int64_t t = 0; t < k; ++t) s = __builtin_fmaf(a[i * lda + t], b[t * ldb + j], s);
        c[i * ldc + j] = s;
      }
    return;
  }
  using Fn = void (*)(const float*, int64_t, const float*, int64_t, int64_t, float*, int64_t);
  static constexpr Fn kTiles[6] = {nn_tile<1>, nn_tile<2>, nn_tile<3>, nn_tile<4>, nn_tile<5>, nn_tile<6>};
  kTiles[mr - 1](a, lda, b, ldb, k, c, ldc);
}

float exp_scaled_from(float* x, int64_t n, float scale, float* running_max) {
  float32x4_t mv = vdupq_n_f32(*running_max);
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) mv = vmaxq_f32(mv, vmulq_n_f32(vld1q_f32(x + i), scale));
  float mx = vmaxvq_f32(mv);
  for (; i < n; ++i) mx = std::max(mx, x[i] * scale);
  const float32x4_t sv = vdupq_n_f32(scale), mxv = vdupq_n_f32(mx);
  float32x4_t sumv = vdupq_n_f32(0.0f);
  i = 0;
  for (; i + 32 <= n; i += 32) {
    float32x4_t e[8];
    for (int j = 0; j < 8; ++j) e[j] = vnegq_f32(vfmsq_f32(mxv, vld1q_f32(x + i + 4 * j), sv));  // x s - m
    exp4_n<8, false>(e);
    for (int j = 0; j < 8; ++j) {
      vst1q_f32(x + i + 4 * j, e[j]);
      sumv = vaddq_f32(sumv, e[j]);
    }
  }
  for (; i + 4 <= n; i += 4) {
    const float32x4_t e = exp4(vnegq_f32(vfmsq_f32(mxv, vld1q_f32(x + i), sv)));
    vst1q_f32(x + i, e);
    sumv = vaddq_f32(sumv, e);
  }
  float sum = vaddvq_f32(sumv);
  for (; i < n; ++i) {
    const float e = vgetq_lane_f32(exp4(vdupq_n_f32(__builtin_fmaf(x[i], scale, -mx))), 0);
    x[i] = e;
    sum += e;
  }
  *running_max = mx;
  return sum;
}

float exp_scaled(float* x, int64_t n, float scale) {
  float mx = -INFINITY;
  return exp_scaled_from(x, n, scale, &mx);
}

// 0.5 x (1 + tanh(beta (x + kappa x^3))) with tanh(u) = 1 - 2 / (exp(2u) + 1): x86_avx2.cpp's arithmetic.
void gelu_tanh(float* x, int64_t n) {
  const float32x4_t beta = vdupq_n_f32(0.7978845608028654f), kappa = vdupq_n_f32(0.044715f), half = vdupq_n_f32(0.5f),
                    one = vdupq_n_f32(1.0f), two = vdupq_n_f32(2.0f);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    float32x4_t v[4], e[4];
    for (int j = 0; j < 4; ++j) {
      v[j] = vld1q_f32(x + i + 4 * j);
      const float32x4_t inner = vmulq_f32(beta, vfmaq_f32(v[j], vmulq_f32(kappa, v[j]), vmulq_f32(v[j], v[j])));
      e[j] = vaddq_f32(inner, inner);
    }
    exp4_n<4>(e);
    for (int j = 0; j < 4; ++j) {
      const float32x4_t t = vsubq_f32(one, vdivq_f32(two, vaddq_f32(e[j], one)));
      vst1q_f32(x + i + 4 * j, vmulq_f32(vmulq_f32(half, v[j]), vaddq_f32(one, t)));
    }
  }
  for (; i < n; i += 4) {  // the tail through a padded vector
    float buf[4] = {0, 0, 0, 0};
    const int64_t m = std::min<int64_t>(4, n - i);
    std::memcpy(buf, x + i, static_cast<size_t>(m) * sizeof(float));
    const float32x4_t v = vld1q_f32(buf);
    const float32x4_t inner = vmulq_f32(beta, vfmaq_f32(v, vmulq_f32(kappa, v), vmulq_f32(v, v)));
    const float32x4_t t = vsubq_f32(one, vdivq_f32(two, vaddq_f32(exp4(vaddq_f32(inner, inner)), one)));
    vst1q_f32(buf, vmulq_f32(vmulq_f32(half, v), vaddq_f32(one, t)));
    std::memcpy(x + i, buf, static_cast<size_t>(m) * sizeof(float));
  }
}

// gate = gate / (1 + exp(-gate)) * up: x86_avx2.cpp's arithmetic.
void silu_mul(float* gate, const float* up, int64_t n) {
  const float32x4_t one = vdupq_n_f32(1.0f);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    float32x4_t g[4], e[4];
    for (int j = 0; j < 4; ++j) {
      g[j] = vld1q_f32(gate + i + 4 * j);
      e[j] = vnegq_f32(g[j]);
    }
    exp4_n<4>(e);
    for (int j = 0; j < 4; ++j) {
      const float32x4_t sig = vdivq_f32(one, vaddq_f32(one, e[j]));
      vst1q_f32(gate + i + 4 * j, vmulq_f32(vmulq_f32(g[j], sig), vld1q_f32(up + i + 4 * j)));
    }
  }
  for (; i < n; i += 4) {
    float g[4] = {0, 0, 0, 0}, u[4] = {0, 0, 0, 0};
    const int64_t m = std::min<int64_t>(4, n - i);
    std::memcpy(g, gate + i, static_cast<size_t>(m) * sizeof(float));
    std::memcpy(u, up + i, static_cast<size_t>(m) * sizeof(float));
    const float32x4_t gv = vld1q_f32(g);
    const float32x4_t sig = vdivq_f32(one, vaddq_f32(one, exp4(vnegq_f32(gv))));
    vst1q_f32(g, vmulq_f32(vmulq_f32(gv, sig), vld1q_f32(u)));
    std::memcpy(gate + i, g, static_cast<size_t>(m) * sizeof(float));
  }
}

// quantize_row_act_ref on 4 lanes: amax by lanes then across, d = amax / 127, q = round-to-nearest-even
// of x * (1 / d) (fcvtns, as nearbyint in the default rounding mode), the block's sum of q.
void quantize_act(const float* x, int64_t cols, int8_t* q, float* d, int32_t* sum) {
  for (int64_t b = 0; b < cols / kQK; ++b) {
    const float* xb = x + b * kQK;
    float32x4_t v[8];
    float32x4_t m = vdupq_n_f32(0.0f);
    for (int j = 0; j < 8; ++j) {
      v[j] = vld1q_f32(xb + 4 * j);
      m = vmaxq_f32(m, vabsq_f32(v[j]));
    }
    const float amax = vmaxvq_f32(m);
    const float db = amax / 127.0f;
    const float id = db != 0 ? 1.0f / db : 0.0f;
    int32x4_t s = vdupq_n_s32(0);
    int16x8_t h[4];
    for (int j = 0; j < 4; ++j) {
      const int32x4_t a = vcvtnq_s32_f32(vmulq_n_f32(v[2 * j], id)), c = vcvtnq_s32_f32(vmulq_n_f32(v[2 * j + 1], id));
      s = vaddq_s32(s, vaddq_s32(a, c));
      h[j] = vcombine_s16(vmovn_s32(a), vmovn_s32(c));
    }
    vst1q_s8(q + b * kQK, vcombine_s8(vmovn_s16(h[0]), vmovn_s16(h[1])));
    vst1q_s8(q + b * kQK + 16, vcombine_s8(vmovn_s16(h[2]), vmovn_s16(h[3])));
    d[b] = db;
    sum[b] = vaddvq_s32(s);
  }
}

// ---- K-quant GEMM tiles (kernels.h for the arithmetic every table follows; layouts: tensor/quant.h) -------
// Each 32-byte chunk holds 4 values of each of the 8 rows (16 bytes for rows 0-3, 16 for rows 4-7), dotted
// by sdot's by-element form with the 4 activation values in lane t % 4 of the block's register t / 4.

namespace {

template <int L>
inline int32x4_t dot_lane_c(int32x4_t acc, int8x16_t w, int8x16_t x) { return vdotq_laneq_s32(acc, w, x, L); }
inline int32x4_t dot_lane(int32x4_t acc, int8x16_t w, int8x16_t x, int lane) {
  switch (lane) {
    case 0: return dot_lane_c<0>(acc, w, x);
    case 1: return dot_lane_c<1>(acc, w, x);
    case 2: return dot_lane_c<2>(acc, w, x);
    default: return dot_lane_c<3>(acc, w, x);
  }
}

// Rows h*4 .. h*4+3's sub-block scales (sc) and mins (m): bytes 0-3 of lo (sub-blocks 0-3) and of hi (4-7).
struct ScalesX8 {
  uint32x4_t sc_lo[2], sc_hi[2], m_lo[2], m_hi[2];
  explicit ScalesX8(const uint32_t (&w)[3][8]) {
    const uint32x4_t m6 = vdupq_n_u32(0x3F3F3F3Fu), m4 = vdupq_n_u32(0x0F0F0F0Fu), m2 = vdupq_n_u32(0x03030303u);
    for (int h = 0; h < 2; ++h) {
      const uint32x4_t w0 = vld1q_u32(w[0] + 4 * h), w1 = vld1q_u32(w[1] + 4 * h), w2 = vld1q_u32(w[2] + 4 * h);
      sc_lo[h] = vandq_u32(w0, m6);
      m_lo[h] = vandq_u32(w1, m6);
      sc_hi[h] = vorrq_u32(vandq_u32(w2, m4), vshlq_n_u32(vandq_u32(vshrq_n_u32(w0, 6), m2), 4));
      m_hi[h] = vorrq_u32(vandq_u32(vshrq_n_u32(w2, 4), m4), vshlq_n_u32(vandq_u32(vshrq_n_u32(w1, 6), m2), 4));
    }
  }
  static float32x4_t pick(uint32x4_t lo, uint32x4_t hi, int j) {
    const uint32x4_t v = vshlq_u32(j < 4 ? lo : hi, vdupq_n_s32(-8 * (j % 4)));
    return vcvtq_f32_u32(vandq_u32(v, vdupq_n_u32(0xFF)));
  }
};

template <bool FIVE, int MR, class Block>
void gemm_q45_kx8_mr(const Block* w, const int8_t* xq, const float* xd, const int32_t* xsum, int64_t nb, float* y,
                     int64_t ldy) {
  const uint8x16_t low4 = vdupq_n_u8(0x0F);
  float32x4_t acc[MR][2];
  for (int i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = vdupq_n_f32(0.0f);
  for (int64_t s = 0; s < nb / 8; ++s) {
    const Block& blk = w[s];
    prefetch_ahead(w + s);
    float32x4_t d[2], dmin[2];
    scales(blk.d, d[0], d[1]);
    scales(blk.dmin, dmin[0], dmin[1]);
    const ScalesX8 sm(blk.scales);
    for (int j = 0; j < 8; ++j) {
      const uint8_t* qs = blk.qs + 32 * 8 * (j / 2);
      int8x16_t x[MR][2];
      int32x4_t sum[MR][2];
      for (int i = 0; i < MR; ++i) {
        const int8_t* xb = xq + (i * nb + 8 * s + j) * kQK;
        x[i][0] = vld1q_s8(xb);
        x[i][1] = vld1q_s8(xb + 16);
        sum[i][0] = sum[i][1] = vdupq_n_s32(0);
      }
      for (int t = 0; t < 8; ++t) {
        uint8x16_t v[2];
        for (int h = 0; h < 2; ++h) {
          const uint8x16_t p = vld1q_u8(qs + 32 * t + 16 * h);
          v[h] = j % 2 == 0 ? vandq_u8(p, low4) : vshrq_n_u8(p, 4);
          if constexpr (FIVE) {
            const uint8x16_t bit = vtstq_u8(vld1q_u8(blk.qh + 32 * t + 16 * h), vdupq_n_u8(static_cast<uint8_t>(1u << j)));
            v[h] = vorrq_u8(v[h], vandq_u8(bit, vdupq_n_u8(16)));
          }
        }
        for (int i = 0; i < MR; ++i)
          for (int h = 0; h < 2; ++h) sum[i][h] = dot_lane(sum[i][h], vreinterpretq_s8_u8(v[h]), x[i][t / 4], t % 4);
      }
      for (int h = 0; h < 2; ++h) {
        const float32x4_t scf = ScalesX8::pick(sm.sc_lo[h], sm.sc_hi[h], j), mf = ScalesX8::pick(sm.m_lo[h], sm.m_hi[h], j);
        for (int i = 0; i < MR; ++i) {
          const int64_t b = i * nb + 8 * s + j;
          acc[i][h] = vfmaq_f32(acc[i][h], vmulq_n_f32(d[h], xd[b]), vmulq_f32(vcvtq_f32_s32(sum[i][h]), scf));
          acc[i][h] = vfmsq_f32(acc[i][h], vmulq_n_f32(dmin[h], xd[b]), vmulq_n_f32(mf, static_cast<float>(xsum[b])));
        }
      }
    }
  }
  for (int i = 0; i < MR; ++i) {
    vst1q_f32(y + i * ldy, acc[i][0]);
    vst1q_f32(y + i * ldy + 4, acc[i][1]);
  }
}

// Q6_K: w = q - 32 is signed, as sdot wants; each sub-block of 16's sum times its row's int8 scale in int32.
template <int MR>
void gemm_q6_kx8_mr(const BlockQ6_Kx8* w, const int8_t* xq, const float* xd, int64_t nb, float* y, int64_t ldy) {
  const uint8x16_t low4 = vdupq_n_u8(0x0F), three = vdupq_n_u8(3);
  const int8x16_t m32 = vdupq_n_s8(32);
  float32x4_t acc[MR][2];
  for (int i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = vdupq_n_f32(0.0f);
  for (int64_t s = 0; s < nb / 8; ++s) {
    const BlockQ6_Kx8& blk = w[s];
    prefetch_ahead(w + s);
    float32x4_t d[2];
    scales(blk.d, d[0], d[1]);
    for (int j = 0; j < 8; ++j) {
      const int hh = j / 4, g = j % 4, e = g % 2;
      const uint8_t* ql = blk.ql + 32 * 8 * (2 * hh + e);
      const uint8_t* qhp = blk.qh + 32 * 8 * hh;
      const int8x16_t shift = vdupq_n_s8(static_cast<int8_t>(-2 * g));
      int8x16_t x[MR][2];
      int32x4_t sum[MR][2];
      for (int i = 0; i < MR; ++i) {
        const int8_t* xb = xq + (i * nb + 8 * s + j) * kQK;
        x[i][0] = vld1q_s8(xb);
        x[i][1] = vld1q_s8(xb + 16);
        sum[i][0] = sum[i][1] = vdupq_n_s32(0);
      }
      for (int half = 0; half < 2; ++half) {
        int32x4_t part[MR][2];
        for (int i = 0; i < MR; ++i) part[i][0] = part[i][1] = vdupq_n_s32(0);
        for (int t = 4 * half; t < 4 * half + 4; ++t) {
          for (int h = 0; h < 2; ++h) {
            const uint8x16_t lo = vld1q_u8(ql + 32 * t + 16 * h), hb = vld1q_u8(qhp + 32 * t + 16 * h);
            const uint8x16_t low = g < 2 ? vandq_u8(lo, low4) : vshrq_n_u8(lo, 4);
            const uint8x16_t top = vshlq_n_u8(vandq_u8(vshlq_u8(hb, shift), three), 4);
            const int8x16_t wv = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(low, top)), m32);
            for (int i = 0; i < MR; ++i) part[i][h] = dot_lane(part[i][h], wv, x[i][t / 4], t % 4);
          }
        }
        const int16x8_t sc16 = vmovl_s8(vld1_s8(blk.scales + 8 * (2 * j + half)));  // the 8 rows' scales
        for (int h = 0; h < 2; ++h) {
          const int32x4_t sc = vmovl_s16(h == 0 ? vget_low_s16(sc16) : vget_high_s16(sc16));
          for (int i = 0; i < MR; ++i) sum[i][h] = vmlaq_s32(sum[i][h], part[i][h], sc);
        }
      }
      for (int i = 0; i < MR; ++i) {
        const float dx = xd[i * nb + 8 * s + j];
        for (int h = 0; h < 2; ++h) acc[i][h] = vfmaq_f32(acc[i][h], vmulq_n_f32(d[h], dx), vcvtq_f32_s32(sum[i][h]));
      }
    }
  }
  for (int i = 0; i < MR; ++i) {
    vst1q_f32(y + i * ldy, acc[i][0]);
    vst1q_f32(y + i * ldy + 4, acc[i][1]);
  }
}

}  // namespace

void gemm_q4_kx8(const BlockQ4_Kx8* w, const int8_t* xq, const float* xd, const int32_t* xsum, int64_t nb, float* y,
                 int64_t ldy, int mr) {
  with_rows(mr, [&](auto rows) { gemm_q45_kx8_mr<false, decltype(rows)::value>(w, xq, xd, xsum, nb, y, ldy); });
}

void gemm_q5_kx8(const BlockQ5_Kx8* w, const int8_t* xq, const float* xd, const int32_t* xsum, int64_t nb, float* y,
                 int64_t ldy, int mr) {
  with_rows(mr, [&](auto rows) { gemm_q45_kx8_mr<true, decltype(rows)::value>(w, xq, xd, xsum, nb, y, ldy); });
}

void gemm_q6_kx8(const BlockQ6_Kx8* w, const int8_t* xq, const float* xd, const int32_t* xsum, int64_t nb, float* y,
                 int64_t ldy, int mr) {
  (void)xsum;
  with_rows(mr, [&](auto rows) { gemm_q6_kx8_mr<decltype(rows)::value>(w, xq, xd, nb, y, ldy); });
}

}  // namespace neon
}  // namespace qvl
