// The request checks RFC 9112 and RFC 9110 ask for, on a request's bytes and parsed fields (framing.h).
#include "server/http/framing.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstdint>

#include <boost/asio/buffer.hpp>
#include <boost/beast/http/error.hpp>

#include "server/http/request.h"

namespace qvl::server::http {

namespace {

// The comma-separated elements of a field's value, each lower-cased and trimmed (empty ones kept).
void split_list(std::string_view v, std::vector<std::string>& out) {
  for (size_t start = 0;;) {
    const size_t comma = v.find(',', start);
    out.push_back(lower_trimmed(v.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start)));
    if (comma == std::string_view::npos) return;
    start = comma + 1;
  }
}

bool is_hex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

}  // namespace

FramingError raw_header_error(std::string_view head) {
  for (size_t i = head.find('\n'); i != std::string_view::npos; i = head.find('\n', i + 1)) {
    if (i == 0 || head[i - 1] != '\r')
      return {400, "malformed HTTP request: a line of the header ends with a bare LF; lines end with CRLF"};
    if (i + 1 < head.size() && (head[i + 1] == ' ' || head[i + 1] == '\t'))
      return {400, "malformed HTTP request: a header field is folded onto the next line (obs-fold, RFC 9112 "
                   "section 5.2); send each field on one line"};
  }
  return {};
}

bool valid_host_value(std::string_view v) {
  if (v.empty()) return false;
  std::string_view host = v, port;
  if (v.front() == '[') {
    const size_t close = v.find(']');
    if (close == std::string_view::npos) return false;
    const std::string inside(v.substr(1, close - 1));
    in6_addr a{};
    if (inet_pton(AF_INET6, inside.c_str(), &a) != 1) return false;
    if (close + 1 < v.size() && v[close + 1] != ':') return false;
    port = close + 1 < v.size() ? v.substr(close + 2) : std::string_view();
  } else {
    const size_t colon = v.find(':');
    host = v.substr(0, colon);
    if (colon != std::string_view::npos) port = v.substr(colon + 1);
    if (host.empty()) return false;
    for (char c : host) {
      const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      std::string_view("-._~%!$&'()*+,;=").find(c) != std::string_view::npos;
      if (!ok) return false;
    }
  }
  if (port.size() > 5) return false;
  uint32_t n = 0;
  for (char c : port) {
    if (c < '0' || c > '9') return false;
    n = n * 10 + static_cast<uint32_t>(c - '0');
  }
  return n <= 65535;
}

FramingError framing_error(int version, std::string_view method,
                           const std::vector<std::pair<std::string, std::string>>& headers) {
  std::vector<std::string> codings;
  bool transfer_encoding = false;
  int lengths = 0, hosts = 0;
  std::string host;
  for (const auto& [k, v] : headers) {
    if (iequals(k, "Transfer-Encoding")) {
      transfer_encoding = true;
      split_list(v, codings);
    } else if (iequals(k, "Content-Length")) {
      ++lengths;
    } else if (iequals(k, "Host")) {
      ++hosts;
      host = v;
    }
  }
  if (transfer_encoding) {
    if (lengths > 0)
      return {400, "the request has both Transfer-Encoding and Content-Length; send one (RFC 9112 section 6.3)"};
    int chunked = 0;
    for (const std::string& c : codings) {
      if (c.empty()) return {400, "the request's Transfer-Encoding has an empty coding; send 'chunked'"};
      chunked += c == "chunked";
    }
    if (chunked > 1 || (chunked == 1 && codings.back() != "chunked")) {
      std::string all;
      for (const std::string& c : codings) all += (all.empty() ? "" : ", ") + c;
      return {400, "the request's Transfer-Encoding must end with 'chunked', once; got '" + all.substr(0, 100) + "'"};
    }
    for (const std::string& c : codings)
      if (c != "chunked")
        return {501, "Transfer-Encoding '" + c.substr(0, 40) + "' is not supported; send the body as it is "
                     "(Content-Length) or chunked"};
  }
  if (hosts > 1) return {400, "the request has " + std::to_string(hosts) + " Host header fields; send one"};
  if (hosts == 0 && version >= 11) return {400, "an HTTP/1.1 request must have a Host header field"};
  if (hosts == 1 && !valid_host_value(host))
    return {400, "the Host header '" + host.substr(0, 100) + "' is not a host name or address with an optional port"};
  for (const auto& [k, v] : headers) {
    if (iequals(k, "Expect") && lower_trimmed(v) != "100-continue")
      return {417, "the request expects '" + v.substr(0, 60) + "'; only 'Expect: 100-continue' is supported"};
  }
  // Methods are case-sensitive (RFC 9110 §9.1): "get" is no method this server knows.
  if (method == "GET" || method == "HEAD" || method == "POST" || method == "DELETE" || method == "OPTIONS") return {};
  if (method == "PUT" || method == "PATCH" || method == "TRACE" || method == "CONNECT")
    return {405, "method " + std::string(method) + " is not allowed; the server takes " + kAllowedMethods};
  return {501, "method '" + std::string(method.substr(0, 20)) + "' is not implemented (methods are upper case: " +
                   kAllowedMethods + ")"};
}

