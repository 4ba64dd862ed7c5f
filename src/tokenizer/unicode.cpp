// The Unicode facts the tokenizer needs: UTF-8 decoding (invalid bytes replaced as Python and HF replace
// them), NFC, and the character classes of the Qwen2 split regex — all from the tables HF tokenizers
// itself uses (unicode_tables.cpp, generated), so that every code point classifies and normalises as in HF.
#include "tokenizer/unicode.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "tokenizer/unicode_tables.h"
#include "util/status.h"

namespace qvl::unicode {

namespace {

// Hangul syllables decompose and compose by arithmetic (Unicode 3.12).
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

// Per code point: the class flags (bits 0-2), kNfcCheck (a character that NFC may change or that may
// combine with its neighbour), and the canonical combining class (bits 8-15). A two-stage table.
constexpr uint16_t kNfcCheck = 8;
constexpr int kBlockBits = 7;
constexpr char32_t kMaxCp = 0x110000;

struct Props {
  std::vector<uint16_t> stage1;  // [kMaxCp >> kBlockBits]: block index
  std::vector<uint16_t> stage2;  // [blocks << kBlockBits]
  uint16_t get(char32_t cp) const {
    if (cp >= kMaxCp) return 0;
    return stage2[(static_cast<size_t>(stage1[cp >> kBlockBits]) << kBlockBits) | (cp & ((1u << kBlockBits) - 1))];
  }
};

const Props& props() {
  static const Props p = [] {
    std::vector<uint16_t> flat(kMaxCp, 0);
    using namespace tables;
    for (size_t i = 0; i < kClassRangeCount; ++i)
      for (char32_t cp = kClassRanges[i].first; cp <= kClassRanges[i].last; ++cp) flat[cp] |= kClassRanges[i].flags;
    for (size_t i = 0; i < kCccCount; ++i) flat[kCcc[i].cp] |= static_cast<uint16_t>(kNfcCheck | (kCcc[i].ccc << 8));
    // NFC's quick check: a character that decomposes but is itself a primary composite (é, a Hangul
    // syllable) stays as it is unless a later character combines with it, and that one is flagged.
    std::vector<uint8_t> composite(kMaxCp, 0);
    for (size_t i = 0; i < kCompositionCount; ++i) composite[kCompositions[i].composite] = 1;
    for (size_t i = 0; i < kDecompositionCount; ++i)
      if (!composite[kDecompositions[i].cp]) flat[kDecompositions[i].cp] |= kNfcCheck;
    for (size_t i = 0; i < kCompositionCount; ++i) flat[kCompositions[i].second] |= kNfcCheck;
    for (char32_t cp = kVBase; cp < kVBase + kVCount; ++cp) flat[cp] |= kNfcCheck;
    for (char32_t cp = kTBase + 1; cp < kTBase + kTCount; ++cp) flat[cp] |= kNfcCheck;
    Props out;
    constexpr size_t block = size_t{1} << kBlockBits;
    out.stage1.resize(kMaxCp >> kBlockBits);
    for (size_t b = 0; b < out.stage1.size(); ++b) {
      const uint16_t* src = flat.data() + b * block;
      size_t found = out.stage2.size() / block;
      for (size_t k = 0; k < out.stage2.size() / block; ++k) {
        if (std::equal(src, src + block, out.stage2.data() + k * block)) { found = k; break; }
      }
      if (found == out.stage2.size() / block) out.stage2.insert(out.stage2.end(), src, src + block);
      out.stage1[b] = static_cast<uint16_t>(found);
    }
    return out;
  }();
  return p;
}

uint8_t ccc_of(const Props& p, char32_t cp) { return static_cast<uint8_t>(p.get(cp) >> 8); }

void decompose(char32_t cp, std::vector<char32_t>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    char32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount) out.push_back(kTBase + s % kTCount);
    return;
  }
  using namespace tables;
  const Decomposition* end = kDecompositions + kDecompositionCount;
  const Decomposition* d =
      std::lower_bound(kDecompositions, end, cp, [](const Decomposition& e, char32_t c) { return e.cp < c; });
  if (d != end && d->cp == cp) {
    out.insert(out.end(), kDecompositionPool + d->offset, kDecompositionPool + d->offset + d->length);
  } else {
    out.push_back(cp);
  }
}

// The primary composite of (a, b), or 0.
char32_t compose(char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase && b < kTBase + kTCount)
    return a + (b - kTBase);
  using namespace tables;
  const Composition* end = kCompositions + kCompositionCount;
  const Composition* c = std::lower_bound(kCompositions, end, std::pair<char32_t, char32_t>(a, b),
                                          [](const Composition& e, const std::pair<char32_t, char32_t>& k) {
                                            return e.first != k.first ? e.first < k.first : e.second < k.second;
                                          });
  return c != end && c->first == a && c->second == b ? c->composite : 0;
}

// Decodes the well-formed sequence at s[i] (Unicode Table 3-7). On an ill-formed one, returns false with
// *len the length of its maximal subpart (at least 1): the bytes one U+FFFD stands for.
bool decode(std::string_view s, size_t i, char32_t* cp, int* len) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  unsigned char b0 = byte(i);
  if (b0 < 0x80) {
    *cp = b0;
    *len = 1;
    return true;
  }
  int need;
  unsigned char lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    *len = 1;
    return false;
  }
  char32_t v = b0 & (0x3F >> need);
  for (int k = 1; k <= need; ++k) {
    if (i + k >= s.size()) { *len = k; return false; }
    unsigned char b = byte(i + k);
    if (k == 1 ? (b < lo || b > hi) : (b & 0xC0) != 0x80) { *len = k; return false; }
    v = (v << 6) | (b & 0x3F);
  }
  *cp = v;
  *len = need + 1;
  return true;
}

}  // namespace

