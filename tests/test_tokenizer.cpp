// The tokenizer against Hugging Face tokenizers on the golden strings, plus special-token safety and
// streaming decode.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <map>
#include <unistd.h>

#include "test_paths.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_json.h"
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

// The streaming reader against nlohmann's DOM of the same file: the same vocabulary, merges in the same order,
// the same added tokens.
TEST(TokenizerJson, ReadsWhatTheDocumentHolds) {
  const std::string file = test::model_files_dir() + "/tokenizer.json";
  auto text = read_file_text(file);
  ASSERT_TRUE(text.ok()) << text.status().message();
  auto read = read_tokenizer_json(*text, file);
  ASSERT_TRUE(read.ok()) << read.status().message();
  const nlohmann::json j = nlohmann::json::parse(*text);
  EXPECT_EQ(read->model_type, "BPE");

  ASSERT_EQ(read->vocab.size(), j["model"]["vocab"].size());
  std::map<std::string, int64_t> vocab;
  for (const auto& [key, id] : read->vocab) vocab[key] = id;
  EXPECT_EQ(vocab.size(), read->vocab.size());  // no key twice in the real file
  for (const auto& [key, id] : j["model"]["vocab"].items()) EXPECT_EQ(vocab.at(key), id.get<int64_t>()) << key;

  const auto& merges = j["model"]["merges"];
  ASSERT_EQ(read->merges.size(), merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const auto& [left, right] = read->merges[i];
    if (merges[i].is_string()) {  // the older spelling, "left right"
      EXPECT_EQ(left + " " + right, merges[i].get<std::string>()) << i;
    } else {
      EXPECT_EQ(left, merges[i].at(0).get<std::string>()) << i;
      EXPECT_EQ(right, merges[i].at(1).get<std::string>()) << i;
    }
  }
  const auto& added = j["added_tokens"];
  ASSERT_EQ(read->added.size(), added.size());
  for (size_t i = 0; i < added.size(); ++i) {
    EXPECT_EQ(read->added[i].id, added[i]["id"].get<int32_t>());
    EXPECT_EQ(read->added[i].content, added[i]["content"].get<std::string>());
    EXPECT_EQ(read->added[i].special, added[i].value("special", false));
  }
}

// The keys it does not read are passed over whatever they hold (a "vocab" inside the decoder is not the
// vocabulary; nesting 100,000 deep costs nothing); a key given twice keeps its last value, as a JSON object does.
TEST(TokenizerJson, SkipsWhatItDoesNotReadAndKeepsTheLastOfARepeatedKey) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const std::string text = R"({"version": "1.0", "decoder": {"vocab": {"z": 9}, "merges": [["z", "z"]], "x": )" + deep +
                           R"(}, "added_tokens": [{"id": 1, "content": "<a>"}],
      "model": {"type": "BPE", "vocab": {"q": 0}, "merges": [["q", "q"]]},
      "model": {"dropout": null, "vocab": {"a": 0, "b": 1, "a": 2}, "merges": ["a b", ["b", "a"]], "type": "BPE",
                "extra": {"type": "WordPiece"}},
      "added_tokens": [{"id": 3, "content": "<x>", "special": true, "lstrip": false, "more": [{"id": 7}]},
                       {"special": false, "content": "<y>", "id": 4}]})";
  auto r = read_tokenizer_json(text, "t.json");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->model_type, "BPE");
  const std::vector<std::pair<std::string, int64_t>> vocab{{"b", 1}, {"a", 2}};  // "a": 0 replaced by "a": 2
  EXPECT_EQ(r->vocab, vocab);
  const std::vector<std::pair<std::string, std::string>> merges{{"a", "b"}, {"b", "a"}};
  EXPECT_EQ(r->merges, merges);
  ASSERT_EQ(r->added.size(), 2u);
  EXPECT_EQ(r->added[0].id, 3);
  EXPECT_EQ(r->added[0].content, "<x>");
  EXPECT_TRUE(r->added[0].special);
  EXPECT_EQ(r->added[1].id, 4);
  EXPECT_FALSE(r->added[1].special);

  auto none = read_tokenizer_json(R"({"added_tokens": [{"id": 1, "content": "<a>"}], "model": {"type": "BPE",
      "vocab": {}, "merges": []}, "added_tokens": null})", "t.json");
  ASSERT_TRUE(none.ok()) << none.status().message();
  EXPECT_TRUE(none->added.empty());
}

