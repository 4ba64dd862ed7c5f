// The OpenAI chat-completion request body (POST /v1/chat/completions) read into a plain request struct.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/document_input.h"
#include "server/image_input.h"

#include "engine/generate.h"
#include "chat/chat_format.h"
#include "util/status.h"

namespace qvl::server {

// Choices one request may ask for (OpenAI's n; for /v1/completions n times the prompts): each takes a slot.
inline constexpr int kMaxChoices = 16;

struct ChatCompletionRequest {
  std::string model;
  std::vector<ChatMessage> messages;
  std::vector<std::pair<std::string, std::string>> images;  // (reference, where), in prompt order
  std::vector<int> pages;  // [images.size()]: the page of a multi-page file (TIFF) each image is read from
  std::vector<VideoRef> videos;  // video parts in prompt order, with their fps and pixel bounds
  std::vector<DocumentRef> documents;  // file parts (PDFs) of user and tool messages, in prompt order
  GenerateOptions options;
  int n = 1;  // choices, 1..kMaxChoices: choice i samples with seed + i
  bool stream = false;
  bool include_usage = false;
  bool logprobs = false;  // options.logprobs >= 0: the answer's tokens' log-probabilities are returned
  bool tool_calls = false;  // tools are offered (tool_choice other than none): answers are parsed for calls
  // chat_template_kwargs.enable_thinking, where given: false hides a Thinking model's reasoning; true asks
  // for a model that thinks (refused with an Instruct model).
  std::optional<bool> think;
  std::vector<std::string> warnings;  // what was accepted but ignored (images the template drops), for the response
};

// Reads a parsed body (an object) over `defaults`; an error names the field, what it expected and what it got.
// Images are only collected as references here: loading them is the handler's.
Result<ChatCompletionRequest> parse_chat_completion(const nlohmann::ordered_json& body,
                                                    const GenerateOptions& defaults);

}  // namespace qvl::server
