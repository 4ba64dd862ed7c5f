// Fuzz target: chat-template rendering from JSON — bytes -> JSON {"messages": [...], "tools": [...],
// "add_generation_prompt": bool, "add_vision_id": bool} (the cases of tests/data/chat_golden.json) ->
// chat_messages_from_json / chat_tools_from_json -> render_chat_with_spans. The rendering must not depend on
// whether spans are asked for, and the user spans must be sorted, disjoint and inside the prompt.
#include <cstdint>
#include <string_view>

#include "fuzz_util.h"
#include "chat/chat_format.h"
#include "chat/chat_json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto j = qvl::fuzz::parse_json_bounded(std::string_view(reinterpret_cast<const char*>(data), size));
  if (j.is_discarded()) return 0;
  // A bare array is the messages alone.
  const bool is_case = j.is_object();
  const nlohmann::ordered_json* messages_json = &j;
  if (is_case) {
    auto it = j.find("messages");
    if (it == j.end()) return 0;
    messages_json = &*it;
  }
  auto messages = qvl::chat_messages_from_json(*messages_json);
  if (!messages.ok()) {
    QVL_CHECK(!messages.status().message().empty());
    return 0;
  }
  qvl::ChatOptions options;
  if (is_case) {
    if (auto it = j.find("tools"); it != j.end()) {
      auto tools = qvl::chat_tools_from_json(*it);
      if (!tools.ok()) return 0;
      options.tools = std::move(tools).value();
    }
    if (auto it = j.find("add_generation_prompt"); it != j.end() && it->is_boolean())
      options.add_generation_prompt = it->get<bool>();
    if (auto it = j.find("add_vision_id"); it != j.end() && it->is_boolean()) options.add_vision_id = it->get<bool>();
  }
  const qvl::RenderedChat rendered = qvl::render_chat_with_spans(*messages, options);
  QVL_CHECK(rendered.text == qvl::render_chat(*messages, options));
  size_t end = 0;
  for (const qvl::TextSpan& s : rendered.user_spans) {
    QVL_CHECK(s.begin >= end && s.begin <= s.end && s.end <= rendered.text.size());
    end = s.end;
  }
  return 0;
}
