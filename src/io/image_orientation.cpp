// EXIF / XMP orientation, as PIL.Image.getexif and ImageOps.exif_transpose read it, and PIL's
// Image.transpose to apply it (io/image_codec.h).
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

namespace {

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

}  // namespace

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

}  // namespace codec
}  // namespace qvl
