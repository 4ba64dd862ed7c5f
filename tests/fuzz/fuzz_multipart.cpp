// Fuzz target: multipart/form-data bodies — bytes split at the first '\n' into a Content-Type header value
// and the body -> is_multipart_form, parse_multipart_form, find_field for the fields POST
// /v1/vision/completion reads ("image", "prompt", "max_tokens" through parse_form_max_tokens). Nothing may
// throw out; a refusal says why; accepted fields are at most 64, each a piece of the body, found by name.
#include <cstdint>
#include <string>
#include <string_view>

#include "server/http/multipart.h"
#include "server/legacy_request.h"
#include "util/status.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace http = qvl::server::http;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t eol = input.find('\n');
  const std::string_view content_type = eol == std::string_view::npos ? input : input.substr(0, eol);
  const std::string_view body = eol == std::string_view::npos ? std::string_view() : input.substr(eol + 1);

  (void)http::is_multipart_form(content_type);
  auto form = http::parse_multipart_form(content_type, body);
  if (!form.ok()) {
    QVL_CHECK(!form.status().message().empty());
    return 0;
  }
  QVL_CHECK(form->size() <= 64);
  size_t bytes = 0;
  for (const http::FormField& f : *form) {
    bytes += f.content.size();
    QVL_CHECK(f.content.empty() || body.find(f.content) != std::string_view::npos);
    const http::FormField* first = http::find_field(*form, f.name);
    QVL_CHECK(first != nullptr && first->name == f.name && first <= &f);
  }
  QVL_CHECK(bytes <= body.size());
  (void)http::find_field(*form, "image");
  (void)http::find_field(*form, "prompt");
  if (const http::FormField* max_tokens = http::find_field(*form, "max_tokens")) {
    int n = qvl::server::kLegacyDefaultMaxTokens;
    if (qvl::server::parse_form_max_tokens(max_tokens->content, n).ok()) QVL_CHECK(n >= 1 && n <= (1 << 20));
  }
  return 0;
}
