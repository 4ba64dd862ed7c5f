// The OpenAI legacy completion request body (POST /v1/completions) read into a plain request struct: a raw
// prompt (text or token ids; no chat format, no images), sampling, stop, echo and the legacy logprobs.
#pragma once

#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/generate.h"
#include "util/status.h"

namespace qvl::server {

inline constexpr size_t kMaxCompletionPrompts = 16;  // prompts in one request (prompt i's choices: i*n .. i*n+n-1)

struct CompletionRequest {
  std::string model;
  // Each prompt: text (tokenized with control tokens such as <|im_start|> recognised) or token ids.
  std::vector<std::variant<std::string, std::vector<int32_t>>> prompts;
  GenerateOptions options;  // max_tokens defaults to 16, as OpenAI's
  int n = 1;  // choices per prompt (prompts × n at most kMaxChoices); best_of may only equal it
  bool stream = false;
  bool include_usage = false;
  bool echo = false;        // the prompt is returned before the answer (with its log-probabilities when asked)
  int logprobs = -1;        // "logprobs": N alternatives per token (0..20); -1: none
};

// Reads a parsed body (an object) over `defaults`; an error names the field, what it expected and what it got.
Result<CompletionRequest> parse_completion(const nlohmann::ordered_json& body, const GenerateOptions& defaults);

}  // namespace qvl::server
