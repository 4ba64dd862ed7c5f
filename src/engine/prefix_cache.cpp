// Finished requests' KV caches, matched by their longest common token prefix; LRU within a byte budget.
#include "engine/prefix_cache.h"

#include <algorithm>

namespace qvl {

int64_t PrefixCache::restore(const std::vector<TokenKey>& keys, int64_t max_tokens, KVCache& into) {
  QVL_CHECK(into.length() == 0);
  std::lock_guard<std::mutex> lock(mu_);
  ++lookups_;
  auto best = entries_.end();
  int64_t best_len = 0;
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (!it->cache->same_shape(into)) continue;
    const size_t n = std::min(it->keys.size(), keys.size());
    const int64_t len = std::mismatch(keys.begin(), keys.begin() + static_cast<std::ptrdiff_t>(n), it->keys.begin()).first -
                        keys.begin();
    if (len > best_len) {
      best_len = len;
      best = it;
    }
  }
  best_len = std::min({best_len, max_tokens, into.capacity()});
  if (best_len <= 0) return 0;
  into.copy_prefix_from(*best->cache, best_len);
  entries_.splice(entries_.begin(), entries_, best);
  ++hits_;
  reused_ += static_cast<uint64_t>(best_len);
  return best_len;
}

void PrefixCache::put(std::vector<TokenKey> keys, std::unique_ptr<KVCache> cache) {
  QVL_CHECK(cache && static_cast<int64_t>(keys.size()) == cache->length());
  if (keys.empty()) return;
  // One over the budget is not kept, and the shorter entries it would have replaced stay.
  const size_t size = cache->committed_bytes();
  if (size > budget_) return;
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = entries_.begin(); it != entries_.end();) {
    const bool covered = it->keys.size() <= keys.size() && std::equal(it->keys.begin(), it->keys.end(), keys.begin()) &&
                         it->cache->same_shape(*cache);
    if (covered) {
      bytes_ -= it->bytes;
      it = entries_.erase(it);
    } else {
      ++it;
    }
  }
  entries_.push_front(Entry{std::move(keys), std::move(cache), size});
  bytes_ += size;
  while (bytes_ > budget_) {
    bytes_ -= entries_.back().bytes;
    entries_.pop_back();
    ++evictions_;
  }
}

PrefixCache::Stats PrefixCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return Stats{lookups_, hits_, reused_, evictions_, entries_.size(), bytes_, budget_};
}

}  // namespace qvl
