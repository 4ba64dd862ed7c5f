// K-quant writing (tensor/kquant.h): what the quantizers write reads back through gguf_dequantize_row (ggml's
// dequantization, itself checked against the gguf package) close to the input, on awkward rows: Gaussian,
// heavy outliers, all-positive, all-negative, constant, zero; the codes use their whole range.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "io/gguf.h"
#include "tensor/kquant.h"

namespace qvl {
namespace {

struct Case {
  const char* name;
  std::vector<float> x;
};

std::vector<Case> rows() {
  std::mt19937 rng(11);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  const int n = 1024;
  std::vector<Case> out;
  Case g{"gaussian", std::vector<float>(n)};
  for (float& v : g.x) v = n01(rng) * 0.02f;
  out.push_back(g);
  Case o{"outliers", g.x};
  for (int i = 0; i < n; i += 97) o.x[i] = (i % 2 ? 1.5f : -2.0f);
  out.push_back(o);
  Case p{"positive", std::vector<float>(n)};
  for (float& v : p.x) v = 0.5f + std::fabs(n01(rng));
  out.push_back(p);
  Case m{"negative", std::vector<float>(n)};
  for (float& v : m.x) v = -0.25f - std::fabs(n01(rng));
  out.push_back(m);
  out.push_back({"constant", std::vector<float>(n, -0.75f)});
  out.push_back({"zero", std::vector<float>(n, 0.0f)});
  Case ramp{"ramp", std::vector<float>(n)};
  for (int i = 0; i < n; ++i) ramp.x[i] = static_cast<float>(i % 256) / 255.0f - 0.3f;
  out.push_back(ramp);
  return out;
}

// The weight type of a GGML id (the quantizers take qvl's types; the reader, GGML's ids).
WeightType wt(GgmlType g) {
  WeightType t = WeightType::kF32;
  EXPECT_TRUE(weight_type_from_ggml(static_cast<uint32_t>(g), &t));
  return t;
}

// RMS error over RMS of the input, per type: the bounds a 4-, 5- and 6-bit code with 6-/8-bit scales allows
// (Gaussian rows: about 0.07, 0.035, 0.017; a row with 100-sigma outliers costs the small sub-blocks their
// scales' precision).
void check(GgmlType type, double bound) {
  SCOPED_TRACE(ggml_type_name(static_cast<uint32_t>(type)));
  for (const Case& c : rows()) {
    SCOPED_TRACE(c.name);
    const int64_t n = static_cast<int64_t>(c.x.size());
    std::vector<uint8_t> q(static_cast<size_t>(n / 256 * ggml_block_bytes(type)));
    ASSERT_TRUE(quantize_row_kquant(wt(type), c.x.data(), q.data(), n).ok());
    std::vector<float> y(static_cast<size_t>(n));
    ASSERT_TRUE(gguf_dequantize_row(static_cast<uint32_t>(type), q.data(), y.data(), n).ok());
    double err = 0, ref = 0, worst = 0;
    for (int64_t i = 0; i < n; ++i) {
      err += (y[i] - c.x[i]) * (y[i] - c.x[i]);
      ref += static_cast<double>(c.x[i]) * c.x[i];
      worst = std::max(worst, std::fabs(static_cast<double>(y[i]) - c.x[i]));
    }
    if (ref == 0) {
      EXPECT_EQ(err, 0.0) << "zeros stay zeros";
      continue;
    }
    const double rel = std::sqrt(err / ref);
    std::printf("[kquant] %s %-9s rms error %.4f of rms, worst %.4g\n", ggml_type_name(static_cast<uint32_t>(type)),
                c.name, rel, worst);
    EXPECT_LE(rel, bound);
    if (std::string(c.name) == "constant") {
      EXPECT_LE(worst, 1e-3) << "a constant block is (nearly) exact";
    }
  }
}

TEST(KQuant, Q4KReadsBackClose) { check(GgmlType::kQ4_K, 0.12); }
TEST(KQuant, Q5KReadsBackClose) { check(GgmlType::kQ5_K, 0.06); }
TEST(KQuant, Q6KReadsBackClose) { check(GgmlType::kQ6_K, 0.04); }  // 100-sigma outliers: 0.032

// More bits, less error, on the same rows; and the codes are used: a ramp over a sub-block takes all 16 / 32 /
// 64 levels.
TEST(KQuant, MoreBitsLessErrorAndFullRange) {
  const Case g = rows()[0];
  auto rms = [&](GgmlType t) {
    const int64_t n = static_cast<int64_t>(g.x.size());
    std::vector<uint8_t> q(static_cast<size_t>(n / 256 * ggml_block_bytes(t)));
    EXPECT_TRUE(quantize_row_kquant(wt(t), g.x.data(), q.data(), n).ok());
    std::vector<float> y(static_cast<size_t>(n));
    EXPECT_TRUE(gguf_dequantize_row(static_cast<uint32_t>(t), q.data(), y.data(), n).ok());
    double e = 0;
    for (int64_t i = 0; i < n; ++i) e += (y[i] - g.x[i]) * (y[i] - g.x[i]);
    return e;
  };
  EXPECT_GT(rms(GgmlType::kQ4_K), rms(GgmlType::kQ5_K));
  EXPECT_GT(rms(GgmlType::kQ5_K), rms(GgmlType::kQ6_K));
  std::vector<float> ramp(256);
  for (int i = 0; i < 256; ++i) ramp[i] = static_cast<float>(i % 32);  // 0..31 in each sub-block
  std::vector<uint8_t> q(144);
  quantize_row_q4_k(ramp.data(), q.data(), 256);
  std::vector<float> y(256);
  ASSERT_TRUE(gguf_dequantize_row(static_cast<uint32_t>(GgmlType::kQ4_K), q.data(), y.data(), 256).ok());
  std::vector<float> levels(y.begin(), y.begin() + 32);
  std::sort(levels.begin(), levels.end());
  EXPECT_EQ(std::unique(levels.begin(), levels.end()) - levels.begin(), 16) << "Q4_K uses all 16 codes";
}

TEST(KQuant, RefusesPartialSuperBlocksAndOtherTypes) {
  std::vector<float> x(300, 1.0f);
  std::vector<uint8_t> q(1024);
  EXPECT_FALSE(quantize_row_kquant(WeightType::kQ4_K, x.data(), q.data(), 300).ok());
  EXPECT_FALSE(quantize_row_kquant(WeightType::kQ8_0, x.data(), q.data(), 256).ok());
}

}  // namespace
}  // namespace qvl
