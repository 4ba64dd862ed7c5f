// Fuzz target: decode_image on any bytes — every format it sniffs (JPEG, PNG, WebP, GIF, BMP, ICO, Netpbm, TIFF), with the
// EXIF/XMP orientation found in them applied. A decoded image must be consistent; a refusal must say why.
#include <cstdint>

#include "io/image.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  qvl::ImageDecodeLimits limits;
  limits.max_pixels = int64_t{1} << 22;  // 4 MP: bounds the memory per input; the bomb check is what runs
  (void)qvl::image_format_name(qvl::detect_image_format({data, size}));
  auto img = qvl::decode_image({data, size}, limits);
  if (img.ok()) {
    QVL_CHECK(img->width > 0 && img->height > 0);
    QVL_CHECK(int64_t{img->width} * img->height <= limits.max_pixels);
    QVL_CHECK(img->pixels.size() == static_cast<size_t>(img->width) * img->height * 3);
  } else {
    QVL_CHECK(!img.status().message().empty());
  }
  return 0;
}
