// The AMX peaks, reference points for the amx kernel table: TDPBSSD (signed int8, 4 products added into
// each int32 of C) on tiles kept in registers, at the full tile shape (C 16 x 16 int32, K 64 bytes) and at
// the panel GEMMs' shape (K 32 bytes: one quantization block per product). Four C tiles from two A and two
// B tiles, so consecutive products do not wait on each other. Compiled with AMX flags (see CMakeLists.txt);
// skipped where the CPU, the OS or the kernel's permission is missing (the amx table's own checks).
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include "kernels/amx_tiles.h"
#include "kernels/kernels.h"

namespace {

void peak_amx(benchmark::State& state, int kbytes) {
  if (!qvl::amx_kernels()) return state.SkipWithError("no AMX table on this machine (see `qvl bench`'s kernels line)");
  qvl::TileConfig c;
  c.palette_id = 1;
  for (int t = 0; t < 8; ++t) {  // A: tmm0-1 (16 x kbytes), B: tmm2-3 (kbytes / 4 x 64), C: tmm4-7 (16 x 64)
    c.rows[t] = static_cast<uint8_t>(t == 2 || t == 3 ? kbytes / 4 : 16);
    c.colsb[t] = static_cast<uint16_t>(t < 2 ? kbytes : 64);
  }
  alignas(64) int8_t src[16 * 64];
  for (int i = 0; i < 16 * 64; ++i) src[i] = static_cast<int8_t>(i % 7 - 3);
  asm volatile("" ::: "memory");  // GCC 12's ldtilecfg and tileloadd name no memory input
  _tile_loadconfig(&c);
  _tile_loadd(0, src, 64);
  _tile_loadd(1, src, 64);
  _tile_loadd(2, src, 64);
  _tile_loadd(3, src, 64);
  _tile_zero(4);
  _tile_zero(5);
  _tile_zero(6);
  _tile_zero(7);
  constexpr int kInner = 1000;
  for (auto _ : state) {
    for (int r = 0; r < kInner; ++r) {
      _tile_dpbssd(4, 0, 2);
      _tile_dpbssd(5, 0, 3);
      _tile_dpbssd(6, 1, 2);
      _tile_dpbssd(7, 1, 3);
    }
  }
  alignas(64) int32_t out[16 * 16];
  _tile_stored(4, out, 64);
  benchmark::DoNotOptimize(out);
  _tile_release();
  state.counters["GOP/s"] = benchmark::Counter(
      2.0 * 16 * 16 * kbytes * 4 * kInner, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kAvgThreadsRate,
      benchmark::Counter::kIs1000);
}
void BM_PeakAmxInt8(benchmark::State& state) { peak_amx(state, 64); }
void BM_PeakAmxInt8K32(benchmark::State& state) { peak_amx(state, 32); }
BENCHMARK(BM_PeakAmxInt8)->ThreadRange(1, 2)->UseRealTime();
BENCHMARK(BM_PeakAmxInt8K32)->ThreadRange(1, 2)->UseRealTime();

}  // namespace
