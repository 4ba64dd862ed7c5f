// Microbenchmarks of the matmul on the model's real shapes (GFLOP/s, GB/s of weights read) for every
// weight type, and of attention, beside the machine's measured peaks (bench_peaks.cpp).
#include <benchmark/benchmark.h>

#include <cstring>
#include <random>

#include "tensor/kquant.h"
#include "kernels/attention.h"
#include "kernels/kernels.h"
#include "kernels/ops.h"
#include "util/cpu_budget.h"
#include "util/thread_pool.h"

namespace {

using namespace qvl;

ThreadPool& pool() {
  static ThreadPool p(default_threads());
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
    weight_type_traits(type).from_f32(row.data(), dst, k);
  }
  w.mat = Mat{type, m, k, w.data.data()};
  if (is_interleavable(type) && m % 8 == 0) {  // as the loader stores them
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
  const int64_t types[] = {static_cast<int64_t>(WeightType::kBF16), static_cast<int64_t>(WeightType::kF16), static_cast<int64_t>(WeightType::kQ8_0),
                           static_cast<int64_t>(WeightType::kQ4_0)};
  for (int64_t t : types) {
    b->Args({784, 3072, 1024, t});   // vision qkv, 448x448 image
    b->Args({784, 4096, 1024, t});   // vision mlp fc1
    b->Args({210, 6144, 2048, t});   // text gate/up, 448x448 prompt prefill
    b->Args({210, 2048, 6144, t});   // text down
    b->Args({1, 6144, 2048, t});     // decode gate/up
    b->Args({1, 2048, 6144, t});     // decode down
    b->Args({1, 151936, 2048, t});   // decode LM head
    b->Args({4, 6144, 2048, t});     // batched decode gate/up, 4 requests
    b->Args({16, 6144, 2048, t});    // batched decode gate/up, 16 requests
  }
  // GGUF K-quants (a Q4_K_M file: Q4_K matrices, Q6_K for the tied LM head and some ffn_down): the text shapes.
  for (WeightType kt : {WeightType::kQ4_K, WeightType::kQ5_K, WeightType::kQ6_K}) {
    const int64_t t = static_cast<int64_t>(kt);
    b->Args({210, 6144, 2048, t});
    b->Args({210, 2048, 6144, t});
    b->Args({1, 6144, 2048, t});
    b->Args({1, 2048, 6144, t});
    if (kt == WeightType::kQ6_K) b->Args({1, 151936, 2048, t});
  }
}
BENCHMARK(BM_Matmul)->Apply(MatmulShapes)->Unit(benchmark::kMillisecond)->UseRealTime();

// One vision attention layer: 16 heads of 64 over L patches, as the vision tower runs it (attention_multihead:
// flash blocks, tile_choice()'s sizes, QVL_TILES to try others). Args: L, precision (0 f32, 1 bf16; bf16 runs
// as f32 where the table has no bf16 tile: the label says which ran).
void BM_VisionAttention(benchmark::State& state) {
  const int64_t L = state.range(0), heads = 16, hd = 64, D = heads * hd;
  const auto precision = state.range(1) ? AttentionPrecision::kBF16 : AttentionPrecision::kF32;
  std::vector<float> qkv(static_cast<size_t>(L * 3 * D)), out(static_cast<size_t>(L * D));
  std::mt19937 rng(1);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (float& x : qkv) x = g(rng);
  FlashScratch scratch;
  for (auto _ : state) {
    attention_multihead(pool(), qkv.data(), qkv.data() + D, qkv.data() + 2 * D, 3 * D, L, heads, hd, 0.125f, out.data(),
                        D, precision, scratch);
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP/s"] = benchmark::Counter(4.0 * heads * L * L * hd, benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::kIs1000);
  state.SetLabel(std::string(attention_precision_name(effective_attention_precision(precision))) + " " + kernels().name +
                 " blocks " + std::to_string(tile_choice().attn_q_block) + "x" + std::to_string(tile_choice().attn_kv_block));
}
BENCHMARK(BM_VisionAttention)
    ->ArgsProduct({{784, 3072, 8000}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// One text layer's causal attention over a prompt of L tokens on the 2b shapes (16 query heads of 128, 8 kv
// heads): row-invariant attention_head calls, a kv head's query heads per task, as text.cpp runs a prefill,
// but with the keys as rows, so each call packs its kᵀ panels (text.cpp reads the KV cache's). Arg: L. GFLOP/s
// counts the causal triangle's q · kᵀ and P · v (4 hd flops per query and visible key).
void BM_TextAttention(benchmark::State& state) {
  const int64_t L = state.range(0), heads = 16, kv_heads = 8, hd = 128, qd = heads * hd, group = heads / kv_heads;
  std::vector<float> q(static_cast<size_t>(L * qd)), k(static_cast<size_t>(kv_heads * L * hd)),
      v(static_cast<size_t>(kv_heads * L * hd)), out(static_cast<size_t>(L * qd));
  std::mt19937 rng(1);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (auto* x : {&q, &k, &v})
    for (float& e : *x) e = g(rng);
  std::vector<AttentionScratch> scratch(static_cast<size_t>(pool().size()));
  for (auto _ : state) {
    pool().parallel_for_dynamic(kv_heads, 1, [&](int t, int64_t h0, int64_t h1) {
      for (int64_t kv = h0; kv < h1; ++kv)
        for (int64_t h = kv * group; h < (kv + 1) * group; ++h)
          attention_head(&q[static_cast<size_t>(h * hd)], qd, L, &k[static_cast<size_t>(kv * L * hd)], hd,
                         &v[static_cast<size_t>(kv * L * hd)], hd, L, hd, 0.0884f, 0, &out[static_cast<size_t>(h * hd)], qd,
                         scratch[static_cast<size_t>(t)], /*row_invariant=*/true);
    });
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * heads * L * (L + 1) * hd, benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::kIs1000);
  state.SetLabel(kernels().name);
}
BENCHMARK(BM_TextAttention)->Arg(782)->Arg(3498)->Unit(benchmark::kMillisecond)->UseRealTime();

// One text layer's attention in a decode step at a context of L tokens (2b shapes): one query per head against
// float32 keys in the KV cache's kᵀ panels and values as rows (an f32 cache's step; an f16 cache's reads them
// as f16 through attention_head_f16), a kv head's query heads per task. Arg: L.
void BM_TextDecodeAttention(benchmark::State& state) {
  const int64_t L = state.range(0), heads = 16, kv_heads = 8, hd = 128, qd = heads * hd, group = heads / kv_heads;
  const int64_t cols = kernels().nn_cols, kt_floats = (L + cols - 1) / cols * cols * hd;
  std::vector<float> q(static_cast<size_t>(qd)), kt(static_cast<size_t>(kv_heads * kt_floats)),
      v(static_cast<size_t>(kv_heads * L * hd)), out(static_cast<size_t>(qd));
  std::mt19937 rng(1);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (auto* x : {&q, &kt, &v})
    for (float& e : *x) e = g(rng);
  std::vector<AttentionScratch> scratch(static_cast<size_t>(pool().size()));
  for (auto _ : state) {
    pool().parallel_for_dynamic(kv_heads, 1, [&](int t, int64_t h0, int64_t h1) {
      for (int64_t kv = h0; kv < h1; ++kv)
        for (int64_t h = kv * group; h < (kv + 1) * group; ++h)
          attention_head(&q[static_cast<size_t>(h * hd)], qd, 1, nullptr, 0, &v[static_cast<size_t>(kv * L * hd)], hd, L, hd,
                         0.0884f, L - 1, &out[static_cast<size_t>(h * hd)], qd, scratch[static_cast<size_t>(t)],
                         /*row_invariant=*/true, &kt[static_cast<size_t>(kv * kt_floats)]);
    });
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP/s"] = benchmark::Counter(4.0 * heads * L * hd, benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::kIs1000);
  state.SetLabel(kernels().name);
}
BENCHMARK(BM_TextDecodeAttention)->Arg(782)->Arg(3530)->Unit(benchmark::kMicrosecond)->UseRealTime();

// The element-wise kernels on the model's shapes, threaded as the model runs them; GB/s = bytes read and
// written once. Args: rows, columns.
void element_counters(benchmark::State& state, double bytes) {
  state.counters["GB/s"] = benchmark::Counter(bytes, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
  state.SetLabel(kernels().name);
}

// A source and the copy a benchmark refreshes from it every iteration, in one buffer, the copy a whole number of
// 4 KiB pages after the source. Two vectors malloc'd back to back lie a few bytes past a multiple of 4 KiB apart,
// so each load of the copy waits on its own store of a few floats before (4K aliasing: BM_ExpScaled/3072 took
// 6.5 us on a Zen 3 rather than 1.4, BM_SiluMul/1/6144 18 us rather than 4; BENCHMARKS.md, "Zen 3: ..."); 2 KiB
// apart, a load aliases a store 2 KiB back, still in flight in a long copy (GeluTanh ~10 % slower).
struct SourceAndCopy {
  static int64_t whole_pages(int64_t n) { return (n + 1023) / 1024 * 1024; }  // floats: 1,024 a 4 KiB page
  explicit SourceAndCopy(int64_t n)
      : buf(static_cast<size_t>(2 * whole_pages(n))), src(buf.data()), dst(buf.data() + whole_pages(n)), n(n) {}
  void refresh() { std::copy(src, src + n, dst); }
  std::vector<float> buf;
  float* src;  // [n]
  float* dst;  // [n]
  int64_t n;
};

void BM_RmsNorm(benchmark::State& state) {  // text: [tokens, 2048]
  const int64_t n = state.range(0), d = state.range(1);
  std::vector<float> x(static_cast<size_t>(n * d), 0.5f), w(static_cast<size_t>(d), 1.0f), y(x.size());
  for (auto _ : state) rms_norm(pool(), x.data(), n, d, w.data(), 1e-6f, y.data());
  element_counters(state, 8.0 * n * d);
}
BENCHMARK(BM_RmsNorm)->Args({210, 2048})->Args({1, 2048})->UseRealTime();

void BM_LayerNorm(benchmark::State& state) {  // vision: [patches, 1024]
  const int64_t n = state.range(0), d = state.range(1);
  std::vector<float> x(static_cast<size_t>(n * d), 0.5f), w(static_cast<size_t>(d), 1.0f), b(static_cast<size_t>(d)), y(x.size());
  for (auto _ : state) layer_norm(pool(), x.data(), n, d, w.data(), b.data(), 1e-6f, y.data());
  element_counters(state, 8.0 * n * d);
}
BENCHMARK(BM_LayerNorm)->Args({784, 1024})->UseRealTime();

void BM_GeluTanh(benchmark::State& state) {  // vision MLP: [patches, 4096]
  const int64_t n = state.range(0) * state.range(1);
  // In place on a fresh copy every time: applied again and again the values would shrink into denormals.
  SourceAndCopy x(n);
  for (int64_t i = 0; i < n; ++i) x.src[i] = static_cast<float>(i % 41) * 0.1f - 2.0f;
  for (auto _ : state) {
    x.refresh();
    gelu_tanh(pool(), x.dst, n);
  }
  element_counters(state, 16.0 * n);  // the copy's read and write included
}
BENCHMARK(BM_GeluTanh)->Args({784, 4096})->UseRealTime();

void BM_SiluMul(benchmark::State& state) {  // text MLP: [tokens, 6144]
  const int64_t n = state.range(0) * state.range(1);
  SourceAndCopy g(n);
  std::vector<float> u(static_cast<size_t>(n), 0.25f);
  for (int64_t i = 0; i < n; ++i) g.src[i] = static_cast<float>(i % 41) * 0.1f - 2.0f;
  for (auto _ : state) {
    g.refresh();  // fresh values every time (see BM_GeluTanh)
    silu_mul(pool(), g.dst, u.data(), n);
  }
  element_counters(state, 20.0 * n);  // the copy's read and write included
}
BENCHMARK(BM_SiluMul)->Args({210, 6144})->Args({1, 6144})->UseRealTime();

void BM_ExpScaled(benchmark::State& state) {  // one attention score row (one thread)
  const int64_t n = state.range(0);
  SourceAndCopy x(n);
  for (int64_t i = 0; i < n; ++i) x.src[i] = static_cast<float>(i % 17) * 0.1f;
  for (auto _ : state) {
    x.refresh();  // fresh scores every time
    benchmark::DoNotOptimize(kernels().exp_scaled(x.dst, n, 0.125f));
  }
  element_counters(state, 16.0 * n);  // the copy's read and write included
}
BENCHMARK(BM_ExpScaled)->Arg(784)->Arg(3072);

void BM_QuantizeAct(benchmark::State& state) {  // one activation row per call, [rows, cols] (one thread)
  const int64_t n = state.range(0), k = state.range(1), nb = k / kQK;
  std::vector<float> x(static_cast<size_t>(n * k), 0.3f), d(static_cast<size_t>(n * nb));
  std::vector<int8_t> q(static_cast<size_t>(n * k));
  std::vector<int32_t> s(static_cast<size_t>(n * nb));
  for (auto _ : state)
    for (int64_t i = 0; i < n; ++i) kernels().quantize_act(&x[static_cast<size_t>(i * k)], k, &q[static_cast<size_t>(i * k)], &d[static_cast<size_t>(i * nb)], &s[static_cast<size_t>(i * nb)]);
  element_counters(state, 5.0 * n * k);
}
BENCHMARK(BM_QuantizeAct)->Args({210, 2048})->Args({784, 1024});

void BM_RopeText(benchmark::State& state) {  // q and k heads of one prefill: [tokens, 16 + 8 heads of 128]
  const int64_t n = state.range(0), hd = 128, heads = 24;
  std::vector<float> x(static_cast<size_t>(n * heads * hd), 0.5f), cs(static_cast<size_t>(hd), 0.8f), sn(static_cast<size_t>(hd), 0.6f);
  for (auto _ : state)
    for (int64_t h = 0; h < n * heads; ++h) rope_rotate_half(&x[static_cast<size_t>(h * hd)], hd, cs.data(), sn.data());
  element_counters(state, 8.0 * n * heads * hd);
}
BENCHMARK(BM_RopeText)->Arg(210);

}  // namespace
