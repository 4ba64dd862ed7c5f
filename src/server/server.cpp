// The HTTP server of `qvl serve`: the API routes, access control (Host, Origin, API keys, CORS), /health,
// /metrics and the page, in front of one Scheduler that loads and owns the model.
#include "server/server.h"

#include <arpa/inet.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <thread>

#include "kernels/kernels.h"
#include "server/api.h"
#include "server/assets.h"
#include "server/http/http_server.h"
#include "util/cpu_budget.h"

namespace qvl::server {

namespace {

using Clock = std::chrono::steady_clock;

// The page's policy: everything from this server, images also from data: and blob: URLs (attached pictures),
// no inline script or style, never inside a frame. src/server/ui/index.html carries the same as a <meta>.
constexpr const char* kPageCsp =
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; media-src 'self' blob:; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

// Constant-time comparison, so that response timing does not reveal how much of a key matched.
bool same_key(const std::string& given, const std::string& key) {
  if (key.empty()) return false;
  unsigned char diff = given.size() != key.size() ? 1 : 0;
  for (size_t i = 0; i < given.size(); ++i) diff |= static_cast<unsigned char>(given[i] ^ key[i % key.size()]);
  return diff == 0;
}

// The endpoint label of /metrics: known routes by name, everything else folded (bounded cardinality).
std::string endpoint_label(const std::string& path) {
  static const char* const kRoutes[] = {"/health", "/livez", "/readyz", "/metrics", "/v1/models", "/v1/chat/completions", "/api/chat",
                                        "/api/generate", "/api/tags", "/api/ps", "/api/version", "/api/show",
                                        "/v1/vision/completion", "/chat", "/v1/completions", "/tokenize",
                                        "/detokenize", "/apply-template", "/v1/responses", "/api/pull",
                                        "/v1/embeddings", "/api/embed", "/api/embeddings", "/v1/rerank",
                                        "/v1/documents/pages"};
  for (const char* r : kRoutes) {
    if (path == r) return r;
  }
  if (path.rfind("/v1/models/", 0) == 0) return "/v1/models/{id}";
  const std::string_view responses = "/v1/responses/", items = "/input_items";
  if (path.starts_with(responses)) {
    const bool listing = path.size() > responses.size() + items.size() && path.ends_with(items);
    return listing ? "/v1/responses/{id}/input_items" : "/v1/responses/{id}";
  }
  if (find_asset(path)) return "page";
  return "other";
}

// The probes: public (no API key), answered on the I/O thread, not in the access log.
bool is_probe(const std::string& path) { return path == "/health" || path == "/livez" || path == "/readyz"; }

std::string lower(std::string s) {
  for (char& c : s) c = (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
  return s;
}

// The host of a Host header value ("name", "name:port", "[v6]" or "[v6]:port"), lowercased.
std::string host_name(const std::string& authority) {
  if (!authority.empty() && authority[0] == '[') {
    const size_t close = authority.find(']');
    return close == std::string::npos ? authority : lower(authority.substr(0, close + 1));
  }
  return lower(authority.substr(0, authority.find(':')));
}

// An IPv4 address or a bracketed IPv6 address: never a name that DNS rebinding could point here.
bool is_ip_literal(const std::string& host) {
  unsigned char buf[sizeof(in6_addr)];
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    return inet_pton(AF_INET6, host.substr(1, host.size() - 2).c_str(), buf) == 1;
  }
  return inet_pton(AF_INET, host.c_str(), buf) == 1;
}

// True for a listen address only this machine can reach (127.0.0.0/8, ::1, localhost).
bool is_loopback_bind(const std::string& host) {
  const std::string h = lower(host);
  if (h == "localhost" || h == "::1" || h == "[::1]") return true;
  in_addr v4{};
  return inet_pton(AF_INET, h.c_str(), &v4) == 1 && (ntohl(v4.s_addr) >> 24) == 127;
}

// The names a client on the network may reach this machine by, without asking DNS: the kernel's host name,
// its first label ("box" of "box.lan") and the mDNS name ("box.local"), lowercased.
std::vector<std::string> machine_host_names() {
  char buf[256] = {};
  std::vector<std::string> names;
  if (gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return names;
  auto add = [&](const std::string& n) {
    if (!n.empty() && std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
  };
  const std::string full = lower(buf);
  const std::string first = full.substr(0, full.find('.'));
  add(full);
  add(first);
  add(first + ".local");
  return names;
}

}  // namespace

struct Server::Impl {
  Impl(ServerOptions o, ModelLoader l, std::shared_ptr<const LoadProgress> p)
      : options(std::move(o)), load(std::move(l)), progress(std::move(p)), scheduler(scheduler_options()),
        ctx{options, scheduler, metrics, {}, 0, {}},
        decode_memory(options.decode_memory_mb > 0 ? static_cast<uint64_t>(options.decode_memory_mb) << 20
                                                   : DecodeMemory::default_capacity()),
        responses(static_cast<size_t>(options.response_store_mb) << 20),
        pages(static_cast<size_t>(options.page_cache_mb) << 20) {
    ctx.decode_memory = &decode_memory;
    ctx.responses = &responses;
    ctx.documents = options.documents;
    ctx.documents.pdf.max_file_bytes = options.max_body;  // a document comes in the body (or from --media-dir)
    ctx.page_cache = &pages;
  }

  SchedulerOptions scheduler_options() {
    SchedulerOptions s;
    s.threads = options.threads > 0 ? options.threads : default_threads();
    s.pin = options.pin;
    s.parallel = options.parallel;
    s.queue = options.queue;
    s.slice_tokens = options.slice_tokens;
    s.image_cache_bytes = static_cast<size_t>(options.image_cache_mb) << 20;
    s.prefix_cache_bytes = static_cast<size_t>(options.prefix_cache_mb) << 20;
    s.on_round = [this](int64_t prompt, int64_t generated, const std::vector<double>& gaps) {
      metrics.observe_round(prompt, generated, gaps);
    };
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
      g.cached_tokens = t.cached_tokens;
      g.images = t.images;
      g.generated_tokens = t.generated_tokens;
      g.ttft_s = t.generated_tokens > 0 ? (u.queue_ms + t.ttft_ms) / 1000 : -1;
      g.duration_s = u.total_ms / 1000;
      g.image_encode_s = t.image_tokens > 0 ? (t.preprocess_ms + t.vision_ms) / 1000 : -1;
      g.ok = u.error == JobError::kNone;
      metrics.observe(g);
    };
    return s;
  }

  bool authorized(const http::Request& req) const {
    if (options.api_keys.empty()) return true;
    // "Bearer KEY": the scheme is case-insensitive (RFC 9110 §11.1), one or more spaces before the key.
    const std::string auth = req.header("Authorization");
    const size_t space = auth.find(' ');
    if (space == std::string::npos || lower(auth.substr(0, space)) != "bearer") return false;
    const size_t start = auth.find_first_not_of(' ', space);
    if (start == std::string::npos) return false;
    const std::string key = auth.substr(start);
    bool ok = false;
    for (const std::string& k : options.api_keys) ok |= same_key(key, k);
    return ok;
  }

  // An origin --cors allows.
  bool cors_allowed(const std::string& origin) const {
    if (origin.empty()) return false;
    for (const std::string& o : options.cors_origins) {
      if (o == "*" || o == origin) return true;
    }
    return false;
  }

  // A Host this server answers to: an IP address, localhost, the --host it listens on, an --allowed-host, or
  // (listening beyond loopback) this machine's own names.
  bool host_allowed(const std::string& host) const {
    if (is_ip_literal(host) || host == "localhost" || host == lower(options.host)) return true;
    for (const std::string& h : options.allowed_hosts) {
      if (h == "*" || lower(h) == host) return true;
    }
    if (!is_loopback_bind(options.host))
      for (const std::string& n : machine_names)
        if (n == host) return true;
    return false;
  }
  const std::vector<std::string> machine_names = machine_host_names();

  bool on_header(const http::Request& req, http::Response& res);
  bool is_inline(const http::Request& req) const;
  void handle(http::Request& req, http::Response& res);
  void log(const http::Request& req, const http::Response& res);
  void health(http::Response& res);
  void livez(http::Response& res);
  struct Readiness {
    bool ready;
    const char* why;  // ready, loading, downloading, error, draining, busy
  };
  Readiness readiness() const;
  void readyz(http::Response& res);
  void metrics_page(http::Response& res);
  void add_routes();

  ServerOptions options;
  ModelLoader load;
  std::shared_ptr<const LoadProgress> progress;  // the loader's download, for /health (may be null)
  Metrics metrics;
  Scheduler scheduler;
  ApiContext ctx;
  DecodeMemory decode_memory;
  ResponseStore responses;
  PageCache pages;
  std::unique_ptr<MediaFetcher> media;  // --allow-media-urls (null: URLs refused)
  http::Router router;
  std::unique_ptr<http::HttpServer> http;
  int port = -1;
  std::atomic<bool> draining{false};
  bool started = false, stopped = false;
};

void Server::Impl::health(http::Response& res) {
  json j{{"status", "ok"}, {"mode", options.mode}, {"model", options.model_id}};
  if (draining.load()) {
    j["status"] = "shutting_down";
    return send_json(res, 503, j);
  }
  switch (scheduler.state()) {
    case LoadState::kLoading:
      j["status"] = "loading";
      if (progress && progress->downloading.load()) {
        const int64_t done = progress->done_bytes.load(), total = progress->total_bytes.load();
        j["status"] = "downloading";
        j["downloaded_bytes"] = done;
        j["total_bytes"] = total;
        j["progress"] = total > 0 ? std::floor(1000.0 * static_cast<double>(done) / static_cast<double>(total)) / 10 : 0.0;
      }
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
  j["model_info"] = model_description(ctx);
  send_json(res, 200, j);
}

// Kubernetes' probes: /livez says only that the process answers (a restart would not help otherwise);
// /readyz says whether to send it work — the model is loaded, it is not draining, and its queue is below
// --ready-queue — so a load balancer or a Service stops routing to it before requests would be refused.
void Server::Impl::livez(http::Response& res) { send_json(res, 200, json{{"status", "alive"}}); }

Server::Impl::Readiness Server::Impl::readiness() const {
  if (draining.load()) return {false, "draining"};
  switch (scheduler.state()) {
    case LoadState::kLoading:
      return {false, progress && progress->downloading.load() ? "downloading" : "loading"};
    case LoadState::kFailed:
      return {false, "error"};
    case LoadState::kReady:
      break;
  }
  const int limit = options.ready_queue > 0 ? options.ready_queue : std::max(1, options.queue);
  if (scheduler.queue_depth() >= limit) return {false, "busy"};
  return {true, "ready"};
}

void Server::Impl::readyz(http::Response& res) {
  const Readiness r = readiness();
  json j{{"status", r.why}, {"model", options.model_id}, {"queue", scheduler.queue_depth()},
         {"slots", json{{"total", scheduler.slots()}, {"busy", scheduler.busy_slots()}}}};
  if (!r.ready) res.set_header("Retry-After", "1");
  send_json(res, r.ready ? 200 : 503, j);
}

void Server::Impl::metrics_page(http::Response& res) {
  Gauges g;
  g.queue_depth = scheduler.queue_depth();
  g.busy_slots = scheduler.busy_slots();
  g.slots = scheduler.slots();
  g.loaded = scheduler.state() == LoadState::kReady;
  g.ready = readiness().ready;
  g.draining = draining.load();
  g.kernel_table = kernels().name;
  if (const Model* m = scheduler.model(); m && g.loaded) {
    const ModelFacts& f = m->facts();
    g.model = options.model_id;
    g.model_format = f.format;
    g.text_weights = weight_type_name(f.text_weights);
    g.vision_weights = f.vision ? weight_type_name(f.vision_weights) : "none";
    g.model_parameters = f.parameters;
  }
  const CacheStats c = scheduler.cache_stats();
  g.image_cache_hits = c.images.hits;
  g.image_cache_misses = c.images.misses;
  g.image_cache_evictions = c.images.evictions;
  g.images_encoded = c.images_encoded;
  g.image_cache_entries = c.images.entries;
  g.image_cache_bytes = c.images.bytes;
  g.image_cache_budget = c.images.budget;
  g.prefix_cache_lookups = c.prefixes.lookups;
  g.prefix_cache_hits = c.prefixes.hits;
  g.prefix_cache_reused_tokens = c.prefixes.reused_tokens;
  g.prefix_cache_evictions = c.prefixes.evictions;
  g.prefix_cache_entries = c.prefixes.entries;
  g.prefix_cache_bytes = c.prefixes.bytes;
  g.prefix_cache_budget = c.prefixes.budget;
  const PageCache::Stats pc = pages.stats();
  g.page_cache_hits = pc.hits;
  g.pages_rendered = pc.rendered;
  g.page_cache_bytes = pc.bytes;
  res.set_content(metrics.render(g), "text/plain; version=0.0.4; charset=utf-8");
}

// Access control, from the header alone (so a refused request's body is never read): the Host must name this
// server (DNS rebinding), a browser's Origin must be this server's own or one --cors allows, then the API key.
bool Server::Impl::on_header(const http::Request& req, http::Response& res) {
  const ApiFamily family = family_of(req.path);
  const std::string host = req.header("Host");
  if (!host.empty() && !host_allowed(host_name(host))) {
    send_error(res, family,
               {403, "the Host header '" + host.substr(0, 100) +
                         "' does not name this server; use its address (e.g. 127.0.0.1:" + std::to_string(port) +
                         ") or start it with --allowed-host " + host_name(host).substr(0, 100),
                "host_not_allowed"});
    return true;
  }
  int origins = 0;
  for (const auto& [k, v] : req.headers) origins += http::iequals(k, "Origin");
  if (origins > 1) {
    send_error(res, family, {400, "the request has " + std::to_string(origins) + " Origin header fields; a browser "
                                  "sends one"});
    return true;
  }
  const std::string origin = req.header("Origin");
  const bool cors = cors_allowed(origin);
  if (req.has_header("Origin") && !cors) {
    // Same origin: the page this server served, whose requests carry its own host:port as Host.
    // (qvl speaks plain HTTP: an https:// origin is another origin, such as a TLS proxy's page, which --cors
    // names.)
    const bool same = !host.empty() && lower(origin) == "http://" + lower(host);
    if (!same) {
      send_error(res, family,
                 {403, "requests from the web origin '" + origin.substr(0, 100) +
                           "' are not allowed; start the server with --cors " + origin.substr(0, 100) +
                           " to allow that site's pages to call it",
                  "origin_not_allowed"});
      return true;
    }
  }
  if (cors) {
    res.set_header("Access-Control-Allow-Origin", origin);
    res.set_header("Vary", "Origin");
  }
  if (req.method == "OPTIONS") {  // a browser's preflight: no credentials on it, so no key check
    if (cors) {
      res.set_header("Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS");
      res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type");
      res.set_header("Access-Control-Max-Age", "600");
    }
    res.set_header("Allow", "GET, POST, DELETE, OPTIONS");
    res.status = 204;
    return true;
  }
  const bool is_public = is_probe(req.path) || ((req.method == "GET" || req.method == "HEAD") && find_asset(req.path));
  if (!is_public && !authorized(req)) {
    send_error(res, family,
               {401, "missing or wrong API key; send the header 'Authorization: Bearer <key>' with a key given to "
                     "--api-key", "invalid_api_key"});
    return true;
  }
  return false;
}

// Cheap and never blocking, so answered on the I/O thread even while every worker waits on inference.
bool Server::Impl::is_inline(const http::Request& req) const {
  if (req.method != "GET" && req.method != "HEAD") return false;
  return is_probe(req.path) || req.path == "/metrics" || find_asset(req.path);
}

void Server::Impl::handle(http::Request& req, http::Response& res) {
  // CORS headers set while checking the header stay on the answer.
  if (cors_allowed(req.header("Origin"))) {
    res.set_header("Access-Control-Allow-Origin", req.header("Origin"));
    res.set_header("Vary", "Origin");
  }
  if (router.dispatch(req, res)) return;
  const bool get = req.method == "GET" || req.method == "HEAD";
  if (get) {
    if (const Asset* a = find_asset(req.path)) {
      res.set_content(std::string(a->data), std::string(a->content_type));
      res.set_header("Content-Security-Policy", kPageCsp);
      res.set_header("X-Frame-Options", "DENY");
      res.set_header("Referrer-Policy", "no-referrer");
      return;
    }
  }
  if (std::string allow = find_asset(req.path) ? "GET, HEAD" : router.methods(req.path); !allow.empty()) {
    res.set_header("Allow", allow);
    return send_error(res, family_of(req.path), {405, req.path + " takes " + allow + ", not " + req.method});
  }
  send_error(res, family_of(req.path),
             {404, "no endpoint " + req.method + " " + req.path + "; see docs/API.md for the endpoints"});
}

void Server::Impl::log(const http::Request& req, const http::Response& res) {
  if (req.method.empty()) return;  // refused before a request was read (connection cap, malformed header)
  metrics.count_request(endpoint_label(req.path), res.status);
  if (options.access_log && !is_probe(req.path) && req.path != "/metrics") {
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - req.arrived).count();
    // The path as sent (Beast admits no space or control character in it), not as decoded: a log line's fields
    // stay the server's.
    const std::string sent = req.target.substr(0, req.target.find('?'));
    std::fprintf(stderr, "%s %s %d %.0f ms\n", req.method.c_str(), sent.c_str(), res.status, ms);
  }
}

void Server::Impl::add_routes() {
  router.get("/health", [this](const http::Request&, http::Response& res) { health(res); });
  router.get("/livez", [this](const http::Request&, http::Response& res) { livez(res); });
  router.get("/readyz", [this](const http::Request&, http::Response& res) { readyz(res); });
  router.get("/metrics", [this](const http::Request&, http::Response& res) { metrics_page(res); });
  add_openai_routes(router, ctx);
  add_ollama_routes(router, ctx);
  add_legacy_routes(router, ctx);
  add_completion_routes(router, ctx);
  add_tokenize_routes(router, ctx);
  add_responses_routes(router, ctx);
  add_document_routes(router, ctx);
  add_retrieval_routes(router, ctx);
}

Server::Server(ServerOptions options, ModelLoader load, std::shared_ptr<const LoadProgress> progress)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(load), std::move(progress))) {}

