// Safetensors reading and writing, dtype conversions, the checkpoint's tensor list and the test-model writer.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "model/config.h"
#include "model/tensor_specs.h"
#include "model/test_model.h"
#include "tensor/dtype.h"
#include "test_paths.h"
#include "util/file.h"

namespace qvl {
namespace {

namespace fs = std::filesystem;

float f32_bits(uint32_t b) { return std::bit_cast<float>(b); }
uint32_t bits_f32(float f) { return std::bit_cast<uint32_t>(f); }

// ---------------------------------------------------------------------------------------------------------
// DType conversions

TEST(DType, NamesAndSizes) {
  EXPECT_STREQ(dtype_name(DType::kF32), "F32");
  EXPECT_STREQ(dtype_name(DType::kF16), "F16");
  EXPECT_STREQ(dtype_name(DType::kBF16), "BF16");
  EXPECT_EQ(dtype_size(DType::kF32), 4u);
  EXPECT_EQ(dtype_size(DType::kF16), 2u);
  EXPECT_EQ(dtype_size(DType::kBF16), 2u);
  DType t;
  EXPECT_TRUE(dtype_from_name("BF16", &t));
  EXPECT_EQ(t, DType::kBF16);
  EXPECT_FALSE(dtype_from_name("I64", &t));
  EXPECT_FALSE(dtype_from_name("bf16", &t));
}

TEST(DType, Bf16EdgeValues) {
  EXPECT_EQ(bits_f32(bf16_to_f32(0x3f80)), 0x3f800000u);  // 1
  EXPECT_EQ(bits_f32(bf16_to_f32(0xc000)), 0xc0000000u);  // -2
  EXPECT_EQ(bits_f32(bf16_to_f32(0x0001)), 0x00010000u);  // smallest subnormal
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(f32_to_bf16(-0.0f), 0x8000);
  // Ties to even: 1 + 2^-8 lies halfway between 0x3f80 and 0x3f81 and goes to the even one.
  EXPECT_EQ(f32_to_bf16(f32_bits(0x3f808000)), 0x3f80);
  EXPECT_EQ(f32_to_bf16(f32_bits(0x3f818000)), 0x3f82);  // halfway 0x3f81..0x3f82: up to even
  EXPECT_EQ(f32_to_bf16(f32_bits(0x3f808001)), 0x3f81);  // just above halfway
  EXPECT_EQ(f32_to_bf16(f32_bits(0x3f807fff)), 0x3f80);  // just below halfway
  // Subnormals round like any other value.
  EXPECT_EQ(f32_to_bf16(f32_bits(0x00008000)), 0x0000);
  EXPECT_EQ(f32_to_bf16(f32_bits(0x00018000)), 0x0002);
  EXPECT_EQ(f32_to_bf16(f32_bits(0x80010000)), 0x8001);
  // Overflow and specials.
  EXPECT_EQ(f32_to_bf16(f32_bits(0x7f7fffff)), 0x7f80);  // FLT_MAX rounds to inf
  EXPECT_EQ(f32_to_bf16(f32_bits(0x7f7f7fff)), 0x7f7f);  // largest value that stays finite
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(f32_to_bf16(-std::numeric_limits<float>::infinity()), 0xff80);
  for (uint32_t nan : {0x7fc00000u, 0x7f800001u, 0xffffffffu, 0x7fffffffu, 0xff800001u}) {
    const uint16_t h = f32_to_bf16(f32_bits(nan));
    EXPECT_EQ(h & 0x7f80, 0x7f80) << std::hex << nan;
    EXPECT_NE(h & 0x007f, 0) << std::hex << nan;  // still a NaN, not inf
    EXPECT_EQ(h & 0x8000, (nan >> 16) & 0x8000) << std::hex << nan;
  }
  // Every bf16 value survives the round trip through f32 exactly (NaNs stay NaN).
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = bf16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(f))));
    } else {
      ASSERT_EQ(f32_to_bf16(f), h);
    }
  }
}

