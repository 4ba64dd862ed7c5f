// Reads what the byte-level BPE tokenizer needs from a tokenizer.json (the BPE model's type, vocabulary and
// merges, and the added tokens) in one streaming pass over the text, without building a JSON document.
#include "tokenizer/tokenizer_json.h"

#include <nlohmann/json.hpp>

#include "tokenizer/token_tables.h"

namespace qvl {

namespace {

using json = nlohmann::json;

Status refusal(const std::string& where, const std::string& what) {
  return Status::Error(where + ": " + what + " (expected a byte-level BPE tokenizer.json of the Qwen2/Qwen3 family)");
}

// nlohmann's SAX events in, TokenizerJson out. The containers it reads are held on a stack of at most four
// frames (root > model > merges > one merge, root > added_tokens > one token); every other value, however
// deeply nested, is only counted through (`skip_`), so hostile nesting costs no memory here.
class Reader : public nlohmann::json_sax<json> {
 public:
  Reader(TokenizerJson& out, const std::string& where) : out_(out), where_(where) {}

  const std::string& error() const { return error_; }
  bool saw_model() const { return saw_model_; }
  bool saw_vocab() const { return saw_vocab_; }
  bool saw_merges() const { return saw_merges_; }

  bool null() override { return scalar(Scalar::kNull); }
  bool boolean(bool v) override {
    bool_ = v;
    return scalar(Scalar::kBool);
  }
  bool number_integer(number_integer_t v) override {
    int_ = v;
    return scalar(Scalar::kInt);
  }
  bool number_unsigned(number_unsigned_t v) override {
    if (v > static_cast<number_unsigned_t>(INT64_MAX)) return scalar(Scalar::kOther);  // no id is that large
    int_ = static_cast<int64_t>(v);
    return scalar(Scalar::kInt);
  }
  bool number_float(number_float_t, const string_t&) override { return scalar(Scalar::kOther); }
  bool string(string_t& v) override {
    str_ = &v;
    return scalar(Scalar::kString);
  }
  bool binary(binary_t&) override { return scalar(Scalar::kOther); }  // not produced by the JSON parser

  bool key(string_t& k) override {
    if (skip_ > 0) return true;
    if (stack_.back().where == Where::kVocab) {
      vocab_key_ = std::move(k);
    } else {
      stack_.back().key = std::move(k);
    }
    return true;
  }

  bool start_object(std::size_t) override { return open(/*object=*/true); }
  bool start_array(std::size_t) override { return open(/*object=*/false); }
  bool end_object() override { return close(); }
  bool end_array() override { return close(); }

  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    // e.what(): "[json.exception.parse_error.101] parse error at line 3, column 7: syntax error ..."
    std::string what = e.what();
    const size_t at = what.find("] ");
    error_ = where_ + ": not valid JSON (" + (at == std::string::npos ? what : what.substr(at + 2)) + ")";
    return false;
  }

 private:
  // Where a container sits in the file, as far as the tokenizer cares.
  enum class Where { kRoot, kModel, kVocab, kMerges, kMerge, kAddedTokens, kAddedToken };
  enum class Scalar { kString, kInt, kBool, kNull, kOther };  // kOther: a float, or an integer past int64
  struct Frame {
    Where where;
    std::string key;  // an object's current key (not kept for the vocabulary: vocab_key_)
  };
  struct Draft {  // the added token being read
    bool has_id = false, has_content = false;
    int64_t id = 0;
    std::string content;
    bool special = false;
  };

  bool fail(const std::string& what) {
    error_ = refusal(where_, what).message();
    return false;
  }
  std::string merge_name() const { return "merge #" + std::to_string(out_.merges.size()); }

