// The Ollama-compatible API: POST /api/chat and /api/generate (NDJSON streaming by default, images as base64
// lists), GET /api/tags, /api/ps, /api/version and POST /api/show, shaped as the `ollama` Python package's
// types (ollama/_types.py) expect, so that ollama.Client(host=...) works unchanged.
#include <chrono>
#include <cstdio>
#include <ctime>

#include "server/api.h"
#include "tokenizer/chat_json.h"

namespace qvl::server {

namespace {

constexpr const char* kNdjson = "application/x-ndjson";

// Ollama's created_at: RFC 3339 with nanoseconds, UTC ("2024-05-01T12:00:00.123456789Z").
std::string rfc3339_now() {
  const auto now = std::chrono::system_clock::now();
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count();
  const std::time_t secs = static_cast<std::time_t>(ns / 1000000000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%09lldZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<long long>(ns % 1000000000));
  return buf;
}

std::string rfc3339(int64_t unix_seconds) {
  const std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

int64_t ns(double ms) { return static_cast<int64_t>(ms * 1e6); }

// The request fields /api/chat and /api/generate share.
struct OllamaRequest {
  std::string model;
  std::vector<ChatMessage> messages;
  std::vector<std::pair<std::string, std::string>> images;  // (base64, where), in prompt order
  GenerateOptions options;
  bool stream = true;  // Ollama streams unless told not to
};

// "options": Ollama's runtime options (load-time ones such as num_ctx or num_thread are ignored: the server
// fixes them).
Status parse_options(const json& body, OllamaRequest& r) {
  auto it = body.find("options");
  if (it == body.end() || it->is_null()) return Status::Ok();
  if (!it->is_object()) return Status::Error("options: expected an object such as {\"temperature\": 0.2}");
  const json& o = *it;
  SamplingParams& sp = r.options.sampling;
  QVL_RETURN_IF_ERROR(read_float(o, "temperature", sp.temperature, "options"));
  QVL_RETURN_IF_ERROR(read_float(o, "top_p", sp.top_p, "options"));
  QVL_RETURN_IF_ERROR(read_float(o, "min_p", sp.min_p, "options"));
  QVL_RETURN_IF_ERROR(read_float(o, "repeat_penalty", sp.repetition_penalty, "options"));
  QVL_RETURN_IF_ERROR(read_float(o, "presence_penalty", sp.presence_penalty, "options"));
  QVL_RETURN_IF_ERROR(read_float(o, "frequency_penalty", sp.frequency_penalty, "options"));
  int64_t top_k = sp.top_k;
  QVL_RETURN_IF_ERROR(read_int(o, "top_k", top_k, "options"));
  if (top_k < 0 || top_k > (1 << 30)) return Status::Error("options.top_k: must be >= 0, got " + std::to_string(top_k));
  sp.top_k = static_cast<int>(top_k);
  if (o.contains("seed") && !o["seed"].is_null()) {
    int64_t seed = 0;
    QVL_RETURN_IF_ERROR(read_int(o, "seed", seed, "options"));
    sp.seed = static_cast<uint64_t>(seed);
  }
  int64_t num_predict = -1;
  QVL_RETURN_IF_ERROR(read_int(o, "num_predict", num_predict, "options"));
  if (num_predict >= 0) {
    if (num_predict > (1 << 20)) return Status::Error("options.num_predict: at most 1048576, got " + std::to_string(num_predict));
    r.options.max_tokens = static_cast<int>(num_predict);
  } else if (num_predict != -1 && num_predict != -2) {
    return Status::Error("options.num_predict: expected a count, -1 (no limit) or -2 (fill the context), got " +
                         std::to_string(num_predict));
  }
  QVL_RETURN_IF_ERROR(read_stop(o, "stop", r.options.stop, "options"));
  return sp.validate();
}

// The fields both endpoints refuse or ignore alike.
Status parse_common(const json& body, OllamaRequest& r) {
  QVL_RETURN_IF_ERROR(read_string(body, "model", r.model));
  QVL_RETURN_IF_ERROR(read_bool(body, "stream", r.stream));
  if (auto f = body.find("format"); f != body.end() && !f->is_null() && !(f->is_string() && f->get<std::string>().empty())) {
    return Status::Error("format: structured output (JSON mode, schemas) is not supported; leave it out");
  }
  if (auto t = body.find("think"); t != body.end() && !t->is_null() && !(t->is_boolean() && !t->get<bool>())) {
    return Status::Error("think: this model (Qwen3-VL Instruct) does not support thinking; leave it out");
  }
  r.options.sampling.seed = random_seed();
  return parse_options(body, r);
}

// "images": a list of base64 strings (the ollama client encodes files and bytes this way).
Status read_images(const json& obj, const std::string& where, OllamaRequest& r, size_t& count) {
  count = 0;
  auto it = obj.find("images");
  if (it == obj.end() || it->is_null()) return Status::Ok();
  if (!it->is_array()) return Status::Error(where + ".images: expected a list of base64 strings");
  for (size_t k = 0; k < it->size(); ++k) {
    const std::string w = where + ".images[" + std::to_string(k) + "]";
    if (!(*it)[k].is_string()) return Status::Error(w + ": expected a base64 string, got " + (*it)[k].type_name());
    r.images.emplace_back((*it)[k].get<std::string>(), w);
    ++count;
  }
  return Status::Ok();
}

// An Ollama message {role, content, images, tool_calls} as the chat-template JSON: images become image
// parts placed before the text, as Ollama places them.
Result<json> to_template_message(const json& m, const std::string& where, OllamaRequest& r) {
  if (!m.is_object()) return Status::Error(where + ": expected an object {\"role\", \"content\"}");
  json out = json::object();
  out["role"] = m.contains("role") ? m["role"] : json();
  std::string content;
  QVL_RETURN_IF_ERROR(read_string(m, "content", content, where));
  size_t n_images = 0;
  QVL_RETURN_IF_ERROR(read_images(m, where, r, n_images));
  if (n_images == 0) {
    out["content"] = content;
  } else {
    json parts = json::array();
    for (size_t k = 0; k < n_images; ++k) parts.push_back(json{{"type", "image"}});
    if (!content.empty()) parts.push_back(json{{"type", "text"}, {"text", content}});
    out["content"] = parts;
  }
  if (auto tc = m.find("tool_calls"); tc != m.end() && !tc->is_null()) out["tool_calls"] = *tc;
  return out;
}

Status check_roles(const std::vector<ChatMessage>& messages) {
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& role = messages[i].role;
    if (role != "system" && role != "user" && role != "assistant" && role != "tool") {
      return Status::Error("messages[" + std::to_string(i) + "].role: '" + role +
                           "' is not a role; expected system, user, assistant or tool");
    }
  }
  return Status::Ok();
}

// Reads /api/chat; `empty` is set for a request without messages (Ollama's "load the model" call).
Result<OllamaRequest> parse_chat(const json& body, const GenerateOptions& defaults, bool& empty) {
  OllamaRequest r;
  r.options = defaults;
  QVL_RETURN_IF_ERROR(parse_common(body, r));
  auto msgs = body.find("messages");
  empty = msgs == body.end() || msgs->is_null() || (msgs->is_array() && msgs->empty());
  if (empty) return r;
  if (!msgs->is_array()) return Status::Error("messages: expected a list of {\"role\", \"content\", \"images\"}");
  json converted = json::array();
  for (size_t i = 0; i < msgs->size(); ++i) {
    QVL_ASSIGN_OR_RETURN(json m, to_template_message((*msgs)[i], "messages[" + std::to_string(i) + "]", r));
    converted.push_back(std::move(m));
  }
  QVL_ASSIGN_OR_RETURN(r.messages, chat_messages_from_json(converted));
  QVL_RETURN_IF_ERROR(check_roles(r.messages));
  if (auto tools = body.find("tools"); tools != body.end()) {
    QVL_ASSIGN_OR_RETURN(r.options.chat.tools, chat_tools_from_json(*tools));
  }
  return r;
}

// Reads /api/generate: an optional system prompt and one user turn of images then the prompt.
Result<OllamaRequest> parse_generate(const json& body, const GenerateOptions& defaults, bool& empty) {
  OllamaRequest r;
  r.options = defaults;
  QVL_RETURN_IF_ERROR(parse_common(body, r));
  std::string prompt, system, suffix, tmpl;
  bool raw = false;
  QVL_RETURN_IF_ERROR(read_string(body, "prompt", prompt));
  QVL_RETURN_IF_ERROR(read_string(body, "system", system));
  QVL_RETURN_IF_ERROR(read_string(body, "suffix", suffix));
  QVL_RETURN_IF_ERROR(read_string(body, "template", tmpl));
  QVL_RETURN_IF_ERROR(read_bool(body, "raw", raw));
  if (!suffix.empty()) return Status::Error("suffix: fill-in-the-middle is not supported by this model");
  if (!tmpl.empty()) return Status::Error("template: custom templates are not supported; the model's chat template is used");
  if (raw) return Status::Error("raw: raw prompts are not supported; the model's chat template is always applied");
  if (auto c = body.find("context"); c != body.end() && c->is_array() && !c->empty()) {
    return Status::Error("context: continuing from token context is not supported; use /api/chat with the history");
  }
  size_t n_images = 0;
  QVL_RETURN_IF_ERROR(read_images(body, "", r, n_images));
  for (auto& img : r.images) img.second = img.second.substr(1);  // "images[0]", not ".images[0]"
  empty = prompt.empty() && n_images == 0;
  if (empty) return r;
  if (!system.empty()) {
    ChatMessage s;
    s.role = "system";
    s.content_string = system;
    r.messages.push_back(std::move(s));
  }
  ChatMessage u;
  u.role = "user";
  u.content_is_string = false;
  for (size_t k = 0; k < n_images; ++k) u.content_parts.push_back({ContentPart::Kind::kImage, ""});
  if (!prompt.empty()) u.content_parts.push_back({ContentPart::Kind::kText, prompt});
  r.messages.push_back(std::move(u));
  return r;
}

// The statistics of Ollama's final ("done": true) object, in nanoseconds.
void add_stats(json& j, const JobUpdate& end) {
  const GenerateTimings& t = end.result.timings;
  j["done_reason"] = finish_reason_name(end.result.finish);
  j["total_duration"] = ns(end.total_ms);
  j["load_duration"] = 0;  // the model stays loaded
  j["prompt_eval_count"] = t.prompt_tokens;
  j["prompt_eval_duration"] = ns(t.preprocess_ms + t.vision_ms + t.prefill_ms);
  j["eval_count"] = t.generated_tokens;
  j["eval_duration"] = ns(t.decode_ms);
}

// /api/chat (chat = true: "message" objects) and /api/generate ("response" strings).
void generate(ApiContext& ctx, const http::Request& req, http::Response& res, bool chat) {
  auto fail = [&](const ApiError& e) { send_error(res, ApiFamily::kOllama, e); };
  if (auto e = check_ready(ctx)) return fail(*e);
  auto body = parse_json_body(req);
  if (!body.ok()) return fail({400, body.status().message()});
  bool empty = false;
  auto parsed = chat ? parse_chat(*body, ctx.defaults, empty) : parse_generate(*body, ctx.defaults, empty);
  if (!parsed.ok()) return fail({400, parsed.status().message()});
  OllamaRequest& r = *parsed;
  const std::string model = r.model.empty() ? ctx.options.model_id : r.model;
  auto piece = [model, chat](std::string_view text) {
    json j{{"model", model}, {"created_at", rfc3339_now()}};
    if (chat) {
      j["message"] = json{{"role", "assistant"}, {"content", std::string(text)}};
    } else {
      j["response"] = std::string(text);
    }
    j["done"] = false;
    return j;
  };
  if (empty) {  // Ollama's way to load a model: answer that it is loaded
    json j = piece("");
    j["done_reason"] = "load";
    j["done"] = true;
    return send_json(res, 200, j);
  }

  InferenceRequest ir;  // Ollama's error shape has no code or param: only the message shows
  if (auto e = make_inference_request(ctx, r.images, std::move(r.messages), std::move(r.options), ir)) return fail(*e);
  const http::PeerWatch& watch = req.peer;
  Admitted a = submit_and_wait_start(ctx, std::move(ir), watch);
  if (a.error) return fail(*a.error);

  if (!r.stream) {
    bool gone = false;
    JobUpdate end = wait_for_end(a, watch, gone);
    if (gone) return fail({499, "the client went away"});
    if (end.error != JobError::kNone) return fail(job_error(end));
    json j = piece(end.result.text);
    j["done"] = true;
    add_stats(j, end);
    return send_json(res, 200, j);
  }
  StreamFormat f;
  f.text = [piece](std::string_view text) { return dump_json(piece(text)) + "\n"; };
  f.done = [piece](const JobUpdate& end) {
    json j = piece("");
    j["done"] = true;
    add_stats(j, end);
    return dump_json(j) + "\n";
  };
  f.error = [](const ApiError& e) { return dump_json(json{{"error", e.message}}) + "\n"; };
  stream_job(res, kNdjson, std::move(a), watch, std::move(f));
}

std::string parameter_size(uint64_t bytes) {
  const double params = static_cast<double>(bytes) / 2;  // BF16 weights
  char buf[32];
  if (params >= 1e9) {
    std::snprintf(buf, sizeof buf, "%.1fB", params / 1e9);
  } else {
    std::snprintf(buf, sizeof buf, "%.1fM", params / 1e6);
  }
  return buf;
}

uint64_t model_bytes(const ApiContext& ctx) {
  const Model* m = ctx.scheduler.model();
  return m ? m->mapped_bytes() : 0;
}

json details(const ApiContext& ctx) {
  return json{{"parent_model", ""},
              {"format", "safetensors"},
              {"family", "qwen3vl"},
              {"families", json::array({"qwen3vl"})},
              {"parameter_size", parameter_size(model_bytes(ctx))},
              {"quantization_level", "BF16"}};
}

// A stable stand-in for Ollama's manifest digest: FNV-1a of the model id, as 64 hex digits.
std::string digest(const std::string& id) {
  uint64_t h = 1469598103934665603ull;
  std::string out;
  for (int round = 0; round < 4; ++round) {
    for (char c : id) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
    h = (h ^ static_cast<uint64_t>(round)) * 1099511628211ull;
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
    out += buf;
  }
  return out;
}

json model_entry(const ApiContext& ctx) {
  const std::string& id = ctx.options.model_id;
  return json{{"name", id},
              {"model", id},
              {"modified_at", rfc3339(ctx.started_unix)},
              {"size", model_bytes(ctx)},
              {"digest", digest(id)},
              {"details", details(ctx)}};
}

}  // namespace

void add_ollama_routes(http::Router& routes, ApiContext& ctx) {
  routes.post("/api/chat", [&ctx](const http::Request& req, http::Response& res) { generate(ctx, req, res, true); });
  routes.post("/api/generate",
            [&ctx](const http::Request& req, http::Response& res) { generate(ctx, req, res, false); });
  routes.get("/api/tags", [&ctx](const http::Request&, http::Response& res) {
    send_json(res, 200, json{{"models", json::array({model_entry(ctx)})}});
  });
  routes.get("/api/ps", [&ctx](const http::Request&, http::Response& res) {
    json models = json::array();
    if (ctx.scheduler.model()) {
      json m = model_entry(ctx);
      m["expires_at"] = "2999-12-31T23:59:59Z";  // never unloaded
      m["size_vram"] = 0;
      m["context_length"] = ctx.options.context;
      models.push_back(std::move(m));
    }
    send_json(res, 200, json{{"models", models}});
  });
  routes.get("/api/version", [](const http::Request&, http::Response& res) {
    send_json(res, 200, json{{"version", "0.1.0"}});
  });
  routes.post("/api/show", [&ctx](const http::Request&, http::Response& res) {
    char params[160] = "";
    if (ctx.scheduler.model()) {  // the defaults are read with the model
      const SamplingParams& sp = ctx.defaults.sampling;
      std::snprintf(params, sizeof params, "temperature %g\ntop_k %d\ntop_p %g\nnum_ctx %lld", sp.temperature,
                    sp.top_k, sp.top_p, static_cast<long long>(ctx.options.context));
    }
    json info{{"general.architecture", "qwen3vl"},
              {"general.basename", ctx.options.model_id},
              {"general.parameter_count", model_bytes(ctx) / 2},
              {"qwen3vl.context_length", ctx.options.context}};
    send_json(res, 200,
              json{{"modelfile", "# served by qvl\nFROM " + ctx.options.model_id + "\n"},
                   {"parameters", params},
                   {"template", ""},
                   {"details", details(ctx)},
                   {"model_info", info},
                   {"capabilities", json::array({"completion", "vision"})},
                   {"modified_at", rfc3339(ctx.started_unix)}});
  });
}

}  // namespace qvl::server
