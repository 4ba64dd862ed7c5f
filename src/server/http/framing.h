// What RFC 9112 and RFC 9110 say about the bytes of a request before its handler sees it: the header's lines,
// its framing fields (Transfer-Encoding, Content-Length, Host, Expect), the method, and the lines of a chunked
// body. Pure functions of the bytes, so that the server (http_server.cpp) and the fuzz target
// (tests/fuzz/fuzz_http.cpp) run the same checks.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/beast/core/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

namespace qvl::server::http {

// A refusal: an HTTP status and the message that says why. status 0: nothing wrong.
struct FramingError {
  int status = 0;
  std::string message;
  explicit operator bool() const { return status != 0; }
};

// The raw header, from the request line up to (and with) its blank line, or as much of it as has arrived:
// 400 for a line ending with a bare LF or a folded field (obs-fold, RFC 9112 §5.2). Beast joins folded lines
// and takes a bare LF as CRLF, so this must run on the bytes before Beast parses them.
FramingError raw_header_error(std::string_view head);

// A Host header value (RFC 9110 §7.2, RFC 3986 §3.2.2): "[IPv6]" or a reg-name / IPv4 of URI characters,
// then an optional ":" and port digits (0-65535). Empty, "[::1]attacker.example", "127.0.0.1:abc", ":99999"
// and the like are not.
bool valid_host_value(std::string_view v);

// What the parsed header's framing fields and method say is wrong (RFC 9112 §6, RFC 9110 §7.2, §9, §10.1.1):
// only `chunked` (once, last) or Content-Length, not both (400); other codings 501; one valid Host (HTTP/1.1
// needs one); Expect only 100-continue (417); GET, HEAD, POST, DELETE, OPTIONS answered, the other methods of HTTP
// 405 (the caller adds Allow: kAllowedMethods), anything else 501. Each refusal closes the connection, since
// what follows on it could not be told apart from the body. `version`: 10 or 11.
FramingError framing_error(int version, std::string_view method,
                           const std::vector<std::pair<std::string, std::string>>& headers);
inline constexpr const char* kAllowedMethods = "GET, HEAD, POST, DELETE, OPTIONS";

// A chunked body's bytes that the parser has not consumed yet: they start at a framing line (the CRLF that
// ends a chunk's data, then the next chunk-size line; or, after the last chunk, the trailer lines up to a
// blank line). 400 where such a line ends with a bare LF: Beast would wait for a CRLF that never comes, until
// the body's deadline. Chunk data itself may hold any bytes; it is never looked at. Unparsed framing over
// kMaxChunkFraming bytes is 400 too, so that a size line that never ends cannot grow the buffer.
inline constexpr size_t kMaxChunkFraming = 8192;
FramingError chunk_framing_error(std::string_view unparsed);

// Whether `unparsed` (as for chunk_framing_error) holds the last chunk's line but not yet the blank line that
// ends its trailers.
bool last_chunk_incomplete(std::string_view unparsed);

// A request body as its bytes arrive, handed to Beast's parser batch by batch with the checks above: what the
// server's connection runs (http_server.cpp) and what fuzz_http drives.
using RequestParser = boost::beast::http::request_parser<boost::beast::http::string_body>;
struct BodyStep {
  size_t used = 0;              // bytes of `unparsed` the parser took: drop them from the buffer
  bool done = false;            // the body is complete
  boost::beast::error_code ec;  // the parser refused the bytes (never need_more)
  FramingError refusal;         // the framing checks refused them
};
class BodyReader {
 public:
  // Feeds the bytes not yet taken to `parser`, element by element. With nothing done and nothing refused, the
  // caller reads more, appends it to what was not used, and calls again. A last chunk is handed to the parser
  // only once its trailers are all here: Beast 1.74 asserts (basic_parser.ipp, `n >= 5`) when the bytes of a
  // last chunk come back one byte longer than when it first saw them ("0\r\n", then "0\r\n\r") — a remote
  // abort() in a build without NDEBUG, found by fuzz_http.
  BodyStep feed(RequestParser& parser, std::string_view unparsed);

 private:
  bool at_framing_ = true;  // the bytes not taken start at a framing line (the parser asked for more there)
};

}  // namespace qvl::server::http
