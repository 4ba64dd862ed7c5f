// Renders the Qwen3-VL-Instruct chat template (chat_template.json) natively, block by block, under the Jinja it implements.
//
// The template is run by transformers with trim_blocks and lstrip_blocks, and every tag in it strips the
// whitespace before it ({%- / {{-), so only the quoted string literals and the vision-pad lines reach the
// output; the C++ below appends exactly those. Values follow Jinja/Python semantics:
//   `x is string`   — ChatMessage::content_is_string (a missing content is an empty list of parts),
//   `message.content` as a condition — Python truthiness: a non-empty string, or a non-empty list,
//   `'text' in content` — the part had a "text" key; ContentPart::text holds it (empty when absent, which
//                        renders the same), whatever the part's kind.
#include "chat/chat_format.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "util/status.h"

namespace qvl {
namespace {

// The output under construction: template text is appended with +=, text that came from the caller
// (message content, tool names and arguments, tool definitions) with user(), which records its span so
// the tokenizer never turns it into control tokens.
struct Writer {
  std::string text;
  std::vector<TextSpan> user_spans;

  void operator+=(std::string_view s) { text += s; }
  void operator+=(char c) { text += c; }
  void user(std::string_view s) {
    if (s.empty()) return;
    user_spans.push_back({text.size(), text.size() + s.size()});
    text += s;
  }
};

// Python truthiness of `message.content`: a non-empty string or a non-empty list.
bool content_truthy(const ChatMessage& m) {
  return m.content_is_string ? !m.content_string.empty() : !m.content_parts.empty();
}

// {%- if message.content is string %}
//     {{- message.content }}
// {%- else %}
//     {%- for content in message.content %}
//         {%- if 'text' in content %}
//             {{- content.text }}
//         {%- endif %}
//     {%- endfor %}
// {%- endif %}
// Used for the system message and for assistant messages: parts of every kind contribute only their text.
void append_text_content(Writer& out, const ChatMessage& m) {
  if (m.content_is_string) {
    out.user(m.content_string);
    return;
  }
  for (const ContentPart& part : m.content_parts) out.user(part.text);
}

// The running counters of `{%- set image_count = namespace(value=0) %}` and its video twin: they are shared
// by every user and tool message of the conversation.
struct VisionCounters {
  int image = 0;
  int video = 0;
};

// {%- if message.content is string %}
//     {{- message.content }}
// {%- else %}
//     {%- for content in message.content %}
//         {%- if content.type == 'image' or 'image' in content or 'image_url' in content %}
//             {%- set image_count.value = image_count.value + 1 %}
//             {%- if add_vision_id %}Picture {{ image_count.value }}: {% endif -%}
//             <|vision_start|><|image_pad|><|vision_end|>
//         {%- elif content.type == 'video' or 'video' in content %}
//             {%- set video_count.value = video_count.value + 1 %}
//             {%- if add_vision_id %}Video {{ video_count.value }}: {% endif -%}
//             <|vision_start|><|video_pad|><|vision_end|>
//         {%- elif 'text' in content %}
//             {{- content.text }}
//         {%- endif %}
//     {%- endfor %}
// {%- endif %}
// Used for user and tool messages.
void append_vision_content(Writer& out, const ChatMessage& m, bool add_vision_id, VisionCounters& counters) {
  if (m.content_is_string) {
    out.user(m.content_string);
    return;
  }
  for (const ContentPart& part : m.content_parts) {
    switch (part.kind) {
      case ContentPart::Kind::kImage:
        counters.image += 1;
        if (add_vision_id) out += "Picture " + std::to_string(counters.image) + ": ";
        out += "<|vision_start|><|image_pad|><|vision_end|>";
        break;
      case ContentPart::Kind::kVideo:
        counters.video += 1;
        if (add_vision_id) out += "Video " + std::to_string(counters.video) + ": ";
        out += "<|vision_start|><|video_pad|><|vision_end|>";
        break;
      case ContentPart::Kind::kText:
        out.user(part.text);
        break;
      case ContentPart::Kind::kDocument:
        break;
    }
  }
}

// {%- if message.tool_calls %}
//     {%- for tool_call in message.tool_calls %}
//         {%- if (loop.first and message.content) or (not loop.first) %}
//             {{- '\n' }}
//         {%- endif %}
//         {%- if tool_call.function %}
//             {%- set tool_call = tool_call.function %}
//         {%- endif %}
//         {{- '<tool_call>\n{"name": "' }}
//         {{- tool_call.name }}
//         {{- '", "arguments": ' }}
//         {%- if tool_call.arguments is string %}
//             {{- tool_call.arguments }}
//         {%- else %}
//             {{- tool_call.arguments | tojson }}
//         {%- endif %}
//         {{- '}\n</tool_call>' }}
//     {%- endfor %}
// {%- endif %}
// The `function` unwrapping happens when the JSON is read (chat_json.cpp); a ToolCall is already unwrapped.
// content_truthy: the truth of the content the template tests (the Instruct template's message.content, the
// Thinking template's `content` after its <think> block is taken out).
void append_tool_calls(Writer& out, const ChatMessage& m, bool content_truthy) {
  for (size_t i = 0; i < m.tool_calls.size(); ++i) {
    const ToolCall& call = m.tool_calls[i];
    if ((i == 0 && content_truthy) || i != 0) out += '\n';
    out += "<tool_call>\n{\"name\": \"";
    out.user(call.name);
    out += "\", \"arguments\": ";
    if (call.arguments.is_string()) {
      out.user(call.arguments.get_ref<const std::string&>());
    } else {
      out.user(python_json_dumps(call.arguments));
    }
    out += "}\n</tool_call>";
  }
}

// Python's float.__repr__ (the shortest digits that round-trip; scientific when the exponent is < -4 or
// >= 16) as json.dumps writes a float, including its spellings of the non-finite values.
std::string python_float_repr(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  if (v == 0) return std::signbit(v) ? "-0.0" : "0.0";
  // Shortest round-trip digits, as "[-]d[.ddd]e[+-]XX".
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
  QVL_CHECK(res.ec == std::errc());
  const std::string_view sci(buf, static_cast<size_t>(res.ptr - buf));
  const size_t e_pos = sci.find('e');
  QVL_CHECK(e_pos != std::string_view::npos);
  std::string out;
  std::string digits;
  for (char c : sci.substr(0, e_pos)) {
    if (c == '-') out += '-';
    else if (c != '.') digits += c;
  }
  const int exponent = std::atoi(std::string(sci.substr(e_pos + 1)).c_str());
  const int n = static_cast<int>(digits.size());
  if (exponent < -4 || exponent >= 16) {
    // 1e-05, 1.5e+16: one digit, the rest after a point (omitted when empty), exponent of >= 2 digits.
    out += digits[0];
    if (n > 1) out += "." + digits.substr(1);
    char exp_buf[16];
    std::snprintf(exp_buf, sizeof(exp_buf), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    out += exp_buf;
    return out;
  }
  const int point = exponent + 1;  // digits before the decimal point
  if (point <= 0) {
    out += "0." + std::string(static_cast<size_t>(-point), '0') + digits;  // 0.0001
  } else if (point >= n) {
    out += digits + std::string(static_cast<size_t>(point - n), '0') + ".0";  // 100.0
  } else {
    out += digits.substr(0, static_cast<size_t>(point)) + "." + digits.substr(static_cast<size_t>(point));
  }
  return out;
}

// json.dumps(s, ensure_ascii=False) of a string: escapes the quote, the backslash and the C0 controls
// (\b \f \n \r \t by name, the rest as \u00xx in lower-case hex); DEL, U+2028/U+2029 and all other
// non-ASCII pass through as they are.
void append_python_json_string(std::string& out, const std::string& s) {
  out += '"';
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char esc[8];
          std::snprintf(esc, sizeof(esc), "\\u%04x", c);
          out += esc;
        } else {
          out += ch;
        }
    }
  }
  out += '"';
}