TEST(DType, F16EdgeValues) {
  EXPECT_EQ(bits_f32(f16_to_f32(0x3c00)), 0x3f800000u);  // 1
  EXPECT_EQ(bits_f32(f16_to_f32(0x7bff)), bits_f32(65504.0f));
  EXPECT_EQ(bits_f32(f16_to_f32(0x0001)), 0x33800000u);  // 2^-24, smallest subnormal
  EXPECT_EQ(bits_f32(f16_to_f32(0x03ff)), bits_f32(1023.0f / 16777216.0f));  // largest subnormal
  EXPECT_EQ(bits_f32(f16_to_f32(0x0400)), 0x38800000u);  // 2^-14, smallest normal
  EXPECT_EQ(bits_f32(f16_to_f32(0x8000)), 0x80000000u);
  EXPECT_EQ(bits_f32(f16_to_f32(0x7c00)), 0x7f800000u);
  EXPECT_EQ(bits_f32(f16_to_f32(0xfc00)), 0xff800000u);
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7e00)));
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7c01)));

  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_f16(-2.0f), 0xc000);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(f32_bits(0x477fefff)), 0x7bff);  // just below 65520: stays finite
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);              // the tie above 65504 rounds to even = inf
  EXPECT_EQ(f32_to_f16(1e10f), 0x7c00);
  EXPECT_EQ(f32_to_f16(-1e10f), 0xfc00);
  EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::infinity()), 0x7c00);
  // Ties to even among normals: 1 + 2^-11 is halfway between 0x3c00 and 0x3c01.
  EXPECT_EQ(f32_to_f16(1.0f + 1.0f / 2048), 0x3c00);
  EXPECT_EQ(f32_to_f16(1.0f + 3.0f / 2048), 0x3c02);
  EXPECT_EQ(f32_to_f16(f32_bits(0x3f801001)), 0x3c01);  // just above halfway
  // Subnormals: value = m * 2^-24.
  const float q = 1.0f / 16777216.0f;  // 2^-24
  EXPECT_EQ(f32_to_f16(q), 0x0001);
  EXPECT_EQ(f32_to_f16(0.5f * q), 0x0000);           // 2^-25: tie between 0 and 1, to even 0
  EXPECT_EQ(f32_to_f16(f32_bits(0x33000001)), 0x0001);  // just above 2^-25
  EXPECT_EQ(f32_to_f16(0.49f * q), 0x0000);
  EXPECT_EQ(f32_to_f16(1.5f * q), 0x0002);            // tie between 1 and 2: to even 2
  EXPECT_EQ(f32_to_f16(2.5f * q), 0x0002);            // tie between 2 and 3: to even 2
  EXPECT_EQ(f32_to_f16(-3.0f * q), 0x8003);
  EXPECT_EQ(f32_to_f16(1023.0f * q), 0x03ff);
  EXPECT_EQ(f32_to_f16(1023.5f * q), 0x0400);  // tie between the largest subnormal and the smallest normal
  EXPECT_EQ(f32_to_f16(f32_bits(0x00000001)), 0x0000);  // f32 subnormal
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
  for (uint32_t nan : {0x7fc00000u, 0x7f800001u, 0xffc00000u}) {
    const uint16_t h = f32_to_f16(f32_bits(nan));
    EXPECT_EQ(h & 0x7c00, 0x7c00) << std::hex << nan;
    EXPECT_NE(h & 0x03ff, 0) << std::hex << nan;
    EXPECT_EQ(h & 0x8000, (nan >> 16) & 0x8000) << std::hex << nan;
  }
  // Every f16 value survives the round trip exactly (NaNs stay NaN).
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = f16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(f))));
    } else {
      ASSERT_EQ(f32_to_f16(f), h);
    }
  }
}

#if defined(__aarch64__) || defined(__FLT16_MAX__)
// The compiler's own half type (ARM64: __fp16, the hardware's fcvt; elsewhere _Float16) converts exactly,
// IEEE round-to-nearest-even: compare on a spread of float bit patterns.
#if defined(__aarch64__)
using CompilerHalf = __fp16;
#else
using CompilerHalf = _Float16;
#endif
TEST(DType, F16MatchesCompilerConversion) {
  uint64_t s = 12345;
  for (int i = 0; i < 2000000; ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    uint32_t b = static_cast<uint32_t>(s >> 32);
    if (i % 2) b = (b & 0x80000000u) | (0x33000000u + (b % 0x14800000u));  // concentrate on f16's range
    const float f = f32_bits(b);
    if (std::isnan(f)) continue;
    const CompilerHalf ref = static_cast<CompilerHalf>(f);
    uint16_t ref_bits;
    std::memcpy(&ref_bits, &ref, 2);
    ASSERT_EQ(f32_to_f16(f), ref_bits) << std::hex << b;
  }
}
#endif

