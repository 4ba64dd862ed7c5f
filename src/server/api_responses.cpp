// The OpenAI Responses API: POST /v1/responses (plain or streamed as the documented events), GET
// /v1/responses/{id} for a stored one. A response's output is a list of items: the reasoning of a Thinking
// model, the assistant's message (output_text, with logprobs when included) and function calls. Stored
// responses (store: true, the default) keep their conversation so that a follow-up sends only its new turn
// with previous_response_id; its prompt then starts with the same tokens, which the prefix cache restores.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <unordered_map>

#include "server/api.h"
#include "server/logprobs_json.h"
#include "server/openai_shapes.h"
#include "server/responses_request.h"
#include "chat/reasoning.h"
#include "chat/tool_calls.h"

namespace qvl::server {

namespace {

json usage_of(const GenerateTimings& t, int reasoning_tokens) {
  return json{{"input_tokens", t.prompt_tokens},
              {"input_tokens_details", json{{"cached_tokens", t.cached_tokens}}},
              {"output_tokens", t.generated_tokens},
              {"output_tokens_details", json{{"reasoning_tokens", reasoning_tokens}}},
              {"total_tokens", t.prompt_tokens + t.generated_tokens}};
}

// What one response is made of, built as the answer arrives (streamed) or at once, and turned into the
// response object, the stream's events and the stored conversation.
class ResponseBuilder {
 public:
  ResponseBuilder(json base, const Tokenizer* tok, bool logprobs) : base_(std::move(base)), tok_(tok), logprobs_(logprobs) {}

  // Each returns the events it causes (server-sent events; empty when not streaming).
  std::string reasoning(std::string_view text) {
    if (text.empty()) return {};
    std::string out;
    if (open_ != Open::kReasoning) {
      out += close();
      open_ = Open::kReasoning;
      item_id_ = random_id("rs_");
      out += event("response.output_item.added", {{"output_index", output_.size()},
                    {"item", json{{"id", item_id_}, {"type", "reasoning"}, {"summary", json::array()}, {"content", json::array()}}}});
      out += event("response.content_part.added", {{"item_id", item_id_}, {"output_index", output_.size()}, {"content_index", 0},
                                                   {"part", json{{"type", "reasoning_text"}, {"text", ""}}}});
    }
    text_ += text;
    reasoning_text_ += text;
    return out + event("response.reasoning_text.delta", {{"item_id", item_id_}, {"output_index", output_.size()},
                                                         {"content_index", 0}, {"delta", std::string(text)}});
  }

  std::string message(std::string_view text, const std::vector<TokenLogprob>& lps = {}) {
    pending_lps_.insert(pending_lps_.end(), lps.begin(), lps.end());
    if (text.empty()) return {};
    std::string out = open_message();
    text_ += text;
    prose_ += text;
    json entries = take_logprobs();
    json payload{{"item_id", item_id_}, {"output_index", output_.size()}, {"content_index", 0}, {"delta", std::string(text)}};
    if (logprobs_) payload["logprobs"] = std::move(entries);
    return out + event("response.output_text.delta", std::move(payload));
  }

  std::string open_message() {
    if (open_ == Open::kMessage) return {};
    std::string out = close();
    open_ = Open::kMessage;
    item_id_ = random_id("msg_");
    out += event("response.output_item.added",
                 {{"output_index", output_.size()},
                  {"item", json{{"id", item_id_}, {"type", "message"}, {"status", "in_progress"}, {"role", "assistant"},
                                {"content", json::array()}}}});
    out += event("response.content_part.added", {{"item_id", item_id_}, {"output_index", output_.size()}, {"content_index", 0},
                                                 {"part", text_part("", json::array())}});
    return out;
  }

  std::string call(const ParsedToolCall& c) {
    std::string out = close();
    const std::string args = c.arguments.dump();
    json item{{"id", random_id("fc_")}, {"type", "function_call"}, {"status", "in_progress"}, {"arguments", ""},
              {"call_id", random_id("call_")}, {"name", c.name}};
    out += event("response.output_item.added", {{"output_index", output_.size()}, {"item", item}});
    out += event("response.function_call_arguments.delta", {{"item_id", item["id"]}, {"output_index", output_.size()}, {"delta", args}});
    out += event("response.function_call_arguments.done",
                 {{"item_id", item["id"]}, {"output_index", output_.size()}, {"name", c.name}, {"arguments", args}});
    item["status"] = "completed";
    item["arguments"] = args;
    out += event("response.output_item.done", {{"output_index", output_.size()}, {"item", item}});
    calls_.push_back(json{{"id", item["call_id"]}, {"type", "function"}, {"function", json{{"name", c.name}, {"arguments", args}}}});
    output_.push_back(std::move(item));
    return out;
  }

