// The HTTP layer of `qvl serve` under hostile or unusual clients: slow headers (slowloris), bodies over the
// limit in every framing, oversize headers, pipelining, a port already taken, DNS rebinding (Host) and
// cross-origin requests (Origin), the page's security headers, and the connection cap.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <zlib.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "test_paths.h"
#include "test_server_fixture.h"

namespace qvl::test {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// A raw TCP connection to 127.0.0.1:port, for what an HTTP client library will not send.
class RawConn {
 public:
  explicit RawConn(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ok_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    const timeval tv = scaled_timeval(2);
    ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  }
  ~RawConn() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool ok() const { return ok_; }
  bool send(const std::string& s) {
    size_t off = 0;
    while (off < s.size()) {
      const ssize_t n = ::send(fd_, s.data() + off, s.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += static_cast<size_t>(n);
    }
    return true;
  }
  bool readable(int timeout_ms = 0) {
    pollfd p{fd_, POLLIN, 0};
    return ::poll(&p, 1, timeout_ms) > 0;
  }
  // One response (Content-Length framed, as every non-streamed answer is), waiting up to timeout_s (at
  // Release speed: scaled here).
  Reply read_response(double timeout_s = 5) {
    timeout_s = scaled(timeout_s);
    const auto start = Clock::now();
    for (;;) {
      const size_t head_end = buf_.find("\r\n\r\n");
      if (head_end != std::string::npos) {
        Reply r;
        r.status = std::atoi(buf_.substr(9, 3).c_str());
        size_t length = 0;
        size_t pos = buf_.find("\r\n") + 2;
        while (pos < head_end) {
          const size_t eol = buf_.find("\r\n", pos);
          const std::string line = buf_.substr(pos, eol - pos);
          const size_t colon = line.find(':');
          if (colon != std::string::npos) {
            std::string name = line.substr(0, colon), value = line.substr(colon + 1);
            while (!value.empty() && value[0] == ' ') value.erase(0, 1);
            r.headers.emplace(name, value);
            if (strcasecmp(name.c_str(), "Content-Length") == 0) length = std::stoul(value);
          }
          pos = eol + 2;
        }
        if (buf_.size() >= head_end + 4 + length) {
          r.body = buf_.substr(head_end + 4, length);
          buf_.erase(0, head_end + 4 + length);
          return r;
        }
      }
      const double left = timeout_s - seconds_since(start);
      if (left <= 0 || !readable(static_cast<int>(left * 1000) + 1)) return Reply{};
      char tmp[65536];
      const ssize_t n = ::recv(fd_, tmp, sizeof tmp, 0);
      if (n <= 0) return Reply{};
      buf_.append(tmp, static_cast<size_t>(n));
    }
  }
  // True when the server closed the connection within timeout_s (not scaled: also a polling step).
  bool closed_by_server(double timeout_s) {
    const auto start = Clock::now();
    while (seconds_since(start) < timeout_s) {
      if (!readable(50)) continue;
      char tmp[4096];
      const ssize_t n = ::recv(fd_, tmp, sizeof tmp, 0);
      if (n <= 0) return true;
    }
    return false;
  }
  int fd() const { return fd_; }

 private:
  int fd_ = -1;
  bool ok_ = false;
  std::string buf_;
};

std::string gzip(const std::string& in) {
  z_stream z{};
  EXPECT_EQ(deflateInit2(&z, 9, Z_DEFLATED, 15 + 16, 9, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&z, in.size()) + 64, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

class HttpHardening : public ServerTest {
 protected:
  std::string host() const { return "127.0.0.1:" + std::to_string(server_->port()); }
  std::string small_chat() const { return chat_body("hi", 2).dump(); }
};

TEST_F(HttpHardening, SlowlorisDoesNotStarveHealthOrChat) {
  start();
  constexpr int kSlow = 48;
  std::vector<std::unique_ptr<RawConn>> slow;
  for (int i = 0; i < kSlow; ++i) {
    slow.push_back(std::make_unique<RawConn>(server_->port()));
    ASSERT_TRUE(slow.back()->ok());
    slow.back()->send("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n");
  }
  std::atomic<bool> stop{false};
  std::thread drip([&] {  // one header byte per connection every 200 ms
    while (!stop.load()) {
      for (auto& c : slow) c->send("X");
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  });
  std::this_thread::sleep_for(scaled_ms(300));  // the slow connections are in
  double worst = 0;
  for (int i = 0; i < 10; ++i) {
    const auto t = Clock::now();
    Reply h = get("/health");
    worst = std::max(worst, seconds_since(t));
    EXPECT_EQ(h.status, 200);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_LT(worst, scaled(1.0));
  const auto t = Clock::now();
  Reply chat = post("/v1/chat/completions", chat_body("hi", 2));
  EXPECT_EQ(chat.status, 200) << chat.body;
  EXPECT_LT(seconds_since(t), scaled(30.0));
  stop.store(true);
  drip.join();
}

TEST_F(HttpHardening, SlowHeaderIsCutAtTheHeaderDeadline) {
  server::ServerOptions o = test_options();
  o.header_timeout_s = 1;
  start(o);
  RawConn c(server_->port());
  c.send("GET /health HTTP/1.1\r\n");
  const auto t = Clock::now();
  bool closed = false;
  while (!closed && seconds_since(t) < scaled(5)) {
    c.send("X");  // a byte every 100 ms: each recv is quick, the total is not
    closed = c.closed_by_server(0.1);
  }
  EXPECT_TRUE(closed);
  EXPECT_LT(seconds_since(t), scaled(3.0));  // the 1 s header deadline, and room for the server to act
}

TEST_F(HttpHardening, ChunkedBodyOverTheLimitIs413WhileItArrives) {
  server::ServerOptions o = test_options();
  o.max_body = 64 * 1024;
  start(o);
  RawConn c(server_->port());
  ASSERT_TRUE(c.send("POST /api/chat HTTP/1.1\r\nHost: " + host() +
                     "\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"));
  const std::string chunk = "4000\r\n" + std::string(0x4000, 'a') + "\r\n";
  size_t sent = 0;
  while (sent < (100u << 20) && !c.readable() && c.send(chunk)) sent += 0x4000;
  Reply r = c.read_response();
  ASSERT_EQ(r.status, 413) << "after " << sent << " bytes";
  EXPECT_TRUE(r.json_body()["error"].is_string());
  EXPECT_LT(sent, 16u << 20);  // refused as it arrived, not after 100 MB
}

TEST_F(HttpHardening, GzipBombIs413AndGzipBodiesWork) {
  server::ServerOptions o = test_options();
  o.max_body = 64 * 1024;
  start(o);
  const std::string bomb = gzip(std::string(50u << 20, ' '));  // 50 MB of spaces in ~50 KB
  ASSERT_LT(bomb.size(), o.max_body);
  Reply r = post("/v1/chat/completions", bomb, {{"Content-Encoding", "gzip"}});
  ASSERT_EQ(r.status, 413) << r.body;
  EXPECT_NE(r.json_body()["error"]["message"].get<std::string>().find("Content-Encoding"), std::string::npos);

  Reply ok = post("/v1/chat/completions", gzip(small_chat()), {{"Content-Encoding", "gzip"}});
  EXPECT_EQ(ok.status, 200) << ok.body;
  EXPECT_EQ(post("/v1/chat/completions", small_chat(), {{"Content-Encoding", "br"}}).status, 415);
}

TEST_F(HttpHardening, ContentLengthOverTheLimitIs413BeforeTheBody) {
  server::ServerOptions o = test_options();
  o.max_body = 64 * 1024;
  start(o);
  for (const char* expect : {"", "Expect: 100-continue\r\n"}) {
    RawConn c(server_->port());
    c.send("POST /v1/chat/completions HTTP/1.1\r\nHost: " + host() +
           "\r\nContent-Type: application/json\r\nContent-Length: 100000000\r\n" + expect + "\r\n");
    const auto t = Clock::now();
    Reply r = c.read_response(3);  // no byte of the body was sent
    ASSERT_EQ(r.status, 413) << expect;
    EXPECT_LT(seconds_since(t), scaled(1.0));
    EXPECT_NE(r.json_body()["error"]["message"].get<std::string>().find("--max-body"), std::string::npos);
  }
}

TEST_F(HttpHardening, OversizeHeaderIs431) {
  start();
  RawConn c(server_->port());
  c.send("GET /health HTTP/1.1\r\nHost: " + host() + "\r\nX-Big: " + std::string(100 * 1024, 'a') + "\r\n\r\n");
  Reply r = c.read_response();
  EXPECT_EQ(r.status, 431);
  std::string many = "GET /health HTTP/1.1\r\nHost: " + host() + "\r\n";
  for (int i = 0; i < 200; ++i) many += "X-" + std::to_string(i) + ": y\r\n";
  RawConn d(server_->port());
  d.send(many + "\r\n");
  EXPECT_EQ(d.read_response().status, 431);
}

TEST_F(HttpHardening, PipelinedRequestsAreAnsweredInOrder) {
  start();
  RawConn c(server_->port());
  const std::string body = small_chat();
  c.send("POST /v1/chat/completions HTTP/1.1\r\nHost: " + host() + "\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body + "GET /v1/models HTTP/1.1\r\nHost: " + host() +
         "\r\n\r\nGET /health HTTP/1.1\r\nHost: " + host() + "\r\n\r\n");
  Reply a = c.read_response(60);
  ASSERT_EQ(a.status, 200) << a.body;
  EXPECT_EQ(a.json_body()["object"], "chat.completion");
  Reply b = c.read_response();
  ASSERT_EQ(b.status, 200);
  EXPECT_EQ(b.json_body()["object"], "list");
  Reply h = c.read_response();
  ASSERT_EQ(h.status, 200);
  EXPECT_EQ(h.json_body()["status"], "ok");
}

TEST_F(HttpHardening, PortInUseFailsToStart) {
  start();
  server::ServerOptions o = test_options();
  o.port = server_->port();
  server::Server second(o, [] { return Model::load(tiny_model_dir()); });
  Status s = second.start();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("in use"), std::string::npos) << s.message();
  EXPECT_EQ(get("/health").status, 200);
}

TEST_F(HttpHardening, HostHeaderMustNameThisServer) {
  server::ServerOptions o = test_options();
  o.allowed_hosts = {"qvl.example"};
  start(o);
  const std::string port = std::to_string(server_->port());
  for (const std::string& h : std::vector<std::string>{"attacker.example", "attacker.example:" + port, "localhost.attacker.example"}) {
    Reply r = post("/v1/chat/completions", chat_body("hi", 2), {{"Host", h}});
    ASSERT_EQ(r.status, 403) << h;
    EXPECT_EQ(r.json_body()["error"]["code"], "host_not_allowed");
    EXPECT_EQ(get("/", {{"Host", h}}).status, 403);
  }
  for (const std::string& h : std::vector<std::string>{"127.0.0.1", "127.0.0.1:" + port, "localhost:" + port, "LOCALHOST", "[::1]:" + port,
                              "qvl.example", "qvl.example:443"}) {
    EXPECT_EQ(get("/v1/models", {{"Host", h}}).status, 200) << h;
  }
}

TEST_F(HttpHardening, ForeignOriginIsRefusedBeforeTheBody) {
  start();
  RawConn c(server_->port());
  c.send("POST /api/chat HTTP/1.1\r\nHost: " + host() +
         "\r\nOrigin: http://evil.example\r\nContent-Type: text/plain\r\nContent-Length: 5000\r\n\r\n");
  Reply r = c.read_response(3);  // the body never comes: refused from the header alone
  ASSERT_EQ(r.status, 403);
  EXPECT_NE(r.json_body()["error"].get<std::string>().find("--cors"), std::string::npos);
  EXPECT_EQ(post("/api/chat", chat_body("hi", 2).dump(), {{"Origin", "null"}}, "text/plain").status, 403);
  // The page's own origin, and requests without Origin, pass.
  EXPECT_EQ(post("/v1/chat/completions", chat_body("hi", 2), {{"Origin", "http://" + host()}}).status, 200);
  EXPECT_EQ(post("/v1/chat/completions", chat_body("hi", 2)).status, 200);
  server_.reset();

  server::ServerOptions o = test_options();
  o.cors_origins = {"http://evil.example"};
  start(o);
  Reply ok = post("/v1/chat/completions", chat_body("hi", 2), {{"Origin", "http://evil.example"}});
  EXPECT_EQ(ok.status, 200);
  EXPECT_EQ(ok.headers.find("Access-Control-Allow-Origin")->second, "http://evil.example");
  EXPECT_EQ(post("/v1/chat/completions", chat_body("hi", 2), {{"Origin", "http://other.example"}}).status, 403);
}

TEST_F(HttpHardening, BodyWithoutContentTypeIsAccepted) {
  start();
  json body{{"model", "tiny"},
            {"messages", json::array({json{{"role", "user"}, {"content", "hi"}}})},
            {"stream", false},
            {"options", json{{"num_predict", 2}, {"temperature", 0}}},
            {"padding", std::string(58 * 1024, 'x')}};
  const std::string text = body.dump();
  RawConn c(server_->port());
  c.send("POST /api/chat HTTP/1.1\r\nHost: " + host() + "\r\nContent-Length: " + std::to_string(text.size()) +
         "\r\n\r\n" + text);
  Reply r = c.read_response(60);
  EXPECT_EQ(r.status, 200) << r.body;
}

TEST_F(HttpHardening, PageSecurityHeadersAndCharset) {
  start();
  for (const char* path : {"/", "/app.js", "/style.css"}) {
    Reply p = get(path);
    ASSERT_EQ(p.status, 200) << path;
    const std::string csp = p.headers.find("Content-Security-Policy")->second;
    EXPECT_NE(csp.find("default-src 'self'"), std::string::npos);
    EXPECT_NE(csp.find("frame-ancestors 'none'"), std::string::npos);
    EXPECT_NE(csp.find("img-src 'self' data: blob:"), std::string::npos);
    EXPECT_EQ(csp.find("unsafe-inline"), std::string::npos);
    EXPECT_EQ(p.headers.find("X-Frame-Options")->second, "DENY");
    EXPECT_EQ(p.headers.find("X-Content-Type-Options")->second, "nosniff");
  }
  for (const char* path : {"/health", "/v1/models", "/metrics", "/nothing"}) {
    EXPECT_EQ(get(path).headers.count("X-Content-Type-Options"), 1u) << path;
  }
  Reply s = post_stream("/chat", json{{"question", "hi"}, {"max_tokens", 2}});
  ASSERT_EQ(s.status, 200);
  EXPECT_NE(s.headers.find("Content-Type")->second.find("text/event-stream; charset=utf-8"), std::string::npos);
  EXPECT_EQ(s.headers.count("X-Content-Type-Options"), 1u);
}

TEST_F(HttpHardening, ConnectionsOverTheCapGetAQuick503AndProbesStillAnswer) {
  server::ServerOptions o = test_options();
  o.max_connections = 4;
  start(o);
  std::vector<std::unique_ptr<RawConn>> held;
  for (int i = 0; i < 4; ++i) {
    held.push_back(std::make_unique<RawConn>(server_->port()));
    held.back()->send("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");  // keep-alive: the connection stays
    ASSERT_EQ(held.back()->read_response().status, 200);
  }
  // An API request past the cap: 503 at once, and the connection closes.
  RawConn extra(server_->port());
  const auto t = Clock::now();
  extra.send("GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
  Reply r = extra.read_response(2);
  ASSERT_EQ(r.status, 503);
  EXPECT_LT(seconds_since(t), scaled(1.0));
  EXPECT_TRUE(r.json_body().contains("error"));
  EXPECT_TRUE(extra.closed_by_server(scaled(3)));
  // The probes still answer with the table full (a liveness probe must not fail for a busy server).
  for (const char* probe : {"/livez", "/health", "/readyz", "/metrics"}) {
    RawConn p(server_->port());
    p.send(std::string("GET ") + probe + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    Reply pr = p.read_response(2);
    EXPECT_NE(pr.status, 503) << probe;
    EXPECT_GT(pr.status, 0) << probe;
  }
  // A silent connection past the cap holds a probe slot for 2 s at most.
  RawConn silent(server_->port());
  EXPECT_TRUE(silent.closed_by_server(scaled(4)));
  held.clear();
  EXPECT_TRUE(wait_for([&] { return get("/health").status == 200; }, 5));
}

// One address cannot hold the whole connection table.
TEST_F(HttpHardening, OneClientAddressHasItsOwnConnectionCap) {
  server::ServerOptions o = test_options();
  o.max_connections_per_client = 3;
  start(o);
  std::vector<std::unique_ptr<RawConn>> held;
  for (int i = 0; i < 3; ++i) {
    held.push_back(std::make_unique<RawConn>(server_->port()));
    held.back()->send("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    ASSERT_EQ(held.back()->read_response().status, 200);
  }
  RawConn extra(server_->port());
  Reply r = extra.read_response(2);
  ASSERT_EQ(r.status, 503);
  EXPECT_NE(r.body.find("--max-connections-per-client"), std::string::npos) << r.body;
  held.pop_back();
  EXPECT_TRUE(wait_for([&] { return get("/health").status == 200; }, 5));
}

// RFC 9112 §6: chunked (last, once) or Content-Length frame a body; any other transfer coding is 501, a
// malformed list or both framings 400, and the connection closes, so a body is never read as a request.
TEST_F(HttpHardening, TransferCodingsOtherThanChunkedAreRefusedAndClose) {
  start();
  const std::string body = "GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";  // smuggled, if read as a request
  const std::vector<std::pair<std::string, int>> cases = {
      {"gzip", 501}, {"identity", 501}, {"deflate", 501}, {"x", 501}, {"", 400}, {"chunked, chunked", 400},
      {"chunked, identity", 400}, {"gzip, chunked", 501}};
  for (const auto& [te, want] : cases) {
    SCOPED_TRACE("Transfer-Encoding: " + te);
    RawConn c(server_->port());
    c.send("POST /v1/chat/completions HTTP/1.1\r\nHost: " + host() + "\r\nTransfer-Encoding: " + te +
           "\r\nContent-Type: application/json\r\n\r\n" + body);
    Reply r = c.read_response(3);
    EXPECT_EQ(r.status, want) << r.body;
    EXPECT_TRUE(c.closed_by_server(3));
    EXPECT_LE(c.read_response(0.2).status, 0);  // no second response
  }
  RawConn both(server_->port());
  both.send("POST /v1/chat/completions HTTP/1.1\r\nHost: " + host() + "\r\nTransfer-Encoding: chunked\r\n"
            "Content-Length: 5\r\n\r\n0\r\n\r\n");
  EXPECT_EQ(both.read_response(3).status, 400);
  EXPECT_TRUE(both.closed_by_server(3));
}

TEST_F(HttpHardening, HostExpectAndMethodAreCheckedAsTheRfcsSay) {
  start();
  auto status = [&](const std::string& head) {
    RawConn c(server_->port());
    c.send(head + "\r\n");
    return c.read_response(3);
  };
  const std::string h = "Host: " + host() + "\r\n";
  EXPECT_EQ(status("GET /health HTTP/1.1\r\n" + h + h).status, 400);                      // two Host fields
  EXPECT_EQ(status("GET /health HTTP/1.1\r\n").status, 400);                              // none in HTTP/1.1
  EXPECT_EQ(status("GET /health HTTP/1.0\r\n").status, 200);                              // HTTP/1.0 needs none
  for (const char* bad : {"", "[::1]attacker.example", "127.0.0.1:abc", ":99999", "a b", "127.0.0.1:99999"}) {
    EXPECT_EQ(status(std::string("GET /health HTTP/1.1\r\nHost: ") + bad + "\r\n").status, 400) << bad;
  }
  for (const char* good : {"localhost", "localhost:8080", "[::1]:80", "127.0.0.1"}) {
    EXPECT_EQ(status(std::string("GET /health HTTP/1.1\r\nHost: ") + good + "\r\n").status, 200) << good;
  }
  EXPECT_EQ(status("GET /health HTTP/1.1\r\n" + h + "Expect: 200-ok\r\n").status, 417);
  EXPECT_EQ(status("GET /health HTTP/1.1\r\n" + h + "X-A: a\r\n  folded\r\n").status, 400);  // obs-fold
  EXPECT_EQ(status("GET /health HTTP/1.1\n" + h).status, 400);                                  // bare LF
  {
    // A chunked body with bare-LF lines: 400 at once, not a wait for the body's deadline.
    RawConn c(server_->port());
    const auto t0 = Clock::now();
    c.send("POST /api/chat HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\n\r\n2\n{}\n0\n\n");
    EXPECT_EQ(c.read_response(5).status, 400);
    EXPECT_LT(seconds_since(t0), scaled(2.0));
  }
  // ... in any line of the framing, not only the first: a later chunk-size line, a trailer (each sent after
  // the lines before it have been read), and a size line that never ends. No CRLF follows the bare LF, so
  // Beast itself would find no line end to fail on and would wait for the body's deadline.
  for (const auto& [first, rest] : std::vector<std::pair<std::string, std::string>>{
           {"1\r\n{\r\n", "1\n}"},
           {"2\r\n{}\r\n0\r\n", "X-T: y\n\r\n"},
           {"2\r\n{}", "\r\n1\n}"},
           {"2\r\n{}\r\n", std::string(9000, '0')}}) {
    RawConn c(server_->port());
    const auto t0 = Clock::now();
    c.send("POST /api/chat HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\n\r\n" + first);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    c.send(rest);
    const Reply r = c.read_response(5);
    EXPECT_EQ(r.status, 400) << rest.substr(0, 20);
    EXPECT_NE(r.body.find("chunked framing"), std::string::npos) << r.body;
    EXPECT_LT(seconds_since(t0), scaled(2.0));
  }
  {
    // The same body with CRLF everywhere, a byte at a time with pauses, is read and answered.
    RawConn c(server_->port());
    c.send("POST /api/chat HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\n\r\n");
    for (char ch : std::string("1;e=1\r\n{\r\n1\r\n}\r\n0\r\nX-T: y\r\n\r\n")) {
      c.send(std::string(1, ch));
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    const Reply r = c.read_response(5);  // read whole: "{}" is Ollama's "load the model", answered 200
    EXPECT_EQ(r.status, 200) << r.body;
  }
  {
    // A body that is only the last chunk, its bytes apart: Beast 1.74 asserted (abort) when "0\r\n" came back
    // one byte longer. Read whole, it is an empty body: the handler's own 400; the server still answers.
    RawConn c(server_->port());
    c.send("POST /api/chat HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\n\r\n");
    for (const char* piece : {"0\r\n", "\r", "\n"}) {
      c.send(piece);
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    const Reply r = c.read_response(5);
    EXPECT_EQ(r.status, 400) << r.body;
    EXPECT_EQ(r.body.find("chunked framing"), std::string::npos) << r.body;
    EXPECT_EQ(status("GET /health HTTP/1.1\r\n" + h).status, 200);
  }
  Reply trace = status("TRACE /health HTTP/1.1\r\n" + h);
  EXPECT_EQ(trace.status, 405);
  EXPECT_EQ(trace.headers.count("Allow"), 1u);
  EXPECT_EQ(status("PUT /v1/models HTTP/1.1\r\n" + h + "Content-Length: 0\r\n").status, 405);
  EXPECT_EQ(status("get /health HTTP/1.1\r\n" + h).status, 501);
  EXPECT_EQ(status("BREW /health HTTP/1.1\r\n" + h).status, 501);
}

TEST_F(HttpHardening, OriginsAuthorizationSchemesAndEncodingLayers) {
  server::ServerOptions o = test_options();
  o.api_keys = {"K"};
  start(o);
  auto models = [&](const std::string& extra) {
    RawConn c(server_->port());
    c.send("GET /v1/models HTTP/1.1\r\nHost: " + host() + "\r\n" + extra + "\r\n");
    return c.read_response(3).status;
  };
  EXPECT_EQ(models("Authorization: Bearer K\r\n"), 200);
  EXPECT_EQ(models("Authorization: bearer K\r\n"), 200);  // the scheme is case-insensitive
  EXPECT_EQ(models("Authorization: BEARER  K\r\n"), 200);
  EXPECT_EQ(models("Authorization: Basic K\r\n"), 401);
  EXPECT_EQ(models("Authorization: Bearer K\r\nOrigin: http://" + host() + "\r\n"), 200);
  EXPECT_EQ(models("Authorization: Bearer K\r\nOrigin: https://" + host() + "\r\n"), 403);  // plain HTTP here
  EXPECT_EQ(models("Authorization: Bearer K\r\nOrigin: http://" + host() + "\r\nOrigin: http://evil.example\r\n"), 400);
  // Two gzip layers: refused, never taken as one.
  const std::string twice = gzip(gzip(small_chat()));
  for (const std::string& enc : {std::string("Content-Encoding: gzip\r\nContent-Encoding: gzip\r\n"),
                                 std::string("Content-Encoding: gzip, gzip\r\n")}) {
    RawConn c(server_->port());
    c.send("POST /v1/chat/completions HTTP/1.1\r\nHost: " + host() + "\r\nAuthorization: Bearer K\r\n" + enc +
           "Content-Type: application/json\r\nContent-Length: " + std::to_string(twice.size()) + "\r\n\r\n" + twice);
    EXPECT_EQ(c.read_response(5).status, 415) << enc;
  }
}

// An image part's bounds must make sense; file: URIs name this machine's files only; no NUL in a path.
TEST_F(HttpHardening, ImagePartBoundsAndFileUris) {
  server::ServerOptions o = test_options();
  o.image_dir = test::data_dir() + "/images";
  start(o);
  auto ask = [&](const json& image_part) {
    json body = chat_body("hi", 1);
    body["messages"][0]["content"] = json::array({image_part, {{"type", "text"}, {"text", "hi"}}});
    return post("/v1/chat/completions", body);
  };
  const std::string file = test::data_dir() + "/images/png_rgb8_256x256.png";
  Reply inverted = ask({{"type", "image_url"}, {"image_url", {{"url", "file://" + file}}}, {"min_pixels", 100000},
                        {"max_pixels", 1000}});
  EXPECT_EQ(inverted.status, 400);
  EXPECT_NE(inverted.body.find("min_pixels 100000 is over max_pixels 1000"), std::string::npos) << inverted.body;
  EXPECT_EQ(ask({{"type", "image_url"}, {"image_url", {{"url", "file://localhost" + file}}}}).status, 200);
  EXPECT_EQ(ask({{"type", "image_url"}, {"image_url", {{"url", "file://" + file}}}}).status, 200);
  Reply other = ask({{"type", "image_url"}, {"image_url", {{"url", "file://example.com" + file}}}});
  EXPECT_EQ(other.status, 400);
  EXPECT_NE(other.body.find("only this machine's files"), std::string::npos) << other.body;
  Reply nul = ask({{"type", "image_url"}, {"image_url", {{"url", file + std::string(1, '\0') + ".txt"}}}});
  EXPECT_EQ(nul.status, 400);
  EXPECT_NE(nul.body.find("NUL"), std::string::npos) << nul.body;
}

TEST_F(HttpHardening, AClientThatStopsReadingIsNotBufferedForever) {
  start();
  // A streamed answer to a client that never reads: the server writes only as fast as the socket drains,
  // and still answers others.
  RawConn c(server_->port());
  int small = 4096;
  ::setsockopt(c.fd(), SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
  const std::string body = chat_body("hi", 64, true).dump();
  c.send("POST /v1/chat/completions HTTP/1.1\r\nHost: " + host() + "\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body);
  std::this_thread::sleep_for(scaled_ms(500));  // the answer fills the socket's buffers
  const auto t = Clock::now();
  EXPECT_EQ(get("/health").status, 200);
  EXPECT_LT(seconds_since(t), scaled(1.0));
}

}  // namespace
}  // namespace qvl::test
