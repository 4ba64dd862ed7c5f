// An HTTP/1.1 server (Boost.Beast/Asio) that bounds what a client can hold: deadlines on a request's header
// and body, header and body size caps counted as bytes arrive, a connection cap, and blocking handlers run
// on a worker pool while cheap ones answer on the I/O thread.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "server/http/request.h"
#include "util/status.h"

namespace qvl::server::http {

struct HttpLimits {
  size_t max_body = 20u << 20;        // after Content-Encoding is undone; over it: 413
  size_t max_header = 64u << 10;      // request line and all header fields; over it: 431
  double header_timeout_s = 10;       // from a request's first byte to the end of its header; then 408
  double body_timeout_s = 60;         // to receive the whole body once the header is in; then 408
  double keep_alive_s = 5;            // an idle connection between requests is closed after this
  double write_timeout_s = 30;        // a client that takes none of a response's bytes for this long is dropped
  int max_connections = 256;          // more are answered 503 (probes excepted: below)
  // Past max_connections, up to this many more connections may each send one request, which is answered
  // only when HttpHandlers::is_probe says it is a probe (health checks never starve behind a full table);
  // others get 503. Such a connection has probe_header_timeout_s for its header and is closed after the answer.
  int probe_reserve = 8;
  double probe_header_timeout_s = 2;
  int max_connections_per_client = 0; // connections from one address at once (0: no limit); more get 503
  int workers = 16;                   // threads that run blocking handlers
};

struct HttpHandlers {
  // On the I/O thread when a request's header is in, before its body is read: fill `res` and return true to
  // answer at once (the body is then never read), or return false to go on.
  std::function<bool(const Request& req, Response& res)> on_header;
  // Whether a request is cheap and never blocks, so it is answered on the I/O thread (health, metrics).
  std::function<bool(const Request& req)> is_inline;
  // Whether a request is a probe (liveness, readiness, metrics), answered even on a connection past the
  // connection limit (HttpLimits::probe_reserve). Must be inline too.
  std::function<bool(const Request& req)> is_probe;
  // Answers a request: on the I/O thread when is_inline, else on a worker.
  std::function<void(Request& req, Response& res)> handle;
  // The error response for a failure the server detects itself (status 400, 408, 413, 415, 431, 500, 503).
  std::function<void(const Request& req, int status, const std::string& message, Response& res)> error;
  // After a request's response was sent (or failed to be), on any thread.
  std::function<void(const Request& req, const Response& res)> log;
};

class HttpServer {
 public:
  HttpServer(HttpLimits limits, HttpHandlers handlers);
  ~HttpServer();  // stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds host:port (0: any free port) without SO_REUSEPORT, so a port in use is an error, and starts
  // answering on the I/O thread and the workers.
  Status start(const std::string& host, int port);
  int port() const;
  // Requests whose header has arrived and whose response has not been sent yet.
  int active_requests() const;
  // Closes the listener and every connection, and joins the threads. Idempotent.
  void stop();

  struct Impl;  // (public only so that the connections in http_server.cpp can name it)

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace qvl::server::http
