// The AVX-512 VNNI table (Ice Lake and later Intel, AMD Zen 4 and later): the AVX2 table with the
// integer GEMM tiles rewritten for two and four groups around vpdpbusd on 512-bit registers, which
// multiplies 4 unsigned by 4 signed bytes and adds them into an int32 lane in one instruction (AVX2 needs
// maddubs + madd + add, or a sign trick), with the same interleaved layouts, the same exact integer sums
// and the same float32 scaling: bit-identical to generic; and attention's float panel tile (6 rows x 64
// columns) and exp on 512-bit registers.
// Only these tiles live here; dispatch.cpp, compiled for baseline x86-64, builds the table, so nothing
// from this file runs before the CPU check.
#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "kernels/x86_avx512vnni.h"

namespace qvl {
namespace avx512vnni {
namespace {

#include "kernels/x86_tile_helpers.h"
#include "kernels/x86_avx512_exp.h"

// Two groups at once on 512-bit registers: lanes 0-7 are group g's rows, 8-15 group g+1's (the blocks of
// both, one 256-bit half each). Each row's sums run in two accumulators (even and odd chunks): vpdpbusd's
// latency is about 5 cycles, so 4 rows x 2 chains keep most of its throughput. A lone last group goes to
// the AVX2 table's one-group tile.
//
// Q8_0: w ^ 0x80 = w + 128 is the unsigned operand; sum((w + 128) x) - 128 sum(x) = sum(w x), exactly.
// Q4_0: the nibbles are the unsigned operand; sum((u - 8) x) = sum(u x) - 8 sum(x).
inline __m512i load_pair(const void* a, const void* b) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(static_cast<const __m256i*>(a))),
                            _mm256_loadu_si256(static_cast<const __m256i*>(b)), 1);
}

inline __m512 scales_pair(const uint16_t* a, const uint16_t* b) {
  return _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a))),
                                                 _mm_loadu_si128(reinterpret_cast<const __m128i*>(b)), 1));
}

inline __m512i bcast4_512(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

template <int MR>
void gemm_q8_0x16_mr(const BlockQ8_0x8* w, const int8_t* xq, const float* xd, const int32_t* xsum, int64_t nb,
                     float* y, int64_t ldy) {
  const BlockQ8_0x8* w2 = w + nb;
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512 acc[MR];
  for (int i = 0; i < MR; ++i) acc[i] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    __m512i s0[MR], s1[MR];
    for (int i = 0; i < MR; ++i) s0[i] = s1[i] = _mm512_setzero_si512();
    prefetch_ahead(w + b);
    prefetch_ahead(w2 + b);
    for (int t = 0; t < 8; t += 2) {
      const __m512i u0 = _mm512_xor_si512(load_pair(w[b].qs + 32 * t, w2[b].qs + 32 * t), flip);
      const __m512i u1 = _mm512_xor_si512(load_pair(w[b].qs + 32 * t + 32, w2[b].qs + 32 * t + 32), flip);
      for (int i = 0; i < MR; ++i) {
        const int8_t* x = xq + (i * nb + b) * kQK + 4 * t;
        s0[i] = _mm512_dpbusd_epi32(s0[i], u0, bcast4_512(x));
        s1[i] = _mm512_dpbusd_epi32(s1[i], u1, bcast4_512(x + 4));
      }
    }
    const __m512 dw = scales_pair(w[b].d, w2[b].d);
    for (int i = 0; i < MR; ++i) {
      const __m512i isum = _mm512_sub_epi32(_mm512_add_epi32(s0[i], s1[i]), _mm512_set1_epi32(128 * xsum[i * nb + b]));
      const __m512 scale = _mm512_mul_ps(dw, _mm512_set1_ps(xd[i * nb + b]));
      acc[i] = _mm512_fmadd_ps(scale, _mm512_cvtepi32_ps(isum), acc[i]);
    }
  }
  for (int i = 0; i < MR; ++i) _mm512_storeu_ps(y + i * ldy, acc[i]);
}

