// The server's budget of memory for decoding images: each image reserves what decoding it may take (from its
// header, before any pixel is decoded) and gives it back once it is resized to what the model sees; a
// request waits for room until its deadline, or is refused (503), so concurrent large images cannot add up
// past the budget.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>

namespace qvl::server {

class DecodeMemory {
 public:
  // Bytes per pixel an image's decode is charged: its RGB pixels (3) and as much again for what a decoder or
  // the resize holds beside them at most (a GIF's canvas, a 16-bit PNG's rows, the resize's first pass).
  static constexpr int64_t kBytesPerPixel = 6;

  explicit DecodeMemory(uint64_t capacity_bytes) : capacity_(capacity_bytes) {}
  uint64_t capacity() const { return capacity_; }
  uint64_t in_use() const;

  enum class Got { kOk, kTooLarge, kBusy };
  // Reserves `bytes`: kTooLarge when they exceed the whole capacity, kBusy when no room came by `deadline`.
  Got acquire(uint64_t bytes, std::chrono::steady_clock::time_point deadline);
  void release(uint64_t bytes);

  // The default for a machine: an eighth of its memory, within [1 GiB, 8 GiB].
  static uint64_t default_capacity();

 private:
  const uint64_t capacity_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  uint64_t used_ = 0;
};

}  // namespace qvl::server
