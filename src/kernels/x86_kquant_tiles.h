// The K-quant GEMM tiles (kernels.h: gemm_q4_kx8, gemm_q5_kx8, gemm_q6_kx8) on 256-bit registers, for the
// x86 tables: included by x86_avx2.cpp, x86_avxvnni.cpp and x86_avx512vnni.cpp inside their own anonymous
// namespaces, so each gets a copy compiled with its own flags (internal linkage: no ODR trap). The
// includer supplies DOT, the exact int32 sums of 4 unsigned weight bytes times 4 signed activation bytes
// per lane (AVX2: maddubs into int16 pairs, flushed to int32 by madd every 4 chunks; VNNI: vpdpbusd), and
// the helpers bcast4 and prefetch_ahead; it includes <immintrin.h>, <cstring> and kernels/kernels.h first.
//
// Layouts (tensor/quant.h): each 32-byte load holds 4 consecutive values of each of the group's 8 rows, so
// the int32 lanes are the 8 rows' sums; per block of 32 the scaling is vectorized over the rows. The
// products by the 6-bit scale and min are done in float on exact integers below 2^24 (float(sc) *
// float(dot) == float(sc * dot)), which is what kernels.h's integer definition gives.
#pragma once

// Row c's sub-block scales and mins: lane c of these four vectors holds bytes 0-3 (sub-blocks 0-3) and 4-7.
struct ScalesX8 {
  __m256i sc_lo, sc_hi, m_lo, m_hi;
  explicit ScalesX8(const uint32_t (&w)[3][8]) {
    const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[0]));
    const __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[1]));
    const __m256i w2 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[2]));
    const __m256i m6 = _mm256_set1_epi32(0x3F3F3F3F), m4 = _mm256_set1_epi32(0x0F0F0F0F), m2 = _mm256_set1_epi32(0x03030303);
    sc_lo = _mm256_and_si256(w0, m6);
    m_lo = _mm256_and_si256(w1, m6);
    sc_hi = _mm256_or_si256(_mm256_and_si256(w2, m4), _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(w0, 6), m2), 4));
    m_hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(w2, 4), m4),
                           _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(w1, 6), m2), 4));
  }
  // Sub-block j's scale (or min) of the 8 rows as float.
  static __m256 pick(__m256i lo, __m256i hi, int j) {
    const __m256i v = j < 4 ? lo : hi;
    const __m128i count = _mm_cvtsi32_si128(8 * (j % 4));
    return _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srl_epi32(v, count), _mm256_set1_epi32(0xFF)));
  }
};

template <class DOT, bool FIVE, int MR, class Block>
void gemm_q45_kx8_mr(const Block* w, const int8_t* xq, const float* xd, const int32_t* xsum, int64_t nb, float* y,
                     int64_t ldy) {
  const __m256i low4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
  __m256 acc[MR];
  for (int i = 0; i < MR; ++i) acc[i] = _mm256_setzero_ps();
  for (int64_t s = 0; s < nb / 8; ++s) {
    const Block& blk = w[s];
    prefetch_ahead(w + s);
    const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.d)));
    const __m256 dmin = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.dmin)));
    const ScalesX8 sm(blk.scales);
    for (int j = 0; j < 8; ++j) {
      const uint8_t* qs = blk.qs + 32 * 8 * (j / 2);
      __m256i sum[MR];
      for (int i = 0; i < MR; ++i) sum[i] = _mm256_setzero_si256();
      for (int half = 0; half < 2; ++half) {
        typename DOT::Part part[MR];
        for (int i = 0; i < MR; ++i) part[i] = DOT::zero();
        for (int t = 4 * half; t < 4 * half + 4; ++t) {
          const __m256i packed = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * t));
          __m256i v = _mm256_and_si256(j % 2 == 0 ? packed : _mm256_srli_epi16(packed, 4), low4);
          if constexpr (FIVE) {
            const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qh + 32 * t));
            const __m256i bit = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(j)), one);
            v = _mm256_or_si256(v, _mm256_slli_epi16(bit, 4));
          }
          for (int i = 0; i < MR; ++i) part[i] = DOT::part(part[i], v, bcast4(xq + (i * nb + 8 * s + j) * kQK + 4 * t));
        }
        for (int i = 0; i < MR; ++i) sum[i] = DOT::flush(sum[i], part[i]);
      }
      const __m256 scf = ScalesX8::pick(sm.sc_lo, sm.sc_hi, j), mf = ScalesX8::pick(sm.m_lo, sm.m_hi, j);
      for (int i = 0; i < MR; ++i) {
        const int64_t b = i * nb + 8 * s + j;
        const __m256 dx = _mm256_set1_ps(xd[b]);
        acc[i] = _mm256_fmadd_ps(_mm256_mul_ps(d, dx), _mm256_mul_ps(_mm256_cvtepi32_ps(sum[i]), scf), acc[i]);
        acc[i] = _mm256_fnmadd_ps(_mm256_mul_ps(dmin, dx), _mm256_mul_ps(mf, _mm256_set1_ps(static_cast<float>(xsum[b]))),
                                  acc[i]);
      }
    }
  }
  for (int i = 0; i < MR; ++i) _mm256_storeu_ps(y + i * ldy, acc[i]);
}

