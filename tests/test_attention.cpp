// Flash attention (kernels/attention.h) and its kernels: the online softmax step, bf16 conversion and the bf16
// tile against their slow twins on every table; attention_multihead against a double-precision reference, against
// today's one-block kernel bit for bit, in bf16 against float32; and the same bits at 1 to 64 threads, for
// attention alone and for the model's vision tower and prefill.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <string>

#include <unistd.h>

#include "kernels/attention.h"
#include "kernels/bf16.h"
#include "kernels/kernels.h"
#include "model/image_processor.h"
#include "model/model.h"
#include "model/test_model.h"
#include "model/text.h"
#include "model/vision.h"
#include "test_paths.h"
#include "util/thread_pool.h"

namespace qvl {
namespace {

constexpr double kEps = 1.0 / (1 << 24);  // float32 unit roundoff

std::vector<float> normal_floats(size_t n, uint32_t seed, float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, sigma);
  std::vector<float> v(n);
  for (auto& x : v) x = g(rng);
  return v;
}

// Every table this machine runs, the generic one first, and the generic table with the bf16 twins (the bf16
// path on every machine, under qemu too).
std::vector<const KernelTable*> all_tables() {
  std::vector<const KernelTable*> t{&generic_kernels(), &bf16_twin_kernels()};
  for (const KernelTable* s : {neon_kernels(), avx2_kernels(), avxvnni_kernels(), avx512vnni_kernels(), amx_kernels()})
    if (s) t.push_back(s);
  return t;
}

float bits_to_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST(Kernels, Bf16ConversionRoundsToNearestEvenInEveryTable) {
  // Known cases: exact, ties to even (down and up), a carry into the exponent, overflow to inf, NaN kept quiet.
  EXPECT_EQ(to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(to_bf16(bits_to_float(0x3F808000)), 0x3F80);  // tie, even below
  EXPECT_EQ(to_bf16(bits_to_float(0x3F818000)), 0x3F82);  // tie, even above
  EXPECT_EQ(to_bf16(bits_to_float(0x3F808001)), 0x3F81);  // just past the tie
  EXPECT_EQ(to_bf16(bits_to_float(0x3FFFFFFF)), 0x4000);  // rounds up into the next binade
  EXPECT_EQ(to_bf16(bits_to_float(0x7F7FFFFF)), 0x7F80);  // the largest float rounds to +inf
  EXPECT_EQ(to_bf16(-INFINITY), 0xFF80);
  EXPECT_EQ(to_bf16(bits_to_float(0x7F800001)) & 0x7FC0, 0x7FC0) << "a signalling NaN comes back quiet";
  EXPECT_EQ(from_bf16(to_bf16(3.140625f)), 3.140625f) << "a bf16 value converts to itself";
  std::vector<float> x = normal_floats(1000, 3, 100.0f);
  for (uint32_t u : {0x00000000u, 0x80000000u, 0x00000001u, 0x007FFFFFu, 0x3F808000u, 0x3F818000u, 0x7F7FFFFFu,
                     0x7F800000u, 0xFF800000u, 0x7FC00000u, 0x7F800001u, 0xFFFFFFFFu})
    x.push_back(bits_to_float(u));
  for (const KernelTable* t : all_tables())
    for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{16}, int64_t{17}, static_cast<int64_t>(x.size())}) {
      std::vector<uint16_t> out(static_cast<size_t>(n), 0xAAAA);
      t->f32_to_bf16(x.data() + x.size() - n, out.data(), n);
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(out[i], to_bf16(x[x.size() - n + i])) << t->name << " n " << n << " i " << i;
    }
}