TEST(TokenizerJson, RefusesWhatIsNotABpeTokenizerSayingWhere) {
  const std::string ok_model = R"("model": {"type": "BPE", "vocab": {"a": 0}, "merges": []})";
  const std::pair<std::string, std::string> cases[] = {
      {"", "not valid JSON"},
      {R"({"model": {"type": "BPE", "vocab": {"a": 0,}}})", "not valid JSON (parse error at line 1, column 44"},
      {"[]", "the top level is an array"},
      {"3", "the top level is not an object"},
      {"{}", "model.type is not \"BPE\""},
      {R"({"model": 3})", "model.type is not \"BPE\""},
      {R"({"model": [{"type": "BPE"}]})", "model.type is not \"BPE\""},
      {R"({"model": {"type": "WordPiece", "vocab": {}, "merges": []}})", "model.type is not \"BPE\""},
      {R"({"model": {"type": 5, "vocab": {}, "merges": []}})", "model.type is not \"BPE\""},
      {R"({"model": {"type": ["BPE"], "vocab": {}, "merges": []}})", "model.type is not \"BPE\""},
      {R"({"model": {"type": "BPE", "merges": []}})", "model.vocab is missing"},
      {R"({"model": {"type": "BPE", "vocab": [], "merges": []}})", "model.vocab is missing"},
      {R"({"model": {"type": "BPE", "vocab": {}, "merges": [], "vocab": 3}})", "model.vocab is missing"},
      {R"({"model": {"type": "BPE", "vocab": {}}})", "model.merges is missing"},
      {R"({"model": {"type": "BPE", "vocab": {}, "merges": {}}})", "model.merges is missing"},
      {R"({"model": {"type": "BPE", "vocab": {"a": 1.5}, "merges": []}})", "vocab entry \"a\" has a bad id"},
      {R"({"model": {"type": "BPE", "vocab": {"a": "1"}, "merges": []}})", "vocab entry \"a\" has a bad id"},
      {R"({"model": {"type": "BPE", "vocab": {"b": [1]}, "merges": []}})", "vocab entry \"b\" has a bad id"},
      {R"({"model": {"type": "BPE", "vocab": {"c": 99999999999999999999}, "merges": []}})", "vocab entry \"c\" has a bad id"},
      {R"({"model": {"type": "BPE", "vocab": {}, "merges": [["a"]]}})", "merge #0 is neither [a, b] nor \"a b\""},
      {R"({"model": {"type": "BPE", "vocab": {}, "merges": ["a b", ["a", "b", "c"]]}})", "merge #1 is neither"},
      {R"({"model": {"type": "BPE", "vocab": {}, "merges": [["a", 1]]}})", "merge #0 is neither"},
      {R"({"model": {"type": "BPE", "vocab": {}, "merges": [["a", ["b"]]]}})", "merge #0 is neither"},
      {R"({"model": {"type": "BPE", "vocab": {}, "merges": [{"a": "b"}]}})", "merge #0 is neither"},
      {R"({"model": {"type": "BPE", "vocab": {}, "merges": [null]}})", "merge #0 is neither"},
      {R"({"model": {"type": "BPE", "vocab": {}, "merges": ["ab"]}})", "merge \"ab\" has no space"},
      {"{" + ok_model + R"(, "added_tokens": {}})", "added_tokens is not an array"},
      {"{" + ok_model + R"(, "added_tokens": 3})", "added_tokens is not an array"},
      {"{" + ok_model + R"(, "added_tokens": [3]})", "an added_tokens entry lacks id or content"},
      {"{" + ok_model + R"(, "added_tokens": [[]]})", "an added_tokens entry lacks id or content"},
      {"{" + ok_model + R"(, "added_tokens": [{"id": 1}]})", "an added_tokens entry lacks id or content"},
      {"{" + ok_model + R"(, "added_tokens": [{"id": "1", "content": "x"}]})", "lacks id or content"},
      {"{" + ok_model + R"(, "added_tokens": [{"id": 1, "content": ["x"]}]})", "lacks id or content"},
      {"{" + ok_model + R"(, "added_tokens": [{"id": -1, "content": "x"}]})", "added token \"x\" has a bad id"},
      {"{" + ok_model + R"(, "added_tokens": [{"id": 1, "content": "x", "special": "yes"}]})",
       "added token \"x\": special is not true or false"},
      {"{" + ok_model + R"(, "added_tokens": [{"id": 1, "content": "x", "special": 1.5}]})", "special is not true or false"},
      {"{" + ok_model + R"(, "added_tokens": 1.5})", "added_tokens is not an array"},
  };
  for (const auto& [text, want] : cases) {
    auto r = read_tokenizer_json(text, "dir/tokenizer.json");
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_EQ(r.status().message().rfind("dir/tokenizer.json: ", 0), 0u) << r.status().message();
    EXPECT_NE(r.status().message().find(want), std::string::npos) << text << "\n" << r.status().message();
  }
}