  // A container opens inside the top frame: entered when the tokenizer reads it, else skipped.
  bool open(bool object) {
    if (skip_ > 0) {
      ++skip_;
      return true;
    }
    if (stack_.empty()) {
      if (!object) return fail("the top level is an array, not an object");
      stack_.push_back({Where::kRoot, {}});
      return true;
    }
    const Frame& top = stack_.back();
    switch (top.where) {
      case Where::kRoot:
        if (top.key == "model") {
          if (!object) return fail("model.type is not \"BPE\"");
          out_.model_type.clear();
          saw_vocab_ = saw_merges_ = false;
          out_.vocab.clear();
          out_.merges.clear();
          return enter(Where::kModel, saw_model_);
        }
        if (top.key == "added_tokens") {
          if (object) return fail("added_tokens is not an array");
          out_.added.clear();
          return enter(Where::kAddedTokens, saw_added_);
        }
        break;
      case Where::kModel:
        if (top.key == "vocab" && object) {
          out_.vocab.clear();
          return enter(Where::kVocab, saw_vocab_);
        }
        if (top.key == "merges" && !object) {
          out_.merges.clear();
          return enter(Where::kMerges, saw_merges_);
        }
        if (top.key == "type") return fail("model.type is not \"BPE\"");
        if (top.key == "vocab") saw_vocab_ = false;    // an array: not a vocabulary, whatever came before
        if (top.key == "merges") saw_merges_ = false;  // an object: no merges
        break;
      case Where::kVocab:
        return fail("vocab entry \"" + vocab_key_ + "\" has a bad id");
      case Where::kMerges:
        if (object) return fail(merge_name() + " is neither [a, b] nor \"a b\"");
        pair_.clear();
        stack_.push_back({Where::kMerge, {}});
        return true;
      case Where::kMerge:
        return fail(merge_name() + " is neither [a, b] nor \"a b\"");
      case Where::kAddedTokens:
        if (!object) return fail("an added_tokens entry lacks id or content");
        draft_ = Draft{};
        stack_.push_back({Where::kAddedToken, {}});
        return true;
      case Where::kAddedToken:
        if (top.key == "id" || top.key == "content") return fail("an added_tokens entry lacks id or content");
        if (top.key == "special") return fail("added token \"" + draft_.content + "\": special is not true or false");
        break;
    }
    skip_ = 1;
    return true;
  }

  // Enters a container the tokenizer reads. A key given twice keeps its last value (what was read of the
  // earlier one was cleared by the caller), as nlohmann's DOM and Hugging Face's loader keep it.
  bool enter(Where where, bool& seen) {
    seen = true;
    stack_.push_back({where, {}});
    return true;
  }

  bool close() {
    if (skip_ > 0) {
      --skip_;
      return true;
    }
    const Where where = stack_.back().where;
    stack_.pop_back();
    if (where == Where::kMerge) {
      if (pair_.size() != 2) return fail(merge_name() + " is neither [a, b] nor \"a b\"");
      out_.merges.emplace_back(std::move(pair_[0]), std::move(pair_[1]));
    } else if (where == Where::kAddedToken) {
      if (!draft_.has_id || !draft_.has_content) return fail("an added_tokens entry lacks id or content");
      if (draft_.id < 0 || draft_.id > (1 << 24)) return fail("added token \"" + draft_.content + "\" has a bad id");
      out_.added.push_back({static_cast<int32_t>(draft_.id), std::move(draft_.content), draft_.special});
    }
    return true;
  }