TEST(Kernels, ExpScaledFromCarriesTheRunningMaxInEveryTable) {
  const KernelTable& g = bf16_twin_kernels();
  for (const KernelTable* t : all_tables())
    for (int64_t n : {1, 15, 16, 17, 300}) {
      const auto x = normal_floats(static_cast<size_t>(2 * n), 5, 8.0f);
      // Two halves with the running max carried equal the whole row in one call, once rescaled.
      std::vector<float> whole(x.begin(), x.end()), a(x.begin(), x.begin() + n), b(x.begin() + n, x.end());
      float m_whole = -INFINITY, m = -INFINITY;
      const float s_whole = t->exp_scaled_from(whole.data(), 2 * n, 0.5f, &m_whole);
      const float s1 = t->exp_scaled_from(a.data(), n, 0.5f, &m);
      const float m1 = m;
      const float s2 = t->exp_scaled_from(b.data(), n, 0.5f, &m);
      EXPECT_EQ(m, m_whole) << t->name;
      EXPECT_NEAR(s1 * std::exp(m1 - m) + s2, s_whole, 1e-5 * s_whole) << t->name << " n " << n;
      // The running max the same bits as the generic twin's max of x * scale, with scales that round: tables may
      // take max(x) * scale (rounding is monotonic), which must not change it.
      for (float sc : {1.0f / std::sqrt(72.0f), 1e-30f, 3e-39f, 1e30f}) {
        std::vector<float> r(x.begin(), x.end()), y(x.begin(), x.end());
        float mg = -INFINITY, mt = -INFINITY;
        g.exp_scaled_from(r.data(), 2 * n, sc, &mg);
        t->exp_scaled_from(y.data(), 2 * n, sc, &mt);
        EXPECT_EQ(0, std::memcmp(&mg, &mt, 4)) << t->name << " scale " << sc << ": " << mg << " vs " << mt;
      }
      // Against the generic twin, element by element.
      std::vector<float> r(x.begin(), x.end());
      float mg = 1.0f, mt = 1.0f;  // a running max from an earlier block
      std::vector<float> y(x.begin(), x.end());
      const float sg = g.exp_scaled_from(r.data(), 2 * n, 0.125f, &mg), st = t->exp_scaled_from(y.data(), 2 * n, 0.125f, &mt);
      EXPECT_EQ(mg, mt) << t->name;
      EXPECT_NEAR(sg, st, 2e-6 * sg) << t->name;
      for (int64_t i = 0; i < 2 * n; ++i) EXPECT_NEAR(r[i], y[i], 1e-7 + 2e-6 * r[i]) << t->name << " i " << i;
      if (t->exp_scaled_from_bf16) {
        std::vector<uint16_t> pb(static_cast<size_t>(2 * n)), pg(static_cast<size_t>(2 * n));
        float m3 = 1.0f, m4 = 1.0f;
        const float sb = t->exp_scaled_from_bf16(x.data(), 2 * n, 0.125f, &m3, pb.data());
        const float sgb = g.exp_scaled_from_bf16(x.data(), 2 * n, 0.125f, &m4, pg.data());
        EXPECT_EQ(m3, m4);
        EXPECT_NEAR(sb, sgb, 2e-6 * sgb) << t->name;
        for (int64_t i = 0; i < 2 * n; ++i)
          EXPECT_NEAR(from_bf16(pb[i]), from_bf16(pg[i]), 1e-7 + 1.0 / 128 * from_bf16(pg[i])) << t->name << " i " << i;
      }
    }
}

// The softmax step's exponentials against exp in double: within 2 float32 ulps over the whole range a softmax
// feeds it (x * scale - max from 0 down to -86.5), so a table's faster exp (the avx2 table's degree-6 polynomial
// with 2^n added to the exponent bits) stays as exact as std::exp's rounding allows. Below -86.6, where tables
// may return a tiny value (<= 2.5e-38) rather than 0, and at -inf: tiny, never NaN or negative.
TEST(Kernels, ExpScaledFromIsWithinTwoUlpsOfExpInEveryTable) {
  constexpr int64_t n = 1 << 16;
  std::vector<float> x0(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x0[static_cast<size_t>(i)] = -86.5f * static_cast<float>(i) / (n - 1);
  for (const KernelTable* t : all_tables()) {
    std::vector<float> x = x0;
    float m = 0.0f;
    const float sum = t->exp_scaled_from(x.data(), n, 1.0f, &m);
    ASSERT_EQ(m, 0.0f) << t->name;
    double worst = 0, got_sum = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double want = std::exp(static_cast<double>(x0[static_cast<size_t>(i)]));
      got_sum += x[static_cast<size_t>(i)];
      worst = std::max(worst, std::abs(x[static_cast<size_t>(i)] - want) / want);
    }
    EXPECT_LE(worst, 2 * 2 * kEps) << t->name << ": worst relative error";
    EXPECT_NEAR(sum, got_sum, 1e-4 * got_sum) << t->name << ": the sum returned is the values' (float sums of 65,536)";
    std::vector<float> deep = {-86.7f, -87.5f, -90.0f, -104.0f, -1e6f, -3e38f, -INFINITY, 0.0f};
    float m2 = 0.0f;
    t->exp_scaled_from(deep.data(), static_cast<int64_t>(deep.size()), 1.0f, &m2);
    for (size_t i = 0; i + 1 < deep.size(); ++i)
      EXPECT_TRUE(deep[i] >= 0.0f && deep[i] <= 2.5e-38f) << t->name << " value " << i << ": " << deep[i];
    EXPECT_EQ(deep.back(), 1.0f) << t->name;
  }
}

