// The Unicode data the tokenizer uses, as HF tokenizers has it: the character classes of its regex engine
// and the NFC tables of its normalizer. The arrays are generated (unicode_tables.cpp, written by
// tools/reference/gen_unicode_tables.py); unicode.cpp builds its lookups from them.
#pragma once

#include <cstddef>
#include <cstdint>

namespace qvl::unicode::tables {

enum : uint8_t { kLetter = 1, kNumber = 2, kSpace = 4 };

struct ClassRange {
  char32_t first, last;  // inclusive
  uint8_t flags;         // kLetter | kNumber | kSpace
};
struct Ccc {
  char32_t cp;
  uint8_t ccc;  // canonical combining class, non-zero
};
struct Decomposition {
  char32_t cp;
  uint16_t offset, length;  // into kDecompositionPool: the full canonical decomposition
};
struct Composition {
  char32_t first, second, composite;
};

extern const ClassRange kClassRanges[];  // sorted, disjoint
extern const size_t kClassRangeCount;
extern const Ccc kCcc[];  // sorted by cp
extern const size_t kCccCount;
extern const Decomposition kDecompositions[];  // sorted by cp; Hangul syllables are not listed
extern const size_t kDecompositionCount;
extern const char32_t kDecompositionPool[];
struct PunctRange {
  char32_t first, last;  // inclusive
};
extern const PunctRange kPunctRanges[];  // sorted, disjoint: general category P*
extern const size_t kPunctRangeCount;
extern const Composition kCompositions[];  // sorted by (first, second); Hangul is not listed
extern const size_t kCompositionCount;

}  // namespace qvl::unicode::tables
