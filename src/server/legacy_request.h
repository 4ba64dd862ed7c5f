// The request fields of the legacy endpoints read into plain values: the POST /chat JSON body and the
// max_tokens field of the POST /v1/vision/completion form.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "engine/generate.h"
#include "util/status.h"

namespace qvl::server {

// The deployments these endpoints replace capped answers at 512 tokens when the request names no limit.
constexpr int kLegacyDefaultMaxTokens = 512;

// POST /chat: {"image": base64 or data URI (optional), "question": "...", "max_tokens": n (optional)}.
struct LegacyChatRequest {
  std::string question;  // never empty
  std::string image;     // empty: no image
  int max_tokens = 0;    // min(defaults.max_tokens, kLegacyDefaultMaxTokens) unless given
};

// Reads a parsed /chat body (an object); an error names the field, what it expected and what it got.
Result<LegacyChatRequest> parse_legacy_chat(const nlohmann::ordered_json& body, const GenerateOptions& defaults);

// The text of a form's max_tokens field as a token limit in [1, 2^20] into `out`.
Status parse_form_max_tokens(const std::string& text, int& out);

}  // namespace qvl::server
