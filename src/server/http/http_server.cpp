// An HTTP/1.1 server (Boost.Beast/Asio) that bounds what a client can hold: deadlines on a request's header
// and body, header and body size caps counted as bytes arrive, a connection cap, and blocking handlers run
// on a worker pool while cheap ones answer on the I/O thread.
//
// Threads: one I/O thread runs every socket operation and the cheap (inline) handlers; `workers` threads run
// the blocking handlers and write streamed bodies. A connection reads one request at a time and reads the
// next (pipelined or after keep-alive) only once the response is sent, so answers keep the requests' order.
#include "server/http/http_server.h"


#include <algorithm>
#include <array>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>
#include <unordered_map>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/status.hpp>
#include <boost/beast/http/string_body.hpp>

#include "server/http/framing.h"
#include "server/http/inflate.h"

namespace qvl::server::http {

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

constexpr size_t kMaxHeaderFields = 100;     // a browser sends ~20
constexpr size_t kMaxDrainBytes = 4u << 20;  // read and dropped after an error answer, so the client sees it
constexpr double kDrainSeconds = 2;

std::chrono::milliseconds millis(double s) { return std::chrono::milliseconds(static_cast<int64_t>(s * 1000)); }

// A header value as written: CR and LF dropped, so no value can start another header.
std::string safe_value(const std::string& v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c != '\r' && c != '\n') out += c;
  }
  return out;
}

// The status line and header fields of a response.
std::string serialize_head(const Response& res, bool chunked, bool close) {
  std::string reason(bhttp::obsolete_reason(bhttp::int_to_status(static_cast<unsigned>(res.status))));
  if (res.status == 499) reason = "Client Closed Request";
  if (reason.empty() || reason == "<unknown-status>") reason = "Status";
  std::string h = "HTTP/1.1 " + std::to_string(res.status) + " " + reason + "\r\n";
  bool nosniff = false;
  for (const auto& [k, v] : res.headers) {
    if (iequals(k, "Content-Length") || iequals(k, "Transfer-Encoding") || iequals(k, "Connection") ||
        iequals(k, "Content-Type")) {
      continue;
    }
    nosniff |= iequals(k, "X-Content-Type-Options");
    h += safe_value(k) + ": " + safe_value(v) + "\r\n";
  }
  if (!res.content_type.empty()) h += "Content-Type: " + safe_value(res.content_type) + "\r\n";
  if (!nosniff) h += "X-Content-Type-Options: nosniff\r\n";
  h += chunked ? std::string("Transfer-Encoding: chunked\r\n") : "Content-Length: " + std::to_string(res.body.size()) + "\r\n";
  if (close) h += "Connection: close\r\n";
  return h + "\r\n";
}

// Threads that run blocking handlers, first come first served.
class WorkerPool {
 public:
  void start(int n) {
    for (int i = 0; i < n; ++i) threads_.emplace_back([this] { run(); });
  }
  void post(std::function<void()> task) {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (stopping_) return;
      tasks_.push_back(std::move(task));
    }
    cv_.notify_one();
  }
  // Drops the tasks not started, lets the running ones finish, joins.
  void stop() {
    std::deque<std::function<void()>> dropped;
    {
      std::lock_guard<std::mutex> l(mu_);
      stopping_ = true;
      dropped.swap(tasks_);
    }
    cv_.notify_all();
    dropped.clear();
    for (std::thread& t : threads_) t.join();
    threads_.clear();
  }

 private:
  void run() {
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock<std::mutex> l(mu_);
        cv_.wait(l, [&] { return stopping_ || !tasks_.empty(); });
        if (tasks_.empty()) return;
        task = std::move(tasks_.front());
        tasks_.pop_front();
      }
      task();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  std::vector<std::thread> threads_;
  bool stopping_ = false;
};

class Connection;

}  // namespace

struct HttpServer::Impl : std::enable_shared_from_this<HttpServer::Impl> {
  Impl(HttpLimits l, HttpHandlers h) : limits(l), handlers(std::move(h)) {}
  void accept();

