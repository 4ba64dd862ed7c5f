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
//   ICO, Netpbm: io/netpbm.cpp and decode_ico below; TIFF: io/tiff.cpp (libtiff, Pillow's TIFF modes),
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
#include "io/netpbm.h"
#include "io/tiff.h"

#include <algorithm>
#include <cmath>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include <gif_lib.h>
#include <jerror.h>
#include <jpeglib.h>
#include <png.h>
#include <webp/decode.h>
#include <webp/demux.h>

#include "util/file.h"

namespace qvl {

namespace {

// ----------------------------------------------------------------------------------------------------
// Shared helpers.

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

std::string dims(uint64_t w, uint64_t h) { return std::to_string(w) + "x" + std::to_string(h); }

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
                         " (hint: downscale the image, or raise the pixel limit)");
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

uint16_t be16(const uint8_t* p) { return static_cast<uint16_t>((p[0] << 8) | p[1]); }
uint32_t be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}
uint16_t le16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
uint32_t le32(const uint8_t* p) {
  return uint32_t{p[0]} | (uint32_t{p[1]} << 8) | (uint32_t{p[2]} << 16) | (uint32_t{p[3]} << 24);
}

// ----------------------------------------------------------------------------------------------------
// EXIF / XMP orientation, as PIL.Image.getexif and ImageOps.exif_transpose read it.

struct ExifOrientation {
  bool present = false;  // PIL has tag 0x0112 in IFD0 (then XMP is not consulted)
  int value = 1;         // 2..8 when PIL would transpose, else 1
};

// Parses IFD0 of a TIFF structure like TiffImagePlugin.ImageFileDirectory_v2.load. Where PIL would
// raise (a header that is not TIFF, BigTIFF), this returns "no orientation" instead of failing.
ExifOrientation parse_exif_orientation(std::span<const uint8_t> d) {
  ExifOrientation r;
  // data = re.sub(b"^(Exif\x00\x00){1,2}", b"", data)
  for (int i = 0; i < 2 && d.size() >= 6 && std::memcmp(d.data(), "Exif\0\0", 6) == 0; ++i) d = d.subspan(6);
  if (d.size() < 8) return r;
  static const char* kPrefixes[] = {"MM\x00\x2A", "II\x2A\x00", "MM\x2A\x00", "II\x00\x2A", "MM\x00\x2B", "II\x2B\x00"};
  bool ok = false;
  for (const char* p : kPrefixes) ok = ok || std::memcmp(d.data(), p, 4) == 0;
  if (!ok || d[2] == 0x2B) return r;  // not TIFF, or BigTIFF (PIL cannot read it from an 8-byte head)
  const bool le = d[0] == 'I';
  auto u16 = [&](size_t o) -> uint32_t { return le ? le16(&d[o]) : be16(&d[o]); };
  auto u32 = [&](size_t o) -> uint32_t { return le ? le32(&d[o]) : be32(&d[o]); };
  const size_t ifd = u32(4);
  if (ifd > d.size() || d.size() - ifd < 2) return r;
  const size_t count = u16(ifd);
  int found_type = 0;
  std::span<const uint8_t> found;
  for (size_t i = 0; i < count; ++i) {
    const size_t e = ifd + 2 + i * 12;
    if (e + 12 > d.size()) break;  // _ensure_read raises: keep the tags read so far
    const uint32_t tag = u16(e), type = u16(e + 2), n = u32(e + 4);
    int unit = 0;
    switch (type) {
      case 1: case 2: case 6: case 7: unit = 1; break;
      case 3: case 8: unit = 2; break;
      case 4: case 9: case 11: case 13: unit = 4; break;
      case 5: case 10: case 12: case 16: unit = 8; break;
      default: continue;  // unsupported type: PIL skips the entry
    }
    const uint64_t size = uint64_t{n} * unit;
    std::span<const uint8_t> value;
    if (size > 4) {
      const uint64_t off = u32(e + 8);
      if (off > d.size() || d.size() - off < size) break;  // _safe_read raises: stop reading tags
      value = d.subspan(static_cast<size_t>(off), static_cast<size_t>(size));
    } else {
      value = d.subspan(e + 8, static_cast<size_t>(size));
    }
    if (value.empty()) continue;  // count 0: skipped
    if (tag == 0x0112) {
      found_type = static_cast<int>(type);
      found = value;
    }
  }
  if (!found_type) return r;
  r.present = true;
  // Orientation is a one-value tag: with more values PIL keeps the first. PIL then looks the value up
  // in {2: FLIP_LEFT_RIGHT, ...}, so ints, whole floats and whole rationals match; bytes/str do not.
  const uint8_t* v = found.data();
  double x = 0;
  switch (found_type) {
    case 3: x = u16(static_cast<size_t>(v - d.data())); break;
    case 4: case 13: x = u32(static_cast<size_t>(v - d.data())); break;
    case 16: {
      const size_t o = static_cast<size_t>(v - d.data());
      const uint64_t hi = u32(le ? o + 4 : o), lo = u32(le ? o : o + 4);
      x = hi ? 0.0 : static_cast<double>(lo);
      break;
    }
    case 6: x = static_cast<int8_t>(v[0]); break;
    case 8: x = static_cast<int16_t>(u16(static_cast<size_t>(v - d.data()))); break;
    case 9: x = static_cast<int32_t>(u32(static_cast<size_t>(v - d.data()))); break;
    case 5: case 10: {
      const size_t o = static_cast<size_t>(v - d.data());
      const int64_t num = found_type == 5 ? int64_t{u32(o)} : int64_t{static_cast<int32_t>(u32(o))};
      const int64_t den = found_type == 5 ? int64_t{u32(o + 4)} : int64_t{static_cast<int32_t>(u32(o + 4))};
      if (den == 0 || num % den != 0) return r;
      x = static_cast<double>(num / den);
      break;
    }
    case 11: {
      uint32_t bits = u32(static_cast<size_t>(v - d.data()));
      float f;
      std::memcpy(&f, &bits, 4);
      x = f;
      break;
    }
    case 12: {
      const size_t o = static_cast<size_t>(v - d.data());
      const uint64_t hi = u32(le ? o + 4 : o), lo = u32(le ? o : o + 4);
      const uint64_t bits = (hi << 32) | lo;
      std::memcpy(&x, &bits, 8);
      break;
    }
    default: return r;  // BYTE, ASCII, UNDEFINED: PIL gets bytes/str, which match no method
  }
  for (int k = 2; k <= 8; ++k)
    if (x == k) r.value = k;
  return r;
}

// re.search(r'tiff:Orientation(="|>)([0-9])', xmp)
int xmp_orientation(const std::string& xmp) {
  static const std::string kKey = "tiff:Orientation";
  for (size_t p = xmp.find(kKey); p != std::string::npos; p = xmp.find(kKey, p + 1)) {
    size_t q = p + kKey.size();
    if (q + 1 < xmp.size() && xmp[q] == '=' && xmp[q + 1] == '"') {
      q += 2;
    } else if (q < xmp.size() && xmp[q] == '>') {
      q += 1;
    } else {
      continue;
    }
    if (q < xmp.size() && xmp[q] >= '0' && xmp[q] <= '9') return xmp[q] - '0';
  }
  return 0;
}

// bytes.fromhex("".join(text.split("\n")[3:])); false if PIL would fail to parse it.
bool parse_raw_profile(const std::string& text, std::vector<uint8_t>* out) {
  size_t pos = 0;
  for (int i = 0; i < 3; ++i) {
    pos = text.find('\n', pos);
    if (pos == std::string::npos) return false;
    ++pos;
  }
  out->clear();
  int nibble = -1;
  for (size_t i = pos; i < text.size(); ++i) {
    const char c = text[i];
    int v;
    if (c >= '0' && c <= '9') v = c - '0';
    else if (c >= 'a' && c <= 'f') v = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F') v = c - 'A' + 10;
    else if (c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f') {
      if (nibble >= 0 && c != '\n') return false;  // fromhex: whitespace only between byte pairs
      continue;
    } else return false;
    if (nibble < 0) {
      nibble = v;
    } else {
      out->push_back(static_cast<uint8_t>(nibble * 16 + v));
      nibble = -1;
    }
  }
  return nibble < 0;
}