void append_python_json(std::string& out, const nlohmann::ordered_json& v) {
  using value_t = nlohmann::ordered_json::value_t;
  switch (v.type()) {
    case value_t::null: out += "null"; break;
    case value_t::boolean: out += v.get<bool>() ? "true" : "false"; break;
    case value_t::number_integer: out += std::to_string(v.get<int64_t>()); break;
    case value_t::number_unsigned: out += std::to_string(v.get<uint64_t>()); break;
    case value_t::number_float: out += python_float_repr(v.get<double>()); break;
    case value_t::string: append_python_json_string(out, v.get_ref<const std::string&>()); break;
    case value_t::array: {
      out += '[';
      bool first = true;
      for (const auto& item : v) {
        if (!first) out += ", ";
        first = false;
        append_python_json(out, item);
      }
      out += ']';
      break;
    }
    case value_t::object: {
      out += '{';
      bool first = true;
      for (const auto& [key, item] : v.items()) {
        if (!first) out += ", ";
        first = false;
        append_python_json_string(out, key);
        out += ": ";
        append_python_json(out, item);
      }
      out += '}';
      break;
    }
    case value_t::binary:
    case value_t::discarded:
      QVL_CHECK_MSG(false, "binary or discarded JSON value cannot come from a parsed chat request");
  }
}

// The system block at the top (with the tool definitions when there are tools): the same in both templates.
// The Thinking template renders the first system message with its render_content macro, which would also
// print image pads; qvl drops images in system messages before rendering (the Instruct template's rule), so
// only its text is written here.
void append_header(Writer& out, const std::vector<ChatMessage>& messages, const ChatOptions& options);

std::string strip_newlines(std::string_view s, bool left, bool right) {
  size_t b = 0, e = s.size();
  while (left && b < e && s[b] == '\n') ++b;
  while (right && e > b && s[e - 1] == '\n') --e;
  return std::string(s.substr(b, e - b));
}

// A message's content as the Thinking template's render_content macro prints it without counting images
// (a string as it is; parts: their text, image and video pads). Used for its multi-step tool test.
std::string rendered_content(const ChatMessage& m) {
  if (m.content_is_string) return m.content_string;
  std::string s;
  for (const ContentPart& part : m.content_parts) {
    if (part.kind == ContentPart::Kind::kImage) s += "<|vision_start|><|image_pad|><|vision_end|>";
    else if (part.kind == ContentPart::Kind::kVideo) s += "<|vision_start|><|video_pad|><|vision_end|>";
    else if (part.kind == ContentPart::Kind::kText) s += part.text;
  }
  return s;
}

// The text of a system or assistant message (images dropped, see append_header).
std::string text_content(const ChatMessage& m) {
  if (m.content_is_string) return m.content_string;
  std::string s;
  for (const ContentPart& part : m.content_parts) s += part.text;
  return s;
}

// The Qwen3-VL-Thinking template (its differences from the Instruct one are quoted where they apply).
RenderedChat render_thinking(const std::vector<ChatMessage>& messages, const ChatOptions& options) {
  Writer out;
  append_header(out, messages, options);
  // {%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
  // {%- for message in messages[::-1] %}
  //     {%- set index = (messages|length - 1) - loop.index0 %}
  //     {%- if ns.multi_step_tool and message.role == "user" %}
  //         {%- set content = render_content(message.content, false) %}
  //         {%- if not(content.startswith('<tool_response>') and content.endswith('</tool_response>')) %}
  //             {%- set ns.multi_step_tool = false %}
  //             {%- set ns.last_query_index = index %}
  // ...
  const int64_t n = static_cast<int64_t>(messages.size());
  int64_t last_query = n - 1;
  for (int64_t i = n - 1; i >= 0; --i) {
    if (messages[static_cast<size_t>(i)].role != "user") continue;
    const std::string c = rendered_content(messages[static_cast<size_t>(i)]);
    const bool tool_response = c.rfind("<tool_response>", 0) == 0 && c.size() >= 16 &&
                               c.compare(c.size() - 16, 16, "</tool_response>") == 0;
    if (!tool_response) {
      last_query = i;
      break;
    }
  }
  VisionCounters counters;
  for (int64_t i = 0; i < n; ++i) {
    const ChatMessage& message = messages[static_cast<size_t>(i)];
    // {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
    //     {{- '<|im_start|>' + message.role + '\n' + content + '<|im_end|>' + '\n' }}
    if (message.role == "user") {
      out += "<|im_start|>user\n";
      append_vision_content(out, message, options.add_vision_id, counters);
      out += "<|im_end|>\n";
    } else if (message.role == "system" && i != 0) {
      out += "<|im_start|>system\n";
      out.user(text_content(message));
      out += "<|im_end|>\n";
    } else if (message.role == "assistant") {
      // {%- set reasoning_content = '' %}
      // {%- if message.reasoning_content is string %} reasoning_content = message.reasoning_content
      // {%- else %}{%- if '</think>' in content %}
      //     reasoning_content = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n')
      //     content = content.split('</think>')[-1].lstrip('\n')
      std::string content = text_content(message), reasoning;
      if (message.has_reasoning) {
        reasoning = message.reasoning_content;
      } else if (size_t end = content.find("</think>"); end != std::string::npos) {
        std::string before = strip_newlines(std::string_view(content).substr(0, end), false, true);
        const size_t open = before.rfind("<think>");
        if (open != std::string::npos) before = before.substr(open + 7);
        reasoning = strip_newlines(before, true, false);
        content = strip_newlines(std::string_view(content).substr(content.rfind("</think>") + 8), true, false);
      }
      // {%- if loop.index0 > ns.last_query_index %}
      //     {%- if loop.last or (not loop.last and reasoning_content) %}
      //         '<|im_start|>' + message.role + '\n<think>\n' + reasoning_content.strip('\n') + '\n</think>\n\n'
      //         + content.lstrip('\n')
      //     {%- else %} '<|im_start|>' + message.role + '\n' + content
      // {%- else %} '<|im_start|>' + message.role + '\n' + content
      out += "<|im_start|>assistant\n";
      if (i > last_query && (i == n - 1 || !reasoning.empty())) {
        out += "<think>\n";
        out.user(strip_newlines(reasoning, true, true));
        out += "\n</think>\n\n";
        out.user(strip_newlines(content, true, false));
      } else {
        out.user(content);
      }
      append_tool_calls(out, message, !content.empty());
      out += "<|im_end|>\n";
    } else if (message.role == "tool") {
      if (i == 0 || messages[static_cast<size_t>(i) - 1].role != "tool") out += "<|im_start|>user";
      out += "\n<tool_response>\n";
      append_vision_content(out, message, options.add_vision_id, counters);
      out += "\n</tool_response>";
      if (i + 1 == n || messages[static_cast<size_t>(i) + 1].role != "tool") out += "<|im_end|>\n";
    }
  }
  // {%- if add_generation_prompt %}
  //     {{- '<|im_start|>assistant\n<think>\n' }}
  if (options.add_generation_prompt) out += "<|im_start|>assistant\n<think>\n";
  return RenderedChat{std::move(out.text), std::move(out.user_spans)};
}

}  // namespace

ChatTemplateKind chat_template_kind(std::string_view t) {
  // The generation prompt as the Jinja source spells it, inside a string literal: \n escaped.
  return t.find("assistant\\n<think>\\n") != std::string_view::npos || t.find("assistant\n<think>\n") != std::string_view::npos
             ? ChatTemplateKind::kThinking
             : ChatTemplateKind::kInstruct;
}

const char* chat_template_kind_name(ChatTemplateKind kind) {
  return kind == ChatTemplateKind::kThinking ? "thinking" : "instruct";
}

ChatMessage user_message(size_t n_images, std::string text) { return user_message(n_images, 0, std::move(text)); }

ChatMessage user_message(size_t n_images, size_t n_videos, std::string text) {
  ChatMessage m;
  m.role = "user";
  m.content_is_string = false;
  m.content_parts.assign(n_images, ContentPart{ContentPart::Kind::kImage, ""});
  m.content_parts.insert(m.content_parts.end(), n_videos, ContentPart{ContentPart::Kind::kVideo, ""});
  m.content_parts.push_back({ContentPart::Kind::kText, std::move(text)});
  return m;
}