  HttpLimits limits;
  HttpHandlers handlers;
  asio::io_context ioc{1};
  asio::executor_work_guard<asio::io_context::executor_type> work{ioc.get_executor()};
  tcp::acceptor acceptor{ioc};
  std::thread io_thread;
  std::atomic<bool> io_done{false};
  WorkerPool pool;
  std::atomic<bool> started{false}, stopping{false};
  std::atomic<int> connections{0};  // accepted and not refused
  std::atomic<int> probe_connections{0};  // past the limit, allowed one probe (limits.probe_reserve)
  std::atomic<int> active{0};
  std::mutex clients_mu;
  std::unordered_map<std::string, int> clients;  // open connections per remote address (I/O thread and destructors)
  int port = -1;
  std::mutex conns_mu;
  std::unordered_map<Connection*, std::weak_ptr<Connection>> conns;
};

namespace {

using ServerImpl = HttpServer::Impl;

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(tcp::socket socket, std::shared_ptr<ServerImpl> srv) : srv_(std::move(srv)), stream_(std::move(socket)) {
    beast::error_code ec;
    stream_.socket().set_option(tcp::no_delay(true), ec);  // streamed tokens go out at once
    peer_.fd = stream_.socket().native_handle();
    auto ep = stream_.socket().remote_endpoint(ec);
    if (!ec) remote_ = ep.address().to_string();
  }
  ~Connection() {
    if (counted_conn_) srv_->connections.fetch_sub(1);
    if (probe_only_) srv_->probe_connections.fetch_sub(1);
    if (counted_client_) {
      std::lock_guard<std::mutex> l(srv_->clients_mu);
      if (auto it = srv_->clients.find(remote_); it != srv_->clients.end() && --it->second <= 0) srv_->clients.erase(it);
    }
    std::lock_guard<std::mutex> l(srv_->conns_mu);
    srv_->conns.erase(this);
  }

  void start() {
    counted_conn_ = true;
    srv_->connections.fetch_add(1);
    read_request();
  }

  const std::string& remote() const { return remote_; }

  // Counts this connection against its address's cap; false (not counted) when the address is at the cap.
  bool count_client() {
    const int cap = srv_->limits.max_connections_per_client;
    std::lock_guard<std::mutex> l(srv_->clients_mu);
    int& n = srv_->clients[remote_];
    if (cap > 0 && n >= cap) {
      if (n == 0) srv_->clients.erase(remote_);
      return false;
    }
    ++n;
    counted_client_ = true;
    return true;
  }

  // Past the connection limit, within the probe reserve: one request, answered only if it is a probe.
  void start_probe_only() {
    probe_only_ = true;
    srv_->probe_connections.fetch_add(1);
    read_request();
  }

  // Over a connection cap: a 503 at once, then close.
  void refuse(bool per_client = false) {
    req_ = std::make_shared<Request>();
    Response res;
    srv_->handlers.error(*req_, 503,
                         per_client ? "this address has " + std::to_string(srv_->limits.max_connections_per_client) +
                                          " connections open, the limit for one client (--max-connections-per-client); "
                                          "close some or retry in a moment"
                                    : "the server has " + std::to_string(srv_->limits.max_connections) +
                                          " connections open, its limit (--max-connections); retry in a moment",
                         res);
    res.set_header("Retry-After", "1");
    write_then_close(std::make_shared<std::string>(serialize_head(res, false, true) + res.body));
  }

  // Closes both directions at once (I/O thread). The descriptor itself is closed when the last holder of
  // the connection (a PeerWatch among them) lets go, so it cannot be reused while a request watches it.
  void close() {
    peer_.closed.store(true);
    req_.reset();
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.expires_never();
    stream_.socket().cancel(ec);
  }

