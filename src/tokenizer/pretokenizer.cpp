// The Qwen2 pre-tokenizer: splits normalised text into pieces with the regex of tokenizer.json,
// hand-compiled into a scanner with the same leftmost-first, backtracking semantics (no std::regex).
#include "tokenizer/pretokenizer.h"

#include <cstdint>

#include "tokenizer/unicode.h"

namespace qvl {

namespace {

enum : uint8_t { kLetter = 1, kNumber = 2, kSpace = 4, kNewline = 8 };  // kNewline: \r or \n

struct Char {
  char32_t cp;
  uint32_t offset;  // byte offset in the text
  uint8_t cls;
};

uint8_t classify(char32_t cp) {
  if (cp < 0x80) {
    if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z')) return kLetter;
    if (cp >= '0' && cp <= '9') return kNumber;
    if (cp == '\r' || cp == '\n') return kSpace | kNewline;
    if (cp == ' ' || (cp >= 0x09 && cp <= 0x0D)) return kSpace;
    return 0;
  }
  if (unicode::is_letter(cp)) return kLetter;
  if (unicode::is_number(cp)) return kNumber;
  if (unicode::is_whitespace(cp)) return kSpace;
  return 0;
}

// Case-insensitive match of one contraction letter, as (?i) folds it: 's' also matches U+017F (ſ, LATIN
// SMALL LETTER LONG S), whose simple case folding is 's'; 'k' would match U+212A but no suffix has a k.
bool fold_eq(char32_t cp, char lower) {
  if (cp == static_cast<char32_t>(lower) || cp == static_cast<char32_t>(lower - 'a' + 'A')) return true;
  return lower == 's' && cp == 0x017F;
}

// Length in characters of the contraction that starts at chars[i] (which is '\''), or 0.
size_t match_contraction(const std::vector<Char>& c, size_t i) {
  size_t n = c.size();
  if (i + 1 >= n) return 0;
  char32_t a = c[i + 1].cp;
  if (fold_eq(a, 's') || fold_eq(a, 't') || fold_eq(a, 'm') || fold_eq(a, 'd')) return 2;
  if (i + 2 < n) {
    char32_t b = c[i + 2].cp;
    if ((fold_eq(a, 'r') && fold_eq(b, 'e')) || (fold_eq(a, 'v') && fold_eq(b, 'e')) ||
        (fold_eq(a, 'l') && fold_eq(b, 'l')))
      return 3;
  }
  return 0;
}

// Returns the end (exclusive, in characters) of the match that starts at chars[i].
size_t match_at(const std::vector<Char>& c, size_t i) {
  const size_t n = c.size();
  auto is = [&](size_t k, uint8_t cls) { return k < n && (c[k].cls & cls); };
  auto letters_from = [&](size_t k) { while (is(k, kLetter)) ++k; return k; };

  // (?i:'s|'t|'re|'ve|'m|'ll|'d)
  if (c[i].cp == '\'') {
    if (size_t len = match_contraction(c, i)) return i + len;
  }
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (c[i].cls & kLetter) return letters_from(i);
  if (!(c[i].cls & (kNewline | kNumber)) && is(i + 1, kLetter)) return letters_from(i + 1);
  // \p{N}
  if (c[i].cls & kNumber) return i + 1;
  // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
  auto is_other = [&](size_t k) { return k < n && !(c[k].cls & (kSpace | kLetter | kNumber)); };
  size_t k = i;
  if (c[k].cp == ' ' && is_other(k + 1)) ++k;
  if (is_other(k)) {
    while (is_other(k)) ++k;
    while (is(k, kNewline)) ++k;
    return k;
  }
  // Only whitespace is left at chars[i].
  size_t run_end = i;
  while (is(run_end, kSpace)) ++run_end;
  // \s*[\r\n]+ : ends just after the last newline of the whitespace run.
  for (size_t j = run_end; j > i; --j) {
    if (c[j - 1].cls & kNewline) return j;
  }
  // \s+(?!\S) : the whole run at the end of text, else the run minus its last character.
  if (run_end == n) return run_end;
  if (run_end - i >= 2) return run_end - 1;
  // \s+
  return run_end;
}

}  // namespace

void qwen2_pretokenize(std::string_view text, std::vector<std::string_view>& out) {
  std::vector<Char> chars;
  chars.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    int len = 0;
    char32_t cp = unicode::decode_utf8(text, i, &len);
    chars.push_back({cp, static_cast<uint32_t>(i), classify(cp)});
    i += static_cast<size_t>(len);
  }
  auto offset = [&](size_t ci) { return ci < chars.size() ? chars[ci].offset : text.size(); };
  for (size_t i = 0; i < chars.size();) {
    size_t end = match_at(chars, i);
    out.push_back(text.substr(offset(i), offset(end) - offset(i)));
    i = end;
  }
}

}  // namespace qvl
