// TIFF through libtiff, matching Pillow 13's TiffImagePlugin + convert("RGB"): libtiff decompresses the
// strips or tiles (every codec Debian's libtiff has, predictors and bit order included) and this file
// unpacks the samples as Pillow's mode for the page's (photometric, sample format, bits, extra samples)
// does, then converts to RGB with Pillow's formulas. Combinations Pillow cannot open or convert are refused.
#include "io/tiff.h"

#include <tiffio.h>

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

namespace qvl {

namespace {

struct Source {
  std::span<const uint8_t> data;
  uint64_t pos = 0;
  std::string error;  // libtiff's first error message
  std::string lost_tag;  // a tag libtiff ignored because its data could not be read (past the end)
};

tmsize_t read_proc(thandle_t h, void* buf, tmsize_t size) {
  auto* s = static_cast<Source*>(h);
  if (size < 0 || s->pos >= s->data.size()) return 0;
  const uint64_t n = std::min<uint64_t>(static_cast<uint64_t>(size), s->data.size() - s->pos);
  std::memcpy(buf, s->data.data() + s->pos, n);
  s->pos += n;
  return static_cast<tmsize_t>(n);
}
tmsize_t write_proc(thandle_t, void*, tmsize_t) { return -1; }
toff_t seek_proc(thandle_t h, toff_t off, int whence) {
  auto* s = static_cast<Source*>(h);
  uint64_t base = whence == SEEK_SET ? 0 : whence == SEEK_CUR ? s->pos : s->data.size();
  if (off > UINT64_MAX - base) return static_cast<toff_t>(-1);
  s->pos = base + off;  // past the end is allowed; reads there return 0 bytes
  return s->pos;
}
int close_proc(thandle_t) { return 0; }
toff_t size_proc(thandle_t h) { return static_cast<Source*>(h)->data.size(); }
int map_proc(thandle_t, void**, toff_t*) { return 0; }
void unmap_proc(thandle_t, void*, toff_t) {}

int on_error(TIFF*, void* user, const char* module, const char* fmt, va_list ap) {
  auto* s = static_cast<Source*>(user);
  if (s->error.empty()) {
    char buf[512];
    std::vsnprintf(buf, sizeof buf, fmt, ap);
    s->error = std::string(module ? module : "libtiff") + ": " + buf;
  }
  return 1;  // handled: nothing goes to stderr
}
int on_warning(TIFF*, void* user, const char*, const char* fmt, va_list ap) {
  auto* s = static_cast<Source*>(user);
  char buf[512];
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  const std::string msg = buf;
  // Only the tags the pixels depend on: Pillow skips others that lie past the end (Software, XMP, ICC) and
  // opens the image.
  static const char* const kNeeded[] = {"\"ColorMap\"", "\"StripOffsets\"", "\"StripByteCounts\"", "\"TileOffsets\"",
                                        "\"TileByteCounts\"", "\"BitsPerSample\"", "\"SampleFormat\"",
                                        "\"ExtraSamples\"", "\"JPEGTables\""};
  if (s->lost_tag.empty() && msg.find("IO error during reading of") != std::string::npos)
    for (const char* tag : kNeeded)
      if (msg.find(tag) != std::string::npos) s->lost_tag = msg;
  return 1;  // nothing goes to stderr
}

struct TiffCloser {
  void operator()(TIFF* t) const { TIFFClose(t); }
};
struct OptionsFree {
  void operator()(TIFFOpenOptions* o) const { TIFFOpenOptionsFree(o); }
};

// Pillow's modes for the layouts it opens (TiffImagePlugin.OPEN_INFO), as far as convert("RGB") goes.
enum class Mode {
  kBilevel,  // "1": 0 black, 1 white (after min-is-white inversion)
  kGrey,     // "L" from 2, 4 or 8 bits (scaled to 0..255)
  kGrey16,   // "I;16": convert("RGB") clips at 255
  kRgb,      // "RGB", "RGBX", "RGBA" (alpha dropped); 16-bit: the high byte
  kRgbPremultiplied,  // "RGBa": unpremultiplied as Pillow's unpacker does
  kPalette,  // "P", "PA": the colour map's high bytes
  kCmyk,     // "CMYK"
};

std::string fail(const std::string& what) { return "TIFF: " + what; }

}  // namespace

bool is_tiff(std::span<const uint8_t> b) {
  if (b.size() < 4) return false;
  return (b[0] == 'I' && b[1] == 'I' && (b[2] == 42 || b[2] == 43) && b[3] == 0) ||
         (b[0] == 'M' && b[1] == 'M' && b[2] == 0 && (b[3] == 42 || b[3] == 43));
}

// The most sample bytes one band of rows (a strip, or a row of tiles, all planes) may hold unless the file
// or the RGB image is larger; the limit libtiff is given for its own allocations too.
constexpr uint64_t kMaxBandBytes = uint64_t{256} << 20;

Result<TiffImage> decode_tiff(std::span<const uint8_t> bytes, const ImageDecodeLimits& limits,
                              const std::function<Result<int64_t>(uint64_t, uint64_t)>& check_size) {
  Source src{bytes, 0, {}};
  std::unique_ptr<TIFFOpenOptions, OptionsFree> opts(TIFFOpenOptionsAlloc());
  // No single allocation inside libtiff (a strip, a tile, a tag array) may exceed this: a header that
  // claims a 4 GB strip is refused instead of allocated.
  TIFFOpenOptionsSetMaxSingleMemAlloc(opts.get(), static_cast<tmsize_t>(kMaxBandBytes));
  TIFFOpenOptionsSetErrorHandlerExtR(opts.get(), on_error, &src);
  TIFFOpenOptionsSetWarningHandlerExtR(opts.get(), on_warning, &src);
  std::unique_ptr<TIFF, TiffCloser> tif(TIFFClientOpenExt("image", "rm", &src, read_proc, write_proc, seek_proc,
                                                          close_proc, size_proc, map_proc, unmap_proc, opts.get()));
  auto lib_error = [&](const char* what) {
    return Status::Error(fail(std::string(what) + (src.error.empty() ? "" : " (" + src.error + ")")));
  };
  if (!tif) return lib_error("cannot read the header");
  if (limits.page < 0 || limits.page > 9999)
    return Status::Error(fail("page " + std::to_string(limits.page) + " requested, expected 0..9999"));
  if (limits.page > 0) src.lost_tag.clear();  // page 0's lost tags do not concern another page
  if (limits.page > 0 && !TIFFSetDirectory(tif.get(), static_cast<tdir_t>(limits.page))) {
    return Status::Error(fail("page " + std::to_string(limits.page) + " requested, the file has " +
                              std::to_string(TIFFNumberOfDirectories(tif.get())) + " (pages count from 0)"));
  }
  TIFF* t = tif.get();
  // Pillow skips a tag whose data lies past the end of the file and then cannot open the image (a palette
  // without its colour map); libtiff would carry on with a guess (grey for that palette). Refused.
  if (!src.lost_tag.empty()) return Status::Error(fail("the file is truncated: " + src.lost_tag));

  uint32_t w = 0, h = 0;
  uint16_t bits = 1, spp = 1, photo = 0, planar = PLANARCONFIG_CONTIG, format = SAMPLEFORMAT_UINT, comp = 1;
  if (!TIFFGetField(t, TIFFTAG_IMAGEWIDTH, &w) || !TIFFGetField(t, TIFFTAG_IMAGELENGTH, &h))
    return lib_error("no ImageWidth/ImageLength");
  TIFFGetFieldDefaulted(t, TIFFTAG_BITSPERSAMPLE, &bits);
  TIFFGetFieldDefaulted(t, TIFFTAG_SAMPLESPERPIXEL, &spp);
  TIFFGetFieldDefaulted(t, TIFFTAG_PLANARCONFIG, &planar);
  TIFFGetFieldDefaulted(t, TIFFTAG_SAMPLEFORMAT, &format);
  TIFFGetFieldDefaulted(t, TIFFTAG_COMPRESSION, &comp);
  TIFFGetField(t, TIFFTAG_PHOTOMETRIC, &photo);
  uint16_t n_extra = 0;
  uint16_t* extra_ptr = nullptr;
  TIFFGetField(t, TIFFTAG_EXTRASAMPLES, &n_extra, &extra_ptr);
  std::vector<uint16_t> extra(extra_ptr, extra_ptr + (extra_ptr ? n_extra : 0));

  TiffImage out;
  uint16_t orientation = 0;
  if (TIFFGetField(t, TIFFTAG_ORIENTATION, &orientation)) out.orientation = orientation;
  uint32_t xmp_len = 0;
  void* xmp = nullptr;
  if (TIFFGetField(t, TIFFTAG_XMLPACKET, &xmp_len, &xmp) && xmp) {
    out.has_xmp = true;
    out.xmp.assign(static_cast<const char*>(xmp), xmp_len);
  }

  // The layout → Pillow's mode, as TiffImagePlugin.OPEN_INFO lists them.
  const std::string layout = "photometric " + std::to_string(photo) + ", " + std::to_string(spp) +
                             " sample(s) of " + std::to_string(bits) + " bits, sample format " +
                             std::to_string(format) + ", " + std::to_string(extra.size()) + " extra sample(s)";
  auto unsupported = [&]() {
    return Status::Error(fail("unsupported pixel layout (" + layout + "); the reference cannot open it either"));
  };
  // Extra samples beyond the colour ones: the first says what it is (0 unspecified, 1 premultiplied
  // alpha, 2 alpha); Pillow opens at most two more unspecified ones.
  auto extras_are = [&](size_t colour, std::initializer_list<int> first_allowed) {
    if (spp < colour || spp - colour != extra.size()) return spp == colour + 1 && extra.empty() && colour == 3;
    for (size_t i = 1; i < extra.size(); ++i)
      if (extra[i] != 0) return false;
    if (extra.empty()) return true;
    return std::find(first_allowed.begin(), first_allowed.end(), extra[0]) != first_allowed.end();
  };
  Mode mode;
  bool invert = false;
  if (format == SAMPLEFORMAT_IEEEFP || format == SAMPLEFORMAT_VOID || format > SAMPLEFORMAT_IEEEFP) return unsupported();
  if (format == SAMPLEFORMAT_INT && !(photo == PHOTOMETRIC_MINISBLACK && spp == 1 && bits == 8)) return unsupported();
  switch (photo) {
    case PHOTOMETRIC_MINISWHITE:
    case PHOTOMETRIC_MINISBLACK:
      invert = photo == PHOTOMETRIC_MINISWHITE;
      if (spp == 1 && bits == 1) {
        mode = Mode::kBilevel;
      } else if (spp == 1 && (bits == 2 || bits == 4 || bits == 8)) {
        mode = Mode::kGrey;
      } else if (spp == 1 && bits == 16) {
        mode = Mode::kGrey16;
        invert = false;  // Pillow reads min-is-white 16-bit as I;16 unchanged
      } else if (photo == PHOTOMETRIC_MINISBLACK && spp == 2 && bits == 8 && extra.size() == 1 &&
                 (extra[0] == 0 || extra[0] == 2)) {
        mode = Mode::kGrey;  // "LX" / "LA": the second sample is dropped by convert("RGB")
      } else if (photo == PHOTOMETRIC_MINISBLACK && spp == 2 && bits == 8 && extra.size() == 1 && extra[0] == 1) {
        return Status::Error(fail("premultiplied grey + alpha (Pillow's mode La) cannot be converted to RGB "
                                  "by the reference"));
      } else {
        return unsupported();
      }
      break;
    case PHOTOMETRIC_RGB:
      if ((bits != 8 && bits != 16) || spp < 3 || spp > 6 || !extras_are(3, {0, 1, 2, 999})) return unsupported();
      mode = !extra.empty() && extra[0] == 1 ? Mode::kRgbPremultiplied : Mode::kRgb;
      if (bits == 16 && (spp > 4 || mode == Mode::kRgbPremultiplied)) return unsupported();
      break;
    case PHOTOMETRIC_PALETTE:
      if (!((spp == 1 && (bits == 1 || bits == 2 || bits == 4 || bits == 8)) ||
            (spp == 2 && bits == 8 && extra.size() == 1 && (extra[0] == 0 || extra[0] == 2))))
        return unsupported();
      mode = Mode::kPalette;
      break;
    case PHOTOMETRIC_SEPARATED:
      if ((bits != 8 && !(bits == 16 && spp == 4)) || spp < 4 || spp > 6 || spp - 4 != extra.size() ||
          std::any_of(extra.begin(), extra.end(), [](uint16_t e) { return e != 0; }))
        return unsupported();
      mode = Mode::kCmyk;
      break;
    case PHOTOMETRIC_YCBCR:
      // Pillow has libjpeg return RGB for JPEG-compressed YCbCr (JPEGCOLORMODE_RGB); libtiff does too.
      if (comp != COMPRESSION_JPEG || bits != 8 || spp != 3)
        return Status::Error(fail("YCbCr pixels are supported JPEG-compressed only (" + layout + ", compression " +
                                  std::to_string(comp) + ")"));
      if (!TIFFSetField(t, TIFFTAG_JPEGCOLORMODE, JPEGCOLORMODE_RGB)) return lib_error("cannot read JPEG as RGB");
      mode = Mode::kRgb;
      planar = PLANARCONFIG_CONTIG;
      break;
    default:
      return unsupported();
  }
  if (!TIFFIsCODECConfigured(comp))
    return Status::Error(fail("compression " + std::to_string(comp) + " is not supported by this libtiff"));

  QVL_ASSIGN_OR_RETURN(int64_t target, check_size(w, h));
  (void)target;

  // The colour map, checked before pixels are read: 3 * 2^bits 16-bit entries, reds then greens then blues.
  std::vector<uint8_t> palette;  // [3 * 2^bits] RGB triples: the entries' high bytes
  if (mode == Mode::kPalette) {
    uint16_t *r = nullptr, *g = nullptr, *b = nullptr;
    if (!TIFFGetField(t, TIFFTAG_COLORMAP, &r, &g, &b) || !r || !g || !b)
      return Status::Error(fail("a palette image without a ColorMap tag"));
    const size_t n = size_t{1} << std::min<int>(bits, 8);
    palette.resize(3 * n);
    for (size_t i = 0; i < n; ++i) {
      palette[3 * i] = static_cast<uint8_t>(r[i] >> 8);
      palette[3 * i + 1] = static_cast<uint8_t>(g[i] >> 8);
      palette[3 * i + 2] = static_cast<uint8_t>(b[i] >> 8);
    }
  }

  // The raw samples are read a band of rows at a time (a strip, or a row of tiles), one plane (contiguous)
  // or spp planes (separate), rows packed as stored, and each band is converted before the next is read:
  // the working memory is one band, not the page (a 100 MP page of 16-bit RGBA would be 800 MB beside its
  // 300 MB of RGB). A band may hold as many bytes as the RGB image, or kMaxBandBytes, or the file (an
  // uncompressed strip's bytes are in it), whichever is most; a larger one is refused: a few kilobytes of
  // compressed TIFF could otherwise ask for gigabytes in one strip. (With separate planes the planes' strips
  // are read in turn, band by band; only old-style JPEG, compression 6, decodes that order slowly.)
  const size_t planes = planar == PLANARCONFIG_SEPARATE ? spp : 1;
  const size_t per_pixel = planar == PLANARCONFIG_SEPARATE ? 1 : spp;
  const size_t stride = (static_cast<size_t>(w) * per_pixel * bits + 7) / 8;  // bytes per row of a plane
  const bool tiled = TIFFIsTiled(t);
  uint32_t tw = 0, th = 0, rps = h;
  if (tiled) {
    TIFFGetField(t, TIFFTAG_TILEWIDTH, &tw);
    TIFFGetField(t, TIFFTAG_TILELENGTH, &th);
    // A tile may overhang the image (256x256 tiles on a 50x40 image) but no more than the image or 1024
    // pixels, whichever is larger.
    auto fits = [](uint32_t tile, uint32_t side) { return tile <= std::max<uint32_t>(1024, (side + 15) / 16 * 16); };
    if (tw == 0 || th == 0 || !fits(tw, w) || !fits(th, h) || (static_cast<uint64_t>(tw) * per_pixel * bits) % 8 != 0)
      return Status::Error(fail("tile size " + std::to_string(tw) + "x" + std::to_string(th) + " is not usable"));
  } else {
    TIFFGetFieldDefaulted(t, TIFFTAG_ROWSPERSTRIP, &rps);
    rps = std::clamp<uint32_t>(rps, 1, h);
  }
  const uint32_t band_rows = tiled ? std::min(th, h) : rps;
  const uint64_t band_bytes = static_cast<uint64_t>(planes) * band_rows * stride;
  const uint64_t max_band = std::max({kMaxBandBytes, static_cast<uint64_t>(bytes.size()), uint64_t{3} * w * h});
  if (band_bytes > max_band)
    return Status::Error(fail(std::string(tiled ? "a row of tiles" : "a strip") + " of " + std::to_string(band_rows) +
                              " rows needs " + std::to_string(band_bytes) + " bytes of samples, expected at most " +
                              std::to_string(max_band) + " (write the image with smaller strips or tiles)"));
  std::vector<std::vector<uint8_t>> raw(planes, std::vector<uint8_t>(band_rows * stride));  // [planes][band_rows * stride]

  ImageRGB& img = out.image;
  img.width = static_cast<int>(w);
  img.height = static_cast<int>(h);
  img.pixels.resize(static_cast<size_t>(w) * h * 3);  // [h][w][3]
  // Converts rows y0 .. y1 - 1, whose samples are in the band (row y0 first), Pillow's way.
  auto convert_rows = [&](uint32_t y0, uint32_t y1) {
    auto sample = [&](size_t p_contig, uint32_t x, uint32_t y, size_t c) -> uint32_t {
      // Sample c of pixel (x, y): bits <= 8 as stored; 16-bit in host order (libtiff swaps).
      const size_t plane = planes > 1 ? c : 0;
      const size_t index = static_cast<size_t>(x) * (planes > 1 ? 1 : p_contig) + (planes > 1 ? 0 : c);
      const uint8_t* row = raw[plane].data() + static_cast<size_t>(y - y0) * stride;
      if (bits == 16) {
        uint16_t v;
        std::memcpy(&v, row + 2 * index, 2);
        return v;
      }
      if (bits == 8) return row[index];
      const size_t bit = index * bits;
      return (row[bit / 8] >> (8 - bits - bit % 8)) & ((1u << bits) - 1);
    };
    for (uint32_t y = y0; y < y1; ++y) {
      for (uint32_t x = 0; x < w; ++x) {
        uint8_t* o = img.pixels.data() + (static_cast<size_t>(y) * w + x) * 3;
        uint8_t r = 0, g = 0, b = 0;
        switch (mode) {
          case Mode::kBilevel: {
            uint32_t v = sample(spp, x, y, 0);
            r = g = b = (invert ? !v : v) ? 255 : 0;
            break;
          }
          case Mode::kGrey: {
            uint32_t v = sample(spp, x, y, 0);
            v = bits == 2 ? v * 85 : bits == 4 ? v * 17 : v;
            r = g = b = static_cast<uint8_t>(invert ? 255 - v : v);
            break;
          }
          case Mode::kGrey16:
            r = g = b = static_cast<uint8_t>(std::min<uint32_t>(sample(spp, x, y, 0), 255));
            break;
          case Mode::kRgb: {
            const int shift = bits == 16 ? 8 : 0;
            r = static_cast<uint8_t>(sample(spp, x, y, 0) >> shift);
            g = static_cast<uint8_t>(sample(spp, x, y, 1) >> shift);
            b = static_cast<uint8_t>(sample(spp, x, y, 2) >> shift);
            break;
          }
          case Mode::kRgbPremultiplied: {
            const uint32_t a = sample(spp, x, y, 3);
            auto un = [&](uint32_t v) { return static_cast<uint8_t>(a == 0 ? 0 : std::min<uint32_t>(255, v * 255 / a)); };
            r = un(sample(spp, x, y, 0));
            g = un(sample(spp, x, y, 1));
            b = un(sample(spp, x, y, 2));
            break;
          }
          case Mode::kPalette: {
            const size_t i = sample(spp, x, y, 0);
            r = palette[3 * i];
            g = palette[3 * i + 1];
            b = palette[3 * i + 2];
            break;
          }
          case Mode::kCmyk: {
            // Pillow's cmyk2rgb: nk = 255 - k; each channel nk - nk * c / 255 (rounded as MULDIV255).
            const int shift = bits == 16 ? 8 : 0;  // "CMYK;16": the high byte
            const uint32_t nk = 255 - (sample(spp, x, y, 3) >> shift);
            auto ch = [&](uint32_t c) {
              const uint32_t tmp = (c >> shift) * nk + 128;
              return static_cast<uint8_t>(nk - (((tmp >> 8) + tmp) >> 8));
            };
            r = ch(sample(spp, x, y, 0));
            g = ch(sample(spp, x, y, 1));
            b = ch(sample(spp, x, y, 2));
            break;
          }
        }
        o[0] = r;
        o[1] = g;
        o[2] = b;
      }
    }
  };

  if (tiled) {
    const tmsize_t tile_bytes = TIFFTileSize(t);
    const size_t tile_stride = static_cast<size_t>(tw) * per_pixel * bits / 8;
    if (tile_bytes <= 0 || static_cast<uint64_t>(tile_bytes) < static_cast<uint64_t>(tile_stride) * th)
      return lib_error("bad tile size");
    // A tile may overhang the image (a 256x256 tile on a 50x40 image), but not by more than the image could
    // need: a header claiming gigabyte tiles for a small image is refused before anything is allocated.
    const uint64_t cap = std::max<uint64_t>(uint64_t{4} * stride * h, uint64_t{16} << 20);
    if (static_cast<uint64_t>(tile_bytes) > cap)
      return Status::Error(fail("tiles of " + std::to_string(tw) + "x" + std::to_string(th) + " (" +
                                std::to_string(tile_bytes) + " bytes) for a " + std::to_string(w) + "x" +
                                std::to_string(h) + " image, expected at most " + std::to_string(cap) + " bytes"));
    std::vector<uint8_t> tile(static_cast<size_t>(tile_bytes));  // [th * tile_stride]
    for (uint32_t y0 = 0; y0 < h; y0 += th) {
      const uint32_t y1 = std::min(h, y0 + th);
      for (size_t p = 0; p < planes; ++p) {
        for (uint32_t x0 = 0; x0 < w; x0 += tw) {
          const ttile_t index = TIFFComputeTile(t, x0, y0, 0, static_cast<tsample_t>(p));
          if (TIFFReadEncodedTile(t, index, tile.data(), tile_bytes) < 0) return lib_error("cannot read a tile");
          const size_t x_byte = static_cast<size_t>(x0) * per_pixel * bits / 8;
          const size_t n = std::min(tile_stride, stride - x_byte);
          for (uint32_t y = y0; y < y1; ++y)
            std::memcpy(raw[p].data() + (y - y0) * stride + x_byte, tile.data() + (y - y0) * tile_stride, n);
        }
      }
      convert_rows(y0, y1);
    }
  } else {
    const uint32_t strips_per_plane = (h + rps - 1) / rps;
    for (uint32_t s = 0; s < strips_per_plane; ++s) {
      const uint32_t rows = std::min(rps, h - s * rps);
      const tmsize_t want = static_cast<tmsize_t>(rows * stride);
      for (size_t p = 0; p < planes; ++p) {
        const tstrip_t index = static_cast<tstrip_t>(p * strips_per_plane + s);
        if (index >= TIFFNumberOfStrips(t)) return lib_error("fewer strips than the image needs");
        const tmsize_t got = TIFFReadEncodedStrip(t, index, raw[p].data(), want);
        if (got < want) return lib_error("cannot read a strip");
      }
      convert_rows(s * rps, s * rps + rows);
    }
  }
  return out;
}

}  // namespace qvl
