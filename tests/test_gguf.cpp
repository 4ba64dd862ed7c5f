// The GGUF reader against the `gguf` package (llama.cpp's Python reader and dequantizer) on a file it wrote
// (tests/data/gguf/types.gguf, tools/reference/gen_gguf_goldens.py): every metadata value type, every GGML
// type qvl reads dequantized to the same floats bit for bit; and refusals of damaged and hostile files.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/gguf.h"
#include "util/digest.h"
#include "test_paths.h"
#include "util/file.h"

namespace qvl {
namespace {

using json = nlohmann::json;

json golden() {
  auto text = read_file_text(test::data_dir() + "/gguf_golden.json");
  EXPECT_TRUE(text.ok()) << text.status().message();
  return json::parse(text.ok() ? *text : std::string("{}"));
}

std::vector<uint8_t> file_bytes() {
  auto b = read_file_bytes(test::data_dir() + "/gguf/types.gguf");
  EXPECT_TRUE(b.ok()) << b.status().message();
  return b.ok() ? std::move(b).value() : std::vector<uint8_t>();
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(Gguf, MetadataAsTheGgufPackageReadsIt) {
  auto f = GgufFile::open(test::data_dir() + "/gguf/types.gguf");
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->alignment(), 32u);
  EXPECT_EQ(*f->get_string("general.architecture"), "qvltest");
  const json g = golden();
  for (const auto& [key, want] : g["metadata"].items()) {
    SCOPED_TRACE(key);
    const GgufValue* v = f->find(key);
    ASSERT_NE(v, nullptr);
    if (want.is_string()) {
      EXPECT_EQ(*f->get_string(key), want.get<std::string>());
    } else if (want.is_boolean()) {
      EXPECT_EQ(v->b, want.get<bool>());
    } else if (want.is_number_float()) {
      EXPECT_EQ(*f->get_float(key), want.get<double>());
    } else if (want.is_number_unsigned()) {
      EXPECT_EQ(*f->get_uint(key), want.get<uint64_t>());
    } else if (want.is_number_integer()) {
      EXPECT_EQ(v->i, want.get<int64_t>());
    } else if (want.is_array() && !want.empty() && want[0].is_string()) {
      EXPECT_EQ(*f->get_strings(key), want.get<std::vector<std::string>>());
    } else if (want.is_array() && !want.empty() && want[0].is_number_float()) {
      EXPECT_EQ(*f->get_floats(key), want.get<std::vector<double>>());
    } else if (want.is_array() && !want.empty() && want[0].is_boolean()) {
      std::vector<int64_t> b;
      for (const auto& x : want) b.push_back(x.get<bool>());
      EXPECT_EQ(*f->get_ints(key), b);
    } else {
      EXPECT_EQ(*f->get_ints(key), want.get<std::vector<int64_t>>());
    }
  }
  // Typed lookups say what the key held.
  auto wrong = f->get_string("test.u32");
  ASSERT_FALSE(wrong.ok());
  EXPECT_TRUE(contains(wrong.status().message(), "test.u32 is uint32 4000000000, expected a string")) << wrong.status().message();
  EXPECT_FALSE(f->get_uint("test.i8").ok());  // negative
  EXPECT_TRUE(contains(f->get_uint("nope").status().message(), "nope is missing"));
}

TEST(Gguf, EveryTypeDequantizesAsGgml) {
  auto f = GgufFile::open(test::data_dir() + "/gguf/types.gguf");
  ASSERT_TRUE(f.ok()) << f.status().message();
  const json g = golden();
  ASSERT_EQ(f->tensors().size(), g["tensors"].size());
  for (const json& want : g["tensors"]) {
    const std::string name = want["name"];
    SCOPED_TRACE(name + " (" + want["type_name"].get<std::string>() + ")");
    const GgufTensor* t = f->tensor(name);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->type, want["type"].get<uint32_t>());
    EXPECT_STREQ(ggml_type_name(t->type), want["type_name"].get<std::string>().c_str());
    EXPECT_EQ(t->ne, want["ne"].get<std::vector<int64_t>>());
    std::vector<float> values(static_cast<size_t>(t->numel()));  // [rows * ne[0]]
    const int64_t cols = t->ne[0], rows = t->numel() / cols;
    const int64_t row_bytes = static_cast<int64_t>(t->bytes) / rows;
    for (int64_t r = 0; r < rows; ++r) {
      Status s = gguf_dequantize_row(t->type, t->data + r * row_bytes, values.data() + r * cols, cols);
      ASSERT_TRUE(s.ok()) << s.message();
    }
    for (size_t k = 0; k < want["first"].size(); ++k) EXPECT_EQ(values[k], want["first"][k].get<float>()) << k;
    EXPECT_EQ(qvl::sha256_hex(reinterpret_cast<const uint8_t*>(values.data()), values.size() * 4),
              want["sha256"].get<std::string>());
  }
}

// Every prefix of the file: refused with the file's name until the last tensor's bytes are all there; never
// read past what is given (ASan builds run this too).
TEST(Gguf, EveryTruncationIsRefusedOrWhole) {
  const std::vector<uint8_t> bytes = file_bytes();
  ASSERT_GT(bytes.size(), 1000u);
  auto whole = GgufFile::parse(bytes, "whole");
  ASSERT_TRUE(whole.ok());
  const GgufTensor& last = whole->tensors().back();
  const size_t needed = static_cast<size_t>(last.data - bytes.data()) + last.bytes;
  for (size_t n = 0; n < bytes.size(); ++n) {
    std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(n));  // its own buffer
    auto r = GgufFile::parse(cut, "cut");
    if (n < needed) {
      ASSERT_FALSE(r.ok()) << "accepted a file cut to " << n << " of " << bytes.size() << " bytes";
      EXPECT_EQ(r.status().message().rfind("cut: ", 0), 0u) << r.status().message();
    } else {
      EXPECT_TRUE(r.ok()) << n << ": " << r.status().message();  // only the last tensor's padding is missing
    }
  }
}

