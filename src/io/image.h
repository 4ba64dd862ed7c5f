// Decoding image files (JPEG, PNG, WebP, GIF, BMP, ICO, Netpbm, TIFF) to 8-bit RGB exactly as the reference loads them:
// PIL.Image.open -> ImageOps.exif_transpose -> convert("RGB") (transformers.image_utils.load_image).
#pragma once

#include <cstdint>
#include <functional>
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
  // When set, called with the image's stored size once its header is read, before any pixel buffer is
  // allocated. It returns how many pixels the image will be resized to (the caller's preprocessing), or an
  // error that refuses the image (e.g. a request's images would need more tokens than its context).
  std::function<Result<int64_t>(int64_t width, int64_t height)> admit;
  // A JPEG with more than jpeg_reduce_factor^2 times the pixels `admit` returned is decoded at 1/2, 1/4 or
  // 1/8 of its size by libjpeg's DCT scaling: the largest reduction that keeps at least jpeg_reduce_factor
  // times the target's width and height, so a 9999x9999 photo costs memory in proportion to the size it is
  // resized to. Those pixels then differ slightly from a full decode (the reference decodes in full); images
  // under the threshold, and every other format, are decoded in full. 0: never reduce.
  int jpeg_reduce_factor = 0;
  // The page of a multi-page TIFF to decode: 0 is the first, the one the reference opens. Other formats
  // have one page (an animation's first frame is what the reference reads) and refuse a page above 0.
  int page = 0;
};

enum class ImageFormat { kUnknown, kJpeg, kPng, kWebp, kGif, kBmp, kNetpbm, kIco, kTiff };
const char* image_format_name(ImageFormat f);

// Sniffs the format from the first bytes (magic numbers), not from a file name.
ImageFormat detect_image_format(std::span<const uint8_t> bytes);

// The stored size of an image file, read from its header without decoding pixels (before EXIF orientation).
struct ImageHeader {
  ImageFormat format = ImageFormat::kUnknown;
  int64_t width = 0;
  int64_t height = 0;
};

// Decodes an in-memory file. Errors name the format and what is wrong ("truncated PNG data",
// "image is 20000x20000 = 400000000 pixels, over the limit of 100000000").
Result<ImageRGB> decode_image(std::span<const uint8_t> bytes, const ImageDecodeLimits& limits = {});

// Baseline JPEG bytes of an image (libjpeg-turbo), quality 1..100: previews such as a document's page thumbnails.
Result<std::vector<uint8_t>> encode_jpeg(const ImageRGB& image, int quality = 80);

// Reads and decodes a file; errors are prefixed with the path.
Result<ImageRGB> load_image_file(const std::string& path, const ImageDecodeLimits& limits = {});

}  // namespace qvl