// Each value's exponential the same bits wherever it falls in a call: in a table's widest loop, its one-vector
// loop or its tail. A causal row read alone (a decode step) and inside a prefill slice, or a row of any length,
// must see the same bits for the same scores (the prefix cache's promise).
TEST(Kernels, ExpScaledFromGivesAValueTheSameBitsAtEveryPosition) {
  const auto x = normal_floats(200, 21, 6.0f);
  for (const KernelTable* t : all_tables()) {
    std::vector<float> whole(x.begin(), x.end());
    float mw = 40.0f;  // above every x * scale: each call's max is this running max
    t->exp_scaled_from(whole.data(), static_cast<int64_t>(whole.size()), 0.75f, &mw);
    for (int64_t off : {0, 1, 7, 8, 9, 63, 64, 65, 130})
      for (int64_t len : {1, 3, 8, 9, 17, 64, 70}) {
        if (off + len > static_cast<int64_t>(x.size())) continue;
        std::vector<float> part(x.begin() + off, x.begin() + off + len);
        float m = 40.0f;
        t->exp_scaled_from(part.data(), len, 0.75f, &m);
        ASSERT_EQ(0, std::memcmp(part.data(), whole.data() + off, static_cast<size_t>(len) * 4))
            << t->name << " offset " << off << " length " << len;
      }
  }
}

// gemm_f32_nn_panels, where a table has it, is its slow twin bit for bit: the loop over the table's own tile, one
// call per panel. Packed panels further apart than their size, and the column groups of rows (P · v on v's rows,
// rows wider than the panels); c's columns past the last panel left alone.
TEST(Kernels, NnPanelsAreTheTileLoopBitForBit) {
  int tested = 0;
  for (const KernelTable* t : all_tables()) {
    if (!t->gemm_f32_nn_panels) continue;
    ++tested;
    const int64_t tc = t->nn_cols;
    for (int64_t k : {1, 7, 64, 72})
      for (int64_t panels : {1, 3, 4, 9})  // 4 and 9: the few-row tiles' groups of panels, and a remainder
        for (bool rows : {false, true}) {
          const int64_t ldb = rows ? panels * tc + 8 : tc, stride = rows ? tc : k * tc + 5, lda = k + 3, ldc = panels * tc + 9;
          const auto a = normal_floats(static_cast<size_t>(t->nn_rows * lda), 31);
          const auto b = normal_floats(static_cast<size_t>(rows ? k * ldb : panels * stride), 32);
          for (int mr = 1; mr <= t->nn_rows; ++mr) {
            std::vector<float> got(static_cast<size_t>(mr * ldc), -7.0f), want = got;
            t->gemm_f32_nn_panels(a.data(), lda, b.data(), ldb, stride, k, got.data(), ldc, mr, panels);
            for (int64_t p = 0; p < panels; ++p)
              t->gemm_f32_nn_tile(a.data(), lda, b.data() + p * stride, ldb, k, want.data() + p * tc, ldc, mr,
                                  static_cast<int>(tc));
            ASSERT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * 4))
                << t->name << " k " << k << " panels " << panels << " rows " << mr << (rows ? " of v's rows" : " packed");
          }
        }
  }
  if (avx2_kernels()) {
    EXPECT_GT(tested, 0) << "the avx2 table has gemm_f32_nn_panels";
  }
}

// gemm_f16_nn_panels, where a table has it, is its slow twin bit for bit: B widened to float32 (exact), then the
// loop over the table's own float32 tile; packed panels and panels of rows, every row count.
TEST(Kernels, F16NnPanelsAreTheWidenedTileLoopBitForBit) {
  int tested = 0;
  for (const KernelTable* t : all_tables()) {
    if (!t->gemm_f16_nn_panels) continue;
    ++tested;
    const int64_t tc = t->nn_cols;
    for (int64_t k : {1, 7, 64, 200})
      for (int64_t panels : {1, 3, 4, 9})
        for (bool rows : {false, true}) {
          const int64_t ldb = rows ? panels * tc + 8 : tc, stride = rows ? tc : k * tc + 5, lda = k + 3, ldc = panels * tc + 9;
          const auto a = normal_floats(static_cast<size_t>(t->nn_rows * lda), 33);
          const auto bf = normal_floats(static_cast<size_t>(rows ? k * ldb : panels * stride), 34, 2.0f);
          std::vector<uint16_t> b(bf.size());
          std::vector<float> wide(bf.size());
          for (size_t e = 0; e < b.size(); ++e) wide[e] = f16_to_f32(b[e] = f32_to_f16(bf[e]));
          for (int mr = 1; mr <= t->nn_rows; ++mr) {
            std::vector<float> got(static_cast<size_t>(mr * ldc), -7.0f), want = got;
            t->gemm_f16_nn_panels(a.data(), lda, b.data(), ldb, stride, k, got.data(), ldc, mr, panels);
            for (int64_t p = 0; p < panels; ++p)
              t->gemm_f32_nn_tile(a.data(), lda, wide.data() + p * stride, ldb, k, want.data() + p * tc, ldc, mr,
                                  static_cast<int>(tc));
            ASSERT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * 4))
                << t->name << " k " << k << " panels " << panels << " rows " << mr << (rows ? " of v's rows" : " packed");
          }
        }
  }
  if (avx2_kernels()) {
    EXPECT_GT(tested, 0) << "the avx2 table has gemm_f16_nn_panels";
  }
}

