// Tool calls: the <tool_call> blocks of an answer split from its prose (whole and streamed at every split
// point alike), a required or named call forced by the grammar on the tiny random-weight model (the call
// parses and its arguments follow the function's parameters), and the OpenAI and Ollama shapes through the
// server: tool_calls (and their stream deltas), finish_reason "tool_calls", then the tool's result sent back
// as a tool message and answered.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "engine/generate.h"
#include "test_server_fixture.h"
#include "chat/tool_calls.h"

namespace qvl {
namespace {

using json = nlohmann::ordered_json;
using test::tiny_model_dir;

TEST(ToolCalls, SplitsCallsFromProse) {
  const std::string text =
      "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 2}}\n</tool_call>\n"
      "<tool_call>\n{\"name\": \"clock\", \"arguments\": \"{\\\"tz\\\": \\\"UTC\\\"}\"}\n</tool_call>";
  ParsedAnswer p = parse_tool_calls(text);
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.content, "Let me look.");
  EXPECT_EQ(p.calls[0].name, "get_weather");
  EXPECT_EQ(p.calls[0].arguments, json::parse(R"({"city": "Paris", "days": 2})"));
  EXPECT_EQ(p.calls[1].name, "clock");
  EXPECT_EQ(p.calls[1].arguments, json::parse(R"({"tz": "UTC"})")) << "arguments given as a JSON string";

  // Not calls: they stay text, byte for byte.
  for (const std::string t : {std::string("no calls here"), std::string("<tool_call>\nnot json\n</tool_call>"),
                              std::string("<tool_call>{\"arguments\": {}}</tool_call>"), std::string("a <tool_call> never closed"),
                              std::string("<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>"), std::string("<tool_")}) {
    ParsedAnswer q = parse_tool_calls(t);
    EXPECT_TRUE(q.calls.empty()) << t;
    EXPECT_EQ(q.content, t);
  }

  // Streamed in two pieces at every split point: the same calls, and the prose in order.
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    ToolCallStream s;
    std::string prose = s.push(text.substr(0, cut));
    std::vector<ParsedToolCall> calls = s.take_calls();
    prose += s.push(text.substr(cut));
    for (auto& c : s.take_calls()) calls.push_back(std::move(c));
    prose += s.finish();
    ASSERT_EQ(calls.size(), 2u) << cut;
    EXPECT_EQ(calls[1].arguments, p.calls[1].arguments) << cut;
    EXPECT_EQ(prose, "Let me look.\n\n") << cut;
  }
}

json weather_tool() {
  return json::parse(R"({"type": "function", "function": {"name": "get_weather", "description": "The weather in a city.",
      "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 10},
                     "unit": {"enum": ["celsius", "fahrenheit"]}, "days": {"type": "integer"}},
                     "required": ["city", "unit"], "additionalProperties": false}}})");
}
json clock_tool() {
  return json::parse(R"({"type": "function", "function": {"name": "clock", "parameters": {"type": "object", "properties": {}, "additionalProperties": false}}})");
}

// The name picks the arguments' schema, and must come first.
TEST(ToolCalls, TheNamePicksTheArgumentsSchema) {
  const json w = weather_tool()["function"]["parameters"], c = clock_tool()["function"]["parameters"];
  auto g = JsonGrammar::tool_call({{"get_weather", &w}, {"clock", &c}, {"free", nullptr}});
  ASSERT_TRUE(g.ok()) << g.status().message();
  auto accepts = [&](const std::string& t) {
    JsonAcceptor a(*g);
    return a.feed(t) && a.accepting();
  };
  EXPECT_TRUE(accepts(R"({"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}})"));
  EXPECT_TRUE(accepts(R"({"name": "clock", "arguments": {}})"));
  EXPECT_TRUE(accepts(R"({"name": "free", "arguments": {"anything": [1, {"x": null}]}})"));
  EXPECT_FALSE(accepts(R"({"name": "clock", "arguments": {"city": "Paris"}})"));
  EXPECT_FALSE(accepts(R"({"name": "get_weather", "arguments": {"city": "Paris"}})"));  // unit is required
  EXPECT_FALSE(accepts(R"({"arguments": {}, "name": "clock"})"));
  EXPECT_FALSE(accepts(R"({"name": "get_time", "arguments": {}})"));
}

