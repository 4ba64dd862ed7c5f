// The Unicode facts the tokenizer needs: UTF-8 decoding, NFC, and the character classes of the
// Qwen2 split regex (\p{L}, \p{N}, \s), from the tables HF tokenizers uses (unicode_tables.h).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace qvl::unicode {

// Decodes one code point at s[i]; sets `len` to its byte length. An ill-formed or truncated sequence
// decodes to U+FFFD with len = the length of its maximal subpart (callers that must keep bytes verbatim
// use `len` to copy them).
char32_t decode_utf8(std::string_view s, size_t i, int* len);

void append_utf8(std::string& out, char32_t cp);

// Replaces each maximal subpart of an ill-formed UTF-8 sequence with one U+FFFD, as Python's
// bytes.decode(errors="replace") does (so HF's Python API sees the same text).
std::string sanitize_utf8(std::string_view s);

// Returns true when `s` is well-formed UTF-8.
bool is_valid_utf8(std::string_view s);

// Length of the longest prefix of `s` that ends on a character boundary; a trailing incomplete (but so
// far valid) sequence is excluded. Used to stream decoded text without splitting a character.
size_t complete_utf8_prefix(std::string_view s);

// Unicode NFC normalisation. Input must be valid UTF-8.
std::string nfc(std::string_view s);

bool is_letter(char32_t cp);      // \p{L}: Lu Ll Lt Lm Lo
bool is_number(char32_t cp);      // \p{N}: Nd Nl No
bool is_whitespace(char32_t cp);  // \s: the Unicode White_Space property
bool is_punctuation(char32_t cp);  // general category P* (Python's unicodedata.category(c)[0] == 'P')

}  // namespace qvl::unicode