  // The end: the open item closed (an answer of nothing is an empty message), the response object complete.
  std::string finish(const JobUpdate& end) {
    std::string out;  // end.logprobs came with the last text already (stream_job hands them to text() first)
    const bool incomplete = end.result.finish == FinishReason::kLength;
    // An empty answer is still a message item, unless the tokens ran out while the model was still reasoning.
    if (prose_.empty() && calls_.empty() && !(incomplete && open_ == Open::kReasoning)) out += open_message();
    out += close(incomplete ? "incomplete" : "completed");
    const GenerateTimings& t = end.result.timings;
    response_ = base_;
    response_["status"] = incomplete ? "incomplete" : "completed";
    response_["incomplete_details"] = incomplete ? json{{"reason", "max_output_tokens"}} : json(nullptr);
    response_["output"] = output_;
    const int reasoning_tokens = reasoning_text_.empty() ? 0 : static_cast<int>(tok_->encode(reasoning_text_).size());
    response_["usage"] = usage_of(t, std::min(reasoning_tokens, t.generated_tokens));
    return out;
  }

  const json& response() const { return response_; }
  // The assistant's turn in chat-completions form, for the stored conversation.
  json assistant_message() const {
    json m{{"role", "assistant"}, {"content", prose_}};
    if (!calls_.empty()) m["tool_calls"] = calls_;
    if (!reasoning_text_.empty()) m["reasoning_content"] = reasoning_text_;
    return m;
  }
  // Events are written only when streaming.
  void set_streaming(bool on) { streaming_ = on; }
  std::string event(const char* type, json payload) {
    if (!streaming_) return {};
    json j{{"type", type}, {"sequence_number", seq_++}};
    for (auto& [k, v] : payload.items()) j[k] = v;
    return std::string("event: ") + type + "\ndata: " + dump_json(j) + "\n\n";
  }

 private:
  enum class Open { kNone, kReasoning, kMessage };

  json text_part(const std::string& text, json lps) const {
    json p{{"type", "output_text"}, {"text", text}, {"annotations", json::array()}};
    if (logprobs_) p["logprobs"] = std::move(lps);
    return p;
  }
  json take_logprobs() {
    json e = logprobs_ ? logprob_entries(*tok_, pending_lps_) : json::array();
    for (const auto& x : e) message_lps_.push_back(x);
    pending_lps_.clear();
    return e;
  }

  // Closes the open item; a message item gets `status` ("incomplete" when the tokens ran out in it).
  std::string close(const char* status = "completed") {
    std::string out;
    const size_t index = output_.size();
    if (open_ == Open::kReasoning) {
      json part{{"type", "reasoning_text"}, {"text", text_}};
      out += event("response.reasoning_text.done", {{"item_id", item_id_}, {"output_index", index}, {"content_index", 0}, {"text", text_}});
      out += event("response.content_part.done", {{"item_id", item_id_}, {"output_index", index}, {"content_index", 0}, {"part", part}});
      json item{{"id", item_id_}, {"type", "reasoning"}, {"summary", json::array()}, {"content", json::array({part})}};
      out += event("response.output_item.done", {{"output_index", index}, {"item", item}});
      output_.push_back(std::move(item));
    } else if (open_ == Open::kMessage) {
      if (!pending_lps_.empty()) take_logprobs();  // tokens whose text was held back until the end
      const std::string text = text_;
      json part = text_part(text, message_lps_);
      json done{{"item_id", item_id_}, {"output_index", index}, {"content_index", 0}, {"text", text}};
      if (logprobs_) done["logprobs"] = message_lps_;
      out += event("response.output_text.done", std::move(done));
      out += event("response.content_part.done", {{"item_id", item_id_}, {"output_index", index}, {"content_index", 0}, {"part", part}});
      json item{{"id", item_id_}, {"type", "message"}, {"status", status}, {"role", "assistant"}, {"content", json::array({part})}};
      out += event("response.output_item.done", {{"output_index", index}, {"item", item}});
      output_.push_back(std::move(item));
      message_lps_ = json::array();
    }
    open_ = Open::kNone;
    text_.clear();
    return out;
  }