// The random-weight model never calls a tool by itself; forced, it writes a call that parses, of the named
// function, with arguments that follow the parameters.
TEST(ToolCalls, RequiredCallIsForcedAndParses) {
  auto model = Model::load(tiny_model_dir());
  ASSERT_TRUE(model.ok()) << model.status().message();
  ThreadPool pool(1);
  for (const std::string name : {"get_weather", "clock", ""}) {
    for (uint64_t seed : {1u, 2u}) {
      GenerateOptions o;
      o.max_tokens = 300;
      o.context = 1024;
      o.sampling.temperature = seed == 1 ? 0.0f : 1.0f;
      o.sampling.seed = seed;
      o.chat.tools = {weather_tool(), clock_tool()};
      ASSERT_TRUE(require_tool_call(o, name).ok());
      ChatMessage m;
      m.role = "user";
      m.content_string = "What is the weather in Paris?";
      auto r = generate(**model, pool, {m}, {}, o);
      ASSERT_TRUE(r.ok());
      SCOPED_TRACE(r->text);
      EXPECT_EQ(r->finish, FinishReason::kStop);
      ParsedAnswer p = parse_tool_calls(r->text);
      ASSERT_EQ(p.calls.size(), 1u);
      EXPECT_TRUE(p.content.empty());
      if (!name.empty()) EXPECT_EQ(p.calls[0].name, name);
      if (p.calls[0].name == "get_weather") {
        const json& a = p.calls[0].arguments;
        ASSERT_TRUE(a.contains("city") && a["city"].is_string());
        EXPECT_TRUE(a["unit"] == "celsius" || a["unit"] == "fahrenheit");
        if (a.contains("days")) EXPECT_TRUE(a["days"].is_number_integer());
      } else {
        EXPECT_EQ(p.calls[0].name, "clock");
      }
    }
  }
  GenerateOptions o;
  o.chat.tools = {weather_tool()};
  const Status unknown = require_tool_call(o, "send_email");
  EXPECT_FALSE(unknown.ok());
  EXPECT_NE(unknown.message().find("get_weather"), std::string::npos) << unknown.message();
  GenerateOptions none;
  EXPECT_FALSE(require_tool_call(none, "").ok());
}

class ToolApiTest : public test::ServerTest {};

