// Image and video URLs in requests, fetched only when the operator allows it (--allow-media-urls HOST,... or
// '*'): the host must be allowed; its address is resolved once, checked (loopback, private, link-local,
// multicast and other non-public addresses are refused unless the host is named explicitly) and pinned for
// the connection, so a DNS answer cannot change between the check and the connect; redirects are followed by
// hand, each hop checked the same way, at most a few; the body is bounded in size and time (a slow drip is
// cut off); the bytes must sniff as an image (or a video) before anything decodes them. Bodies with an ETag
// are kept in a byte budget and revalidated with If-None-Match.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <semaphore>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "util/status.h"

namespace qvl::server {

struct MediaUrlOptions {
  std::vector<std::string> allowed_hosts;  // lowercased host names or addresses; "*": any public host
  double timeout_s = 20;                   // a whole fetch, redirects included
  int max_redirects = 3;
  int64_t min_bytes_per_s = 1024;          // slower than this for 5 s (or a fifth of the timeout): cut off
  size_t cache_bytes = size_t{64} << 20;   // fetched bodies kept (those with an ETag)
};

class MediaFetcher {
 public:
  explicit MediaFetcher(MediaUrlOptions options);
  bool enabled() const { return !options_.allowed_hosts.empty(); }

  enum class Kind { kImage, kVideo, kDocument };  // kDocument: a PDF
  // The body of an http(s) URL, at most max_bytes, that sniffs as `kind`; an error names `where` and says why
  // (host not allowed, address refused, too large, too slow, not an image, HTTP status). At most 4 fetches run
// at once; a fifth waits up to the time limit.
  Result<std::vector<uint8_t>> fetch(std::string_view url, Kind kind, uint64_t max_bytes, const std::string& where);

  struct Stats {
    uint64_t fetched = 0, revalidated = 0;  // full bodies fetched; 304 answers that reused the cache
    size_t cached_bytes = 0;
  };
  Stats stats() const;

 private:
  struct Cached {
    std::string url, etag;
    std::shared_ptr<const std::vector<uint8_t>> body;
  };
  void remember(Cached c);

  MediaUrlOptions options_;
  std::counting_semaphore<> slots_{4};  // fetches at once
  mutable std::mutex mu_;
  std::list<Cached> lru_;  // most recently used first
  std::unordered_map<std::string, std::list<Cached>::iterator> index_;
  size_t cached_bytes_ = 0;
  uint64_t fetched_ = 0, revalidated_ = 0;
};

// Whether an address (IPv4 or IPv6 text) is one a request may not make the server reach without being named:
// loopback, private (RFC 1918, unique local), link-local, carrier-grade NAT, multicast, unspecified, reserved,
// documentation and the IPv4-mapped forms of those. Unparsable text counts as refused.
bool address_is_internal(const std::string& address);

}  // namespace qvl::server
