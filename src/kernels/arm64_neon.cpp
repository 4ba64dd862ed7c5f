// The ARM64 table (ARMv8.2 with the dot-product extension: Apple silicon, Graviton 2 and later, Ampere,
// Kunpeng, Snapdragon laptops, Cortex-A76 and later): the generic table with the integer GEMM tiles and
// the activation quantizer written for NEON. `sdot` multiplies 4 signed bytes by 4 signed bytes and adds
// them into an int32 lane, and its by-element form takes the 4 activation values from one 32-bit lane of
// a register, so one instruction covers 4 values of 4 weight rows: no broadcast and (the operands being
// signed) no offset for Q8_0. Same interleaved layouts, same exact integer sums, same float32 scaling
// (dw * dx rounded, then one fused multiply-add): bit-identical to generic.
// The float kernels stay generic's, which the compiler vectorizes for NEON (ARMv8's baseline).
// Compiled only for aarch64 with -march=armv8.2-a+dotprod; dispatch.cpp builds the table after checking
// the CPU's HWCAP_ASIMDDP, so nothing here runs on a CPU without sdot.
#include <arm_neon.h>

#include <cmath>
#include <cstring>

#include "kernels/kernels.h"

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

// ---- K-quant rows (see kernels.h for the arithmetic every table follows) ------------------------------------

