// Image and video URLs fetched under the operator's allow list, with pinned, checked addresses.
#include "server/media_fetch.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <netdb.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "io/image.h"
#include "io/pdf.h"
#include "io/video.h"

namespace qvl::server {

namespace {

std::string ascii_lower(std::string s) {
  for (char& c : s) c = (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
  return s;
}

bool v4_internal(const uint8_t a[4]) {
  const uint32_t x = (uint32_t{a[0]} << 24) | (uint32_t{a[1]} << 16) | (uint32_t{a[2]} << 8) | a[3];
  struct Net { uint32_t base; int bits; };
  static const Net nets[] = {
      {0x00000000, 8},  {0x0A000000, 8},  {0x64400000, 10}, {0x7F000000, 8},  {0xA9FE0000, 16}, {0xAC100000, 12},
      {0xC0000000, 24}, {0xC0000200, 24}, {0xC0A80000, 16}, {0xC6120000, 15}, {0xC6336400, 24}, {0xCB007100, 24},
      {0xE0000000, 4},  {0xF0000000, 4}};
  for (const Net& n : nets)
    if ((x >> (32 - n.bits)) == (n.base >> (32 - n.bits))) return true;
  return false;
}

bool v6_internal(const uint8_t a[16]) {
  static const uint8_t zero[16] = {};
  if (std::memcmp(a, zero, 15) == 0 && (a[15] == 0 || a[15] == 1)) return true;  // :: and ::1
  static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (std::memcmp(a, mapped, 12) == 0) return v4_internal(a + 12);                  // ::ffff:a.b.c.d
  static const uint8_t nat64[12] = {0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0};
  if (std::memcmp(a, nat64, 12) == 0) return v4_internal(a + 12);                   // 64:ff9b::a.b.c.d
  if ((a[0] & 0xfe) == 0xfc) return true;                                           // fc00::/7 unique local
  if (a[0] == 0xfe && (a[1] & 0xc0) == 0x80) return true;                           // fe80::/10 link-local
  if (a[0] == 0xfe && (a[1] & 0xc0) == 0xc0) return true;                           // fec0::/10 site-local
  if (a[0] == 0xff) return true;                                                    // multicast
  if (a[0] == 0x20 && a[1] == 0x01 && a[2] == 0x0d && a[3] == 0xb8) return true;   // 2001:db8::/32 documentation
  if (a[0] == 0x20 && a[1] == 0x01 && a[2] == 0 && a[3] == 0) return true;         // 2001::/32 Teredo
  if (a[0] == 0x20 && a[1] == 0x02) return true;                                    // 2002::/16 6to4 (any v4 inside)
  if (a[0] == 0x01 && a[1] == 0 && std::memcmp(a + 2, zero, 6) == 0) return true;   // 100::/64 discard
  return false;
}

struct Transfer {
  std::vector<uint8_t> body;
  uint64_t max_bytes = 0;
  bool too_large = false;
  std::string etag, location;
};

size_t on_body(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t len = size * n;
  if (t->body.size() + len > t->max_bytes) {
    t->too_large = true;
    return 0;  // aborts the transfer
  }
  t->body.insert(t->body.end(), data, data + len);
  return len;
}

// Every connection curl opens must go to the address checked and pinned: anything else (a name curl resolved
// by itself) is refused before a byte is sent.
curl_socket_t open_pinned(void* user, curlsocktype, curl_sockaddr* a) {
  const auto& pinned = *static_cast<const std::vector<std::string>*>(user);
  char buf[INET6_ADDRSTRLEN] = "";
  const void* src = nullptr;
  if (a->family == AF_INET) src = &reinterpret_cast<const sockaddr_in*>(&a->addr)->sin_addr;
  if (a->family == AF_INET6) src = &reinterpret_cast<const sockaddr_in6*>(&a->addr)->sin6_addr;
  if (!src || !inet_ntop(a->family, src, buf, sizeof buf) ||
      std::find(pinned.begin(), pinned.end(), std::string(buf)) == pinned.end())
    return CURL_SOCKET_BAD;
  return socket(a->family, a->socktype, a->protocol);
}

size_t on_header(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t len = size * n;
  std::string line(data, len);
  const size_t colon = line.find(':');
  if (colon != std::string::npos) {
    const std::string name = ascii_lower(line.substr(0, colon));
    std::string value = line.substr(colon + 1);
    value.erase(0, value.find_first_not_of(" \t"));
    while (!value.empty() && (value.back() == '\r' || value.back() == '\n' || value.back() == ' ')) value.pop_back();
    if (name == "etag") t->etag = value;
    if (name == "location") t->location = value;
  }
  return len;
}

std::string quoted_url(std::string_view s) { return "'" + std::string(s.substr(0, 120)) + (s.size() > 120 ? "...'" : "'"); }

// The parts of one URL, or why it cannot be fetched.
struct Target {
  std::string url, scheme, host, port;  // host without IPv6 brackets, lowercased
};

Result<Target> parse_target(const std::string& url) {
  CURLU* u = curl_url();
  struct Free { CURLU* u; ~Free() { curl_url_cleanup(u); } } free_u{u};
  if (curl_url_set(u, CURLUPART_URL, url.c_str(), 0) != CURLUE_OK) return Status::Error("not a valid URL");
  Target t;
  auto part = [&](CURLUPart p, unsigned flags, std::string& out) {
    char* v = nullptr;
    if (curl_url_get(u, p, &v, flags) != CURLUE_OK || !v) return false;
    out = v;
    curl_free(v);
    return true;
  };
  if (!part(CURLUPART_SCHEME, 0, t.scheme)) return Status::Error("the URL has no scheme");
  t.scheme = ascii_lower(t.scheme);
  if (t.scheme != "http" && t.scheme != "https") return Status::Error("only http and https URLs are fetched");
  if (!part(CURLUPART_HOST, 0, t.host) || t.host.empty()) return Status::Error("the URL has no host");
  // Non-ASCII names are refused: curl would look up their punycode form, not the name checked and pinned here.
  for (unsigned char c : t.host)
    if (c >= 0x80 || c < 0x20) return Status::Error("the host name is not plain ASCII; write it in its ASCII (xn--) form");
  t.host = ascii_lower(t.host);
  if (t.host.size() > 2 && t.host.front() == '[' && t.host.back() == ']') t.host = t.host.substr(1, t.host.size() - 2);
  if (!part(CURLUPART_PORT, CURLU_DEFAULT_PORT, t.port)) return Status::Error("the URL has no port");
  if (!part(CURLUPART_URL, 0, t.url)) return Status::Error("not a valid URL");
  return t;
}

// A Location against the URL it came from.
Result<std::string> join(const std::string& base, const std::string& location) {
  CURLU* u = curl_url();
  struct Free { CURLU* u; ~Free() { curl_url_cleanup(u); } } free_u{u};
  char* v = nullptr;
  if (curl_url_set(u, CURLUPART_URL, base.c_str(), 0) != CURLUE_OK ||
      curl_url_set(u, CURLUPART_URL, location.c_str(), 0) != CURLUE_OK || curl_url_get(u, CURLUPART_URL, &v, 0) != CURLUE_OK)
    return Status::Error("the redirect's Location " + quoted_url(location) + " is not a URL");
  std::string out(v);
  curl_free(v);
  return out;
}

}  // namespace

bool address_is_internal(const std::string& address) {
  uint8_t a[16];
  if (inet_pton(AF_INET, address.c_str(), a) == 1) return v4_internal(a);
  if (inet_pton(AF_INET6, address.c_str(), a) == 1) return v6_internal(a);
  return true;
}

MediaFetcher::MediaFetcher(MediaUrlOptions options) : options_(std::move(options)) {
  for (std::string& h : options_.allowed_hosts) h = ascii_lower(h);
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

MediaFetcher::Stats MediaFetcher::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return Stats{fetched_, revalidated_, cached_bytes_};
}

void MediaFetcher::remember(Cached c) {
  const size_t b = c.body->size() + c.url.size() + c.etag.size();
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = index_.find(c.url); it != index_.end()) {
    cached_bytes_ -= it->second->body->size() + it->second->url.size() + it->second->etag.size();
    lru_.erase(it->second);
    index_.erase(it);
  }
  if (b > options_.cache_bytes) return;
  while (cached_bytes_ + b > options_.cache_bytes && !lru_.empty()) {
    cached_bytes_ -= lru_.back().body->size() + lru_.back().url.size() + lru_.back().etag.size();
    index_.erase(lru_.back().url);
    lru_.pop_back();
  }
  lru_.push_front(std::move(c));
  index_[lru_.front().url] = lru_.begin();
  cached_bytes_ += b;
}

Result<std::vector<uint8_t>> MediaFetcher::fetch(std::string_view url_in, Kind kind, uint64_t max_bytes,
                                                 const std::string& where) {
  const char* what = kind == Kind::kImage ? "image" : kind == Kind::kVideo ? "video" : "document";
  auto fail = [&](const std::string& why) {
    return Status::Error(where + ": the " + std::string(what) + " URL " + quoted_url(url_in) + " was not fetched: " + why);
  };
  if (!enabled())
    return Status::Error(where + ": " + std::string(what) + " URLs are not fetched (got " + quoted_url(url_in) + "); send the " +
                         what + " inline as a data: URI or as base64 (or start the server with --allow-media-urls HOST)");
  const bool any = std::find(options_.allowed_hosts.begin(), options_.allowed_hosts.end(), "*") != options_.allowed_hosts.end();
  // A few fetches at once, each holding at most max_bytes: the rest wait their turn within the time limit.
  if (!slots_.try_acquire_for(std::chrono::duration<double>(options_.timeout_s)))
    return fail("the server is fetching other URLs; retry in a moment");
  struct Release { std::counting_semaphore<>& s; ~Release() { s.release(); } } release{slots_};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                              std::chrono::duration<double>(options_.timeout_s));
  Cached cached;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = index_.find(std::string(url_in)); it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      cached = *it->second;
    }
  }
  std::string url(url_in);
  for (int hop = 0;; ++hop) {
    auto target = parse_target(url);
    if (!target.ok()) return fail(target.status().message());
    const bool named = std::find(options_.allowed_hosts.begin(), options_.allowed_hosts.end(), target->host) !=
                       options_.allowed_hosts.end();
    if (!named && !any)
      return fail("the host '" + target->host + "' is not one --allow-media-urls allows" +
                  (hop > 0 ? " (a redirect led there)" : ""));
    // Resolved once; every address checked; the connection pinned to the first.
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    if (getaddrinfo(target->host.c_str(), target->port.c_str(), &hints, &res) != 0 || !res)
      return fail("the host '" + target->host + "' does not resolve");
    std::vector<std::string> addrs;
    for (addrinfo* r = res; r; r = r->ai_next) {
      char buf[INET6_ADDRSTRLEN] = "";
      const void* src = r->ai_family == AF_INET ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(r->ai_addr)->sin_addr)
                                                : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(r->ai_addr)->sin6_addr);
      if ((r->ai_family == AF_INET || r->ai_family == AF_INET6) && inet_ntop(r->ai_family, src, buf, sizeof buf))
        addrs.push_back(buf);
    }
    freeaddrinfo(res);
    if (addrs.empty()) return fail("the host '" + target->host + "' has no address");
    if (!named)
      for (const std::string& a : addrs)
        if (address_is_internal(a))
          return fail("the host '" + target->host + "' resolves to a loopback, private, link-local or other internal "
                      "address, which is reached only when --allow-media-urls names the host itself");
    const double left = std::chrono::duration<double>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) return fail("over the time limit of " + std::to_string(static_cast<int>(options_.timeout_s)) + " s");

    CURL* c = curl_easy_init();
    if (!c) return fail("no HTTP client (curl_easy_init failed)");
    Transfer t;
    t.max_bytes = max_bytes;
    // Every address the name gave (all of them checked), in its order: curl tries the next when one fails
    // (localhost: ::1, then 127.0.0.1).
    std::string pin = target->host + ":" + target->port + ":";
    for (size_t i = 0; i < addrs.size(); ++i)
      pin += (i ? "," : "") + (addrs[i].find(':') != std::string::npos ? "[" + addrs[i] + "]" : addrs[i]);
    curl_slist* resolve = curl_slist_append(nullptr, pin.c_str());
    curl_slist* headers = nullptr;
    if (hop == 0 && cached.body && !cached.etag.empty())
      headers = curl_slist_append(headers, ("If-None-Match: " + cached.etag).c_str());
    curl_easy_setopt(c, CURLOPT_URL, target->url.c_str());
    curl_easy_setopt(c, CURLOPT_RESOLVE, resolve);
    curl_easy_setopt(c, CURLOPT_OPENSOCKETFUNCTION, open_pinned);
    curl_easy_setopt(c, CURLOPT_OPENSOCKETDATA, &addrs);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(c, CURLOPT_NOPROXY, "*");  // straight to the checked address, never through a proxy
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, static_cast<long>(left * 1000));
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(std::min(left, 10.0) * 1000));
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, static_cast<long>(options_.min_bytes_per_s));
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, static_cast<long>(std::max(1.0, std::min(5.0, options_.timeout_s / 5))));
    curl_easy_setopt(c, CURLOPT_MAXFILESIZE_LARGE, static_cast<curl_off_t>(max_bytes));
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &t);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &t);
    curl_easy_setopt(c, CURLOPT_USERAGENT, "qvl");
    const CURLcode rc = curl_easy_perform(c);
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(c);
    curl_slist_free_all(resolve);
    curl_slist_free_all(headers);
    const std::string limit = std::to_string(max_bytes >> 20) + " MiB";
    if (t.too_large || rc == CURLE_FILESIZE_EXCEEDED) return fail("the body is over the limit of " + limit);
    if (rc == CURLE_OPERATION_TIMEDOUT)
      return fail("too slow: not done within " + std::to_string(static_cast<int>(options_.timeout_s)) + " s, or under " +
                  std::to_string(options_.min_bytes_per_s) + " bytes/s");
    if (rc != CURLE_OK) return fail(curl_easy_strerror(rc));
    if (status == 304 && hop == 0 && cached.body) {
      std::lock_guard<std::mutex> lock(mu_);
      ++revalidated_;
      return std::vector<uint8_t>(*cached.body);
    }
    if (status >= 300 && status < 400 && status != 304) {
      if (t.location.empty()) return fail("HTTP " + std::to_string(status) + " without a Location");
      if (hop + 1 > options_.max_redirects) return fail("more than " + std::to_string(options_.max_redirects) + " redirects");
      auto next = join(target->url, t.location);
      if (!next.ok()) return fail(next.status().message());
      url = *next;
      continue;
    }
    if (status != 200) return fail("HTTP " + std::to_string(status));
    // Sniffed before any decoder sees it.
    const bool ok = kind == Kind::kImage      ? detect_image_format(t.body) != ImageFormat::kUnknown
                    : kind == Kind::kDocument ? is_pdf(t.body)
                                              : (looks_like_video(t.body) || detect_image_format(t.body) == ImageFormat::kGif ||
                                                 (t.body.size() >= 4 && std::memcmp(t.body.data(), "OggS", 4) == 0));
    if (!ok) return fail(std::string("the body is not ") + (kind == Kind::kImage ? "an image" : kind == Kind::kVideo ? "a video" : "a PDF") + " (" +
                         std::to_string(t.body.size()) + " bytes of something else)");
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++fetched_;
    }
    if (!t.etag.empty())
      remember(Cached{std::string(url_in), t.etag, std::make_shared<const std::vector<uint8_t>>(t.body)});
    return std::move(t.body);
  }
}

}  // namespace qvl::server