// ---------------------------------------------------------------------------------------------------------
// Reading and writing files

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("qvl_test_safetensors_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // Writes a raw file: 8-byte little-endian header length, the header text, then `data`.
  std::string write_raw(const std::string& name, const std::string& header, const std::string& data,
                        uint64_t header_len_override = UINT64_MAX) {
    std::string bytes(8, '\0');
    const uint64_t len = header_len_override != UINT64_MAX ? header_len_override : header.size();
    for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>(len >> (8 * i));
    bytes += header + data;
    EXPECT_TRUE(write_file_bytes(path(name), bytes.data(), bytes.size()).ok());
    return path(name);
  }

  // Opens a file expected to be refused, and returns the message.
  std::string open_error(const std::string& file) {
    auto r = SafetensorsFile::open(file);
    EXPECT_FALSE(r.ok()) << file << " opened but should not have";
    return r.ok() ? "" : r.status().message();
  }

  fs::path dir_;
};

TEST_F(SafetensorsTest, RoundTrip) {
  const std::vector<float> a = {1.5f, -2.0f, 3.25f, 0.0f, -0.0f, 1e-30f};
  const std::vector<uint16_t> b = {0x3f80, 0xc000, 0x0001, 0x7f80};
  const std::vector<uint16_t> c = {0x3c00, 0xfbff};
  const float scalar = 42.0f;
  std::vector<TensorToWrite> tensors = {
      tensor_from_memory("b.bf16", DType::kBF16, {4}, b.data()),
      tensor_from_memory("a.f32", DType::kF32, {2, 3}, a.data()),
      tensor_from_memory("c.f16", DType::kF16, {1, 1, 2}, c.data()),
      tensor_from_memory("scalar", DType::kF32, {}, &scalar),
      tensor_from_memory("empty", DType::kBF16, {0, 5}, nullptr),
  };
  ASSERT_TRUE(write_safetensors(path("x.safetensors"), tensors, {{"format", "pt"}, {"by", "qvl"}}).ok());
  EXPECT_FALSE(fs::exists(path("x.safetensors.tmp")));

  auto f = SafetensorsFile::open(path("x.safetensors"));
  ASSERT_TRUE(f.ok()) << f.status().message();
  ASSERT_EQ(f->tensors().size(), 5u);
  EXPECT_EQ(f->metadata().at("format"), "pt");
  EXPECT_EQ(f->metadata().at("by"), "qvl");
  // Data order: F32 first, then BF16, then F16, each by name.
  std::vector<std::string> names;
  for (const auto& t : f->tensors()) names.push_back(t.name);
  EXPECT_EQ(names, (std::vector<std::string>{"a.f32", "scalar", "b.bf16", "empty", "c.f16"}));

  const TensorView* ta = f->find("a.f32");
  ASSERT_NE(ta, nullptr);
  EXPECT_EQ(ta->dtype, DType::kF32);
  EXPECT_EQ(ta->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(ta->numel(), 6);
  ASSERT_EQ(ta->nbytes, 24u);
  EXPECT_EQ(std::memcmp(ta->data, a.data(), 24), 0);
  const TensorView* tb = f->find("b.bf16");
  ASSERT_NE(tb, nullptr);
  EXPECT_EQ(tb->dtype, DType::kBF16);
  EXPECT_EQ(std::memcmp(tb->data, b.data(), 8), 0);
  const TensorView* tc = f->find("c.f16");
  ASSERT_NE(tc, nullptr);
  EXPECT_EQ(tc->dtype, DType::kF16);
  EXPECT_EQ(tc->shape, (std::vector<int64_t>{1, 1, 2}));
  EXPECT_EQ(std::memcmp(tc->data, c.data(), 4), 0);
  const TensorView* ts = f->find("scalar");
  ASSERT_NE(ts, nullptr);
  EXPECT_TRUE(ts->shape.empty());
  EXPECT_EQ(ts->numel(), 1);
  EXPECT_EQ(std::memcmp(ts->data, &scalar, 4), 0);
  const TensorView* te = f->find("empty");
  ASSERT_NE(te, nullptr);
  EXPECT_EQ(te->numel(), 0);
  EXPECT_EQ(te->nbytes, 0u);
  EXPECT_EQ(f->find("missing"), nullptr);

  // Moving the file keeps the views valid: the mapping does not move.
  SafetensorsFile moved = std::move(f).value();
  EXPECT_EQ(std::memcmp(moved.find("a.f32")->data, a.data(), 24), 0);

  // The header: compact JSON, metadata first, tensors in data order, offsets contiguous, padded to 8.
  auto raw = read_file_bytes(path("x.safetensors"));
  ASSERT_TRUE(raw.ok());
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | (*raw)[i];
  EXPECT_EQ(n % 8, 0u);
  const std::string header(raw->begin() + 8, raw->begin() + 8 + static_cast<int64_t>(n));
  const std::string expected =
      R"({"__metadata__":{"by":"qvl","format":"pt"},)"
      R"("a.f32":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
      R"("scalar":{"dtype":"F32","shape":[],"data_offsets":[24,28]},)"
      R"("b.bf16":{"dtype":"BF16","shape":[4],"data_offsets":[28,36]},)"
      R"("empty":{"dtype":"BF16","shape":[0,5],"data_offsets":[36,36]},)"
      R"("c.f16":{"dtype":"F16","shape":[1,1,2],"data_offsets":[36,40]}})";
  EXPECT_EQ(header.substr(0, expected.size()), expected);
  EXPECT_EQ(header.find_first_not_of(' ', expected.size()), std::string::npos);
  EXPECT_EQ(raw->size(), 8 + n + 40);
}

TEST_F(SafetensorsTest, StreamsTensorsLargerThanTheBuffer) {
  // 17 Mi floats = 68 MiB, more than the 64 MiB write buffer: the tensor arrives in two pieces.
  const int64_t rows = 17, cols = 1 << 20;
  int calls = 0;
  TensorToWrite big{"big", DType::kF32, {rows, cols}, [&](int64_t first, int64_t count, uint8_t* dst) {
                      ++calls;
                      for (int64_t j = 0; j < count; ++j) {
                        const uint32_t v = static_cast<uint32_t>(first + j) * 2654435761u;
                        std::memcpy(dst + 4 * j, &v, 4);
                      }
                    }};
  uint64_t last_done = 0, last_total = 0;
  ASSERT_TRUE(write_safetensors(path("big.safetensors"), {big}, {},
                                [&](uint64_t d, uint64_t t) { last_done = d, last_total = t; })
                  .ok());
  EXPECT_GE(calls, 2);
  EXPECT_EQ(last_done, uint64_t(rows * cols * 4));
  EXPECT_EQ(last_total, last_done);
  auto f = SafetensorsFile::open(path("big.safetensors"));
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_TRUE(f->metadata().empty());
  const TensorView* t = f->find("big");
  ASSERT_NE(t, nullptr);
  ASSERT_EQ(t->nbytes, size_t(rows * cols * 4));
  for (int64_t i = 0; i < rows * cols; i += 9973) {
    uint32_t v;
    std::memcpy(&v, t->data + 4 * i, 4);
    ASSERT_EQ(v, static_cast<uint32_t>(i) * 2654435761u) << i;
  }
}

TEST_F(SafetensorsTest, WriterRefusesBadRequests) {
  const float x = 1.0f;
  auto dup = write_safetensors(path("d.safetensors"), {tensor_from_memory("t", DType::kF32, {}, &x),
                                                       tensor_from_memory("t", DType::kF32, {}, &x)}, {});
  ASSERT_FALSE(dup.ok());
  EXPECT_NE(dup.message().find("'t' is given twice"), std::string::npos) << dup.message();
  auto neg = write_safetensors(path("d.safetensors"), {tensor_from_memory("t", DType::kF32, {-1}, &x)}, {});
  ASSERT_FALSE(neg.ok());
  EXPECT_NE(neg.message().find("invalid shape"), std::string::npos) << neg.message();
  auto meta = write_safetensors(path("d.safetensors"), {tensor_from_memory("__metadata__", DType::kF32, {}, &x)}, {});
  EXPECT_FALSE(meta.ok());
  auto dir = write_safetensors(path("no/such/dir/d.safetensors"), {tensor_from_memory("t", DType::kF32, {}, &x)}, {});
  ASSERT_FALSE(dir.ok());
  EXPECT_NE(dir.message().find("cannot create"), std::string::npos) << dir.message();
  EXPECT_FALSE(fs::exists(path("d.safetensors")));
}

TEST_F(SafetensorsTest, RefusesBadHeaderLength) {
  // Fewer than 8 bytes.
  ASSERT_TRUE(write_file_bytes(path("tiny.safetensors"), "abc", 3).ok());
  std::string m = open_error(path("tiny.safetensors"));
  EXPECT_NE(m.find("too short"), std::string::npos) << m;
  EXPECT_NE(m.find("tiny.safetensors"), std::string::npos) << m;
  // A length past the end of the file.
  m = open_error(write_raw("long.safetensors", "{}", "", 1000));
  EXPECT_NE(m.find("header length 1000"), std::string::npos) << m;
  EXPECT_NE(m.find("long.safetensors"), std::string::npos) << m;
  // An absurd length (e.g. a file of another format).
  m = open_error(write_raw("huge.safetensors", "{}", "", 0x4e4f53494a7b0000ull));
  EXPECT_NE(m.find("impossible"), std::string::npos) << m;
  // A missing file.
  m = open_error(path("absent.safetensors"));
  EXPECT_NE(m.find("cannot open"), std::string::npos) << m;
}

TEST_F(SafetensorsTest, RefusesBadJson) {
  std::string m = open_error(write_raw("bad.safetensors", "{\"a\": [1, 2", ""));
  EXPECT_NE(m.find("not valid JSON"), std::string::npos) << m;
  m = open_error(write_raw("arr.safetensors", "[1, 2]   ", ""));
  EXPECT_NE(m.find("must be a JSON object"), std::string::npos) << m;
  m = open_error(write_raw("fields.safetensors", R"({"w":{"dtype":"F32","shape":[1]}})", "abcd"));
  EXPECT_NE(m.find("tensor 'w'"), std::string::npos) << m;
  EXPECT_NE(m.find("data_offsets"), std::string::npos) << m;
  m = open_error(write_raw("negshape.safetensors", R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", "abcd"));
  EXPECT_NE(m.find("non-negative"), std::string::npos) << m;
  m = open_error(write_raw("meta.safetensors", R"({"__metadata__":{"format":1}})", ""));
  EXPECT_NE(m.find("__metadata__"), std::string::npos) << m;
}

TEST_F(SafetensorsTest, RefusesUnknownDtype) {
  std::string m = open_error(write_raw("i64.safetensors", R"({"ids":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})",
                                       std::string(8, '\0')));
  EXPECT_NE(m.find("tensor 'ids' has dtype I64"), std::string::npos) << m;
  EXPECT_NE(m.find("expected F32, F16, BF16 or U8"), std::string::npos) << m;
}

TEST_F(SafetensorsTest, RefusesOffsetsPastTheEnd) {
  std::string m = open_error(write_raw("past.safetensors",
                                       R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[100,116]}})", std::string(16, '\0')));
  EXPECT_NE(m.find("past.safetensors"), std::string::npos) << m;
  EXPECT_NE(m.find("tensor 'w' runs past the end"), std::string::npos) << m;
}

TEST_F(SafetensorsTest, RefusesTruncatedFile) {
  std::vector<float> w(100, 1.0f), v(10, 2.0f);
  ASSERT_TRUE(write_safetensors(path("t.safetensors"), {tensor_from_memory("layer.w", DType::kF32, {100}, w.data()),
                                                        tensor_from_memory("layer.v", DType::kF32, {10}, v.data())},
                                {{"format", "pt"}})
                  .ok());
  // Data order is by name: layer.v then layer.w, so cutting the end cuts layer.w.
  const auto size = fs::file_size(path("t.safetensors"));
  fs::resize_file(path("t.safetensors"), size - 7);
  std::string m = open_error(path("t.safetensors"));
  EXPECT_NE(m.find("t.safetensors"), std::string::npos) << m;
  EXPECT_NE(m.find("tensor 'layer.w' runs past the end"), std::string::npos) << m;
  EXPECT_NE(m.find("truncated"), std::string::npos) << m;
  // Cut inside the header.
  fs::resize_file(path("t.safetensors"), 40);
  m = open_error(path("t.safetensors"));
  EXPECT_NE(m.find("header length"), std::string::npos) << m;
}

TEST_F(SafetensorsTest, RefusesShapeOffsetMismatch) {
  std::string m = open_error(write_raw("mis.safetensors",
                                       R"({"w":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,24]}})", std::string(24, '\0')));
  EXPECT_NE(m.find("tensor 'w'"), std::string::npos) << m;
  EXPECT_NE(m.find("hold 24 bytes, expected 12 for BF16 [2, 3]"), std::string::npos) << m;
  m = open_error(write_raw("rev.safetensors", R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})",
                           std::string(8, '\0')));
  EXPECT_NE(m.find("tensor 'w'"), std::string::npos) << m;
  m = open_error(write_raw("ovl.safetensors",
                           R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                           std::string(12, '\0')));
  EXPECT_NE(m.find("tensors 'a' and 'b' overlap"), std::string::npos) << m;
  m = open_error(write_raw("big.safetensors",
                           R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}})", std::string(4, '\0')));
  EXPECT_NE(m.find("too large"), std::string::npos) << m;
}