  // Called by a worker: hands bytes to the I/O thread and waits until they are written. False when the
  // connection is closed, the client took nothing for the write timeout, or the server is stopping.
  bool write_blocking(std::string bytes) {
    struct Wait {
      std::mutex mu;
      std::condition_variable cv;
      bool done = false, ok = false;
      void set(bool v) {
        std::lock_guard<std::mutex> l(mu);
        done = true;
        ok = v;
        cv.notify_all();
      }
    };
    auto w = std::make_shared<Wait>();
    auto data = std::make_shared<std::string>(std::move(bytes));
    auto self = shared_from_this();
    asio::post(srv_->ioc, [self, data, w] {
      if (self->peer_.closed.load()) return w->set(false);
      self->stream_.expires_after(millis(self->srv_->limits.write_timeout_s));
      asio::async_write(self->stream_, asio::buffer(*data), [self, data, w](beast::error_code ec, size_t) {
        if (ec) self->close();
        w->set(!ec);
      });
    });
    std::unique_lock<std::mutex> l(w->mu);
    const auto deadline = Clock::now() + millis(srv_->limits.write_timeout_s + 5);
    while (!w->done) {
      w->cv.wait_for(l, std::chrono::milliseconds(100));
      if (!w->done && (srv_->io_done.load() || Clock::now() > deadline)) return false;
    }
    return w->ok;
  }

 private:
  // The chunked body of a streamed response, written from the worker that runs the stream.
  class Sink : public ChunkSink {
   public:
    explicit Sink(Connection& c) : c_(c) {}
    bool write(std::string_view bytes) override {
      if (!ok_) return false;
      if (bytes.empty()) return true;
      char size[20];
      std::snprintf(size, sizeof size, "%zx\r\n", bytes.size());
      std::string chunk = size;
      chunk.append(bytes);
      chunk += "\r\n";
      ok_ = c_.write_blocking(std::move(chunk));
      return ok_;
    }
    bool ok() const { return ok_; }

   private:
    Connection& c_;
    bool ok_ = true;
  };

  const HttpLimits& limits() const { return srv_->limits; }

  void read_request() {
    if (peer_.closed.load() || srv_->stopping.load()) return close();
    parser_.emplace();
    body_reader_ = BodyReader();
    parser_->header_limit(static_cast<std::uint32_t>(limits().max_header));
    parser_->body_limit(static_cast<std::uint64_t>(limits().max_body));
    if (!first_ && buffer_.size() == 0) {  // keep-alive: wait for the next request's first bytes
      stream_.expires_after(millis(limits().keep_alive_s));
      stream_.async_read_some(buffer_.prepare(4096), [self = shared_from_this()](beast::error_code ec, size_t n) {
        if (ec) return self->close();
        self->buffer_.commit(n);
        self->read_header();
      });
      return;
    }
    read_header();
  }

  void read_header() {
    // One deadline for the whole header, however it is dripped in.
    stream_.expires_after(millis(probe_only_ ? std::min(limits().header_timeout_s, limits().probe_header_timeout_s)
                                             : limits().header_timeout_s));
    read_raw_header();
  }

  // Reads until the header's blank line is in the buffer, checks the raw bytes (obs-fold and bare LF are
  // invisible once Beast has parsed them: it joins folded lines), then has the parser take the header.
  void read_raw_header() {
    const auto data = buffer_.data();
    const std::string_view raw(static_cast<const char*>(data.data()), data.size());
    const size_t end = raw.find("\r\n\r\n");
    const std::string_view head = raw.substr(0, end == std::string_view::npos ? raw.size() : end + 4);
    if (const FramingError e = raw_header_error(head)) {
      req_ = std::make_shared<Request>();
      return fail(e.status, e.message);
    }
    if (end == std::string_view::npos) {
      if (raw.size() > limits().max_header) return on_header(bhttp::error::header_limit);
      stream_.async_read_some(buffer_.prepare(4096), [self = shared_from_this()](beast::error_code ec, size_t n) {
        if (ec) return self->on_header(ec);
        self->buffer_.commit(n);
        self->read_raw_header();
      });
      return;
    }
    beast::error_code ec;
    const size_t used = parser_->put(asio::buffer(data.data(), end + 4), ec);
    buffer_.consume(used);
    if (!ec && !parser_->is_header_done()) ec = bhttp::error::partial_message;
    on_header(ec);
  }

