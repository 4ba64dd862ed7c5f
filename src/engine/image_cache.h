// The vision tower's output per image, kept so that the same image in a later request (the next turn of a
// conversation, another client sending the same picture) is not encoded again: LRU within a byte budget.
#pragma once

#include <array>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "io/image.h"
#include "model/image_processor.h"

namespace qvl {

// SHA-256 of the decoded pixels (with width and height) and of the preprocessing that turns them into
// patches (min/max pixels, patch, merge and temporal sizes, mean, std, rescale): equal keys mean equal
// pixel_values. A cryptographic hash, so that no request can forge another's image.
using ImageKey = std::array<uint8_t, 32>;
ImageKey image_key(const ImageRGB& image, const ImageProcessorConfig& config, const PreprocessOptions& options);
// A video's frame group is cached like an image, keyed by its patches (the normalised pixels of its two
// frames at their resized size): the same clip sent again, or with other frames around it, finds it.
ImageKey frame_group_key(const PreprocessedImage& group);
std::string image_key_hex(const ImageKey& key);

// One image through the tower: its merged tokens and the DeepStack features at those tokens.
struct EncodedImage {
  int grid_t = 0, grid_h = 0, grid_w = 0;  // patches
  int64_t n_tokens = 0, dim = 0;
  std::vector<float> embeds;                  // [n_tokens, dim]
  std::vector<std::vector<float>> deepstack;  // per DeepStack tap: [n_tokens, dim]
  size_t bytes() const;
};

class ImageCache {
 public:
  explicit ImageCache(size_t budget_bytes) : budget_(budget_bytes) {}

  // The entry, marked as the most recently used; null when absent.
  std::shared_ptr<const EncodedImage> find(const ImageKey& key);
  // Adds (or replaces) an entry and evicts the least recently used ones beyond the budget. An entry larger
  // than the whole budget is not kept. Sessions hold shared pointers, so eviction never frees data in use.
  void put(const ImageKey& key, std::shared_ptr<const EncodedImage> image);

  struct Stats {
    uint64_t hits = 0, misses = 0, evictions = 0;
    size_t entries = 0, bytes = 0, budget = 0;
  };
  Stats stats() const;

 private:
  using Lru = std::list<ImageKey>;  // front: most recent
  struct Entry {
    std::shared_ptr<const EncodedImage> image;
    Lru::iterator at;
  };
  mutable std::mutex mu_;
  size_t budget_, bytes_ = 0;
  std::map<ImageKey, Entry> entries_;
  Lru lru_;
  uint64_t hits_ = 0, misses_ = 0, evictions_ = 0;
};

}  // namespace qvl
