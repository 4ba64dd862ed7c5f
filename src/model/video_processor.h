// Video preprocessing exactly as transformers' Qwen3VLVideoProcessor and Qwen3VLProcessor for this
// checkpoint: frames sampled at a target rate (np.linspace indices, rounded half to even), smart_resize over
// all frames together, torch's antialiased bicubic per frame, rescale + normalise, frames paired along time
// (the last repeated to an even count), patchify; and the "<t seconds>" text before each frame group.
// Each frame group is positioned and encoded like an image of its own (get_rope_index splits video grids by
// time, and the vision tower's attention stays within a group), so a video becomes frame groups that the
// engine treats as images.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "io/image.h"
#include "io/video.h"
#include "model/image_processor.h"
#include "util/status.h"

namespace qvl {

// The fields of video_preprocessor_config.json that the pipeline uses; the defaults are the class's.
struct VideoProcessorConfig {
  int patch_size = 16;
  int temporal_patch_size = 2;
  int merge_size = 2;
  int64_t min_pixels = 128 * 32 * 32;  // size.shortest_edge: a pixel count over all frames together
  int64_t max_pixels = 32 * 32 * 768;  // size.longest_edge
  std::array<float, 3> image_mean{0.5f, 0.5f, 0.5f};
  std::array<float, 3> image_std{0.5f, 0.5f, 0.5f};
  double rescale_factor = 1.0 / 255.0;
  double fps = 2;  // frames sampled per second of video
  int min_frames = 4, max_frames = 768;

  // Reads `dir`/video_preprocessor_config.json (or the file itself); missing fields keep the class defaults.
  static Result<VideoProcessorConfig> load(const std::string& path);
  // Qwen3-VL's published video_preprocessor_config.json (for a model directory without one, e.g. GGUF).
  static VideoProcessorConfig qwen3_vl();
  int factor() const { return patch_size * merge_size; }
  // The image-side view (patch sizes, mean, std, rescale) that patchify and the image cache key use.
  ImageProcessorConfig as_image_config() const;
};

// A request's choices (-1: the config's).
struct VideoOptions {
  double fps = -1;
  int64_t min_pixels = -1, max_pixels = -1;
  int min_frames = -1, max_frames = -1;
  // Refuse, before any frame is decoded, a video that would take more prompt tokens than this (-1: no bound).
  int64_t max_tokens = -1;
  // Sample and size as qwen-vl-utils' fetch_video reads a video file (the Qwen3-VL-Embedding and -Reranker
  // reference scripts; the processor then runs with do_resize=False): an even frame count (smart_nframes:
  // total / video_fps * fps within [min_frames, max_frames] and the total, floored to a multiple of 2) at
  // torch.linspace(0, total - 1, n).round() in float32; each frame's own smart_resize into [128, 768] tokens
  // (min_pixels / max_pixels where given), not a budget over all frames.
  bool qwen_vl_utils = false;
};

// qwen-vl-utils' frame choice: smart_nframes and torch.linspace(0, total - 1, n).round() (float32, half to even).
Result<std::vector<int64_t>> qwen_vl_utils_frame_indices(int64_t total_frames, double video_fps, double fps,
                                                         int min_frames, int max_frames);

// Qwen3VLVideoProcessor.sample_frames: num = int(total / video_fps * fps) clamped to [min_frames,
// max_frames] and to total; indices = round(linspace(0, total - 1, num)).
Result<std::vector<int64_t>> sample_frame_indices(int64_t total_frames, double video_fps, double fps, int min_frames,
                                                  int max_frames);

// The video smart_resize: the pixel budget covers all frames (round(T / temporal) * temporal of them).
Result<ResizedSize> smart_resize_video(int64_t num_frames, int64_t height, int64_t width, int temporal_factor,
                                       int factor, int64_t min_pixels, int64_t max_pixels);

// Qwen3VLProcessor._calculate_timestamps formatted as the prompt shows them: one "<t seconds>" per group of
// `merge` frames (the index list padded with its last), t the mean of the group's first and last times.
std::vector<std::string> frame_group_timestamps(const std::vector<int64_t>& indices, double video_fps, int merge);

struct PreprocessedVideo {
  int grid_t = 0, grid_h = 0, grid_w = 0;  // video_grid_thw
  ResizedSize resized;
  double video_fps = 0;
  std::vector<int64_t> indices;          // the sampled frames
  std::vector<std::string> timestamps;   // per group: "<0.3 seconds>"
  std::vector<PreprocessedImage> groups;  // per group: grid (1, grid_h, grid_w), its two frames' patches
  // Per group, its image-cache key (engine/image_cache.h's frame_group_key) when the caller computed it
  // beforehand; empty: the session hashes the groups itself.
  std::vector<std::array<uint8_t, 32>> group_keys;
  int tokens_per_group() const { return groups.empty() ? 0 : groups[0].num_tokens(); }
};

// From frames already decoded (every frame of the video, in order): sampling, resize, patchify.
Result<PreprocessedVideo> preprocess_video_frames(const std::vector<ImageRGB>& all_frames, double video_fps,
                                                  const VideoProcessorConfig& config, const VideoOptions& options = {});

// Decodes a video file keeping only the sampled frames, each resized as soon as it is decoded.
Result<PreprocessedVideo> preprocess_video_file(std::span<const uint8_t> bytes, const VideoProcessorConfig& config,
                                                const VideoOptions& options = {},
                                                const VideoDecodeLimits& limits = {});

// What a video will take without decoding any frame: the sampled indices, grid and tokens.
struct VideoPlan {
  VideoInfo info;
  std::vector<int64_t> indices;
  ResizedSize resized;
  int grid_t = 0, grid_h = 0, grid_w = 0;
  int64_t tokens() const;  // grid_t * grid_h * grid_w / merge^2
};
Result<VideoPlan> plan_video(const VideoInfo& info, const VideoProcessorConfig& config, const VideoOptions& options);

}  // namespace qvl