TEST_F(ToolApiTest, OpenAIAndOllamaToolCallLoop) {
  start();
  const json tools = json::array({weather_tool(), clock_tool()});
  const json user = json{{"role", "user"}, {"content", "Weather in Paris?"}};
  const json named = json{{"type", "function"}, {"function", json{{"name", "get_weather"}}}};
  test::Reply r = post("/v1/chat/completions", json{{"model", "tiny"}, {"max_tokens", 200}, {"temperature", 0},
                                                   {"messages", json::array({user})}, {"tools", tools}, {"tool_choice", named}});
  ASSERT_EQ(r.status, 200) << r.body;
  const json choice = r.json_body()["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  EXPECT_TRUE(choice["message"]["content"].is_null());
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u);
  const json call = choice["message"]["tool_calls"][0];
  EXPECT_EQ(call["type"], "function");
  EXPECT_EQ(call["function"]["name"], "get_weather");
  EXPECT_EQ(call["id"].get<std::string>().rfind("call_", 0), 0u);
  const json args = json::parse(call["function"]["arguments"].get<std::string>());
  EXPECT_TRUE(args.contains("city") && args.contains("unit"));

  // Streamed: no content, one tool_calls delta with index 0, then finish_reason tool_calls.
  json seen_call;
  std::string finish;
  std::string buf;
  test::Reply st = post_stream("/v1/chat/completions",
                               json{{"model", "tiny"}, {"max_tokens", 200}, {"temperature", 0}, {"stream", true},
                                    {"messages", json::array({user})}, {"tools", tools}, {"tool_choice", "required"}},
                               [&](const std::string& d) {
                                 buf += d;
                                 return true;
                               });
  ASSERT_EQ(st.status, 200);
  for (size_t at = 0; (at = buf.find("data: {", at)) != std::string::npos; ++at) {
    const json c = json::parse(buf.substr(at + 6, buf.find("\n\n", at) - at - 6));
    if (c["choices"].empty()) continue;
    const json& d = c["choices"][0]["delta"];
    if (d.contains("content")) EXPECT_EQ(d["content"], "");  // only the opening role chunk's empty content
    if (d.contains("tool_calls")) seen_call = d["tool_calls"][0];
    if (!c["choices"][0]["finish_reason"].is_null()) finish = c["choices"][0]["finish_reason"];
  }
  EXPECT_EQ(seen_call["index"], 0);
  EXPECT_TRUE(seen_call["function"]["name"] == "get_weather" || seen_call["function"]["name"] == "clock");
  EXPECT_EQ(finish, "tool_calls");

  // The result goes back as a tool message after the assistant's call; the answer is text.
  const json assistant = json{{"role", "assistant"}, {"content", nullptr}, {"tool_calls", json::array({call})}};
  const json result = json{{"role", "tool"}, {"tool_call_id", call["id"]}, {"content", R"({"temp": 21})"}};
  test::Reply after = post("/v1/chat/completions", json{{"model", "tiny"}, {"max_tokens", 8}, {"temperature", 0},
                                                        {"messages", json::array({user, assistant, result})}, {"tools", tools},
                                                        {"tool_choice", "none"}});
  ASSERT_EQ(after.status, 200) << after.body;
  EXPECT_TRUE(after.json_body()["choices"][0]["message"]["content"].is_string());
  EXPECT_FALSE(after.json_body()["choices"][0]["message"].contains("tool_calls"));

  // Ollama's shape (tool_choice is qvl's extension there): arguments as an object.
  test::Reply o = post("/api/chat", json{{"model", "tiny"}, {"stream", false}, {"messages", json::array({user})},
                                        {"tools", tools}, {"tool_choice", named}, {"options", json{{"num_predict", 200}, {"temperature", 0}}}});
  ASSERT_EQ(o.status, 200) << o.body;
  const json oc = o.json_body()["message"]["tool_calls"];
  ASSERT_EQ(oc.size(), 1u) << o.body;
  EXPECT_EQ(oc[0]["function"]["name"], "get_weather");
  EXPECT_TRUE(oc[0]["function"]["arguments"].is_object());
  const json back = json{{"role", "assistant"}, {"content", ""}, {"tool_calls", oc}};
  test::Reply o2 = post("/api/chat", json{{"model", "tiny"}, {"stream", false}, {"tools", tools},
                                         {"messages", json::array({user, back, json{{"role", "tool"}, {"content", "21 C"}}})},
                                         {"options", json{{"num_predict", 5}}}});
  ASSERT_EQ(o2.status, 200) << o2.body;

  // Refusals name what is wrong.
  test::Reply bad = post("/v1/chat/completions", json{{"model", "tiny"}, {"messages", json::array({user})}, {"tools", tools},
                                                     {"tool_choice", json{{"type", "function"}, {"function", json{{"name", "nope"}}}}}});
  EXPECT_EQ(bad.status, 400);
  EXPECT_NE(bad.body.find("nope"), std::string::npos) << bad.body;
  test::Reply both = post("/v1/chat/completions", json{{"model", "tiny"}, {"messages", json::array({user})}, {"tools", tools},
                                                      {"tool_choice", "required"}, {"response_format", json{{"type", "json_object"}}}});
  EXPECT_EQ(both.status, 400) << both.body;
}

}  // namespace
}  // namespace qvl
