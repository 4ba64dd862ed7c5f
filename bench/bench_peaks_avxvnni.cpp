// The AVX-VNNI peak, the reference point for the avxvnni kernel table: the VEX-encoded 256-bit vpdpbusd
// (4 u8 x s8 products added into each int32 lane) of CPUs with AVX-VNNI and no AVX-512 (Alder Lake and
// later Intel cores, AMD Zen 5). Compiled with AVX-VNNI flags (see CMakeLists.txt); skipped where the CPU
// lacks it.
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include "kernels/kernels.h"

namespace {

// 12 independent chains (ymm0-11) on two shared operands (ymm14, ymm15), written in assembly: with only 16
// YMM registers the compiler spills or merges such chains however they are spelled in C++. Enough chains
// to cover the instruction's latency at full issue rate. Ops: 4 multiplies + 4 adds per int32 lane.
void BM_PeakAvxVnni256(benchmark::State& state) {
  if (!qvl::avxvnni_kernels()) return state.SkipWithError("no AVX-VNNI");
  constexpr int kInner = 1000;
  for (auto _ : state) {
    int n = kInner;
    asm volatile(
        "vpcmpeqb %%ymm14, %%ymm14, %%ymm14\n\t"
        "vpabsb %%ymm14, %%ymm15\n\t"
        "1:\n\t"
        "%{vex%} vpdpbusd %%ymm14, %%ymm15, %%ymm0\n\t"
        "%{vex%} vpdpbusd %%ymm14, %%ymm15, %%ymm1\n\t"
        "%{vex%} vpdpbusd %%ymm14, %%ymm15, %%ymm2\n\t"
        "%{vex%} vpdpbusd %%ymm14, %%ymm15, %%ymm3\n\t"
        "%{vex%} vpdpbusd %%ymm14, %%ymm15, %%ymm4\n\t"
        "%{vex%} vpdpbusd %%ymm14, %%ymm15, %%ymm5\n\t"
        "%{vex%} vpdpbusd %%ymm14, %%ymm15, %%ymm6\n\t"
        "%{vex%} vpdpbusd %%ymm14, %%ymm15, %%ymm7\n\t"
        "%{vex%} vpdpbusd %%ymm14, %%ymm15, %%ymm8\n\t"
        "%{vex%} vpdpbusd %%ymm14, %%ymm15, %%ymm9\n\t"
        "%{vex%} vpdpbusd %%ymm14, %%ymm15, %%ymm10\n\t"
        "%{vex%} vpdpbusd %%ymm14, %%ymm15, %%ymm11\n\t"
        "dec %0\n\t"
        "jnz 1b\n\t"
        "vzeroupper"
        : "+r"(n)
        :
        : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm14",
          "xmm15", "cc");
  }
  state.counters["GOP/s"] = benchmark::Counter(
      8.0 * 8 * 12 * kInner, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kAvgThreadsRate,
      benchmark::Counter::kIs1000);
}
BENCHMARK(BM_PeakAvxVnni256)->ThreadRange(1, 2)->UseRealTime();

}  // namespace
