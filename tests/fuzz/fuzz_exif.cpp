// Fuzz target: the orientation metadata of images (EXIF IFD0, XMP, ImageMagick's hex "Raw profile"). The
// first byte picks a container, the rest becomes the metadata payload inside a small valid image of that
// format, so every input reaches the metadata parsers instead of failing in the codec first.
#include <array>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "io/image.h"

namespace {

using Bytes = std::vector<uint8_t>;

// The small non-square images the payloads go into (their own metadata, if any, is kept: a later or
// earlier copy must not confuse the reader either).
struct Bases {
  Bytes jpeg = qvl::fuzz::read_repo_file(QVL_TEST_DATA_DIR "/images/jpeg_444_33x17.jpg");
  Bytes png = qvl::fuzz::read_repo_file(QVL_TEST_DATA_DIR "/images/png_gray1bit_19x7.png");
  Bytes webp = qvl::fuzz::read_repo_file(QVL_TEST_DATA_DIR "/images/webp_exif_orient6_40x20.webp");
};
const Bases& bases() {
  static const Bases b;
  return b;
}

void put_be32(Bytes& out, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<uint8_t>(v >> s));
}
void put_le32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

uint32_t crc32(const uint8_t* p, size_t n, uint32_t crc = 0xFFFFFFFFu) {
  for (size_t i = 0; i < n; ++i) {
    crc ^= p[i];
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
  }
  return crc;
}

// A JPEG with an APP1 segment (header + payload, cut to the 65533 bytes a segment holds) after SOI.
Bytes jpeg_with_app1(const std::string& header, const uint8_t* p, size_t n) {
  const Bytes& base = bases().jpeg;
  n = std::min(n, size_t{65533} - header.size());
  const size_t len = 2 + header.size() + n;
  Bytes out(base.begin(), base.begin() + 2);  // SOI
  out.insert(out.end(), {0xFF, 0xE1, static_cast<uint8_t>(len >> 8), static_cast<uint8_t>(len)});
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), p, p + n);
  out.insert(out.end(), base.begin() + 2, base.end());
  return out;
}

// A PNG with one more chunk (correct CRC) right after IHDR.
Bytes png_with_chunk(const char type[4], const std::string& prefix, const uint8_t* p, size_t n) {
  const Bytes& base = bases().png;
  constexpr size_t kAfterIhdr = 8 + 25;
  Bytes body(prefix.begin(), prefix.end());
  body.insert(body.end(), p, p + n);
  Bytes out(base.begin(), base.begin() + kAfterIhdr);
  put_be32(out, static_cast<uint32_t>(body.size()));
  const size_t type_at = out.size();
  out.insert(out.end(), type, type + 4);
  out.insert(out.end(), body.begin(), body.end());
  put_be32(out, ~crc32(body.data(), body.size(), crc32(&out[type_at], 4)));
  out.insert(out.end(), base.begin() + kAfterIhdr, base.end());
  return out;
}

// The extended WebP with its EXIF chunk replaced by a chunk of `type` holding the payload.
Bytes webp_with_chunk(const char type[4], const uint8_t* p, size_t n) {
  const Bytes& base = bases().webp;
  Bytes out(base.begin(), base.begin() + 12);  // RIFF size WEBP
  for (size_t pos = 12; pos + 8 <= base.size();) {
    const uint32_t len = base[pos + 4] | base[pos + 5] << 8 | base[pos + 6] << 16 | uint32_t{base[pos + 7]} << 24;
    const size_t end = std::min(base.size(), pos + 8 + len + (len & 1));
    if (std::memcmp(&base[pos], "EXIF", 4) != 0) out.insert(out.end(), base.begin() + pos, base.begin() + end);
    pos = end;
  }
  out.insert(out.end(), type, type + 4);
  out.resize(out.size() + 4);
  put_le32(&out[out.size() - 4], static_cast<uint32_t>(n));
  out.insert(out.end(), p, p + n);
  if (n & 1) out.push_back(0);
  put_le32(&out[4], static_cast<uint32_t>(out.size() - 8));
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t mode = data[0] % 8;
  const uint8_t* p = data + 1;
  const size_t n = size - 1;
  Bytes file;
  switch (mode) {
    case 0: file = jpeg_with_app1(std::string("Exif\0\0", 6), p, n); break;
    case 1: file = jpeg_with_app1(std::string("http://ns.adobe.com/xap/1.0/\0", 29), p, n); break;
    case 2: file = png_with_chunk("eXIf", "", p, n); break;
    case 3: file = png_with_chunk("tEXt", std::string("exif\0", 5), p, n); break;
    case 4: file = png_with_chunk("tEXt", std::string("Raw profile type exif\0", 22), p, n); break;
    case 5: file = png_with_chunk("iTXt", std::string("XML:com.adobe.xmp\0\0\0\0\0", 22), p, n); break;
    case 6: file = webp_with_chunk("EXIF", p, n); break;
    default: file = webp_with_chunk("XMP ", p, n); break;
  }
  auto img = qvl::decode_image(file);
  if (img.ok()) {
    // Every orientation keeps the pixel count; 5..8 swap width and height.
    const int64_t pixels = mode <= 1 ? 33 * 17 : mode <= 5 ? 19 * 7 : 40 * 20;
    QVL_CHECK(int64_t{img->width} * img->height == pixels);
    QVL_CHECK(img->pixels.size() == static_cast<size_t>(img->width) * img->height * 3);
  }
  return 0;
}