// The orientation PIL's exif_transpose acts on: 2..8, or 1 for none.
int orientation_of(const Metadata& m) {
  ExifOrientation e;
  if (m.has_exif) {
    e = parse_exif_orientation(m.exif);
  } else if (m.has_raw_profile) {
    std::vector<uint8_t> blob;
    if (parse_raw_profile(m.raw_profile, &blob)) e = parse_exif_orientation(blob);
  }
  if (e.present) return e.value;
  if (m.has_xmp) {
    const int o = xmp_orientation(m.xmp);
    if (o >= 2 && o <= 8) return o;
  }
  return 1;
}

// PIL's Image.transpose for the method exif_transpose picks for an orientation.
ImageRGB apply_orientation(ImageRGB in, int orientation) {
  if (orientation < 2 || orientation > 8) return in;
  const int w = in.width, h = in.height;
  const bool swap = orientation >= 5;
  ImageRGB out = new_image(swap ? h : w, swap ? w : h);
  const uint8_t* src = in.pixels.data();
  uint8_t* dst = out.pixels.data();
  for (int y = 0; y < out.height; ++y) {
    for (int x = 0; x < out.width; ++x) {
      int sx = x, sy = y;
      switch (orientation) {
        case 2: sx = w - 1 - x; break;                       // FLIP_LEFT_RIGHT
        case 3: sx = w - 1 - x; sy = h - 1 - y; break;       // ROTATE_180
        case 4: sy = h - 1 - y; break;                       // FLIP_TOP_BOTTOM
        case 5: sx = y; sy = x; break;                       // TRANSPOSE
        case 6: sx = y; sy = h - 1 - x; break;               // ROTATE_270 (90 degrees clockwise)
        case 7: sx = w - 1 - y; sy = h - 1 - x; break;       // TRANSVERSE
        case 8: sx = w - 1 - y; sy = x; break;               // ROTATE_90 (90 degrees counter-clockwise)
      }
      const uint8_t* s = src + (static_cast<size_t>(sy) * w + sx) * 3;
      uint8_t* t = dst + (static_cast<size_t>(y) * out.width + x) * 3;
      t[0] = s[0];
      t[1] = s[1];
      t[2] = s[2];
    }
  }
  return out;
}

// ----------------------------------------------------------------------------------------------------
// JPEG (libjpeg-turbo). libjpeg reports errors by longjmp; the functions that call into it hold only
// plain data, and every C++ object they touch lives in the caller's frame.

struct JpegState {
  jpeg_decompress_struct cinfo;
  jpeg_error_mgr err;
  jmp_buf jmp;
  bool created = false;
  bool truncated = false;
  bool finishing = false;  // in jpeg_finish_decompress: running out of data is not an error
  char message[JMSG_LENGTH_MAX] = {0};
  const uint8_t* data = nullptr;
  size_t size = 0;
};

JpegState* jpeg_state_of(j_common_ptr c) { return static_cast<JpegState*>(c->client_data); }

void jpeg_on_error(j_common_ptr c) {
  JpegState* s = jpeg_state_of(c);
  (*c->err->format_message)(c, s->message);
  std::longjmp(s->jmp, 1);
}

// Warnings are ignored (as PIL does), except running out of data: PIL refuses a truncated JPEG.
void jpeg_on_message(j_common_ptr c, int level) {
  JpegState* s = jpeg_state_of(c);
  if (level == -1 && c->err->msg_code == JWRN_JPEG_EOF && !s->finishing) {
    s->truncated = true;
    std::longjmp(s->jmp, 1);
  }
}

void jpeg_on_output(j_common_ptr) {}

bool jpeg_read_header_phase(JpegState* s) {
  if (setjmp(s->jmp)) return false;
  s->created = true;
  jpeg_create_decompress(&s->cinfo);
  s->cinfo.client_data = s;
  jpeg_mem_src(&s->cinfo, s->data, static_cast<unsigned long>(s->size));
  jpeg_read_header(&s->cinfo, TRUE);
  return true;
}

// Decodes into `out` (width * height * components bytes).
bool jpeg_decode_phase(JpegState* s, uint8_t* out) {
  if (setjmp(s->jmp)) return false;
  jpeg_start_decompress(&s->cinfo);
  const int want_comps = s->cinfo.out_color_space == JCS_GRAYSCALE ? 1 : s->cinfo.out_color_space == JCS_CMYK ? 4 : 3;
  const unsigned denom = s->cinfo.scale_denom;
  const unsigned want_w = (s->cinfo.image_width + denom - 1) / denom, want_h = (s->cinfo.image_height + denom - 1) / denom;
  if (s->cinfo.output_width != want_w || s->cinfo.output_height != want_h || s->cinfo.output_components != want_comps) {
    std::snprintf(s->message, sizeof s->message, "decoder output is %ux%u with %d components, expected %ux%u with %d",
                  s->cinfo.output_width, s->cinfo.output_height, s->cinfo.output_components, want_w, want_h,
                  want_comps);
    return false;
  }
  const size_t stride = static_cast<size_t>(s->cinfo.output_width) * s->cinfo.output_components;
  while (s->cinfo.output_scanline < s->cinfo.output_height) {
    JSAMPROW row = out + stride * s->cinfo.output_scanline;
    if (jpeg_read_scanlines(&s->cinfo, &row, 1) != 1) {
      std::snprintf(s->message, sizeof s->message, "decoder stopped at row %u", s->cinfo.output_scanline);
      return false;
    }
  }
  return true;
}

// After the last row PIL still calls jpeg_finish_decompress, which reads on to EOI: a bad marker there
// (e.g. a second SOF) makes PIL refuse the image, while running out of data does not (its source
// suspends and the finished rows are kept; here jpeg_mem_src supplies a fake EOI).
bool jpeg_finish_phase(JpegState* s) {
  if (setjmp(s->jmp)) return false;
  s->finishing = true;
  jpeg_finish_decompress(&s->cinfo);
  return true;
}

// Walks the markers before the first SOS like JpegImagePlugin._open, collecting EXIF (APP1 "Exif",
// later segments appended without their header) and XMP (APP1, the last one). Stops quietly where PIL
// would raise; libjpeg then reports what is wrong with the stream.
void jpeg_collect_metadata(std::span<const uint8_t> d, Metadata* m) {
  size_t pos = 2;  // after FF D8; d[2] is the FF of the first marker
  while (pos < d.size()) {
    if (d[pos] != 0xFF) {  // skip non-0xFF junk
      ++pos;
      continue;
    }
    if (pos + 1 >= d.size()) return;
    const uint8_t code = d[pos + 1];
    if (code == 0xFF) {  // fill byte
      ++pos;
      continue;
    }
    if (code == 0x00) {  // escaped 0xFF
      pos += 2;
      continue;
    }
    const bool no_length = code == 0xC8 || (code >= 0xD0 && code <= 0xD9) || (code >= 0xF0 && code <= 0xFD);
    const bool known = code >= 0xC0 && code != 0xFF;
    if (!known) return;  // PIL: "no marker found"
    if (no_length) {
      pos += 2;
      continue;
    }
    if (pos + 4 > d.size()) return;
    const size_t len = be16(&d[pos + 2]);
    if (len < 2 || pos + 2 + len > d.size()) return;
    std::span<const uint8_t> seg = d.subspan(pos + 4, len - 2);
    if (code == 0xE1 && seg.size() >= 6 && std::memcmp(seg.data(), "Exif\0\0", 6) == 0) {
      if (m->has_exif) {
        m->exif.insert(m->exif.end(), seg.begin() + 6, seg.end());
      } else {
        m->has_exif = true;
        m->exif.assign(seg.begin(), seg.end());
      }
    } else if (code == 0xE1 && seg.size() >= 29 && std::memcmp(seg.data(), "http://ns.adobe.com/xap/1.0/\0", 29) == 0) {
      m->has_xmp = true;
      m->xmp.assign(reinterpret_cast<const char*>(seg.data()) + 29, seg.size() - 29);
    }
    if (code == 0xDA) return;  // start of scan
    pos += 2 + len;
  }
}

