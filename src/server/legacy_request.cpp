// The request fields of the legacy endpoints read into plain values: the POST /chat JSON body and the
// max_tokens field of the POST /v1/vision/completion form.
#include "server/legacy_request.h"

#include <algorithm>

#include "server/api.h"

namespace qvl::server {

Result<LegacyChatRequest> parse_legacy_chat(const json& body, const GenerateOptions& defaults) {
  LegacyChatRequest r;
  QVL_RETURN_IF_ERROR(read_string(body, "question", r.question));
  QVL_RETURN_IF_ERROR(read_string(body, "image", r.image));
  if (r.question.empty()) {
    return Status::Error("question: missing or empty; expected {\"image\": \"<base64>\", \"question\": \"...\"}");
  }
  r.max_tokens = std::min(defaults.max_tokens, kLegacyDefaultMaxTokens);
  QVL_RETURN_IF_ERROR(read_max_tokens(body, "max_tokens", r.max_tokens));
  return r;
}

Status parse_form_max_tokens(const std::string& text, int& out) {
  json j;
  try {
    j = json{{"max_tokens", json::parse(text)}};
  } catch (const json::exception&) {
    return Status::Error("max_tokens: expected an integer, got '" + text.substr(0, 40) + "'");
  }
  return read_max_tokens(j, "max_tokens", out);
}

}  // namespace qvl::server
