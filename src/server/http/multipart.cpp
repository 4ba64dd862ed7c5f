// Parses a multipart/form-data request body (RFC 7578) into its named fields.
#include "server/http/multipart.h"

#include "server/http/request.h"

namespace qvl::server::http {

namespace {

constexpr size_t kMaxParts = 64;

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

// The value of parameter `key` in a header value such as `form-data; name="image"; filename="a.jpg"`.
std::string parameter(std::string_view value, std::string_view key) {
  size_t pos = value.find(';');
  while (pos != std::string_view::npos) {
    std::string_view rest = trim(value.substr(pos + 1));
    const size_t eq = rest.find('=');
    const size_t semi = rest.find(';');
    if (eq != std::string_view::npos && (semi == std::string_view::npos || eq < semi) &&
        iequals(trim(rest.substr(0, eq)), key)) {
      std::string_view v = rest.substr(eq + 1);
      if (!v.empty() && v.front() == '"') {
        std::string out;
        for (size_t i = 1; i < v.size() && v[i] != '"'; ++i) {
          if (v[i] == '\\' && i + 1 < v.size()) ++i;
          out += v[i];
        }
        return out;
      }
      return std::string(trim(v.substr(0, v.find(';'))));
    }
    const size_t next = value.find(';', pos + 1);
    pos = next;
  }
  return "";
}

}  // namespace

bool is_multipart_form(std::string_view content_type) {
  const std::string_view media = trim(content_type.substr(0, content_type.find(';')));
  return iequals(media, "multipart/form-data");
}

Result<std::vector<FormField>> parse_multipart_form(std::string_view content_type, std::string_view body) {
  const std::string boundary = parameter(content_type, "boundary");
  if (boundary.empty() || boundary.size() > 200) {
    return Status::Error("multipart/form-data: the Content-Type has no boundary parameter (or one over 200 "
                         "characters); expected e.g. 'multipart/form-data; boundary=XYZ'");
  }
  const std::string delimiter = "--" + boundary;
  std::vector<FormField> fields;
  size_t pos = body.find(delimiter);  // anything before it is a preamble
  if (pos == std::string_view::npos) return Status::Error("multipart/form-data: the body has no part delimited by its boundary");
  for (;;) {
    pos += delimiter.size();
    if (body.substr(pos, 2) == "--") return fields;  // the close delimiter
    while (pos < body.size() && (body[pos] == ' ' || body[pos] == '\t')) ++pos;
    if (body.substr(pos, 2) != "\r\n") return Status::Error("multipart/form-data: expected CRLF after a boundary at byte " + std::to_string(pos));
    pos += 2;
    const size_t head_end = body.find("\r\n\r\n", pos);
    // A part with no headers starts with the blank line directly.
    const bool no_headers = body.substr(pos, 2) == "\r\n";
    if (!no_headers && head_end == std::string_view::npos) {
      return Status::Error("multipart/form-data: a part's headers do not end (no blank line) after byte " + std::to_string(pos));
    }
    FormField f;
    if (!no_headers) {
      std::string_view head = body.substr(pos, head_end - pos);
      while (!head.empty()) {
        const size_t eol = head.find("\r\n");
        std::string_view line = head.substr(0, eol);
        head = eol == std::string_view::npos ? std::string_view() : head.substr(eol + 2);
        const size_t colon = line.find(':');
        if (colon == std::string_view::npos) continue;
        const std::string_view name = trim(line.substr(0, colon));
        const std::string_view value = trim(line.substr(colon + 1));
        if (iequals(name, "Content-Disposition")) {
          f.name = parameter(value, "name");
          f.filename = parameter(value, "filename");
        } else if (iequals(name, "Content-Type")) {
          f.content_type = std::string(value);
        }
      }
      pos = head_end + 4;
    } else {
      pos += 2;
    }
    const size_t end = body.find("\r\n" + delimiter, pos);
    if (end == std::string_view::npos) return Status::Error("multipart/form-data: the part '" + f.name + "' does not end with the boundary");
    f.content = std::string(body.substr(pos, end - pos));
    fields.push_back(std::move(f));
    if (fields.size() > kMaxParts) return Status::Error("multipart/form-data: more than 64 parts");
    pos = end + 2;
  }
}

const FormField* find_field(const std::vector<FormField>& fields, std::string_view name) {
  for (const FormField& f : fields) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

}  // namespace qvl::server::http