Result<Decoded> decode_jpeg(std::span<const uint8_t> bytes, const ImageDecodeLimits& limits) {
  Decoded out;
  jpeg_collect_metadata(bytes, &out.meta);

  JpegState s;
  s.data = bytes.data();
  s.size = bytes.size();
  s.cinfo.err = jpeg_std_error(&s.err);
  s.err.error_exit = jpeg_on_error;
  s.err.emit_message = jpeg_on_message;
  s.err.output_message = jpeg_on_output;
  s.cinfo.client_data = &s;
  struct Destroy {
    JpegState* s;
    ~Destroy() {
      if (s->created) jpeg_destroy_decompress(&s->cinfo);
    }
  } destroy{&s};

  auto failure = [&]() -> Status {
    if (s.truncated)
      return Status::Error("JPEG: truncated data: the file ends before the image is complete (hint: the file "
                           "may be cut short, e.g. by an interrupted download)");
    return Status::Error(std::string("JPEG: corrupt or unsupported data: ") + s.message);
  };
  if (!jpeg_read_header_phase(&s)) return failure();
  QVL_ASSIGN_OR_RETURN(const int64_t target_pixels, check_size("JPEG", s.cinfo.image_width, s.cinfo.image_height, limits));
  const int comps = s.cinfo.num_components;
  if (s.cinfo.data_precision != 8)
    return Status::Error("JPEG: " + std::to_string(s.cinfo.data_precision) +
                         "-bit samples are not supported, expected 8-bit");
  // PIL: 1 layer -> "L", 3 -> "RGB", 4 -> "CMYK" (rawmode "CMYK;I"); anything else is refused.
  if (comps == 1) {
    s.cinfo.out_color_space = JCS_GRAYSCALE;
  } else if (comps == 3) {
    s.cinfo.out_color_space = JCS_RGB;
  } else if (comps == 4) {
    s.cinfo.out_color_space = JCS_CMYK;
  } else {
    return Status::Error("JPEG: image has " + std::to_string(comps) + " components, expected 1, 3 or 4");
  }
  s.cinfo.dct_method = JDCT_ISLOW;
  s.cinfo.do_fancy_upsampling = TRUE;
  s.cinfo.scale_num = 1;
  s.cinfo.scale_denom = jpeg_scale_denom(s.cinfo.image_width, s.cinfo.image_height, target_pixels, limits.jpeg_reduce_factor);
  // libjpeg's output size at 1/denom: jdiv_round_up(image_size, denom).
  const unsigned denom = s.cinfo.scale_denom;
  const int w = static_cast<int>((s.cinfo.image_width + denom - 1) / denom);
  const int h = static_cast<int>((s.cinfo.image_height + denom - 1) / denom);
  const size_t n = static_cast<size_t>(w) * h;
  out.image = new_image(w, h);
  std::vector<uint8_t> raw;
  uint8_t* target = out.image.pixels.data();
  if (comps != 3) {
    raw.resize(n * comps);
    target = raw.data();
  }
  if (!jpeg_decode_phase(&s, target)) return failure();
  if (!jpeg_finish_phase(&s))
    return Status::Error(std::string("JPEG: corrupt data after the image rows: ") + s.message);

  uint8_t* o = out.image.pixels.data();
  if (comps == 1) {
    for (size_t i = 0; i < n; ++i) o[3 * i] = o[3 * i + 1] = o[3 * i + 2] = raw[i];
  } else if (comps == 4) {
    // "CMYK;I" unpack (v -> 255 - v), then Convert.c cmyk2rgb.
    for (size_t i = 0; i < n; ++i) {
      const uint8_t* p = &raw[4 * i];
      const int nk = p[3];  // 255 - (255 - k)
      for (int c = 0; c < 3; ++c) {
        const int tmp = (255 - p[c]) * nk + 128;  // MULDIV255(c, nk)
        const int v = nk - (((tmp >> 8) + tmp) >> 8);
        o[3 * i + c] = static_cast<uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v);
      }
    }
  }
  return out;
}

// ----------------------------------------------------------------------------------------------------
// PNG (libpng for pixels and text chunks; a chunk walk for the checks and chunks PIL reads itself).

// libpng's progressive reader is fed the whole file at once. Like PIL's incremental zlib decoder it
// delivers each row as soon as its data is there, so an image whose rows are all complete is decoded
// even if what follows them (the end of the zlib stream, IDAT's CRC, IEND) is missing, as in PIL.
struct PngState {
  png_structp png = nullptr;
  png_infop info = nullptr;
  const uint8_t* data = nullptr;
  size_t size = 0;
  png_bytepp rows = nullptr;    // where rows go: height pointers, each to `rowbytes` bytes
  size_t rowbytes = 0;          // expected row size after the transforms below
  bool strip_16 = false;        // 16-bit colour samples handed over as their high byte
  bool strip_alpha = false;     // the alpha sample dropped
  int file_bit_depth = 0;       // before png_set_packing and png_set_strip_16
  int file_color_type = -1;     // before png_set_strip_alpha
  bool started = false;         // the info callback ran
  bool zlib_error = false;      // zlib reported corrupt data (as a libpng warning)
  char message[256] = {0};
};

void png_on_error(png_structp png, png_const_charp msg) {
  auto* s = static_cast<PngState*>(png_get_error_ptr(png));
  std::snprintf(s->message, sizeof s->message, "%s", msg);
  png_longjmp(png, 1);
}

// libpng reports a zlib data error (including a bad Adler-32) as a warning or benign error; PIL's
// inflate sees the same error and refuses the image ("broken data stream").
void png_on_warning(png_structp png, png_const_charp msg) {
  auto* s = static_cast<PngState*>(png_get_error_ptr(png));
  if (std::strcmp(msg, "Truncated compressed data in IDAT") == 0 || std::strcmp(msg, "IDAT: ADLER32 checksum mismatch") == 0)
    s->zlib_error = true;
}

