// Decoding image files (JPEG, PNG, WebP, GIF, BMP) to 8-bit RGB exactly as the reference loads them:
// PIL.Image.open -> ImageOps.exif_transpose -> convert("RGB") (transformers.image_utils.load_image).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "util/status.h"

namespace qvl {

// An 8-bit RGB image, rows top to bottom, pixels interleaved: pixels[(y * width + x) * 3 + c].
struct ImageRGB {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> pixels;
};

struct ImageDecodeLimits {
  // Refuse, before decoding pixels, images with more pixels than this (decompression bombs).
  // Default: Pillow's MAX_IMAGE_PIXELS * 2 is where Pillow refuses; we refuse at 100 MP, far beyond
  // what the model's max_pixels (16.7 MP) can use.
  int64_t max_pixels = 100'000'000;
};

enum class ImageFormat { kUnknown, kJpeg, kPng, kWebp, kGif, kBmp };
const char* image_format_name(ImageFormat f);

// Sniffs the format from the first bytes (magic numbers), not from a file name.
ImageFormat detect_image_format(std::span<const uint8_t> bytes);

// Decodes an in-memory file. Errors name the format and what is wrong ("truncated PNG data",
// "image is 20000x20000 = 400000000 pixels, over the limit of 100000000").
Result<ImageRGB> decode_image(std::span<const uint8_t> bytes, const ImageDecodeLimits& limits = {});

// Reads and decodes a file; errors are prefixed with the path.
Result<ImageRGB> load_image_file(const std::string& path, const ImageDecodeLimits& limits = {});

}  // namespace qvl
