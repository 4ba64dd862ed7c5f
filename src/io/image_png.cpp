// PNG (libpng for pixels and text chunks; a chunk walk for the checks and chunks PIL reads itself), as
// io/image.cpp describes.
#include "io/image_codec.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include <png.h>

namespace qvl {
namespace codec {

namespace {

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

}  // namespace

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

}  // namespace codec
}  // namespace qvl