TEST(Kernels, Bf16TileMatchesItsSlowTwin) {
  const KernelTable& g = bf16_twin_kernels();
  int tested = 0;
  EXPECT_EQ(generic_kernels().gemm_bf16_nn_tile, nullptr) << "the generic table runs bf16 attention in f32";
  for (const KernelTable* t : all_tables()) {
    if (!t->gemm_bf16_nn_tile) continue;
    ++tested;
    for (int64_t kp : {1, 7, 32, 128}) {
      const int64_t lda = 2 * kp + 2, ldb = 2 * t->nn_cols + 4, ldc = t->nn_cols + 3;
      std::vector<uint16_t> a(static_cast<size_t>(t->nn_rows * lda)), b(static_cast<size_t>(kp * ldb));
      const auto af = normal_floats(a.size(), 7), bf = normal_floats(b.size(), 8);
      g.f32_to_bf16(af.data(), a.data(), static_cast<int64_t>(a.size()));
      g.f32_to_bf16(bf.data(), b.data(), static_cast<int64_t>(b.size()));
      for (int mr = 1; mr <= t->nn_rows; ++mr)
        for (int nc = 1; nc <= t->nn_cols; nc += (nc < 17 ? 1 : 15)) {
          std::vector<float> cg(static_cast<size_t>(mr * ldc), -1.0f), ct = cg;
          g.gemm_bf16_nn_tile(a.data(), lda, b.data(), ldb, kp, cg.data(), ldc, mr, nc);
          t->gemm_bf16_nn_tile(a.data(), lda, b.data(), ldb, kp, ct.data(), ldc, mr, nc);
          for (int i = 0; i < mr; ++i)
            for (int j = 0; j < ldc; ++j) {
              if (j >= nc) {
                ASSERT_EQ(ct[i * ldc + j], -1.0f) << t->name << ": wrote past the panel's columns";
                continue;
              }
              double bound = 0;  // sum of |products|: float32 sums of 2 kp terms, each rounding once
              for (int64_t p = 0; p < 2 * kp; ++p)
                bound += std::abs(static_cast<double>(from_bf16(a[i * lda + p])) * from_bf16(b[(p / 2) * ldb + 2 * j + p % 2]));
              ASSERT_NEAR(ct[i * ldc + j], cg[i * ldc + j], 4 * kp * kEps * bound + 1e-30)
                  << t->name << " mr " << mr << " nc " << nc << " kp " << kp;
            }
        }
    }
  }
  if (!tested) GTEST_SKIP() << "no table here has a bf16 tile (AVX512_BF16): only the slow twin exists";
}

// softmax(q kᵀ * scale) v per head in double precision.
std::vector<double> reference_attention(const std::vector<float>& qkv, int64_t n, int heads, int64_t hd, float scale) {
  const int64_t D = heads * hd, ld = 3 * D;
  std::vector<double> out(static_cast<size_t>(n * D));
  std::vector<double> p(static_cast<size_t>(n));
  for (int h = 0; h < heads; ++h)
    for (int64_t i = 0; i < n; ++i) {
      double mx = -INFINITY;
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t d = 0; d < hd; ++d) s += static_cast<double>(qkv[i * ld + h * hd + d]) * qkv[j * ld + D + h * hd + d];
        p[j] = s * scale;
        mx = std::max(mx, p[j]);
      }
      double sum = 0;
      for (int64_t j = 0; j < n; ++j) sum += p[j] = std::exp(p[j] - mx);
      for (int64_t d = 0; d < hd; ++d) {
        double o = 0;
        for (int64_t j = 0; j < n; ++j) o += p[j] * qkv[j * ld + 2 * D + h * hd + d];
        out[i * D + h * hd + d] = o / sum;
      }
    }
  return out;
}

std::vector<float> run_flash(ThreadPool& pool, const std::vector<float>& qkv, int64_t n, int heads, int64_t hd, float scale,
                             AttentionPrecision p, int q_block, int kv_block, const KernelTable* table) {
  const int64_t D = heads * hd;
  std::vector<float> out(static_cast<size_t>(n * D), NAN);
  FlashScratch s;
  attention_multihead(pool, qkv.data(), qkv.data() + D, qkv.data() + 2 * D, 3 * D, n, heads, hd, scale, out.data(), D, p, s,
                      q_block, kv_block, table);
  return out;
}

double max_rel(const std::vector<float>& got, const std::vector<double>& want) {
  double mx = 0, diff = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    mx = std::max(mx, std::abs(want[i]));
    diff = std::max(diff, std::abs(got[i] - want[i]));
  }
  return diff / mx;
}