namespace {

inline float h2f(uint16_t h) {
  __fp16 f;
  std::memcpy(&f, &h, sizeof f);
  return static_cast<float>(f);
}

// The 6-bit scales and mins of a Q4_K/Q5_K super-block (as x86_avx2.cpp's unpack_scales_mins).
inline void unpack_scales_mins(const uint8_t* packed, uint8_t* sc, uint8_t* m) {
  uint32_t w[3];
  std::memcpy(w, packed, 12);
  const uint32_t sc_lo = w[0] & 0x3F3F3F3Fu, m_lo = w[1] & 0x3F3F3F3Fu;
  const uint32_t sc_hi = (w[2] & 0x0F0F0F0Fu) | (((w[0] >> 6) & 0x03030303u) << 4);
  const uint32_t m_hi = ((w[2] >> 4) & 0x0F0F0F0Fu) | (((w[1] >> 6) & 0x03030303u) << 4);
  std::memcpy(sc, &sc_lo, 4);
  std::memcpy(sc + 4, &sc_hi, 4);
  std::memcpy(m, &m_lo, 4);
  std::memcpy(m + 4, &m_hi, 4);
}

// Lanes j < 4 of the result: v[j]'s 4 lanes summed (pairwise adds: exact in integers).
inline int32x4_t sum_lanes4(const int32x4_t* v) {
  return vpaddq_s32(vpaddq_s32(v[0], v[1]), vpaddq_s32(v[2], v[3]));
}

// 8 bytes widened to two int32x4 (lanes 0-3, 4-7).
inline void widen8(const uint8_t* b, int32x4_t& lo, int32x4_t& hi) {
  const uint16x8_t h = vmovl_u8(vld1_u8(b));
  lo = vreinterpretq_s32_u32(vmovl_u16(vget_low_u16(h)));
  hi = vreinterpretq_s32_u32(vmovl_high_u16(h));
}

// ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)), as generic's kquant_lanes_sum.
inline float lanes_sum(float32x4_t lo, float32x4_t hi) {
  const float32x4_t s = vaddq_f32(lo, hi);
  const float32x2_t t = vadd_f32(vget_low_f32(s), vget_high_f32(s));
  return vget_lane_f32(t, 0) + vget_lane_f32(t, 1);
}

// Q4_K / Q5_K: the 8 sub-blocks' unsigned values (non-negative signed bytes for sdot) unpacked once per
// super-block, two registers of 16 each, and dotted with every activation row.
template <bool FIVE, int MR, class Block>
void dot_q45_k_mr(const Block* w, const int8_t* xq, const float* xd, const int32_t* xsum, int64_t nb, float* y,
                  int64_t ldy) {
  const uint8x16_t low4 = vdupq_n_u8(0x0F);
  float32x4_t acc[MR][2];
  for (int i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = vdupq_n_f32(0.0f);
  for (int64_t s = 0; s < nb / 8; ++s) {
    const Block& blk = w[s];
    int8x16_t q[8][2];
    for (int c = 0; c < 4; ++c)
      for (int k = 0; k < 2; ++k) {
        const uint8x16_t p = vld1q_u8(blk.qs + 32 * c + 16 * k);
        q[2 * c][k] = vreinterpretq_s8_u8(vandq_u8(p, low4));
        q[2 * c + 1][k] = vreinterpretq_s8_u8(vshrq_n_u8(p, 4));
      }
    if constexpr (FIVE) {
      // The fifth bit of sub-block j: bit j of qh[t] for its value t, worth 16.
      for (int k = 0; k < 2; ++k) {
        const uint8x16_t qh = vld1q_u8(blk.qh + 16 * k);
        for (int j = 0; j < 8; ++j) {
          const uint8x16_t bit = vtstq_u8(qh, vdupq_n_u8(static_cast<uint8_t>(1u << j)));
          q[j][k] = vreinterpretq_s8_u8(vorrq_u8(vreinterpretq_u8_s8(q[j][k]), vandq_u8(bit, vdupq_n_u8(16))));
        }
      }
    }
    alignas(8) uint8_t sc[8], m[8];
    unpack_scales_mins(blk.scales, sc, m);
    int32x4_t sc_lo, sc_hi, m_lo, m_hi;
    widen8(sc, sc_lo, sc_hi);
    widen8(m, m_lo, m_hi);
    const float d = h2f(blk.d), dmin = h2f(blk.dmin);
    for (int i = 0; i < MR; ++i) {
      const int64_t b0 = i * nb + 8 * s;
      const int8_t* x = xq + b0 * kQK;
      int32x4_t dot[8];
      for (int j = 0; j < 8; ++j) {
        const int32x4_t z = vdupq_n_s32(0);
        dot[j] = vdotq_s32(vdotq_s32(z, q[j][0], vld1q_s8(x + j * kQK)), q[j][1], vld1q_s8(x + j * kQK + 16));
      }
      const int32x4_t isum[2] = {vmulq_s32(sum_lanes4(dot), sc_lo), vmulq_s32(sum_lanes4(dot + 4), sc_hi)};
      const int32x4_t msum[2] = {vmulq_s32(vld1q_s32(xsum + b0), m_lo), vmulq_s32(vld1q_s32(xsum + b0 + 4), m_hi)};
      for (int h = 0; h < 2; ++h) {
        const float32x4_t dx = vld1q_f32(xd + b0 + 4 * h);
        acc[i][h] = vfmaq_f32(acc[i][h], vmulq_n_f32(dx, d), vcvtq_f32_s32(isum[h]));
        acc[i][h] = vfmsq_f32(acc[i][h], vmulq_n_f32(dx, dmin), vcvtq_f32_s32(msum[h]));
      }
    }
  }
  for (int i = 0; i < MR; ++i) y[i * ldy] = lanes_sum(acc[i][0], acc[i][1]);
}

// Q6_K: values q - 32 in [-32, 31] assembled per block of 32 (two registers: its two sub-blocks of 16),
// one sdot each, scaled by the sub-block's int8 scale in int32.
template <int MR>
void dot_q6_k_mr(const BlockQ6_K* w, const int8_t* xq, const float* xd, int64_t nb, float* y, int64_t ldy) {
  const uint8x16_t low4 = vdupq_n_u8(0x0F), top2 = vdupq_n_u8(0x30);
  const int8x16_t m32 = vdupq_n_s8(32);
  float32x4_t acc[MR][2];
  for (int i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = vdupq_n_f32(0.0f);
  for (int64_t s = 0; s < nb / 8; ++s) {
    const BlockQ6_K& blk = w[s];
    int8x16_t q[8][2];
    for (int h = 0; h < 2; ++h)
      for (int k = 0; k < 2; ++k) {
        const uint8x16_t l0 = vld1q_u8(blk.ql + 64 * h + 16 * k), l1 = vld1q_u8(blk.ql + 64 * h + 32 + 16 * k);
        const uint8x16_t hb = vld1q_u8(blk.qh + 32 * h + 16 * k);
        const uint8x16_t v[4] = {vorrq_u8(vandq_u8(l0, low4), vandq_u8(vshlq_n_u8(hb, 4), top2)),
                                 vorrq_u8(vandq_u8(l1, low4), vandq_u8(vshlq_n_u8(hb, 2), top2)),
                                 vorrq_u8(vshrq_n_u8(l0, 4), vandq_u8(hb, top2)),
                                 vorrq_u8(vshrq_n_u8(l1, 4), vandq_u8(vshrq_n_u8(hb, 2), top2))};
        for (int g = 0; g < 4; ++g) q[4 * h + g][k] = vsubq_s8(vreinterpretq_s8_u8(v[g]), m32);
      }
    const float d = h2f(blk.d);
    for (int i = 0; i < MR; ++i) {
      const int64_t b0 = i * nb + 8 * s;
      const int8_t* x = xq + b0 * kQK;
      int32x4_t dot[8];
      for (int j = 0; j < 8; ++j) {
        const int32x4_t z = vdupq_n_s32(0);
        const int32x4_t a = vdotq_s32(z, q[j][0], vld1q_s8(x + j * kQK));
        const int32x4_t b = vdotq_s32(z, q[j][1], vld1q_s8(x + j * kQK + 16));
        dot[j] = vmlaq_n_s32(vmulq_n_s32(a, blk.scales[2 * j]), b, blk.scales[2 * j + 1]);
      }
      const int32x4_t isum[2] = {sum_lanes4(dot), sum_lanes4(dot + 4)};
      for (int h = 0; h < 2; ++h)
        acc[i][h] = vfmaq_f32(acc[i][h], vmulq_n_f32(vld1q_f32(xd + b0 + 4 * h), d), vcvtq_f32_s32(isum[h]));
    }
  }
  for (int i = 0; i < MR; ++i) y[i * ldy] = lanes_sum(acc[i][0], acc[i][1]);
}

}  // namespace

void dot_q4_k_rows(const BlockQ4_K* w, const int8_t* xq, const float* xd, const int32_t* xsum, int64_t nb, float* y,
                   int64_t ldy, int mr) {
  switch (mr) {
    case 1: return dot_q45_k_mr<false, 1>(w, xq, xd, xsum, nb, y, ldy);
    case 2: return dot_q45_k_mr<false, 2>(w, xq, xd, xsum, nb, y, ldy);
    case 3: return dot_q45_k_mr<false, 3>(w, xq, xd, xsum, nb, y, ldy);
    default: return dot_q45_k_mr<false, 4>(w, xq, xd, xsum, nb, y, ldy);
  }
}

void dot_q5_k_rows(const BlockQ5_K* w, const int8_t* xq, const float* xd, const int32_t* xsum, int64_t nb, float* y,
                   int64_t ldy, int mr) {
  switch (mr) {
    case 1: return dot_q45_k_mr<true, 1>(w, xq, xd, xsum, nb, y, ldy);
    case 2: return dot_q45_k_mr<true, 2>(w, xq, xd, xsum, nb, y, ldy);
    case 3: return dot_q45_k_mr<true, 3>(w, xq, xd, xsum, nb, y, ldy);
    default: return dot_q45_k_mr<true, 4>(w, xq, xd, xsum, nb, y, ldy);
  }
}

void dot_q6_k_rows(const BlockQ6_K* w, const int8_t* xq, const float* xd, const int32_t* xsum, int64_t nb, float* y,
                   int64_t ldy, int mr) {
  (void)xsum;
  switch (mr) {
    case 1: return dot_q6_k_mr<1>(w, xq, xd, nb, y, ldy);
    case 2: return dot_q6_k_mr<2>(w, xq, xd, nb, y, ldy);
    case 3: return dot_q6_k_mr<3>(w, xq, xd, nb, y, ldy);
    default: return dot_q6_k_mr<4>(w, xq, xd, nb, y, ldy);
  }
}

}  // namespace neon
}  // namespace qvl