template <int MR>
void gemm_q4_0x16_mr(const BlockQ4_0x8* w, const int8_t* xq, const float* xd, const int32_t* xsum, int64_t nb,
                     float* y, int64_t ldy) {
  const BlockQ4_0x8* w2 = w + nb;
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  __m512 acc[MR];
  for (int i = 0; i < MR; ++i) acc[i] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    __m512i s0[MR], s1[MR];
    for (int i = 0; i < MR; ++i) s0[i] = s1[i] = _mm512_setzero_si512();
    prefetch_ahead(w + b);
    prefetch_ahead(w2 + b);
    for (int s = 0; s < 4; ++s) {
      const __m512i packed = load_pair(w[b].qs + 32 * s, w2[b].qs + 32 * s);
      const __m512i lo = _mm512_and_si512(packed, low4);
      const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(packed, 4), low4);
      for (int i = 0; i < MR; ++i) {
        const int8_t* x = xq + (i * nb + b) * kQK;
        s0[i] = _mm512_dpbusd_epi32(s0[i], lo, bcast4_512(x + 4 * s));
        s1[i] = _mm512_dpbusd_epi32(s1[i], hi, bcast4_512(x + 16 + 4 * s));
      }
    }
    const __m512 dw = scales_pair(w[b].d, w2[b].d);
    for (int i = 0; i < MR; ++i) {
      const __m512i isum = _mm512_sub_epi32(_mm512_add_epi32(s0[i], s1[i]), _mm512_set1_epi32(8 * xsum[i * nb + b]));
      const __m512 scale = _mm512_mul_ps(dw, _mm512_set1_ps(xd[i * nb + b]));
      acc[i] = _mm512_fmadd_ps(scale, _mm512_cvtepi32_ps(isum), acc[i]);
    }
  }
  for (int i = 0; i < MR; ++i) _mm512_storeu_ps(y + i * ldy, acc[i]);
}

// Four groups at once (32 columns: groups 0-1 in one register, 2-3 in another): each activation broadcast
// feeds two vpdpbusd instead of one. On Zen 5 the broadcasts, not the multiply-adds, bounded the two-group
// tile (with the activations hoisted out of the loop, which is wrong but shows the bound, it ran 24% faster).
// Per row 8 accumulators: 2 register pairs x even/odd chunks.
// The four-group tiles' end of a block: per row and register pair p, acc = fma(d_w * d_x, float(s_even +
// s_odd - kOffset * xsum), acc) (kOffset 128 for Q8_0's flipped weights, 8 for Q4_0's nibbles), the
// generic tile's operations in its order.
template <int kOffset, int MR>
inline void add_block_x32(const __m512i (&s)[2][2][MR], __m512 dw0, __m512 dw1, const float* xd, const int32_t* xsum,
                          int64_t nb, int64_t b, __m512 (&acc)[2][MR]) {
  for (int i = 0; i < MR; ++i) {
    const __m512i off = _mm512_set1_epi32(kOffset * xsum[i * nb + b]);
    const __m512 dx = _mm512_set1_ps(xd[i * nb + b]);
    const __m512i isum0 = _mm512_sub_epi32(_mm512_add_epi32(s[0][0][i], s[1][0][i]), off);
    const __m512i isum1 = _mm512_sub_epi32(_mm512_add_epi32(s[0][1][i], s[1][1][i]), off);
    acc[0][i] = _mm512_fmadd_ps(_mm512_mul_ps(dw0, dx), _mm512_cvtepi32_ps(isum0), acc[0][i]);
    acc[1][i] = _mm512_fmadd_ps(_mm512_mul_ps(dw1, dx), _mm512_cvtepi32_ps(isum1), acc[1][i]);
  }
}

template <int MR>
inline void store_x32(const __m512 (&acc)[2][MR], float* y, int64_t ldy) {
  for (int i = 0; i < MR; ++i) {
    _mm512_storeu_ps(y + i * ldy, acc[0][i]);
    _mm512_storeu_ps(y + i * ldy + 16, acc[1][i]);
  }
}

