// TIFF images (scans, faxes, multi-page documents), decoded through Debian's libtiff to 8-bit RGB as Pillow
// opens them (its TIFF modes: 1, L, LA, I;16, RGB, RGBA/RGBa/RGBX, P, PA, CMYK; JPEG-in-TIFF as RGB) and
// convert("RGB") turns them into RGB. Part of decode_image (image.h).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>

#include "io/image.h"

namespace qvl {

// "II*\0" or "MM\0*": classic TIFF (version 42) or BigTIFF (43), as Pillow reads both.
bool is_tiff(std::span<const uint8_t> bytes);

struct TiffImage {
  ImageRGB image;
  int orientation = 0;  // the Orientation tag (274); 0: absent
  bool has_xmp = false;
  std::string xmp;  // the XMP tag (700), which exif_transpose also reads an orientation from
};

// Decodes page `limits.page` (0: the first, as the reference opens a TIFF). check_size: the caller's size
// check (zero sizes, the pixel limit, admit()), run on the page's size before any pixel buffer is allocated.
Result<TiffImage> decode_tiff(std::span<const uint8_t> bytes, const ImageDecodeLimits& limits,
                              const std::function<Result<int64_t>(uint64_t, uint64_t)>& check_size);

}  // namespace qvl
