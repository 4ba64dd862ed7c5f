// The byte-level BPE tokenizer of a model directory's tokenizer.json (Qwen2/Qwen3 family): added tokens
// matched first, NFC, the Qwen2 split regex, byte-to-unicode mapping, BPE merges; encode and decode.
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <queue>

#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer_json.h"
#include "tokenizer/unicode.h"
#include "util/file.h"
#include "util/builtin_files.h"

namespace qvl {

namespace {

// GPT-2's bytes_to_unicode(): printable bytes map to themselves, the other 68 to U+0100 + n in order.
// Returns the inverse, code point -> byte, for code points below 0x200 (-1 where none).
std::vector<int> unicode_to_byte_table() {
  std::vector<int> inv(0x200, -1);
  int n = 0;
  for (int b = 0; b < 256; ++b) {
    bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    int cp = printable ? b : 256 + n++;
    inv[cp] = b;
  }
  return inv;
}

// Maps a byte-level token string ("Ġhello") back to its raw bytes (" hello") in `out`; false when it holds a
// character outside the byte-level alphabet.
bool byte_level_to_bytes(std::string_view token, const std::vector<int>& inv, std::string& out) {
  out.clear();
  for (size_t i = 0; i < token.size();) {
    int len = 0;
    char32_t cp = unicode::decode_utf8(token, i, &len);
    if (cp >= inv.size() || inv[cp] < 0) return false;
    out.push_back(static_cast<char>(inv[cp]));
    i += static_cast<size_t>(len);
  }
  return true;
}

// The vocabulary index's key of a token id: its bytes in the tokenizer's id -> bytes list.
auto bytes_in(const std::vector<std::string>& id_to_bytes) {
  return [&id_to_bytes](int32_t id) -> std::string_view { return id_to_bytes[static_cast<size_t>(id)]; };
}

Result<std::string> byte_level_to_bytes(const std::string& token, const std::vector<int>& inv) {
  std::string out;
  out.reserve(token.size());
  if (!byte_level_to_bytes(token, inv, out))
    return Status::Error("token \"" + token + "\" holds a character outside the byte-level alphabet");
  return out;
}

}  // namespace

Result<Tokenizer> Tokenizer::load(const std::string& path) {
  std::string file = path;
  if (is_builtin_path(path) || std::filesystem::is_directory(path)) file = (std::filesystem::path(path) / "tokenizer.json").string();
  QVL_ASSIGN_OR_RETURN(std::string text, read_model_file(file, 1ull << 30));
  QVL_ASSIGN_OR_RETURN(TokenizerJson read, read_tokenizer_json(text, file));
  text = std::string();  // the 11 MB text is not needed while the tables are built
  return build(read.vocab, read.merges, std::move(read.added), file);
}

namespace {
// The added tokens of the Qwen2/Qwen3 tokenizer.json with "special": false that look like control tokens.
bool qwen_non_special_added_token(const std::string& t) {
  static const char* kNames[] = {"<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
                                 "<|repo_name|>", "<|file_sep|>"};
  for (const char* n : kNames)
    if (t == n) return true;
  return false;
}
}  // namespace

Result<Tokenizer> Tokenizer::from_gguf(const std::vector<std::string>& tokens, const std::vector<int64_t>& types,
                                       const std::vector<std::string>& merges_text, const std::string& where) {
  if (types.size() != tokens.size())
    return Status::Error(where + ": tokenizer.ggml.token_type has " + std::to_string(types.size()) +
                         " entries, tokenizer.ggml.tokens " + std::to_string(tokens.size()));
  std::vector<std::pair<std::string, int64_t>> vocab;
  std::vector<AddedToken> added;
  for (size_t i = 0; i < tokens.size(); ++i) {
    switch (types[i]) {
      case 1: vocab.emplace_back(tokens[i], static_cast<int64_t>(i)); break;                         // NORMAL
      case 3:  // CONTROL: special, except the added tokens Qwen's tokenizer.json marks non-special, which
               // llama.cpp's converter marks CONTROL because they look special (<|fim_prefix|>, ...)
        added.push_back({static_cast<int32_t>(i), tokens[i], !qwen_non_special_added_token(tokens[i])});
        break;
      case 4: added.push_back({static_cast<int32_t>(i), tokens[i], false}); break;                    // USER_DEFINED
      case 5: break;                                                                                  // UNUSED (padding)
      default:
        return Status::Error(where + ": token " + std::to_string(i) + " has type " + std::to_string(types[i]) +
                             "; a gpt2-style (byte-level BPE) vocabulary has types 1, 3, 4 and 5");
    }
  }
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(merges_text.size());
  for (const std::string& m : merges_text) {
    const size_t sp = m.find(' ', 1);
    if (sp == std::string::npos) return Status::Error(where + ": merge \"" + m + "\" has no space");
    merges.emplace_back(m.substr(0, sp), m.substr(sp + 1));
  }
  return build(vocab, merges, std::move(added), where);
}

Result<Tokenizer> Tokenizer::build(const std::vector<std::pair<std::string, int64_t>>& vocab,
                                   const std::vector<std::pair<std::string, std::string>>& merges,
                                   std::vector<AddedToken> added, const std::string& where) {
  auto fail = [&](const std::string& what) {
    return Status::Error(where + ": " + what + " (expected a byte-level BPE vocabulary of the Qwen2/Qwen3 family)");
  };
  Tokenizer t;
  const std::vector<int> inv = unicode_to_byte_table();
  size_t n_ids = 0;
  for (const auto& [text, id] : vocab) {
    if (id < 0 || id > (1 << 24)) return fail("vocab entry \"" + text + "\" has a bad id");
    n_ids = std::max(n_ids, static_cast<size_t>(id) + 1);
  }
  for (const AddedToken& a : added) n_ids = std::max(n_ids, static_cast<size_t>(a.id) + 1);
  t.id_to_bytes_.resize(n_ids);
  t.special_.assign(n_ids, 0);
  t.vocab_index_.reserve(vocab.size());
  const auto bytes_of = bytes_in(t.id_to_bytes_);
  std::vector<uint8_t> named(n_ids, 0);  // per id: holds a vocabulary entry's bytes
  for (const auto& [text, id64] : vocab) {
    auto decoded = byte_level_to_bytes(text, inv);
    if (!decoded.ok()) return fail(decoded.status().message());
    const int32_t id = static_cast<int32_t>(id64);
    std::string& name = t.id_to_bytes_[id];
    if (named[id]) {
      if (name == *decoded) continue;  // the same entry again
      // The index finds an entry by its id's bytes: an id holds one text.
      return fail("vocab entries \"" + text + "\" and another share the id " + std::to_string(id));
    }
    name = std::move(decoded).value();
    named[id] = 1;
    // The same text under a second id (a GGUF's token list can hold one): both ids decode to it, the first
    // encodes it. (tokenizer.json's vocabulary is an object: read_tokenizer_json keeps a key once.)
    (void)t.vocab_index_.insert(id, bytes_of);
  }
  for (int b = 0; b < 256; ++b) {
    const char byte = static_cast<char>(b);
    const int32_t id = t.vocab_index_.find(std::string_view(&byte, 1), bytes_of);
    if (id < 0) return fail("vocab lacks the token for byte " + std::to_string(b));
    t.byte_token_[b] = id;
  }
  t.merges_.reserve(merges.size());
  int32_t rank = 0;
  std::string lb, rb;
  for (const auto& [left, right] : merges) {
    if (!byte_level_to_bytes(left, inv, lb) || !byte_level_to_bytes(right, inv, rb))
      return fail("merge #" + std::to_string(rank) + " is not byte-level");
    const int32_t li = t.vocab_index_.find(lb, bytes_of), ri = t.vocab_index_.find(rb, bytes_of);
    lb += rb;
    const int32_t mi = t.vocab_index_.find(lb, bytes_of);
    if (li < 0 || ri < 0 || mi < 0)
      return fail("merge #" + std::to_string(rank) + " (" + left + " " + right + ") names a token not in the vocab");
    t.merges_.insert(li, ri, {rank, mi});
    ++rank;
  }
  for (AddedToken& at : added) {
    if (at.content.empty()) return fail("added token " + std::to_string(at.id) + " is empty");
    if (named[at.id] && t.id_to_bytes_[at.id] != at.content)
      return fail("added token \"" + at.content + "\" takes the id " + std::to_string(at.id) + " of a vocab entry with other text");
    t.id_to_bytes_[at.id] = at.content;
    t.special_[at.id] = at.special ? 1 : 0;
    t.added_first_byte_[static_cast<uint8_t>(at.content[0])] = true;
    t.added_.push_back(std::move(at));
  }
  return t;
}

void Tokenizer::bpe(std::string_view piece, std::vector<int32_t>& out) const {
  // Symbols form a linked list; a min-heap holds candidate merges ordered by (rank, position), so the
  // lowest-ranked pair merges first and, among equal ranks, the leftmost — as Hugging Face's Word::merge_all.
  struct Sym {
    int32_t id;
    int32_t prev, next;  // indices, -1 at the ends
  };
  struct Cand {
    int32_t rank, pos, left_id, right_id, result;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  const int n = static_cast<int>(piece.size());
  if (n == 1) {
    out.push_back(byte_token_[static_cast<uint8_t>(piece[0])]);
    return;
  }
  std::vector<Sym> sym(n);
  for (int i = 0; i < n; ++i) sym[i] = {byte_token_[static_cast<uint8_t>(piece[i])], i - 1, i + 1 < n ? i + 1 : -1};
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
  auto push = [&](int l) {
    if (l < 0) return;  // before sym[l]: l is -1 when the merged symbol is the first
    const int r = sym[l].next;
    if (r < 0) return;
    if (const MergeTable::Merge* m = merges_.find(sym[l].id, sym[r].id)) heap.push({m->rank, l, sym[l].id, sym[r].id, m->result});
  };
  for (int i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    Cand c = heap.top();
    heap.pop();
    int l = c.pos, r = sym[l].next;
    if (sym[l].id != c.left_id || r < 0 || sym[r].id != c.right_id) continue;  // stale
    sym[l].id = c.result;
    sym[l].next = sym[r].next;
    if (sym[r].next >= 0) sym[sym[r].next].prev = l;
    sym[r].id = -1;  // dead
    push(sym[l].prev);
    push(l);
  }
  for (int i = 0; i >= 0; i = sym[i].next) out.push_back(sym[i].id);
}

void Tokenizer::encode_ordinary(std::string_view text, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  const std::string clean = unicode::sanitize_utf8(text);
  const std::string normalized = unicode::nfc(clean);
  std::vector<std::string_view> pieces;
  qwen2_pretokenize(normalized, pieces);
  for (std::string_view p : pieces) {
    bpe(p, out);
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool allow_special) const {
  return encode_impl(text, allow_special, {});
}

std::vector<int32_t> Tokenizer::encode_prompt(std::string_view text, const std::vector<TextSpan>& user_spans) const {
  return encode_impl(text, true, user_spans);
}

std::vector<int32_t> Tokenizer::encode_impl(std::string_view text, bool allow_special,
                                            const std::vector<TextSpan>& user_spans) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  size_t span = 0;  // the first user span that ends after position i
  // Added tokens are matched leftmost-longest in the raw text, before normalisation.
  size_t seg_start = 0;
  for (size_t i = 0; i < text.size();) {
    if (!added_first_byte_[static_cast<uint8_t>(text[i])]) {
      ++i;
      continue;
    }
    while (span < user_spans.size() && user_spans[span].end <= i) ++span;
    const AddedToken* best = nullptr;
    for (const AddedToken& a : added_) {
      if (a.special) {
        if (!allow_special) continue;
        // A control token may not overlap text the user sent.
        if (span < user_spans.size() && user_spans[span].begin < i + a.content.size()) continue;
      }
      if (text.compare(i, a.content.size(), a.content) == 0 && (!best || a.content.size() > best->content.size()))
        best = &a;
    }
    if (!best) {
      ++i;
      continue;
    }
    encode_ordinary(text.substr(seg_start, i - seg_start), out);
    out.push_back(best->id);
    i += best->content.size();
    seg_start = i;
  }
  encode_ordinary(text.substr(seg_start), out);
  return out;
}

std::string_view Tokenizer::token_bytes(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= id_to_bytes_.size()) return {};
  return id_to_bytes_[id];
}

const std::vector<Tokenizer::SortedToken>& Tokenizer::sorted_tokens() const {
  std::call_once(lazy_->once, [this] {
    std::vector<std::pair<std::string_view, int32_t>> v;
    v.reserve(vocab_index_.size());
    vocab_index_.for_each([&](int32_t id) {
      if (!id_to_bytes_[id].empty()) v.emplace_back(id_to_bytes_[id], id);
    });
    std::sort(v.begin(), v.end());
    std::vector<SortedToken>& out = lazy_->sorted;
    out.reserve(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      uint32_t l = 0;
      if (i > 0) {
        const std::string_view a = v[i - 1].first, b = v[i].first;
        while (l < a.size() && l < b.size() && a[l] == b[l]) ++l;
      }
      out.push_back(SortedToken{v[i].second, l});
    }
  });
  return lazy_->sorted;
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < special_.size() && special_[id];
}

int32_t Tokenizer::token_id(std::string_view token_text) const {
  for (const AddedToken& a : added_)
    if (a.content == token_text) return a.id;
  return vocab_index_.find(token_text, bytes_in(id_to_bytes_));
}

int32_t Tokenizer::vocab_token_id(std::string_view vocab_text) const {
  for (const AddedToken& a : added_)
    if (a.content == vocab_text) return a.id;
  static const std::vector<int> inv = unicode_to_byte_table();
  auto bytes = byte_level_to_bytes(std::string(vocab_text), inv);
  if (!bytes.ok()) return -1;
  return vocab_index_.find(*bytes, bytes_in(id_to_bytes_));
}

std::string Tokenizer::decode_bytes(const std::vector<int32_t>& ids, bool skip_special) const {
  std::string out;
  for (int32_t id : ids) {
    if (skip_special && is_special(id)) continue;
    out.append(token_bytes(id));
  }
  return out;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special) const {
  return unicode::sanitize_utf8(decode_bytes(ids, skip_special));
}

std::string TokenStreamDecoder::push(int32_t id) {
  if (skip_special_ && tok_.is_special(id)) return {};
  pending_.append(tok_.token_bytes(id));
  size_t n = unicode::complete_utf8_prefix(pending_);
  // Hold back only a trailing, possibly unfinished character; anything before it is emitted (with
  // invalid bytes replaced) so a broken sequence in the middle cannot stall the stream.
  std::string ready = unicode::sanitize_utf8(std::string_view(pending_).substr(0, n));
  pending_.erase(0, n);
  return ready;
}

std::string TokenStreamDecoder::flush() {
  std::string rest = unicode::sanitize_utf8(pending_);
  pending_.clear();
  return rest;
}

}  // namespace qvl