// ---------------------------------------------------------------------------------------------------------
// Model directories

TEST_F(SafetensorsTest, ModelDirectorySingleFile) {
  const std::vector<uint16_t> w = {1, 2, 3, 4};
  ASSERT_TRUE(write_safetensors(path("model.safetensors"), {tensor_from_memory("w", DType::kBF16, {2, 2}, w.data())},
                                {{"format", "pt"}})
                  .ok());
  auto m = SafetensorsModel::open(dir_.string());
  ASSERT_TRUE(m.ok()) << m.status().message();
  ASSERT_EQ(m->tensors().size(), 1u);
  ASSERT_NE(m->find("w"), nullptr);
  EXPECT_EQ(m->find("nope"), nullptr);
  EXPECT_EQ(m->mapped_bytes(), fs::file_size(path("model.safetensors")));
}

TEST_F(SafetensorsTest, ModelDirectoryMissingWeights) {
  auto m = SafetensorsModel::open(dir_.string());
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("no model.safetensors or model.safetensors.index.json"), std::string::npos)
      << m.status().message();
}

class ShardedModelTest : public SafetensorsTest {
 protected:
  void SetUp() override {
    SafetensorsTest::SetUp();
    ASSERT_TRUE(write_safetensors(path("model-00001-of-00002.safetensors"),
                                  {tensor_from_memory("a", DType::kF32, {2}, a_), tensor_from_memory("b", DType::kF32, {1}, a_)},
                                  {{"format", "pt"}})
                    .ok());
    ASSERT_TRUE(write_safetensors(path("model-00002-of-00002.safetensors"),
                                  {tensor_from_memory("c", DType::kBF16, {3}, c_)}, {{"format", "pt"}})
                    .ok());
  }
  void write_index(const nlohmann::json& weight_map) {
    const std::string text = nlohmann::json{{"metadata", {{"total_size", 18}}}, {"weight_map", weight_map}}.dump();
    ASSERT_TRUE(write_file_bytes(path("model.safetensors.index.json"), text.data(), text.size()).ok());
  }
  float a_[2] = {1.0f, 2.0f};
  uint16_t c_[3] = {7, 8, 9};
};

