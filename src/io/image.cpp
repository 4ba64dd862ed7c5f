// Decoding JPEG, PNG, WebP, GIF, BMP, ICO, Netpbm and TIFF files to 8-bit RGB the way PIL.Image.open ->
// ImageOps.exif_transpose -> convert("RGB") does (Pillow 13), using the codec libraries Pillow uses.
//
// What "the way PIL does" means here, format by format (each checked against Pillow in
// tools/reference/make_images.py and tests/test_image_decode.cpp):
//   JPEG  libjpeg-turbo with its defaults (JDCT_ISLOW, fancy upsampling). 1 component -> grey,
//         3 -> RGB, 4 -> CMYK read as Adobe-inverted ("CMYK;I": 255 - v), then PIL's cmyk2rgb:
//         c' = clip(nk - muldiv255(c, nk)), nk = 255 - k. A file that ends early is refused.
//   PNG   libpng without colour transforms. 16-bit samples keep their high byte ("RGB;16B"), except
//         16-bit grey, which PIL opens as "I;16" and converts by clipping: min(v, 255). 1/2/4-bit grey
//         is scaled by 255/(2^n - 1). Palette indices past the PLTE entries are black. Alpha and tRNS
//         are dropped, never composited. Chunk CRCs before IDAT are checked (PIL does), IDAT's are not.
//   WebP  libwebp's WebPAnimDecoder in RGBA (Pillow decodes every WebP this way): the first frame on a
//         transparent black canvas, alpha dropped.
//   GIF   giflib, first frame only. The canvas grows to hold the frame; pixels outside the frame are
//         the transparency index if the frame has one, else index 0. An identity grey palette (or no
//         palette) means the index is the grey level; otherwise indices past the palette are black.
//   BMP   own parser, a port of PIL's BmpImagePlugin (raw, bitfields, RLE8, RLE4), including its
//         quirk of reading a black-and-white palette image as 1-bit data.
//   ICO: image_bmp.cpp; Netpbm: io/netpbm.cpp; TIFF: io/tiff.cpp (libtiff, Pillow's TIFF modes),
//         its orientation from its own Orientation tag, else tiff:Orientation in its XMP tag.
//   EXIF  Orientation from IFD0 (JPEG APP1, PNG eXIf / tEXt "exif" / "Raw profile type exif", WebP
//         EXIF), else tiff:Orientation in XMP; applied as PIL's Image.transpose methods.
// A file cut short is refused exactly when PIL refuses it: PIL keeps an image whose rows are complete
// even if what follows them is missing (tests/data/decode_golden.json records 1692 such cuts).
//
// Known differences from PIL, all on damaged or unusual files (measured on 3400 byte-flipped copies of
// the test images; where both decode, the pixels are identical):
//   - GIF: giflib decodes some corrupt LZW streams that PIL's own decoder refuses (91 of 400 flipped
//     GIFs), and refuses a damaged block terminator after the last pixel, which PIL never reads (2).
//   - PNG: a zlib error after the last row is refused here; PIL notices it only if its inflate call
//     reaches it (9 of 1320 flipped PNGs decode in PIL but are refused here).
//   - EXIF that is not a TIFF structure is ignored here; PIL ignores it only in JPEGs without a JFIF
//     density, and otherwise refuses the image.
//   - Lossless JPEG (SOF3): Debian's libjpeg-turbo 2.1 cannot decode it; Pillow's 3.x can.
#include "io/image.h"
#include "io/image_codec.h"
#include "io/netpbm.h"
#include "io/tiff.h"

#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "util/file.h"