template <int MR>
void gemm_q8_0x32_mr(const BlockQ8_0x8* w, const int8_t* xq, const float* xd, const int32_t* xsum, int64_t nb,
                     float* y, int64_t ldy) {
  const BlockQ8_0x8 *w1 = w + nb, *w2 = w + 2 * nb, *w3 = w + 3 * nb;
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512 acc[2][MR];  // [register pair: columns 0-15, 16-31][row]
  for (int i = 0; i < MR; ++i) acc[0][i] = acc[1][i] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    __m512i s[2][2][MR];  // [chunk parity][register pair][row]
    for (int i = 0; i < MR; ++i) s[0][0][i] = s[0][1][i] = s[1][0][i] = s[1][1][i] = _mm512_setzero_si512();
    prefetch_ahead(w + b);
    prefetch_ahead(w1 + b);
    prefetch_ahead(w2 + b);
    prefetch_ahead(w3 + b);
#pragma GCC unroll 8
    for (int t = 0; t < 8; ++t) {
      const __m512i u = _mm512_xor_si512(load_pair(w[b].qs + 32 * t, w1[b].qs + 32 * t), flip);
      const __m512i v = _mm512_xor_si512(load_pair(w2[b].qs + 32 * t, w3[b].qs + 32 * t), flip);
      for (int i = 0; i < MR; ++i) {
        const __m512i x = bcast4_512(xq + (i * nb + b) * kQK + 4 * t);
        s[t & 1][0][i] = _mm512_dpbusd_epi32(s[t & 1][0][i], u, x);
        s[t & 1][1][i] = _mm512_dpbusd_epi32(s[t & 1][1][i], v, x);
      }
    }
    add_block_x32<128, MR>(s, scales_pair(w[b].d, w1[b].d), scales_pair(w2[b].d, w3[b].d), xd, xsum, nb, b, acc);
  }
  store_x32<MR>(acc, y, ldy);
}

template <int MR>
void gemm_q4_0x32_mr(const BlockQ4_0x8* w, const int8_t* xq, const float* xd, const int32_t* xsum, int64_t nb,
                     float* y, int64_t ldy) {
  const BlockQ4_0x8 *w1 = w + nb, *w2 = w + 2 * nb, *w3 = w + 3 * nb;
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  __m512 acc[2][MR];  // [register pair: columns 0-15, 16-31][row]
  for (int i = 0; i < MR; ++i) acc[0][i] = acc[1][i] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    __m512i s[2][2][MR];  // [low/high nibbles][register pair][row]
    for (int i = 0; i < MR; ++i) s[0][0][i] = s[0][1][i] = s[1][0][i] = s[1][1][i] = _mm512_setzero_si512();
    prefetch_ahead(w + b);
    prefetch_ahead(w1 + b);
    prefetch_ahead(w2 + b);
    prefetch_ahead(w3 + b);
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      const __m512i pu = load_pair(w[b].qs + 32 * c, w1[b].qs + 32 * c);
      const __m512i pv = load_pair(w2[b].qs + 32 * c, w3[b].qs + 32 * c);
      const __m512i ulo = _mm512_and_si512(pu, low4), vlo = _mm512_and_si512(pv, low4);
      for (int i = 0; i < MR; ++i) {
        const __m512i x = bcast4_512(xq + (i * nb + b) * kQK + 4 * c);
        s[0][0][i] = _mm512_dpbusd_epi32(s[0][0][i], ulo, x);
        s[0][1][i] = _mm512_dpbusd_epi32(s[0][1][i], vlo, x);
      }
      const __m512i uhi = _mm512_and_si512(_mm512_srli_epi16(pu, 4), low4);
      const __m512i vhi = _mm512_and_si512(_mm512_srli_epi16(pv, 4), low4);
      for (int i = 0; i < MR; ++i) {
        const __m512i x = bcast4_512(xq + (i * nb + b) * kQK + 16 + 4 * c);
        s[1][0][i] = _mm512_dpbusd_epi32(s[1][0][i], uhi, x);
        s[1][1][i] = _mm512_dpbusd_epi32(s[1][1][i], vhi, x);
      }
    }
    add_block_x32<8, MR>(s, scales_pair(w[b].d, w1[b].d), scales_pair(w2[b].d, w3[b].d), xd, xsum, nb, b, acc);
  }
  store_x32<MR>(acc, y, ldy);
}

}  // namespace

void gemm_q8_0x32(const BlockQ8_0x8* w, const int8_t* xq, const float* xd, const int32_t* xsum, int64_t nb, float* y,
                  int64_t ldy, int mr) {
  with_rows(mr, [&](auto r) { gemm_q8_0x32_mr<decltype(r)::value>(w, xq, xd, xsum, nb, y, ldy); });
}

void gemm_q4_0x32(const BlockQ4_0x8* w, const int8_t* xq, const float* xd, const int32_t* xsum, int64_t nb, float* y,
                  int64_t ldy, int mr) {
  with_rows(mr, [&](auto r) { gemm_q4_0x32_mr<decltype(r)::value>(w, xq, xd, xsum, nb, y, ldy); });
}

