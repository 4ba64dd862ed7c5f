// The server-wide budget of image and video decode memory: a byte-counting semaphore with a deadline.
#include "server/decode_memory.h"

#include <unistd.h>

#include <algorithm>

#include "util/status.h"

namespace qvl::server {

uint64_t DecodeMemory::in_use() const {
  std::lock_guard<std::mutex> l(mu_);
  return used_;
}

DecodeMemory::Got DecodeMemory::acquire(uint64_t bytes, std::chrono::steady_clock::time_point deadline) {
  if (bytes > capacity_) return Got::kTooLarge;
  std::unique_lock<std::mutex> l(mu_);
  if (!cv_.wait_until(l, deadline, [&] { return used_ + bytes <= capacity_; })) return Got::kBusy;
  used_ += bytes;
  return Got::kOk;
}

void DecodeMemory::release(uint64_t bytes) {
  {
    std::lock_guard<std::mutex> l(mu_);
    QVL_CHECK(bytes <= used_);
    used_ -= bytes;
  }
  cv_.notify_all();
}

uint64_t DecodeMemory::video_bytes(int64_t frame_pixels, int64_t kept_frames, int64_t kept_pixels) {
  const auto u = [](int64_t v) { return static_cast<uint64_t>(std::max<int64_t>(v, 0)); };
  return u(frame_pixels) * kVideoBytesPerFramePixel + u(kept_frames) * u(kept_pixels) * 3;
}

uint64_t DecodeMemory::default_capacity() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  const uint64_t ram = pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : (8ull << 30);
  return std::clamp<uint64_t>(ram / 8, 1ull << 30, 8ull << 30);
}

}  // namespace qvl::server
