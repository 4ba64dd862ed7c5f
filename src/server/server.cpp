// The HTTP server of `qvl serve`: the API routes, access control (API keys, CORS, body limit), /health,
// /metrics and the page, in front of one Scheduler that loads and owns the model.
#include "server/server.h"

#include <csignal>
#include <cstdio>
#include <ctime>
#include <thread>

#include "server/api.h"
#include "server/assets.h"

namespace qvl::server {

namespace {

using Clock = std::chrono::steady_clock;
using HandlerResponse = httplib::Server::HandlerResponse;

// Per HTTP thread: when the current request arrived and whether it is counted in flight. One thread
// carries a request from pre-routing to the logger.
thread_local Clock::time_point t_request_start;
thread_local bool t_counted = false;

// Constant-time comparison, so that response timing does not reveal how much of a key matched.
bool same_key(const std::string& given, const std::string& key) {
  if (key.empty()) return false;
  unsigned char diff = given.size() != key.size() ? 1 : 0;
  for (size_t i = 0; i < given.size(); ++i) diff |= static_cast<unsigned char>(given[i] ^ key[i % key.size()]);
  return diff == 0;
}

// The endpoint label of /metrics: known routes by name, everything else folded (bounded cardinality).
std::string endpoint_label(const std::string& path) {
  static const char* const kRoutes[] = {"/health", "/metrics", "/v1/models", "/v1/chat/completions", "/api/chat",
                                        "/api/generate", "/api/tags", "/api/ps", "/api/version", "/api/show",
                                        "/v1/vision/completion", "/chat"};
  for (const char* r : kRoutes) {
    if (path == r) return r;
  }
  if (path.rfind("/v1/models/", 0) == 0) return "/v1/models/{id}";
  if (find_asset(path)) return "page";
  return "other";
}

bool is_post_route(const std::string& path) {
  return path == "/v1/chat/completions" || path == "/api/chat" || path == "/api/generate" || path == "/api/show" ||
         path == "/v1/vision/completion" || path == "/chat";
}

}  // namespace

struct Server::Impl {
  Impl(ServerOptions o, ModelLoader l)
      : options(std::move(o)), load(std::move(l)), scheduler(scheduler_options()),
        ctx{options, scheduler, metrics, {}, 0, {}} {}

  SchedulerOptions scheduler_options() {
    SchedulerOptions s;
    s.threads = options.threads > 0 ? options.threads : ThreadPool::physical_cores();
    s.pin = options.pin;
    s.parallel = options.parallel;
    s.queue = options.queue;
    s.load = [this]() -> Result<std::unique_ptr<Model>> {
      QVL_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, load());
      QVL_ASSIGN_OR_RETURN(SamplingParams sampling, SamplingParams::from_generation_config(model->generation()));
      GenerateOptions d;
      d.sampling = sampling;
      d.context = options.context;
      d.kv_type = options.kv_type;
      d.max_tokens = static_cast<int>(std::min<int64_t>(options.context, 1 << 20));  // until an end token
      d.image.min_pixels = options.min_pixels;
      d.image.max_pixels = options.max_pixels;
      ctx.defaults = d;  // published by the scheduler's kReady (release)
      return model;
    };
    s.on_finish = [this](const JobUpdate& u) {
      const GenerateTimings& t = u.result.timings;
      GenerationSample g;
      g.prompt_tokens = t.prompt_tokens;
      g.image_tokens = t.image_tokens;
      g.generated_tokens = t.generated_tokens;
      g.ttft_s = t.generated_tokens > 0 ? (u.queue_ms + t.ttft_ms) / 1000 : -1;
      g.duration_s = u.total_ms / 1000;
      g.image_encode_s = t.image_tokens > 0 ? (t.preprocess_ms + t.vision_ms) / 1000 : -1;
      g.ok = u.error == JobError::kNone;
      metrics.observe(g);
    };
    return s;
  }

