// The KV caches of finished requests, kept so that a request that starts with the same tokens (the next
// turn of a conversation sent whole, a shared system prompt) prefills only what is new. LRU within a byte
// budget of committed cache memory.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <vector>

#include "model/text.h"

namespace qvl {

// A prompt token as the cache compares it: the token id, or for an image pad a value derived from the
// image's key and the pad's index within the image (top bit set), so image tokens match only when the
// image is the same.
using TokenKey = uint64_t;

class PrefixCache {
 public:
  explicit PrefixCache(size_t budget_bytes) : budget_(budget_bytes) {}

  // Copies into `into` (empty, same layer shape and KV type) the keys and values of the longest prefix of
  // `keys` that a kept entry holds, at most max_tokens; returns its length (0: none).
  int64_t restore(const std::vector<TokenKey>& keys, int64_t max_tokens, KVCache& into);
  // Keeps a finished request's cache, keys[i] naming position i (keys.size() == cache->length()); entries
  // whose keys are a prefix of these are dropped (this one holds them), the least recently used go beyond
  // the budget.
  void put(std::vector<TokenKey> keys, std::unique_ptr<KVCache> cache);
  // A cache of this many committed bytes would be kept (put() drops what is over the whole budget).
  bool fits(size_t bytes) const { return bytes <= budget_; }

  struct Stats {
    uint64_t lookups = 0, hits = 0, reused_tokens = 0, evictions = 0;
    size_t entries = 0, bytes = 0, budget = 0;
  };
  Stats stats() const;

 private:
  struct Entry {
    std::vector<TokenKey> keys;
    std::unique_ptr<KVCache> cache;
    size_t bytes = 0;
  };
  mutable std::mutex mu_;
  size_t budget_, bytes_ = 0;
  std::list<Entry> entries_;  // front: most recently used
  uint64_t lookups_ = 0, hits_ = 0, reused_ = 0, evictions_ = 0;
};

}  // namespace qvl
