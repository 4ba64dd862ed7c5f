// require_tool_call (generate.h): the grammar of one Qwen3 tool call, for tool_choice "required" or a named
// function.
#include <nlohmann/json.hpp>

#include "engine/generate.h"

namespace qvl {

namespace {

using json = nlohmann::ordered_json;

// A tool definition's name and parameters: OpenAI's {"type": "function", "function": {...}} or the bare
// function object.
const json* function_of(const json& tool) {
  if (const auto f = tool.find("function"); f != tool.end() && f->is_object()) return &*f;
  return tool.is_object() ? &tool : nullptr;
}

}  // namespace

Status require_tool_call(GenerateOptions& options, const std::string& name) {
  std::vector<std::string> names;
  bool found = false;
  for (const json& tool : options.chat.tools) {
    const json* f = function_of(tool);
    if (!f) continue;
    const auto n = f->find("name");
    if (n == f->end() || !n->is_string()) continue;
    names.push_back(n->get<std::string>());
    found = found || n->get<std::string>() == name;
  }
  if (names.empty()) return Status::Error("a tool call is required but no tools are given");
  if (!name.empty() && !found) {
    std::string known;
    for (const std::string& n : names) known += (known.empty() ? "'" : ", '") + n + "'";
    return Status::Error("the function '" + name + "' is not among the tools (" + known + ")");
  }
  // {"name": <one of the names>, "arguments": <its parameters' schema, or any object>}
  std::vector<std::pair<std::string, const json*>> functions;
  for (const json& tool : options.chat.tools) {
    const json* f = function_of(tool);
    if (!f || !f->contains("name") || !(*f)["name"].is_string()) continue;
    if (!name.empty() && (*f)["name"] != name) continue;
    const auto p = f->find("parameters");
    functions.emplace_back((*f)["name"].get<std::string>(), p != f->end() && p->is_object() ? &*p : nullptr);
  }
  auto g = JsonGrammar::tool_call(functions);
  if (!g.ok()) return g.status();
  options.json = *g;
  options.json_prefix = "<tool_call>\n";
  options.json_suffix = "\n</tool_call>";
  return Status::Ok();
}

}  // namespace qvl