char32_t decode_utf8(std::string_view s, size_t i, int* len) {
  char32_t cp = 0;
  return decode(s, i, &cp, len) ? cp : 0xFFFD;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

bool is_valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    char32_t cp;
    int len;
    if (!decode(s, i, &cp, &len)) return false;
    i += static_cast<size_t>(len);
  }
  return true;
}

std::string sanitize_utf8(std::string_view s) {
  if (is_valid_utf8(s)) return std::string(s);
  // One U+FFFD per maximal subpart of an ill-formed sequence, as Python's errors="replace" (and so the
  // text HF's Python API is given) does: ED A0 80 is three of them, F0 9F 98 (truncated) one.
  std::string out;
  out.reserve(s.size() + 8);
  for (size_t i = 0; i < s.size();) {
    char32_t cp;
    int len;
    if (decode(s, i, &cp, &len)) {
      out.append(s.substr(i, static_cast<size_t>(len)));
    } else {
      out += "\xEF\xBF\xBD";
    }
    i += static_cast<size_t>(len);
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

static void nfc_segment(const Props& p, std::string_view s, std::string& out) {
  // 1. Full canonical decomposition.
  std::vector<char32_t> d;  // [code points of the decomposed text]
  d.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    char32_t cp;
    int len;
    QVL_CHECK_MSG(decode(s, i, &cp, &len), "nfc() needs valid UTF-8; callers sanitize first");
    decompose(cp, d);
    i += static_cast<size_t>(len);
  }
  // 2. Canonical ordering: each run of non-starters sorted stably by combining class.
  for (size_t i = 0; i < d.size();) {
    if (ccc_of(p, d[i]) == 0) { ++i; continue; }
    size_t j = i;
    while (j < d.size() && ccc_of(p, d[j]) != 0) ++j;
    std::stable_sort(d.begin() + static_cast<std::ptrdiff_t>(i), d.begin() + static_cast<std::ptrdiff_t>(j),
                     [&](char32_t a, char32_t b) { return ccc_of(p, a) < ccc_of(p, b); });
    i = j;
  }
  // 3. Canonical composition: a character joins the last starter unless blocked by a mark of the same or
  //    a higher class between them (UAX #15).
  size_t starter = 0, out_n = 0;
  bool have_starter = false;
  int last_ccc = -1;  // class of the last character written; -1: none yet
  for (size_t i = 0; i < d.size(); ++i) {
    char32_t ch = d[i];
    int c = ccc_of(p, ch);
    if (have_starter && (last_ccc < c || last_ccc == 0) && (last_ccc != 0 || starter == out_n - 1)) {
      if (char32_t comp = compose(d[starter], ch)) {
        d[starter] = comp;
        continue;
      }
    }
    if (c == 0) {
      starter = out_n;
      have_starter = true;
    }
    last_ccc = c;
    d[out_n++] = ch;
  }
  for (size_t i = 0; i < out_n; ++i) append_utf8(out, d[i]);
}

std::string nfc(std::string_view s) {
  const Props& p = props();
  // NFC works on segments that start at a stable character (one no neighbour can change: class 0, kept
  // by NFC, combining with nothing before it) and run up to the next one; the rest of the text is copied.
  std::string out;
  size_t copied = 0;                      // s[0, copied) is in `out` (or is still to be copied verbatim)
  size_t last_stable = std::string::npos;  // the last stable character after `copied`
  for (size_t i = 0; i < s.size();) {
    if (static_cast<unsigned char>(s[i]) < 0x80) { last_stable = i++; continue; }
    char32_t cp;
    int len;
    QVL_CHECK_MSG(decode(s, i, &cp, &len), "nfc() needs valid UTF-8; callers sanitize first");
    if (!(p.get(cp) & kNfcCheck)) {
      last_stable = i;
      i += static_cast<size_t>(len);
      continue;
    }
    const size_t start = last_stable != std::string::npos ? last_stable : copied;
    size_t end = i + static_cast<size_t>(len);
    while (end < s.size()) {
      if (static_cast<unsigned char>(s[end]) < 0x80) break;
      QVL_CHECK_MSG(decode(s, end, &cp, &len), "nfc() needs valid UTF-8; callers sanitize first");
      if (!(p.get(cp) & kNfcCheck)) break;
      end += static_cast<size_t>(len);
    }
    if (out.empty()) out.reserve(s.size() + 16);
    out.append(s.substr(copied, start - copied));
    nfc_segment(p, s.substr(start, end - start), out);
    copied = i = end;
    last_stable = std::string::npos;
  }
  if (copied == 0) return std::string(s);
  out.append(s.substr(copied));
  return out;
}

bool is_letter(char32_t cp) { return props().get(cp) & tables::kLetter; }
bool is_number(char32_t cp) { return props().get(cp) & tables::kNumber; }
bool is_whitespace(char32_t cp) { return props().get(cp) & tables::kSpace; }

bool is_punctuation(char32_t cp) {
  using tables::kPunctRanges;
  size_t lo = 0, hi = tables::kPunctRangeCount;
  while (lo < hi) {  // the first range whose last >= cp
    const size_t mid = (lo + hi) / 2;
    if (kPunctRanges[mid].last < cp) lo = mid + 1;
    else hi = mid;
  }
  return lo < tables::kPunctRangeCount && kPunctRanges[lo].first <= cp;
}

}  // namespace qvl::unicode
