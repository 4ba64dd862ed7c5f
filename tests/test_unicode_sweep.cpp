// The whole tokenizer against HF tokenizers on every Unicode code point and on ill-formed UTF-8
// (tests/data/unicode_sweep_golden.json, written by tools/reference/gen_unicode_goldens.py): the split
// regex's classes, NFC (decomposition, reordering, composition) and the replacement of invalid bytes must
// give HF's ids for each chunk of the sweep.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "test_paths.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"
#include "util/file.h"

namespace qvl {
namespace {

const Tokenizer& sweep_tokenizer() {
  static const Tokenizer* tok = [] {
    auto r = Tokenizer::load(test::model_files_dir());
    if (!r.ok()) {
      ADD_FAILURE() << r.status().message();
      std::abort();
    }
    return new Tokenizer(std::move(r).value());
  }();
  return *tok;
}

const nlohmann::json& sweep_golden() {
  static const nlohmann::json g = [] {
    auto text = read_file_text(test::data_dir() + "/unicode_sweep_golden.json");
    EXPECT_TRUE(text.ok()) << text.status().message();
    return nlohmann::json::parse(text.ok() ? *text : std::string("{}"));
  }();
  return g;
}

// FNV-1a 64 over the ids as 4-byte little-endian integers, as the generator hashes them.
std::string fnv(const std::vector<int32_t>& ids) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (int32_t id : ids) {
    uint32_t u = static_cast<uint32_t>(id);
    for (int k = 0; k < 4; ++k) {
      h ^= (u >> (8 * k)) & 0xFF;
      h *= 0x100000001B3ull;
    }
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

std::string fill(const std::string& context, char32_t cp) {
  std::string c, out;
  unicode::append_utf8(c, cp);
  for (size_t i = 0; i < context.size(); ++i) {
    if (context.compare(i, 2, "{}") == 0) {
      out += c;
      ++i;
    } else {
      out += context[i];
    }
  }
  return out;
}

TEST(UnicodeSweep, EveryCodePointInEveryContextGivesHfIds) {
  const Tokenizer& tok = sweep_tokenizer();
  const auto& g = sweep_golden();
  std::vector<std::string> contexts = g["contexts"];
  size_t chunks = 0, code_points = 0, bad = 0;
  for (const auto& c : g["code_point_chunks"]) {
    const std::string& ctx = contexts.at(c["context"].get<size_t>());
    const char32_t first = c["first"], last = c["last"];
    std::string text;
    for (char32_t cp = first; cp <= last; ++cp) {
      if (cp >= 0xD800 && cp <= 0xDFFF) continue;
      text += fill(ctx, cp);
      if (c["context"] == 0) ++code_points;
    }
    const auto ids = tok.encode(text, /*allow_special=*/false);
    ++chunks;
    if (ids.size() != c["count"].get<size_t>() || fnv(ids) != c["hash"].get<std::string>()) {
      if (++bad <= 10) {
        char range[64];
        std::snprintf(range, sizeof range, "U+%04X..U+%04X", static_cast<unsigned>(first), static_cast<unsigned>(last));
        ADD_FAILURE() << "context " << nlohmann::json(ctx).dump() << ", code points " << range << ": want "
                      << c["count"] << " ids hashing " << c["hash"] << ", got " << ids.size() << " hashing "
                      << fnv(ids);
      }
    }
  }
  EXPECT_EQ(bad, 0u) << "of " << chunks << " chunks";
  EXPECT_EQ(code_points, g["code_points"].get<size_t>());
  EXPECT_EQ(code_points, 0x110000u - 0x800u);  // every scalar value
}

TEST(UnicodeSweep, EveryCompositeDecomposedGivesHfIds) {
  const Tokenizer& tok = sweep_tokenizer();
  const auto& g = sweep_golden();
  std::vector<std::string> composites = g["composites"];
  ASSERT_GT(composites.size(), 900u);
  for (const auto& c : g["composite_cases"]) {
    const std::string suffix = c["suffix"];
    std::string text;
    for (size_t i = 0; i < composites.size(); ++i) text += (i ? " " : "") + composites[i] + suffix;
    const auto ids = tok.encode(text, false);
    EXPECT_EQ(ids.size(), c["count"].get<size_t>()) << "suffix " << nlohmann::json(suffix).dump();
    EXPECT_EQ(fnv(ids), c["hash"].get<std::string>()) << "suffix " << nlohmann::json(suffix).dump();
  }
}

TEST(UnicodeSweep, IllFormedUtf8IsReplacedAsPythonDoes) {
  const Tokenizer& tok = sweep_tokenizer();
  const auto& g = sweep_golden();
  // The sequences: the cartesian product of each family's byte lists, families in order.
  std::vector<std::string> seqs;
  for (const auto& family : g["byte_families"]) {
    std::vector<std::string> out{""};
    for (const auto& list : family) {
      std::vector<std::string> next;
      for (const auto& prefix : out)
        for (const auto& b : list) next.push_back(prefix + static_cast<char>(b.get<int>()));
      out.swap(next);
    }
    seqs.insert(seqs.end(), out.begin(), out.end());
  }
  ASSERT_EQ(seqs.size(), g["byte_sequences"].get<size_t>());
  const size_t per = g["byte_chunk"];
  size_t bad = 0;
  for (const auto& c : g["byte_chunks"]) {
    const auto& ctx = g["byte_contexts"].at(c["context"].get<size_t>());
    const std::string pre = ctx[0], post = ctx[1];
    std::vector<int32_t> ids;
    const size_t first = c["first"];
    for (size_t i = first; i < std::min(first + per, seqs.size()); ++i) {
      auto part = tok.encode(pre + seqs[i] + post, false);
      ids.insert(ids.end(), part.begin(), part.end());
    }
    if (ids.size() != c["count"].get<size_t>() || fnv(ids) != c["hash"].get<std::string>()) {
      if (++bad <= 10) ADD_FAILURE() << "byte context " << c["context"] << ", sequences " << first << "..";
    }
  }
  EXPECT_EQ(bad, 0u);
}

// The maximal-subpart rule itself, on the examples of Unicode's chapter 3 (Table 3-8) and Python's.
TEST(UnicodeSweep, MaximalSubparts) {
  const std::string r = "\xEF\xBF\xBD";
  EXPECT_EQ(unicode::sanitize_utf8("\xED\xA0\x80"), r + r + r);  // a surrogate: three
  EXPECT_EQ(unicode::sanitize_utf8("\xF0\x9F\x98"), r);          // a truncated emoji: one
  EXPECT_EQ(unicode::sanitize_utf8("\xE0\x80\x80"), r + r + r);  // overlong: three
  EXPECT_EQ(unicode::sanitize_utf8("\xF4\x90\x80\x80"), r + r + r + r);  // above U+10FFFF
  EXPECT_EQ(unicode::sanitize_utf8("a\xC2" "b"), "a" + r + "b");
  EXPECT_EQ(unicode::sanitize_utf8("\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64"),
            "a" + r + r + r + "b" + r + "c" + r + r + "d");  // Table 3-8's row
  EXPECT_EQ(unicode::sanitize_utf8("\xEF\xBF\xBD ok"), "\xEF\xBF\xBD ok");  // a real U+FFFD is kept
}

}  // namespace
}  // namespace qvl