namespace {

// The framing lines at the start of a chunked body's unconsumed bytes, as far as they have arrived.
struct FramingScan {
  bool bare_lf = false;        // a line ends with LF alone
  bool last = false;           // the chunk-size line is complete and is the last chunk's (all zeros)
  bool trailers_done = false;  // ... and the blank line that ends its trailers is here too
};

FramingScan scan_framing(std::string_view b) {
  FramingScan s;
  size_t i = 0;
  if (b.starts_with("\r\n")) i = 2;  // the end of the previous chunk's data
  // The chunk-size line: hex digits, then extensions (";name=value") or whitespace, then CRLF.
  const size_t nl = b.find('\n', i);
  if (nl == std::string_view::npos) return s;  // not all here yet
  if (nl == 0 || b[nl - 1] != '\r') {
    s.bare_lf = true;
    return s;
  }
  size_t d = i;
  while (d < nl && b[d] == '0') ++d;
  s.last = d > i && (d == nl - 1 || !is_hex(b[d]));
  if (!s.last) return s;  // chunk data follows: any bytes
  // The last chunk: trailer fields, each a line, up to a blank line. No data follows them.
  for (size_t at = nl + 1;;) {
    const size_t end = b.find('\n', at);
    if (end == std::string_view::npos) return s;
    if (end == at || b[end - 1] != '\r') {
      s.bare_lf = true;
      return s;
    }
    if (end == at + 1) {  // the blank line: the body is complete
      s.trailers_done = true;
      return s;
    }
    at = end + 1;
  }
}

}  // namespace

FramingError chunk_framing_error(std::string_view b) {
  if (b.size() > kMaxChunkFraming)
    return {400, "malformed HTTP request body: a line of the chunked framing (chunk size, extensions, trailers) is "
                 "over " + std::to_string(kMaxChunkFraming) + " bytes"};
  if (scan_framing(b).bare_lf)
    return {400, "malformed HTTP request body: a line of the chunked framing ends with a bare LF; lines end with "
                 "CRLF"};
  return {};
}

bool last_chunk_incomplete(std::string_view b) {
  const FramingScan s = scan_framing(b);
  return s.last && !s.trailers_done;
}

BodyStep BodyReader::feed(RequestParser& parser, std::string_view unparsed) {
  namespace bhttp = boost::beast::http;
  BodyStep step;
  while (!parser.is_done() && step.used < unparsed.size()) {
    const std::string_view rest = unparsed.substr(step.used);
    if (parser.chunked() && at_framing_ && last_chunk_incomplete(rest)) break;  // see the class comment
    boost::beast::error_code ec;
    const size_t used = parser.put(boost::asio::buffer(rest.data(), rest.size()), ec);  // one element at a time
    step.used += used;
    at_framing_ = ec == bhttp::error::need_more;
    if (ec == bhttp::error::need_more) break;
    if (ec) {
      step.ec = ec;
      return step;
    }
    if (used == 0) break;
  }
  step.done = parser.is_done();
  if (!step.done && parser.chunked() && at_framing_) step.refusal = chunk_framing_error(unparsed.substr(step.used));
  return step;
}

}  // namespace qvl::server::http
