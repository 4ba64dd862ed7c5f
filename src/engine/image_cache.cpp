// The vision tower's output per image, LRU within a byte budget; keys are SHA-256 of pixels + preprocessing.
#include "engine/image_cache.h"

#include <cstring>

#include "util/digest.h"
#include "util/status.h"

namespace qvl {

namespace {
ImageKey key_of(Digest& d) {
  const std::string bytes = d.finish();
  ImageKey key{};
  QVL_CHECK(bytes.size() == key.size());
  std::memcpy(key.data(), bytes.data(), key.size());
  return key;
}
}  // namespace

ImageKey image_key(const ImageRGB& image, const ImageProcessorConfig& config, const PreprocessOptions& options) {
  Digest d;
  const char tag[] = "qvl-image-v1";
  d.update(tag, sizeof tag);
  d.update_value(static_cast<int64_t>(image.width));
  d.update_value(static_cast<int64_t>(image.height));
  d.update_value(options.min_pixels > 0 ? options.min_pixels : config.min_pixels);
  d.update_value(options.max_pixels > 0 ? options.max_pixels : config.max_pixels);
  d.update_value(options.resized_height > 0 ? options.resized_height : int64_t{-1});
  d.update_value(options.resized_width > 0 ? options.resized_width : int64_t{-1});
  d.update_value(static_cast<int64_t>(config.patch_size));
  d.update_value(static_cast<int64_t>(config.temporal_patch_size));
  d.update_value(static_cast<int64_t>(config.merge_size));
  for (float f : config.image_mean) d.update_value(f);
  for (float f : config.image_std) d.update_value(f);
  d.update_value(config.rescale_factor);
  d.update_value(static_cast<uint64_t>(image.pixels.size()));
  d.update(image.pixels.data(), image.pixels.size());
  return key_of(d);
}

ImageKey frame_group_key(const PreprocessedImage& group) {
  Digest d;
  const char tag[] = "qvl-video-group-v1";
  d.update(tag, sizeof tag);
  d.update_value(static_cast<int64_t>(group.grid_t));
  d.update_value(static_cast<int64_t>(group.grid_h));
  d.update_value(static_cast<int64_t>(group.grid_w));
  d.update_value(static_cast<int64_t>(group.merge_size));
  d.update_value(static_cast<int64_t>(group.patch_dim));
  d.update_value(static_cast<uint64_t>(group.pixel_values.size()));
  d.update(group.pixel_values.data(), group.pixel_values.size() * sizeof(float));
  return key_of(d);
}

std::string image_key_hex(const ImageKey& key) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (uint8_t b : key) {
    s += digits[b >> 4];
    s += digits[b & 15];
  }
  return s;
}

size_t EncodedImage::bytes() const {
  size_t n = embeds.size();
  for (const auto& d : deepstack) n += d.size();
  return n * sizeof(float) + sizeof(EncodedImage);
}

std::shared_ptr<const EncodedImage> ImageCache::find(const ImageKey& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) {
    ++misses_;
    return nullptr;
  }
  ++hits_;
  lru_.splice(lru_.begin(), lru_, it->second.at);
  return it->second.image;
}

void ImageCache::put(const ImageKey& key, std::shared_ptr<const EncodedImage> image) {
  QVL_CHECK(image != nullptr);
  std::lock_guard<std::mutex> lock(mu_);
  auto old = entries_.find(key);
  if (old != entries_.end()) {
    bytes_ -= old->second.image->bytes();
    lru_.erase(old->second.at);
    entries_.erase(old);
  }
  const size_t size = image->bytes();
  if (size > budget_) return;
  lru_.push_front(key);
  entries_[key] = Entry{std::move(image), lru_.begin()};
  bytes_ += size;
  while (bytes_ > budget_) {
    auto victim = entries_.find(lru_.back());
    bytes_ -= victim->second.image->bytes();
    entries_.erase(victim);
    lru_.pop_back();
    ++evictions_;
  }
}

ImageCache::Stats ImageCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return Stats{hits_, misses_, evictions_, entries_.size(), bytes_, budget_};
}

}  // namespace qvl
