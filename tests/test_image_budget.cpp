// An image's cost is checked from its header before any pixel is decoded (ImageDecodeLimits::admit, the
// server's per-request ImageBudget), and a JPEG far over the size it will be resized to is decoded reduced.
#include <chrono>
#include <cmath>
#include <thread>
#include <cstdlib>

#include <gtest/gtest.h>

#include "io/image.h"
#include "server/image_input.h"
#include "test_paths.h"
#include "util/file.h"

namespace qvl::test {
namespace {

std::vector<uint8_t> read(const std::string& name) {
  auto b = read_file_bytes(data_dir() + "/images/" + name);
  EXPECT_TRUE(b.ok()) << b.status().message();
  return b.ok() ? *b : std::vector<uint8_t>{};
}

TEST(ImageAdmit, SeesTheStoredSizeOnceBeforeDecodingEveryFormat) {
  for (const char* name : {"jpeg_1024x768.jpg", "png_rgb8_448x448.png", "gif_animated_40x30.gif", "bmp24_33x17.bmp",
                           "webp_lossless_64x64.webp", "webp_animated_48x32.webp"}) {
    std::vector<uint8_t> bytes = read(name);
    if (bytes.empty()) continue;
    int calls = 0;
    int64_t seen_w = 0, seen_h = 0;
    ImageDecodeLimits l;
    l.admit = [&](int64_t w, int64_t h) -> Result<int64_t> {
      ++calls;
      seen_w = w;
      seen_h = h;
      return Status::Error("refused by the budget");
    };
    auto img = decode_image(bytes, l);
    ASSERT_FALSE(img.ok()) << name;
    EXPECT_NE(img.status().message().find("refused by the budget"), std::string::npos) << img.status().message();
    EXPECT_EQ(calls, 1) << name;
    auto full = decode_image(bytes);
    ASSERT_TRUE(full.ok()) << name << ": " << full.status().message();
    EXPECT_EQ(seen_w * seen_h, int64_t{full->width} * full->height) << name;
  }
}

TEST(ImageAdmit, ABombIsRefusedFromItsHeaderWithoutItsData) {
  // 100000x100000 declared in the header: the budget refuses it before the pixel limit or the data matter.
  std::vector<uint8_t> bytes = read("bad/bomb_100000x100000.png");
  ImageDecodeLimits l;
  l.max_pixels = int64_t{1} << 40;
  bool asked = false;
  l.admit = [&](int64_t w, int64_t h) -> Result<int64_t> {
    asked = true;
    EXPECT_EQ(w, 100000);
    EXPECT_EQ(h, 100000);
    return Status::Error("too many tokens");
  };
  auto img = decode_image(bytes, l);
  ASSERT_FALSE(img.ok());
  EXPECT_TRUE(asked);
  EXPECT_NE(img.status().message().find("too many tokens"), std::string::npos) << img.status().message();
}

TEST(ImageAdmit, AJpegFarOverItsTargetIsDecodedReducedAndClose) {
  std::vector<uint8_t> bytes = read("jpeg_1024x768.jpg");
  auto full = decode_image(bytes);
  ASSERT_TRUE(full.ok());
  ImageDecodeLimits l;
  l.jpeg_reduce_factor = 2;
  l.admit = [](int64_t, int64_t) -> Result<int64_t> { return int64_t{128 * 96}; };
  auto reduced = decode_image(bytes, l);
  ASSERT_TRUE(reduced.ok()) << reduced.status().message();
  // 1/8 would leave 128x96, under 2x the target's sides; 1/4 leaves 256x192 = 2x: the largest reduction allowed.
  EXPECT_EQ(reduced->width, 256);
  EXPECT_EQ(reduced->height, 192);
  // DCT scaling is close to a 4x4 box average of the full decode.
  double diff = 0;
  for (int y = 0; y < 192; ++y)
    for (int x = 0; x < 256; ++x)
      for (int c = 0; c < 3; ++c) {
        double box = 0;
        for (int dy = 0; dy < 4; ++dy)
          for (int dx = 0; dx < 4; ++dx) box += full->pixels[((y * 4 + dy) * 1024 + x * 4 + dx) * 3 + c];
        diff += std::abs(box / 16 - reduced->pixels[(y * 256 + x) * 3 + c]);
      }
  EXPECT_LT(diff / (192.0 * 256 * 3), 4.0);

  // A target not far under the image: decoded in full, exactly as the reference.
  l.admit = [](int64_t, int64_t) -> Result<int64_t> { return int64_t{640 * 480}; };
  auto same = decode_image(bytes, l);
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(same->width, 1024);
  EXPECT_EQ(same->pixels, full->pixels);
}

TEST(ImageBudget, TokensOfARequestsImagesMustFitTheContext) {
  // factor 32: a 448x448 image is 196 tokens.
  server::ImageBudget budget(/*max_tokens=*/400, /*min_pixels=*/65536, /*max_pixels=*/16777216, /*factor=*/32);
  std::vector<uint8_t> bytes = read("png_rgb8_448x448.png");
  ImageDecodeLimits base;
  EXPECT_TRUE(decode_image(bytes, budget.limits(base)).ok());
  EXPECT_EQ(budget.tokens(), 196);
  EXPECT_TRUE(decode_image(bytes, budget.limits(base)).ok());
  EXPECT_EQ(budget.tokens(), 392);
  auto third = decode_image(bytes, budget.limits(base));
  ASSERT_FALSE(third.ok());
  EXPECT_NE(third.status().message().find("over the context of 400"), std::string::npos) << third.status().message();
  EXPECT_EQ(budget.tokens(), 392);
}

}  // namespace
}  // namespace qvl::test

