// Bounds on a JSON request body checked by a linear scan before it is parsed: nesting depth, number of
// values and string length, so no body can exhaust the stack or memory of the parser or of later copies.
#pragma once

#include <cstddef>
#include <string_view>

#include "util/status.h"

namespace qvl::server {

struct JsonLimits {
  int max_depth = 64;                   // objects and arrays inside each other (a chat request needs ~8)
  size_t max_values = 1u << 20;         // values of any kind in the document
  size_t max_string_bytes = 64u << 20;  // one string, as sent (escapes counted as written)
};

// Ok when `text` stays within `limits`; otherwise says which limit, where (byte offset) and by how much.
// Only the structure is scanned: whether the JSON is valid is left to the parser.
Status check_json_limits(std::string_view text, const JsonLimits& limits = {});

}  // namespace qvl::server