// A tokenizer.json of the 256 byte tokens plus what `extra_vocab` and `added` add, in a fresh directory.
std::string write_byte_tokenizer(const std::string& name, const std::string& extra_vocab, const std::string& merges,
                                 const std::string& added) {
  // GPT-2's bytes_to_unicode(): printable bytes stand for themselves, the other 68 for U+0100 + n in order.
  std::string vocab;
  int n = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    const char32_t cp = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++);
    std::string text;
    unicode::append_utf8(text, cp);
    vocab += (b ? ", " : "") + nlohmann::json(text).dump() + ": " + std::to_string(b);
  }
  const std::string dir = (std::filesystem::temp_directory_path() / ("qvl-tok-" + name + "-" + std::to_string(getpid()))).string();
  std::filesystem::create_directories(dir);
  const std::string text = R"({"model": {"type": "BPE", "vocab": {)" + vocab + extra_vocab + R"(}, "merges": [)" + merges +
                           R"(]}, "added_tokens": [)" + added + "]}";
  EXPECT_TRUE(write_file_bytes(dir + "/tokenizer.json", text.data(), text.size()).ok());
  return dir;
}

// tokenizer.json's vocabulary is a JSON object: a key given twice keeps its last id, and what the earlier entry
// said is gone (as in Hugging Face, whose loader reads the object into a map): its id has no token, an id out of
// range or shared with another key is no fault, and it does not size the vocabulary. Merges and added tokens
// bind by bytes.
TEST(Tokenizer, BuildsFromASmallFileAndKeepsTheLastOfARepeatedKey) {
  const std::string dir = write_byte_tokenizer(
      "repeat", R"(, "ab": 256, "abc": 257, "ab": 258, "qq": 99999999, "xy": 260, "yz": 260, "yz": 261, "zz": 9000, "zz": 262, "qq": 263)",
      R"(["a", "b"], ["ab", "c"])", R"({"id": 259, "content": "<s>", "special": true})");
  auto tok = Tokenizer::load(dir);
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  EXPECT_EQ(tok->vocab_size(), 264);  // not 9001: "zz": 9000 was replaced
  EXPECT_EQ(tok->token_id("ab"), 258);
  EXPECT_EQ(tok->token_bytes(256), "");
  EXPECT_EQ(tok->token_bytes(258), "ab");
  EXPECT_EQ(tok->token_id("xy"), 260);
  EXPECT_EQ(tok->token_id("yz"), 261);
  EXPECT_EQ(tok->token_id("zz"), 262);
  EXPECT_EQ(tok->token_id("qq"), 263);
  EXPECT_EQ(tok->encode("abc"), (std::vector<int32_t>{257}));
  EXPECT_EQ(tok->encode("ab ab"), (std::vector<int32_t>{258, ' ', 258}));
  EXPECT_EQ(tok->encode("<s>a", /*allow_special=*/true), (std::vector<int32_t>{259, 'a'}));
  EXPECT_EQ(tok->vocab_token_id("\u0120"), ' ');  // Ġ, the byte-level space
  EXPECT_EQ(tok->token_id("zzz"), -1);
  std::filesystem::remove_all(dir);
}

TEST(Tokenizer, RefusesAVocabularyItCannotIndex) {
  const struct {
    const char* name;
    std::string vocab, merges, added, want;
  } cases[] = {
      {"shared", R"(, "ab": 256, "cd": 256)", "", "", "vocab entries \"cd\" and another share the id 256"},
      {"added", R"(, "ab": 256)", "", R"({"id": 256, "content": "<s>"})",
       "added token \"<s>\" takes the id 256 of a vocab entry with other text"},
      {"merge", R"(, "ab": 256)", R"(["a", "c"])", "", "merge #0 (a c) names a token not in the vocab"},
      {"bad-id", R"(, "ab": 99999999)", "", "", "vocab entry \"ab\" has a bad id"},
      {"alphabet", R"(, "a b": 256)", "", "", "holds a character outside the byte-level alphabet"},
  };
  for (const auto& c : cases) {
    const std::string dir = write_byte_tokenizer(c.name, c.vocab, c.merges, c.added);
    auto tok = Tokenizer::load(dir);
    ASSERT_FALSE(tok.ok()) << c.name;
    EXPECT_NE(tok.status().message().find(c.want), std::string::npos) << tok.status().message();
    EXPECT_NE(tok.status().message().find(dir + "/tokenizer.json: "), std::string::npos) << tok.status().message();
    std::filesystem::remove_all(dir);
  }
  // An added token that repeats its vocab entry's text is the usual case, and fine.
  const std::string dir = write_byte_tokenizer("same", R"(, "ab": 256)", "", R"({"id": 256, "content": "ab"})");
  EXPECT_TRUE(Tokenizer::load(dir).ok());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace qvl
