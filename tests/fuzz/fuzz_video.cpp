// Fuzz target: video files (any container FFmpeg's allowed demuxers take, animated WebP) through the whole
// preprocessing: probe, sampling, decode of the sampled frames, resize, patchify. Limits are small so each
// input stays fast; what is accepted must be consistent (groups of the grid's size, one timestamp each).
#include <cstdint>
#include <cstdlib>
#include <span>

#include "io/video.h"
#include "model/video_processor.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> bytes(data, size);
  qvl::VideoDecodeLimits limits;
  limits.max_frame_pixels = 1 << 18;
  limits.max_total_frames = 4096;
  limits.max_duration_s = 600;
  (void)qvl::looks_like_video(bytes);
  (void)qvl::probe_video(bytes, limits);
  qvl::VideoProcessorConfig config = qvl::VideoProcessorConfig::qwen3_vl();
  qvl::VideoOptions options;
  options.max_frames = 16;
  options.max_pixels = 1 << 16;
  options.max_tokens = 4096;
  auto v = qvl::preprocess_video_file(bytes, config, options, limits);
  if (!v.ok()) return 0;
  if (v->groups.empty() || static_cast<int>(v->groups.size()) != v->grid_t || v->timestamps.size() != v->groups.size())
    std::abort();
  for (const auto& g : v->groups)
    if (g.grid_h != v->grid_h || g.grid_w != v->grid_w ||
        g.pixel_values.size() != static_cast<size_t>(g.num_patches()) * g.patch_dim)
      std::abort();
  return 0;
}
