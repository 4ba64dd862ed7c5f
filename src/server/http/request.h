// The plain HTTP request and response that the server's routes see, independent of the library that reads
// and writes them (src/server/http/http_server.cpp).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace qvl::server::http {

using Headers = std::vector<std::pair<std::string, std::string>>;

// ASCII case-insensitive equality, for header names and tokens.
bool iequals(std::string_view a, std::string_view b);
// A token of a header value as compared: spaces and tabs around it dropped, ASCII lower-cased.
std::string lower_trimmed(std::string_view s);

// The value of the first header named `name` (any case), or "".
std::string header_value(const Headers& headers, std::string_view name);

// A request target's path with its %XX escapes decoded (RFC 3986 2.1), except "%2F" and "%25", which stay as
// sent (upper-cased): an escaped '/' is data, not a separator (RFC 3986 2.2), so "/v1%2Fchat%2Fcompletions" routes
// nowhere, as a proxy's path rules expect; a route's {id} gets them decoded (decode_segment). False on a '%' not
// followed by two hex digits, a control character (C0, DEL or C1; NUL included, sent or escaped), or bytes that
// are not UTF-8: such a path names no endpoint and would only reach the logs.
bool decode_path(std::string_view raw, std::string& out);
// A path segment as decode_path leaves it, its "%2F" and "%25" decoded: the id of /v1/models/{id}.
std::string decode_segment(std::string_view segment);
// A query string's name=value pairs in order ("a=1&b=&c" -> (a, 1), (b, ""), (c, "")), each name and value
// %XX-decoded with '+' as a space (as clients encode them). False, as decode_path, on a malformed escape, a
// control character or bytes that are not UTF-8.
bool parse_query(std::string_view raw, std::vector<std::pair<std::string, std::string>>& out);

// What a connection shares with the requests it carries: its socket and whether it has been closed.
struct PeerState {
  int fd = -1;
  std::atomic<bool> closed{false};
};

// Whether the client of a request is still connected, so that a request whose client went away is
// cancelled at once. Holds the connection (and so its socket) open while it exists. Cheap; never blocks.
class PeerWatch {
 public:
  PeerWatch() = default;  // no connection: always alive
  explicit PeerWatch(std::shared_ptr<const PeerState> state) : state_(std::move(state)) {}
  // False once the peer has closed or reset the connection, or the server has closed it.
  bool alive() const;

 private:
  std::shared_ptr<const PeerState> state_;
};

struct Request {
  std::string method;      // "GET", "POST", ...
  std::string target;      // as sent: path and query
  std::string path;        // the target up to '?', %XX decoded (decode_path)
  std::string query;       // after '?', undecoded
  Headers headers;
  std::string body;        // after Content-Encoding was undone
  std::string path_param;  // what a prefix route matched after its prefix (e.g. the id of /v1/models/{id})
  std::string remote_addr;
  std::chrono::steady_clock::time_point arrived;  // when its header was complete
  PeerWatch peer;

  std::string header(std::string_view name) const { return header_value(headers, name); }
  bool has_header(std::string_view name) const;
};

// Where a streamed response's body goes: write() blocks until the connection has taken the bytes, so a
// client that does not read holds the writer back instead of making the server buffer; false once the
// client is gone or has not read for the write timeout.
class ChunkSink {
 public:
  virtual ~ChunkSink() = default;
  virtual bool write(std::string_view bytes) = 0;
};

struct Response {
  int status = 200;
  Headers headers;  // besides Content-Type, Content-Length and Transfer-Encoding, which the server writes
  std::string content_type;
  std::string body;
  // When set, the body is streamed with chunked transfer: the server calls it once, on a worker thread,
  // after sending the header; it writes the body through the sink and returns when the body is complete.
  std::function<void(ChunkSink&)> stream;

  void set_header(std::string name, std::string value);  // replaces a header of the same name
  std::string header(std::string_view name) const { return header_value(headers, name); }
  void set_content(std::string content, std::string type) {
    body = std::move(content);
    content_type = std::move(type);
  }
};

}  // namespace qvl::server::http
