// Image preprocessing exactly as transformers' Qwen2VLImageProcessorFast for this checkpoint:
// smart_resize, antialiased bicubic resize (torch's uint8 kernel), rescale + normalise, temporal
// duplication and patchify into merge-window order.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "io/image.h"
#include "util/status.h"

namespace qvl {

// The fields of preprocessor_config.json that the pipeline uses.
struct ImageProcessorConfig {
  int patch_size = 16;
  int temporal_patch_size = 2;
  int merge_size = 2;
  int64_t min_pixels = 65536;     // size.shortest_edge (a pixel count, despite the name)
  int64_t max_pixels = 16777216;  // size.longest_edge
  std::array<float, 3> image_mean{0.5f, 0.5f, 0.5f};
  std::array<float, 3> image_std{0.5f, 0.5f, 0.5f};
  double rescale_factor = 1.0 / 255.0;

  // Reads `dir`/preprocessor_config.json (or the file itself); missing fields keep the class defaults.
  static Result<ImageProcessorConfig> load(const std::string& path);
  int factor() const { return patch_size * merge_size; }
  int patch_dim() const { return 3 * temporal_patch_size * patch_size * patch_size; }
};

struct ResizedSize {
  int height = 0;
  int width = 0;
};

// transformers' smart_resize: both sides multiples of `factor`, area within [min_pixels, max_pixels],
// aspect ratio kept as far as possible; Python's round-half-to-even. Fails for aspect ratios over 200.
Result<ResizedSize> smart_resize(int64_t height, int64_t width, int factor, int64_t min_pixels, int64_t max_pixels);

// Antialiased bicubic resize (a = -0.5) of an 8-bit RGB image with torch's uint8 arithmetic: int16
// fixed-point weights, a horizontal pass to uint8, then a vertical pass to uint8. The identity when the
// size is unchanged. `pil`: Pillow's arithmetic instead (Image.resize with BICUBIC: int32 weights at 22 bits).
ImageRGB resize_bicubic_antialias(const ImageRGB& src, int out_width, int out_height, bool pil = false);

// The same filter as torchvision's resize of a uint8 tensor does it (qwen-vl-utils' video frames): the pixels
// cast to float32, antialiased bicubic in float (width, then height), clamped to [0, 255] and rounded half to
// even. Upscaling differs from the uint8 kernel by up to 15.
ImageRGB resize_bicubic_antialias_float(const ImageRGB& src, int out_width, int out_height);

struct PreprocessedImage {
  ResizedSize resized;
  int grid_t = 1, grid_h = 0, grid_w = 0;  // image_grid_thw, in patches
  int merge_size = 2;
  int patch_dim = 1536;
  std::vector<float> pixel_values;  // [grid_t * grid_h * grid_w, patch_dim], merge-window row order

  int num_patches() const { return grid_t * grid_h * grid_w; }
  // The number of <|image_pad|> tokens this image takes in the prompt.
  int num_tokens() const { return num_patches() / (merge_size * merge_size); }
};

struct PreprocessOptions {
  int64_t min_pixels = -1;  // -1: the config's value
  int64_t max_pixels = -1;
  // An exact size asked for (qwen-vl-utils' resized_height / resized_width): smart_resize of this size
  // instead of the image's own, at most max_pixels and at least 4 tokens' pixels (qwen-vl-utils' floor, not
  // min_pixels). -1: the image's size.
  int64_t resized_height = -1, resized_width = -1;
  // Resize as Pillow's Image.resize(BICUBIC) does (qwen-vl-utils' fetch_image, which the Qwen3-VL-Embedding
  // and -Reranker reference scripts use before the processor): the same filter at a fixed 22-bit precision
  // instead of torch's int16 weights; values differ by at most 1 in a few pixels.
  bool pil_resize = false;
};

Result<PreprocessedImage> preprocess_image(const ImageRGB& image, const ImageProcessorConfig& config,
                                           const PreprocessOptions& options = {});

// The size preprocess_image resizes to (grid = size / patch_size), without touching the pixels.
Result<ResizedSize> preprocess_size(const ImageRGB& image, const ImageProcessorConfig& config,
                                    const PreprocessOptions& options = {});

// The normalise + temporal duplication + patchify steps on an image already at its final size.
PreprocessedImage patchify(const ImageRGB& resized, const ImageProcessorConfig& config);

// The same for temporal_patch_size frames of one size (a video's frame group): frame t fills temporal slot t.
PreprocessedImage patchify_frames(std::span<const ImageRGB* const> frames, const ImageProcessorConfig& config);

}  // namespace qvl