TEST_F(ShardedModelTest, OpensEveryShardOnce) {
  write_index({{"a", "model-00001-of-00002.safetensors"},
               {"b", "model-00001-of-00002.safetensors"},
               {"c", "model-00002-of-00002.safetensors"}});
  auto m = SafetensorsModel::open(dir_.string());
  ASSERT_TRUE(m.ok()) << m.status().message();
  ASSERT_EQ(m->tensors().size(), 3u);
  ASSERT_NE(m->find("c"), nullptr);
  EXPECT_EQ(m->find("c")->dtype, DType::kBF16);
  EXPECT_EQ(std::memcmp(m->find("c")->data, c_, 6), 0);
  EXPECT_EQ(std::memcmp(m->find("a")->data, a_, 8), 0);
  EXPECT_EQ(m->mapped_bytes(), fs::file_size(path("model-00001-of-00002.safetensors")) +
                                   fs::file_size(path("model-00002-of-00002.safetensors")));
  // Moving the model keeps the views valid.
  SafetensorsModel moved = std::move(m).value();
  EXPECT_EQ(std::memcmp(moved.find("a")->data, a_, 8), 0);
}

TEST_F(ShardedModelTest, RefusesMissingShard) {
  write_index({{"a", "model-00001-of-00002.safetensors"}, {"z", "model-00003-of-00003.safetensors"}});
  auto m = SafetensorsModel::open(dir_.string());
  ASSERT_FALSE(m.ok());
  const std::string& msg = m.status().message();
  EXPECT_NE(msg.find("model-00003-of-00003.safetensors"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'z'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cannot open"), std::string::npos) << msg;
}

TEST_F(ShardedModelTest, RefusesTensorMissingFromShard) {
  write_index({{"a", "model-00001-of-00002.safetensors"}, {"c", "model-00001-of-00002.safetensors"}});
  auto m = SafetensorsModel::open(dir_.string());
  ASSERT_FALSE(m.ok());
  const std::string& msg = m.status().message();
  EXPECT_NE(msg.find("tensor 'c' is listed in shard model-00001-of-00002.safetensors but that shard does not hold it"),
            std::string::npos)
      << msg;
}

TEST_F(ShardedModelTest, RefusesBadIndex) {
  const std::string text = R"({"metadata": {}})";
  ASSERT_TRUE(write_file_bytes(path("model.safetensors.index.json"), text.data(), text.size()).ok());
  auto m = SafetensorsModel::open(dir_.string());
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("weight_map"), std::string::npos) << m.status().message();
  write_index({{"a", "../model-00001-of-00002.safetensors"}});
  m = SafetensorsModel::open(dir_.string());
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("plain file name"), std::string::npos) << m.status().message();
}

