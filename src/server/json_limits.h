// Bounds on a JSON request body checked by a linear scan before it is parsed: nesting depth, number of
// values, string length and keys per object, so no body can exhaust the stack, the memory or the time of the
// parser or of later copies.
#pragma once

#include <cstddef>
#include <string_view>

#include "util/status.h"

namespace qvl::server {

struct JsonLimits {
  int max_depth = 64;                   // objects and arrays inside each other (a chat request needs ~8)
  size_t max_values = 1u << 20;         // values of any kind in the document
  size_t max_string_bytes = 64u << 20;  // one string, as sent (escapes counted as written)
  // Keys: the parser keeps an object's keys in order and finds each new one by a linear search, so one object
  // of N keys costs N^2/2 string comparisons (100k keys: 21 s). An object may have at most max_object_keys,
  // and the document at most max_key_comparisons in all (the sum over its objects of k for the k-th key):
  // 16M comparisons parse in ~75 ms, while a request's own objects (a schema's properties, a logit_bias) stay
  // far below.
  size_t max_object_keys = 4096;
  size_t max_key_comparisons = 16u << 20;
};

// Ok when `text` stays within `limits`; otherwise says which limit, where (byte offset) and by how much.
// Only the structure is scanned: whether the JSON is valid is left to the parser.
Status check_json_limits(std::string_view text, const JsonLimits& limits = {});

}  // namespace qvl::server