namespace qvl::test {
namespace {

// The server's decode memory: a byte semaphore with a deadline.
TEST(DecodeMemory, ReservesReleasesAndRefusesWhatCanNeverFit) {
  server::DecodeMemory m(100);
  const auto soon = std::chrono::steady_clock::now() + std::chrono::milliseconds(50);
  EXPECT_EQ(m.acquire(101, soon), server::DecodeMemory::Got::kTooLarge);
  EXPECT_EQ(m.acquire(60, soon), server::DecodeMemory::Got::kOk);
  EXPECT_EQ(m.acquire(60, soon), server::DecodeMemory::Got::kBusy);  // no room before the deadline
  std::thread t([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    m.release(60);
  });
  EXPECT_EQ(m.acquire(60, std::chrono::steady_clock::now() + std::chrono::seconds(10)), server::DecodeMemory::Got::kOk);
  t.join();
  EXPECT_EQ(m.in_use(), 60u);
  m.release(60);
  EXPECT_EQ(m.in_use(), 0u);
}

// Each image a request decodes reserves its header's pixels x kBytesPerPixel and gives them back once the next
// image is admitted or the budget releases it: one image's decode memory at a time, per request.
TEST(DecodeMemory, ABudgetHoldsOneImagesReservationAtATime) {
  std::vector<uint8_t> bytes = read("png_rgb8_448x448.png");
  const uint64_t one = 448ull * 448 * server::DecodeMemory::kBytesPerPixel;
  server::DecodeMemory m(one + 10);
  const auto later = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  {
    server::ImageBudget b(1 << 20, 3136, 1 << 22, 32);
    b.use_memory(&m, later);
    auto first = decode_image(bytes, b.limits({}));
    ASSERT_TRUE(first.ok()) << first.status().message();
    EXPECT_EQ(m.in_use(), one);
    auto second = decode_image(bytes, b.limits({}));  // the first's reservation goes before this one's
    ASSERT_TRUE(second.ok()) << second.status().message();
    EXPECT_EQ(m.in_use(), one);
    b.release_decode();
    EXPECT_EQ(m.in_use(), 0u);
    auto third = decode_image(bytes, b.limits({}));
    ASSERT_TRUE(third.ok());
  }
  EXPECT_EQ(m.in_use(), 0u);  // the budget's end gives it back
  // An image that can never fit is refused from its header, and says which option to raise.
  server::DecodeMemory small(1000);
  server::ImageBudget b(1 << 20, 3136, 1 << 22, 32);
  b.use_memory(&small, later);
  auto img = decode_image(bytes, b.limits({}));
  ASSERT_FALSE(img.ok());
  EXPECT_NE(img.status().message().find("--decode-memory-mb"), std::string::npos) << img.status().message();
  EXPECT_FALSE(b.busy());
  // No room before the deadline: busy (the server answers 503).
  server::DecodeMemory full(one + 10);
  ASSERT_EQ(full.acquire(one, later), server::DecodeMemory::Got::kOk);
  server::ImageBudget waiting(1 << 20, 3136, 1 << 22, 32);
  waiting.use_memory(&full, std::chrono::steady_clock::now() + std::chrono::milliseconds(50));
  EXPECT_FALSE(decode_image(bytes, waiting.limits({})).ok());
  EXPECT_TRUE(waiting.busy());
  full.release(one);
}

}  // namespace
}  // namespace qvl::test
