// The Ollama-compatible API: POST /api/chat and /api/generate (NDJSON streaming by default, images as base64
// lists), GET /api/tags, /api/ps, /api/version and POST /api/show, shaped as the `ollama` Python package's
// types (ollama/_types.py) expect, so that ollama.Client(host=...) works unchanged.
#include <chrono>
#include <cstdio>
#include <ctime>

#include <memory>
#include <mutex>

#include "server/api.h"
#include "server/logprobs_json.h"
#include "util/version.h"
#include "chat/reasoning.h"
#include "chat/tool_calls.h"
#include "server/ollama_request.h"

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

// The statistics of Ollama's final ("done": true) object, in nanoseconds.
void add_stats(json& j, const JobUpdate& end) {
  const GenerateTimings& t = end.result.timings;
  j["done_reason"] = finish_reason_name(end.result.finish);
  j["total_duration"] = ns(end.total_ms);
  j["load_duration"] = 0;  // the model stays loaded
  // As Ollama: the prompt tokens evaluated, those restored from the prefix cache not counted.
  j["prompt_eval_count"] = t.prompt_tokens - t.cached_tokens;
  j["prompt_eval_duration"] = ns(t.preprocess_ms + t.vision_ms + t.prefill_ms);
  j["eval_count"] = t.generated_tokens;
  j["eval_duration"] = ns(t.decode_ms);
}

// /api/chat (chat = true: "message" objects) and /api/generate ("response" strings).
void generate(ApiContext& ctx, const http::Request& req, http::Response& res, bool chat) {
  auto fail = [&](const ApiError& e) { send_error(res, ApiFamily::kOllama, e); };
  if (auto e = check_ready(ctx, ModelKind::kChat)) return fail(*e);
  auto body = parse_json_body(req);
  if (!body.ok()) return fail({400, body.status().message()});
  bool empty = false;
  auto parsed = chat ? parse_ollama_chat(*body, ctx.defaults, empty) : parse_ollama_generate(*body, ctx.defaults, empty);
  if (!parsed.ok()) return fail({400, parsed.status().message()});
  OllamaRequest& r = *parsed;
  auto reasoning = show_reasoning(ctx, r.think, "think");
  if (!reasoning.ok()) return fail({400, reasoning.status().message()});
  // A Thinking model's reasoning goes to message.thinking (/api/chat) or "thinking" (/api/generate).
  const bool thinking = chat_template(ctx) == ChatTemplateKind::kThinking, show = *reasoning;
  const std::string model = r.model.empty() ? ctx.options.model_id : r.model;
  auto piece = [model, chat](std::string_view text, std::string_view thought = {}) {
    json j{{"model", model}, {"created_at", rfc3339_now()}};
    if (chat) {
      j["message"] = json{{"role", "assistant"}, {"content", std::string(text)}};
      if (!thought.empty()) j["message"]["thinking"] = std::string(thought);
    } else {
      j["response"] = std::string(text);
      if (!thought.empty()) j["thinking"] = std::string(thought);
    }
    j["done"] = false;
    return j;
  };
  if (empty) {  // Ollama's way to load (or, with keep_alive 0, unload) a model: qvl keeps its one model loaded
    json j = piece("");
    const auto ka = body->find("keep_alive");
    const bool unload = ka != body->end() && ((ka->is_number() && ka->get<double>() == 0) ||
                                              (ka->is_string() && (*ka == "0" || *ka == "0s" || *ka == "0m")));
    j["done_reason"] = unload ? "unload" : "load";
    j["done"] = true;
    return send_json(res, 200, j);
  }

  InferenceRequest ir;  // Ollama's error shape has no code or param: only the message shows
  if (auto e = make_inference_request(ctx, r.images, std::move(r.messages), std::move(r.options), ir, {}, r.videos, r.documents)) return fail(*e);
  const http::PeerWatch& watch = req.peer;
  Admitted a = submit_and_wait_start(ctx, std::move(ir), watch);
  if (a.error) return fail(*a.error);
  const Tokenizer* tok = &ctx.scheduler.model()->tokenizer();  // loaded: the job was admitted
  const bool logprobs = r.logprobs;

  // With tools (/api/chat): the answer's <tool_call> blocks become message.tool_calls, the rest its content.
  const bool tools = chat && r.tool_calls;
  auto with_calls = [](json j, const std::vector<ParsedToolCall>& calls) {
    json list = json::array();
    for (const ParsedToolCall& c : calls) list.push_back(json{{"function", json{{"name", c.name}, {"arguments", c.arguments}}}});
    if (!list.empty()) j["message"]["tool_calls"] = std::move(list);
    return j;
  };
  if (!r.stream) {
    bool gone = false;
    JobUpdate end = wait_for_end(a, watch, gone);
    if (gone) return fail({499, "the client went away"});
    if (end.error != JobError::kNone) return fail(job_error(end));
    std::string text = end.result.text, thought;
    if (thinking) {
      ReasoningSplit sp = split_reasoning(text);
      text = std::move(sp.content);
      if (show) thought = std::move(sp.reasoning);
    }
    json j = piece(text, thought);
    if (tools) {
      const ParsedAnswer p = parse_tool_calls(text);
      j = with_calls(piece(p.calls.empty() ? text : p.content, thought), p.calls);
    }
    j["done"] = true;
    if (logprobs) j["logprobs"] = logprob_entries(*tok, end.result.logprobs);
    add_stats(j, end);
    if (!r.warnings.empty()) j["warnings"] = r.warnings;
    return send_json(res, 200, j);
  }
  StreamFormat f;
  auto calls = tools ? std::make_shared<ToolCallStream>() : nullptr;
  auto lines = [piece, calls, with_calls](const std::string& content) {
    std::string out;
    if (!content.empty()) out += dump_json(piece(content)) + "\n";
    if (calls)
      if (auto c = calls->take_calls(); !c.empty()) out += dump_json(with_calls(piece(""), c)) + "\n";
    return out;
  };
  auto thoughts = thinking ? std::make_shared<ReasoningStream>() : nullptr;
  auto thought_line = [piece, show](const std::string& t) {
    return show && !t.empty() ? dump_json(piece("", t)) + "\n" : std::string();
  };
  auto answer = [lines, calls](std::string_view text) { return lines(calls ? calls->push(text) : std::string(text)); };
  // The tokens' log-probabilities ride on a line of their own after the text they came with.
  auto logprob_line = [piece, tok, logprobs](const std::vector<TokenLogprob>& lps) {
    if (!logprobs || lps.empty()) return std::string();
    json j = piece("");
    j["logprobs"] = logprob_entries(*tok, lps);
    return dump_json(j) + "\n";
  };
  f.text = [answer, thoughts, thought_line, logprob_line](std::string_view text, const std::vector<TokenLogprob>& lps) {
    if (!thoughts) return answer(text) + logprob_line(lps);
    ReasoningStream::Delta d = thoughts->push(text);
    return thought_line(d.reasoning) + answer(d.content) + logprob_line(lps);
  };
  f.done = [piece, calls, lines, answer, thoughts, thought_line, warnings = r.warnings](const JobUpdate& end) {
    std::string head;
    if (thoughts) {
      ReasoningStream::Delta d = thoughts->finish();
      head = thought_line(d.reasoning) + answer(d.content);
    }
    head += calls ? lines(calls->finish()) : std::string();
    json j = piece("");
    j["done"] = true;
    if (!warnings.empty()) j["warnings"] = warnings;
    add_stats(j, end);
    return head + dump_json(j) + "\n";
  };
  f.error = [](const ApiError& e) { return dump_json(json{{"error", e.message}}) + "\n"; };
  stream_job(res, kNdjson, std::move(a), watch, std::move(f));
}