  void fill_request() {
    const auto& m = parser_->get();
    req_ = std::make_shared<Request>();
    bad_path_ = false;
    req_->method = std::string(m.method_string());
    req_->target = std::string(m.target());
    const size_t q = req_->target.find('?');
    const std::string_view raw_path = std::string_view(req_->target).substr(0, std::min(q, req_->target.size()));
    if (!decode_path(raw_path, req_->path)) {
      bad_path_ = true;  // refused in on_header, with the request filled in for the log
      req_->path = std::string(raw_path);
    }
    if (q != std::string::npos) req_->query = req_->target.substr(q + 1);
    for (const auto& f : m) req_->headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
    req_->remote_addr = remote_;
    req_->arrived = Clock::now();
    req_->peer = PeerWatch(std::shared_ptr<const PeerState>(shared_from_this(), &peer_));
    keep_alive_ = m.keep_alive();
    counted_ = true;
    srv_->active.fetch_add(1);
  }

  void on_header(beast::error_code ec) {
    if (ec == bhttp::error::body_limit) {  // Content-Length over the limit: refused before any of the body is read
      fill_request();
      return fail(413, too_large());
    }
    if (ec == bhttp::error::header_limit) {
      req_ = std::make_shared<Request>();
      return fail(431, "the request header is over the server's limit of " + std::to_string(limits().max_header) +
                           " bytes; send fewer or shorter header fields");
    }
    if (ec == beast::error::timeout || ec == bhttp::error::end_of_stream || ec == asio::error::eof ||
        ec == asio::error::connection_reset || ec == asio::error::operation_aborted) {
      return close();  // a client that went away, or took too long to send a header (the stream is closed)
    }
    if (ec) {
      req_ = std::make_shared<Request>();
      return fail(400, "malformed HTTP request: " + ec.message());
    }
    fill_request();
    Request& req = *req_;
    if (probe_only_) {
      keep_alive_ = false;  // one request on a connection past the limit
      if (!srv_->handlers.is_probe || !srv_->handlers.is_probe(req)) {
        auto res = std::make_shared<Response>();
        srv_->handlers.error(req, 503,
                             "the server has " + std::to_string(srv_->limits.max_connections) +
                                 " connections open, its limit (--max-connections); retry in a moment",
                             *res);
        res->set_header("Retry-After", "1");
        return send(req_, res, true);
      }
    }
    if (req.headers.size() > kMaxHeaderFields) {
      return fail(431, "the request has " + std::to_string(req.headers.size()) + " header fields, over the limit of " +
                           std::to_string(kMaxHeaderFields));
    }
    if (bad_path_) {
      return fail(400, "malformed HTTP request: the path has a '%' that is not two hex digits, or an escape that "
                       "decodes to a control character or to bytes that are not UTF-8: '" + req.target.substr(0, 80) + "'");
    }
    if (req.path.empty() || (req.path[0] != '/' && !(req.method == "OPTIONS" && req.path == "*"))) {
      return fail(400, "malformed HTTP request: the target must be a path starting with '/', got '" +
                           req.target.substr(0, 80) + "'");
    }
    if (const FramingError e = framing_error(parser_->get().version(), req.method, req.headers)) {
      if (e.status == 405) {
        auto res = std::make_shared<Response>();
        srv_->handlers.error(req, e.status, e.message, *res);
        res->set_header("Allow", kAllowedMethods);
        return send(req_, res, true);
      }
      return fail(e.status, e.message);
    }
    const auto length = parser_->content_length();
    if (length && *length > limits().max_body) return fail(413, too_large());
    // Content-Encoding: one layer at most (every field, every comma-separated coding; identity is none), so a
    // body is never taken as plain text while it is still compressed.
    encoding_.clear();
    for (const auto& [k, v] : req.headers) {
      if (!iequals(k, "Content-Encoding")) continue;
      for (size_t start = 0;;) {
        const size_t comma = v.find(',', start);
        const std::string c = lower_trimmed(std::string_view(v).substr(start, comma == std::string::npos ? std::string::npos : comma - start));
        if (!c.empty() && c != "identity") {
          if (!encoding_.empty())
            return fail(415, "the request body has two Content-Encoding layers ('" + encoding_ + "', '" + c.substr(0, 40) +
                                 "'); send it compressed once, with gzip or deflate");
          encoding_ = c;
        }
        if (comma == std::string::npos) break;
        start = comma + 1;
      }
    }
    if (!encoding_.empty() && encoding_ != "gzip" && encoding_ != "x-gzip" && encoding_ != "deflate") {
      return fail(415, "Content-Encoding '" + encoding_ + "' is not supported; send the body as it is, or gzip or deflate");
    }

    Response res;
    if (srv_->handlers.on_header && srv_->handlers.on_header(req, res)) {
      // Answered from the header alone: a body, if any, is never read, so the connection cannot go on.
      return send(req_, std::make_shared<Response>(std::move(res)), !parser_->is_done());
    }
    if (parser_->is_done()) return on_body({});
    if (iequals(lower_trimmed(req.header("Expect")), "100-continue")) {
      auto data = std::make_shared<std::string>("HTTP/1.1 100 Continue\r\n\r\n");
      stream_.expires_after(millis(limits().write_timeout_s));
      asio::async_write(stream_, asio::buffer(*data), [self = shared_from_this(), data](beast::error_code ec, size_t) {
        if (ec) return self->abandon();
        self->read_body();
      });
      return;
    }
    read_body();
  }

