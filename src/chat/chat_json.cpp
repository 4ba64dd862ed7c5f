// Converts chat messages and tools from JSON into ChatMessage structs, classifying content parts as the chat template does.
#include "chat/chat_json.h"

#include <string>
#include <utility>

namespace qvl {
namespace {

using json = nlohmann::ordered_json;

std::string type_name(const json& v) { return v.type_name(); }

Status bad(const std::string& where, const std::string& expected, const json& got) {
  return Status::Error(where + ": expected " + expected + ", got " + type_name(got) +
                       "; hint: messages follow the OpenAI chat format, e.g. "
                       "{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"hi\"}]}");
}

// Python truthiness, as `{%- if tool_call.function %}` tests a value.
bool python_truthy(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return false;
    case json::value_t::boolean: return v.get<bool>();
    case json::value_t::number_integer: return v.get<int64_t>() != 0;
    case json::value_t::number_unsigned: return v.get<uint64_t>() != 0;
    case json::value_t::number_float: return v.get<double>() != 0.0;
    case json::value_t::string:
    case json::value_t::array:
    case json::value_t::object: return !v.empty();
    default: return true;
  }
}

// `content.type == name` (a missing or non-string type compares unequal).
bool type_is(const json& part, const char* name) {
  auto it = part.find("type");
  return it != part.end() && it->is_string() && it->get_ref<const std::string&>() == name;
}

Result<ContentPart> part_from_json(const json& j, const std::string& where) {
  if (!j.is_object()) return bad(where, "an object", j);
  ContentPart part;
  // {%- if content.type == 'image' or 'image' in content or 'image_url' in content %}
  // {%- elif content.type == 'video' or 'video' in content %}
  // {%- elif 'text' in content %}
  if (type_is(j, "image") || j.contains("image") || j.contains("image_url")) {
    part.kind = ContentPart::Kind::kImage;
  } else if (type_is(j, "video") || j.contains("video")) {
    part.kind = ContentPart::Kind::kVideo;
  } else if (type_is(j, "video_url") || j.contains("video_url")) {
    // The OpenAI API's video part (vLLM's extension), which serving stacks turn into {"type": "video"}
    // before rendering; the template itself would not show it.
    part.kind = ContentPart::Kind::kVideo;
  } else if (type_is(j, "file")) {
    // The OpenAI API's document part, which the server expands into its pages before rendering; the template
    // itself would show only a "text" key of it.
    part.kind = ContentPart::Kind::kDocument;
  } else {
    part.kind = ContentPart::Kind::kText;
  }
  if (auto it = j.find("text"); it != j.end()) {
    if (!it->is_string()) return bad(where + ".text", "a string", *it);
    part.text = it->get<std::string>();
  }
  return part;
}

Result<ToolCall> tool_call_from_json(const json& j, const std::string& where) {
  if (!j.is_object()) return bad(where, "an object", j);
  // {%- if tool_call.function %}
  //     {%- set tool_call = tool_call.function %}
  // {%- endif %}
  const json* call = &j;
  std::string call_where = where;
  if (auto it = j.find("function"); it != j.end() && python_truthy(*it)) {
    if (!it->is_object()) return bad(where + ".function", "an object", *it);
    call = &*it;
    call_where = where + ".function";
  }
  ToolCall out;
  auto name = call->find("name");
  if (name == call->end()) return Status::Error(call_where + ".name: missing; hint: a tool call names its function");
  if (!name->is_string()) return bad(call_where + ".name", "a string", *name);
  out.name = name->get<std::string>();
  auto args = call->find("arguments");
  if (args == call->end()) {
    return Status::Error(call_where +
                         ".arguments: missing; hint: give the arguments as a JSON object or a JSON string");
  }
  out.arguments = *args;
  return out;
}

Result<ChatMessage> message_from_json(const json& j, const std::string& where) {
  if (!j.is_object()) return bad(where, "an object", j);
  ChatMessage m;
  auto role = j.find("role");
  if (role == j.end()) return Status::Error(where + ".role: missing; hint: one of system, user, assistant, tool");
  if (!role->is_string()) return bad(where + ".role", "a string", *role);
  m.role = role->get<std::string>();

  auto content = j.find("content");
  if (content == j.end() || content->is_null()) {
    m.content_is_string = false;  // renders as an empty list of parts
  } else if (content->is_string()) {
    m.content_is_string = true;
    m.content_string = content->get<std::string>();
  } else if (content->is_array()) {
    m.content_is_string = false;
    if (content->size() > kMaxChatParts) {
      return Status::Error(where + ".content: " + std::to_string(content->size()) + " parts, over the limit of " +
                           std::to_string(kMaxChatParts) + " parts in one message");
    }
    for (size_t i = 0; i < content->size(); ++i) {
      QVL_ASSIGN_OR_RETURN(ContentPart part,
                           part_from_json((*content)[i], where + ".content[" + std::to_string(i) + "]"));
      m.content_parts.push_back(std::move(part));
    }
  } else {
    return bad(where + ".content", "a string, an array of parts or null", *content);
  }

  // The Thinking template reads message.reasoning_content when it is a string (OpenAI clients send back what
  // the server returned as reasoning_content); any other value is as if there were none.
  if (auto r = j.find("reasoning_content"); r != j.end() && r->is_string()) {
    m.has_reasoning = true;
    m.reasoning_content = r->get<std::string>();
  }

  if (auto calls = j.find("tool_calls"); calls != j.end() && !calls->is_null()) {
    if (!calls->is_array()) return bad(where + ".tool_calls", "an array", *calls);
    if (calls->size() > kMaxChatParts) {
      return Status::Error(where + ".tool_calls: " + std::to_string(calls->size()) + " calls, over the limit of " +
                           std::to_string(kMaxChatParts));
    }
    for (size_t i = 0; i < calls->size(); ++i) {
      QVL_ASSIGN_OR_RETURN(ToolCall call,
                           tool_call_from_json((*calls)[i], where + ".tool_calls[" + std::to_string(i) + "]"));
      m.tool_calls.push_back(std::move(call));
    }
  }
  return m;
}

}  // namespace

