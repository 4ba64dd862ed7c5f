// The tool-call blocks of tool_calls.h.
#include "chat/tool_calls.h"

#include <optional>

namespace qvl {

namespace {

constexpr std::string_view kToolCallOpen = "<tool_call>", kToolCallClose = "</tool_call>";

bool is_json_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_json_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_json_space(s.back())) s.remove_suffix(1);
  return s;
}

// The inside of a block: {"name": string, "arguments": object (or a JSON string holding one)}.
std::optional<ParsedToolCall> read_call(std::string_view inside) {
  const auto j = nlohmann::ordered_json::parse(trim(inside), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  const auto name = j.find("name");
  if (name == j.end() || !name->is_string() || name->get<std::string>().empty()) return std::nullopt;
  ParsedToolCall call;
  call.name = name->get<std::string>();
  call.arguments = nlohmann::ordered_json::object();
  if (const auto args = j.find("arguments"); args != j.end() && !args->is_null()) {
    if (args->is_object()) {
      call.arguments = *args;
    } else if (args->is_string()) {
      const auto inner = nlohmann::ordered_json::parse(args->get<std::string>(), nullptr, false);
      if (inner.is_discarded() || !inner.is_object()) return std::nullopt;
      call.arguments = inner;
    } else {
      return std::nullopt;
    }
  }
  return call;
}

// The length of the longest suffix of s that is a proper prefix of tag (text that may yet become the tag).
size_t partial_tag(std::string_view s, std::string_view tag) {
  for (size_t n = std::min(s.size(), tag.size() - 1); n > 0; --n)
    if (s.substr(s.size() - n) == tag.substr(0, n)) return n;
  return 0;
}

}  // namespace

ParsedAnswer parse_tool_calls(std::string_view text) {
  ToolCallStream s;
  ParsedAnswer out;
  out.content = s.push(text);
  out.content += s.finish();
  out.calls = s.take_calls();
  if (!out.calls.empty()) out.content = std::string(trim(out.content));
  return out;
}

std::string ToolCallStream::push(std::string_view piece) {
  held_.append(piece);
  std::string out;
  for (;;) {
    if (!in_block_) {
      const size_t open = held_.find(kToolCallOpen);
      if (open == std::string::npos) {
        const size_t keep = partial_tag(held_, kToolCallOpen);
        out += held_.substr(0, held_.size() - keep);
        held_.erase(0, held_.size() - keep);
        return out;
      }
      out += held_.substr(0, open);
      held_.erase(0, open);
      in_block_ = true;
    }
    const size_t close = held_.find(kToolCallClose);
    if (close == std::string::npos) return out;
    const std::string_view inside = std::string_view(held_).substr(kToolCallOpen.size(), close - kToolCallOpen.size());
    if (auto call = read_call(inside)) {
      ready_.push_back(std::move(*call));
      ++calls_seen_;
    } else {
      out += held_.substr(0, close + kToolCallClose.size());  // not a call: it stays text
    }
    held_.erase(0, close + kToolCallClose.size());
    in_block_ = false;
  }
}

std::string ToolCallStream::finish() {
  std::string rest = std::move(held_);
  held_.clear();
  in_block_ = false;
  return rest;
}

std::vector<ParsedToolCall> ToolCallStream::take_calls() {
  std::vector<ParsedToolCall> c = std::move(ready_);
  ready_.clear();
  return c;
}

}  // namespace qvl
