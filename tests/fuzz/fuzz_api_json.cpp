// Fuzz target: the JSON request bodies of every API — bytes -> parse_json_text (the JSON limits, then the
// parser, as a request body goes) -> parse_chat_completion (OpenAI), parse_ollama_chat, parse_ollama_generate
// parse_legacy_chat (/chat), parse_completion (/v1/completions) and parse_responses (/v1/responses, with no
// history and with the body's own "messages" as the stored conversation) over default GenerateOptions, and
// the body's "model" as /api/pull's name (ollama_pull_spec). Nothing may throw out; a refusal says why; an
// accepted request has one image reference per image part, known roles and sampling that validates.
#include <cstdint>
#include <string_view>

#include "server/api.h"
#include "server/completion_request.h"
#include "server/responses_request.h"
#include "server/legacy_request.h"
#include "server/ollama_request.h"
#include "server/openai_request.h"
#include "util/status.h"
#include "fuzz_util.h"

namespace {

using qvl::fuzz::refused;

// The image parts the chat template shows (those of user and tool messages; it drops the others, and so
// does the request parser, with a warning).
size_t image_parts(const std::vector<qvl::ChatMessage>& messages) {
  size_t n = 0;
  for (const qvl::ChatMessage& m : messages) {
    QVL_CHECK(m.role == "system" || m.role == "user" || m.role == "assistant" || m.role == "tool");
    if (m.role != "user" && m.role != "tool") continue;
    for (const qvl::ContentPart& p : m.content_parts) n += p.kind == qvl::ContentPart::Kind::kImage;
  }
  return n;
}

// What every accepted request must hold before it reaches the scheduler.
void check_options(const qvl::GenerateOptions& o) {
  QVL_CHECK(o.max_tokens >= 0 && o.max_tokens <= (1 << 20));
  QVL_CHECK(o.sampling.validate().ok());
  QVL_CHECK(o.sampling.top_k >= 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace qvl::server;
  const auto body = parse_json_text(std::string_view(reinterpret_cast<const char*>(data), size));
  if (refused(body)) return 0;
  QVL_CHECK(body->is_object());
  const qvl::GenerateOptions defaults;

  if (auto r = parse_chat_completion(*body, defaults); !refused(r)) {
    QVL_CHECK(!r->messages.empty());
    QVL_CHECK(r->n >= 1 && r->n <= kMaxChoices);
    QVL_CHECK(image_parts(r->messages) == r->images.size());
    for (const auto& [ref, where] : r->images) QVL_CHECK(!where.empty());
    check_options(r->options);
  }
  bool empty = false;
  if (auto r = parse_ollama_chat(*body, defaults, empty); !refused(r)) {
    QVL_CHECK(empty == r->messages.empty());
    if (!empty) QVL_CHECK(image_parts(r->messages) == r->images.size());
    check_options(r->options);
  }
  if (auto r = parse_ollama_generate(*body, defaults, empty); !refused(r)) {
    if (!empty) {
      QVL_CHECK(!r->messages.empty() && r->messages.back().role == "user");
      QVL_CHECK(image_parts(r->messages) == r->images.size());
    }
    check_options(r->options);
  }
  if (auto r = parse_completion(*body, defaults); !refused(r)) {
    QVL_CHECK(!r->prompts.empty() && r->prompts.size() <= kMaxCompletionPrompts);
    QVL_CHECK(r->options.raw_prompt.empty() && r->logprobs >= -1 && r->logprobs <= qvl::kMaxTopLogprobs);
    QVL_CHECK(r->n >= 1 && static_cast<size_t>(r->n) * r->prompts.size() <= static_cast<size_t>(kMaxChoices));
    check_options(r->options);
  }
  const json history = body->contains("messages") && (*body)["messages"].is_array() ? (*body)["messages"] : json::array();
  for (const json* h : {&history, static_cast<const json*>(nullptr)}) {
    if (auto r = parse_responses(*body, h ? *h : json::array(), defaults); !refused(r)) {
      QVL_CHECK(!r->chat.messages.empty() && r->input.is_array() && !r->input.empty());
      QVL_CHECK(image_parts(r->chat.messages) == r->chat.images.size());
      for (const auto& [ref, where] : r->chat.images) QVL_CHECK(!where.empty() && where.find("messages[") == std::string::npos);
      QVL_CHECK(r->chat.options.logprobs >= -1 && r->chat.options.logprobs <= qvl::kMaxTopLogprobs);
      check_options(r->chat.options);
    }
  }
  // /api/pull's model name as a hub spec: ORG/NAME with an optional source prefix and tag, nothing else.
  if (auto m = body->find("model"); m != body->end() && m->is_string()) {
    if (auto spec = ollama_pull_spec(m->get<std::string>()); !refused(spec)) {
      QVL_CHECK(!spec->empty() && spec->find('/') != std::string::npos && spec->find("..") == std::string::npos);
      QVL_CHECK(spec->find_first_of(" \n\t\\?#") == std::string::npos);
    }
  }
  if (auto r = parse_legacy_chat(*body, defaults); !refused(r)) {
    QVL_CHECK(!r->question.empty());
    QVL_CHECK(r->max_tokens >= 1 && r->max_tokens <= (1 << 20));
  }
  return 0;
}
