// Parses a multipart/form-data request body (RFC 7578) into its named fields.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "util/status.h"

namespace qvl::server::http {

struct FormField {
  std::string name;
  std::string filename;      // empty for a plain field
  std::string content_type;  // the part's Content-Type, if given
  std::string content;
};

// Whether a Content-Type header names multipart/form-data.
bool is_multipart_form(std::string_view content_type);

// The fields of the body, in order. Errors: no boundary in the Content-Type, a malformed or unterminated part,
// more than 64 parts.
Result<std::vector<FormField>> parse_multipart_form(std::string_view content_type, std::string_view body);

// The first field named `name`, or nullptr.
const FormField* find_field(const std::vector<FormField>& fields, std::string_view name);

}  // namespace qvl::server::http