uint64_t model_bytes(const ApiContext& ctx) {
  const Model* m = ctx.scheduler.model();
  return m ? m->facts().file_bytes : 0;
}

// The model's facts (model/model.h: computed once at load, as /health and /v1/models show them).
json details(const ApiContext& ctx) {
  const Model* m = ctx.scheduler.model();
  return json{{"parent_model", ""},
              {"format", m ? m->facts().format : ""},
              {"family", "qwen3vl"},
              {"families", json::array({"qwen3vl"})},
              {"parameter_size", m ? m->facts().parameter_size : ""},
              {"quantization_level", m ? m->facts().quantization_level : ""}};
}

// What the model can do, as Ollama lists it: no "vision" for a text model served without its vision file.
json capabilities(const ApiContext& ctx) {
  // An embedding model answers /api/embed only (Ollama's "embedding"); a reranker has no Ollama endpoint.
  if (ctx.scheduler.model() && ctx.scheduler.model()->kind() != ModelKind::kChat) {
    json c = json::array();
    if (ctx.scheduler.model()->kind() == ModelKind::kEmbedding) c.push_back("embedding");
    if (ctx.scheduler.model()->has_vision()) c.push_back("vision");
    return c;
  }
  json c = json::array({"completion"});
  if (!ctx.scheduler.model() || ctx.scheduler.model()->has_vision()) c.push_back("vision");
  c.push_back("tools");
  if (chat_template(ctx) == ChatTemplateKind::kThinking) c.push_back("thinking");
  return c;
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

// POST /api/pull {"model": "hf.co/ORG/NAME[:QUANT]", "stream": true}: the files land in the hub's cache through
// qvl's hub client (HF_TOKEN, HF_ENDPOINT and HF_HUB_OFFLINE honoured), with Ollama's progress lines. One pull
// at a time. The server keeps serving the model it started with; the pulled one is served by a new
// `qvl serve --model` (one model per server).
void pull(ApiContext& ctx, const http::Request& req, http::Response& res) {
  auto fail = [&](const ApiError& e) { send_error(res, ApiFamily::kOllama, e); };
  if (!ctx.options.pull)
    return fail({403, "pulling models is off on this server (it spends the server's disk, bandwidth and hub token); "
                      "start it with --allow-pull, or run `qvl pull MODEL` on its machine"});
  auto body = parse_json_body(req);
  if (!body.ok()) return fail({400, body.status().message()});
  std::string name;
  bool stream = true, insecure = false;
  for (const char* key : {"name", "model"})
    if (Status s = read_string(*body, key, name); !s.ok()) return fail({400, s.message()});
  if (Status s = read_bool(*body, "stream", stream); !s.ok()) return fail({400, s.message()});
  if (Status s = read_bool(*body, "insecure", insecure); !s.ok()) return fail({400, s.message()});  // accepted: TLS always verified
  auto spec = ollama_pull_spec(name);
  if (!spec.ok()) return fail({400, spec.status().message()});
  static std::mutex one_pull;
  auto lock = std::make_shared<std::unique_lock<std::mutex>>(one_pull, std::try_to_lock);
  if (!lock->owns_lock()) return fail({503, "another pull is running; retry when it has finished", "busy", "", 5});
  const PullFn fetch = ctx.options.pull;
  if (!stream) {
    auto dir = fetch(*spec, [](const PullProgress&) {});
    if (!dir.ok()) return fail({502, "pulling " + *spec + ": " + dir.status().message()});
    return send_json(res, 200, json{{"status", "success"}});
  }
  res.status = 200;
  res.content_type = kNdjson;
  res.stream = [fetch, spec = *spec, lock](http::ChunkSink& sink) {
    std::mutex mu;  // progress comes from the download threads
    bool open = true;
    auto line = [&](const json& j) {
      std::lock_guard<std::mutex> g(mu);
      if (open) open = sink.write(dump_json(j) + "\n");  // a client gone: the pull goes on, unwatched
    };
    line(json{{"status", "pulling manifest"}});
    std::string last_file;
    auto last = std::chrono::steady_clock::now();
    auto dir = fetch(spec, [&](const PullProgress& p) {
      const auto now = std::chrono::steady_clock::now();
      {
        std::lock_guard<std::mutex> g(mu);
        if (p.file == last_file && p.file_done < p.file_total && now - last < std::chrono::milliseconds(250)) return;
        last_file = p.file;
        last = now;
      }
      line(json{{"status", "pulling " + p.file}, {"digest", p.file}, {"total", p.file_total}, {"completed", p.file_done}});
    });
    if (!dir.ok()) return line(json{{"error", "pulling " + spec + ": " + dir.status().message()}});
    line(json{{"status", "verifying sha256 digest"}});
    line(json{{"status", "writing manifest"}});
    line(json{{"status", "success"}});
  };
}

// What Ollama manages and qvl does not: one model, fixed at start, files in the hub's cache.
void not_managed(const http::Request& req, http::Response& res) {
  send_error(res, ApiFamily::kOllama,
             {501, req.path + " is not supported: qvl serves the one model it was started with and keeps no model "
                   "store of its own (pulled files live in the hub's cache; remove them with `huggingface-cli "
                   "delete-cache`, serve another model with `qvl serve --model`)"});
}

}  // namespace

void add_ollama_routes(http::Router& routes, ApiContext& ctx) {
  routes.post("/api/pull", [&ctx](const http::Request& req, http::Response& res) { pull(ctx, req, res); });
  for (const char* path : {"/api/create", "/api/copy", "/api/push"}) routes.post(path, not_managed);
  routes.del("/api/delete", not_managed);  // Ollama's method for it
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
    send_json(res, 200, json{{"version", version()}});
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
              {"general.parameter_count", ctx.scheduler.model() ? ctx.scheduler.model()->facts().parameters : 0},
              {"qwen3vl.context_length", ctx.options.context}};
    send_json(res, 200,
              json{{"modelfile", "# served by qvl\nFROM " + ctx.options.model_id + "\n"},
                   {"parameters", params},
                   {"template", ""},
                   {"details", details(ctx)},
                   {"model_info", info},
                   {"capabilities", capabilities(ctx)},
                   {"modified_at", rfc3339(ctx.started_unix)}});
  });
}

}  // namespace qvl::server
