// JPEG (libjpeg-turbo), as io/image.cpp describes. libjpeg reports errors by longjmp; the functions that
// call into it hold only plain data, and every C++ object they touch lives in the caller's frame.
#include "io/image_codec.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include <csetjmp>

#include <jerror.h>
#include <jpeglib.h>

namespace qvl {
namespace codec {

namespace {

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

}  // namespace

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

}  // namespace codec
}  // namespace qvl

namespace qvl {

namespace {

struct JpegWriteState {
  jpeg_compress_struct cinfo;
  jpeg_error_mgr err;
  jmp_buf jmp;
};

void jpeg_write_error(j_common_ptr c) { std::longjmp(static_cast<JpegWriteState*>(c->client_data)->jmp, 1); }

}  // namespace

Result<std::vector<uint8_t>> encode_jpeg(const ImageRGB& image, int quality) {
  if (image.width < 1 || image.height < 1 ||
      image.pixels.size() != static_cast<size_t>(image.width) * static_cast<size_t>(image.height) * 3)
    return Status::Error("encode_jpeg: expected " + std::to_string(image.width) + " x " + std::to_string(image.height) +
                         " RGB pixels");
  // Written into libjpeg's own buffer (jpeg_mem_dest), copied out at the end: nothing of ours is live across
  // the longjmp an error makes.
  JpegWriteState s;
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  s.cinfo.err = jpeg_std_error(&s.err);
  s.err.error_exit = jpeg_write_error;
  s.cinfo.client_data = &s;
  if (setjmp(s.jmp)) {
    jpeg_destroy_compress(&s.cinfo);
    std::free(buf);
    return Status::Error("encode_jpeg: libjpeg failed");
  }
  jpeg_create_compress(&s.cinfo);
  jpeg_mem_dest(&s.cinfo, &buf, &size);
  s.cinfo.image_width = static_cast<JDIMENSION>(image.width);
  s.cinfo.image_height = static_cast<JDIMENSION>(image.height);
  s.cinfo.input_components = 3;
  s.cinfo.in_color_space = JCS_RGB;
  jpeg_set_defaults(&s.cinfo);
  jpeg_set_quality(&s.cinfo, std::clamp(quality, 1, 100), TRUE);
  jpeg_start_compress(&s.cinfo, TRUE);
  while (s.cinfo.next_scanline < s.cinfo.image_height) {
    JSAMPROW row = const_cast<JSAMPROW>(image.pixels.data() + static_cast<size_t>(s.cinfo.next_scanline) * image.width * 3);
    jpeg_write_scanlines(&s.cinfo, &row, 1);
  }
  jpeg_finish_compress(&s.cinfo);
  std::vector<uint8_t> out(buf, buf + size);
  jpeg_destroy_compress(&s.cinfo);
  std::free(buf);
  return out;
}

}  // namespace qvl
