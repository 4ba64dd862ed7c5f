// The Ollama request bodies (POST /api/chat and /api/generate) read into one plain request struct.
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

// The request fields /api/chat and /api/generate share.
struct OllamaRequest {
  std::string model;
  std::vector<ChatMessage> messages;
  std::vector<std::pair<std::string, std::string>> images;  // (base64, where), in prompt order
  // Entries of "images" whose bytes are a video container (MP4, WebM, ...): Ollama's API has no video field,
  // so a clip sent there is taken as a video part, in prompt order.
  std::vector<VideoRef> videos;
  // Entries whose bytes are a PDF: every page of the document, as the OpenAI API's file part (server/document_input.h).
  std::vector<DocumentRef> documents;
  GenerateOptions options;
  bool stream = true;  // Ollama streams unless told not to
  bool logprobs = false;  // "logprobs": true (with "top_logprobs"): each piece carries its tokens' values
  bool tool_calls = false;  // /api/chat with tools: answers are read for <tool_call> blocks
  // "think" where given (true, false, or a level "high"/"medium"/"low", which is true): false hides a
  // Thinking model's reasoning; true asks for a model that thinks (refused with an Instruct model).
  std::optional<bool> think;
  std::vector<std::string> warnings;  // what was accepted but ignored (images the template drops), for the response
};

// Reads a parsed /api/chat body (an object) over `defaults`; `empty` is set for a request without messages
// (Ollama's "load the model" call). An error names the field, what it expected and what it got.
Result<OllamaRequest> parse_ollama_chat(const nlohmann::ordered_json& body, const GenerateOptions& defaults,
                                        bool& empty);

// Reads a parsed /api/generate body: an optional system prompt and one user turn of images then the prompt;
// `empty` is set when it has neither prompt nor images.
Result<OllamaRequest> parse_ollama_generate(const nlohmann::ordered_json& body, const GenerateOptions& defaults,
                                            bool& empty);

// An Ollama model name for /api/pull as a hub spec: "hf.co/ORG/NAME[:TAG]" (or "huggingface.co/...") ->
// "ORG/NAME[:TAG]" (the TAG "latest": none; another TAG picks a GGUF repository's quantization),
// "modelscope.cn/ORG/NAME[:TAG]" -> "modelscope:ORG/NAME[:TAG]", "ORG/NAME[:TAG]" as it is. Ollama's library
// names ("qwen3-vl:2b") are refused: qvl pulls from the hubs, not from Ollama's registry.
Result<std::string> ollama_pull_spec(const std::string& name);

}  // namespace qvl::server
