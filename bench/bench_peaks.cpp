// The machine's measured peaks, the reference points for every kernel: float32 FMA throughput, int8 dot
// throughput (maddubs + madd + add, as the quantized kernels use) and memory read bandwidth. Compiled
// with AVX2 flags (see CMakeLists.txt); skipped where the CPU lacks AVX2.
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <vector>

#include "kernels/kernels.h"
#include "util/thread_pool.h"

namespace {

// 10 independent FMA chains in named registers: enough to cover FMA latency (4 cycles) on 2 ports.
void BM_PeakFmaF32(benchmark::State& state) {
  if (!qvl::avx2_kernels()) return state.SkipWithError("no AVX2");
  __m256 a0 = _mm256_set1_ps(1.0f), a1 = _mm256_set1_ps(1.1f), a2 = _mm256_set1_ps(1.2f), a3 = _mm256_set1_ps(1.3f),
         a4 = _mm256_set1_ps(1.4f), a5 = _mm256_set1_ps(1.5f), a6 = _mm256_set1_ps(1.6f), a7 = _mm256_set1_ps(1.7f),
         a8 = _mm256_set1_ps(1.8f), a9 = _mm256_set1_ps(1.9f);
  const __m256 b = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
  constexpr int kInner = 1000;
  for (auto _ : state) {
    for (int r = 0; r < kInner; ++r) {
      a0 = _mm256_fmadd_ps(a0, b, c); a1 = _mm256_fmadd_ps(a1, b, c); a2 = _mm256_fmadd_ps(a2, b, c);
      a3 = _mm256_fmadd_ps(a3, b, c); a4 = _mm256_fmadd_ps(a4, b, c); a5 = _mm256_fmadd_ps(a5, b, c);
      a6 = _mm256_fmadd_ps(a6, b, c); a7 = _mm256_fmadd_ps(a7, b, c); a8 = _mm256_fmadd_ps(a8, b, c);
      a9 = _mm256_fmadd_ps(a9, b, c);
    }
  }
  __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                           _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(_mm256_add_ps(a6, a7), _mm256_add_ps(a8, a9))));
  benchmark::DoNotOptimize(s);
  // The threads:N row is the N threads together (iterations are counted over all threads).
  state.counters["GFLOP/s"] = benchmark::Counter(
      2.0 * 8 * 10 * kInner, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kAvgThreadsRate,
      benchmark::Counter::kIs1000);
}
BENCHMARK(BM_PeakFmaF32)->ThreadRange(1, 2)->UseRealTime();

// int8 dot products as the quantized kernels run them: maddubs (32 u8 x s8 products, pairwise summed) +
// madd with ones + add, on 6 independent chains. Written in assembly: with intrinsics the compiler saw that
// maddubs's operands never change and hoisted both multiplies out of the loop, so this measured the adds
// alone (until 2026-12-06: ~2x the true peak on a Zen 2; BENCHMARKS.md).
void BM_PeakInt8Dot(benchmark::State& state) {
  if (!qvl::avx2_kernels()) return state.SkipWithError("no AVX2");
  constexpr int kInner = 1000;
  for (auto _ : state) {
    int64_t n = kInner;
    asm volatile(
        "vpcmpeqb %%ymm15, %%ymm15, %%ymm15\n\t"
        "vpabsb %%ymm15, %%ymm14\n\t"        // u8 ones
        "vpabsw %%ymm15, %%ymm13\n\t"        // int16 ones, madd's second operand
        "1:\n\t"
        "vpmaddubsw %%ymm15, %%ymm14, %%ymm6\n\t"
        "vpmaddubsw %%ymm15, %%ymm14, %%ymm7\n\t"
        "vpmaddubsw %%ymm15, %%ymm14, %%ymm8\n\t"
        "vpmaddubsw %%ymm15, %%ymm14, %%ymm9\n\t"
        "vpmaddubsw %%ymm15, %%ymm14, %%ymm10\n\t"
        "vpmaddubsw %%ymm15, %%ymm14, %%ymm11\n\t"
        "vpmaddwd %%ymm13, %%ymm6, %%ymm6\n\t"
        "vpmaddwd %%ymm13, %%ymm7, %%ymm7\n\t"
        "vpmaddwd %%ymm13, %%ymm8, %%ymm8\n\t"
        "vpmaddwd %%ymm13, %%ymm9, %%ymm9\n\t"
        "vpmaddwd %%ymm13, %%ymm10, %%ymm10\n\t"
        "vpmaddwd %%ymm13, %%ymm11, %%ymm11\n\t"
        "vpaddd %%ymm6, %%ymm0, %%ymm0\n\t"
        "vpaddd %%ymm7, %%ymm1, %%ymm1\n\t"
        "vpaddd %%ymm8, %%ymm2, %%ymm2\n\t"
        "vpaddd %%ymm9, %%ymm3, %%ymm3\n\t"
        "vpaddd %%ymm10, %%ymm4, %%ymm4\n\t"
        "vpaddd %%ymm11, %%ymm5, %%ymm5\n\t"
        "dec %0\n\t"
        "jnz 1b\n\t"
        "vzeroupper"
        : "+r"(n)
        :
        : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm13",
          "xmm14", "xmm15", "cc");
  }
  // 32 multiplies + 32 adds per maddubs/madd/add triple.
  state.counters["GOP/s"] = benchmark::Counter(
      64.0 * 6 * kInner, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kAvgThreadsRate,
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