// Q6_K: per block the 6-bit values q are assembled for the 8 rows, w = q - 32 in [-32, 31] is multiplied
// signed by signed with maddubs(|w|, sign(x, w)) (a pair at most 2 * 32 * 127, four chunks 32512: int16),
// and madd by each row's sub-block scale (an int16 pair per lane) gives the scaled sums in int32.
template <int MR>
void gemm_q6_kx8_mr(const BlockQ6_Kx8* w, const int8_t* xq, const float* xd, int64_t nb, float* y, int64_t ldy) {
  const __m256i low4 = _mm256_set1_epi8(0x0F), three = _mm256_set1_epi8(3), m32 = _mm256_set1_epi8(32);
  __m256 acc[MR];
  for (int i = 0; i < MR; ++i) acc[i] = _mm256_setzero_ps();
  for (int64_t s = 0; s < nb / 8; ++s) {
    const BlockQ6_Kx8& blk = w[s];
    prefetch_ahead(w + s);
    const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.d)));
    for (int j = 0; j < 8; ++j) {
      const int h = j / 4, g = j % 4, e = g % 2;
      const uint8_t* ql = blk.ql + 32 * 8 * (2 * h + e);
      const uint8_t* qhp = blk.qh + 32 * 8 * h;
      const __m128i shift = _mm_cvtsi32_si128(2 * g);
      __m256i sum[MR];
      for (int i = 0; i < MR; ++i) sum[i] = _mm256_setzero_si256();
      for (int half = 0; half < 2; ++half) {
        __m128i sc8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk.scales + 8 * (2 * j + half)));
        const __m256i scale = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(sc8, sc8));  // row c's scale twice per lane
        __m256i part[MR];
        for (int i = 0; i < MR; ++i) part[i] = _mm256_setzero_si256();
        for (int t = 4 * half; t < 4 * half + 4; ++t) {
          const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 32 * t));
          const __m256i hb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qhp + 32 * t));
          const __m256i low = _mm256_and_si256(g < 2 ? lo : _mm256_srli_epi16(lo, 4), low4);
          const __m256i top = _mm256_slli_epi16(_mm256_and_si256(_mm256_srl_epi16(hb, shift), three), 4);
          const __m256i wv = _mm256_sub_epi8(_mm256_or_si256(low, top), m32);
          const __m256i wa = _mm256_abs_epi8(wv);
          for (int i = 0; i < MR; ++i) {
            const __m256i x = bcast4(xq + (i * nb + 8 * s + j) * kQK + 4 * t);
            part[i] = _mm256_add_epi16(part[i], _mm256_maddubs_epi16(wa, _mm256_sign_epi8(x, wv)));
          }
        }
        for (int i = 0; i < MR; ++i) sum[i] = _mm256_add_epi32(sum[i], _mm256_madd_epi16(part[i], scale));
      }
      for (int i = 0; i < MR; ++i) {
        const __m256 dx = _mm256_set1_ps(xd[i * nb + 8 * s + j]);
        acc[i] = _mm256_fmadd_ps(_mm256_mul_ps(d, dx), _mm256_cvtepi32_ps(sum[i]), acc[i]);
      }
    }
  }
  for (int i = 0; i < MR; ++i) _mm256_storeu_ps(y + i * ldy, acc[i]);
}

template <class DOT>
void gemm_q4_kx8_t(const BlockQ4_Kx8* w, const int8_t* xq, const float* xd, const int32_t* xsum, int64_t nb, float* y,
                   int64_t ldy, int mr) {
  with_rows(mr, [&](auto rows) { gemm_q45_kx8_mr<DOT, false, decltype(rows)::value>(w, xq, xd, xsum, nb, y, ldy); });
}

template <class DOT>
void gemm_q5_kx8_t(const BlockQ5_Kx8* w, const int8_t* xq, const float* xd, const int32_t* xsum, int64_t nb, float* y,
                   int64_t ldy, int mr) {
  with_rows(mr, [&](auto rows) { gemm_q45_kx8_mr<DOT, true, decltype(rows)::value>(w, xq, xd, xsum, nb, y, ldy); });
}

inline void gemm_q6_kx8_256(const BlockQ6_Kx8* w, const int8_t* xq, const float* xd, const int32_t* xsum, int64_t nb,
                            float* y, int64_t ldy, int mr) {
  (void)xsum;
  with_rows(mr, [&](auto rows) { gemm_q6_kx8_mr<decltype(rows)::value>(w, xq, xd, nb, y, ldy); });
}