Server::~Server() { shutdown(0); }

Status Server::start() {
  Impl& s = *impl_;
  QVL_CHECK(!s.started);
  const ServerOptions& o = s.options;
  auto policy = make_image_policy(o.image_dir, o.max_body * 2);
  if (!policy.ok()) return policy.status();
  s.ctx.images = *policy;
  if (!o.media_url_hosts.empty()) {
    MediaUrlOptions mo;
    mo.allowed_hosts = o.media_url_hosts;
    mo.timeout_s = o.media_url_timeout_s;
    s.media = std::make_unique<MediaFetcher>(mo);
    s.ctx.images.urls = s.media.get();
  }
  s.ctx.started_unix = static_cast<int64_t>(std::time(nullptr));

  std::signal(SIGPIPE, SIG_IGN);  // a client that hangs up must fail a write, not kill the process
  s.add_routes();
  http::HttpLimits limits;
  limits.max_body = o.max_body;
  limits.header_timeout_s = o.header_timeout_s;
  limits.body_timeout_s = o.body_timeout_s;
  limits.keep_alive_s = o.keep_alive_s;
  limits.max_connections = o.max_connections;
  limits.max_connections_per_client = o.max_connections_per_client;
  limits.workers = o.http_threads > 0 ? o.http_threads : std::max(16, o.parallel + o.queue + 8);
  http::HttpHandlers h;
  h.on_header = [&s](const http::Request& req, http::Response& res) { return s.on_header(req, res); };
  h.is_inline = [&s](const http::Request& req) { return s.is_inline(req); };
  h.is_probe = [](const http::Request& req) {
    return (req.method == "GET" || req.method == "HEAD") && (is_probe(req.path) || req.path == "/metrics");
  };
  h.handle = [&s](http::Request& req, http::Response& res) { s.handle(req, res); };
  h.error = [](const http::Request& req, int status, const std::string& message, http::Response& res) {
    send_error(res, family_of(req.path), {status, message});
  };
  h.log = [&s](const http::Request& req, const http::Response& res) { s.log(req, res); };
  s.http = std::make_unique<http::HttpServer>(limits, std::move(h));
  if (Status st = s.http->start(o.host, o.port); !st.ok()) {
    s.http.reset();
    return st;
  }
  s.port = s.http->port();
  s.scheduler.start();
  s.started = true;
  return Status::Ok();
}

std::string Server::accepted_hosts() const {
  const ServerOptions& o = impl_->options;
  for (const std::string& h : o.allowed_hosts)
    if (h == "*") return "any Host (--allowed-host *)";
  std::vector<std::string> names = {"localhost"};
  auto add = [&](const std::string& n) {
    if (!n.empty() && std::find(names.begin(), names.end(), lower(n)) == names.end()) names.push_back(lower(n));
  };
  if (!is_ip_literal(lower(o.host)) && !is_ip_literal("[" + lower(o.host) + "]")) add(o.host);
  if (!is_loopback_bind(o.host))
    for (const std::string& n : impl_->machine_names) add(n);
  for (const std::string& h : o.allowed_hosts) add(h);
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out + " and any IP address; add a name with --allowed-host NAME (or QVL_ALLOWED_HOST)";
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
  // The streams write their last events; then close (streams still running then are cut).
  wait_until(2, [&] { return s.http->active_requests() <= 0; });
  s.http->stop();
  s.scheduler.stop();
}

}  // namespace qvl::server