void gemm_q8_0x16(const BlockQ8_0x8* w, const int8_t* xq, const float* xd, const int32_t* xsum, int64_t nb, float* y,
                  int64_t ldy, int mr) {
  with_rows(mr, [&](auto r) { gemm_q8_0x16_mr<decltype(r)::value>(w, xq, xd, xsum, nb, y, ldy); });
}

void gemm_q4_0x16(const BlockQ4_0x8* w, const int8_t* xq, const float* xd, const int32_t* xsum, int64_t nb, float* y,
                  int64_t ldy, int mr) {
  with_rows(mr, [&](auto r) { gemm_q4_0x16_mr<decltype(r)::value>(w, xq, xd, xsum, nb, y, ldy); });
}

// exp_scaled_from (kernels.h): exp_scaled_from_16 storing the exponentials in place.
float exp_scaled_from(float* x, int64_t n, float scale, float* running_max) {
  return exp_scaled_from_16(x, n, scale, running_max,
                            [x](int64_t i, __m512 e, __mmask16 m) { _mm512_mask_storeu_ps(x + i, m, e); });
}

float exp_scaled(float* x, int64_t n, float scale) {
  float mx = -INFINITY;
  return exp_scaled_from(x, n, scale, &mx);
}

// f32_to_bf16 (kernels.h) 16 values at a time in integer arithmetic (bf16.h's rounding, so every table agrees
// bit for bit; AVX-512F only, no AVX512_BF16 needed), the tail through masks.
void f32_to_bf16(const float* x, uint16_t* out, int64_t n) {
  const __m512i one = _mm512_set1_epi32(1), half = _mm512_set1_epi32(0x7FFF), inf = _mm512_set1_epi32(0x7F800000),
                abs = _mm512_set1_epi32(0x7FFFFFFF), quiet = _mm512_set1_epi32(0x40);
  auto convert = [&](__m512i u) {
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, abs), inf);
    const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(half, _mm512_and_si512(_mm512_srli_epi32(u, 16), one))), 16);
    return _mm512_cvtepi32_epi16(_mm512_mask_or_epi32(rounded, nan, _mm512_srli_epi32(u, 16), quiet));
  };
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), convert(_mm512_castps_si512(_mm512_loadu_ps(x + i))));
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm256_mask_storeu_epi16(out + i, m, convert(_mm512_castps_si512(_mm512_maskz_loadu_ps(m, x + i))));
  }
}

// The float panel tile on 512-bit registers: MR rows of A times up to 64 columns of B (NV vectors of 16 per
// row, up to 24 accumulators of the 32 registers), one broadcast of a[i][t] per row and NV loads of b per
// step: each broadcast feeds NV FMAs (a 12 x 32 tile fed 2, and on Zen 5 the broadcasts bounded it). A
// panel narrower than NV vectors (nc < 16 NV) is read and written through masks; vectors wholly past nc
// are not computed (NV = ceil(nc / 16)).
template <int MR, int NV>
void nn_tile(const float* a, int64_t lda, const float* b, int64_t ldb, int64_t k, float* c, int64_t ldc,
             const __mmask16 (&m)[4]) {
  __m512 acc[MR][NV];
#pragma GCC unroll 6
  for (int i = 0; i < MR; ++i)
    for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_setzero_ps();
  for (int64_t t = 0; t < k; ++t) {
    __m512 bv[NV];
    for (int v = 0; v < NV; ++v) bv[v] = _mm512_maskz_loadu_ps(m[v], b + t * ldb + 16 * v);
#pragma GCC unroll 6
    for (int i = 0; i < MR; ++i) {
      const __m512 av = _mm512_set1_ps(a[i * lda + t]);
      for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_fmadd_ps(av, bv[v], acc[i][v]);
    }
  }
#pragma GCC unroll 6
  for (int i = 0; i < MR; ++i)
    for (int v = 0; v < NV; ++v) _mm512_mask_storeu_ps(c + i * ldc + 16 * v, m[v], acc[i][v]);
}

