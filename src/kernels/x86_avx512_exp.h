// exp(x) for 16 floats on 512-bit registers (AVX-512F only), for x86_avx512vnni.cpp and x86_avx512bf16.cpp.
// Included inside each file's own anonymous namespace, as x86_tile_helpers.h is: each gets a copy compiled with
// its own flags and internal linkage. The includer includes <immintrin.h> and <cstdint> first.
#pragma once

// exp(x) for 16 floats: the AVX2 table's exp8 (range reduction with ln2 in two parts, the same degree-7
// polynomial) on 512-bit registers, with 2^n applied by vscalefps (no masks or exponent arithmetic, 5
// instructions fewer than exp8). x is clamped to [-104, 88.7] first (so -inf gives 0, not NaN): below -87.3
// the results are denormals (exp8 flushes them to 0), down to 0 at -104; from 88.7 up, about 3.3e38 (exp8: +inf).
// Softmax never reaches either end's difference (its exponents are <= 0, and values below 1e-38 vanish in its
// sums), but the text path's attention bits may differ from builds before 2026-12-06 where a probability was
// below FLT_MIN.
inline __m512 exp16(__m512 x) {
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-104.0f)), _mm512_set1_ps(88.7f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(p, n);
}

// The online softmax step of exp_scaled_from (kernels.h) 16 values at a time, the tail through masks: the new
// running max, each exponential handed to store(i, e, mask) (mask: the lanes that are values), their sum
// returned. The float32 table stores them in place; the bf16 one converts them first.
template <class Store>
float exp_scaled_from_16(const float* x, int64_t n, float scale, float* running_max, Store store) {
  const __m512 sv = _mm512_set1_ps(scale);
  __m512 mv = _mm512_set1_ps(*running_max);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) mv = _mm512_max_ps(mv, _mm512_mul_ps(_mm512_loadu_ps(x + i), sv));
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    mv = _mm512_mask_max_ps(mv, m, mv, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), sv));
  }
  const float mx = _mm512_reduce_max_ps(mv);
  const __m512 mxv = _mm512_set1_ps(mx);
  __m512 sumv = _mm512_setzero_ps();
  for (i = 0; i + 16 <= n; i += 16) {
    const __m512 e = exp16(_mm512_fmsub_ps(_mm512_loadu_ps(x + i), sv, mxv));
    store(i, e, static_cast<__mmask16>(0xFFFF));
    sumv = _mm512_add_ps(sumv, e);
  }
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512 e = _mm512_maskz_mov_ps(m, exp16(_mm512_fmsub_ps(_mm512_maskz_loadu_ps(m, x + i), sv, mxv)));
    store(i, e, m);
    sumv = _mm512_add_ps(sumv, e);
  }
  *running_max = mx;
  return _mm512_reduce_add_ps(sumv);
}
