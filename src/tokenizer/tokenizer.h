// The byte-level BPE tokenizer of a model directory's tokenizer.json (Qwen2/Qwen3 family): added tokens
// matched first, NFC, the Qwen2 split regex, byte-to-unicode mapping, BPE merges; encode and decode.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/token_tables.h"
#include "util/status.h"

namespace qvl {

struct AddedToken {
  int32_t id;
  std::string content;
  bool special;  // special tokens are control tokens; only the chat format may emit them
};

// A byte range [begin, end) of a string.
struct TextSpan {
  size_t begin = 0;
  size_t end = 0;
};

class Tokenizer {
 public:
  // Loads `path`, either a tokenizer.json file or a model directory containing one.
  static Result<Tokenizer> load(const std::string& path);
  // The same vocabulary from a GGUF's metadata, as llama.cpp's converter writes it (tokenizer.ggml.model
  // "gpt2", pre "qwen2"): tokens by id (byte-level text), their types (1 normal, 3 control: a special added
  // token, 4 user-defined: an added token matched in user text too, 5 unused: padding, left out), and the
  // merges as "left right". `where` names the file in errors.
  static Result<Tokenizer> from_gguf(const std::vector<std::string>& tokens, const std::vector<int64_t>& types,
                                     const std::vector<std::string>& merges, const std::string& where);

  // Encodes text. With allow_special = false (the default, for anything a user typed) the text of a
  // special token such as "<|im_start|>" is tokenized as plain text; with true, it becomes the control
  // token — that is for prompt text the chat format produced. Non-special added tokens (<think>,
  // <tool_call>, ...) are matched in both modes, as Hugging Face tokenizers does. Invalid UTF-8 is
  // replaced by U+FFFD first.
  std::vector<int32_t> encode(std::string_view text, bool allow_special = false) const;

  // Encodes a rendered prompt: control tokens are matched everywhere except inside `user_spans` (sorted,
  // non-overlapping), which hold text the user sent. Pre-tokenization runs across span boundaries, so the
  // ids equal encode(text, true) whenever the user text holds no control-token text.
  std::vector<int32_t> encode_prompt(std::string_view text, const std::vector<TextSpan>& user_spans) const;

  // Concatenates the bytes of the tokens. May end inside a UTF-8 character when the ids do; use
  // decode() for text, or TokenStreamDecoder for streaming.
  std::string decode_bytes(const std::vector<int32_t>& ids, bool skip_special = false) const;
  // Decodes to text; invalid UTF-8 (a split character) becomes U+FFFD as in Hugging Face decode.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special = false) const;

  // The bytes of one token (empty for ids outside the vocabulary).
  std::string_view token_bytes(int32_t id) const;
  bool is_special(int32_t id) const;
  // The id of a token given by its text, e.g. "<|im_end|>", or -1.
  int32_t token_id(std::string_view token_text) const;
  // The id of a token as tokenizer.json's vocabulary (and a GGUF's tokenizer.ggml.tokens) spells it: byte-level
  // ("Ġhello" for " hello"), added tokens as they are; -1 if it is not in this vocabulary.
  int32_t vocab_token_id(std::string_view vocab_text) const;
  int32_t vocab_size() const { return static_cast<int32_t>(id_to_bytes_.size()); }
  const std::vector<AddedToken>& added_tokens() const { return added_; }

  // The regular vocabulary (no added tokens) sorted by bytes, each token with the length of the prefix it
  // shares with the one before it: all tokens walked as a trie (the structured-output token mask). Built
  // on first use (~0.1 s for 151k tokens), thread-safe, shared by copies.
  struct SortedToken {
    int32_t id;
    uint32_t lcp;
  };
  const std::vector<SortedToken>& sorted_tokens() const;

 private:
  Tokenizer() = default;
  // Builds from a byte-level vocabulary (text, id), merges (left, right) in rank order and added tokens. The same
  // text under two ids: both decode to it, the first encodes it.
  static Result<Tokenizer> build(const std::vector<std::pair<std::string, int64_t>>& vocab,
                                 const std::vector<std::pair<std::string, std::string>>& merges,
                                 std::vector<AddedToken> added, const std::string& where);
  void encode_ordinary(std::string_view text, std::vector<int32_t>& out) const;  // no added tokens
  std::vector<int32_t> encode_impl(std::string_view text, bool allow_special, const std::vector<TextSpan>& user_spans) const;
  void bpe(std::string_view piece, std::vector<int32_t>& out) const;

  std::vector<std::string> id_to_bytes_;  // token id -> raw bytes (added tokens: content)
  VocabIndex vocab_index_;                // regular vocabulary, raw bytes -> id (the bytes: id_to_bytes_)
  MergeTable merges_;                     // (left id, right id) -> rank and merged id
  int32_t byte_token_[256] = {};                         // the token of each single byte
  std::vector<AddedToken> added_;
  bool added_first_byte_[256] = {};                      // bytes that can start an added token
  std::vector<uint8_t> special_;                         // per id: 1 when a special added token
  struct Lazy {
    std::once_flag once;
    std::vector<SortedToken> sorted;
  };
  std::shared_ptr<Lazy> lazy_ = std::make_shared<Lazy>();
};

// Turns a stream of token ids into text pieces that never split a UTF-8 character: bytes of an
// unfinished character are held back until the token that completes it arrives.
class TokenStreamDecoder {
 public:
  explicit TokenStreamDecoder(const Tokenizer& tok, bool skip_special = true) : tok_(tok), skip_special_(skip_special) {}
  // Returns the text that became complete with this token (possibly empty).
  std::string push(int32_t id);
  // Returns what is still held back, with invalid bytes replaced by U+FFFD.
  std::string flush();

 private:
  const Tokenizer& tok_;
  bool skip_special_;
  std::string pending_;
};

}  // namespace qvl