  // Reads the body under one deadline: the bytes as they arrive, each batch handed to the parser through
  // BodyReader, which checks a chunked body's framing lines after every batch (a bare LF, a line too long: 400
  // at once, where Beast alone would wait for the deadline).
  void read_body() {
    stream_.expires_after(millis(limits().body_timeout_s));
    read_body_piece();
  }

  void read_body_piece() {
    const auto d = buffer_.data();
    const BodyStep step = body_reader_.feed(*parser_, {static_cast<const char*>(d.data()), d.size()});
    buffer_.consume(step.used);
    if (step.ec) return on_body(step.ec);
    if (step.done) return on_body({});
    if (step.refusal) return fail(step.refusal.status, step.refusal.message);
    stream_.async_read_some(buffer_.prepare(64 << 10), [self = shared_from_this()](beast::error_code ec, size_t n) {
      if (ec) return self->on_body(ec);  // timed out, went away: abandoned
      self->buffer_.commit(n);
      self->read_body_piece();
    });
  }

  std::string too_large() const {
    return "the request body is over the server's limit of " + std::to_string(limits().max_body) +
           " bytes (--max-body); send smaller images";
  }

  void on_body(beast::error_code ec) {
    if (ec == bhttp::error::body_limit) return fail(413, too_large());  // chunked: the running total passed it
    if (ec && req_ && ec.category() == bhttp::make_error_code(bhttp::error::bad_chunk).category() && ec != bhttp::error::partial_message &&
        ec != bhttp::error::end_of_stream) {
      return fail(400, "malformed HTTP request body: " + ec.message());  // broken framing (a bad chunk size)
    }
    if (ec || !req_) return abandon();  // timed out (the stream is closed), went away, or was closed
    stream_.expires_never();
    Request& req = *req_;
    req.body = std::move(parser_->get().body());
    if (!encoding_.empty()) {
      std::string plain;
      switch (inflate_body(req.body, limits().max_body, plain)) {
        case InflateResult::kOk: req.body = std::move(plain); break;
        case InflateResult::kTooLarge: return fail(413, too_large() + " (counted after undoing Content-Encoding " + encoding_ + ")");
        case InflateResult::kCorrupt:
          return fail(400, "the request body is not valid " + encoding_ + " data, as its Content-Encoding says");
      }
    }
    dispatch();
  }

  void run_handler(Request& req, Response& res) {
    try {
      srv_->handlers.handle(req, res);
    } catch (const std::exception& e) {
      res = Response();
      srv_->handlers.error(req, 500, std::string("internal error: ") + e.what(), res);
    }
  }