  json base_;
  const Tokenizer* tok_;
  bool logprobs_;
  bool streaming_ = false;
  int seq_ = 0;
  Open open_ = Open::kNone;
  std::string item_id_, text_;  // the open item's id and text
  std::string prose_, reasoning_text_;
  json output_ = json::array(), calls_ = json::array(), message_lps_ = json::array();
  std::vector<TokenLogprob> pending_lps_;
  json response_;
};

// The store keeps an input item's media (an input_image's image_url, an input_video's video_url, an input_file's
// file_data: data URIs of megabytes) once, in the conversation's chat messages; its input items hold a key of each.
const char* const kMediaFields[][2] = {{"input_image", "image_url"}, {"input_video", "video_url"}, {"input_file", "file_data"}};

std::string media_key(const std::string& value) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "qvl-media:%016zx", std::hash<std::string>{}(value));
  return buf;
}

// Calls f(part, field) for each media field of the items' content parts: a message's content, a function call
// output's output.
template <class F>
void for_each_media(json& items, F f) {
  for (json& item : items) {
    if (!item.is_object()) continue;
    const std::string type = item.value("type", "");
    const char* parts = type == "message" ? "content" : type == "function_call_output" ? "output" : nullptr;
    if (!parts || !item.contains(parts) || !item[parts].is_array()) continue;
    for (json& part : item[parts]) {
      if (!part.is_object()) continue;
      for (const auto& [type, field] : kMediaFields)
        if (part.value("type", "") == type && part.contains(field) && part[field].is_string()) f(part, std::string(field));
    }
  }
}

void by_reference(json& items) {
  for_each_media(items, [](json& part, const std::string& field) { part[field] = media_key(part[field].get<std::string>()); });
}

ApiError not_found(const std::string& id, const char* param) {
  return {404, "no stored response '" + id + "': it is unknown, was stored with store: false, or was evicted (the server keeps "
               "--response-store-mb of them); send the whole conversation as input instead",
          "response_not_found", param};
}

