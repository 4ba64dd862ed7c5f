// The AVX-512 peaks, reference points for the avx512vnni kernel table: float32 FMA on 512-bit registers and
// the vpdpbusd int8 dot (4 u8 x s8 products added into each int32 lane) on 256- and 512-bit registers.
// Compiled with AVX-512 flags (see CMakeLists.txt); skipped where the CPU or OS lacks them.
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include "kernels/kernels.h"

namespace {

// 12 independent chains in named registers (FMA latency 4 cycles on 2 ports needs at least 8).
void BM_PeakFmaF32_512(benchmark::State& state) {
  if (!qvl::avx512vnni_kernels()) return state.SkipWithError("no AVX-512 VNNI");
  __m512 a0 = _mm512_set1_ps(1.0f), a1 = _mm512_set1_ps(1.1f), a2 = _mm512_set1_ps(1.2f), a3 = _mm512_set1_ps(1.3f),
         a4 = _mm512_set1_ps(1.4f), a5 = _mm512_set1_ps(1.5f), a6 = _mm512_set1_ps(1.6f), a7 = _mm512_set1_ps(1.7f),
         a8 = _mm512_set1_ps(1.8f), a9 = _mm512_set1_ps(1.9f), a10 = _mm512_set1_ps(2.0f), a11 = _mm512_set1_ps(2.1f);
  const __m512 b = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
  constexpr int kInner = 1000;
  for (auto _ : state) {
    for (int r = 0; r < kInner; ++r) {
      a0 = _mm512_fmadd_ps(a0, b, c); a1 = _mm512_fmadd_ps(a1, b, c); a2 = _mm512_fmadd_ps(a2, b, c);
      a3 = _mm512_fmadd_ps(a3, b, c); a4 = _mm512_fmadd_ps(a4, b, c); a5 = _mm512_fmadd_ps(a5, b, c);
      a6 = _mm512_fmadd_ps(a6, b, c); a7 = _mm512_fmadd_ps(a7, b, c); a8 = _mm512_fmadd_ps(a8, b, c);
      a9 = _mm512_fmadd_ps(a9, b, c); a10 = _mm512_fmadd_ps(a10, b, c); a11 = _mm512_fmadd_ps(a11, b, c);
    }
  }
  const __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                                 _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)),
                                               _mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11))));
  benchmark::DoNotOptimize(s);
  state.counters["GFLOP/s"] = benchmark::Counter(
      2.0 * 16 * 12 * kInner, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kAvgThreadsRate,
      benchmark::Counter::kIs1000);
}
BENCHMARK(BM_PeakFmaF32_512)->ThreadRange(1, 2)->UseRealTime();

// vpdpbusd on 12 independent chains with register operands (distinct per chain, so nothing is shared or
// hoisted): enough chains to cover its latency at full issue rate. Ops: 4 multiplies + 4 adds per int32 lane.
template <class V, int kLanes>
void peak_vnni(benchmark::State& state) {
  if (!qvl::avx512vnni_kernels()) return state.SkipWithError("no AVX-512 VNNI");
  V c[12], u[12];
  for (int i = 0; i < 12; ++i) {
    if constexpr (kLanes == 8) {
      c[i] = _mm256_setzero_si256();
      u[i] = _mm256_set1_epi8(static_cast<char>(i + 1));
    } else {
      c[i] = _mm512_setzero_si512();
      u[i] = _mm512_set1_epi8(static_cast<char>(i + 1));
    }
  }
  constexpr int kInner = 1000;
  for (auto _ : state) {
    for (int r = 0; r < kInner; ++r) {
#pragma GCC unroll 12
      for (int i = 0; i < 12; ++i) {
        if constexpr (kLanes == 8)
          c[i] = _mm256_dpbusd_epi32(c[i], u[i], u[11 - i]);
        else
          c[i] = _mm512_dpbusd_epi32(c[i], u[i], u[11 - i]);
      }
    }
  }
  for (auto& v : c) benchmark::DoNotOptimize(v);
  state.counters["GOP/s"] = benchmark::Counter(
      8.0 * kLanes * 12 * kInner, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kAvgThreadsRate,
      benchmark::Counter::kIs1000);
}
void BM_PeakVnni256(benchmark::State& state) { peak_vnni<__m256i, 8>(state); }
void BM_PeakVnni512(benchmark::State& state) { peak_vnni<__m512i, 16>(state); }
BENCHMARK(BM_PeakVnni256)->ThreadRange(1, 2)->UseRealTime();
BENCHMARK(BM_PeakVnni512)->ThreadRange(1, 2)->UseRealTime();

}  // namespace
