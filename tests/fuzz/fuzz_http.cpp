// Fuzz target: raw HTTP/1.1 requests as a client's bytes -> the checks http_server.cpp runs on them
// (server/http/framing.h) around Beast's parser: raw_header_error on the header's bytes, Beast's header parse,
// framing_error on the parsed fields, then the body through BodyReader as the server reads it
// (chunk_framing_error on what the parser leaves after each batch), the path's %-decoding (decode_path) and the
// query's pairs (parse_query). Nothing may throw out or abort (Beast's
// assertions are live: the build has no NDEBUG); every refusal has a status the server sends and says why. The body is fed twice, whole and a byte at a time: a body taken
// whole must be taken a byte at a time too, with the same bytes (the incremental checks never refuse a
// request that arrives slowly).
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/asio/buffer.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include "server/http/framing.h"
#include "server/http/request.h"
#include "util/status.h"

namespace {

namespace bhttp = boost::beast::http;
namespace http = qvl::server::http;

enum class Outcome { kDone, kRefused, kParseError, kIncomplete };

struct Result {
  Outcome outcome = Outcome::kIncomplete;
  std::string body;
};

// The header parsed into a fresh parser (as the server does, with its limits), or null when Beast refuses it.
std::unique_ptr<bhttp::request_parser<bhttp::string_body>> parse_header(std::string_view head) {
  auto parser = std::make_unique<bhttp::request_parser<bhttp::string_body>>();
  parser->header_limit(16 << 10);
  parser->body_limit(1 << 20);
  boost::beast::error_code ec;
  parser->put(boost::asio::buffer(head.data(), head.size()), ec);
  if (ec || !parser->is_header_done()) return nullptr;
  return parser;
}

// The body arriving `step` bytes at a time (0: all at once), read as the server reads it (BodyReader).
Result feed_body(std::string_view head, std::string_view body, size_t step) {
  Result r;
  auto parser = parse_header(head);
  QVL_CHECK(parser != nullptr);  // parsed once already
  http::BodyReader reader;
  std::string pending;  // the server's buffer: received, not yet taken by the parser
  size_t at = 0;
  for (;;) {
    const http::BodyStep s = reader.feed(*parser, pending);
    QVL_CHECK(s.used <= pending.size());
    pending.erase(0, s.used);
    if (s.ec) {
      r.outcome = Outcome::kParseError;
      return r;
    }
    if (s.done) {
      r.outcome = Outcome::kDone;
      r.body = parser->get().body();
      return r;
    }
    if (s.refusal) {
      QVL_CHECK(s.refusal.status == 400 && !s.refusal.message.empty());
      r.outcome = Outcome::kRefused;
      return r;
    }
    if (at == body.size()) return r;  // the client stopped sending: the deadline would end it
    const size_t n = step == 0 ? body.size() - at : std::min(step, body.size() - at);
    pending.append(body.substr(at, n));
    at += n;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t end = input.find("\r\n\r\n");
  const std::string_view head = input.substr(0, end == std::string_view::npos ? input.size() : end + 4);
  if (const http::FramingError e = http::raw_header_error(head)) {
    QVL_CHECK(e.status == 400 && !e.message.empty());
    return 0;
  }
  // Every line of an accepted header ends with CRLF and none is folded.
  for (size_t i = head.find('\n'); i != std::string_view::npos; i = head.find('\n', i + 1)) {
    QVL_CHECK(i > 0 && head[i - 1] == '\r');
    QVL_CHECK(i + 1 >= head.size() || (head[i + 1] != ' ' && head[i + 1] != '\t'));
  }
  if (end == std::string_view::npos) return 0;
  auto parser = parse_header(head);
  if (!parser) return 0;

  // The target's path as the server decodes it: a decoded path has no control character, is UTF-8 and is never
  // longer than what was sent; a path without '%' decodes to itself.
  {
    const std::string target(parser->get().target());
    const std::string_view raw = std::string_view(target).substr(0, std::min(target.find('?'), target.size()));
    std::string path;
    if (http::decode_path(raw, path)) {
      QVL_CHECK(path.size() <= raw.size());
      QVL_CHECK(std::none_of(path.begin(), path.end(), [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7F; }));
      if (raw.find('%') == std::string_view::npos) QVL_CHECK(path == raw);
    }
    // The query's pairs (parse_query): decoded text without controls, no longer than what was sent; without '%'
    // and '+', the names and values joined back with '=' and '&' are the query itself, empty pairs left out.
    if (const size_t q = target.find('?'); q != std::string::npos) {
      const std::string_view query = std::string_view(target).substr(q + 1);
      std::vector<std::pair<std::string, std::string>> pairs;
      if (http::parse_query(query, pairs)) {
        size_t bytes = 0;
        for (const auto& [name, value] : pairs) {
          bytes += name.size() + value.size();
          for (const std::string* part : {&name, &value})
            QVL_CHECK(std::none_of(part->begin(), part->end(), [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7F; }));
        }
        QVL_CHECK(bytes <= query.size());
        if (query.find_first_of("%+") == std::string_view::npos && query.find("&&") == std::string_view::npos &&
            !query.empty() && query.front() != '&' && query.back() != '&') {
          std::string joined;
          for (const auto& [name, value] : pairs) joined += (joined.empty() ? "" : "&") + name + "=" + value;
          std::string expected;  // every pair written as name=value
          for (size_t start = 0; start <= query.size();) {
            const size_t end = std::min(query.find('&', start), query.size());
            std::string pair(query.substr(start, end - start));
            expected += (expected.empty() ? "" : "&") + (pair.find('=') == std::string::npos ? pair + "=" : pair);
            start = end + 1;
          }
          QVL_CHECK(joined == expected);
        }
      }
    }
  }
  std::vector<std::pair<std::string, std::string>> headers;
  for (const auto& f : parser->get()) headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
  const std::string method(parser->get().method_string());
  if (const http::FramingError e = http::framing_error(static_cast<int>(parser->get().version()), method, headers)) {
    QVL_CHECK(e.status == 400 || e.status == 405 || e.status == 417 || e.status == 501);
    QVL_CHECK(!e.message.empty());
    return 0;
  }
  // An accepted request has one valid Host (HTTP/1.1), and at most one of chunked or Content-Length.
  int hosts = 0;
  bool te = false, cl = false;
  for (const auto& [k, v] : headers) {
    if (http::iequals(k, "Host")) {
      ++hosts;
      QVL_CHECK(http::valid_host_value(v));
    }
    te |= http::iequals(k, "Transfer-Encoding");
    cl |= http::iequals(k, "Content-Length");
  }
  QVL_CHECK(hosts <= 1 && (hosts == 1 || parser->get().version() < 11));
  QVL_CHECK(!(te && cl));
  QVL_CHECK(method == "GET" || method == "HEAD" || method == "POST" || method == "OPTIONS");

  const std::string_view body = input.substr(end + 4);
  const Result whole = feed_body(head, body, 0);
  const Result bytes = feed_body(head, body, 1);
  if (whole.outcome == Outcome::kDone) {
    QVL_CHECK(bytes.outcome == Outcome::kDone);
    QVL_CHECK(bytes.body == whole.body);
  }
  if (whole.outcome == Outcome::kDone) QVL_CHECK(whole.body.size() <= body.size());
  return 0;
}