void create_response(ApiContext& ctx, const http::Request& req, http::Response& res) {
  auto fail = [&](const ApiError& e) { send_error(res, ApiFamily::kOpenAI, e); };
  if (auto e = check_ready(ctx, ModelKind::kChat)) return fail(*e);
  auto body = parse_json_body(req);
  if (!body.ok()) return fail({400, body.status().message()});
  auto previous = read_previous_response_id(*body);
  if (!previous.ok()) return fail({400, previous.status().message(), "", "previous_response_id"});
  json history = json::array();
  json items = json::array();  // what the model is given: the previous response's input items and output, then this input
  if (!previous->empty()) {
    auto stored = ctx.responses ? ctx.responses->get(*previous) : std::nullopt;
    if (!stored) return fail(not_found(*previous, "previous_response_id"));
    history = std::move(stored->messages);
    items = std::move(stored->input_items);
    for (auto& item : stored->response["output"]) items.push_back(std::move(item));
  }
  auto parsed = parse_responses(*body, history, ctx.defaults);
  if (!parsed.ok()) return fail({400, parsed.status().message()});
  ResponsesRequest& r = *parsed;
  auto reasoning = show_reasoning(ctx, r.chat.think, "reasoning");
  if (!reasoning.ok()) return fail({400, reasoning.status().message()});
  const bool thinking = chat_template(ctx) == ChatTemplateKind::kThinking, show = *reasoning;
  const bool stream = r.chat.stream, tools = r.chat.tool_calls;

  InferenceRequest ir;
  if (auto e = make_inference_request(ctx, r.chat.images, std::move(r.chat.messages), std::move(r.chat.options), ir,
                                      r.chat.pages, r.chat.videos, r.chat.documents))
    return fail(*e);
  const std::string id = random_id("resp_");
  json base{{"id", id}, {"object", "response"}, {"created_at", unix_now()}, {"status", "in_progress"},
            {"background", false}, {"error", nullptr}, {"incomplete_details", nullptr},
            {"reasoning", json{{"effort", nullptr}, {"summary", nullptr}}}, {"user", nullptr}};
  for (auto& [k, v] : r.echo.items()) base[k] = v;  // what the request set, repeated
  base["model"] = r.chat.model.empty() ? ctx.options.model_id : r.chat.model;
  base["output"] = json::array();
  base["previous_response_id"] = r.previous_response_id.empty() ? json(nullptr) : json(r.previous_response_id);
  base["store"] = r.store;
  base["usage"] = nullptr;
  if (!r.chat.warnings.empty()) base["warnings"] = r.chat.warnings;

  const http::PeerWatch& watch = req.peer;
  Admitted a = submit_and_wait_start(ctx, std::move(ir), watch);
  if (a.error) return fail(*a.error);
  const Tokenizer* tok = &ctx.scheduler.model()->tokenizer();
  auto b = std::make_shared<ResponseBuilder>(base, tok, r.logprobs);
  // The conversation a follow-up continues: the previous one, this input, this answer.
  json conversation = std::move(history);
  for (auto& m : r.input) conversation.push_back(std::move(m));
  by_reference(r.input_items);  // the previous items' media are keys already
  for (auto& item : r.input_items) items.push_back(std::move(item));
  ResponseStore* store = r.store ? ctx.responses : nullptr;
  auto keep = [store, id, conversation, items](const ResponseBuilder& rb) mutable {
    if (!store) return;
    conversation.push_back(rb.assistant_message());
    store->put(id, ResponseStore::Entry{rb.response(), std::move(conversation), std::move(items)});
  };
  // The answer's text through the splitters: reasoning (a Thinking model), tool calls, then prose.
  auto thoughts = thinking ? std::make_shared<ReasoningStream>() : nullptr;
  auto calls = tools ? std::make_shared<ToolCallStream>() : nullptr;
  auto answer = [b, calls](std::string_view text, const std::vector<TokenLogprob>& lps) {
    std::string out = b->message(calls ? calls->push(text) : std::string(text), lps);
    if (calls)
      for (const ParsedToolCall& c : calls->take_calls()) out += b->call(c);
    return out;
  };
  auto feed = [b, thoughts, answer, show](std::string_view text, const std::vector<TokenLogprob>& lps) {
    if (!thoughts) return answer(text, lps);
    ReasoningStream::Delta d = thoughts->push(text);
    std::string out = show ? b->reasoning(d.reasoning) : std::string();  // before the answer's events
    return out + answer(d.content, lps);
  };
  auto drain = [b, thoughts, calls, answer, show]() {
    std::string out;
    if (thoughts) {
      ReasoningStream::Delta d = thoughts->finish();
      if (show) out += b->reasoning(d.reasoning);
      out += answer(d.content, {});
    }
    if (calls) {
      out += b->message(calls->finish());
      for (const ParsedToolCall& c : calls->take_calls()) out += b->call(c);
    }
    return out;
  };

  if (!stream) {
    bool gone = false;
    JobUpdate end = wait_for_end(a, watch, gone);
    if (gone) return fail({499, "the client went away", "cancelled"});
    if (end.error != JobError::kNone) return fail(job_error(end));
    feed(end.result.text, end.result.logprobs);
    drain();
    b->finish(end);
    keep(*b);
    json out = b->response();
    out["timings"] = timings_json(end);
    return send_json(res, 200, out);
  }

  b->set_streaming(true);
  StreamFormat f;
  json created = base;
  f.start = b->event("response.created", {{"response", created}});  // two statements: the sequence numbers in order
  f.start += b->event("response.in_progress", {{"response", created}});
  f.text = feed;
  f.done = [b, drain, keep](const JobUpdate& end) mutable {
    std::string out = drain();
    out += b->finish(end);
    keep(*b);
    json r = b->response();
    r["timings"] = timings_json(end);
    const bool incomplete = r["status"] == "incomplete";
    return out + b->event(incomplete ? "response.incomplete" : "response.completed", {{"response", r}});
  };
  f.error = [b, base](const ApiError& e) {
    json r = base;
    r["status"] = "failed";
    r["error"] = json{{"code", e.code.empty() ? std::string("server_error") : e.code}, {"message", e.message}};
    return b->event("response.failed", {{"response", r}});
  };
  stream_job(res, "text/event-stream", std::move(a), watch, std::move(f));
}