void gemm_f32_nn_tile(const float* a, int64_t lda, const float* b, int64_t ldb, int64_t k, float* c, int64_t ldc,
                      int mr, int nc) {
  using Fn = void (*)(const float*, int64_t, const float*, int64_t, int64_t, float*, int64_t, const __mmask16 (&)[4]);
#define QVL_NN_ROW(R) {nn_tile<R, 1>, nn_tile<R, 2>, nn_tile<R, 3>, nn_tile<R, 4>}
  static constexpr Fn kTiles[6][4] = {QVL_NN_ROW(1), QVL_NN_ROW(2), QVL_NN_ROW(3),
                                      QVL_NN_ROW(4), QVL_NN_ROW(5), QVL_NN_ROW(6)};
#undef QVL_NN_ROW
  __mmask16 m[4];
  for (int v = 0; v < 4; ++v) {
    const int n = nc - 16 * v;  // columns left for vector v: none, some (masked) or all 16
    m[v] = n <= 0 ? 0 : n >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << n) - 1);
  }
  kTiles[mr - 1][(nc + 15) / 16 - 1](a, lda, b, ldb, k, c, ldc, m);
}

// ---- K-quant GEMM tiles: x86_kquant_tiles.h with the EVEX 256-bit vpdpbusd ------------------------------

namespace {

struct Vnni256Dot {
  using Part = __m256i;
  static __m256i zero() { return _mm256_setzero_si256(); }
  static __m256i part(__m256i acc, __m256i u, __m256i s) { return _mm256_dpbusd_epi32(acc, u, s); }
  static __m256i flush(__m256i sum, __m256i acc) { return _mm256_add_epi32(sum, acc); }
};

#include "kernels/x86_kquant_tiles.h"

}  // namespace

namespace {

// Two groups at once on 512-bit registers (lanes 0-7: group g's rows, 8-15: group g + 1's; the second
// group's super-blocks start nb / 8 blocks after the first's), the same arithmetic lane by lane as two
// calls of the 8-row tile. Each row's sums run in two chains (even and odd chunks), as the Q4_0 tile's.

// Sub-block j's scales (or mins) of the 16 rows as float, from the groups' packed words (ScalesX8's bit
// moves on 16 lanes).
struct ScalesX16 {
  __m512i sc_lo, sc_hi, m_lo, m_hi;
  ScalesX16(const uint32_t (&a)[3][8], const uint32_t (&b)[3][8]) {
    const __m512i w0 = load_pair(a[0], b[0]), w1 = load_pair(a[1], b[1]), w2 = load_pair(a[2], b[2]);
    const __m512i m6 = _mm512_set1_epi32(0x3F3F3F3F), m4 = _mm512_set1_epi32(0x0F0F0F0F), m2 = _mm512_set1_epi32(0x03030303);
    sc_lo = _mm512_and_si512(w0, m6);
    m_lo = _mm512_and_si512(w1, m6);
    sc_hi = _mm512_or_si512(_mm512_and_si512(w2, m4), _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(w0, 6), m2), 4));
    m_hi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(w2, 4), m4),
                           _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(w1, 6), m2), 4));
  }
  static __m512 pick(__m512i lo, __m512i hi, int j) {
    const __m512i v = _mm512_srl_epi32(j < 4 ? lo : hi, _mm_cvtsi32_si128(8 * (j % 4)));
    return _mm512_cvtepi32_ps(_mm512_and_si512(v, _mm512_set1_epi32(0xFF)));
  }
};

