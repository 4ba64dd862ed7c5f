// Netpbm images (PBM, PGM, PPM: P1-P6), decoded to 8-bit RGB as Pillow opens them and convert("RGB")
// turns them into RGB, scanners' and scientific tools' plain output. Part of decode_image (image.h).
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "io/image.h"

namespace qvl {

// "P1".."P6" followed by whitespace.
bool is_netpbm(std::span<const uint8_t> bytes);

// check_size: the caller's size check (zero sizes, the pixel limit, admit()), run on the header's size
// before any pixel buffer is allocated.
Result<ImageRGB> decode_netpbm(std::span<const uint8_t> bytes, const ImageDecodeLimits& limits,
                               const std::function<Result<int64_t>(uint64_t, uint64_t)>& check_size);

}  // namespace qvl
