// The Responses API's stored responses (store: true): each response's object (GET /v1/responses/{id}) and the
// conversation up to and including it in chat-completions form (what a follow-up's previous_response_id
// continues), kept within a byte budget, least recently used evicted first. Thread-safe.
#pragma once

#include <cstddef>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include <nlohmann/json.hpp>

namespace qvl::server {

class ResponseStore {
 public:
  explicit ResponseStore(size_t capacity_bytes) : capacity_(capacity_bytes) {}

  struct Entry {
    nlohmann::ordered_json response;  // the response object as returned
    nlohmann::ordered_json messages;  // the conversation through this response: [{"role", "content", ...}]
    // Every item the model was given as input, in order: the previous response's input items and output, then
    // this request's input items (GET /v1/responses/{id}/input_items).
    nlohmann::ordered_json input_items = nlohmann::ordered_json::array();
  };
  // Keeps `entry` under `id` (replacing one of that id). An entry over the whole budget is not kept; returns
  // whether it was.
  bool put(const std::string& id, Entry entry);
  // The entry (and marks it used), or nothing when unknown or evicted.
  std::optional<Entry> get(const std::string& id);
  bool erase(const std::string& id);

  size_t bytes() const;
  size_t size() const;
  size_t capacity() const { return capacity_; }

 private:
  struct Item {
    std::string id;
    Entry entry;
    size_t bytes = 0;
  };
  void evict_to(size_t bytes);  // mu_ held

  const size_t capacity_;
  mutable std::mutex mu_;
  std::list<Item> lru_;  // most recently used first
  std::unordered_map<std::string, std::list<Item>::iterator> index_;
  size_t bytes_ = 0;
};

}  // namespace qvl::server
