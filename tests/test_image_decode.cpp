// Tests that image decoding matches PIL (open -> exif_transpose -> convert("RGB")) pixel for pixel,
// using tests/data/decode_golden.json written by tools/reference/make_images.py, and never crashes.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/image.h"
#include "util/digest.h"
#include "util/file.h"

namespace qvl {
namespace {

const std::string kDataDir = QVL_TEST_DATA_DIR;

nlohmann::json load_golden() {
  std::ifstream f(kDataDir + "/decode_golden.json");
  if (!f) return nlohmann::json();
  return nlohmann::json::parse(f, nullptr, /*allow_exceptions=*/false);
}

const nlohmann::json& golden() {
  static const nlohmann::json g = load_golden();
  return g;
}

std::vector<uint8_t> read_bytes(const std::string& rel) {
  auto r = read_file_bytes(kDataDir + "/" + rel);
  return r.ok() ? std::move(r).value() : std::vector<uint8_t>();
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(ImageDecode, GoldenFileIsReadable) {
  ASSERT_TRUE(golden().is_object()) << "missing or invalid " << kDataDir << "/decode_golden.json";
  EXPECT_GE(golden()["images"].size(), 36u);
  EXPECT_GE(golden()["bad"].size(), 7u);
}

// Every good image decodes to exactly the pixels PIL produces. That includes lossy WebP: Debian's
// libwebp 1.2.4 and the libwebp 1.6.0 in Pillow 13's wheel decode the test files identically, and
// JPEG: Debian's libjpeg-turbo 2.1.5 and the wheel's 3.2.0 agree bit for bit (ISLOW IDCT, fancy
// upsampling, progressive block smoothing). Checked once more widely: 30 random lossy WebPs (quality
// 5-99, methods 0-6, with and without alpha) and 30 random JPEGs (1..700 px sides, all subsamplings,
// progressive, optimized, grey) were all identical, so no tolerance is needed.
TEST(ImageDecode, MatchesPilPixelForPixel) {
  ASSERT_TRUE(golden().is_object());
  auto check = [](const nlohmann::json& g) {
    const std::string file = g["file"];
    SCOPED_TRACE(file);
    auto r = load_image_file(kDataDir + "/" + file);
    ASSERT_TRUE(r.ok()) << r.status().message();
    const ImageRGB& img = *r;
    ASSERT_EQ(img.width, g["width"].get<int>());
    ASSERT_EQ(img.height, g["height"].get<int>());
    ASSERT_EQ(img.pixels.size(), static_cast<size_t>(img.width) * img.height * 3);
    for (const auto& s : g["samples"]) {
      const int x = s["x"], y = s["y"];
      const uint8_t* p = &img.pixels[(static_cast<size_t>(y) * img.width + x) * 3];
      EXPECT_EQ(p[0], s["rgb"][0].get<int>()) << "R at " << x << "," << y;
      EXPECT_EQ(p[1], s["rgb"][1].get<int>()) << "G at " << x << "," << y;
      EXPECT_EQ(p[2], s["rgb"][2].get<int>()) << "B at " << x << "," << y;
    }
    EXPECT_EQ(qvl::sha256_hex(img.pixels.data(), img.pixels.size()), g["sha256"].get<std::string>());
  };
  for (const auto& g : golden()["images"]) check(g);
}

// Every page of a multi-page TIFF, chosen with ImageDecodeLimits::page, is what PIL gives after seek(k);
// a page past the last is refused, saying how many there are.
TEST(ImageDecode, EveryPageOfAMultiPageTiff) {
  ASSERT_TRUE(golden().is_object());
  size_t files = 0;
  for (const auto& g : golden()["images"]) {
    if (!g.contains("pages")) continue;
    ++files;
    const std::string file = g["file"];
    SCOPED_TRACE(file);
    const auto& pages = g["pages"];
    for (size_t k = 0; k < pages.size(); ++k) {
      ImageDecodeLimits limits;
      limits.page = static_cast<int>(k);
      auto r = load_image_file(kDataDir + "/" + file, limits);
      ASSERT_TRUE(r.ok()) << "page " << k << ": " << r.status().message();
      EXPECT_EQ(r->width, pages[k][0].get<int>()) << "page " << k;
      EXPECT_EQ(r->height, pages[k][1].get<int>()) << "page " << k;
      EXPECT_EQ(qvl::sha256_hex(r->pixels.data(), r->pixels.size()), pages[k][2].get<std::string>()) << "page " << k;
    }
    ImageDecodeLimits past;
    past.page = static_cast<int>(pages.size());
    auto r = load_image_file(kDataDir + "/" + file, past);
    ASSERT_FALSE(r.ok());
    EXPECT_TRUE(contains(r.status().message(), "the file has " + std::to_string(pages.size()))) << r.status().message();
  }
  EXPECT_GE(files, 1u);
  // Formats with one page refuse any other.
  ImageDecodeLimits one;
  one.page = 1;
  auto r = load_image_file(kDataDir + "/images/png_rgb8_1x1.png", one);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(contains(r.status().message(), "one page")) << r.status().message();
}

TEST(ImageDecode, DetectsFormatsFromMagicBytes) {
  auto detect = [](const std::string& rel) { return detect_image_format(read_bytes(rel)); };
  EXPECT_EQ(detect("images/jpeg_1x1.jpg"), ImageFormat::kJpeg);
  EXPECT_EQ(detect("images/png_rgb8_1x1.png"), ImageFormat::kPng);
  EXPECT_EQ(detect("images/webp_lossy_33x17.webp"), ImageFormat::kWebp);
  EXPECT_EQ(detect("images/gif_static_64x48.gif"), ImageFormat::kGif);
  EXPECT_EQ(detect("images/bmp24_33x17.bmp"), ImageFormat::kBmp);
  EXPECT_EQ(detect("images/ppm_p6_33x17.ppm"), ImageFormat::kNetpbm);
  EXPECT_EQ(detect("images/pbm_p1_plain_13x6.pbm"), ImageFormat::kNetpbm);
  EXPECT_EQ(detect("images/ico_png_16_32_48.ico"), ImageFormat::kIco);
  EXPECT_EQ(detect("images/tiff_rgb_raw_40x30.tif"), ImageFormat::kTiff);
  EXPECT_EQ(detect("images/tiff_rgb16_be_lzw_pred_33x17.tif"), ImageFormat::kTiff);
  EXPECT_EQ(detect("images/tiff_bigtiff_rgb_33x17.tif"), ImageFormat::kTiff);
  EXPECT_EQ(detect("images/bad/text.txt"), ImageFormat::kUnknown);
  EXPECT_EQ(detect("images/bad/empty.bin"), ImageFormat::kUnknown);
  EXPECT_STREQ(image_format_name(ImageFormat::kWebp), "WebP");
  EXPECT_STREQ(image_format_name(ImageFormat::kUnknown), "unknown");
}

// What each bad file's error must mention.
std::string expected_error_part(const std::string& name) {
  if (contains(name, "bomb")) return "over the limit";
  if (name == "tiff_grey_premultiplied_alpha.tif") return "La";
  if (name.rfind("tiff_", 0) == 0) return "TIFF";
  if (contains(name, "zero_size")) return "at least 1";
  if (name == "empty.bin" || name == "zero.gif") return "empty";
  if (name == "random.bin" || name == "text.txt") return "unknown image format";
  if (contains(name, "truncated") || contains(name, "header_only") || contains(name, "signature_only"))
    return "truncated";
  if (contains(name, "jpeg_compression")) return "compression";
  if (contains(name, "2bit")) return "pixel depth";
  if (contains(name, "no_frames")) return "no image";
  if (contains(name, "crc")) return "CRC";
  return "";
}

TEST(ImageDecode, RefusesBadFilesWithClearErrors) {
  ASSERT_TRUE(golden().is_object());
  for (const auto& b : golden()["bad"]) {
    const std::string file = b["file"];
    SCOPED_TRACE(file);
    EXPECT_TRUE(b["pil_refused"].get<bool>()) << "PIL accepted this file; it does not belong in bad/";
    auto r = load_image_file(kDataDir + "/" + file);
    ASSERT_FALSE(r.ok());
    const std::string& msg = r.status().message();
    EXPECT_TRUE(contains(msg, file.substr(file.rfind('/') + 1))) << "error should name the file: " << msg;
    const std::string part = expected_error_part(file.substr(file.rfind('/') + 1));
    if (!part.empty()) {
      EXPECT_TRUE(contains(msg, part)) << "expected '" << part << "' in: " << msg;
    }
  }
}

TEST(ImageDecode, RefusesEmptyInputAndMissingFiles) {
  auto r = decode_image(std::span<const uint8_t>());
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(contains(r.status().message(), "empty"));
  auto m = load_image_file(kDataDir + "/images/no_such_file.png");
  ASSERT_FALSE(m.ok());
  EXPECT_TRUE(contains(m.status().message(), "no_such_file.png"));
}

// The limit is applied to the header's size, before pixels are decoded: every format refuses at
// max_pixels = w*h - 1 and accepts at w*h; the bomb PNG (100000 x 100000 claimed, ~1 KB of data)
// is refused for its size, not for its missing data.
TEST(ImageDecode, PixelLimitRefusesBeforeDecoding) {
  const char* files[] = {"images/jpeg_444_33x17.jpg", "images/png_rgba8_33x17.png", "images/webp_lossy_33x17.webp",
                         "images/gif_static_64x48.gif", "images/bmp24_33x17.bmp", "images/bmp_rle8_23x10.bmp",
                         "images/gif_frame_beyond_screen_20x10.gif"};
  for (const char* f : files) {
    SCOPED_TRACE(f);
    const std::vector<uint8_t> bytes = read_bytes(f);
    auto full = decode_image(bytes);
    ASSERT_TRUE(full.ok()) << full.status().message();
    const int64_t n = int64_t{full->width} * full->height;
    ImageDecodeLimits tight;
    tight.max_pixels = n - 1;
    auto refused = decode_image(bytes, tight);
    ASSERT_FALSE(refused.ok());
    EXPECT_TRUE(contains(refused.status().message(), "over the limit of " + std::to_string(n - 1) + " the decoder takes (hint: downscale"))
        << refused.status().message();
    ImageDecodeLimits exact;
    exact.max_pixels = n;
    EXPECT_TRUE(decode_image(bytes, exact).ok());
  }
  auto bomb = decode_image(read_bytes("images/bad/bomb_100000x100000.png"));
  ASSERT_FALSE(bomb.ok());
  EXPECT_TRUE(contains(bomb.status().message(), "100000x100000 = 10000000000 pixels")) << bomb.status().message();
}

// PackBits (TIFF compression 32773) of one row: runs of 2-128 equal bytes, literals of up to 128.
void packbits_row(const uint8_t* p, size_t n, std::vector<uint8_t>& out) {
  for (size_t i = 0; i < n;) {
    size_t run = 1;
    while (i + run < n && run < 128 && p[i + run] == p[i]) ++run;
    if (run >= 2) {
      out.push_back(static_cast<uint8_t>(257 - run));  // -(run - 1)
      out.push_back(p[i]);
      i += run;
      continue;
    }
    size_t lit = 1;
    while (i + lit < n && lit < 128 && !(i + lit + 1 < n && p[i + lit] == p[i + lit + 1])) ++lit;
    out.push_back(static_cast<uint8_t>(lit - 1));
    out.insert(out.end(), p + i, p + i + lit);
    i += lit;
  }
}

// A little-endian TIFF, w x h RGBA with 16-bit samples (unassociated alpha), PackBits strips of `rps`
// rows, the samples interleaved (planar 1) or in four planes (planar 2); sample c of pixel (x, y) has the
// high byte value(x, y, c) (what its RGB keeps) and the low byte value ^ low_xor. Rows whose values do
// not depend on y (constant_rows) are packed once.
std::vector<uint8_t> rgba16_packbits_tiff(uint32_t w, uint32_t h, uint32_t rps, int planar,
                                          uint8_t (*value)(uint32_t, uint32_t, int), uint8_t low_xor,
                                          bool constant_rows) {
  const int planes = planar == 2 ? 4 : 1, per_pixel = planar == 2 ? 1 : 4;
  std::vector<uint8_t> data, row(static_cast<size_t>(w) * per_pixel * 2), packed_row;
  std::vector<uint32_t> offsets, counts;
  for (int p = 0; p < planes; ++p) {
    for (uint32_t y = 0; y < h; ++y) {
      if (y % rps == 0) {
        offsets.push_back(static_cast<uint32_t>(8 + data.size()));
        counts.push_back(0);
      }
      if (!constant_rows || y == 0) {
        for (uint32_t x = 0; x < w; ++x)
          for (int c = 0; c < per_pixel; ++c) {
            const uint8_t v = value(x, y, planes > 1 ? p : c);
            row[(x * per_pixel + c) * 2] = v ^ low_xor;  // low byte first
            row[(x * per_pixel + c) * 2 + 1] = v;
          }
        packed_row.clear();
        packbits_row(row.data(), row.size(), packed_row);
      }
      data.insert(data.end(), packed_row.begin(), packed_row.end());
      counts.back() += static_cast<uint32_t>(packed_row.size());
    }
  }
  std::vector<uint8_t> f = {'I', 'I', 42, 0, 0, 0, 0, 0};
  f.insert(f.end(), data.begin(), data.end());
  auto put16 = [&](uint32_t v) { f.push_back(v & 0xFF); f.push_back((v >> 8) & 0xFF); };
  auto put32 = [&](uint32_t v) { put16(v & 0xFFFF); put16(v >> 16); };
  const uint32_t bits_at = static_cast<uint32_t>(f.size());
  for (int i = 0; i < 4; ++i) put16(16);
  const uint32_t offsets_at = static_cast<uint32_t>(f.size());
  for (uint32_t o : offsets) put32(o);
  const uint32_t counts_at = static_cast<uint32_t>(f.size());
  for (uint32_t c : counts) put32(c);
  const uint32_t ifd = static_cast<uint32_t>(f.size());
  for (int i = 0; i < 4; ++i) f[4 + i] = static_cast<uint8_t>(ifd >> (8 * i));
  struct Entry { uint16_t tag, type; uint32_t count, value; };
  const uint32_t n = static_cast<uint32_t>(offsets.size());
  const Entry entries[] = {{256, 4, 1, w}, {257, 4, 1, h}, {258, 3, 4, bits_at}, {259, 3, 1, 32773}, {262, 3, 1, 2},
                           {273, 4, n, n == 1 ? offsets[0] : offsets_at}, {277, 3, 1, 4}, {278, 4, 1, rps},
                           {279, 4, n, n == 1 ? counts[0] : counts_at}, {284, 3, 1, static_cast<uint32_t>(planar)},
                           {338, 3, 1, 2}};
  put16(static_cast<uint32_t>(std::size(entries)));
  for (const Entry& e : entries) {
    put16(e.tag);
    put16(e.type);
    put32(e.count);
    if (e.type == 3 && e.count == 1) {
      put16(e.value);
      put16(0);
    } else {
      put32(e.value);
    }
  }
  put32(0);
  return f;
}

// A TIFF is read and converted a band (strip) at a time: a 4 MB file whose one PackBits strip would
// expand to 269 MB of samples (more than 256 MB, the file and its 101 MB of RGB) is refused before
// anything that size is allocated, and pages in many strips (a short last one included), interleaved or
// in separate planes, decode to the pixels they hold.
TEST(ImageDecode, TiffStripsAreBoundedAndDecodedBandByBand) {
  const auto zero = [](uint32_t, uint32_t, int) -> uint8_t { return 0; };
  const std::vector<uint8_t> bomb = rgba16_packbits_tiff(5800, 5800, 5800, 1, zero, 0, true);
  EXPECT_LT(bomb.size(), 5u << 20);
  auto refused = decode_image(bomb);
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(contains(refused.status().message(), "a strip of 5800 rows needs 269120000 bytes of samples, expected at most"))
      << refused.status().message();

  const auto pattern = [](uint32_t x, uint32_t y, int c) -> uint8_t { return static_cast<uint8_t>(x * 3 + y * 5 + c * 71); };
  for (int planar : {1, 2}) {
    for (uint32_t rps : {1u, 7u, 64u, 300u}) {
      SCOPED_TRACE("planar " + std::to_string(planar) + " rows per strip " + std::to_string(rps));
      auto img = decode_image(rgba16_packbits_tiff(257, 300, rps, planar, pattern, 0x5A, false));
      ASSERT_TRUE(img.ok()) << img.status().message();
      ASSERT_EQ(img->width, 257);
      ASSERT_EQ(img->height, 300);
      for (uint32_t y = 0; y < 300; ++y)
        for (uint32_t x = 0; x < 257; ++x)
          for (int c = 0; c < 3; ++c)
            ASSERT_EQ(img->pixels[(static_cast<size_t>(y) * 257 + x) * 3 + c], pattern(x, y, c)) << x << "," << y << "," << c;
    }
  }
}

TEST(ImageDecode, ExifOrientationsGiveTheRightSize) {
  for (int o = 2; o <= 8; ++o) {
    SCOPED_TRACE(o);
    auto r = load_image_file(kDataDir + "/images/jpeg_exif_orient" + std::to_string(o) + "_41x23.jpg");
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_EQ(r->width, o >= 5 ? 23 : 41);
    EXPECT_EQ(r->height, o >= 5 ? 41 : 23);
  }
  struct Case {
    const char* file;
    int w, h;
  } cases[] = {{"images/jpeg_exif_mm_orient5_30x14.jpg", 14, 30},     // big-endian EXIF
               {"images/jpeg_xmp_orient6_26x12.jpg", 12, 26},         // XMP only
               {"images/jpeg_exif1_xmp6_20x10.jpg", 20, 10},          // EXIF 1 wins over XMP 6
               {"images/png_exif_orient6_24x10.png", 10, 24},         // eXIf before IDAT
               {"images/png_exif_after_idat_orient3_22x13.png", 22, 13},
               {"images/png_exif_long_orient8_15x9.png", 9, 15},      // LONG type
               {"images/png_exif_count2_orient7_15x9.png", 9, 15},    // two values: PIL takes the first
               {"images/png_exif_byte_orient6_15x9.png", 15, 9},      // BYTE type: PIL ignores it
               {"images/png_xmp_orient8_18x11.png", 11, 18},          // iTXt XMP
               {"images/png_rawprofile_orient6_17x8.png", 8, 17},     // zTXt "Raw profile type exif"
               {"images/webp_exif_orient6_40x20.webp", 20, 40},
               {"images/webp_xmp_orient3_30x16.webp", 30, 16}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.file);
    auto r = load_image_file(kDataDir + "/" + c.file);
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_EQ(r->width, c.w);
    EXPECT_EQ(r->height, c.h);
  }
}

// A file cut short is refused exactly when PIL refuses it, and otherwise decodes to PIL's pixels: PIL
// keeps an image whose rows are all complete even if what follows them is missing (PNG's zlib trailer
// and IEND, JPEG's EOI, GIF's block terminator, BMP's last-row padding).
TEST(ImageDecode, TruncatedFilesMatchPil) {
  ASSERT_TRUE(golden().is_object());
  size_t cases = 0;
  for (const auto& g : golden()["images"]) {
    const std::string file = g["file"];
    const std::vector<uint8_t> bytes = read_bytes(file);
    ASSERT_FALSE(bytes.empty()) << file;
    for (const auto& t : g["truncations"]) {
      const size_t cut = t[0];
      SCOPED_TRACE(file + " cut to " + std::to_string(cut) + " of " + std::to_string(bytes.size()) + " bytes");
      ASSERT_LT(cut, bytes.size());
      auto r = decode_image(std::span<const uint8_t>(bytes.data(), cut));
      ++cases;
      if (t[1].is_null()) {
        EXPECT_FALSE(r.ok()) << "PIL refuses this file, but it decoded";
      } else {
        ASSERT_TRUE(r.ok()) << "PIL decodes this file; got: " << r.status().message();
        EXPECT_EQ(qvl::sha256_hex(r->pixels.data(), r->pixels.size()).substr(0, 16), t[1].get<std::string>());
      }
    }
  }
  EXPECT_GT(cases, 1000u);
}

// Cuts every good file at many more lengths and flips bytes; decoding must return (an image or an
// error) and never crash, hang or leak (run under ASan to see leaks). Agreement with PIL on flipped
// bytes is measured, not required (see the notes on corrupt data at the top of src/io/image.cpp).
TEST(ImageDecode, DamagedFilesNeverCrash) {
  ASSERT_TRUE(golden().is_object());
  size_t decoded = 0, refused = 0;
  for (const auto& g : golden()["images"]) {
    const std::string file = g["file"];
    SCOPED_TRACE(file);
    const std::vector<uint8_t> bytes = read_bytes(file);
    ASSERT_FALSE(bytes.empty());
    const size_t n = bytes.size();
    std::vector<size_t> cuts = {0, 1, 2, 3, 4, 6, 8, 11, 12, 14, 16, 20, 24, 26, 30, 33, 40, 54, 64, 100, 200, 800};
    for (size_t k = 1; k < 16; ++k) cuts.push_back(n * k / 16);
    for (size_t k = 1; k <= 16; ++k) cuts.push_back(n > k ? n - k : 0);
    for (size_t cut : cuts) {
      if (cut >= n) continue;
      auto r = decode_image(std::span<const uint8_t>(bytes.data(), cut));
      if (r.ok()) {
        ++decoded;
        EXPECT_EQ(r->pixels.size(), static_cast<size_t>(r->width) * r->height * 3);
      } else {
        ++refused;
        EXPECT_FALSE(r.status().message().empty());
      }
    }
    // Deterministic byte corruption: flip bytes at spread-out positions.
    uint32_t state = 12345;
    for (int trial = 0; trial < 24; ++trial) {
      std::vector<uint8_t> bad = bytes;
      for (int k = 0; k < 1 + trial % 4; ++k) {
        state = state * 1664525u + 1013904223u;
        bad[state % n] ^= static_cast<uint8_t>(1 + (state >> 24) % 255);
      }
      auto r = decode_image(bad);
      if (r.ok()) {
        EXPECT_EQ(r->pixels.size(), static_cast<size_t>(r->width) * r->height * 3);
      }
    }
  }
  EXPECT_GT(refused, 0u);
  (void)decoded;
}

}  // namespace
}  // namespace qvl