void png_on_info(png_structp png, png_infop info) {
  auto* s = static_cast<PngState*>(png_get_progressive_ptr(png));
  // No colour transforms: samples arrive as stored, except that 1/2/4-bit samples are unpacked to one
  // byte each, interlaced images are assembled, and (where decode_png asks) 16-bit colour samples come as
  // their high byte (png_set_strip_16 keeps the first, big-endian, byte) and alpha is dropped: what the
  // conversion to RGB reads anyway.
  s->file_bit_depth = png_get_bit_depth(png, info);
  s->file_color_type = png_get_color_type(png, info);
  if (s->file_bit_depth < 8) png_set_packing(png);
  if (s->strip_16) png_set_strip_16(png);
  if (s->strip_alpha) png_set_strip_alpha(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  if (png_get_rowbytes(png, info) != s->rowbytes) png_error(png, "unexpected row size after IHDR");
  s->started = true;
}

void png_on_row(png_structp png, png_bytep row, png_uint_32 y, int pass) {
  auto* s = static_cast<PngState*>(png_get_progressive_ptr(png));
  if (row && s->rows && y < png_get_image_height(png, s->info)) png_progressive_combine_row(png, s->rows[y], row);
}

void png_on_end(png_structp, png_infop) {}

bool png_process_phase(PngState* s) {
  if (setjmp(png_jmpbuf(s->png))) return false;
  // PIL checks chunk CRCs before IDAT (done in the chunk walk) and ignores IDAT's.
  png_set_crc_action(s->png, PNG_CRC_QUIET_USE, PNG_CRC_QUIET_USE);
  png_set_benign_errors(s->png, 1);
  png_set_user_limits(s->png, 0x7fffffff, 0x7fffffff);  // the pixel limit is checked before this
  png_set_progressive_read_fn(s->png, s, png_on_info, png_on_row, png_on_end);
  png_process_data(s->png, s->info, const_cast<png_bytep>(s->data), s->size);
  return true;
}

// True once libpng has stored the last row (of the last pass): it advances the row number (or the
// pass, when interlaced) only after a row is complete.
bool png_rows_done(const PngState& s, uint32_t height) {
  if (!s.started) return false;
  if (png_get_interlace_type(s.png, s.info) != PNG_INTERLACE_NONE) return png_get_current_pass_number(s.png) >= 7;
  return png_get_current_row_number(s.png) >= height;
}

uint32_t crc32_of(const uint8_t* type, std::span<const uint8_t> body) {
  static const std::vector<uint32_t> table = [] {
    std::vector<uint32_t> t(256);
    for (uint32_t n = 0; n < 256; ++n) {
      uint32_t c = n;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[n] = c;
    }
    return t;
  }();
  uint32_t c = 0xFFFFFFFFu;
  for (int i = 0; i < 4; ++i) c = table[(c ^ type[i]) & 0xFF] ^ (c >> 8);
  for (uint8_t b : body) c = table[(c ^ b) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

struct PngHeader {
  uint32_t width = 0, height = 0;
  int bit_depth = 0, color_type = 0;
  std::string truncated_after_idat;  // a chunk after the image data that the file cuts short
  uint64_t idat_bytes = 0;           // IDAT data present in the file
};

// Walks the chunks as PngImagePlugin does: before the first IDAT every chunk's CRC is checked; an
// eXIf chunk anywhere (PIL reads trailing chunks when the image is loaded) becomes info["exif"], the
// last one winning. Trailing chunks are read leniently, as PIL does.
Status png_walk(std::span<const uint8_t> d, PngHeader* hdr, Metadata* m) {
  size_t pos = 8;
  bool seen_ihdr = false, seen_idat = false;
  while (d.size() - pos >= 8) {
    const uint32_t len = be32(&d[pos]);
    const uint8_t* type = &d[pos + 4];
    const std::string name(reinterpret_cast<const char*>(type), 4);
    bool word = true;
    for (int i = 0; i < 4; ++i) {
      const uint8_t c = type[i];
      word = word && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_');
    }
    if (!word) {
      if (seen_idat) break;
      return Status::Error("PNG: corrupt data: invalid chunk type at byte " + std::to_string(pos + 4));
    }
    const size_t avail = d.size() - pos - 8;  // bytes after the chunk header
    if (name == "IDAT") {
      seen_idat = true;
      hdr->idat_bytes += std::min<size_t>(len, avail);
    }
    if (name == "IEND") break;
    if (name != "IDAT") {
      if (len > avail || (!seen_idat && avail - len < 4)) {
        if (seen_idat) {  // PIL reads trailing chunks whole (a short header or CRC is fine)
          hdr->truncated_after_idat = name;
          break;
        }
        return Status::Error("PNG: truncated data: the file ends inside chunk " + name + " at byte " +
                             std::to_string(pos));
      }
      std::span<const uint8_t> body = d.subspan(pos + 8, len);
      if (!seen_idat && crc32_of(type, body) != be32(&d[pos + 8 + len]))
        return Status::Error("PNG: corrupt data: bad CRC in chunk " + name + " at byte " + std::to_string(pos));
      if (name == "IHDR" && !seen_ihdr) {
        if (len < 13)
          return Status::Error("PNG: corrupt data: IHDR chunk is " + std::to_string(len) + " bytes, expected 13");
        seen_ihdr = true;
        hdr->width = be32(&body[0]);
        hdr->height = be32(&body[4]);
        hdr->bit_depth = body[8];
        hdr->color_type = body[9];
      } else if (name == "eXIf") {
        m->has_exif = true;
        m->exif.assign(body.begin(), body.end());
      }
    }
    if (len > avail || avail - len < 4) break;
    pos += 12 + static_cast<size_t>(len);
  }
  if (!seen_ihdr) return Status::Error("PNG: truncated data: no IHDR chunk, expected it right after the signature");
  if (!seen_idat) return Status::Error("PNG: truncated data: no IDAT chunk (the file has no image data)");
  return Status::Ok();
}

Result<Decoded> decode_png(std::span<const uint8_t> bytes, const ImageDecodeLimits& limits) {
  Decoded out;
  PngHeader hdr;
  QVL_RETURN_IF_ERROR(png_walk(bytes, &hdr, &out.meta));
  QVL_RETURN_IF_ERROR(check_size("PNG", hdr.width, hdr.height, limits).status());
  const int bd = hdr.bit_depth, ct = hdr.color_type;
  // PngImagePlugin._MODES: the (bit depth, colour type) pairs PIL can open.
  const bool supported = (ct == 0 && (bd == 1 || bd == 2 || bd == 4 || bd == 8 || bd == 16)) ||
                         (ct == 3 && (bd == 1 || bd == 2 || bd == 4 || bd == 8)) ||
                         ((ct == 2 || ct == 4 || ct == 6) && (bd == 8 || bd == 16));
  if (!supported)
    return Status::Error("PNG: unsupported bit depth " + std::to_string(bd) + " for colour type " +
                         std::to_string(ct) + ", expected a combination the PNG standard allows");

  PngState s;
  s.data = bytes.data();
  s.size = bytes.size();
  s.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &s, png_on_error, png_on_warning);
  if (s.png) s.info = png_create_info_struct(s.png);
  struct Destroy {
    PngState* s;
    ~Destroy() {
      if (s->png) png_destroy_read_struct(&s->png, s->info ? &s->info : nullptr, nullptr);
    }
  } destroy{&s};
  if (!s.png || !s.info) return Status::Error("PNG: out of memory creating the decoder");

  // Deflate expands at most 1032:1, so a file with too little IDAT data for its size cannot be
  // complete; refuse it before allocating (a 1 KB file must not make us allocate gigabytes).
  const int channels = ct == 0 || ct == 3 ? 1 : ct == 4 ? 2 : ct == 2 ? 3 : 4;
  const uint64_t packed_bytes = uint64_t{hdr.height} * ((uint64_t{hdr.width} * channels * bd + 7) / 8);
  if (hdr.idat_bytes * 1032 < packed_bytes)
    return Status::Error("PNG: truncated data: " + std::to_string(hdr.idat_bytes) + " bytes of image data cannot hold " +
                         dims(hdr.width, hdr.height) + " pixels (hint: the file may be cut short)");
  const int w = static_cast<int>(hdr.width), h = static_cast<int>(hdr.height);
  // What libpng hands over is what the conversion reads (PIL's modes): 16-bit colour samples as their high
  // byte ("RGB;16B", "RGBA;16B", "LA;16B"), alpha dropped; 16-bit grey stays whole ("I;16" clips at 255).
  // So RGB and RGBA rows arrive as the image's own RGB rows and are decoded in place; grey, grey + alpha
  // and palette rows (one sample each) go through `raw`. A 16-bit RGBA image costs its RGB pixels only,
  // not 8 bytes a pixel more.
  s.strip_16 = bd == 16 && ct != 0;
  s.strip_alpha = ct == 4 || ct == 6;
  const int samples = ct == 2 || ct == 6 ? 3 : 1;
  const int sample_bytes = bd == 16 && !s.strip_16 ? 2 : 1;
  const bool in_place = samples == 3;
  s.rowbytes = static_cast<size_t>(w) * samples * sample_bytes;
  out.image = new_image(w, h);
  std::vector<uint8_t> raw(in_place ? 0 : s.rowbytes * h);  // [h][w] grey or palette samples
  std::vector<png_bytep> rows(h);
  for (int y = 0; y < h; ++y)
    rows[y] = in_place ? out.image.pixels.data() + s.rowbytes * y : raw.data() + s.rowbytes * y;
  s.rows = rows.data();
  const bool ok = png_process_phase(&s);
  if (s.zlib_error)
    return Status::Error("PNG: corrupt data: the compressed image data (IDAT) is damaged: zlib reports a data error "
                         "or checksum mismatch");
  if (!png_rows_done(s, hdr.height)) {
    if (!ok) return Status::Error(std::string("PNG: corrupt data: ") + s.message);
    const uint32_t row = s.started ? png_get_current_row_number(s.png) : 0;
    return Status::Error("PNG: truncated data: the file ends before the image data is complete (at row " +
                         std::to_string(row) + " of " + std::to_string(h) +
                         ") (hint: the file may be cut short, e.g. by an interrupted download)");
  }
  if (!hdr.truncated_after_idat.empty())
    return Status::Error("PNG: truncated data: the file ends inside chunk " + hdr.truncated_after_idat +
                         " after the image data (PIL refuses this too)");
  if (png_get_image_width(s.png, s.info) != hdr.width || png_get_image_height(s.png, s.info) != hdr.height ||
      s.file_bit_depth != bd || s.file_color_type != ct)
    return Status::Error("PNG: corrupt data: IHDR read by libpng differs from the first IHDR chunk");

  // Text chunks (tEXt, zTXt, iTXt; before and after IDAT, in file order) as PIL puts them in info.
  png_textp text = nullptr;
  int num_text = 0;
  png_get_text(s.png, s.info, &text, &num_text);
  for (int i = 0; i < num_text; ++i) {
    const std::string key = text[i].key ? text[i].key : "";
    const size_t n = text[i].compression >= PNG_ITXT_COMPRESSION_NONE ? text[i].itxt_length : text[i].text_length;
    std::string value(text[i].text ? text[i].text : "", text[i].text ? n : 0);
    if (key == "exif" && text[i].compression == PNG_TEXT_COMPRESSION_NONE && !out.meta.has_exif) {
      out.meta.has_exif = true;  // tEXt "exif": PIL stores the raw bytes as info["exif"]
      out.meta.exif.assign(value.begin(), value.end());
    } else if (key == "Raw profile type exif") {
      out.meta.has_raw_profile = true;
      out.meta.raw_profile = std::move(value);
    } else if (key == "XML:com.adobe.xmp") {
      out.meta.has_xmp = true;
      out.meta.xmp = std::move(value);
    }
  }

  png_colorp plte = nullptr;
  int num_plte = 0;
  if (ct == 3) png_get_PLTE(s.png, s.info, &plte, &num_plte);
  uint8_t palette[256][3] = {};  // PIL: entries past PLTE are black
  for (int i = 0; i < num_plte && i < 256; ++i) {
    palette[i][0] = plte[i].red;
    palette[i][1] = plte[i].green;
    palette[i][2] = plte[i].blue;
  }

  if (in_place) return out;
  uint8_t* o = out.image.pixels.data();
  const int gray_scale = bd < 8 ? 255 / ((1 << bd) - 1) : 1;  // "1", "L;2", "L;4": 255, 85, 17
  for (int y = 0; y < h; ++y) {
    const uint8_t* r = rows[y];
    for (int x = 0; x < w; ++x, o += 3) {
      const uint8_t* p = r + static_cast<size_t>(x) * sample_bytes;
      switch (ct) {
        case 0:
          if (bd == 16) {
            const int v = be16(p);  // "I;16" -> RGB clips
            o[0] = o[1] = o[2] = static_cast<uint8_t>(v > 255 ? 255 : v);
          } else {
            o[0] = o[1] = o[2] = static_cast<uint8_t>(p[0] * gray_scale);
          }
          break;
        case 3:
          o[0] = palette[p[0]][0];
          o[1] = palette[p[0]][1];
          o[2] = palette[p[0]][2];
          break;
        default:  // 4: "LA" / "LA;16B" (high byte): grey replicated, alpha dropped
          o[0] = o[1] = o[2] = p[0];
          break;
      }
    }
  }
  return out;
}

// ----------------------------------------------------------------------------------------------------
// WebP (libwebp's animation decoder, as Pillow's _webp.WebPAnimDecoder).

Result<Decoded> decode_webp(std::span<const uint8_t> bytes, const ImageDecodeLimits& limits) {
  Decoded out;
  WebPBitstreamFeatures features;
  const VP8StatusCode st = WebPGetFeatures(bytes.data(), bytes.size(), &features);
  if (st == VP8_STATUS_NOT_ENOUGH_DATA)
    return Status::Error("WebP: truncated data: the file ends inside the header");
  if (st != VP8_STATUS_OK)
    return Status::Error("WebP: corrupt or unsupported header (libwebp status " + std::to_string(st) + ")");
  // The bitstream's size is checked here, the canvas's (which admit() sees, once) below.
  ImageDecodeLimits header_limits = limits;
  header_limits.admit = nullptr;
  QVL_RETURN_IF_ERROR(check_size("WebP", static_cast<uint32_t>(features.width),
                                 static_cast<uint32_t>(features.height), header_limits).status());

  WebPData data{bytes.data(), bytes.size()};
  // EXIF and XMP chunks as Pillow reads them.
  auto read_metadata = [&out](const WebPDemuxer* demux) {
    WebPChunkIterator it;
    if (WebPDemuxGetChunk(demux, "EXIF", 1, &it)) {
      if (it.chunk.size) {
        out.meta.has_exif = true;
        out.meta.exif.assign(it.chunk.bytes, it.chunk.bytes + it.chunk.size);
      }
      WebPDemuxReleaseChunkIterator(&it);
    }
    if (WebPDemuxGetChunk(demux, "XMP ", 1, &it)) {
      if (it.chunk.size) {
        out.meta.has_xmp = true;
        out.meta.xmp.assign(reinterpret_cast<const char*>(it.chunk.bytes), it.chunk.size);
      }
      WebPDemuxReleaseChunkIterator(&it);
    }
  };
  const char* kUnparsable = "WebP: corrupt or truncated data: libwebp could not parse the file (hint: the file may be cut "
                            "short or damaged)";
  const char* kUndecodable = "WebP: corrupt or truncated data: the first frame could not be decoded";

  // A still image: the animation decoder would decode it onto a zeroed RGBA canvas of its own size and
  // copy nothing else there (one key frame, no blending), so its RGB is what WebPDecodeRGB writes; that
  // goes straight into the image, without the 4-byte-a-pixel canvas.
  if (!features.has_animation) {
    WebPDemuxer* demux = WebPDemux(&data);
    if (!demux) return Status::Error(kUnparsable);
    struct DemuxDelete {
      WebPDemuxer* d;
      ~DemuxDelete() { WebPDemuxDelete(d); }
    } demux_delete{demux};
    const uint32_t cw = WebPDemuxGetI(demux, WEBP_FF_CANVAS_WIDTH), ch = WebPDemuxGetI(demux, WEBP_FF_CANVAS_HEIGHT);
    if (cw != static_cast<uint32_t>(features.width) || ch != static_cast<uint32_t>(features.height))
      return Status::Error("WebP: corrupt data: canvas " + dims(cw, ch) + " for an image of " +
                           dims(static_cast<uint32_t>(features.width), static_cast<uint32_t>(features.height)));
    QVL_RETURN_IF_ERROR(check_size("WebP", cw, ch, limits).status());
    read_metadata(demux);
    const int w = features.width, h = features.height;
    out.image = new_image(w, h);
    if (!WebPDecodeRGBInto(bytes.data(), bytes.size(), out.image.pixels.data(), out.image.pixels.size(), 3 * w))
      return Status::Error(kUndecodable);
    return out;
  }

  WebPAnimDecoderOptions opts;
  if (!WebPAnimDecoderOptionsInit(&opts)) return Status::Error("WebP: libwebp version mismatch");
  opts.color_mode = MODE_RGBA;
  opts.use_threads = 0;
  WebPAnimDecoder* dec = WebPAnimDecoderNew(&data, &opts);
  if (!dec) return Status::Error(kUnparsable);
  struct Destroy {
    WebPAnimDecoder* d;
    ~Destroy() { WebPAnimDecoderDelete(d); }
  } destroy{dec};
  WebPAnimInfo info;
  if (!WebPAnimDecoderGetInfo(dec, &info)) return Status::Error("WebP: corrupt data: no image information");
  QVL_RETURN_IF_ERROR(check_size("WebP", info.canvas_width, info.canvas_height, limits).status());
  read_metadata(WebPAnimDecoderGetDemuxer(dec));

  uint8_t* rgba = nullptr;
  int timestamp = 0;
  if (!WebPAnimDecoderGetNext(dec, &rgba, &timestamp) || !rgba) return Status::Error(kUndecodable);
  const int w = static_cast<int>(info.canvas_width), h = static_cast<int>(info.canvas_height);
  out.image = new_image(w, h);
  const size_t n = static_cast<size_t>(w) * h;
  uint8_t* o = out.image.pixels.data();
  for (size_t i = 0; i < n; ++i) {
    o[3 * i] = rgba[4 * i];
    o[3 * i + 1] = rgba[4 * i + 1];
    o[3 * i + 2] = rgba[4 * i + 2];
  }
  return out;
}

// ----------------------------------------------------------------------------------------------------
// GIF (giflib), first frame only, as GifImagePlugin lays it out.

struct GifReader {
  const uint8_t* data;
  size_t size;
  size_t pos;
  bool in_pixels = false;  // reading the first frame's LZW sub-blocks
  bool hit_eof = false;
  int synthetic = 0;  // block terminators served past the end of the file
};

// PIL's GIF decoder is done as soon as the frame's last pixel is stored; giflib then still reads up to
// the block terminator. So that a file cut right after the last complete sub-block decodes as in PIL,
// a read that starts exactly at the end of the file, inside the pixel data, gets a zero byte (an empty
// sub-block, the terminator). If pixels were still missing, giflib reports the image as defective.
int gif_on_read(GifFileType* gif, GifByteType* out, int n) {
  auto* r = static_cast<GifReader*>(gif->UserData);
  const size_t want = n > 0 ? static_cast<size_t>(n) : 0;
  if (r->pos == r->size && want > 0) {
    r->hit_eof = true;
    if (r->in_pixels && r->synthetic < 4) {
      ++r->synthetic;
      std::memset(out, 0, want);
      return static_cast<int>(want);
    }
    return 0;
  }
  const size_t got = want < r->size - r->pos ? want : r->size - r->pos;
  std::memcpy(out, r->data + r->pos, got);
  r->pos += got;
  if (got < want) r->hit_eof = true;
  return static_cast<int>(got);
}

Status gif_error(const GifReader& r, const std::string& what, int code) {
  const char* msg = GifErrorString(code);
  const std::string detail = msg ? msg : ("giflib error " + std::to_string(code));
  if (r.hit_eof)
    return Status::Error("GIF: truncated data: the file ends " + what + " (" + detail +
                         ") (hint: the file may be cut short, e.g. by an interrupted download)");
  return Status::Error("GIF: corrupt data " + what + ": " + detail);
}

// PIL's GifImageFile._is_palette_needed: false for the identity grey ramp.
bool gif_palette_needed(const ColorMapObject* map) {
  for (int i = 0; i < map->ColorCount; ++i) {
    const GifColorType& c = map->Colors[i];
    if (!(c.Red == i && c.Green == i && c.Blue == i)) return true;
  }
  return false;
}

Result<Decoded> decode_gif(std::span<const uint8_t> bytes, const ImageDecodeLimits& limits) {
  Decoded out;
  GifReader reader{bytes.data(), bytes.size(), 0};
  int err = 0;
  GifFileType* gif = DGifOpen(&reader, gif_on_read, &err);
  if (!gif) return gif_error(reader, "in the header", err);
  struct Close {
    GifFileType* g;
    ~Close() {
      int e = 0;
      DGifCloseFile(g, &e);
    }
  } close{gif};

  int transparency = -1;  // from the last graphic control extension before the image
  for (;;) {
    GifRecordType type;
    if (DGifGetRecordType(gif, &type) == GIF_ERROR) return gif_error(reader, "before the first frame", gif->Error);
    if (type == TERMINATE_RECORD_TYPE) return Status::Error("GIF: the file has no image (no frame before the end)");
    if (type == EXTENSION_RECORD_TYPE) {
      int code = 0;
      GifByteType* ext = nullptr;
      if (DGifGetExtension(gif, &code, &ext) == GIF_ERROR) return gif_error(reader, "in an extension block", gif->Error);
      if (code == GRAPHICS_EXT_FUNC_CODE && ext && ext[0] >= 4 && (ext[1] & 1)) transparency = ext[4];
      while (ext) {
        if (DGifGetExtensionNext(gif, &ext) == GIF_ERROR) return gif_error(reader, "in an extension block", gif->Error);
      }
      continue;
    }
    if (type != IMAGE_DESC_RECORD_TYPE) continue;
    if (DGifGetImageDesc(gif) == GIF_ERROR) return gif_error(reader, "in the image descriptor", gif->Error);
    break;
  }

  const GifImageDesc& desc = gif->Image;
  const uint64_t x0 = static_cast<uint16_t>(desc.Left), y0 = static_cast<uint16_t>(desc.Top);
  const uint64_t fw = static_cast<uint16_t>(desc.Width), fh = static_cast<uint16_t>(desc.Height);
  // PIL grows the image when the first frame extends past the logical screen.
  const uint64_t cw = std::max<uint64_t>(static_cast<uint16_t>(gif->SWidth), x0 + fw);
  const uint64_t ch = std::max<uint64_t>(static_cast<uint16_t>(gif->SHeight), y0 + fh);
  QVL_RETURN_IF_ERROR(check_size("GIF", cw, ch, limits).status());
  if (fw == 0 || fh == 0)
    return Status::Error("GIF: first frame is " + dims(fw, fh) + ", expected a width and height of at least 1");

  // The frame palette: the local one if present, else the global one. An identity grey ramp, or no
  // palette at all, makes PIL open the frame as "L", where the index is the grey level.
  const ColorMapObject* map = desc.ColorMap ? desc.ColorMap : gif->SColorMap;
  const bool grey = !map || !gif_palette_needed(map);
  uint8_t rgb[256][3] = {};  // PIL: entries past the palette are black
  for (int i = 0; i < 256; ++i) {
    if (grey) {
      rgb[i][0] = rgb[i][1] = rgb[i][2] = static_cast<uint8_t>(i);
    } else if (i < map->ColorCount) {
      rgb[i][0] = map->Colors[i].Red;
      rgb[i][1] = map->Colors[i].Green;
      rgb[i][2] = map->Colors[i].Blue;
    }
  }

  const int w = static_cast<int>(cw), h = static_cast<int>(ch);
  // Outside the frame: the transparency index if there is one, else index 0.
  std::vector<uint8_t> index(static_cast<size_t>(w) * h, static_cast<uint8_t>(transparency >= 0 ? transparency : 0));
  std::vector<GifPixelType> line(fw);
  reader.in_pixels = true;
  const int passes_start[4] = {0, 4, 2, 1}, passes_step[4] = {8, 8, 4, 2};
  const int npasses = desc.Interlace ? 4 : 1;
  for (int p = 0; p < npasses; ++p) {
    const int start = desc.Interlace ? passes_start[p] : 0, step = desc.Interlace ? passes_step[p] : 1;
    for (uint64_t y = start; y < fh; y += step) {
      if (DGifGetLine(gif, line.data(), static_cast<int>(fw)) == GIF_ERROR)
        return gif_error(reader, "in the pixel data of row " + std::to_string(y), gif->Error);
      std::memcpy(&index[(y0 + y) * w + x0], line.data(), fw);
    }
  }
  out.image = new_image(w, h);
  uint8_t* o = out.image.pixels.data();
  for (size_t i = 0; i < index.size(); ++i) {
    o[3 * i] = rgb[index[i]][0];
    o[3 * i + 1] = rgb[index[i]][1];
    o[3 * i + 2] = rgb[index[i]][2];
  }
  return out;
}

// ----------------------------------------------------------------------------------------------------
// BMP: a port of PIL's BmpImagePlugin (BITMAPCOREHEADER and BITMAPINFOHEADER..V5; 1/4/8-bit palette,
// 16/24/32-bit; raw, bitfields, RLE8, RLE4).

Result<Decoded> decode_bmp(std::span<const uint8_t> d, const ImageDecodeLimits& limits) {
  Decoded out;
  auto truncated = [](const std::string& where) {
    return Status::Error("BMP: truncated data: the file ends inside the " + where);
  };
  if (d.size() < 18) return truncated("file header");
  uint64_t offset = le32(&d[10]);
  const uint32_t header_size = le32(&d[14]);
  if (header_size != 12 && header_size != 40 && header_size != 52 && header_size != 56 && header_size != 64 &&
      header_size != 108 && header_size != 124)
    return Status::Error("BMP: unsupported header size " + std::to_string(header_size) +
                         ", expected 12, 40, 52, 56, 64, 108 or 124");
  if (d.size() < 14 + static_cast<size_t>(header_size)) return truncated("bitmap header");
  const uint8_t* hd = &d[18];  // header_data: the header after its size field
  uint64_t width = 0, height = 0;
  int bits = 0;
  uint32_t compression = 0, colors = 0, palette_padding = 4;
  bool top_down = false;
  uint32_t masks[4] = {0, 0, 0, 0};
  size_t pos = 14 + header_size;  // the file position after the header (PIL's fp.tell())
  if (header_size == 12) {
    width = le16(hd);
    height = le16(hd + 2);
    bits = le16(hd + 6);
    palette_padding = 3;
  } else {
    top_down = hd[7] == 0xFF;
    width = le32(hd);
    height = top_down ? (uint64_t{1} << 32) - le32(hd + 4) : le32(hd + 4);
    bits = le16(hd + 10);
    compression = le32(hd + 12);
    colors = le32(hd + 28);
    if (compression == 3) {
      if (header_size - 4 >= 48) {
        for (int i = 0; i < (header_size - 4 >= 52 ? 4 : 3); ++i) masks[i] = le32(hd + 36 + 4 * i);
      } else {
        if (d.size() < pos + 12) return truncated("bitfield masks");
        for (int i = 0; i < 3; ++i) masks[i] = le32(&d[pos + 4 * i]);
        pos += 12;
      }
    }
  }
  if (bits != 1 && bits != 4 && bits != 8 && bits != 16 && bits != 24 && bits != 32)
    return Status::Error("BMP: unsupported pixel depth " + std::to_string(bits) + ", expected 1, 4, 8, 16, 24 or 32");
  if (!colors) colors = bits < 32 ? (1u << bits) : 0;
  if (offset == 14 + header_size && bits <= 8) offset += uint64_t{palette_padding} * colors;
  QVL_RETURN_IF_ERROR(check_size("BMP", width, height, limits).status());

  // Where each of R, G, B sits in a 32-bit (or 24-bit) pixel, and how 16-bit pixels unpack.
  int byte_r = 2, byte_g = 1, byte_b = 0;
  bool rgb565 = false;
  const bool rle = compression == 1 || compression == 2;
  if (compression == 3) {
    auto byte_of = [](uint32_t mask) { return mask == 0xFF ? 0 : mask == 0xFF00 ? 1 : mask == 0xFF0000 ? 2 : 3; };
    const uint32_t r = masks[0], g = masks[1], b = masks[2], a = masks[3];
    bool ok = false;
    if (bits == 32) {
      const uint32_t kSupported[8][4] = {
          {0xFF0000, 0xFF00, 0xFF, 0x0},       {0xFF000000, 0xFF0000, 0xFF00, 0x0},
          {0xFF000000, 0xFF00, 0xFF, 0x0},     {0xFF000000, 0xFF0000, 0xFF00, 0xFF},
          {0xFF, 0xFF00, 0xFF0000, 0xFF000000}, {0xFF0000, 0xFF00, 0xFF, 0xFF000000},
          {0xFF000000, 0xFF00, 0xFF, 0xFF0000}, {0x0, 0x0, 0x0, 0x0}};
      for (const auto& m : kSupported) ok = ok || (m[0] == r && m[1] == g && m[2] == b && m[3] == a);
      if (ok && r != 0) {
        byte_r = byte_of(r);
        byte_g = byte_of(g);
        byte_b = byte_of(b);
      }
    } else if (bits == 24) {
      ok = r == 0xFF0000 && g == 0xFF00 && b == 0xFF;
    } else if (bits == 16) {
      rgb565 = r == 0xF800 && g == 0x7E0 && b == 0x1F;
      ok = rgb565 || (r == 0x7C00 && g == 0x3E0 && b == 0x1F);
    }
    if (!ok)
      return Status::Error("BMP: unsupported bitfields layout for " + std::to_string(bits) +
                           "-bit pixels (hint: re-save the image as 24-bit BMP or PNG)");
  } else if (rle && bits > 8) {
    return Status::Error("BMP: RLE compression with " + std::to_string(bits) +
                         "-bit pixels, expected 4- or 8-bit palette pixels");
  } else if (compression != 0 && !rle) {
    return Status::Error("BMP: unsupported compression " + std::to_string(compression) +
                         " (4 = JPEG, 5 = PNG), expected 0 (none), 1 (RLE8), 2 (RLE4) or 3 (bitfields)");
  }

  // Palette (1/4/8-bit). A palette that is the grey ramp (or black, white for two colours) makes PIL
  // ignore it and read the pixels as "L" (or "1") data.
  enum class Mode { kPalette, kGrey, kBilevel, kDirect } mode = Mode::kDirect;
  uint8_t palette[256][3] = {};
  if (bits <= 8) {
    if (colors == 0 || colors > 65536)
      return Status::Error("BMP: unsupported palette size " + std::to_string(colors) + ", expected 1 to 65536");
    const size_t pal_bytes = static_cast<size_t>(palette_padding) * colors;
    const size_t have = pos <= d.size() ? std::min(pal_bytes, d.size() - pos) : 0;
    bool grey = have == pal_bytes;
    for (uint32_t i = 0; i < colors; ++i) {
      const size_t o = pos + static_cast<size_t>(i) * palette_padding;
      const int want = colors == 2 ? (i == 0 ? 0 : 255) : static_cast<int>(i & 255);  // PIL: o8(i)
      if (o + 3 > pos + have) break;
      if (i < 256) {
        palette[i][0] = d[o + 2];
        palette[i][1] = d[o + 1];
        palette[i][2] = d[o];
      }
      grey = grey && d[o] == want && d[o + 1] == want && d[o + 2] == want;
    }
    pos += pal_bytes;
    mode = !grey ? Mode::kPalette : colors <= 2 ? Mode::kBilevel : Mode::kGrey;
    if (mode == Mode::kGrey && bits < 8 && !rle)
      return Status::Error("BMP: " + std::to_string(bits) + "-bit image with a grey-ramp palette, which PIL "
                           "cannot read either (codec configuration error)");
  }
  if (offset == 0) offset = pos;

  const int w = static_cast<int>(width), h = static_cast<int>(height);
  out.image = new_image(w, h);
  uint8_t* o = out.image.pixels.data();
  auto put_index = [&](size_t i, int v) {
    uint8_t* t = o + 3 * i;
    if (mode == Mode::kPalette) {
      t[0] = palette[v][0];
      t[1] = palette[v][1];
      t[2] = palette[v][2];
    } else if (mode == Mode::kBilevel) {
      t[0] = t[1] = t[2] = v ? 255 : 0;
    } else {
      t[0] = t[1] = t[2] = static_cast<uint8_t>(v);
    }
  };

  if (rle) {
    // BmpRleDecoder: decode to an index buffer in file row order, then flip.
    const bool rle4 = compression == 2;
    const size_t total = static_cast<size_t>(w) * h;
    std::vector<uint8_t> data;
    data.reserve(total);
    size_t p = offset <= d.size() ? static_cast<size_t>(offset) : d.size();
    size_t x = 0;
    while (data.size() < total) {
      if (d.size() - p < 2) break;
      const int count = d[p], byte = d[p + 1];
      p += 2;
      if (count) {  // encoded mode
        size_t np = count;
        if (x + np > static_cast<size_t>(w)) np = x < static_cast<size_t>(w) ? w - x : 0;
        for (size_t i = 0; i < np; ++i)
          data.push_back(static_cast<uint8_t>(rle4 ? (i % 2 == 0 ? byte >> 4 : byte & 0x0F) : byte));
        x += np;
      } else if (byte == 0) {  // end of line
        while (data.size() % w != 0) data.push_back(0);
        x = 0;
      } else if (byte == 1) {  // end of bitmap
        break;
      } else if (byte == 2) {  // delta
        if (d.size() - p < 2) break;
        const size_t right = d[p], up = d[p + 1];
        p += 2;
        const size_t n = std::min(total - data.size(), right + up * w);
        data.insert(data.end(), n, 0);
        x = data.size() % w;
      } else {  // absolute mode
        const size_t n = std::min(total - data.size(), static_cast<size_t>(byte));
        const size_t nbytes = rle4 ? (n + 1) / 2 : n;
        const size_t got = std::min(nbytes, d.size() - p);
        if (rle4) {
          for (size_t i = 0; i < got; ++i) {
            data.push_back(d[p + i] >> 4);
            if (i * 2 + 1 < n) data.push_back(d[p + i] & 0x0F);
          }
        } else {
          data.insert(data.end(), d.begin() + p, d.begin() + p + got);
        }
        p += got;
        if (got < nbytes || data.size() == total) break;
        x += byte;
        if (p % 2 != 0) ++p;  // word alignment, measured from the start of the file
        if (p > d.size()) p = d.size();
      }
    }
    if (data.size() < total)
      return Status::Error("BMP: truncated or corrupt RLE data: " + std::to_string(data.size()) + " of " +
                           std::to_string(total) + " pixels decoded");
    for (int y = 0; y < h; ++y) {
      const int src_row = top_down ? y : h - 1 - y;
      for (int xx = 0; xx < w; ++xx) put_index(static_cast<size_t>(y) * w + xx, data[static_cast<size_t>(src_row) * w + xx]);
    }
    return out;
  }

  // PIL's raw decoder needs every row's stride but only the pixel bytes of the last row in the file.
  const uint64_t stride = ((width * bits + 31) >> 3) & ~uint64_t{3};
  const uint64_t last_row = mode == Mode::kBilevel ? (width + 7) / 8 : (width * bits + 7) / 8;
  const uint64_t need = stride * (height - 1) + last_row;
  if (offset > d.size() || d.size() - offset < need)
    return Status::Error("BMP: truncated data: the pixel data needs " + std::to_string(need) + " bytes from byte " +
                         std::to_string(offset) + ", the file has " +
                         std::to_string(offset < d.size() ? d.size() - offset : 0));
  for (int y = 0; y < h; ++y) {
    const uint8_t* row = &d[offset + stride * static_cast<uint64_t>(top_down ? y : h - 1 - y)];
    const size_t base = static_cast<size_t>(y) * w;
    for (int x = 0; x < w; ++x) {
      uint8_t* t = o + 3 * (base + x);
      if (mode == Mode::kBilevel) {  // rawmode "1", whatever the pixel depth
        t[0] = t[1] = t[2] = (row[x >> 3] >> (7 - (x & 7))) & 1 ? 255 : 0;
      } else if (bits <= 8) {
        const int v = bits == 8 ? row[x] : bits == 4 ? (row[x >> 1] >> ((x & 1) ? 0 : 4)) & 0x0F
                                                     : (row[x >> 3] >> (7 - (x & 7))) & 1;
        put_index(base + x, v);
      } else if (bits == 16) {  // "BGR;15" / "BGR;16": v * 255 / max
        const int v = le16(row + 2 * x);
        if (rgb565) {
          t[0] = static_cast<uint8_t>(((v >> 11) & 31) * 255 / 31);
          t[1] = static_cast<uint8_t>(((v >> 5) & 63) * 255 / 63);
        } else {
          t[0] = static_cast<uint8_t>(((v >> 10) & 31) * 255 / 31);
          t[1] = static_cast<uint8_t>(((v >> 5) & 31) * 255 / 31);
        }
        t[2] = static_cast<uint8_t>((v & 31) * 255 / 31);
      } else {
        const uint8_t* p = row + static_cast<size_t>(x) * (bits / 8);
        t[0] = p[byte_r];
        t[1] = p[byte_g];
        t[2] = p[byte_b];
      }
    }
  }
  return out;
}

// ----------------------------------------------------------------------------------------------------
// ICO (Pillow's IcoImagePlugin): a directory of 16-byte entries; the entry Pillow opens is the largest
// (width x height, 0 meaning 256), the lowest colour depth among equals (bpp, else ceil(log2(colours)), else
// 256; ties keep the file's order); its data is a PNG file or a BMP without the file header whose height
// counts the colour bitmap and the AND mask: the colour bitmap is the image. The AND mask and a 32-bit
// entry's alpha only set transparency, which convert("RGB") drops.
Result<Decoded> decode_ico(std::span<const uint8_t> d, const ImageDecodeLimits& limits) {
  if (d.size() < 6) return Status::Error("ICO: truncated data: the file ends inside the header");
  const size_t n = le16(&d[4]);
  if (n == 0) return Status::Error("ICO: the directory lists no images");
  if (d.size() < 6 + 16 * n) return Status::Error("ICO: truncated data: the file ends inside the directory");
  struct Entry {
    uint64_t square;
    int depth, bpp;
    uint32_t size, offset;
  };
  std::vector<Entry> entries;
  for (size_t i = 0; i < n; ++i) {
    const uint8_t* e = &d[6 + 16 * i];
    const uint64_t w = e[0] ? e[0] : 256, h = e[1] ? e[1] : 256;
    int depth = le16(e + 6);
    if (!depth && e[2] > 1) depth = static_cast<int>(std::ceil(std::log2(static_cast<double>(e[2]))));
    if (!depth) depth = 256;  // Python: bpp or (colours and ceil(log2(colours))) or 256
    entries.push_back(Entry{w * h, depth, le16(e + 6), le32(e + 8), le32(e + 12)});
  }
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.depth < b.depth; });
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.square > b.square; });
  const Entry& best = entries[0];
  if (best.offset >= d.size()) return Status::Error("ICO: the image's data lies beyond the end of the file");
  const std::span<const uint8_t> sub = d.subspan(best.offset);
  if (sub.size() >= 8 && std::memcmp(sub.data(), "\x89PNG\r\n\x1A\n", 8) == 0) {
    auto png = decode_png(sub, limits);
    if (!png.ok()) return png.status().with_context("ICO's PNG image");
    Decoded out;
    out.image = std::move(png).value().image;  // an icon's PNG metadata (orientation) is not the icon's
    return out;
  }
  // A BMP without its 14-byte file header: give it one, with the colour bitmap's height, and the pixel data
  // where Pillow's DIB reader starts it (right after the header, the bitfield masks and the palette; the
  // palette decode_bmp adds itself).
  if (sub.size() < 16) return Status::Error("ICO: truncated data: the file ends inside the bitmap header");
  const uint32_t header_size = le32(sub.data());
  std::vector<uint8_t> bmp(14 + sub.size());
  std::memcpy(bmp.data() + 14, sub.data(), sub.size());
  bmp[0] = 'B';
  bmp[1] = 'M';
  uint64_t pixels_at = 14 + uint64_t{header_size};
  if (header_size == 12) {
    const uint16_t h2 = le16(&bmp[14 + 6]) / 2;
    bmp[14 + 6] = static_cast<uint8_t>(h2);
    bmp[14 + 7] = static_cast<uint8_t>(h2 >> 8);
  } else if (sub.size() >= 40) {
    const int32_t h = static_cast<int32_t>(le32(&bmp[14 + 8]));
    const uint32_t h2 = static_cast<uint32_t>(h / 2);  // Python int(h / 2): towards zero
    for (int k = 0; k < 4; ++k) bmp[14 + 8 + k] = static_cast<uint8_t>(h2 >> (8 * k));
    if (le32(&bmp[14 + 16]) == 3 && header_size == 40) pixels_at += 12;  // bitfield masks follow the header
  }
  if (pixels_at > 0xFFFFFFFFu) return Status::Error("ICO: bitmap header size out of range");
  for (int k = 0; k < 4; ++k) bmp[10 + k] = static_cast<uint8_t>(pixels_at >> (8 * k));
  auto r = decode_bmp(bmp, limits);
  if (!r.ok()) return r.status().with_context("ICO's bitmap");
  Decoded out;
  out.image = std::move(r).value().image;
  // Pillow reads the transparency too, and refuses the icon when it is cut short: a 32-bit entry's alpha
  // lies in its pixels (decode_bmp has checked those), the others' AND mask ends where the directory says
  // the entry ends.
  if (best.bpp != 32) {
    // Pillow reads mask_bytes from end - mask_bytes; its rows are `stride` apart, the last one only
    // ceil(w / 8) bytes long.
    const uint64_t w = static_cast<uint64_t>(out.image.width), h = static_cast<uint64_t>(out.image.height);
    const uint64_t stride = (w + 31) / 32 * 4, mask_bytes = stride * h;
    const uint64_t end = uint64_t{best.offset} + best.size;
    const uint64_t needed = stride * (h - 1) + (w + 7) / 8;
    if (end < mask_bytes || d.size() < end - mask_bytes + needed)
      return Status::Error("ICO: truncated data: the file ends inside the icon's transparency mask");
  }
  return out;
}

}  // namespace

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