  void dispatch() {
    auto req = req_;
    auto self = shared_from_this();
    if (srv_->handlers.is_inline && srv_->handlers.is_inline(*req)) {
      auto res = std::make_shared<Response>();
      run_handler(*req, *res);
      res->stream = nullptr;  // inline handlers never stream
      return send(req, res, false);
    }
    srv_->pool.post([self, req] {
      auto res = std::make_shared<Response>();
      self->run_handler(*req, *res);
      if (res->stream) return self->stream_response(req, res);
      asio::post(self->srv_->ioc, [self, req, res] { self->send(req, res, false); });
    });
  }

  // On a worker: the header, then the body as the handler's stream writes it, then the last chunk.
  void stream_response(std::shared_ptr<Request> req, std::shared_ptr<Response> res) {
    const bool close_after = !keep_alive_ || srv_->stopping.load();
    bool ok = write_blocking(serialize_head(*res, true, close_after));
    if (ok) {
      Sink sink(*this);
      res->stream(sink);
      ok = sink.ok() && write_blocking("0\r\n\r\n");
    }
    res->stream = nullptr;  // releases what the stream held (its job, its PeerWatch)
    asio::post(srv_->ioc, [self = shared_from_this(), req, res, ok, close_after] {
      self->finish(*req, *res);
      if (!ok) return self->close();
      if (close_after) return self->linger_close();
      self->first_ = false;
      self->read_request();
    });
  }

  // On the I/O thread: writes a whole response, then reads the next request or closes.
  void send(std::shared_ptr<Request> req, std::shared_ptr<Response> res, bool must_close) {
    const bool close_after = must_close || !keep_alive_ || srv_->stopping.load();
    auto data = std::make_shared<std::string>(serialize_head(*res, false, close_after));
    if (req->method != "HEAD") *data += res->body;
    stream_.expires_after(millis(limits().write_timeout_s));
    asio::async_write(stream_, asio::buffer(*data),
                      [self = shared_from_this(), data, req, res, close_after](beast::error_code ec, size_t) {
                        self->finish(*req, *res);
                        if (ec) return self->close();
                        if (close_after) return self->linger_close();
                        self->first_ = false;
                        self->read_request();
                      });
  }

  // An error the server finds itself; the connection closes after it.
  void fail(int status, const std::string& message) {
    auto res = std::make_shared<Response>();
    if (!req_) req_ = std::make_shared<Request>();
    srv_->handlers.error(*req_, status, message, *res);
    send(req_, res, true);
  }

  // The request ends without an answer (its client went away or took too long).
  void abandon() {
    if (counted_) {
      Response res;
      res.status = 408;
      auto req = req_ ? req_ : std::make_shared<Request>();
      finish(*req, res);
    }
    close();
  }

  void finish(const Request& req, const Response& res) {
    if (!counted_) return;
    counted_ = false;
    srv_->active.fetch_sub(1);
    if (srv_->handlers.log) srv_->handlers.log(req, res);
    req_.reset();  // its PeerWatch holds this connection: keeping it would keep the connection forever
  }

  void write_then_close(std::shared_ptr<std::string> data) {
    stream_.expires_after(millis(limits().write_timeout_s));
    asio::async_write(stream_, asio::buffer(*data), [self = shared_from_this(), data](beast::error_code ec, size_t) {
      if (ec) return self->close();
      self->linger_close();
    });
  }

  // Stops sending and reads (and drops) what the client still sends for a short while, so that it reads
  // the answer instead of a reset; then closes.
  void linger_close() {
    peer_.closed.store(true);
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    stream_.expires_after(millis(kDrainSeconds));
    drain();
  }
  void drain() {
    stream_.async_read_some(asio::buffer(drain_buf_), [self = shared_from_this()](beast::error_code ec, size_t n) {
      self->drained_ += n;
      if (ec || self->drained_ > kMaxDrainBytes) return self->close();
      self->drain();
    });
  }

  std::shared_ptr<ServerImpl> srv_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  BodyReader body_reader_;  // the current request's body, batch by batch (framing.h)
  std::shared_ptr<Request> req_;
  PeerState peer_;
  std::string remote_;
  std::string encoding_;
  std::array<char, 16384> drain_buf_{};
  size_t drained_ = 0;
  bool first_ = true;
  bool keep_alive_ = true;
  bool counted_ = false;       // this request is in `active`
  bool counted_conn_ = false;  // this connection is in `connections`
  bool probe_only_ = false;    // past the limit: in `probe_connections`, one probe answered
  bool bad_path_ = false;      // this request's path did not decode (decode_path)
  bool counted_client_ = false;  // in `clients[remote_]`
};

}  // namespace

