// Video preprocessing as transformers' Qwen3VLVideoProcessor (sampling, smart_resize over all frames,
// per-frame antialiased bicubic, normalise, temporal pairs, patchify) and the processor's timestamps.
#include "model/video_processor.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "model/processor_config.h"
#include "util/file.h"

namespace qvl {

Result<VideoProcessorConfig> VideoProcessorConfig::load(const std::string& path) {
  QVL_ASSIGN_OR_RETURN(ProcessorConfigJson in, read_processor_config(path, "video_preprocessor_config.json"));
  VideoProcessorConfig c;
  try {
    QVL_RETURN_IF_ERROR(read_shared_processor_fields(in, c));
    QVL_RETURN_IF_ERROR(read_int_field(in.json, "min_frames", c.min_frames, in.file));
    QVL_RETURN_IF_ERROR(read_int_field(in.json, "max_frames", c.max_frames, in.file));
    if (in.json.contains("fps") && !in.json["fps"].is_null()) c.fps = in.json["fps"].get<double>();
  } catch (const nlohmann::json::exception& e) {
    return Status::Error(in.file + ": unexpected field type: " + e.what());
  }
  if (!shared_processor_fields_valid(c) || !(c.fps > 0) || c.min_frames <= 0 || c.max_frames < c.min_frames)
    return Status::Error(in.file + ": sizes, pixel bounds, fps and frame bounds must be positive, min <= max");
  return c;
}

VideoProcessorConfig VideoProcessorConfig::qwen3_vl() {
  VideoProcessorConfig c;
  c.min_pixels = 4096;
  c.max_pixels = 25165824;
  return c;
}

ImageProcessorConfig VideoProcessorConfig::as_image_config() const {
  ImageProcessorConfig c;
  c.patch_size = patch_size;
  c.temporal_patch_size = temporal_patch_size;
  c.merge_size = merge_size;
  c.min_pixels = min_pixels;
  c.max_pixels = max_pixels;
  c.image_mean = image_mean;
  c.image_std = image_std;
  c.rescale_factor = rescale_factor;
  return c;
}

Result<std::vector<int64_t>> sample_frame_indices(int64_t total, double video_fps, double fps, int min_frames,
                                                  int max_frames) {
  if (total <= 0) return Status::Error("video has no frames");
  if (!(video_fps > 0) || !(fps > 0) || !std::isfinite(fps))
    return Status::Error("frame rates must be positive (video " + std::to_string(video_fps) + ", sampling " +
                         std::to_string(fps) + ")");
  // num_frames = int(total_num_frames / metadata.fps * fps)
  const double want = static_cast<double>(total) / video_fps * fps;
  int64_t num = want >= 9e18 ? INT64_MAX : static_cast<int64_t>(want);
  // num_frames = min(min(max(num_frames, self.min_frames), self.max_frames), total_num_frames)
  num = std::min<int64_t>(std::min<int64_t>(std::max<int64_t>(num, min_frames), max_frames), total);
  // np.linspace(0, total - 1, num).round().astype(int): y = i * step, the last exactly total - 1.
  std::vector<int64_t> idx(static_cast<size_t>(num));
  const double stop = static_cast<double>(total - 1);
  const int64_t div = num - 1;
  const double step = div > 0 ? stop / static_cast<double>(div) : 0.0;
  for (int64_t i = 0; i < num; ++i) {
    double y;
    if (div <= 0) y = static_cast<double>(i) * stop;  // num == 1: [0]
    else if (step == 0) y = static_cast<double>(i) / static_cast<double>(div) * stop;
    else y = static_cast<double>(i) * step;
    if (div > 0 && i == num - 1) y = stop;
    idx[static_cast<size_t>(i)] = static_cast<int64_t>(std::nearbyint(y));
  }
  return idx;
}

Result<std::vector<int64_t>> qwen_vl_utils_frame_indices(int64_t total, double video_fps, double fps, int min_frames,
                                                         int max_frames) {
  if (total <= 0) return Status::Error("video has no frames");
  if (!(video_fps > 0) || !(fps > 0) || !std::isfinite(fps))
    return Status::Error("frame rates must be positive (video " + std::to_string(video_fps) + ", sampling " +
                         std::to_string(fps) + ")");
  // min_frames = ceil_by_factor(min_frames, 2); max_frames = floor_by_factor(max_frames, 2)
  const double lo = std::ceil(min_frames / 2.0) * 2, hi = std::floor(max_frames / 2.0) * 2;
  // nframes = floor_by_factor(min(min(max(total / video_fps * fps, lo), hi), total), 2)
  double n = static_cast<double>(total) / video_fps * fps;
  n = std::min(std::min(std::max(n, lo), hi), static_cast<double>(total));
  const int64_t num = static_cast<int64_t>(std::floor(n / 2)) * 2;
  if (num < 2 || num > total)
    return Status::Error("the video has " + std::to_string(total) + " frames; sampling needs at least 2 (qwen-vl-utils "
                         "samples an even number of frames, at least 2)");
  // torch.linspace(0, total - 1, num) in float32: start + step * i before the halfway point, end - step *
  // (num - 1 - i) from it; then round half to even.
  const float end = static_cast<float>(total - 1);
  const float step = end / static_cast<float>(num - 1);
  const int64_t halfway = num / 2;
  std::vector<int64_t> idx(static_cast<size_t>(num));
  for (int64_t i = 0; i < num; ++i) {
    const float y = i < halfway ? step * static_cast<float>(i) : end - step * static_cast<float>(num - 1 - i);
    idx[static_cast<size_t>(i)] = static_cast<int64_t>(std::nearbyint(y));
  }
  return idx;
}

Result<ResizedSize> smart_resize_video(int64_t num_frames, int64_t height, int64_t width, int temporal_factor,
                                       int factor, int64_t min_pixels, int64_t max_pixels) {
  if (num_frames < temporal_factor)
    return Status::Error("a video needs at least " + std::to_string(temporal_factor) + " sampled frames, got " +
                         std::to_string(num_frames) + " (send a still picture as an image)");
  if (height < factor || width < factor)
    return Status::Error("video frames are " + std::to_string(width) + "x" + std::to_string(height) +
                         "; both sides must be at least " + std::to_string(factor) + " pixels");
  const double h = static_cast<double>(height), w = static_cast<double>(width), f = factor;
  if (std::max(h, w) / std::min(h, w) > 200)
    return Status::Error("video frames are " + std::to_string(width) + "x" + std::to_string(height) +
                         ": aspect ratio over 200:1, which the model cannot take");
  int64_t h_bar = static_cast<int64_t>(std::nearbyint(h / f)) * factor;
  int64_t w_bar = static_cast<int64_t>(std::nearbyint(w / f)) * factor;
  const int64_t t_bar =
      static_cast<int64_t>(std::nearbyint(static_cast<double>(num_frames) / temporal_factor)) * temporal_factor;
  const double thw = static_cast<double>(num_frames) * h * w;  // num_frames * height * width, exact below 2^53
  const int64_t volume = t_bar * h_bar * w_bar;                 // Python's exact integer product
  if (volume > max_pixels) {
    const double beta = std::sqrt(thw / static_cast<double>(max_pixels));
    h_bar = std::max<int64_t>(factor, static_cast<int64_t>(std::floor(h / beta / f)) * factor);
    w_bar = std::max<int64_t>(factor, static_cast<int64_t>(std::floor(w / beta / f)) * factor);
  } else if (volume < min_pixels) {
    const double beta = std::sqrt(static_cast<double>(min_pixels) / thw);
    h_bar = static_cast<int64_t>(std::ceil(h * beta / f)) * factor;
    w_bar = static_cast<int64_t>(std::ceil(w * beta / f)) * factor;
  }
  if (h_bar > (int64_t{1} << 16) || w_bar > (int64_t{1} << 16))
    return Status::Error("video frames would be resized to " + std::to_string(w_bar) + "x" + std::to_string(h_bar) +
                         ", over 65536 pixels a side");
  return ResizedSize{static_cast<int>(h_bar), static_cast<int>(w_bar)};
}

std::vector<std::string> frame_group_timestamps(const std::vector<int64_t>& indices_in, double video_fps, int merge) {
  std::vector<int64_t> idx = indices_in;
  if (merge <= 0 || idx.empty()) return {};
  while (idx.size() % static_cast<size_t>(merge) != 0) idx.push_back(idx.back());
  std::vector<std::string> out;
  for (size_t i = 0; i < idx.size(); i += static_cast<size_t>(merge)) {
    const double a = static_cast<double>(idx[i]) / video_fps;
    const double b = static_cast<double>(idx[i + static_cast<size_t>(merge) - 1]) / video_fps;
    char buf[64];
    std::snprintf(buf, sizeof buf, "<%.1f seconds>", (a + b) / 2);
    out.emplace_back(buf);
  }
  return out;
}

int64_t VideoPlan::tokens() const {
  // grid_h and grid_w are multiples of the merge size; 4 = merge_size^2 for every Qwen3-VL.
  return static_cast<int64_t>(grid_t) * grid_h * grid_w / 4;
}

namespace {

struct Resolved {
  double fps;
  int64_t min_px, max_px;
  int min_frames, max_frames;
};

Result<Resolved> resolve(const VideoProcessorConfig& c, const VideoOptions& o) {
  Resolved r{o.fps > 0 ? o.fps : c.fps, o.min_pixels > 0 ? o.min_pixels : c.min_pixels,
             o.max_pixels > 0 ? o.max_pixels : c.max_pixels, o.min_frames > 0 ? o.min_frames : c.min_frames,
             o.max_frames > 0 ? o.max_frames : c.max_frames};
  if (o.fps == 0 || (o.fps > 0 && !(o.fps <= 1000)))
    return Status::Error("fps must be in (0, 1000], got " + std::to_string(o.fps));
  if (r.min_px > r.max_px)
    return Status::Error("min_pixels " + std::to_string(r.min_px) + " is larger than max_pixels " +
                         std::to_string(r.max_px));
  // min_frames above max_frames is not an error: the processor's clamp gives max_frames.
  return r;
}

// Resizes the sampled frames, pads them to whole groups and patchifies each group.
Result<PreprocessedVideo> finish(std::vector<ImageRGB>&& resized, std::vector<int64_t> indices, double video_fps,
                                 ResizedSize size, const VideoProcessorConfig& config) {
  const ImageProcessorConfig ic = config.as_image_config();
  const int tp = config.temporal_patch_size;
  PreprocessedVideo v;
  v.resized = size;
  v.video_fps = video_fps;
  v.timestamps = frame_group_timestamps(indices, video_fps, config.merge_size);
  v.indices = std::move(indices);
  // if patches.shape[1] % temporal_patch_size != 0: repeat the last frame
  while (resized.size() % static_cast<size_t>(tp) != 0) resized.push_back(resized.back());
  v.grid_t = static_cast<int>(resized.size()) / tp;
  v.grid_h = size.height / config.patch_size;
  v.grid_w = size.width / config.patch_size;
  std::vector<const ImageRGB*> group(static_cast<size_t>(tp));
  for (int g = 0; g < v.grid_t; ++g) {
    for (int t = 0; t < tp; ++t) group[static_cast<size_t>(t)] = &resized[static_cast<size_t>(g * tp + t)];
    v.groups.push_back(patchify_frames(group, ic));
  }
  // One timestamp per group: the processor pads the indices by merge_size, the frames by temporal_patch_size;
  // for Qwen3-VL both are 2.
  if (v.timestamps.size() != v.groups.size())
    return Status::Error("video config: merge_size " + std::to_string(config.merge_size) +
                         " and temporal_patch_size " + std::to_string(tp) + " differ; timestamps do not match groups");
  return v;
}

}  // namespace

Result<VideoPlan> plan_video(const VideoInfo& info, const VideoProcessorConfig& config, const VideoOptions& options) {
  QVL_ASSIGN_OR_RETURN(Resolved r, resolve(config, options));
  VideoPlan p;
  p.info = info;
  if (options.qwen_vl_utils) {
    // fetch_video: min_frames 4 (FPS_MIN_FRAMES), max_frames as asked (else min(768, total)); each frame's
    // smart_resize into [VIDEO_MIN_TOKEN_NUM, VIDEO_MAX_TOKEN_NUM] tokens, the latter lowered where the
    // default total_pixels (MODEL_SEQ_LEN tokens) spread over the frames is less.
    const int max_frames = options.max_frames > 0 ? options.max_frames : static_cast<int>(std::min<int64_t>(768, info.total_frames));
    QVL_ASSIGN_OR_RETURN(p.indices, qwen_vl_utils_frame_indices(info.total_frames, info.fps, options.fps > 0 ? options.fps : 2.0,
                                                                options.min_frames > 0 ? options.min_frames : 4, max_frames));
    const int64_t f2 = int64_t{config.factor()} * config.factor();
    const int64_t min_px = options.min_pixels > 0 ? options.min_pixels : 128 * f2;
    // max(min(VIDEO_FRAME_MAX_PIXELS, total_pixels / nframes * 2), int(min_pixels * 1.05)), total_pixels
    // = MODEL_SEQ_LEN (128000) * factor² * 0.9
    const double total_pixels = 128000.0 * static_cast<double>(f2) * 0.9;
    double cap = std::max(std::min(768.0 * static_cast<double>(f2), total_pixels / static_cast<double>(p.indices.size()) * 2),
                          std::floor(static_cast<double>(min_px) * 1.05));
    if (options.max_pixels > 0) cap = std::min(cap, static_cast<double>(options.max_pixels));
    QVL_ASSIGN_OR_RETURN(p.resized, smart_resize(info.height, info.width, config.factor(), min_px, static_cast<int64_t>(cap)));
  } else {
    QVL_ASSIGN_OR_RETURN(p.indices, sample_frame_indices(info.total_frames, info.fps, r.fps, r.min_frames, r.max_frames));
    QVL_ASSIGN_OR_RETURN(p.resized, smart_resize_video(static_cast<int64_t>(p.indices.size()), info.height, info.width,
                                                       config.temporal_patch_size, config.factor(), r.min_px, r.max_px));
  }
  const int tp = config.temporal_patch_size;
  p.grid_t = static_cast<int>((p.indices.size() + static_cast<size_t>(tp) - 1) / static_cast<size_t>(tp));
  p.grid_h = p.resized.height / config.patch_size;
  p.grid_w = p.resized.width / config.patch_size;
  if (options.max_tokens >= 0 && p.tokens() > options.max_tokens)
    return Status::Error("the video would take " + std::to_string(p.tokens()) + " prompt tokens (" +
                         std::to_string(p.grid_t) + " frame groups at " + std::to_string(p.resized.width) + "x" +
                         std::to_string(p.resized.height) + "), over the " + std::to_string(options.max_tokens) +
                         " left in the context; lower fps or max_pixels, or raise the context");
  return p;
}

Result<PreprocessedVideo> preprocess_video_frames(const std::vector<ImageRGB>& all_frames, double video_fps,
                                                  const VideoProcessorConfig& config, const VideoOptions& options) {
  if (all_frames.empty()) return Status::Error("video has no frames");
  VideoInfo info;
  info.width = info.stored_width = all_frames[0].width;
  info.height = info.stored_height = all_frames[0].height;
  info.total_frames = static_cast<int64_t>(all_frames.size());
  info.fps = video_fps;
  QVL_ASSIGN_OR_RETURN(VideoPlan p, plan_video(info, config, options));
  std::vector<ImageRGB> resized;
  for (int64_t i : p.indices) {
    const ImageRGB& f = all_frames[static_cast<size_t>(i)];
    if (f.width != info.width || f.height != info.height) return Status::Error("video frames differ in size");
    resized.push_back(options.qwen_vl_utils ? resize_bicubic_antialias_float(f, p.resized.width, p.resized.height)
                                            : resize_bicubic_antialias(f, p.resized.width, p.resized.height));
  }
  return finish(std::move(resized), std::move(p.indices), video_fps, p.resized, config);
}

Result<PreprocessedVideo> preprocess_video_file(std::span<const uint8_t> bytes, const VideoProcessorConfig& config,
                                                const VideoOptions& options, const VideoDecodeLimits& limits_in) {
  VideoDecodeLimits limits = limits_in;
  VideoPlan plan;
  std::vector<ImageRGB> resized;
  limits.select = [&](const VideoInfo& info) -> Result<std::vector<int64_t>> {
    QVL_ASSIGN_OR_RETURN(plan, plan_video(info, config, options));
    resized.reserve(plan.indices.size());
    return plan.indices;
  };
  limits.on_frame = [&](size_t, ImageRGB&& frame) -> Status {
    resized.push_back(options.qwen_vl_utils ? resize_bicubic_antialias_float(frame, plan.resized.width, plan.resized.height)
                                            : resize_bicubic_antialias(frame, plan.resized.width, plan.resized.height));
    return Status::Ok();
  };
  QVL_ASSIGN_OR_RETURN(DecodedVideo decoded, decode_video(bytes, limits));
  if (resized.size() != plan.indices.size()) return Status::Error("video decoding lost frames");
  return finish(std::move(resized), std::move(plan.indices), decoded.info.fps, plan.resized, config);
}

}  // namespace qvl