TEST(Kernels, FlashAttentionMatchesADoubleReferenceInEveryTable) {
  ThreadPool pool(2);
  const int heads = 3;
  for (int64_t hd : {64, 16, 72})  // 72: the 8B's vision heads (a panel and a masked one; 36 pairs)
    for (int64_t n : {1, 7, 64, 65, 300}) {
      const auto qkv = normal_floats(static_cast<size_t>(n * 3 * heads * hd), static_cast<uint32_t>(n + hd), 1.5f);
      const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
      const auto want = reference_attention(qkv, n, heads, hd, scale);
      for (const KernelTable* t : all_tables())
        // (0, 0): tile_choice()'s sizes, the keys in nearly equal blocks.
        for (auto [qb, kb] : {std::pair{6, 64}, std::pair{12, 128}, std::pair{96, 256}, std::pair{0, 0}}) {
          if (qb % t->nn_rows || kb % t->nn_cols) continue;
          const auto got = run_flash(pool, qkv, n, heads, hd, scale, AttentionPrecision::kF32, qb, kb, t);
          EXPECT_LE(max_rel(got, want), 2e-6) << t->name << " f32 n " << n << " hd " << hd << " blocks " << qb << "x" << kb;
          if (effective_attention_precision(AttentionPrecision::kBF16, t) == AttentionPrecision::kBF16) {
            // bf16 keeps 8 bits: q, k, p and v each rounded by up to 2^-9 of themselves.
            const auto b = run_flash(pool, qkv, n, heads, hd, scale, AttentionPrecision::kBF16, qb, kb, t);
            EXPECT_LE(max_rel(b, want), 3e-2) << t->name << " bf16 n " << n << " hd " << hd;
            EXPECT_GT(max_rel(b, want), 1e-5) << t->name << " bf16 that equals float32 was not bf16";
            // ... and the same as the generic table's slow twins, to float32 rounding.
            const auto twin = run_flash(pool, qkv, n, heads, hd, scale, AttentionPrecision::kBF16, qb, kb, &bf16_twin_kernels());
            std::vector<double> twin_d(twin.begin(), twin.end());
            EXPECT_LE(max_rel(b, twin_d), 2e-5) << t->name << " bf16 against its slow twin, n " << n;
          }
        }
    }
}

TEST(Kernels, FlashAttentionInOneBlockIsTodaysKernelBitForBit) {
  ThreadPool pool(2);
  const int heads = 2;
  const int64_t hd = 64, D = heads * hd;
  // From the table's tile rows up (fewer queries take attention_head's dot-product path) to one key block.
  for (int64_t n : {int64_t{kernels().nn_rows}, int64_t{63}, int64_t{200}}) {
    const auto qkv = normal_floats(static_cast<size_t>(n * 3 * D), static_cast<uint32_t>(n));
    const auto flash = run_flash(pool, qkv, n, heads, hd, 0.125f, AttentionPrecision::kF32, 96, 256, nullptr);
    std::vector<float> today(static_cast<size_t>(n * D));
    AttentionScratch s;
    for (int h = 0; h < heads; ++h)
      attention_head(qkv.data() + h * hd, 3 * D, n, qkv.data() + D + h * hd, 3 * D, qkv.data() + 2 * D + h * hd, 3 * D, n, hd,
                     0.125f, -1, today.data() + h * hd, D, s);
    ASSERT_EQ(0, std::memcmp(flash.data(), today.data(), today.size() * 4)) << "n " << n;
  }
}

// The text decoder's causal attention (row_invariant, as text.cpp calls it) over many queries: against a
// double-precision reference, and each row the same bits as that row read alone (a decode step; the prefix
// cache relies on it). hd 72: a partial last panel; an offset: queries after a cached prefix; the last two
// cases (70 queries, over 128 Ki values of v) pack v in panels, their keys in two query blocks.
TEST(Kernels, CausalAttentionOverManyQueriesMatchesADoubleReferenceAndEachRowAlone) {
  struct Case {
    int64_t hd, offset, nq;
  };
  for (const Case c : {Case{128, 0, 100}, Case{72, 37, 100}, Case{128, 2000, 100}, Case{72, 2000, 100}}) {
    const int64_t hd = c.hd, offset = c.offset, nq = c.nq, n_kv = offset + nq;
    const auto q = normal_floats(static_cast<size_t>(nq * hd), 21, 1.5f);
    const auto k = normal_floats(static_cast<size_t>(n_kv * hd), 22, 1.5f);
    const auto v = normal_floats(static_cast<size_t>(n_kv * hd), 23);
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    std::vector<float> out(static_cast<size_t>(nq * hd), NAN), alone(static_cast<size_t>(hd), NAN);
    AttentionScratch s;
    attention_head(q.data(), hd, nq, k.data(), hd, v.data(), hd, n_kv, hd, scale, offset, out.data(), hd, s, true);
    double worst = 0, mx = 0;
    std::vector<double> p(static_cast<size_t>(n_kv));
    for (int64_t i = 0; i < nq; ++i) {
      const int64_t limit = offset + i + 1;
      double m = -INFINITY, sum = 0;
      for (int64_t j = 0; j < limit; ++j) {
        double dot = 0;
        for (int64_t d = 0; d < hd; ++d) dot += static_cast<double>(q[i * hd + d]) * k[j * hd + d];
        p[j] = dot * scale;
        m = std::max(m, p[j]);
      }
      for (int64_t j = 0; j < limit; ++j) sum += p[j] = std::exp(p[j] - m);
      for (int64_t d = 0; d < hd; ++d) {
        double o = 0;
        for (int64_t j = 0; j < limit; ++j) o += p[j] * v[j * hd + d];
        mx = std::max(mx, std::abs(o / sum));
        worst = std::max(worst, std::abs(out[i * hd + d] - o / sum));
      }
      attention_head(q.data() + i * hd, hd, 1, k.data(), hd, v.data(), hd, limit, hd, scale, offset + i, alone.data(), hd,
                     s, true);
      ASSERT_EQ(0, std::memcmp(alone.data(), out.data() + i * hd, hd * 4)) << "row " << i << " hd " << hd << " offset " << offset;
    }
    EXPECT_LE(worst / mx, 2e-6) << "hd " << hd << " offset " << offset;
  }
}

