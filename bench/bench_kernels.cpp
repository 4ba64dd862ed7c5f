// Microbenchmarks of the matmul on the model's real shapes (GFLOP/s, GB/s of weights read) for every
// weight type, and of attention, beside the machine's measured peaks (bench_peaks.cpp).
#include <benchmark/benchmark.h>

#include <cstring>
#include <random>

#include "kernels/attention.h"
#include "kernels/kernels.h"
#include "kernels/ops.h"
#include "util/thread_pool.h"

namespace {

using namespace qvl;

ThreadPool& pool() {
  static ThreadPool p(ThreadPool::physical_cores());
  return p;
}

struct Weights {
  std::vector<uint8_t> data;
  Mat mat;
};

Weights make_weights(WeightType type, int64_t m, int64_t k) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-0.05f, 0.05f);
  std::vector<float> row(static_cast<size_t>(k));
  Weights w;
  const size_t rb = row_bytes(type, k);
  w.data.resize(rb * static_cast<size_t>(m));
  for (int64_t r = 0; r < m; ++r) {
    for (auto& v : row) v = u(rng);
    uint8_t* dst = w.data.data() + rb * static_cast<size_t>(r);
    switch (type) {
      case WeightType::kF32: std::memcpy(dst, row.data(), rb); break;
      case WeightType::kBF16:
        for (int64_t i = 0; i < k; ++i) reinterpret_cast<uint16_t*>(dst)[i] = f32_to_bf16(row[i]);
        break;
      case WeightType::kF16:
        for (int64_t i = 0; i < k; ++i) reinterpret_cast<uint16_t*>(dst)[i] = f32_to_f16(row[i]);
        break;
      case WeightType::kQ8_0: quantize_row_q8_0_ref(row.data(), reinterpret_cast<BlockQ8_0*>(dst), k); break;
      case WeightType::kQ4_0: quantize_row_q4_0_ref(row.data(), reinterpret_cast<BlockQ4_0*>(dst), k); break;
    }
  }
  w.mat = Mat{type, m, k, w.data.data()};
  if (is_quantized(type) && m % 8 == 0) {  // as the loader stores them
    std::vector<uint8_t> rows = w.data;
    w.mat = interleave8(Mat{type, m, k, rows.data()}, w.data.data());
  }
  return w;
}

// Args: n (activation rows), m (output features), k (input features), weight type.
void BM_Matmul(benchmark::State& state) {
  const int64_t n = state.range(0), m = state.range(1), k = state.range(2);
  const auto type = static_cast<WeightType>(state.range(3));
  Weights w = make_weights(type, m, k);
  std::vector<float> x(static_cast<size_t>(n * k), 0.01f), y(static_cast<size_t>(n * m));
  for (auto _ : state) {
    matmul(pool(), x.data(), n, w.mat, nullptr, y.data());
    benchmark::ClobberMemory();
  }
  const double flops = 2.0 * n * m * k;
  state.counters["GFLOP/s"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(w.data.size()), benchmark::Counter::kIsIterationInvariantRate,
                                              benchmark::Counter::kIs1000);
  state.SetLabel(std::string(weight_type_name(type)) + (w.mat.layout == Layout::kInterleaved8 ? "x8 " : " ") +
                 kernels().name);
}

void MatmulShapes(benchmark::internal::Benchmark* b) {
  const int64_t types[] = {static_cast<int64_t>(WeightType::kBF16), static_cast<int64_t>(WeightType::kQ8_0),
                           static_cast<int64_t>(WeightType::kQ4_0)};
  for (int64_t t : types) {
    b->Args({784, 3072, 1024, t});   // vision qkv, 448x448 image
    b->Args({784, 4096, 1024, t});   // vision mlp fc1
    b->Args({210, 6144, 2048, t});   // text gate/up, 448x448 prompt prefill
    b->Args({210, 2048, 6144, t});   // text down
    b->Args({1, 6144, 2048, t});     // decode gate/up
    b->Args({1, 2048, 6144, t});     // decode down
    b->Args({1, 151936, 2048, t});   // decode LM head
  }
}
BENCHMARK(BM_Matmul)->Apply(MatmulShapes)->Unit(benchmark::kMillisecond)->UseRealTime();

// One vision attention layer: 16 heads of 64 over L patches (all heads, threaded as in the model).
void BM_VisionAttention(benchmark::State& state) {
  const int64_t L = state.range(0), heads = 16, hd = 64, D = heads * hd;
  std::vector<float> qkv(static_cast<size_t>(L * 3 * D), 0.01f), out(static_cast<size_t>(L * D));
  for (auto _ : state) {
    pool().parallel_for(heads, 1, [&](int, int64_t h0, int64_t h1) {
      thread_local AttentionScratch s;
      for (int64_t h = h0; h < h1; ++h)
        attention_head(qkv.data() + h * hd, 3 * D, L, qkv.data() + D + h * hd, 3 * D, qkv.data() + 2 * D + h * hd,
                       3 * D, L, hd, 0.125f, -1, out.data() + h * hd, D, s);
    });
  }
  state.counters["GFLOP/s"] = benchmark::Counter(4.0 * heads * L * L * hd, benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::kIs1000);
}
BENCHMARK(BM_VisionAttention)->Arg(784)->Arg(3072)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