void HttpServer::Impl::accept() {
  acceptor.async_accept(ioc, [self = shared_from_this()](beast::error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted || self->stopping.load()) return;
    if (!ec) {
      auto c = std::make_shared<Connection>(std::move(socket), self);
      {
        std::lock_guard<std::mutex> l(self->conns_mu);
        self->conns.emplace(c.get(), c);
      }
      if (!c->count_client()) {
        c->refuse(/*per_client=*/true);
      } else if (self->connections.load() < self->limits.max_connections) {
        c->start();
      } else if (self->probe_connections.load() < self->limits.probe_reserve) {
        c->start_probe_only();
      } else {
        c->refuse();
      }
    }
    self->accept();  // (out of descriptors: the next accept fails the same way until one is freed)
  });
}

HttpServer::HttpServer(HttpLimits limits, HttpHandlers handlers)
    : impl_(std::make_shared<Impl>(limits, std::move(handlers))) {}

HttpServer::~HttpServer() { stop(); }

Status HttpServer::start(const std::string& host, int port) {
  Impl& s = *impl_;
  QVL_CHECK(!s.started.load());
  const std::string where = host + ":" + std::to_string(port);
  beast::error_code ec;
  tcp::resolver resolver(s.ioc);
  auto results = resolver.resolve(host, std::to_string(port), tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec || results.empty()) {
    return Status::Error("cannot listen on " + where + ": the host does not resolve (" + ec.message() +
                         "); give --host an address such as 127.0.0.1");
  }
  const tcp::endpoint ep = results.begin()->endpoint();
  s.acceptor.open(ep.protocol(), ec);
  // SO_REUSEADDR only lets a new server bind while old connections are in TIME_WAIT; unlike SO_REUSEPORT it
  // never lets two servers listen on one port.
  if (!ec) s.acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) s.acceptor.bind(ep, ec);
  if (!ec) s.acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    beast::error_code ignored;
    s.acceptor.close(ignored);
    const std::string hint = ec == asio::error::address_in_use
                                 ? "; another process (another qvl serve?) listens there: stop it or pick another --port"
                                 : "; pick another --host or --port";
    return Status::Error("cannot listen on " + where + ": " + ec.message() + hint);
  }
  s.port = s.acceptor.local_endpoint().port();
  s.started.store(true);
  s.pool.start(std::max(1, s.limits.workers));
  s.accept();
  s.io_thread = std::thread([&s] {
    s.ioc.run();
    s.io_done.store(true);
  });
  return Status::Ok();
}

int HttpServer::port() const { return impl_->port; }
int HttpServer::active_requests() const { return impl_->active.load(); }

void HttpServer::stop() {
  Impl& s = *impl_;
  if (!s.started.load() || s.stopping.exchange(true)) return;
  asio::post(s.ioc, [&s] {
    beast::error_code ec;
    s.acceptor.close(ec);
    std::vector<std::shared_ptr<Connection>> open;
    {
      std::lock_guard<std::mutex> l(s.conns_mu);
      for (auto& [p, w] : s.conns) {
        if (auto c = w.lock()) open.push_back(std::move(c));
      }
    }
    for (auto& c : open) c->close();
  });
  s.pool.stop();  // running handlers end: their connections are closed, their jobs cancelled by the caller
  s.work.reset();
  // Closed connections finish their last handlers; give them a moment, then stop the loop regardless.
  const auto deadline = Clock::now() + std::chrono::seconds(3);
  while (!s.io_done.load() && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  if (!s.io_done.load()) s.ioc.stop();
  s.io_thread.join();
  {
    std::lock_guard<std::mutex> l(s.conns_mu);
    s.conns.clear();
  }
  beast::error_code ec;
  s.acceptor.close(ec);
}

}  // namespace qvl::server::http