  bool authorized(const httplib::Request& req) const {
    if (options.api_keys.empty()) return true;
    const std::string auth = req.get_header_value("Authorization");
    const std::string prefix = "Bearer ";
    if (auth.size() <= prefix.size() || auth.compare(0, prefix.size(), prefix) != 0) return false;
    const std::string key = auth.substr(prefix.size());
    bool ok = false;
    for (const std::string& k : options.api_keys) ok |= same_key(key, k);
    return ok;
  }

  bool origin_allowed(const std::string& origin) const {
    if (origin.empty()) return false;
    for (const std::string& o : options.cors_origins) {
      if (o == "*" || o == origin) return true;
    }
    return false;
  }

  void add_routes();
  void health(httplib::Response& res);

  ServerOptions options;
  ModelLoader load;
  Metrics metrics;
  Scheduler scheduler;
  ApiContext ctx;
  httplib::Server http;
  std::thread listener;
  int port = -1;
  std::atomic<bool> draining{false};
  std::atomic<int> in_flight{0};
  bool started = false, stopped = false;
};

void Server::Impl::health(httplib::Response& res) {
  json j{{"status", "ok"}, {"mode", options.mode}, {"model", options.model_id}};
  if (draining.load()) {
    j["status"] = "shutting_down";
    return send_json(res, 503, j);
  }
  switch (scheduler.state()) {
    case LoadState::kLoading:
      j["status"] = "loading";
      return send_json(res, 503, j);
    case LoadState::kFailed:
      j["status"] = "error";
      j["error"] = scheduler.load_error();
      return send_json(res, 500, j);
    case LoadState::kReady:
      break;
  }
  j["slots"] = json{{"total", scheduler.slots()}, {"busy", scheduler.busy_slots()}};
  j["queue"] = scheduler.queue_depth();
  send_json(res, 200, j);
}

void Server::Impl::add_routes() {
  http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    t_request_start = Clock::now();
    t_counted = true;
    in_flight.fetch_add(1);
    const std::string origin = req.get_header_value("Origin");
    const bool cors = origin_allowed(origin);
    if (cors) {
      res.set_header("Access-Control-Allow-Origin", origin);
      res.set_header("Vary", "Origin");
    }
    if (req.method == "OPTIONS") {  // a browser's preflight: no credentials on it, so no key check
      if (cors) {
        res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
        res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type");
        res.set_header("Access-Control-Max-Age", "600");
      }
      res.set_header("Allow", "GET, POST, OPTIONS");
      res.status = 204;
      return HandlerResponse::Handled;
    }
    const bool is_public = req.path == "/health" || (req.method == "GET" && find_asset(req.path));
    if (!is_public && !authorized(req)) {
      send_error(res, family_of(req.path),
                 {401, "missing or wrong API key; send the header 'Authorization: Bearer <key>' with a key given to "
                       "--api-key", "invalid_api_key"});
      return HandlerResponse::Handled;
    }
    return HandlerResponse::Unhandled;
  });

  // Errors that cpp-httplib answers itself (no route, body over the limit, malformed request) get the
  // error shape of the API the path belongs to.
  http.set_error_handler(httplib::Server::HandlerWithResponse([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return HandlerResponse::Unhandled;
    std::string message;
    switch (res.status) {
      case 404:
        message = "no endpoint " + req.method + " " + req.path + "; see docs/API.md for the endpoints";
        break;
      case 413:
        message = "the request body is over the server's limit of " + std::to_string(options.max_body) +
                  " bytes (--max-body); send smaller images";
        break;
      case 400: message = "malformed HTTP request"; break;
      default: message = "HTTP error " + std::to_string(res.status); break;
    }
    send_error(res, family_of(req.path), {res.status, message});
    return HandlerResponse::Handled;
  }));
  http.set_exception_handler([this](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown exception";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    send_error(res, family_of(req.path), {500, "internal error: " + what, "internal_error"});
  });
  http.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    metrics.count_request(endpoint_label(req.path), res.status);
    if (t_counted) {
      t_counted = false;
      in_flight.fetch_sub(1);
    }
    if (options.access_log && req.path != "/health" && req.path != "/metrics") {
      const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t_request_start).count();
      std::fprintf(stderr, "%s %s %d %.0f ms\n", req.method.c_str(), req.path.c_str(), res.status, ms);
    }
  });

  http.Get("/health", [this](const httplib::Request&, httplib::Response& res) { health(res); });
  http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    Gauges g;
    g.queue_depth = scheduler.queue_depth();
    g.busy_slots = scheduler.busy_slots();
    g.slots = scheduler.slots();
    g.loaded = scheduler.state() == LoadState::kReady;
    res.set_content(metrics.render(g), "text/plain; version=0.0.4; charset=utf-8");
  });
  add_openai_routes(http, ctx);
  add_ollama_routes(http, ctx);
  add_legacy_routes(http, ctx);
  // Last: the page's files; any other GET is a 404 (or a 405 for a POST-only endpoint).
  http.Get(".*", [](const httplib::Request& req, httplib::Response& res) {
    if (const Asset* a = find_asset(req.path)) {
      res.set_content(std::string(a->data), std::string(a->content_type));
      return;
    }
    if (is_post_route(req.path)) {
      res.set_header("Allow", "POST");
      return send_error(res, family_of(req.path), {405, req.path + " takes POST, not GET"});
    }
    send_error(res, family_of(req.path), {404, "no endpoint GET " + req.path + "; see docs/API.md for the endpoints"});
  });
}

