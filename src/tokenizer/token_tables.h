// The tokenizer's two lookup tables as open-addressing hash tables in one array each: the vocabulary's bytes ->
// id (the bytes stay in the tokenizer's id -> bytes list) and a pair of ids -> their merge.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "util/status.h"

namespace qvl {

namespace token_tables_detail {
// The power of two that keeps `n` entries at most half full (linear probing stays short).
inline size_t slots_for(size_t n) {
  size_t s = 16;
  while (s < 2 * n) s *= 2;
  return s;
}
}  // namespace token_tables_detail

// Token bytes -> id. An entry is an id; its key is key_of(id), a function passed to every call (the
// tokenizer's: its id -> bytes list), so the table holds no copy of the 151k strings and stays valid when the
// tokenizer is copied or moved with its list. Built once (151k std::unordered_map nodes took ~40% of a tokenizer
// load under ASan), read by many threads.
class VocabIndex {
 public:
  void reserve(size_t n) { slots_.assign(token_tables_detail::slots_for(n), -1); }
  size_t size() const { return size_; }

  // The id whose key is `bytes`, or -1.
  template <typename KeyOf>
  int32_t find(std::string_view bytes, const KeyOf& key_of) const {
    if (slots_.empty()) return -1;
    const size_t mask = slots_.size() - 1;
    for (size_t i = std::hash<std::string_view>{}(bytes) & mask;; i = (i + 1) & mask) {
      const int32_t id = slots_[i];
      if (id < 0) return -1;
      if (std::string_view(key_of(id)) == bytes) return id;
    }
  }
  // Adds `id` (its key, key_of(id), set and fixed from now on) and returns nullptr; when an entry of that key is
  // there already, changes nothing and returns its slot, to keep or to overwrite with another id of that key.
  template <typename KeyOf>
  int32_t* insert(int32_t id, const KeyOf& key_of) {
    QVL_CHECK(!slots_.empty() && 2 * (size_ + 1) <= slots_.size());  // reserve() sized it
    const std::string_view bytes = key_of(id);
    const size_t mask = slots_.size() - 1;
    for (size_t i = std::hash<std::string_view>{}(bytes) & mask;; i = (i + 1) & mask) {
      int32_t& at = slots_[i];
      if (at < 0) {
        at = id;
        ++size_;
        return nullptr;
      }
      if (std::string_view(key_of(at)) == bytes) return &at;
    }
  }

  // Calls f(id) for every entry, in no particular order.
  template <typename F>
  void for_each(F&& f) const {
    for (int32_t id : slots_)
      if (id >= 0) f(id);
  }

 private:
  std::vector<int32_t> slots_;  // an id, or -1 for an empty slot
  size_t size_ = 0;
};

// (left id, right id) -> the merge's rank and the merged token's id: the BPE loop's lookup for every pair
// of neighbouring symbols.
class MergeTable {
 public:
  struct Merge {
    int32_t rank;
    int32_t result;
  };
  void reserve(size_t n) { slots_.assign(token_tables_detail::slots_for(n), Slot{kEmpty, {}}); }

  static uint64_t key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }
  // The merge of (left, right), or nullptr.
  const Merge* find(int32_t left, int32_t right) const {
    if (slots_.empty()) return nullptr;
    const uint64_t k = key(left, right);
    const size_t mask = slots_.size() - 1;
    for (size_t i = hash(k) & mask;; i = (i + 1) & mask) {
      const Slot& s = slots_[i];
      if (s.key == k) return &s.merge;
      if (s.key == kEmpty) return nullptr;
    }
  }
  // Adds the merge of (left, right) unless one is there (the first, lowest-ranked, stays, as in a map's
  // emplace).
  void insert(int32_t left, int32_t right, Merge m) {
    QVL_CHECK(!slots_.empty() && 2 * (size_ + 1) <= slots_.size());  // reserve() sized it
    const uint64_t k = key(left, right);
    const size_t mask = slots_.size() - 1;
    for (size_t i = hash(k) & mask;; i = (i + 1) & mask) {
      Slot& s = slots_[i];
      if (s.key == k) return;
      if (s.key == kEmpty) {
        s = Slot{k, m};
        ++size_;
        return;
      }
    }
  }

 private:
  // Ids are below 2^24, so no pair of them has this key.
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  struct Slot {
    uint64_t key;
    Merge merge;
  };
  static size_t hash(uint64_t k) {  // a 64-bit mix (murmur3's finaliser): the low bits depend on both ids
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return static_cast<size_t>(k);
  }
  std::vector<Slot> slots_;
  size_t size_ = 0;
};

}  // namespace qvl