// Every header byte set to 0x00, 0x7F and 0xFF in turn: each file is parsed or refused, never crashes, and
// any tensor handed out lies inside the bytes.
TEST(Gguf, DamagedHeadersNeverReadOutside) {
  const std::vector<uint8_t> bytes = file_bytes();
  auto whole = GgufFile::parse(bytes, "whole");
  ASSERT_TRUE(whole.ok());
  const size_t header = static_cast<size_t>(whole->tensors().front().data - bytes.data());
  size_t refused = 0;
  for (size_t i = 0; i < header; ++i) {
    for (uint8_t v : {uint8_t{0x00}, uint8_t{0x7F}, uint8_t{0xFF}}) {
      std::vector<uint8_t> b = bytes;
      if (b[i] == v) continue;
      b[i] = v;
      auto r = GgufFile::parse(b, "damaged");
      if (!r.ok()) {
        ++refused;
        continue;
      }
      for (const GgufTensor& t : r->tensors()) {
        ASSERT_GE(t.data, b.data());
        ASSERT_LE(t.data + t.bytes, b.data() + b.size());
      }
    }
  }
  EXPECT_GT(refused, header);  // most damage is caught
}

// A GGUF file built by hand: one key, one tensor, with fields to break.
std::vector<uint8_t> handmade(uint32_t version, uint32_t n_dims, uint64_t ne0, uint32_t type, uint64_t offset,
                              bool duplicate_key = false) {
  std::vector<uint8_t> b;
  auto put = [&](const void* p, size_t n) { b.insert(b.end(), static_cast<const uint8_t*>(p), static_cast<const uint8_t*>(p) + n); };
  auto u32 = [&](uint32_t v) { put(&v, 4); };
  auto u64 = [&](uint64_t v) { put(&v, 8); };
  auto str = [&](const std::string& s) { u64(s.size()); put(s.data(), s.size()); };
  put("GGUF", 4);
  u32(version);
  u64(1);                      // tensors
  u64(duplicate_key ? 2 : 1);  // keys
  for (int k = 0; k < (duplicate_key ? 2 : 1); ++k) {
    str("general.architecture");
    u32(8);
    str("x");
  }
  str("w");
  u32(n_dims);
  for (uint32_t d = 0; d < n_dims; ++d) u64(d == 0 ? ne0 : 1);
  u32(type);
  u64(offset);
  while (b.size() % 32) b.push_back(0);
  b.resize(b.size() + 64 * 34, 0);
  return b;
}

