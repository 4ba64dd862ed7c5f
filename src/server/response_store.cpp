// Stored responses within a byte budget, least recently used evicted first.
#include "server/response_store.h"

namespace qvl::server {

namespace {
// What an entry costs: its JSON text (what a client sent and got, images included) plus bookkeeping.
size_t cost(const std::string& id, const ResponseStore::Entry& e) {
  const auto h = nlohmann::ordered_json::error_handler_t::replace;
  return id.size() + e.response.dump(-1, ' ', false, h).size() + e.messages.dump(-1, ' ', false, h).size() +
         e.input_items.dump(-1, ' ', false, h).size() + 256;
}
}  // namespace

bool ResponseStore::put(const std::string& id, Entry entry) {
  const size_t b = cost(id, entry);
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = index_.find(id); it != index_.end()) {
    bytes_ -= it->second->bytes;
    lru_.erase(it->second);
    index_.erase(it);
  }
  if (b > capacity_) return false;
  evict_to(capacity_ - b);
  lru_.push_front(Item{id, std::move(entry), b});
  index_[id] = lru_.begin();
  bytes_ += b;
  return true;
}

std::optional<ResponseStore::Entry> ResponseStore::get(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(id);
  if (it == index_.end()) return std::nullopt;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->entry;
}

bool ResponseStore::erase(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(id);
  if (it == index_.end()) return false;
  bytes_ -= it->second->bytes;
  lru_.erase(it->second);
  index_.erase(it);
  return true;
}

void ResponseStore::evict_to(size_t bytes) {
  while (bytes_ > bytes && !lru_.empty()) {
    bytes_ -= lru_.back().bytes;
    index_.erase(lru_.back().id);
    lru_.pop_back();
  }
}

size_t ResponseStore::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

size_t ResponseStore::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lru_.size();
}

}  // namespace qvl::server
