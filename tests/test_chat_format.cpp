// Checks render_chat against transformers' apply_chat_template goldens and python_json_dumps against json.dumps.
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "chat/chat_format.h"
#include "chat/chat_json.h"

#ifndef QVL_TEST_DATA_DIR
#error "QVL_TEST_DATA_DIR must name the tests/data folder"
#endif

namespace qvl {
namespace chat_format_test {  // its own: `json` is the ordered one here (a unity batch shares one file's scope)
namespace {

using json = nlohmann::ordered_json;

// tests/data/chat_golden.json (or chat_thinking_golden.json), written by tools/reference/gen_chat_goldens.py.
json load_goldens(const char* file = "chat_golden.json") {
  const std::string path = std::string(QVL_TEST_DATA_DIR) + "/" + file;
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << path
                         << "; hint: run tools/reference/.venv/bin/python tools/reference/gen_chat_goldens.py";
  std::stringstream ss;
  ss << in.rdbuf();
  return json::parse(ss.str());
}

// Shows the first byte where two renderings differ, with some context around it.
std::string first_difference(const std::string& got, const std::string& want) {
  size_t i = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
  const size_t from = i < 40 ? 0 : i - 40;
  return "first difference at byte " + std::to_string(i) + "\n  got:  ..." + json(got.substr(from, 100)).dump() +
         "\n  want: ..." + json(want.substr(from, 100)).dump();
}

void check_goldens(const char* file, ChatTemplateKind kind, size_t at_least) {
  const json goldens = load_goldens(file);
  ASSERT_TRUE(goldens.is_array());
  EXPECT_GE(goldens.size(), at_least);
  for (const json& c : goldens) {
    const std::string name = c.at("name").get<std::string>();
    SCOPED_TRACE(name);
    Result<std::vector<ChatMessage>> messages = chat_messages_from_json(c.at("messages"));
    ASSERT_TRUE(messages.ok()) << messages.status().message();
    Result<std::vector<json>> tools = chat_tools_from_json(c.at("tools"));
    ASSERT_TRUE(tools.ok()) << tools.status().message();
    ChatOptions options;
    options.add_generation_prompt = c.at("add_generation_prompt").get<bool>();
    options.add_vision_id = c.at("add_vision_id").get<bool>();
    options.tools = *tools;
    options.kind = kind;
    const std::string want = c.at("expected").get<std::string>();
    const std::string got = render_chat(*messages, options);
    EXPECT_EQ(got, want) << first_difference(got, want);
  }
}

TEST(ChatFormat, GoldensMatchTransformers) { check_goldens("chat_golden.json", ChatTemplateKind::kInstruct, 50); }

// The Thinking models' template: reasoning_content and <think> blocks, the last real query after tool
// responses, the generation prompt that opens a <think> block.
TEST(ChatFormat, ThinkingGoldensMatchTransformers) {
  check_goldens("chat_thinking_golden.json", ChatTemplateKind::kThinking, 80);
}

// The template is told apart by its text: the shipped Instruct and Thinking templates, and the Jinja spelling.
TEST(ChatFormat, TemplateKindFromItsText) {
  auto read = [](const std::string& rel) {
    std::ifstream in(std::string(QVL_TEST_DATA_DIR) + "/../../models/" + rel, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return json::parse(ss.str()).at("chat_template").get<std::string>();
  };
  EXPECT_EQ(chat_template_kind(read("qwen3-vl-2b-instruct/chat_template.json")), ChatTemplateKind::kInstruct);
  EXPECT_EQ(chat_template_kind(read("qwen3-vl-2b-thinking/chat_template.json")), ChatTemplateKind::kThinking);
  EXPECT_EQ(chat_template_kind("{{- '<|im_start|>assistant\\n' }}"), ChatTemplateKind::kInstruct);
  EXPECT_STREQ(chat_template_kind_name(ChatTemplateKind::kThinking), "thinking");
}

TEST(ChatFormat, StructsWithoutJson) {
  // The server builds messages directly too: an image part with no text, then a text part.
  std::vector<ChatMessage> messages(2);
  messages[0].role = "user";
  messages[0].content_is_string = false;
  messages[0].content_parts = {{ContentPart::Kind::kImage, ""}, {ContentPart::Kind::kText, "What is it?"}};
  messages[1].role = "assistant";
  messages[1].content_string = "A cat.";
  ChatOptions options;
  options.add_vision_id = true;
  EXPECT_EQ(render_chat(messages, options),
            "<|im_start|>user\nPicture 1: <|vision_start|><|image_pad|><|vision_end|>What is it?<|im_end|>\n"
            "<|im_start|>assistant\nA cat.<|im_end|>\n<|im_start|>assistant\n");
  options.add_generation_prompt = false;
  EXPECT_EQ(render_chat({}, options), "");
}

TEST(ChatJson, RejectsMalformedMessages) {
  EXPECT_FALSE(chat_messages_from_json(json::parse(R"({"role": "user"})")).ok());
  EXPECT_FALSE(chat_messages_from_json(json::parse(R"([{"content": "no role"}])")).ok());
  EXPECT_FALSE(chat_messages_from_json(json::parse(R"([{"role": "user", "content": 5}])")).ok());
  EXPECT_FALSE(chat_messages_from_json(json::parse(R"([{"role": "user", "content": ["bare string"]}])")).ok());
  EXPECT_FALSE(chat_messages_from_json(json::parse(R"([{"role": "user", "content": [{"text": 1}]}])")).ok());
  EXPECT_FALSE(
      chat_messages_from_json(json::parse(R"([{"role": "assistant", "tool_calls": [{"arguments": {}}]}])")).ok());
  EXPECT_FALSE(chat_messages_from_json(json::parse(R"([{"role": "assistant", "tool_calls": [{"name": "f"}]}])")).ok());
  EXPECT_FALSE(chat_tools_from_json(json::parse(R"({"name": "f"})")).ok());
  EXPECT_FALSE(chat_tools_from_json(json::parse(R"(["f"])")).ok());
  Result<std::vector<ChatMessage>> r = chat_messages_from_json(json::parse(R"([{"role": "user", "content": 5}])"));
  EXPECT_NE(r.status().message().find("messages[0].content"), std::string::npos) << r.status().message();
}

TEST(ChatJson, NullContentIsAnEmptyList) {
  // OpenAI clients send "content": null beside tool_calls; it renders like a missing content.
  Result<std::vector<ChatMessage>> r = chat_messages_from_json(json::parse(
      R"([{"role": "assistant", "content": null,
           "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}])"));
  ASSERT_TRUE(r.ok()) << r.status().message();
  ChatOptions options;
  options.add_generation_prompt = false;
  EXPECT_EQ(render_chat(*r, options),
            "<|im_start|>assistant\n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call><|im_end|>\n");
}

// Each expected string is what Python 3's json.dumps(json.loads(input), ensure_ascii=False) prints.
TEST(PythonJsonDumps, MatchesJsonDumps) {
  const std::vector<std::pair<const char*, const char*>> cases = {
      {R"(null)", R"(null)"},
      {R"(true)", R"(true)"},
      {R"(false)", R"(false)"},
      {R"(0)", R"(0)"},
      {R"(-17)", R"(-17)"},
      {R"(12345678901234567)", R"(12345678901234567)"},
      {R"(-9223372036854775808)", R"(-9223372036854775808)"},
      {R"(18446744073709551615)", R"(18446744073709551615)"},
      {R"(1.0)", R"(1.0)"},
      {R"(1.5)", R"(1.5)"},
      {R"(100.0)", R"(100.0)"},
      {R"(1e2)", R"(100.0)"},
      {R"(0.0)", R"(0.0)"},
      {R"(-0.0)", R"(-0.0)"},
      {R"(0.1)", R"(0.1)"},
      {R"(0.30000000000000004)", R"(0.30000000000000004)"},
      {R"(0.0001)", R"(0.0001)"},
      {R"(0.00001)", R"(1e-05)"},
      {R"(1.5e-7)", R"(1.5e-07)"},
      {R"(1e20)", R"(1e+20)"},
      {R"(1e16)", R"(1e+16)"},
      {R"(9999999999999998.0)", R"(9999999999999998.0)"},
      {R"(123456789012345678.0)", R"(1.2345678901234568e+17)"},
      {R"(1.7976931348623157e308)", R"(1.7976931348623157e+308)"},
      {R"(5e-324)", R"(5e-324)"},
      {R"(1e100)", R"(1e+100)"},
      {R"(-2.5e-310)", R"(-2.5e-310)"},
      {R"(123456.789)", R"(123456.789)"},
      {R"("")", R"("")"},
      {R"("plain")", R"("plain")"},
      {R"("q\"b\\s/")", R"("q\"b\\s/")"},
      {R"("\b\f\n\r\t")", R"("\b\f\n\r\t")"},
      {R"("\u0000\u0001\u001f\u001B")", R"("\u0000\u0001\u001f\u001b")"},
      {R"("del\u007f")", "\"del\x7f\""},
      {R"("\u2028\u2029")", "\"\u2028\u2029\""},
      {R"("中文 🦙 é")", R"("中文 🦙 é")"},
      {R"("\ud83e\udd99")", R"("🦙")"},
      {R"([])", R"([])"},
      {R"({})", R"({})"},
      {R"([1, [2, [3, {}]], []])", R"([1, [2, [3, {}]], []])"},
      {R"({"b": 1, "a": {"d": [1.0, "x"], "c": null}})", R"({"b": 1, "a": {"d": [1.0, "x"], "c": null}})"},
      {R"({"key\nwith\"escapes": "v"})", R"({"key\nwith\"escapes": "v"})"},
  };
  for (const auto& [input, want] : cases) {
    EXPECT_EQ(python_json_dumps(json::parse(input)), want) << "input: " << input;
  }
}

TEST(PythonJsonDumps, NonFiniteFloats) {
  // json.dumps(float('nan')) == 'NaN' (allow_nan is on by default); JSON text cannot hold these, a caller can.
  EXPECT_EQ(python_json_dumps(json(std::numeric_limits<double>::quiet_NaN())), "NaN");
  EXPECT_EQ(python_json_dumps(json(std::numeric_limits<double>::infinity())), "Infinity");
  EXPECT_EQ(python_json_dumps(json(-std::numeric_limits<double>::infinity())), "-Infinity");
}

TEST(PythonJsonDumps, KeepsInvalidUtf8BytesAsTheyAre) {
  // Not reachable from parsed JSON (nlohmann rejects it), but a string built in C++ may hold any bytes.
  EXPECT_EQ(python_json_dumps(json(std::string("a\xff" "b"))), "\"a\xff" "b\"");
}

}  // namespace
}  // namespace chat_format_test
}  // namespace qvl
