// The tool calls in a Qwen3 answer: the chat template tells the model to answer a call as
// <tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>; this finds such
// blocks in the generated text (whole, or streamed piece by piece) and splits them from the prose. A block
// whose inside is not that JSON is left in the text, as Qwen's and vLLM's parsers do.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace qvl {

struct ParsedToolCall {
  std::string name;
  nlohmann::ordered_json arguments;  // an object
};

struct ParsedAnswer {
  std::string content;  // the text outside the calls, trimmed of the whitespace around them
  std::vector<ParsedToolCall> calls;
};

ParsedAnswer parse_tool_calls(std::string_view text);

// The streaming form: push() returns the text that is surely prose (holding back what may be the start of
// a "<tool_call>" tag, and a block until its "</tool_call>"); complete calls are collected for take_calls().
// finish() returns what was held back at the end (an unclosed block stays text).
class ToolCallStream {
 public:
  std::string push(std::string_view piece);
  std::string finish();
  std::vector<ParsedToolCall> take_calls();
  bool any_call() const { return calls_seen_ > 0; }

 private:
  std::string held_;    // text not yet given out: a possible tag start, or an open block
  bool in_block_ = false;
  std::vector<ParsedToolCall> ready_;
  int calls_seen_ = 0;
};

}  // namespace qvl