  bool scalar(Scalar kind) {
    if (skip_ > 0) return true;
    if (stack_.empty()) return fail("the top level is not an object");
    Frame& top = stack_.back();
    switch (top.where) {
      case Where::kRoot:
        if (top.key == "model") return fail("model.type is not \"BPE\"");  // "model": null, 3, "x", ...
        if (top.key == "added_tokens") {
          if (kind != Scalar::kNull) return fail("added_tokens is not an array");
          out_.added.clear();  // null reads as none
        }
        return true;
      case Where::kModel:
        if (top.key == "type") {
          if (kind != Scalar::kString) return fail("model.type is not \"BPE\"");
          out_.model_type = std::move(*str_);
        } else if (top.key == "vocab") {
          saw_vocab_ = false;  // a later "vocab": 3 replaces an earlier object
        } else if (top.key == "merges") {
          saw_merges_ = false;
        }
        return true;
      case Where::kVocab:
        if (kind != Scalar::kInt) return fail("vocab entry \"" + vocab_key_ + "\" has a bad id");
        out_.vocab.emplace_back(std::move(vocab_key_), int_);
        return true;
      case Where::kMerges: {  // the older form, "left right"
        if (kind != Scalar::kString) return fail(merge_name() + " is neither [a, b] nor \"a b\"");
        const std::string& s = *str_;
        const size_t sp = s.find(' ', 1);
        if (sp == std::string::npos) return fail("merge \"" + s + "\" has no space");
        out_.merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
        return true;
      }
      case Where::kMerge:
        if (kind != Scalar::kString || pair_.size() == 2) return fail(merge_name() + " is neither [a, b] nor \"a b\"");
        pair_.push_back(std::move(*str_));
        return true;
      case Where::kAddedTokens:
        return fail("an added_tokens entry lacks id or content");
      case Where::kAddedToken:
        if (top.key == "id") {
          if (kind != Scalar::kInt) return fail("an added_tokens entry lacks id or content");
          draft_.has_id = true;
          draft_.id = int_;
        } else if (top.key == "content") {
          if (kind != Scalar::kString) return fail("an added_tokens entry lacks id or content");
          draft_.has_content = true;
          draft_.content = std::move(*str_);
        } else if (top.key == "special") {
          if (kind == Scalar::kBool || kind == Scalar::kNull) {
            draft_.special = kind == Scalar::kBool && bool_;  // null: not special, as when absent
          } else {
            return fail("added token \"" + draft_.content + "\": special is not true or false");
          }
        }
        return true;
    }
    return true;
  }

  TokenizerJson& out_;
  const std::string& where_;
  std::string error_;
  std::vector<Frame> stack_;  // at most four deep: the skipped subtrees are only counted
  size_t skip_ = 0;           // > 0 inside a value the tokenizer does not read: its depth
  std::string vocab_key_;
  std::vector<std::string> pair_;  // the merge being read
  Draft draft_;
  // The last scalar's value, for scalar().
  std::string* str_ = nullptr;
  int64_t int_ = 0;
  bool bool_ = false;
  bool saw_model_ = false, saw_vocab_ = false, saw_merges_ = false, saw_added_ = false;  // entered (as an object, an array)
};

}  // namespace

Result<TokenizerJson> read_tokenizer_json(std::string_view text, const std::string& where) {
  TokenizerJson out;
  Reader reader(out, where);
  const bool ok = json::sax_parse(text.data(), text.data() + text.size(), &reader);
  if (!ok) return Status::Error(reader.error().empty() ? where + ": not valid JSON" : reader.error());
  auto fail = [&](const std::string& what) { return refusal(where, what); };
  if (!reader.saw_model() || out.model_type != "BPE") return fail("model.type is not \"BPE\"");
  if (!reader.saw_vocab()) return fail("model.vocab is missing");
  if (!reader.saw_merges()) return fail("model.merges is missing");
  // A vocabulary key given twice keeps its last id, the earlier entry gone, as in the DOM's object (and Hugging
  // Face's map): its id has no token then.
  QVL_CHECK(out.vocab.size() <= static_cast<size_t>(INT32_MAX));  // 6+ bytes an entry in at most 1 GiB
  const auto key_of = [&out](int32_t i) -> std::string_view { return out.vocab[static_cast<size_t>(i)].first; };
  VocabIndex seen;
  seen.reserve(out.vocab.size());
  std::vector<uint8_t> replaced;  // per entry, once a key repeats
  for (size_t i = 0; i < out.vocab.size(); ++i) {
    if (int32_t* earlier = seen.insert(static_cast<int32_t>(i), key_of)) {
      if (replaced.empty()) replaced.assign(out.vocab.size(), 0);
      replaced[static_cast<size_t>(*earlier)] = 1;
      *earlier = static_cast<int32_t>(i);
    }
  }
  if (!replaced.empty()) {
    size_t kept = 0;
    for (size_t i = 0; i < out.vocab.size(); ++i)
      if (!replaced[i]) {
        if (kept != i) out.vocab[kept] = std::move(out.vocab[i]);
        ++kept;
      }
    out.vocab.resize(kept);
  }
  return out;
}

}  // namespace qvl