namespace qvl {

namespace codec {

// Refuses zero-sized images and images over the pixel limit; called with header values, before any
// pixel buffer is allocated.
// Returns the pixel count the caller's admit() says the image will be resized to (0 when there is no admit).
Result<int64_t> check_size(const char* format, uint64_t w, uint64_t h, const ImageDecodeLimits& limits) {
  if (w == 0 || h == 0)
    return Status::Error(std::string(format) + ": image is " + dims(w, h) +
                         ", expected a width and height of at least 1");
  const uint64_t max = limits.max_pixels > 0 ? static_cast<uint64_t>(limits.max_pixels) : 0;
  // w and h are at most 2^32 each, so w * h fits in 64 bits.
  if (w * h > max)
    return Status::Error(std::string(format) + ": image is " + dims(w, h) + " = " + std::to_string(w * h) +
                         " pixels, over the limit of " + std::to_string(max) +
                         " the decoder takes (hint: downscale the image first; the model resizes every image to its "
                         "max_pixels, 16.7 megapixels by default, anyway)");
  if (!limits.admit) return int64_t{0};
  Result<int64_t> target = limits.admit(static_cast<int64_t>(w), static_cast<int64_t>(h));
  if (!target.ok()) return target.status().with_context(std::string(format) + " image of " + dims(w, h));
  return target;
}

// The libjpeg scale denominator (1, 2, 4 or 8) for a w x h JPEG that will be resized to `target` pixels.
unsigned jpeg_scale_denom(uint64_t w, uint64_t h, int64_t target, int factor) {
  if (factor <= 0 || target <= 0) return 1;
  const double need = static_cast<double>(factor) * factor * static_cast<double>(target);
  unsigned denom = 1;
  for (unsigned d : {2u, 4u, 8u}) {
    // The scaled image's sides are ceil(w / d) and ceil(h / d).
    const double sw = static_cast<double>((w + d - 1) / d), sh = static_cast<double>((h + d - 1) / d);
    if (sw * sh >= need) denom = d;
  }
  return denom;
}

ImageRGB new_image(int w, int h) {
  ImageRGB img;
  img.width = w;
  img.height = h;
  img.pixels.assign(static_cast<size_t>(w) * static_cast<size_t>(h) * 3, 0);
  return img;
}

}  // namespace codec

// ----------------------------------------------------------------------------------------------------
// Public entry points.

const char* image_format_name(ImageFormat f) {
  switch (f) {
    case ImageFormat::kJpeg: return "JPEG";
    case ImageFormat::kPng: return "PNG";
    case ImageFormat::kWebp: return "WebP";
    case ImageFormat::kGif: return "GIF";
    case ImageFormat::kBmp: return "BMP";
    case ImageFormat::kNetpbm: return "Netpbm";
    case ImageFormat::kIco: return "ICO";
    case ImageFormat::kTiff: return "TIFF";
    case ImageFormat::kUnknown: break;
  }
  return "unknown";
}

ImageFormat detect_image_format(std::span<const uint8_t> b) {
  auto starts = [&](const char* magic, size_t n, size_t at = 0) {
    return b.size() >= at + n && std::memcmp(b.data() + at, magic, n) == 0;
  };
  if (starts("\xFF\xD8\xFF", 3)) return ImageFormat::kJpeg;
  if (starts("\x89PNG\r\n\x1A\n", 8)) return ImageFormat::kPng;
  if (starts("GIF87a", 6) || starts("GIF89a", 6)) return ImageFormat::kGif;
  if (starts("RIFF", 4) && starts("WEBP", 4, 8) && (starts("VP8 ", 4, 12) || starts("VP8L", 4, 12) || starts("VP8X", 4, 12)))
    return ImageFormat::kWebp;
  if (starts("BM", 2)) return ImageFormat::kBmp;
  if (is_netpbm(b)) return ImageFormat::kNetpbm;
  if (starts("\0\0\1\0", 4)) return ImageFormat::kIco;
  if (is_tiff(b)) return ImageFormat::kTiff;
  return ImageFormat::kUnknown;
}

Result<ImageRGB> decode_image(std::span<const uint8_t> bytes, const ImageDecodeLimits& limits) {
  using namespace codec;  // NOLINT: the codecs' entry points and Decoded
  if (bytes.empty()) return Status::Error("empty image data (0 bytes), expected a JPEG, PNG, WebP, GIF, BMP, ICO, Netpbm or TIFF file");
  Result<Decoded> r = Status::Error("unreachable");
  const ImageFormat format = detect_image_format(bytes);
  if (limits.page != 0 && format != ImageFormat::kTiff && format != ImageFormat::kUnknown)
    return Status::Error("page " + std::to_string(limits.page) + " requested, but a " + image_format_name(format) +
                         " file has one page (pages count from 0; multi-page files: TIFF)");
  switch (format) {
    case ImageFormat::kJpeg: r = decode_jpeg(bytes, limits); break;
    case ImageFormat::kPng: r = decode_png(bytes, limits); break;
    case ImageFormat::kWebp: r = decode_webp(bytes, limits); break;
    case ImageFormat::kGif: r = decode_gif(bytes, limits); break;
    case ImageFormat::kBmp: r = decode_bmp(bytes, limits); break;
    case ImageFormat::kIco: r = decode_ico(bytes, limits); break;
    case ImageFormat::kNetpbm: {
      auto img = decode_netpbm(bytes, limits, [&](uint64_t w, uint64_t h) { return check_size("Netpbm", w, h, limits); });
      if (!img.ok()) return img.status();
      return img;  // no metadata, no orientation
    }
    case ImageFormat::kTiff: {
      auto t = decode_tiff(bytes, limits, [&](uint64_t w, uint64_t h) { return check_size("TIFF", w, h, limits); });
      if (!t.ok()) return t.status();
      TiffImage ti = std::move(t).value();
      // exif_transpose reads a TIFF's orientation from its own tags, or else from its XMP packet.
      int orientation = ti.orientation;
      if (orientation == 0 && ti.has_xmp) orientation = xmp_orientation(ti.xmp);
      return apply_orientation(std::move(ti.image), orientation);
    }
    case ImageFormat::kUnknown: {
      std::string head;
      char buf[4];
      for (size_t i = 0; i < bytes.size() && i < 8; ++i) {
        std::snprintf(buf, sizeof buf, "%02x", bytes[i]);
        head += (i ? " " : "") + std::string(buf);
      }
      return Status::Error("unknown image format: the data starts with " + head +
                           ", expected a JPEG, PNG, WebP, GIF, BMP, ICO, Netpbm (PBM/PGM/PPM) or TIFF file");
    }
  }
  if (!r.ok()) return r.status();
  Decoded d = std::move(r).value();
  return apply_orientation(std::move(d.image), orientation_of(d.meta));
}

Result<ImageRGB> load_image_file(const std::string& path, const ImageDecodeLimits& limits) {
  QVL_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, read_file_bytes(path));
  Result<ImageRGB> r = decode_image(bytes, limits);
  if (!r.ok()) return r.status().with_context(path);
  return r;
}

}  // namespace qvl
