// The AVX-VNNI table (Intel from Alder Lake / Sapphire Rapids, AMD from Zen 5: the laptops and desktops
// without AVX-512): the AVX2 table with the integer GEMM tiles rewritten around the VEX-encoded 256-bit
// vpdpbusd, which multiplies 4 unsigned by 4 signed bytes and adds them into an int32 lane in one
// instruction where AVX2 needs sign + maddubs + madd + add. Same interleaved layouts, same exact integer
// sums, same float32 scaling: bit-identical to generic.
// Only these tiles live here; dispatch.cpp, compiled for baseline x86-64, builds the table, so nothing
// from this file runs before the CPU check.
#include <immintrin.h>

#include <cstring>

#include "kernels/x86_avxvnni.h"

namespace qvl {
namespace avxvnni {
namespace {

#include "kernels/x86_tile_helpers.h"

inline __m256 scales(const uint16_t* d) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(d))); }

// One block's int32 sums of a row tile turned into float and added: acc += (d_w * d_x) * (isum - offset).
inline __m256 finish(__m256 acc, __m256 dw, float dx, __m256i isum, int32_t offset) {
  const __m256i s = _mm256_sub_epi32(isum, _mm256_set1_epi32(offset));
  return _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_set1_ps(dx)), _mm256_cvtepi32_ps(s), acc);
}

// The unsigned operand of a Q8_0 chunk: w ^ 0x80 = w + 128 in [1, 255]; sum((w + 128) x) - 128 sum(x) =
// sum(w x) exactly. Q4_0 chunks: the nibbles u in [0, 15]; sum((u - 8) x) = sum(u x) - 8 sum(x).
struct Q8 {
  using Block = BlockQ8_0x8;
  static constexpr int32_t kOffset = 128;
  // Chunk t (of 8) of block b: 4 values of each of the 8 rows, and the activations they multiply.
  static __m256i chunk(const Block& b, int t, __m256i) {
    return _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 32 * t)),
                            _mm256_set1_epi8(static_cast<char>(0x80)));
  }
  static int x_offset(int t) { return 4 * t; }
};
struct Q4 {
  using Block = BlockQ4_0x8;
  static constexpr int32_t kOffset = 8;
  // Chunks 0-3 are the low nibbles of the 4 packed vectors (values 4s..4s+3), 4-7 the high ones (16+4s..).
  static __m256i chunk(const Block& b, int t, __m256i low4) {
    const __m256i packed = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 32 * (t & 3)));
    return t < 4 ? _mm256_and_si256(packed, low4) : _mm256_and_si256(_mm256_srli_epi16(packed, 4), low4);
  }
  static int x_offset(int t) { return t < 4 ? 4 * t : 16 + 4 * (t - 4); }
};

// One group (8 output columns), MR activation rows: each row's sums in two chains (even and odd chunks)
// so vpdpbusd's ~5-cycle latency is covered by 2 * MR independent additions.
template <class Q, int MR>
void gemm_x8(const typename Q::Block* w, const int8_t* xq, const float* xd, const int32_t* xsum, int64_t nb, float* y,
             int64_t ldy) {
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  __m256 acc[MR];
  for (int i = 0; i < MR; ++i) acc[i] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    __m256i s0[MR], s1[MR];
    for (int i = 0; i < MR; ++i) s0[i] = s1[i] = _mm256_setzero_si256();
    prefetch_ahead(w + b);
    for (int t = 0; t < 8; t += 2) {
      const __m256i u0 = Q::chunk(w[b], t, low4), u1 = Q::chunk(w[b], t + 1, low4);
      for (int i = 0; i < MR; ++i) {
        const int8_t* x = xq + (i * nb + b) * kQK;
        s0[i] = _mm256_dpbusd_avx_epi32(s0[i], u0, bcast4(x + Q::x_offset(t)));
        s1[i] = _mm256_dpbusd_avx_epi32(s1[i], u1, bcast4(x + Q::x_offset(t + 1)));
      }
    }
    const __m256 dw = scales(w[b].d);
    for (int i = 0; i < MR; ++i)
      acc[i] = finish(acc[i], dw, xd[i * nb + b], _mm256_add_epi32(s0[i], s1[i]), Q::kOffset * xsum[i * nb + b]);
  }
  for (int i = 0; i < MR; ++i) _mm256_storeu_ps(y + i * ldy, acc[i]);
}

// Two consecutive groups (16 output columns; w and w + nb): each broadcast of 4 activation values feeds
// both groups' vpdpbusd, so a row costs one broadcast per two instructions instead of one; the 2 * MR
// chains (one per row and group) cover the latency.
template <class Q, int MR>
void gemm_x16(const typename Q::Block* w, const int8_t* xq, const float* xd, const int32_t* xsum, int64_t nb, float* y,
              int64_t ldy) {
  const typename Q::Block* w2 = w + nb;
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  __m256 acc0[MR], acc1[MR];
  for (int i = 0; i < MR; ++i) acc0[i] = acc1[i] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    __m256i s0[MR], s1[MR];
    for (int i = 0; i < MR; ++i) s0[i] = s1[i] = _mm256_setzero_si256();
    prefetch_ahead(w + b);
    prefetch_ahead(w2 + b);
    for (int t = 0; t < 8; ++t) {
      const __m256i u0 = Q::chunk(w[b], t, low4), u1 = Q::chunk(w2[b], t, low4);
      for (int i = 0; i < MR; ++i) {
        const __m256i x = bcast4(xq + (i * nb + b) * kQK + Q::x_offset(t));
        s0[i] = _mm256_dpbusd_avx_epi32(s0[i], u0, x);
        s1[i] = _mm256_dpbusd_avx_epi32(s1[i], u1, x);
      }
    }
    const __m256 dw0 = scales(w[b].d), dw1 = scales(w2[b].d);
    for (int i = 0; i < MR; ++i) {
      const int32_t off = Q::kOffset * xsum[i * nb + b];
      acc0[i] = finish(acc0[i], dw0, xd[i * nb + b], s0[i], off);
      acc1[i] = finish(acc1[i], dw1, xd[i * nb + b], s1[i], off);
    }
  }
  for (int i = 0; i < MR; ++i) {
    _mm256_storeu_ps(y + i * ldy, acc0[i]);
    _mm256_storeu_ps(y + i * ldy + 8, acc1[i]);
  }
}

}  // namespace

// The table's entries: the tile for mr (1-4) rows.
#define QVL_AVXVNNI_TILE(NAME, Q, TILE)                                                                          \
  void NAME(const Q::Block* w, const int8_t* xq, const float* xd, const int32_t* xsum, int64_t nb, float* y,     \
            int64_t ldy, int mr) {                                                                               \
    switch (mr) {                                                                                                \
      case 1: return TILE<Q, 1>(w, xq, xd, xsum, nb, y, ldy);                                                    \
      case 2: return TILE<Q, 2>(w, xq, xd, xsum, nb, y, ldy);                                                    \
      case 3: return TILE<Q, 3>(w, xq, xd, xsum, nb, y, ldy);                                                    \
      default: return TILE<Q, 4>(w, xq, xd, xsum, nb, y, ldy);                                                   \
    }                                                                                                            \
  }

QVL_AVXVNNI_TILE(gemm_q8_0x8, Q8, gemm_x8)
QVL_AVXVNNI_TILE(gemm_q4_0x8, Q4, gemm_x8)
QVL_AVXVNNI_TILE(gemm_q8_0x16, Q8, gemm_x16)
QVL_AVXVNNI_TILE(gemm_q4_0x16, Q4, gemm_x16)
#undef QVL_AVXVNNI_TILE

// ---- K-quant GEMM tiles: x86_kquant_tiles.h with vpdpbusd (Q6_K's signed values keep maddubs) ---------

namespace {

struct VnniDot {
  using Part = __m256i;
  static __m256i zero() { return _mm256_setzero_si256(); }
  static __m256i part(__m256i acc, __m256i u, __m256i s) { return _mm256_dpbusd_avx_epi32(acc, u, s); }
  static __m256i flush(__m256i sum, __m256i acc) { return _mm256_add_epi32(sum, acc); }
};

#include "kernels/x86_kquant_tiles.h"

}  // namespace

void gemm_q4_kx8(const BlockQ4_Kx8* w, const int8_t* xq, const float* xd, const int32_t* xsum, int64_t nb, float* y,
                 int64_t ldy, int mr) {
  gemm_q4_kx8_t<VnniDot>(w, xq, xd, xsum, nb, y, ldy, mr);
}

void gemm_q5_kx8(const BlockQ5_Kx8* w, const int8_t* xq, const float* xd, const int32_t* xsum, int64_t nb, float* y,
                 int64_t ldy, int mr) {
  gemm_q5_kx8_t<VnniDot>(w, xq, xd, xsum, nb, y, ldy, mr);
}

}  // namespace avxvnni
}  // namespace qvl
