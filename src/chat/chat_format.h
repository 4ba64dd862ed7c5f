// The Qwen3-VL chat templates rendered natively: messages in, the prompt text out, identical to
// transformers' apply_chat_template with the checkpoint's chat_template.json. Two templates: the Instruct
// models' and the Thinking models' (reasoning in <think> blocks; the generation prompt opens one).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer.h"

namespace qvl {

// One part of a message's content.
struct ContentPart {
  // kDocument: a document (an OpenAI `file` part) that the server or the command line replaces with its pages
  // (engine/documents.h) before rendering; rendered as nothing, as the template renders a part it does not know.
  enum class Kind { kText, kImage, kVideo, kDocument };
  Kind kind = Kind::kText;
  std::string text;  // for kText
};

// A tool call made by the assistant. `arguments` is either a JSON object (rendered with Python's
// json.dumps formatting, key order kept) or a JSON string (rendered verbatim).
struct ToolCall {
  std::string name;
  nlohmann::ordered_json arguments;
};

struct ChatMessage {
  std::string role;  // "system", "user", "assistant" or "tool"
  // The template distinguishes `content` as a plain string from a list of parts.
  bool content_is_string = true;
  std::string content_string;
  std::vector<ContentPart> content_parts;
  std::vector<ToolCall> tool_calls;
  // The Thinking template's `message.reasoning_content` (OpenAI's reasoning_content, Ollama's thinking): set
  // when the message carries one as a string; else the template takes it from a <think> block in content.
  bool has_reasoning = false;
  std::string reasoning_content;
};

// Which template a checkpoint has, from its chat template text (chat_template.json's "chat_template", a
// chat_template.jinja, or tokenizer_config.json's): the Thinking template's generation prompt opens a
// <think> block; anything else is taken for the Instruct template.
enum class ChatTemplateKind { kInstruct, kThinking };
ChatTemplateKind chat_template_kind(std::string_view template_text);
const char* chat_template_kind_name(ChatTemplateKind kind);  // "instruct", "thinking"

// The one-turn user message of the command line and the simple endpoints: `n_images` image parts, then
// the text.
ChatMessage user_message(size_t n_images, std::string text);
// The same with `n_videos` video parts after the images.
ChatMessage user_message(size_t n_images, size_t n_videos, std::string text);

struct ChatOptions {
  bool add_generation_prompt = true;
  bool add_vision_id = false;                  // "Picture N: " before each image
  std::vector<nlohmann::ordered_json> tools;  // tool definitions, rendered with tojson
  ChatTemplateKind kind = ChatTemplateKind::kInstruct;  // the model's template
};

// The rendered prompt and the spans of it that came from the caller (message text, tool names and
// arguments, tool definitions). Tokenizer::encode_prompt never matches control tokens inside them.
struct RenderedChat {
  std::string text;
  std::vector<TextSpan> user_spans;
};
RenderedChat render_chat_with_spans(const std::vector<ChatMessage>& messages, const ChatOptions& options = {});

// Renders the conversation. The output still holds one <|image_pad|> per image; the processor expands it.
std::string render_chat(const std::vector<ChatMessage>& messages, const ChatOptions& options = {});

// Python's json.dumps(value, ensure_ascii=False) formatting (", " and ": " separators, key order kept),
// as the template's `tojson` filter writes it.
std::string python_json_dumps(const nlohmann::ordered_json& value);

}  // namespace qvl
