// Reads chat messages and tool definitions from their JSON form (as given to transformers'
// apply_chat_template / the OpenAI API) into the plain structs that render_chat takes.
#pragma once

#include <vector>

#include <nlohmann/json.hpp>

#include "chat/chat_format.h"
#include "util/status.h"

namespace qvl {

// Limits on what one request may hold, checked before anything is built from it.
inline constexpr size_t kMaxChatMessages = 1024;  // messages in a conversation
inline constexpr size_t kMaxChatParts = 1024;     // content parts of one message; tool calls; tools

// A JSON array of messages: {"role": ..., "content": string | [parts] | null, "tool_calls": [...]}.
// A part is an image when it has type "image" or a key "image" or "image_url", else a video when it has type
// "video" or a key "video", else text (the template's own tests, in its order); its "text" is kept whatever
// its kind, as the system and assistant branches of the template print it. A tool call is unwrapped from a
// non-empty "function" object when it has one, and needs a string "name" and an "arguments" value. A missing
// or null content is an empty list of parts (transformers renders a missing one so; null it rejects).
Result<std::vector<ChatMessage>> chat_messages_from_json(const nlohmann::ordered_json& messages);

// A JSON array of tool definitions (or null: none), kept as they are, key order included.
Result<std::vector<nlohmann::ordered_json>> chat_tools_from_json(const nlohmann::ordered_json& tools);

}  // namespace qvl
