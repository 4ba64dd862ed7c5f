// A Thinking model served: the prompt opens a <think> block; the reasoning comes back apart from the answer
// (OpenAI reasoning_content, Ollama thinking), streamed apart too; think / enable_thinking switch it off, and
// are refused with a model that does not think; a constrained answer closes the block first.
#include "test_server_fixture.h"

namespace qvl {
namespace {

using test::json;
using test::Reply;

class ThinkingApi : public test::ServerTest {
 protected:
  void start_thinking() {
    const std::string dir = test::tiny_thinking_model_dir();
    start(test::test_options(), [dir] { return Model::load(dir); });
  }
  static json ask(const std::string& text, int max_tokens = 12) {
    return json{{"messages", json::array({json{{"role", "user"}, {"content", text}}})},
                {"max_tokens", max_tokens}, {"temperature", 0}};
  }
};

TEST_F(ThinkingApi, ReasoningComesBackApartFromTheAnswer) {
  start_thinking();
  // The model is described as a Thinking model.
  const Reply health = get("/health");
  ASSERT_EQ(health.status, 200) << health.body;
  EXPECT_EQ(health.json_body()["model_info"]["chat_template"], "thinking") << health.body;
  EXPECT_GT(health.json_body()["model_info"]["parameters"].get<int64_t>(), 0);
  const Reply show = post("/api/show", json{{"model", "tiny"}});
  EXPECT_NE(show.json_body()["capabilities"].dump().find("thinking"), std::string::npos) << show.body;

  // The random-weight model never writes </think> by itself: its whole answer is reasoning.
  const Reply a = post("/v1/chat/completions", ask("What is in the picture?"));
  ASSERT_EQ(a.status, 200) << a.body;
  const json m = a.json_body()["choices"][0]["message"];
  ASSERT_TRUE(m.contains("reasoning_content")) << a.body;
  EXPECT_FALSE(m["reasoning_content"].get<std::string>().empty()) << a.body;
  EXPECT_EQ(m["content"], "") << a.body;
  // All of it reasoning: usage counts those tokens, as OpenAI's reasoning models do (12 generated; the reasoning
  // re-encoded can differ by a token where the text splits differently).
  const int reasoning_count = a.json_body()["usage"]["completion_tokens_details"]["reasoning_tokens"];
  EXPECT_GE(reasoning_count, 10) << a.body;
  EXPECT_LE(reasoning_count, a.json_body()["usage"]["completion_tokens"].get<int>()) << a.body;
  // The prompt ends with "<think>\n": two tokens more than the Instruct template's.
  const int thinking_prompt = a.json_body()["usage"]["prompt_tokens"];

  // Streamed: the same reasoning, in reasoning_content deltas only.
  json body = ask("What is in the picture?");
  body["stream"] = true;
  const Reply s = post("/v1/chat/completions", body);
  ASSERT_EQ(s.status, 200) << s.body;
  std::string reasoning, content;
  for (const std::string& ev : sse_events(s.body)) {
    if (ev == "[DONE]") continue;
    const json j = json::parse(ev);
    if (!j.contains("choices") || j["choices"].empty()) continue;
    const json& d = j["choices"][0]["delta"];
    if (d.contains("reasoning_content")) reasoning += d["reasoning_content"].get<std::string>();
    if (d.contains("content")) content += d["content"].get<std::string>();
  }
  EXPECT_EQ(reasoning, m["reasoning_content"].get<std::string>());
  EXPECT_EQ(content, "");

  // Switched off: no reasoning returned (the model still reads the same prompt).
  json off = ask("What is in the picture?");
  off["chat_template_kwargs"] = json{{"enable_thinking", false}};
  const Reply o = post("/v1/chat/completions", off);
  ASSERT_EQ(o.status, 200) << o.body;
  EXPECT_FALSE(o.json_body()["choices"][0]["message"].contains("reasoning_content")) << o.body;
  EXPECT_EQ(o.json_body()["usage"]["prompt_tokens"], thinking_prompt);

  // Ollama: message.thinking, and think: false hides it.
  json chat{{"model", "tiny"}, {"stream", false}, {"options", json{{"num_predict", 8}, {"temperature", 0}}},
            {"messages", json::array({json{{"role", "user"}, {"content", "Hi"}}})}};
  const Reply c = post("/api/chat", chat);
  ASSERT_EQ(c.status, 200) << c.body;
  EXPECT_FALSE(c.json_body()["message"]["thinking"].get<std::string>().empty()) << c.body;
  for (const json& on : {json(true), json("high"), json("low")}) {  // asked for outright: the same reasoning
    chat["think"] = on;
    const Reply t = post("/api/chat", chat);
    ASSERT_EQ(t.status, 200) << on << ": " << t.body;
    EXPECT_EQ(t.json_body()["message"]["thinking"], c.json_body()["message"]["thinking"]) << t.body;
  }
  chat["think"] = false;
  const Reply c2 = post("/api/chat", chat);
  ASSERT_EQ(c2.status, 200) << c2.body;
  EXPECT_FALSE(c2.json_body()["message"].contains("thinking")) << c2.body;
  chat["think"] = "sometimes";
  EXPECT_EQ(post("/api/chat", chat).status, 400);
}

// The Responses API: the reasoning is an output item of its own (reasoning_text), before the message, plain and
// streamed, the same as chat's reasoning_content.
TEST_F(ThinkingApi, ResponsesGiveTheReasoningAsAnItem) {
  start_thinking();
  const Reply a = post("/v1/chat/completions", ask("What is in the picture?"));
  ASSERT_EQ(a.status, 200) << a.body;
  const std::string reasoning = a.json_body()["choices"][0]["message"]["reasoning_content"];
  ASSERT_FALSE(reasoning.empty());
  json body{{"input", "What is in the picture?"}, {"max_output_tokens", 12}, {"temperature", 0}};
  const Reply r = post("/v1/responses", body);
  ASSERT_EQ(r.status, 200) << r.body;
  // The tokens ran out while the model reasoned: the response is incomplete and holds the reasoning only (no
  // empty message item after it), as OpenAI's does.
  const json out = r.json_body()["output"];
  EXPECT_EQ(r.json_body()["status"], "incomplete");
  ASSERT_EQ(out.size(), 1u) << r.body;
  EXPECT_EQ(out[0]["type"], "reasoning");
  EXPECT_EQ(out[0]["content"][0]["type"], "reasoning_text");
  EXPECT_EQ(out[0]["content"][0]["text"], reasoning);
  EXPECT_GT(r.json_body()["usage"]["output_tokens_details"]["reasoning_tokens"].get<int>(), 0);
  body["stream"] = true;
  const Reply s = post("/v1/responses", body);
  ASSERT_EQ(s.status, 200) << s.body;
  std::string streamed, first_type;
  for (const std::string& ev : sse_events(s.body)) {
    const json j = json::parse(ev);
    if (j["type"] == "response.output_item.added" && first_type.empty()) first_type = j["item"]["type"];
    if (j["type"] == "response.reasoning_text.delta") streamed += j["delta"].get<std::string>();
  }
  EXPECT_EQ(first_type, "reasoning");
  EXPECT_EQ(streamed, reasoning);
}

// A JSON answer from a Thinking model: the engine closes the <think> block first, so the reasoning is empty
// and the content parses.
TEST_F(ThinkingApi, ConstrainedAnswerClosesTheThinkBlock) {
  start_thinking();
  json body = ask("Give me JSON.", 40);
  body["response_format"] = json{{"type", "json_object"}};
  const Reply r = post("/v1/chat/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  const json m = r.json_body()["choices"][0]["message"];
  EXPECT_EQ(m["reasoning_content"], "") << r.body;
  const std::string content = m["content"];
  if (r.json_body()["choices"][0]["finish_reason"] == "stop") {
    EXPECT_FALSE(json::parse(content, nullptr, false).is_discarded()) << content;
  }
  const size_t first = content.find_first_not_of(" \t\n\r");
  ASSERT_NE(first, std::string::npos) << content;
  EXPECT_EQ(content[first], '{') << content;  // the JSON starts the answer: nothing of a <think> block is left
}

// Asking an Instruct model to think is refused, as Ollama refuses it.
TEST_F(ThinkingApi, InstructModelRefusesThink) {
  start();
  json body = ask("Hi");
  body["chat_template_kwargs"] = json{{"enable_thinking", true}};
  const Reply r = post("/v1/chat/completions", body);
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("does not support thinking"), std::string::npos) << r.body;
  json chat{{"model", "tiny"}, {"stream", false}, {"think", true},
            {"messages", json::array({json{{"role", "user"}, {"content", "Hi"}}})}};
  EXPECT_EQ(post("/api/chat", chat).status, 400);
  body["chat_template_kwargs"] = json{{"enable_thinking", false}};
  const Reply instruct = post("/v1/chat/completions", body);
  EXPECT_EQ(instruct.status, 200);
  EXPECT_FALSE(instruct.json_body()["usage"].contains("completion_tokens_details")) << instruct.body;
  const Reply health = get("/health");
  EXPECT_EQ(health.json_body()["model_info"]["chat_template"], "instruct") << health.body;
  // The thinking prompt is the Instruct one plus "<think>\n" (2 tokens).
  const Reply plain = post("/v1/chat/completions", ask("What is in the picture?"));
  ASSERT_EQ(plain.status, 200);
  EXPECT_FALSE(plain.json_body()["choices"][0]["message"].contains("reasoning_content"));
}

}  // namespace
}  // namespace qvl