TEST_F(ShardedModelTest, RefusesTensorInTwoShards) {
  ASSERT_TRUE(write_safetensors(path("model-00002-of-00002.safetensors"),
                                {tensor_from_memory("a", DType::kF32, {2}, a_)}, {})
                  .ok());
  write_index({{"a", "model-00001-of-00002.safetensors"}, {"b", "model-00002-of-00002.safetensors"}});
  auto m = SafetensorsModel::open(dir_.string());
  ASSERT_FALSE(m.ok());  // shard 2 lacks b
  write_index({{"a", "model-00001-of-00002.safetensors"}, {"b", "model-00001-of-00002.safetensors"},
               {"x", "model-00002-of-00002.safetensors"}});
  m = SafetensorsModel::open(dir_.string());
  ASSERT_FALSE(m.ok());
  write_index({{"b", "model-00001-of-00002.safetensors"}, {"a", "model-00002-of-00002.safetensors"}});
  m = SafetensorsModel::open(dir_.string());
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("tensor 'a' appears in two files"), std::string::npos) << m.status().message();
}

// ---------------------------------------------------------------------------------------------------------
// The checkpoint's tensors

TEST(TensorSpecs, RealConfigGives625TensorsAnd2127532032Params) {
  auto config = ModelConfig::load(test::model_files_dir());
  ASSERT_TRUE(config.ok()) << config.status().message();
  const auto specs = expected_tensors(*config);
  ASSERT_EQ(specs.size(), 625u);
  int vision = 0, text = 0;
  int64_t params = 0, vision_params = 0;
  for (const auto& s : specs) {
    params += s.numel();
    if (s.name.rfind("model.visual.", 0) == 0) {
      ++vision;
      vision_params += s.numel();
    } else if (s.name.rfind("model.language_model.", 0) == 0) {
      ++text;
    }
  }
  EXPECT_EQ(vision, 315);
  EXPECT_EQ(text, 310);
  EXPECT_EQ(params, 2127532032);
  EXPECT_EQ(vision_params, 406957056);
  // Spot checks against MODEL.md section 2 and transformers' state_dict.
  auto find = [&](const std::string& name) -> std::vector<int64_t> {
    for (const auto& s : specs)
      if (s.name == name) return s.shape;
    ADD_FAILURE() << "no tensor " << name;
    return {};
  };
  EXPECT_EQ(find("model.visual.patch_embed.proj.weight"), (std::vector<int64_t>{1024, 3, 2, 16, 16}));
  EXPECT_EQ(find("model.visual.pos_embed.weight"), (std::vector<int64_t>{2304, 1024}));
  EXPECT_EQ(find("model.visual.blocks.23.attn.qkv.weight"), (std::vector<int64_t>{3072, 1024}));
  EXPECT_EQ(find("model.visual.merger.norm.weight"), (std::vector<int64_t>{1024}));
  EXPECT_EQ(find("model.visual.deepstack_merger_list.2.norm.bias"), (std::vector<int64_t>{4096}));
  EXPECT_EQ(find("model.visual.deepstack_merger_list.0.linear_fc2.weight"), (std::vector<int64_t>{2048, 4096}));
  EXPECT_EQ(find("model.language_model.embed_tokens.weight"), (std::vector<int64_t>{151936, 2048}));
  EXPECT_EQ(find("model.language_model.layers.27.self_attn.k_proj.weight"), (std::vector<int64_t>{1024, 2048}));
  EXPECT_EQ(find("model.language_model.layers.0.self_attn.q_norm.weight"), (std::vector<int64_t>{128}));
  EXPECT_EQ(find("model.language_model.layers.5.mlp.down_proj.weight"), (std::vector<int64_t>{2048, 6144}));
  EXPECT_EQ(find("model.language_model.norm.weight"), (std::vector<int64_t>{2048}));

  ModelConfig untied = *config;
  untied.text.tie_word_embeddings = false;
  const auto with_head = expected_tensors(untied);
  ASSERT_EQ(with_head.size(), 626u);
  EXPECT_EQ(with_head.back().name, "lm_head.weight");
  EXPECT_EQ(with_head.back().shape, (std::vector<int64_t>{151936, 2048}));
}

