// The server's budget of memory for decoding images and videos: each image reserves what decoding it may take
// (from its header, before any pixel is decoded) and gives it back once it is resized to what the model sees;
// each video reserves what its decoder and its kept frames may hold (from its metadata) until its frames are
// patches. A request waits for room until its deadline, or is refused (503), so concurrent large images and
// videos cannot add up past the budget.
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

  // Bytes a video's decode is charged, as it runs one frame at a time on one thread: FFmpeg's decoder for a
  // frame of `frame_pixels` (up to 16 reference frames and the frame being decoded, in YUV 4:2:0 at 1.5 bytes
  // a pixel: 26), that frame in RGB and the resize's first pass (3 each): 32 bytes a pixel of the stored
  // frame; and the kept frames at their resized size (3 bytes a pixel each) until they are patches.
  static constexpr int64_t kVideoBytesPerFramePixel = 32;
  static uint64_t video_bytes(int64_t frame_pixels, int64_t kept_frames, int64_t kept_pixels);

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