Result<std::vector<ChatMessage>> chat_messages_from_json(const nlohmann::ordered_json& messages) {
  if (!messages.is_array()) return bad("messages", "an array", messages);
  if (messages.size() > kMaxChatMessages) {
    return Status::Error("messages: " + std::to_string(messages.size()) + " messages, over the limit of " +
                         std::to_string(kMaxChatMessages) + " in one conversation");
  }
  std::vector<ChatMessage> out;
  out.reserve(messages.size());
  for (size_t i = 0; i < messages.size(); ++i) {
    QVL_ASSIGN_OR_RETURN(ChatMessage m, message_from_json(messages[i], "messages[" + std::to_string(i) + "]"));
    out.push_back(std::move(m));
  }
  return out;
}

Result<std::vector<nlohmann::ordered_json>> chat_tools_from_json(const nlohmann::ordered_json& tools) {
  std::vector<nlohmann::ordered_json> out;
  if (tools.is_null()) return out;
  if (!tools.is_array()) {
    return Status::Error("tools: expected an array of tool definitions, got " + type_name(tools) +
                         "; hint: {\"type\": \"function\", \"function\": {\"name\": ..., \"parameters\": ...}}");
  }
  if (tools.size() > kMaxChatParts) {
    return Status::Error("tools: " + std::to_string(tools.size()) + " tools, over the limit of " +
                         std::to_string(kMaxChatParts));
  }
  for (size_t i = 0; i < tools.size(); ++i) {
    if (!tools[i].is_object()) {
      return Status::Error("tools[" + std::to_string(i) + "]: expected an object (a JSON schema), got " +
                           type_name(tools[i]) + "; hint: transformers takes tools as JSON schemas");
    }
    out.push_back(tools[i]);
  }
  return out;
}

}  // namespace qvl