// ---------------------------------------------------------------------------------------------------------
// The test-model writer

class TestModelTest : public SafetensorsTest {
 protected:
  Status make(const std::string& out, uint64_t seed) {
    TestModelOptions opt;
    opt.preset = "tiny";
    opt.seed = seed;
    opt.out_dir = path(out);
    opt.model_files_dir = test::model_files_dir();
    return make_test_model(opt);
  }
};

TEST_F(TestModelTest, TinyHoldsExactlyTheExpectedTensors) {
  Status st = make("tiny", 7);
  ASSERT_TRUE(st.ok()) << st.message();
  auto config = ModelConfig::load(path("tiny"));
  ASSERT_TRUE(config.ok()) << config.status().message();
  EXPECT_EQ(config->vision.depth, 5);
  EXPECT_EQ(config->vision.hidden_size, 64);
  EXPECT_EQ(config->vision.deepstack_visual_indexes, (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(config->text.hidden_size, 128);
  EXPECT_EQ(config->text.num_hidden_layers, 4);
  EXPECT_EQ(config->text.num_key_value_heads, 1);
  EXPECT_EQ(config->text.head_dim, 128);
  EXPECT_EQ(config->text.vocab_size, 151936);
  EXPECT_TRUE(config->text.tie_word_embeddings);

  auto model = SafetensorsModel::open(path("tiny"));
  ASSERT_TRUE(model.ok()) << model.status().message();
  const auto specs = expected_tensors(*config);
  EXPECT_EQ(model->tensors().size(), specs.size());
  for (const auto& s : specs) {
    const TensorView* t = model->find(s.name);
    ASSERT_NE(t, nullptr) << s.name;
    EXPECT_EQ(t->shape, s.shape) << s.name;
    EXPECT_EQ(t->dtype, DType::kBF16) << s.name;
  }
  EXPECT_EQ(model->find("lm_head.weight"), nullptr);

  // Value ranges: norm weights 1 ± 1/16, embeddings ±1/8, linears ±2^-k with 4^k <= fan_in.
  auto range = [&](const std::string& name) {
    const TensorView* t = model->find(name);
    float lo = 1e30f, hi = -1e30f;
    const uint16_t* p = reinterpret_cast<const uint16_t*>(t->data);
    for (int64_t i = 0; i < t->numel(); ++i) {
      lo = std::min(lo, bf16_to_f32(p[i]));
      hi = std::max(hi, bf16_to_f32(p[i]));
    }
    return std::pair{lo, hi};
  };
  auto [nlo, nhi] = range("model.language_model.layers.0.input_layernorm.weight");
  EXPECT_GE(nlo, 1.0f - 1.0f / 16);
  EXPECT_LE(nhi, 1.0f + 1.0f / 16);
  EXPECT_LT(nlo, 0.97f);
  auto [elo, ehi] = range("model.language_model.embed_tokens.weight");
  EXPECT_GE(elo, -0.125f);
  EXPECT_LE(ehi, 0.125f);
  EXPECT_GT(ehi, 0.12f);
  auto [qlo, qhi] = range("model.language_model.layers.0.mlp.down_proj.weight");  // fan_in 256: ±1/16
  EXPECT_GE(qlo, -1.0f / 16);
  EXPECT_LE(qhi, 1.0f / 16);
  EXPECT_GT(qhi, 0.06f);

  // The tokenizer and processor configs are copies of the source files.
  for (const char* name : {"tokenizer.json", "chat_template.json", "generation_config.json",
                           "preprocessor_config.json", "video_preprocessor_config.json"}) {
    auto got = read_file_bytes(path("tiny") + "/" + name);
    auto want = read_file_bytes(test::model_files_dir() + "/" + name);
    ASSERT_TRUE(got.ok() && want.ok()) << name;
    EXPECT_EQ(*got, *want) << name;
  }
  auto f = SafetensorsFile::open(path("tiny") + "/model.safetensors");
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->metadata().at("format"), "pt");
}

TEST_F(TestModelTest, SameSeedSameBytesOtherSeedOtherBytes) {
  ASSERT_TRUE(make("a", 1).ok());
  ASSERT_TRUE(make("b", 1).ok());
  ASSERT_TRUE(make("c", 2).ok());
  auto a = read_file_bytes(path("a") + "/model.safetensors");
  auto b = read_file_bytes(path("b") + "/model.safetensors");
  auto c = read_file_bytes(path("c") + "/model.safetensors");
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(a->size(), c->size());
  EXPECT_TRUE(*a == *b);
  EXPECT_FALSE(*a == *c);
}

TEST_F(TestModelTest, RefusesMissingSourceFilesAndBadPreset) {
  TestModelOptions opt;
  opt.out_dir = path("x");
  opt.model_files_dir = path("nowhere");
  Status st = make_test_model(opt);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("--model-files"), std::string::npos) << st.message();
  opt.model_files_dir = test::model_files_dir();
  opt.preset = "7b";
  st = make_test_model(opt);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("expected tiny, tiny-4b, tiny-8b, 2b, 4b or 8b"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace qvl