// The KV cache holds keys as kᵀ panels of the table's tile width (what attention_head's q · kᵀ reads): keys() and
// widen() (from a panel boundary, as text.cpp's shared widening cuts them) give kt[p][d][c] = key p * cols + c,
// a begun panel's columns past the stored keys are zero, copy_prefix_from carries the panels, and attention on
// the cache's panels is attention on the keys as rows, bit for bit, for a prefill and for each row decoded alone.
TEST(Kernels, KVCacheHoldsKeysAsThePanelsAttentionReads) {
  TextConfig tc;
  tc.num_hidden_layers = 2;
  tc.num_key_value_heads = 2;
  tc.head_dim = 72;
  const int64_t hd = tc.head_dim, n = 150, cols = kernels().nn_cols;
  const auto k = normal_floats(static_cast<size_t>(n * hd), 41, 1.5f), v = normal_floats(static_cast<size_t>(n * hd), 42);
  const auto q = normal_floats(static_cast<size_t>(n * hd), 43, 1.5f);
  for (KVType type : {KVType::kF32, KVType::kF16}) {
    KVCache cache(tc, n + 3, type);  // a capacity of no whole panels: the last panel runs past it
    EXPECT_EQ(cache.panel_cols(), cols);
    // Stale keys where the last panel's unstored columns lie (positions n.. share its panel): beginning the
    // panel zeroes them.
    for (int64_t p = n; p < n + 3; ++p) cache.store(1, 1, p, &k[0], &v[0]);
    for (int64_t p = 0; p < n; ++p) cache.store(1, 1, p, &k[static_cast<size_t>(p * hd)], &v[static_cast<size_t>(p * hd)]);
    cache.advance(n);
    // Rounded as the cache rounds them (f16: the stored values).
    std::vector<float> kr(k), vr(v);
    if (type == KVType::kF16)
      for (auto* x : {&kr, &vr})
        for (float& e : *x) e = f16_to_f32(f32_to_f16(e));
    std::vector<float> buf, vbuf;
    const float* kt = cache.keys(1, 1, n, buf);
    const int64_t panels = (n + cols - 1) / cols;
    ASSERT_EQ(cache.key_floats(n), panels * hd * cols);
    for (int64_t j = 0; j < panels * cols; ++j)
      for (int64_t d = 0; d < hd; ++d)
        ASSERT_EQ(kt[(j / cols) * hd * cols + d * cols + j % cols], j < n ? kr[static_cast<size_t>(j * hd + d)] : 0.0f)
            << kv_type_name(type) << " key " << j << " dim " << d;
    ASSERT_EQ(0, std::memcmp(cache.values(1, 1, n, vbuf), vr.data(), static_cast<size_t>(n * hd) * 4));
    // widen() from panel 1 on: the same panels and values as keys() / values() there.
    std::vector<float> wk(static_cast<size_t>(cache.key_floats(n) - cache.key_floats(cols))), wv(static_cast<size_t>((n - cols) * hd));
    cache.widen(1, 1, cols, n, wk.data(), wv.data());
    ASSERT_EQ(0, std::memcmp(wk.data(), kt + hd * cols, wk.size() * 4)) << kv_type_name(type);
    ASSERT_EQ(0, std::memcmp(wv.data(), vr.data() + cols * hd, wv.size() * 4)) << kv_type_name(type);
    // A copied prefix holds the same panels.
    KVCache copy(tc, 200, type);
    copy.copy_prefix_from(cache, n - 7);
    std::vector<float> cbuf;
    ASSERT_EQ(0, std::memcmp(copy.keys(1, 1, n - 7, cbuf), kt, static_cast<size_t>(copy.key_floats(n - 7)) * 4));
    // Attention on the cache's panels: the keys as rows, bit for bit (the prefill, and each row alone).
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    std::vector<float> want(static_cast<size_t>(n * hd)), got(want.size()), alone(static_cast<size_t>(hd));
    AttentionScratch s;
    attention_head(q.data(), hd, n, kr.data(), hd, vr.data(), hd, n, hd, scale, 0, want.data(), hd, s, true);
    attention_head(q.data(), hd, n, nullptr, 0, vr.data(), hd, n, hd, scale, 0, got.data(), hd, s, true, kt);
    ASSERT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * 4)) << kv_type_name(type);
    for (int64_t i = 0; i < n; i += 13) {
      attention_head(q.data() + i * hd, hd, 1, nullptr, 0, vr.data(), hd, i + 1, hd, scale, i, alone.data(), hd, s, true, kt);
      ASSERT_EQ(0, std::memcmp(alone.data(), want.data() + i * hd, static_cast<size_t>(hd) * 4)) << "row " << i;
    }
  }
  // A decode step on the f16 cache as it is (attention_head_f16): the prefill's rows, bit for bit, one to five
  // rows at a time. head_dim 128 (whole panels: the 2b's), so every table with the kernel runs it.
  tc.head_dim = 128;
  const int64_t hd2 = tc.head_dim;
  if (!attention_f16_supported(hd2)) GTEST_SKIP() << kernels().name << " has no gemm_f16_nn_panels";
  const auto k2 = normal_floats(static_cast<size_t>(n * hd2), 44, 1.5f), v2 = normal_floats(static_cast<size_t>(n * hd2), 45);
  const auto q2 = normal_floats(static_cast<size_t>(n * hd2), 46, 1.5f);
  KVCache cache(tc, 200, KVType::kF16);
  for (int64_t p = 0; p < n; ++p) cache.store(0, 1, p, &k2[static_cast<size_t>(p * hd2)], &v2[static_cast<size_t>(p * hd2)]);
  cache.advance(n);
  std::vector<float> kb, vb, want(static_cast<size_t>(n * hd2)), got(static_cast<size_t>(5 * hd2));
  const float* kt = cache.keys(0, 1, n, kb);
  const float* vf = cache.values(0, 1, n, vb);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd2));
  AttentionScratch s;
  attention_head(q2.data(), hd2, n, nullptr, 0, vf, hd2, n, hd2, scale, 0, want.data(), hd2, s, true, kt);
  for (int64_t rows = 1; rows <= 5; ++rows)
    for (int64_t i = 0; i + rows <= n; i += 17) {
      attention_head_f16(q2.data() + i * hd2, hd2, rows, cache.keys_f16(0, 1), cache.values_f16(0, 1), hd2, i + rows, hd2,
                         scale, i, got.data(), hd2, s);
      ASSERT_EQ(0, std::memcmp(got.data(), want.data() + i * hd2, static_cast<size_t>(rows * hd2) * 4))
          << rows << " rows at " << i;
    }
}

