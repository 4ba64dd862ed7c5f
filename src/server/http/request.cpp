// The plain HTTP request and response: header lookup and the peer-liveness check routes use.
#include "server/http/request.h"

#include "tokenizer/unicode.h"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>

namespace qvl::server::http {

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = static_cast<char>(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

std::string lower_trimmed(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  std::string out(s);
  for (char& c : out) c = (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
  return out;
}

std::string header_value(const Headers& headers, std::string_view name) {
  for (const auto& [k, v] : headers) {
    if (iequals(k, name)) return v;
  }
  return "";
}

namespace {
// A hex digit's value, or -1.
int hex(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// No C1 control (U+0080..U+009F: C2 80..C2 9F) in UTF-8 text.
bool no_c1_controls(const std::string& s) {
  for (size_t i = 0; i + 1 < s.size(); ++i)
    if (static_cast<unsigned char>(s[i]) == 0xC2 && static_cast<unsigned char>(s[i + 1]) < 0xA0) return false;
  return true;
}

// One query component: %XX and '+' decoded; false as decode_path.
bool decode_component(std::string_view raw, std::string& out) {
  out.clear();
  for (size_t i = 0; i < raw.size(); ++i) {
    unsigned char byte = static_cast<unsigned char>(raw[i]);
    if (raw[i] == '+') {
      byte = ' ';
    } else if (raw[i] == '%') {
      if (i + 2 >= raw.size() || hex(raw[i + 1]) < 0 || hex(raw[i + 2]) < 0) return false;
      byte = static_cast<unsigned char>(hex(raw[i + 1]) * 16 + hex(raw[i + 2]));
      i += 2;
    }
    if (byte < 0x20 || byte == 0x7F) return false;
    out += static_cast<char>(byte);
  }
  return unicode::is_valid_utf8(out) && no_c1_controls(out);
}
}  // namespace

bool decode_path(std::string_view raw, std::string& out) {
  out.clear();
  out.reserve(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] != '%') {
      if (static_cast<unsigned char>(raw[i]) < 0x20 || raw[i] == 0x7F) return false;  // as sent, too
      out += raw[i];
      continue;
    }
    if (i + 2 >= raw.size() || hex(raw[i + 1]) < 0 || hex(raw[i + 2]) < 0) return false;
    const int byte = hex(raw[i + 1]) * 16 + hex(raw[i + 2]);
    if (byte < 0x20 || byte == 0x7F) return false;
    if (byte == '/' || byte == '%') {
      out += byte == '/' ? "%2F" : "%25";
    } else {
      out += static_cast<char>(byte);
    }
    i += 2;
  }
  return unicode::is_valid_utf8(out) && no_c1_controls(out);
}

bool parse_query(std::string_view raw, std::vector<std::pair<std::string, std::string>>& out) {
  out.clear();
  size_t start = 0;
  while (start <= raw.size()) {
    size_t end = raw.find('&', start);
    if (end == std::string_view::npos) end = raw.size();
    const std::string_view pair = raw.substr(start, end - start);
    if (!pair.empty()) {
      const size_t eq = pair.find('=');
      std::string name, value;
      if (!decode_component(pair.substr(0, eq), name)) return false;
      if (eq != std::string_view::npos && !decode_component(pair.substr(eq + 1), value)) return false;
      out.emplace_back(std::move(name), std::move(value));
    }
    start = end + 1;
  }
  return true;
}

std::string decode_segment(std::string_view segment) {
  std::string out;
  out.reserve(segment.size());
  for (size_t i = 0; i < segment.size(); ++i) {
    if (segment.substr(i, 3) == "%2F") {
      out += '/';
      i += 2;
    } else if (segment.substr(i, 3) == "%25") {
      out += '%';
      i += 2;
    } else {
      out += segment[i];
    }
  }
  return out;
}

bool Request::has_header(std::string_view name) const {
  for (const auto& h : headers) {
    if (iequals(h.first, name)) return true;
  }
  return false;
}

void Response::set_header(std::string name, std::string value) {
  for (auto& h : headers) {
    if (iequals(h.first, name)) {
      h.second = std::move(value);
      return;
    }
  }
  headers.emplace_back(std::move(name), std::move(value));
}

bool PeerWatch::alive() const {
  if (!state_) return true;
  if (state_->closed.load()) return false;
  // The socket stays open while this watch holds the connection, so the descriptor cannot be reused.
  pollfd p{state_->fd, static_cast<short>(POLLIN | POLLRDHUP), 0};
  if (poll(&p, 1, 0) <= 0) return true;
  if (p.revents & (POLLHUP | POLLERR | POLLNVAL | POLLRDHUP)) return false;
  if (p.revents & POLLIN) {  // data (a pipelined request) or an orderly close
    char c;
    const ssize_t n = recv(state_->fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0) return false;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return false;
  }
  return true;
}

}  // namespace qvl::server::http
