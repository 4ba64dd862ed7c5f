// What io/image.cpp's decoders share, one file per codec (image_jpeg.cpp, image_png.cpp, image_webp.cpp,
// image_gif.cpp, image_bmp.cpp with ICO, image_orientation.cpp): the decoded image with the metadata that
// can carry an orientation, the size check run on header values before any pixel is allocated, and the
// orientation PIL's ImageOps.exif_transpose applies. Internal to io/; io/image.h is the interface.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "io/image.h"
#include "util/status.h"

namespace qvl {
namespace codec {

// Metadata that can carry an orientation, as PIL stores it in Image.info.
struct Metadata {
  bool has_exif = false;
  std::vector<uint8_t> exif;  // info["exif"]
  bool has_raw_profile = false;
  std::string raw_profile;  // info["Raw profile type exif"] (PNG text chunks written by ImageMagick)
  bool has_xmp = false;
  std::string xmp;  // info["XML:com.adobe.xmp"] or info["xmp"]
};

struct Decoded {
  ImageRGB image;
  Metadata meta;
};

inline std::string dims(uint64_t w, uint64_t h) { return std::to_string(w) + "x" + std::to_string(h); }

// Refuses zero-sized images and images over the pixel limit; called with header values, before any
// pixel buffer is allocated. Returns the pixel count the caller's admit() says the image will be resized
// to (0 when there is no admit).
Result<int64_t> check_size(const char* format, uint64_t w, uint64_t h, const ImageDecodeLimits& limits);
// The libjpeg scale denominator (1, 2, 4 or 8) for a w x h JPEG that will be resized to `target` pixels.
unsigned jpeg_scale_denom(uint64_t w, uint64_t h, int64_t target, int factor);
// A w x h black image.
ImageRGB new_image(int w, int h);

inline uint16_t be16(const uint8_t* p) { return static_cast<uint16_t>((p[0] << 8) | p[1]); }
inline uint32_t be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}
inline uint16_t le16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
inline uint32_t le32(const uint8_t* p) {
  return uint32_t{p[0]} | (uint32_t{p[1]} << 8) | (uint32_t{p[2]} << 16) | (uint32_t{p[3]} << 24);
}

// image_orientation.cpp: the orientation (1..8) exif_transpose reads from the metadata (EXIF IFD0, else
// tiff:Orientation in XMP), the XMP one alone (0 when absent), and PIL's Image.transpose for it.
int orientation_of(const Metadata& m);
int xmp_orientation(const std::string& xmp);
ImageRGB apply_orientation(ImageRGB in, int orientation);

// The decoders, each as io/image.cpp's header comment describes.
Result<Decoded> decode_jpeg(std::span<const uint8_t> bytes, const ImageDecodeLimits& limits);
Result<Decoded> decode_png(std::span<const uint8_t> bytes, const ImageDecodeLimits& limits);
Result<Decoded> decode_webp(std::span<const uint8_t> bytes, const ImageDecodeLimits& limits);
Result<Decoded> decode_gif(std::span<const uint8_t> bytes, const ImageDecodeLimits& limits);
Result<Decoded> decode_bmp(std::span<const uint8_t> bytes, const ImageDecodeLimits& limits);
Result<Decoded> decode_ico(std::span<const uint8_t> bytes, const ImageDecodeLimits& limits);

}  // namespace codec
}  // namespace qvl
