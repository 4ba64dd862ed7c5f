// BMP: a port of PIL's BmpImagePlugin (BITMAPCOREHEADER and BITMAPINFOHEADER..V5; 1/4/8-bit palette,
// 16/24/32-bit; raw, bitfields, RLE8, RLE4); and ICO, whose entries are BMPs or PNGs.
#include "io/image_codec.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace qvl {
namespace codec {

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

}  // namespace codec
}  // namespace qvl
