// A linear scan of a JSON body's structure (depth, values, string length, keys) before it is parsed.
#include "server/json_limits.h"

#include <string>
#include <utility>
#include <vector>

namespace qvl::server {

Status check_json_limits(std::string_view text, const JsonLimits& limits) {
  int depth = 0;
  size_t values = 0;
  // Per open object or array, inside the depth limit: whether it is an object, and its keys so far.
  std::vector<std::pair<bool, size_t>> open;
  open.reserve(static_cast<size_t>(limits.max_depth) + 1);
  size_t comparisons = 0;
  bool in_string = false, escaped = false, in_scalar = false;
  size_t string_start = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      if (in_string && i - string_start >= limits.max_string_bytes) {
        return Status::Error("a JSON string starting at byte " + std::to_string(string_start) + " is longer than " +
                             std::to_string(limits.max_string_bytes) + " bytes, the limit for one string");
      }
      continue;
    }
    const bool scalar_char = !(c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == ',' || c == ':' || c == '{' ||
                               c == '}' || c == '[' || c == ']' || c == '"');
    if (scalar_char) {
      if (!in_scalar) ++values;  // a number, true, false or null begins
      in_scalar = true;
    } else {
      in_scalar = false;
    }
    switch (c) {
      case '"':
        in_string = true;
        string_start = i;
        ++values;  // a string value or an object key
        break;
      case '{':
      case '[':
        ++values;
        if (++depth > limits.max_depth) {
          return Status::Error("the JSON nests more than " + std::to_string(limits.max_depth) +
                               " objects/arrays deep (at byte " + std::to_string(i) +
                               "), over the limit; a chat request needs far fewer");
        }
        open.emplace_back(c == '{', 0);
        break;
      case '}':
      case ']':
        if (depth > 0) --depth;
        if (!open.empty()) open.pop_back();
        break;
      case ':':  // a key of the innermost object ends
        if (!open.empty() && open.back().first) {
          const size_t keys = ++open.back().second;
          if (keys > limits.max_object_keys)
            return Status::Error("a JSON object has more than " + std::to_string(limits.max_object_keys) +
                                 " keys (at byte " + std::to_string(i) + "), over the limit for one object");
          comparisons += keys - 1;  // the parser compares a new key with every key before it
          if (comparisons > limits.max_key_comparisons)
            return Status::Error("the JSON's objects have too many keys in all (at byte " + std::to_string(i) +
                                 "): parsing them would take over " + std::to_string(limits.max_key_comparisons) +
                                 " key comparisons; send fewer keys per object");
        }
        break;
      default:
        break;
    }
    if (values > limits.max_values) {
      return Status::Error("the JSON has more than " + std::to_string(limits.max_values) + " values (at byte " +
                           std::to_string(i) + "), over the limit for one request");
    }
  }
  return Status::Ok();
}

}  // namespace qvl::server
