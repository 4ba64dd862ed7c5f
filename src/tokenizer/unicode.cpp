// The Unicode facts the tokenizer needs: UTF-8 decoding, NFC, and the character classes of the
// Qwen2 split regex (\p{L}, \p{N}, \s), backed by utf8proc's Unicode tables.
#include "tokenizer/unicode.h"

#include <cstdlib>
#include <utf8proc.h>

#include "util/status.h"

namespace qvl::unicode {

char32_t decode_utf8(std::string_view s, size_t i, int* len) {
  utf8proc_int32_t cp = 0;
  utf8proc_ssize_t n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data() + i),
                                        static_cast<utf8proc_ssize_t>(s.size() - i), &cp);
  if (n <= 0) {
    *len = 1;
    return 0xFFFD;
  }
  *len = static_cast<int>(n);
  return static_cast<char32_t>(cp);
}

void append_utf8(std::string& out, char32_t cp) {
  utf8proc_uint8_t buf[4];
  utf8proc_ssize_t n = utf8proc_encode_char(static_cast<utf8proc_int32_t>(cp), buf);
  out.append(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
}

bool is_valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    utf8proc_int32_t cp;
    utf8proc_ssize_t n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data() + i),
                                          static_cast<utf8proc_ssize_t>(s.size() - i), &cp);
    if (n <= 0) return false;
    i += static_cast<size_t>(n);
  }
  return true;
}

std::string sanitize_utf8(std::string_view s) {
  if (is_valid_utf8(s)) return std::string(s);
  std::string out;
  out.reserve(s.size() + 8);
  for (size_t i = 0; i < s.size();) {
    int len = 0;
    char32_t cp = decode_utf8(s, i, &len);
    if (cp == 0xFFFD && len == 1) {
      // Python's "replace" emits one U+FFFD per maximal invalid subpart: skip the continuation bytes
      // that a valid lead byte promised but that are themselves valid continuations.
      unsigned char b = static_cast<unsigned char>(s[i]);
      size_t need = b >= 0xF0 && b <= 0xF4 ? 3 : b >= 0xE0 && b <= 0xEF ? 2 : b >= 0xC2 && b <= 0xDF ? 1 : 0;
      size_t j = i + 1;
      while (need > 0 && j < s.size() && (static_cast<unsigned char>(s[j]) & 0xC0) == 0x80) {
        // The second byte has tighter ranges for E0/ED/F0/F4; utf8proc already rejected the sequence,
        // so at worst we swallow one byte more than Python in those rare overlong/surrogate cases.
        ++j;
        --need;
      }
      out += "\xEF\xBF\xBD";
      i = j;
    } else {
      out.append(s.substr(i, static_cast<size_t>(len)));
      i += static_cast<size_t>(len);
    }
  }
  return out;
}

size_t complete_utf8_prefix(std::string_view s) {
  // Look back at most 3 bytes for the lead byte of a possibly unfinished sequence.
  size_t n = s.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    unsigned char b = static_cast<unsigned char>(s[n - back]);
    if ((b & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    size_t want = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 1;
    return want > back ? n - back : n;
  }
  return n;
}

std::string nfc(std::string_view s) {
  // Fast path: pure ASCII is already NFC.
  bool ascii = true;
  for (char c : s) {
    if (static_cast<unsigned char>(c) >= 0x80) { ascii = false; break; }
  }
  if (ascii) return std::string(s);
  utf8proc_uint8_t* out = nullptr;
  utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                                    static_cast<utf8proc_ssize_t>(s.size()), &out,
                                    static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  QVL_CHECK_MSG(n >= 0, "nfc() needs valid UTF-8; callers sanitize first");
  std::string result(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
  std::free(out);
  return result;
}

bool is_letter(char32_t cp) {
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO:
      return true;
    default:
      return false;
  }
}

bool is_number(char32_t cp) {
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO:
      return true;
    default:
      return false;
  }
}

bool is_whitespace(char32_t cp) {
  // The White_Space property (PropList.txt), which is what \s means in Unicode-aware regex engines.
  if (cp >= 0x09 && cp <= 0x0D) return true;
  switch (cp) {
    case 0x20: case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F:
    case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

}  // namespace qvl::unicode
