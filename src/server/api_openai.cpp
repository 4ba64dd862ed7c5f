// The OpenAI-compatible API, POST /v1/chat/completions (streaming or not, images as image_url parts) and
// GET /v1/models: request JSON becomes an InferenceRequest here and responses follow OpenAI's shapes.
#include <chrono>
#include <cstdio>

#include "server/api.h"
#include "tokenizer/chat_json.h"

namespace qvl::server {

namespace {

struct ChatCompletionRequest {
  std::string model;
  std::vector<ChatMessage> messages;
  std::vector<std::pair<std::string, std::string>> images;  // (reference, where), in prompt order
  GenerateOptions options;
  bool stream = false;
  bool include_usage = false;
};

std::string type_of(const json& part) {
  auto it = part.find("type");
  return it != part.end() && it->is_string() ? it->get<std::string>() : "";
}

// The image reference of an image part: {"type": "image_url", "image_url": {"url": ...}} (OpenAI), with
// "image_url" a bare string, or {"type": "image", "image": ...} (transformers).
Result<std::string> image_ref(const json& part, const std::string& where) {
  const char* hint = "; expected {\"type\": \"image_url\", \"image_url\": {\"url\": \"data:image/jpeg;base64,...\"}}";
  if (auto it = part.find("image_url"); it != part.end()) {
    if (it->is_string()) return it->get<std::string>();
    if (it->is_object()) {
      auto url = it->find("url");
      if (url != it->end() && url->is_string()) return url->get<std::string>();
    }
    return Status::Error(where + ".image_url: expected an object with a string \"url\"" + hint);
  }
  if (auto it = part.find("image"); it != part.end() && it->is_string()) return it->get<std::string>();
  return Status::Error(where + ": an image part without an image" + hint);
}

// Collects the image references in the order the chat template emits them and refuses what the model
// cannot take (video, audio, files).
Status collect_images(const json& messages, ChatCompletionRequest& out) {
  for (size_t i = 0; i < messages.size(); ++i) {
    const json& content = messages[i].is_object() && messages[i].contains("content") ? messages[i]["content"] : json();
    if (!content.is_array()) continue;
    for (size_t j = 0; j < content.size(); ++j) {
      const json& part = content[j];
      const std::string where = "messages[" + std::to_string(i) + "].content[" + std::to_string(j) + "]";
      if (!part.is_object()) continue;  // chat_messages_from_json reports it
      const std::string type = type_of(part);
      // The same test, in the same order, as the chat template (and chat_messages_from_json).
      if (type == "image" || part.contains("image") || part.contains("image_url")) {
        QVL_ASSIGN_OR_RETURN(std::string ref, image_ref(part, where));
        out.images.emplace_back(std::move(ref), where + (part.contains("image_url") ? ".image_url" : ".image"));
      } else if (type == "video" || part.contains("video")) {
        return Status::Error(where + ": video input is not supported; send frames as images");
      } else if (!type.empty() && type != "text") {
        return Status::Error(where + ".type: '" + type + "' is not supported; use \"text\" or \"image_url\"");
      }
    }
  }
  return Status::Ok();
}

Result<ChatCompletionRequest> parse_chat_completion(const json& body, const GenerateOptions& defaults) {
  ChatCompletionRequest r;
  r.options = defaults;
  QVL_RETURN_IF_ERROR(read_string(body, "model", r.model));
  auto msgs = body.find("messages");
  if (msgs == body.end()) return Status::Error("messages: missing; expected a list of {\"role\", \"content\"}");
  if (!msgs->is_array() || msgs->empty()) return Status::Error("messages: expected a non-empty list of messages");
  QVL_ASSIGN_OR_RETURN(r.messages, chat_messages_from_json(*msgs));
  for (size_t i = 0; i < r.messages.size(); ++i) {
    std::string& role = r.messages[i].role;
    if (role == "developer") role = "system";
    if (role != "system" && role != "user" && role != "assistant" && role != "tool") {
      return Status::Error("messages[" + std::to_string(i) + "].role: '" + role +
                           "' is not a role; expected system, user, assistant or tool");
    }
  }
  QVL_RETURN_IF_ERROR(collect_images(*msgs, r));
  if (auto tools = body.find("tools"); tools != body.end()) {
    QVL_ASSIGN_OR_RETURN(r.options.chat.tools, chat_tools_from_json(*tools));
  }

  QVL_RETURN_IF_ERROR(read_bool(body, "stream", r.stream));
  if (auto so = body.find("stream_options"); so != body.end() && !so->is_null()) {
    if (!so->is_object()) return Status::Error("stream_options: expected an object such as {\"include_usage\": true}");
    QVL_RETURN_IF_ERROR(read_bool(*so, "include_usage", r.include_usage, "stream_options"));
  }
  QVL_RETURN_IF_ERROR(read_max_tokens(body, "max_tokens", r.options.max_tokens));
  QVL_RETURN_IF_ERROR(read_max_tokens(body, "max_completion_tokens", r.options.max_tokens));
  SamplingParams& sp = r.options.sampling;
  QVL_RETURN_IF_ERROR(read_float(body, "temperature", sp.temperature));
  QVL_RETURN_IF_ERROR(read_float(body, "top_p", sp.top_p));
  QVL_RETURN_IF_ERROR(read_float(body, "min_p", sp.min_p));
  QVL_RETURN_IF_ERROR(read_float(body, "presence_penalty", sp.presence_penalty));
  QVL_RETURN_IF_ERROR(read_float(body, "frequency_penalty", sp.frequency_penalty));
  QVL_RETURN_IF_ERROR(read_float(body, "repetition_penalty", sp.repetition_penalty));
  int64_t top_k = sp.top_k;
  QVL_RETURN_IF_ERROR(read_int(body, "top_k", top_k));
  if (top_k == -1) top_k = 0;  // vLLM's "off"
  if (top_k < 0 || top_k > (1 << 30)) return Status::Error("top_k: must be >= 0 (or -1: off), got " + std::to_string(top_k));
  sp.top_k = static_cast<int>(top_k);
  int64_t seed = 0;
  sp.seed = random_seed();
  if (body.contains("seed") && !body["seed"].is_null()) {
    QVL_RETURN_IF_ERROR(read_int(body, "seed", seed));
    sp.seed = static_cast<uint64_t>(seed);
  }
  QVL_RETURN_IF_ERROR(read_stop(body, "stop", r.options.stop));
  if (Status s = sp.validate(); !s.ok()) return s;

  int64_t n = 1;
  QVL_RETURN_IF_ERROR(read_int(body, "n", n));
  if (n != 1) return Status::Error("n: only 1 choice per request is supported, got " + std::to_string(n));
  bool logprobs = false;
  QVL_RETURN_IF_ERROR(read_bool(body, "logprobs", logprobs));
  if (logprobs) return Status::Error("logprobs: not supported; leave it out or set it to false");
  if (auto rf = body.find("response_format"); rf != body.end() && rf->is_object()) {
    const std::string type = type_of(*rf);
    if (!type.empty() && type != "text") {
      return Status::Error("response_format: '" + type + "' is not supported; only plain text output is");
    }
  }
  return r;
}

std::string random_id(const char* prefix) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(random_seed()));
  return std::string(prefix) + buf;
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

double per_second(int n, double ms) { return ms > 0 ? n * 1000.0 / ms : 0.0; }

// Per-request timings (llama.cpp's names where they exist). ttft_ms counts from the request's arrival.
json timings_json(const JobUpdate& u) {
  const GenerateTimings& t = u.result.timings;
  json j;
  j["prompt_n"] = t.prompt_tokens;
  j["prompt_ms"] = t.prefill_ms;
  j["prompt_per_second"] = per_second(t.prompt_tokens, t.prefill_ms);
  j["image_tokens"] = t.image_tokens;
  j["image_ms"] = t.preprocess_ms + t.vision_ms;
  j["predicted_n"] = t.generated_tokens;
  j["predicted_ms"] = t.decode_ms;
  j["predicted_per_second"] = per_second(t.generated_tokens, t.decode_ms);
  j["ttft_ms"] = t.generated_tokens > 0 ? u.queue_ms + t.ttft_ms : 0.0;
  j["queue_ms"] = u.queue_ms;
  j["total_ms"] = u.total_ms;
  return j;
}

json usage_json(const GenerateTimings& t) {
  return json{{"prompt_tokens", t.prompt_tokens},
              {"completion_tokens", t.generated_tokens},
              {"total_tokens", t.prompt_tokens + t.generated_tokens}};
}

json chunk(const std::string& id, int64_t created, const std::string& model, json delta, json finish_reason,
           bool with_usage) {
  json choice{{"index", 0}, {"delta", std::move(delta)}, {"logprobs", nullptr}, {"finish_reason", std::move(finish_reason)}};
  json c{{"id", id}, {"object", "chat.completion.chunk"}, {"created", created}, {"model", model},
         {"system_fingerprint", "qvl"}, {"choices", json::array({choice})}};
  if (with_usage) c["usage"] = nullptr;
  return c;
}

std::string sse(const json& j) { return "data: " + dump_json(j) + "\n\n"; }

void chat_completions(ApiContext& ctx, const http::Request& req, http::Response& res) {
  auto fail = [&](const ApiError& e) { send_error(res, ApiFamily::kOpenAI, e); };
  if (auto e = check_ready(ctx)) return fail(*e);
  auto body = parse_json_body(req);
  if (!body.ok()) return fail({400, body.status().message()});
  auto parsed = parse_chat_completion(*body, ctx.defaults);
  if (!parsed.ok()) return fail({400, parsed.status().message()});
  ChatCompletionRequest& r = *parsed;

  InferenceRequest ir;
  if (auto e = make_inference_request(ctx, r.images, std::move(r.messages), std::move(r.options), ir)) return fail(*e);

  const std::string model = r.model.empty() ? ctx.options.model_id : r.model;
  const std::string id = random_id("chatcmpl-");
  const int64_t created = unix_now();
  const http::PeerWatch& watch = req.peer;
  Admitted a = submit_and_wait_start(ctx, std::move(ir), watch);
  if (a.error) return fail(*a.error);

  if (!r.stream) {
    bool gone = false;
    JobUpdate end = wait_for_end(a, watch, gone);
    if (gone) return fail({499, "the client went away", "cancelled"});
    if (end.error != JobError::kNone) return fail(job_error(end));
    json message{{"role", "assistant"}, {"content", end.result.text}};
    json choice{{"index", 0}, {"message", message}, {"logprobs", nullptr},
                {"finish_reason", finish_reason_name(end.result.finish)}};
    json out{{"id", id}, {"object", "chat.completion"}, {"created", created}, {"model", model},
             {"system_fingerprint", "qvl"}, {"choices", json::array({choice})},
             {"usage", usage_json(end.result.timings)}, {"timings", timings_json(end)}};
    return send_json(res, 200, out);
  }

  const bool usage = r.include_usage;
  StreamFormat f;
  f.start = sse(chunk(id, created, model, json{{"role", "assistant"}, {"content", ""}}, nullptr, usage));
  f.text = [=](std::string_view text) {
    return sse(chunk(id, created, model, json{{"content", std::string(text)}}, nullptr, usage));
  };
  f.done = [=](const JobUpdate& end) {
    json last = chunk(id, created, model, json::object(), finish_reason_name(end.result.finish), usage);
    last["timings"] = timings_json(end);
    std::string out = sse(last);
    if (usage) {
      json u{{"id", id}, {"object", "chat.completion.chunk"}, {"created", created}, {"model", model},
             {"system_fingerprint", "qvl"}, {"choices", json::array()}, {"usage", usage_json(end.result.timings)}};
      out += sse(u);
    }
    return out + "data: [DONE]\n\n";
  };
  f.error = [](const ApiError& e) { return sse(openai_error_body(e)) + "data: [DONE]\n\n"; };
  stream_job(res, "text/event-stream", std::move(a), watch, std::move(f));
}

json model_object(const ApiContext& ctx) {
  return json{{"id", ctx.options.model_id},
              {"object", "model"},
              {"created", ctx.started_unix},
              {"owned_by", "qvl"},
              {"input_modalities", json::array({"text", "image"})},
              {"output_modalities", json::array({"text"})},
              {"context_length", ctx.options.context}};
}

}  // namespace

void add_openai_routes(http::Router& routes, ApiContext& ctx) {
  routes.post("/v1/chat/completions",
            [&ctx](const http::Request& req, http::Response& res) { chat_completions(ctx, req, res); });
  routes.get("/v1/models", [&ctx](const http::Request&, http::Response& res) {
    send_json(res, 200, json{{"object", "list"}, {"data", json::array({model_object(ctx)})}});
  });
  routes.get_prefix("/v1/models/", [&ctx](const http::Request& req, http::Response& res) {
    if (req.path_param != ctx.options.model_id) {
      return send_error(res, ApiFamily::kOpenAI,
                        {404, "the model '" + req.path_param + "' does not exist; this server serves '" +
                                  ctx.options.model_id + "'",
                         "model_not_found", "model"});
    }
    send_json(res, 200, model_object(ctx));
  });
}

}  // namespace qvl::server