TEST(Gguf, RefusalsNameTheFieldAndWhatWasFound) {
  auto msg = [](const std::vector<uint8_t>& b) {
    auto r = GgufFile::parse(b, "f.gguf");
    return r.ok() ? std::string("accepted") : r.status().message();
  };
  EXPECT_EQ(msg(handmade(3, 1, 32, 8, 0)), "accepted");
  EXPECT_TRUE(contains(msg(handmade(1, 1, 32, 8, 0)), "GGUF version 1, expected 3 (or 2)"));
  EXPECT_TRUE(contains(msg(handmade(3, 5, 32, 8, 0)), "has 5 dimensions, expected 1 to 4"));
  EXPECT_TRUE(contains(msg(handmade(3, 1, 33, 8, 0)), "rows of 33 values, not a multiple of Q8_0's block of 32"));
  EXPECT_TRUE(contains(msg(handmade(3, 1, 32, 8, 16)), "offset 16, not a multiple of the alignment 32"));
  EXPECT_TRUE(contains(msg(handmade(3, 1, 32, 20, 0)), "GGML type IQ4_NL, which qvl does not read"));
  EXPECT_TRUE(contains(msg(handmade(3, 1, 32, 8, 0, true)), "general.architecture appears twice"));
  EXPECT_TRUE(contains(msg(handmade(3, 1, uint64_t{1} << 20, 8, 0)), "runs past the end of the file"));
  EXPECT_TRUE(contains(msg(handmade(3, 1, 0, 8, 0)), "dimension 0 is 0"));
  std::vector<uint8_t> magic = handmade(3, 1, 32, 8, 0);
  magic[0] = 'X';
  EXPECT_TRUE(contains(msg(magic), "does not start with the magic \"GGUF\""));
  // A string length far beyond the file.
  std::vector<uint8_t> long_key = handmade(3, 1, 32, 8, 0);
  long_key[24 + 7] = 0x7F;
  EXPECT_TRUE(contains(msg(long_key), "bytes long, expected at most")) << msg(long_key);
  // Metadata arrays are bounded in all (each value is held as a structure many times its byte): a file of
  // 16 MB holding one u8 array of 2^24 + 1 values is refused, not expanded to gigabytes.
  {
    std::vector<uint8_t> b;
    auto put = [&](const void* p, size_t n) { b.insert(b.end(), static_cast<const uint8_t*>(p), static_cast<const uint8_t*>(p) + n); };
    const uint32_t version = 3, type_array = 9, type_u8 = 0;
    const uint64_t zero = 0, one = 1, key_len = 3, count = (uint64_t{1} << 24) + 1;
    put("GGUF", 4); put(&version, 4); put(&zero, 8); put(&one, 8);
    put(&key_len, 8); put("big", 3); put(&type_array, 4); put(&type_u8, 4); put(&count, 8);
    b.resize(b.size() + count, 7);
    EXPECT_TRUE(contains(msg(b), "over the limit of 16777216")) << msg(b);
  }
  auto missing = GgufFile::open(test::data_dir() + "/gguf/none.gguf");
  EXPECT_FALSE(missing.ok());
}

TEST(Gguf, DequantizeRefusesPartialBlocksAndUnknownTypes) {
  std::vector<uint8_t> block(210, 0);
  std::vector<float> out(256);
  EXPECT_FALSE(gguf_dequantize_row(static_cast<uint32_t>(GgmlType::kQ6_K), block.data(), out.data(), 100).ok());
  EXPECT_FALSE(gguf_dequantize_row(20, block.data(), out.data(), 32).ok());
  EXPECT_TRUE(gguf_dequantize_row(static_cast<uint32_t>(GgmlType::kQ6_K), block.data(), out.data(), 256).ok());
}

}  // namespace
}  // namespace qvl