Server::Server(ServerOptions options, ModelLoader load)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(load))) {}

Server::~Server() { shutdown(0); }

Status Server::start() {
  Impl& s = *impl_;
  QVL_CHECK(!s.started);
  const ServerOptions& o = s.options;
  auto policy = make_image_policy(o.image_dir, o.max_body * 2);
  if (!policy.ok()) return policy.status();
  s.ctx.images = *policy;
  s.ctx.started_unix = static_cast<int64_t>(std::time(nullptr));

  std::signal(SIGPIPE, SIG_IGN);  // a client that hangs up must fail a write, not kill the process
  s.http.set_payload_max_length(o.max_body);
  // An idle keep-alive connection holds an HTTP thread and delays a graceful stop by this much.
  s.http.set_keep_alive_timeout(2);
  const int threads = o.http_threads > 0 ? o.http_threads : std::max(16, o.parallel + o.queue + 8);
  s.http.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  s.add_routes();

  if (o.port == 0) {
    s.port = s.http.bind_to_any_port(o.host);
  } else {
    s.port = s.http.bind_to_port(o.host, o.port) ? o.port : -1;
  }
  if (s.port <= 0) {
    return Status::Error("cannot listen on " + o.host + ":" + std::to_string(o.port) +
                         ": the address is in use or not available; pick another --port or --host");
  }
  s.listener = std::thread([&s] { s.http.listen_after_bind(); });
  s.scheduler.start();
  s.started = true;
  return Status::Ok();
}

int Server::port() const { return impl_->port; }
LoadState Server::load_state() const { return impl_->scheduler.state(); }
std::string Server::load_error() const {
  return load_state() == LoadState::kFailed ? impl_->scheduler.load_error() : std::string();
}
int Server::queue_depth() const { return impl_->scheduler.queue_depth(); }
int Server::busy_slots() const { return impl_->scheduler.busy_slots(); }

void Server::shutdown(double grace_s) {
  Impl& s = *impl_;
  if (!s.started || s.stopped) return;
  s.stopped = true;
  s.draining.store(true);
  s.scheduler.stop_accepting();
  auto wait_until = [](double seconds, const std::function<bool()>& done) {
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
    while (!done() && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return done();
  };
  if (s.scheduler.state() == LoadState::kReady && !wait_until(grace_s, [&] { return s.scheduler.idle(); })) {
    s.scheduler.cancel_all();
    wait_until(5, [&] { return s.scheduler.idle(); });
  }
  // The streams write their last events; then close (cpp-httplib cuts streams still running at stop()).
  wait_until(2, [&] { return s.in_flight.load() <= 0; });
  s.http.stop();
  if (s.listener.joinable()) s.listener.join();
  s.scheduler.stop();
}

}  // namespace qvl::server