TEST(Kernels, TileSizesFromQvlTilesAreChecked) {
  TileChoice t;
  ASSERT_TRUE(parse_tiles("48,512,64", t).ok());
  EXPECT_EQ(t.attn_q_block, 48);
  EXPECT_EQ(t.attn_kv_block, 512);
  EXPECT_EQ(t.gemm_row_block, 64);
  for (const char* bad : {"", "96,1024", "96,1024,128,1", "95,1024,128", "96,1000,128", "96,1024,130", "0,64,4",
                          "96,1024,128x", "-6,64,4"}) {
    const Status st = parse_tiles(bad, t);
    EXPECT_FALSE(st.ok()) << bad;
    EXPECT_NE(st.message().find("QVL_TILES"), std::string::npos) << st.message();
  }
  EXPECT_EQ(t.attn_q_block, 48) << "a refused value changes nothing";
  const TileChoice& chosen = tile_choice();
  EXPECT_FALSE(chosen.core.empty());
  EXPECT_FALSE(chosen.source.empty());
  EXPECT_EQ(chosen.attn_q_block % 6, 0);
  EXPECT_EQ(chosen.attn_kv_block % 64, 0);
}

TEST(ManyThreads, FlashAttentionGivesTheSameBitsAt1To64Threads) {
  const int heads = 4;
  const int64_t hd = 64, n = 500;
  const auto qkv = normal_floats(static_cast<size_t>(n * 3 * heads * hd), 11);
  for (AttentionPrecision p : {AttentionPrecision::kF32, AttentionPrecision::kBF16}) {
    ThreadPool one(1);
    const auto want = run_flash(one, qkv, n, heads, hd, 0.125f, p, 48, 128, nullptr);
    for (int threads : {2, 16, 64}) {
      ThreadPool pool(threads);  // more threads than tasks at 64 (4 heads x 11 query blocks)
      const auto got = run_flash(pool, qkv, n, heads, hd, 0.125f, p, 48, 128, nullptr);
      ASSERT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * 4)) << threads << " threads, " << attention_precision_name(p);
    }
  }
}

