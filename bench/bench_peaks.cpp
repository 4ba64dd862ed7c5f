// The machine's measured peaks, the reference points for every kernel: float32 FMA throughput, int8 dot
// throughput (maddubs + madd + add, as the quantized kernels use) and memory read bandwidth. Compiled
// with AVX2 flags (see CMakeLists.txt); skipped where the CPU lacks AVX2.
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <vector>

#include "kernels/kernels.h"
#include "util/thread_pool.h"

namespace {

// 12 independent FMA chains: enough to cover FMA latency (4) x 2 ports with room to spare.
void BM_PeakFmaF32(benchmark::State& state) {
  if (!qvl::avx2_kernels()) return state.SkipWithError("no AVX2");
  __m256 a[12];
  for (int i = 0; i < 12; ++i) a[i] = _mm256_set1_ps(1.0f + i * 1e-3f);
  const __m256 b = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
  constexpr int kInner = 1000;
  for (auto _ : state) {
    for (int r = 0; r < kInner; ++r)
      for (int i = 0; i < 12; ++i) a[i] = _mm256_fmadd_ps(a[i], b, c);
    for (int i = 0; i < 12; ++i) benchmark::DoNotOptimize(a[i]);
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * 8 * 12 * kInner, benchmark::Counter::kIsIterationInvariantRate |
                                                                          benchmark::Counter::kAvgThreadsRate,
                                                 benchmark::Counter::kIs1000);
}
BENCHMARK(BM_PeakFmaF32)->ThreadRange(1, 2)->UseRealTime();

// int8 dot products: 32 multiply-adds per maddubs on 8 independent chains.
void BM_PeakInt8Dot(benchmark::State& state) {
  if (!qvl::avx2_kernels()) return state.SkipWithError("no AVX2");
  __m256i acc[8];
  for (int i = 0; i < 8; ++i) acc[i] = _mm256_setzero_si256();
  const __m256i x = _mm256_set1_epi8(3), y = _mm256_set1_epi8(-2), ones = _mm256_set1_epi16(1);
  constexpr int kInner = 1000;
  for (auto _ : state) {
    for (int r = 0; r < kInner; ++r)
      for (int i = 0; i < 8; ++i)
        acc[i] = _mm256_add_epi32(acc[i], _mm256_madd_epi16(_mm256_maddubs_epi16(x, y), ones));
    for (int i = 0; i < 8; ++i) benchmark::DoNotOptimize(acc[i]);
  }
  // 32 multiplies + 32 adds per maddubs/madd/add triple.
  state.counters["GOP/s"] = benchmark::Counter(64.0 * 8 * kInner, benchmark::Counter::kIsIterationInvariantRate |
                                                                     benchmark::Counter::kAvgThreadsRate,
                                               benchmark::Counter::kIs1000);
}
BENCHMARK(BM_PeakInt8Dot)->ThreadRange(1, 2)->UseRealTime();

// Streaming reads of a 1 GiB buffer split between the threads.
void BM_MemoryRead(benchmark::State& state) {
  static std::vector<__m256i> buf(size_t{1} << 25, _mm256_set1_epi32(1));  // 1 GiB
  const size_t n = buf.size(), per = n / static_cast<size_t>(state.threads()), begin = per * static_cast<size_t>(state.thread_index());
  for (auto _ : state) {
    __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0;
    for (size_t i = begin; i + 4 <= begin + per; i += 4) {
      s0 = _mm256_add_epi32(s0, _mm256_load_si256(&buf[i]));
      s1 = _mm256_add_epi32(s1, _mm256_load_si256(&buf[i + 1]));
      s2 = _mm256_add_epi32(s2, _mm256_load_si256(&buf[i + 2]));
      s3 = _mm256_add_epi32(s3, _mm256_load_si256(&buf[i + 3]));
    }
    benchmark::DoNotOptimize(_mm256_add_epi32(_mm256_add_epi32(s0, s1), _mm256_add_epi32(s2, s3)));
  }
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(per * sizeof(__m256i)),
                                              benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kAvgThreadsRate,
                                              benchmark::Counter::kIs1000);
}
BENCHMARK(BM_MemoryRead)->ThreadRange(1, 2)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace
