// The OpenAI Responses API request body (POST /v1/responses) read into a chat request.
#include "server/responses_request.h"

#include <cmath>

#include "server/api.h"
#include "server/openai_shapes.h"

namespace qvl::server {

namespace {

std::string item_type(const json& obj) {
  auto it = obj.find("type");
  return it != obj.end() && it->is_string() ? it->get<std::string>() : "";
}

// A client's value quoted in an error, cut short.
std::string clip(const std::string& v) { return v.size() > 40 ? v.substr(0, 40) + "..." : v; }

Result<std::string> required_string(const json& obj, const char* key, const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_string())
    return Status::Error(where + "." + key + ": expected a string, got " + (it == obj.end() ? "nothing" : it->type_name()));
  return it->get<std::string>();
}

// A message's content: a string, or parts (input_text, output_text, refusal, input_image) in chat form.
Result<json> content_parts(const json& content, const std::string& where) {
  if (content.is_string()) return content;
  if (!content.is_array())
    return Status::Error(where + ": expected a string or a list of content parts, got " + std::string(content.type_name()));
  json parts = json::array();
  for (size_t j = 0; j < content.size(); ++j) {
    const json& part = content[j];
    const std::string w = where + "[" + std::to_string(j) + "]";
    if (!part.is_object()) return Status::Error(w + ": expected a content part object, got " + std::string(part.type_name()));
    const std::string type = item_type(part);
    if (type == "input_text" || type == "output_text" || type == "text") {
      QVL_ASSIGN_OR_RETURN(std::string text, required_string(part, "text", w));
      parts.push_back(json{{"type", "text"}, {"text", std::move(text)}});
    } else if (type == "refusal") {
      QVL_ASSIGN_OR_RETURN(std::string text, required_string(part, "refusal", w));
      parts.push_back(json{{"type", "text"}, {"text", std::move(text)}});
    } else if (type == "input_image") {
      if (auto f = part.find("file_id"); f != part.end() && !f->is_null())
        return Status::Error(w + ".file_id: not supported (this server has no Files API); send image_url as a data URI "
                                 "or the name of a file under the server's --media-dir");
      QVL_ASSIGN_OR_RETURN(std::string url, required_string(part, "image_url", w));
      json image{{"url", std::move(url)}};
      json out{{"type", "image_url"}, {"image_url", json()}};
      // detail, and qvl's per-image sizes and page, as a chat image part takes them.
      for (const char* key : {"detail", "min_pixels", "max_pixels", "resized_height", "resized_width", "page"})
        if (auto it = part.find(key); it != part.end()) out[key] = *it;
      out["image_url"] = std::move(image);
      parts.push_back(std::move(out));
    } else if (type == "input_video") {  // qvl's extension, as vLLM's video_url part
      QVL_ASSIGN_OR_RETURN(std::string url, required_string(part, "video_url", w));
      json out{{"type", "video_url"}, {"video_url", json{{"url", std::move(url)}}}};
      for (const char* key : {"fps", "min_pixels", "max_pixels", "total_pixels", "min_frames", "max_frames"})
        if (auto it = part.find(key); it != part.end()) out[key] = *it;
      parts.push_back(std::move(out));
    } else if (type == "input_file") {
      // As a chat `file` part: file_data (a data: URI), or filename under --media-dir, or file_url where the
      // server fetches URLs; qvl's pages and per-page sizes beside them.
      if (auto f = part.find("file_id"); f != part.end() && !f->is_null())
        return Status::Error(w + ".file_id: not supported (this server has no Files API); send file_data as a data URI "
                                 "(data:application/pdf;base64,...) or the name of a file under the server's --media-dir");
      json file = json::object();
      for (const char* key : {"file_data", "filename", "file_url", "pages"})
        if (auto it = part.find(key); it != part.end()) file[key] = *it;
      json out{{"type", "file"}, {"file", std::move(file)}};
      for (const char* key : {"detail", "min_pixels", "max_pixels"})
        if (auto it = part.find(key); it != part.end()) out[key] = *it;
      parts.push_back(std::move(out));
    } else {
      return Status::Error(w + ".type: '" + clip(type) + "' is not supported; expected input_text, input_image, input_file or output_text");
    }
  }
  return parts;
}

// `input` (already read by input_messages: valid) as Responses items, each with an id.
json input_items_of(const json& input) {
  json items = json::array();
  if (input.is_string()) {
    items.push_back(json{{"id", random_id("msg_")}, {"type", "message"}, {"role", "user"}, {"status", "completed"},
                         {"content", json::array({json{{"type", "input_text"}, {"text", input}}})}});
    return items;
  }
  for (const json& in : input) {
    const std::string type = item_type(in);
    json item = json::object();
    const char* prefix = type == "function_call" ? "fc_" : type == "function_call_output" ? "fco_" : type == "reasoning" ? "rs_" : "msg_";
    item["id"] = in.contains("id") && in["id"].is_string() ? in["id"] : json(random_id(prefix));
    item["type"] = type.empty() ? std::string("message") : type;
    for (const auto& [k, v] : in.items())
      if (k != "id" && k != "type") item[k] = v;
    if (item["type"] == "message") {
      if (item["content"].is_string()) {
        const char* part = item["role"] == "assistant" ? "output_text" : "input_text";
        item["content"] = json::array({json{{"type", part}, {"text", item["content"]}}});
      }
      if (!item.contains("status")) item["status"] = "completed";
    }
    items.push_back(std::move(item));
  }
  return items;
}

// The input items as chat messages; where[k]: the Responses path of message k.
Status input_messages(const json& input, json& messages, std::vector<std::string>& where) {
  if (input.is_string()) {
    messages.push_back(json{{"role", "user"}, {"content", input}});
    where.push_back("input");
    return Status::Ok();
  }
  if (!input.is_array() || input.empty())
    return Status::Error("input: expected a string or a non-empty list of input items, got " +
                         std::string(input.is_array() ? "an empty list" : input.type_name()));
  bool open_calls = false;  // the last message is an assistant turn made of function_call items
  for (size_t i = 0; i < input.size(); ++i) {
    const json& item = input[i];
    const std::string w = "input[" + std::to_string(i) + "]";
    if (!item.is_object()) return Status::Error(w + ": expected an input item object, got " + std::string(item.type_name()));
    const std::string type = item_type(item);
    if (type.empty() || type == "message") {
      QVL_ASSIGN_OR_RETURN(std::string role, required_string(item, "role", w));
      if (role != "user" && role != "system" && role != "developer" && role != "assistant")
        return Status::Error(w + ".role: '" + clip(role) + "' is not a role; expected user, system, developer or assistant");
      auto c = item.find("content");
      if (c == item.end()) return Status::Error(w + ".content: missing; expected a string or a list of content parts");
      QVL_ASSIGN_OR_RETURN(json content, content_parts(*c, w + ".content"));
      messages.push_back(json{{"role", role}, {"content", std::move(content)}});
      where.push_back(w);
      open_calls = false;
    } else if (type == "function_call") {
      QVL_ASSIGN_OR_RETURN(std::string call_id, required_string(item, "call_id", w));
      QVL_ASSIGN_OR_RETURN(std::string name, required_string(item, "name", w));
      QVL_ASSIGN_OR_RETURN(std::string arguments, required_string(item, "arguments", w));
      json call{{"id", call_id}, {"type", "function"}, {"function", json{{"name", name}, {"arguments", arguments}}}};
      // Calls in a row (and calls right after the assistant's text) are one assistant turn.
      const bool join = !messages.empty() && messages.back()["role"] == "assistant" &&
                        (open_calls || !messages.back().contains("tool_calls"));
      if (join) {
        messages.back()["tool_calls"].push_back(std::move(call));
      } else {
        messages.push_back(json{{"role", "assistant"}, {"content", ""}, {"tool_calls", json::array({std::move(call)})}});
        where.push_back(w);
      }
      open_calls = true;
    } else if (type == "function_call_output") {
      QVL_ASSIGN_OR_RETURN(std::string call_id, required_string(item, "call_id", w));
      auto o = item.find("output");
      if (o == item.end()) return Status::Error(w + ".output: missing; expected the function's result as a string");
      QVL_ASSIGN_OR_RETURN(json output, content_parts(*o, w + ".output"));
      messages.push_back(json{{"role", "tool"}, {"tool_call_id", call_id}, {"content", std::move(output)}});
      where.push_back(w);
      open_calls = false;
    } else if (type == "reasoning") {
      continue;  // a previous turn's reasoning: the chat template drops it from earlier turns anyway
    } else {
      return Status::Error(w + ".type: '" + clip(type) + "' is not supported; expected message, function_call, "
                               "function_call_output or reasoning");
    }
  }
  return Status::Ok();
}

// Function tools, flat in the Responses API, as chat tools.
Result<json> chat_tools(const json& tools) {
  if (!tools.is_array()) return Status::Error("tools: expected a list of tools, got " + std::string(tools.type_name()));
  json out = json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const json& t = tools[i];
    const std::string w = "tools[" + std::to_string(i) + "]";
    if (!t.is_object()) return Status::Error(w + ": expected a tool object");
    if (item_type(t) != "function")
      return Status::Error(w + ".type: '" + clip(item_type(t)) + "' is not supported; only function tools ({\"type\": \"function\", "
                               "\"name\", \"parameters\"}) run here");
    QVL_ASSIGN_OR_RETURN(std::string name, required_string(t, "name", w));
    if (name.empty()) return Status::Error(w + ".name: empty; give the function's name");
    json f = json::object();
    for (const char* key : {"name", "description", "parameters", "strict"})
      if (auto it = t.find(key); it != t.end()) f[key] = *it;
    out.push_back(json{{"type", "function"}, {"function", std::move(f)}});
  }
  return out;
}

// Chat-request paths in a message rewritten as the Responses API's: messages[k] by `where`, tools[i].function
// as tools[i], response_format as text.format, max_tokens as max_output_tokens. A plain scan (the message
// may quote what the client sent: no regex recursion, no number parsing that can throw).
std::string rename(const std::string& s, const std::vector<std::string>& where) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  auto index_at = [&](size_t at, size_t& end) -> long {  // digits then ']' at `at`, at most 9 digits
    size_t j = at;
    long v = 0;
    while (j < s.size() && j - at < 9 && s[j] >= '0' && s[j] <= '9') v = v * 10 + (s[j++] - '0');
    if (j == at || j >= s.size() || s[j] != ']') return -1;
    end = j + 1;
    return v;
  };
  while (i < s.size()) {
    size_t end = 0;
    if (s.compare(i, 9, "messages[") == 0) {
      const long k = index_at(i + 9, end);
      if (k >= 0 && static_cast<size_t>(k) < where.size()) {
        out += where[static_cast<size_t>(k)];
        i = end;
        continue;
      }
    }
    if (s.compare(i, 6, "tools[") == 0) {
      const long k = index_at(i + 6, end);
      if (k >= 0 && s.compare(end, 9, ".function") == 0) {
        out += "tools[" + std::to_string(k) + "]";
        i = end + 9;
        continue;
      }
    }
    bool replaced = false;
    for (auto [from, to] : {std::pair<const char*, const char*>{"response_format.json_schema.schema", "text.format.schema"},
                            {"response_format", "text.format"}, {"max_tokens", "max_output_tokens"}}) {
      const size_t n = std::char_traits<char>::length(from);
      if (s.compare(i, n, from) == 0) {
        out += to;
        i += n;
        replaced = true;
        break;
      }
    }
    if (!replaced) out += s[i++];
  }
  return out;
}

}  // namespace

Result<std::string> read_previous_response_id(const json& body) {
  std::string id;
  QVL_RETURN_IF_ERROR(read_string(body, "previous_response_id", id));
  return id;
}

Result<ResponsesRequest> parse_responses(const json& body, const json& history, const GenerateOptions& defaults) {
  ResponsesRequest r;
  QVL_ASSIGN_OR_RETURN(r.previous_response_id, read_previous_response_id(body));
  QVL_RETURN_IF_ERROR(read_string(body, "instructions", r.instructions));
  QVL_RETURN_IF_ERROR(read_bool(body, "store", r.store));
  for (const char* key : {"background"}) {
    bool on = false;
    QVL_RETURN_IF_ERROR(read_bool(body, key, on));
    if (on) return Status::Error("background: not supported; leave it out (responses are answered in the request)");
  }
  for (const char* key : {"conversation", "prompt"})
    if (auto it = body.find(key); it != body.end() && !it->is_null())
      return Status::Error(std::string(key) + ": not supported; continue a conversation with previous_response_id");
  json repeated = json::object();  // accepted, changing nothing, and repeated in the response
  for (const char* key : {"user", "safety_identifier", "prompt_cache_key", "service_tier"}) {
    std::string value;
    QVL_RETURN_IF_ERROR(read_string(body, key, value));
    if (body.contains(key) && !body[key].is_null()) repeated[key] = value;
  }
  std::string truncation = "disabled";
  QVL_RETURN_IF_ERROR(read_string(body, "truncation", truncation));
  if (truncation != "disabled" && truncation != "auto")
    return Status::Error("truncation: expected \"disabled\" or \"auto\", got '" + clip(truncation) + "'");
  if (auto m = body.find("metadata"); m != body.end() && !m->is_null()) {
    if (!m->is_object() || m->size() > 16) return Status::Error("metadata: expected an object of at most 16 string values");
    for (const auto& [k, v] : m->items())
      if (!v.is_string() || k.size() > 64 || v.get<std::string>().size() > 512)
        return Status::Error("metadata." + clip(k) + ": expected a string of at most 512 characters (keys at most 64)");
  }
  if (auto rs = body.find("reasoning"); rs != body.end() && !rs->is_null()) {
    // Accepted for clients that always send it; a Thinking model reasons as its template says.
    if (!rs->is_object()) return Status::Error("reasoning: expected an object such as {\"effort\": \"medium\"}");
    std::string effort, summary;
    QVL_RETURN_IF_ERROR(read_string(*rs, "effort", effort, "reasoning"));
    if (!effort.empty() && effort != "none" && effort != "minimal" && effort != "low" && effort != "medium" && effort != "high")
      return Status::Error("reasoning.effort: expected none, minimal, low, medium or high, got '" + clip(effort) + "'");
    QVL_RETURN_IF_ERROR(read_string(*rs, "summary", summary, "reasoning"));
    repeated["reasoning"] = json{{"effort", effort.empty() ? json(nullptr) : json(effort)},
                                 {"summary", summary.empty() ? json(nullptr) : json(summary)}};
  }
  if (auto inc = body.find("include"); inc != body.end() && !inc->is_null()) {
    if (!inc->is_array()) return Status::Error("include: expected a list of strings");
    for (size_t i = 0; i < inc->size(); ++i) {
      const json& v = (*inc)[i];
      const std::string s = v.is_string() ? v.get<std::string>() : v.dump();
      if (s == "message.output_text.logprobs") r.logprobs = true;
      else if (s != "message.input_image.image_url" && s != "reasoning.encrypted_content")
        return Status::Error("include[" + std::to_string(i) + "]: '" + clip(s) + "' is not supported; expected "
                             "message.output_text.logprobs");
    }
  }
  int64_t top_logprobs = 0;
  QVL_RETURN_IF_ERROR(read_int(body, "top_logprobs", top_logprobs));
  if (top_logprobs < 0 || top_logprobs > kMaxTopLogprobs)
    return Status::Error("top_logprobs: expected 0 to " + std::to_string(kMaxTopLogprobs) + ", got " + std::to_string(top_logprobs));
  int max_output = defaults.max_tokens;
  QVL_RETURN_IF_ERROR(read_max_tokens(body, "max_output_tokens", max_output));

  // The conversation: instructions, the previous response's messages, this input.
  if (!history.is_array()) return Status::Error("previous_response_id: the stored conversation is not a list");
  json messages = json::array();
  std::vector<std::string> where;
  if (!r.instructions.empty()) {
    messages.push_back(json{{"role", "system"}, {"content", r.instructions}});
    where.push_back("instructions");
  }
  for (size_t k = 0; k < history.size(); ++k) {
    messages.push_back(history[k]);
    where.push_back("the conversation of previous_response_id '" + r.previous_response_id + "', message " + std::to_string(k));
  }
  const auto input = body.find("input");
  if (input == body.end() || input->is_null())
    return Status::Error("input: missing; expected a string or a list of input items");
  const size_t first_input = messages.size();
  json this_input = json::array();
  {
    std::vector<std::string> input_where;
    QVL_RETURN_IF_ERROR(input_messages(*input, this_input, input_where));
    for (auto& m : this_input) messages.push_back(m);
    where.insert(where.end(), input_where.begin(), input_where.end());
  }
  QVL_CHECK(where.size() == messages.size() && messages.size() == first_input + this_input.size());

  json chat{{"messages", std::move(messages)}};
  for (const char* key : {"model", "temperature", "top_p", "top_k", "min_p", "seed", "stop", "presence_penalty",
                          "frequency_penalty", "repetition_penalty", "parallel_tool_calls", "stream"})
    if (auto it = body.find(key); it != body.end()) chat[key] = *it;
  chat["max_tokens"] = max_output;
  if (auto t = body.find("tools"); t != body.end() && !t->is_null()) {
    QVL_ASSIGN_OR_RETURN(chat["tools"], chat_tools(*t));
  }
  if (auto tc = body.find("tool_choice"); tc != body.end() && !tc->is_null()) {
    if (tc->is_object() && item_type(*tc) == "function") {
      QVL_ASSIGN_OR_RETURN(std::string name, required_string(*tc, "name", "tool_choice"));
      chat["tool_choice"] = json{{"type", "function"}, {"function", json{{"name", name}}}};
    } else if (tc->is_string()) {
      chat["tool_choice"] = *tc;
    } else {
      return Status::Error("tool_choice: expected \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"name\": ...}, got " +
                           tc->dump().substr(0, 80));
    }
  }
  if (auto t = body.find("text"); t != body.end() && !t->is_null()) {
    if (!t->is_object()) return Status::Error("text: expected an object such as {\"format\": {\"type\": \"json_object\"}}");
    if (auto f = t->find("format"); f != t->end() && !f->is_null()) {
      if (!f->is_object()) return Status::Error("text.format: expected an object such as {\"type\": \"json_object\"}");
      const std::string type = item_type(*f);
      if (type == "json_schema") {
        QVL_ASSIGN_OR_RETURN(std::string name, required_string(*f, "name", "text.format"));
        if (!f->contains("schema")) return Status::Error("text.format.schema: missing; give the JSON schema the answer must follow");
        chat["response_format"] = json{{"type", "json_schema"}, {"json_schema", json{{"name", name}, {"schema", (*f)["schema"]}}}};
      } else if (type == "json_object" || type == "text") {
        chat["response_format"] = json{{"type", type}};
      } else {
        return Status::Error("text.format.type: expected text, json_object or json_schema, got '" + clip(type) + "'");
      }
    }
  }
  auto parsed = parse_chat_completion(chat, defaults);
  if (!parsed.ok()) return Status::Error(rename(parsed.status().message(), where));
  r.chat = std::move(parsed).value();
  for (auto& [ref, w] : r.chat.images) w = rename(w, where);
  for (VideoRef& v : r.chat.videos) v.where = rename(v.where, where);
  for (DocumentRef& d : r.chat.documents) d.where = rename(d.where, where);
  for (std::string& w : r.chat.warnings) w = rename(w, where);
  r.chat.options.logprobs = r.logprobs ? static_cast<int>(top_logprobs) : -1;
  r.input = std::move(this_input);
  r.input_items = input_items_of(*input);

  // What the response object repeats.
  bool parallel_calls = true;
  QVL_RETURN_IF_ERROR(read_bool(body, "parallel_tool_calls", parallel_calls));
  r.echo = json{{"instructions", r.instructions.empty() ? json(nullptr) : json(r.instructions)},
                {"max_output_tokens", body.contains("max_output_tokens") ? body["max_output_tokens"] : json(nullptr)},
                {"metadata", body.contains("metadata") && !body["metadata"].is_null() ? body["metadata"] : json::object()},
                {"parallel_tool_calls", parallel_calls},
                {"temperature", std::round(r.chat.options.sampling.temperature * 1e6) / 1e6},
                {"top_p", std::round(r.chat.options.sampling.top_p * 1e6) / 1e6},
                {"tool_choice", body.contains("tool_choice") && !body["tool_choice"].is_null() ? body["tool_choice"] : json("auto")},
                {"tools", body.contains("tools") && !body["tools"].is_null() ? body["tools"] : json::array()},
                {"text", body.contains("text") && !body["text"].is_null() ? body["text"] : json{{"format", json{{"type", "text"}}}}},
                {"top_logprobs", top_logprobs},
                {"truncation", truncation}};
  for (auto& [k, v] : repeated.items()) r.echo[k] = v;
  return r;
}

}  // namespace qvl::server
