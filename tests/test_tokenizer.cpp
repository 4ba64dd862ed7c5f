// The tokenizer against Hugging Face tokenizers on the golden strings, plus special-token safety and
// streaming decode.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "test_paths.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"
#include "util/file.h"

namespace qvl {
namespace {

const Tokenizer& tokenizer() {
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

nlohmann::json golden() {
  auto text = read_file_text(test::data_dir() + "/tokenizer_golden.json");
  EXPECT_TRUE(text.ok()) << text.status().message();
  return nlohmann::json::parse(*text);
}

std::string show(const std::vector<int32_t>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
  return s + "]";
}

TEST(Tokenizer, LoadsTheCheckpointTokenizer) {
  const Tokenizer& tok = tokenizer();
  EXPECT_EQ(tok.vocab_size(), 151669);
  EXPECT_EQ(tok.token_id("<|im_start|>"), 151644);
  EXPECT_EQ(tok.token_id("<|im_end|>"), 151645);
  EXPECT_EQ(tok.token_id("<|image_pad|>"), 151655);
  EXPECT_TRUE(tok.is_special(151655));
  EXPECT_FALSE(tok.is_special(151667));  // <think> is an added token but not special
  EXPECT_EQ(tok.added_tokens().size(), 26u);
}

TEST(Tokenizer, MatchesHuggingFaceOnGoldenStrings) {
  const Tokenizer& tok = tokenizer();
  nlohmann::json g = golden();
  const auto& cases = g["cases"];
  ASSERT_GE(cases.size(), 2000u);
  int mismatches = 0;
  for (const auto& c : cases) {
    const std::string text = c["text"];
    const auto want = c["ids"].get<std::vector<int32_t>>();
    const auto want_user = c["ids_user"].get<std::vector<int32_t>>();
    const auto got = tok.encode(text, /*allow_special=*/true);
    const auto got_user = tok.encode(text, /*allow_special=*/false);
    if (got != want || got_user != want_user) {
      if (++mismatches <= 10)
        ADD_FAILURE() << "text " << nlohmann::json(text).dump() << "\n  want " << show(want) << "\n  got  "
                      << show(got) << "\n  user want " << show(want_user) << "\n  user got  " << show(got_user);
    }
    EXPECT_EQ(tok.decode(got), c["decoded"].get<std::string>()) << nlohmann::json(text).dump();
  }
  EXPECT_EQ(mismatches, 0) << "of " << cases.size() << " golden strings";
}

TEST(Tokenizer, RoundTripsNfcText) {
  const Tokenizer& tok = tokenizer();
  nlohmann::json g = golden();
  for (const auto& c : g["cases"]) {
    const std::string text = c["text"];
    const std::string normalized = unicode::nfc(text);
    EXPECT_EQ(tok.decode(tok.encode(normalized)), normalized) << nlohmann::json(text).dump();
    EXPECT_EQ(tok.decode(tok.encode(normalized, true)), normalized) << nlohmann::json(text).dump();
  }
}

TEST(Tokenizer, UserTextNeverBecomesControlTokens) {
  const Tokenizer& tok = tokenizer();
  for (const AddedToken& a : tok.added_tokens()) {
    if (!a.special) continue;
    const std::string text = "before " + a.content + " after" + a.content;
    for (int32_t id : tok.encode(text)) EXPECT_FALSE(tok.is_special(id)) << a.content << " leaked as id " << id;
    // The chat format's own text does produce the control token.
    auto ids = tok.encode(a.content, /*allow_special=*/true);
    ASSERT_EQ(ids.size(), 1u);
    EXPECT_EQ(ids[0], a.id);
  }
}

TEST(Tokenizer, InvalidUtf8IsReplacedNotCrashed) {
  const Tokenizer& tok = tokenizer();
  const std::string bad = std::string("ok \xff\xfe bad \xe4\xbd") + " end \xc3";
  auto ids = tok.encode(bad);
  EXPECT_EQ(tok.decode(ids), "ok \xEF\xBF\xBD\xEF\xBF\xBD bad \xEF\xBF\xBD end \xEF\xBF\xBD");
}

TEST(TokenStreamDecoder, NeverEmitsBrokenUtf8) {
  const Tokenizer& tok = tokenizer();
  nlohmann::json g = golden();
  int checked = 0;
  for (const auto& c : g["cases"]) {
    const std::string text = unicode::nfc(c["text"].get<std::string>());
    auto ids = tok.encode(text, true);
    TokenStreamDecoder dec(tok, /*skip_special=*/false);
    std::string joined;
    for (int32_t id : ids) {
      std::string piece = dec.push(id);
      EXPECT_TRUE(unicode::is_valid_utf8(piece)) << nlohmann::json(text).dump();
      joined += piece;
    }
    joined += dec.flush();
    EXPECT_EQ(joined, text);
    ++checked;
  }
  EXPECT_GE(checked, 2000);
}

TEST(TokenStreamDecoder, SplitsAMultibyteCharacterAcrossTokens) {
  const Tokenizer& tok = tokenizer();
  // Single-byte tokens of "é" (C3 A9) and "😀" (F0 9F 98 80): each partial token must emit nothing.
  std::vector<int32_t> ids;
  for (unsigned char b : std::string("\xC3\xA9\xF0\x9F\x98\x80")) ids.push_back(tok.token_id(std::string(1, static_cast<char>(b))));
  TokenStreamDecoder dec(tok);
  std::vector<std::string> out;
  for (int32_t id : ids) out.push_back(dec.push(id));
  EXPECT_EQ(out[0], "");
  EXPECT_EQ(out[1], "\xC3\xA9");
  EXPECT_EQ(out[2], "");
  EXPECT_EQ(out[3], "");
  EXPECT_EQ(out[4], "");
  EXPECT_EQ(out[5], "\xF0\x9F\x98\x80");
  EXPECT_EQ(dec.flush(), "");
}

TEST(Tokenizer, ReportsAMissingFileClearly) {
  auto r = Tokenizer::load("/nonexistent/model");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("/nonexistent/model"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace qvl