std::string python_json_dumps(const nlohmann::ordered_json& value) {
  std::string out;
  append_python_json(out, value);
  return out;
}

std::string render_chat(const std::vector<ChatMessage>& messages, const ChatOptions& options) {
  return render_chat_with_spans(messages, options).text;
}

namespace {

void append_header(Writer& out, const std::vector<ChatMessage>& messages, const ChatOptions& options) {
  const bool first_is_system = !messages.empty() && messages[0].role == "system";

  // {%- if tools %}
  if (!options.tools.empty()) {
    //     {{- '<|im_start|>system\n' }}
    //     {%- if messages[0].role == 'system' %}
    //         ...messages[0].content as text...
    //         {{- '\n\n' }}
    //     {%- endif %}
    out += "<|im_start|>system\n";
    if (first_is_system) {
      append_text_content(out, messages[0]);
      out += "\n\n";
    }
    //     {{- "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are
    //          provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    //     {%- for tool in tools %}
    //         {{- "\n" }}
    //         {{- tool | tojson }}
    //     {%- endfor %}
    //     {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments
    //          within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>,
    //          \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
    out +=
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
    for (const auto& tool : options.tools) {
      out += '\n';
      out.user(python_json_dumps(tool));
    }
    out +=
        "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
        "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
        "<args-json-object>}\n</tool_call><|im_end|>\n";
  } else if (first_is_system) {
    // {%- else %}
    //     {%- if messages[0].role == 'system' %}
    //         {{- '<|im_start|>system\n' }}
    //         ...messages[0].content as text...
    //         {{- '<|im_end|>\n' }}
    //     {%- endif %}
    // {%- endif %}
    out += "<|im_start|>system\n";
    append_text_content(out, messages[0]);
    out += "<|im_end|>\n";
  }
}

}  // namespace

RenderedChat render_chat_with_spans(const std::vector<ChatMessage>& messages, const ChatOptions& options) {
  if (options.kind == ChatTemplateKind::kThinking) return render_thinking(messages, options);
  Writer out;
  append_header(out, messages, options);

  // {%- set image_count = namespace(value=0) %}
  // {%- set video_count = namespace(value=0) %}
  VisionCounters counters;
  // {%- for message in messages %}
  // Roles other than user, assistant and tool (a system message included, wherever it stands) render nothing.
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& message = messages[i];
    if (message.role == "user") {
      // {{- '<|im_start|>' + message.role + '\n' }}  ...content with vision pads...  {{- '<|im_end|>\n' }}
      out += "<|im_start|>user\n";
      append_vision_content(out, message, options.add_vision_id, counters);
      out += "<|im_end|>\n";
    } else if (message.role == "assistant") {
      // {{- '<|im_start|>' + message.role + '\n' }}  ...content as text...  ...tool calls...
      // {{- '<|im_end|>\n' }}
      out += "<|im_start|>assistant\n";
      append_text_content(out, message);
      append_tool_calls(out, message, content_truthy(message));
      out += "<|im_end|>\n";
    } else if (message.role == "tool") {
      // {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
      //     {{- '<|im_start|>user' }}
      // {%- endif %}
      if (i == 0 || messages[i - 1].role != "tool") out += "<|im_start|>user";
      // {{- '\n<tool_response>\n' }}  ...content with vision pads...  {{- '\n</tool_response>' }}
      out += "\n<tool_response>\n";
      append_vision_content(out, message, options.add_vision_id, counters);
      out += "\n</tool_response>";
      // {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
      //     {{- '<|im_end|>\n' }}
      // {%- endif %}
      if (i + 1 == messages.size() || messages[i + 1].role != "tool") out += "<|im_end|>\n";
    }
  }

  // {%- if add_generation_prompt %}
  //     {{- '<|im_start|>assistant\n' }}
  // {%- endif %}
  if (options.add_generation_prompt) out += "<|im_start|>assistant\n";
  return RenderedChat{std::move(out.text), std::move(out.user_spans)};
}

}  // namespace qvl
