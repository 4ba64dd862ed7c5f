// Integer fields of the model's JSON config files read strictly: a value must be a JSON integer within the
// field's C++ type, or the error names the field (nlohmann's get<int>() of 1e300 is undefined behaviour).
#pragma once

#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "util/status.h"

namespace qvl {

// obj[key] into `out` when present and not null; `where` names obj in the error ("config.json: text_config").
template <class Int>
Status read_int_field(const nlohmann::json& obj, const char* key, Int& out, const std::string& where) {
  if (!obj.is_object() || !obj.contains(key) || obj[key].is_null()) return Status::Ok();
  const nlohmann::json& v = obj[key];
  const bool fits = v.is_number_unsigned()
                        ? v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<Int>::max())
                        : v.is_number_integer() && v.get<int64_t>() >= static_cast<int64_t>(std::numeric_limits<Int>::min()) &&
                              v.get<int64_t>() <= static_cast<int64_t>(std::numeric_limits<Int>::max());
  if (!fits) {
    return Status::Error(where + "." + key + ": expected an integer in [" + std::to_string(std::numeric_limits<Int>::min()) +
                         ", " + std::to_string(std::numeric_limits<Int>::max()) + "], got " + v.dump().substr(0, 40));
  }
  out = static_cast<Int>(v.is_number_unsigned() ? static_cast<int64_t>(v.get<uint64_t>()) : v.get<int64_t>());
  return Status::Ok();
}

// A list of ints, each read as above.
inline Status read_int_list(const nlohmann::json& obj, const char* key, std::vector<int>& out, const std::string& where) {
  if (!obj.is_object() || !obj.contains(key) || obj[key].is_null()) return Status::Ok();
  const nlohmann::json& v = obj[key];
  if (!v.is_array()) return Status::Error(where + "." + key + ": expected a list of integers, got " + v.dump().substr(0, 40));
  std::vector<int> list(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    nlohmann::json item = nlohmann::json::object({{"v", v[i]}});
    QVL_RETURN_IF_ERROR(read_int_field(item, "v", list[i], where + "." + key + "[" + std::to_string(i) + "]"));
  }
  out = std::move(list);
  return Status::Ok();
}

}  // namespace qvl