// The tiny model's vision tower on an image and its prefill on text: the same bits on 1, 2, 16 and 64 threads
// (16 and 64 oversubscribe this machine's cores: the work split, not the timing, decides the result).
TEST(ManyThreads, VisionTowerAndPrefillGiveTheSameBitsAt1To64Threads) {
  const std::string dir = (std::filesystem::temp_directory_path() / ("qvl-test-threads-" + std::to_string(::getpid()))).string();
  TestModelOptions o;
  o.preset = "tiny";
  o.seed = 3;
  o.out_dir = dir;
  o.model_files_dir = test::model_files_dir();
  ASSERT_TRUE(make_test_model(o).ok());
  auto loaded = Model::load(dir);
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  const Model& model = **loaded;
  ImageRGB img;
  img.width = 200;
  img.height = 150;
  img.pixels.resize(static_cast<size_t>(img.width * img.height * 3));
  std::mt19937 rng(4);
  for (auto& px : img.pixels) px = static_cast<uint8_t>(rng());
  auto pre = preprocess_image(img, model.image_config(), PreprocessOptions{});
  ASSERT_TRUE(pre.ok()) << pre.status().message();
  // 200 rows: the prefill attention's row chunks differ with the thread count (1, 8, 12 and 12 per kv head).
  // Every layer's output rows are compared (the dump), and the last row's logits: the LM head over all 200 rows
  // (200 x 151,936 dot products a run) took most of this test's 2 minutes under qemu. The cache is f16 (the
  // default): with no more threads than kv heads each thread widens its kv head's keys and values itself,
  // with more they are widened once per kv head into shared buffers (text.cpp); the bits are the same.
  const int64_t n = 200, V = model.config().text.vocab_size;
  std::vector<int32_t> ids(static_cast<size_t>(n)), pos(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) ids[i] = static_cast<int32_t>((i * 7919) % 1000 + 10), pos[i] = static_cast<int32_t>(i);
  const int32_t* p3[3] = {pos.data(), pos.data(), pos.data()};
  struct Run {
    std::vector<float> vision, logits;
    std::map<std::string, std::vector<float>> layers;  // "model.language_model.layers.L" -> [n, hidden]
  };
  const TextConfig& tc = model.config().text;
  const int64_t nkv = tc.num_key_value_heads;
  auto run = [&](int threads, Run& r) {
    ThreadPool pool(threads);
    r.vision = encode_images(model, pool, {&*pre}).embeds;
    KVCache cache(tc, n, KVType::kF16);
    r.logits.assign(static_cast<size_t>(V), 0.0f);
    const DumpFn dump = [&r](const std::string& name, const float* data, const std::vector<int64_t>& shape) {
      int64_t count = 1;
      for (int64_t d : shape) count *= d;
      r.layers[name].assign(data, data + count);
    };
    TextSeq seq;
    seq.cache = &cache;
    seq.ids = ids.data();
    seq.n = n;
    for (int axis = 0; axis < 3; ++axis) seq.pos[axis] = p3[axis];
    seq.logits = r.logits.data();
    TextActivations act;
    text_forward_batch(model, pool, {seq}, &dump, &act);
    // Where the keys and values were widened: per thread up to nkv threads, else shared (nkv x 200 positions,
    // rounded up to whole key panels) and no thread holds a widened copy.
    size_t per_thread = 0;
    for (const AttentionThreadScratch& t : act.threads) per_thread += t.keys.size() + t.values.size();
    const size_t shared = act.shared_keys.size() + act.shared_values.size();
    if (threads > nkv) {
      EXPECT_EQ(per_thread, 0u) << threads << " threads";
      // Each kv head's keys in whole panels of the table's width (the cache's layout), its values in as many floats.
      EXPECT_EQ(shared, static_cast<size_t>(2 * nkv * cache.key_floats(n))) << threads << " threads";
      EXPECT_EQ(cache.key_floats(n), (n + kernels().nn_cols - 1) / kernels().nn_cols * kernels().nn_cols * tc.head_dim);
    } else {
      EXPECT_GT(per_thread, 0u) << threads << " threads";
      EXPECT_EQ(shared, 0u) << threads << " threads";
    }
  };
  Run one;
  run(1, one);
  ASSERT_FALSE(one.vision.empty());
  ASSERT_EQ(one.layers.count("model.language_model.layers." + std::to_string(model.config().text.num_hidden_layers - 1)), 1u);
  for (int threads : {2, 16, 64}) {
    Run r;
    run(threads, r);
    ASSERT_EQ(r.vision.size(), one.vision.size());
    EXPECT_EQ(0, std::memcmp(r.vision.data(), one.vision.data(), one.vision.size() * 4)) << "vision tower, " << threads << " threads";
    ASSERT_EQ(r.layers.size(), one.layers.size());
    for (const auto& [name, rows] : one.layers) {
      ASSERT_EQ(r.layers[name].size(), rows.size()) << name;
      EXPECT_EQ(0, std::memcmp(r.layers[name].data(), rows.data(), rows.size() * 4)) << name << ", " << threads << " threads";
    }
    EXPECT_EQ(0, std::memcmp(r.logits.data(), one.logits.data(), one.logits.size() * 4)) << "last logits, " << threads << " threads";
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace qvl