template <bool FIVE, int MR, class Block>
void gemm_q45_kx16_mr(const Block* w, const int8_t* xq, const float* xd, const int32_t* xsum, int64_t nb, float* y,
                      int64_t ldy) {
  const Block* w2 = w + nb / 8;
  const __m512i low4 = _mm512_set1_epi8(0x0F), one = _mm512_set1_epi8(1);
  __m512 acc[MR];
  for (int i = 0; i < MR; ++i) acc[i] = _mm512_setzero_ps();
  for (int64_t s = 0; s < nb / 8; ++s) {
    const Block& a = w[s];
    const Block& b = w2[s];
    prefetch_ahead(w + s);
    prefetch_ahead(w2 + s);
    const __m512 d = scales_pair(a.d, b.d), dmin = scales_pair(a.dmin, b.dmin);
    const ScalesX16 sm(a.scales, b.scales);
    for (int j = 0; j < 8; ++j) {
      const size_t off = 32 * 8 * static_cast<size_t>(j / 2);
      __m512i s0[MR], s1[MR];
      for (int i = 0; i < MR; ++i) s0[i] = s1[i] = _mm512_setzero_si512();
      for (int t = 0; t < 8; ++t) {
        const __m512i packed = load_pair(a.qs + off + 32 * t, b.qs + off + 32 * t);
        __m512i v = _mm512_and_si512(j % 2 == 0 ? packed : _mm512_srli_epi16(packed, 4), low4);
        if constexpr (FIVE) {
          const __m512i qh = load_pair(a.qh + 32 * t, b.qh + 32 * t);
          v = _mm512_or_si512(v, _mm512_slli_epi16(_mm512_and_si512(_mm512_srl_epi16(qh, _mm_cvtsi32_si128(j)), one), 4));
        }
        for (int i = 0; i < MR; ++i) {
          const __m512i x = bcast4_512(xq + (i * nb + 8 * s + j) * kQK + 4 * t);
          if (t % 2 == 0) s0[i] = _mm512_dpbusd_epi32(s0[i], v, x);
          else s1[i] = _mm512_dpbusd_epi32(s1[i], v, x);
        }
      }
      const __m512 scf = ScalesX16::pick(sm.sc_lo, sm.sc_hi, j), mf = ScalesX16::pick(sm.m_lo, sm.m_hi, j);
      for (int i = 0; i < MR; ++i) {
        const int64_t bi = i * nb + 8 * s + j;
        const __m512 dx = _mm512_set1_ps(xd[bi]);
        const __m512i sum = _mm512_add_epi32(s0[i], s1[i]);
        acc[i] = _mm512_fmadd_ps(_mm512_mul_ps(d, dx), _mm512_mul_ps(_mm512_cvtepi32_ps(sum), scf), acc[i]);
        acc[i] = _mm512_fnmadd_ps(_mm512_mul_ps(dmin, dx), _mm512_mul_ps(mf, _mm512_set1_ps(static_cast<float>(xsum[bi]))),
                                  acc[i]);
      }
    }
  }
  for (int i = 0; i < MR; ++i) _mm512_storeu_ps(y + i * ldy, acc[i]);
}

// Q6_K: AVX-512 has no byte sign instruction, so the roles swap: the activations made unsigned (x + 128,
// by flipping the top bit) times the signed weights w = q - 32; sum((x + 128) w) - 128 sum(w) = sum(x w),
// with sum(w) per sub-block and row taken once per group (a vpdpbusd of 1s) for every activation row.
// (Unsigned q times x with 32 sum(x) taken off per row measured slower: 15.5 against 11.9 ms on the
// 210 x 6144 x 2048 product.)
template <int MR>
void gemm_q6_kx16_mr(const BlockQ6_Kx8* w, const int8_t* xq, const float* xd, int64_t nb, float* y, int64_t ldy) {
  const BlockQ6_Kx8* w2 = w + nb / 8;
  const __m512i low4 = _mm512_set1_epi8(0x0F), three = _mm512_set1_epi8(3), m32 = _mm512_set1_epi8(32);
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80)), ones = _mm512_set1_epi8(1);
  __m512 acc[MR];
  for (int i = 0; i < MR; ++i) acc[i] = _mm512_setzero_ps();
  for (int64_t s = 0; s < nb / 8; ++s) {
    const BlockQ6_Kx8& a = w[s];
    const BlockQ6_Kx8& b = w2[s];
    prefetch_ahead(w + s);
    prefetch_ahead(w2 + s);
    const __m512 d = scales_pair(a.d, b.d);
    for (int j = 0; j < 8; ++j) {
      const int h = j / 4, g = j % 4, e = g % 2;
      const size_t ql_off = 32 * 8 * static_cast<size_t>(2 * h + e), qh_off = 32 * 8 * static_cast<size_t>(h);
      const __m128i shift = _mm_cvtsi32_si128(2 * g);
      __m512i sum[MR];
      for (int i = 0; i < MR; ++i) sum[i] = _mm512_setzero_si512();
      for (int half = 0; half < 2; ++half) {
        const __m128i sc = _mm_unpacklo_epi64(
            _mm_loadl_epi64(reinterpret_cast<const __m128i*>(a.scales + 8 * (2 * j + half))),
            _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b.scales + 8 * (2 * j + half))));
        const __m512i scale = _mm512_cvtepi8_epi32(sc);
        __m512i wsum = _mm512_setzero_si512(), part[MR];
        for (int i = 0; i < MR; ++i) part[i] = _mm512_setzero_si512();
        for (int t = 4 * half; t < 4 * half + 4; ++t) {
          const __m512i lo = load_pair(a.ql + ql_off + 32 * t, b.ql + ql_off + 32 * t);
          const __m512i hb = load_pair(a.qh + qh_off + 32 * t, b.qh + qh_off + 32 * t);
          const __m512i low = _mm512_and_si512(g < 2 ? lo : _mm512_srli_epi16(lo, 4), low4);
          const __m512i top = _mm512_slli_epi16(_mm512_and_si512(_mm512_srl_epi16(hb, shift), three), 4);
          const __m512i wv = _mm512_sub_epi8(_mm512_or_si512(low, top), m32);
          wsum = _mm512_dpbusd_epi32(wsum, ones, wv);
          for (int i = 0; i < MR; ++i) {
            const __m512i x = _mm512_xor_si512(bcast4_512(xq + (i * nb + 8 * s + j) * kQK + 4 * t), flip);
            part[i] = _mm512_dpbusd_epi32(part[i], x, wv);
          }
        }
        const __m512i offset = _mm512_slli_epi32(wsum, 7);  // 128 sum(w)
        for (int i = 0; i < MR; ++i)
          sum[i] = _mm512_add_epi32(sum[i], _mm512_mullo_epi32(_mm512_sub_epi32(part[i], offset), scale));
      }
      for (int i = 0; i < MR; ++i) {
        const __m512 dx = _mm512_set1_ps(xd[i * nb + 8 * s + j]);
        acc[i] = _mm512_fmadd_ps(_mm512_mul_ps(d, dx), _mm512_cvtepi32_ps(sum[i]), acc[i]);
      }
    }
  }
  for (int i = 0; i < MR; ++i) _mm512_storeu_ps(y + i * ldy, acc[i]);
}

}  // namespace