// GET /v1/responses/{id}/input_items: OpenAI's list of the items the model was given, newest first unless
// order=asc, `limit` (1-100, default 20) at a time after the item `after`; input images' URLs only with
// include=message.input_image.image_url (data URIs are large), input files' data never.
void list_input_items(const std::string& id, const ResponseStore::Entry& stored, const http::Request& req,
                      http::Response& res) {
  const json& items = stored.input_items;
  auto fail = [&](const std::string& msg, const char* param) {
    send_error(res, ApiFamily::kOpenAI, {400, msg, "", param});
  };
  std::vector<std::pair<std::string, std::string>> query;
  if (!http::parse_query(req.query, query))
    return fail("the query string is malformed: a '%' not followed by two hex digits, a control character or bytes that "
                "are not UTF-8", "");
  int64_t limit = 20;
  bool ascending = false, image_urls = false;
  std::string after;
  for (const auto& [name, value] : query) {
    if (name == "limit") {
      char* end = nullptr;
      const bool digits = !value.empty() && value.size() <= 9 &&
                          std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; });
      limit = digits ? std::strtoll(value.c_str(), &end, 10) : 0;
      if (limit < 1 || limit > 100)
        return fail("limit: expected an integer from 1 to 100, got '" + value.substr(0, 40) + "'", "limit");
    } else if (name == "order") {
      if (value != "asc" && value != "desc") return fail("order: expected asc or desc, got '" + value.substr(0, 40) + "'", "order");
      ascending = value == "asc";
    } else if (name == "after") {
      after = value;
    } else if (name == "include" || name == "include[]") {
      if (value == "message.input_image.image_url") image_urls = true;
      else if (value != "message.output_text.logprobs" && value != "reasoning.encrypted_content")
        return fail("include: '" + value.substr(0, 60) + "' is not supported; expected message.input_image.image_url",
                    "include");
    }  // other parameters are ignored, as OpenAI ignores them
  }
  std::vector<const json*> order;
  for (const json& item : items) order.push_back(&item);
  if (!ascending) std::reverse(order.begin(), order.end());
  size_t first = 0;
  if (!after.empty()) {
    while (first < order.size() && (*order[first]).value("id", "") != after) ++first;
    if (first == order.size())
      return fail("after: no input item '" + after.substr(0, 60) + "' in response '" + id + "'", "after");
    ++first;
  }
  json data = json::array();
  for (size_t k = first; k < order.size() && static_cast<int64_t>(data.size()) < limit; ++k) data.push_back(*order[k]);
  // The images' URLs from the chat messages, by key, when asked for; other inline media are not repeated.
  std::unordered_map<std::string, std::string> urls;
  if (image_urls)
    for (const json& m : stored.messages)
      if (m.contains("content") && m["content"].is_array())
        for (const json& part : m["content"])
          if (part.is_object() && part.value("type", "") == "image_url" && part.contains("image_url") &&
              part["image_url"].is_object() && part["image_url"].contains("url") && part["image_url"]["url"].is_string()) {
            const std::string url = part["image_url"]["url"];
            urls.emplace(media_key(url), url);
          }
  for_each_media(data, [&](json& part, const std::string& field) {
    const auto it = urls.find(part[field].get<std::string>());
    part[field] = field == "image_url" && it != urls.end() ? json(it->second) : json(nullptr);
  });
  const bool more = first + data.size() < order.size();
  json out{{"object", "list"}, {"data", data},
           {"first_id", data.empty() ? json(nullptr) : data.front()["id"]},
           {"last_id", data.empty() ? json(nullptr) : data.back()["id"]}, {"has_more", more}};
  send_json(res, 200, out);
}

void get_response(ApiContext& ctx, const http::Request& req, http::Response& res) {
  // {id} or {id}/input_items (response ids hold no '/': "resp_" and hex digits).
  static const std::string kItems = "/input_items";
  std::string id = req.path_param;
  const bool items = id.size() > kItems.size() && id.compare(id.size() - kItems.size(), kItems.size(), kItems) == 0;
  if (items) id.resize(id.size() - kItems.size());
  auto stored = ctx.responses ? ctx.responses->get(id) : std::nullopt;
  if (!stored) return send_error(res, ApiFamily::kOpenAI, not_found(id, "response_id"));
  if (items) return list_input_items(id, *stored, req, res);
  send_json(res, 200, stored->response);
}

// DELETE /v1/responses/{id}: the stored response is forgotten (it can no longer be continued or listed), as
// OpenAI answers: {"id", "object": "response", "deleted": true}.
void delete_response(ApiContext& ctx, const http::Request& req, http::Response& res) {
  if (!ctx.responses || !ctx.responses->erase(req.path_param))
    return send_error(res, ApiFamily::kOpenAI, not_found(req.path_param, "response_id"));
  send_json(res, 200, json{{"id", req.path_param}, {"object", "response"}, {"deleted", true}});
}

}  // namespace

void add_responses_routes(http::Router& routes, ApiContext& ctx) {
  routes.post("/v1/responses", [&ctx](const http::Request& req, http::Response& res) { create_response(ctx, req, res); });
  routes.get_prefix("/v1/responses/", [&ctx](const http::Request& req, http::Response& res) { get_response(ctx, req, res); });
  routes.del_segment("/v1/responses/", [&ctx](const http::Request& req, http::Response& res) { delete_response(ctx, req, res); });
}

}  // namespace qvl::server