void gemm_q4_kx16(const BlockQ4_Kx8* w, const int8_t* xq, const float* xd, const int32_t* xsum, int64_t nb, float* y,
                  int64_t ldy, int mr) {
  with_rows(mr, [&](auto rows) { gemm_q45_kx16_mr<false, decltype(rows)::value>(w, xq, xd, xsum, nb, y, ldy); });
}

void gemm_q5_kx16(const BlockQ5_Kx8* w, const int8_t* xq, const float* xd, const int32_t* xsum, int64_t nb, float* y,
                  int64_t ldy, int mr) {
  with_rows(mr, [&](auto rows) { gemm_q45_kx16_mr<true, decltype(rows)::value>(w, xq, xd, xsum, nb, y, ldy); });
}

void gemm_q6_kx16(const BlockQ6_Kx8* w, const int8_t* xq, const float* xd, const int32_t* xsum, int64_t nb, float* y,
                  int64_t ldy, int mr) {
  switch (mr) {
    // One activation row (decode): the 256-bit tile on each group reads a Q6_K LM head faster (7.3 against
    // 9.3 ms for 151936 x 2048), the per-group sum(w) not being shared by other rows.
    case 1: return two_kgroups<BlockQ6_Kx8, gemm_q6_kx8_256>(w, xq, xd, xsum, nb, y, ldy, 1);
    case 2: return gemm_q6_kx16_mr<2>(w, xq, xd, nb, y, ldy);
    case 3: return gemm_q6_kx16_mr<3>(w, xq, xd, nb, y, ldy);
    default: return gemm_q6_kx16_mr<4>(w, xq, xd, nb, y, ldy);
  }
}

void gemm_q4_kx8(const BlockQ4_Kx8* w, const int8_t* xq, const float* xd, const int32_t* xsum, int64_t nb, float* y,
                 int64_t ldy, int mr) {
  gemm_q4_kx8_t<Vnni256Dot>(w, xq, xd, xsum, nb, y, ldy, mr);
}

void gemm_q5_kx8(const BlockQ5_Kx8* w, const int8_t* xq, const float* xd, const int32_t* xsum, int64_t nb, float* y,
                 int64_t ldy, int mr) {
  gemm_q5_kx8_t<Vnni256Dot>(w, xq, xd, xsum, nb, y, ldy, mr);
}

void gemm_q6_kx8(const BlockQ6_Kx8* w, const int8_t* xq, const float* xd, const int32_t* xsum, int64_t nb, float* y,
                 int64_t ldy, int mr) {
  gemm_q6_kx8_256(w, xq, xd, xsum, nb, y, ldy, mr);
}

}  // namespace avx512vnni

}  // namespace qvl
