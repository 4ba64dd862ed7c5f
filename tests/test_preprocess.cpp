// Image preprocessing against transformers' Qwen2VLImageProcessorFast: smart_resize, the resized pixels
// and the exact pixel_values, on the committed test images.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "io/image.h"
#include "model/image_processor.h"
#include "util/digest.h"
#include "test_paths.h"
#include "util/file.h"

namespace qvl {
namespace {

TEST(SmartResize, MatchesTheWorkedExamples) {
  struct Case { int w, h, rw, rh; } cases[] = {
      {640, 480, 640, 480}, {1920, 1080, 1920, 1088}, {100, 100, 256, 256},
      {800, 80, 832, 96},   {4000, 3000, 4000, 3008}, {512, 384, 512, 384},
  };
  for (const Case& c : cases) {
    auto r = smart_resize(c.h, c.w, 32, 65536, 16777216);
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_EQ(r->width, c.rw) << c.w << "x" << c.h;
    EXPECT_EQ(r->height, c.rh) << c.w << "x" << c.h;
  }
}

TEST(SmartResize, RoundsHalfToEvenLikePython) {
  // 48/32 = 1.5 -> 2 (even), 80/32 = 2.5 -> 2 (even, not 3), 112/32 = 3.5 -> 4.
  auto r = smart_resize(80, 48, 32, 1, 1 << 30);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->height, 64);
  EXPECT_EQ(r->width, 64);
  r = smart_resize(112, 80, 32, 1, 1 << 30);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->height, 128);
  EXPECT_EQ(r->width, 64);
}

TEST(SmartResize, RefusesExtremeAspectRatios) {
  auto r = smart_resize(5, 1005, 32, 65536, 16777216);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("aspect ratio"), std::string::npos) << r.status().message();
  EXPECT_TRUE(smart_resize(5, 1000, 32, 65536, 16777216).ok());  // exactly 200:1 is allowed
}

TEST(Preprocess, MatchesTransformersOnTestImages) {
  auto cfg = ImageProcessorConfig::load(test::model_files_dir());
  ASSERT_TRUE(cfg.ok()) << cfg.status().message();
  auto text = read_file_text(test::data_dir() + "/preprocess_golden.json");
  ASSERT_TRUE(text.ok()) << text.status().message();
  const auto golden = nlohmann::json::parse(*text);
  int n_cases = 0, n_exact = 0, n_resized_compared = 0;
  int64_t values_compared = 0, values_differing = 0;
  int max_diff = 0;
  for (const auto& c : golden["cases"]) {
    const std::string file = c["file"];
    SCOPED_TRACE(file);
    ++n_cases;
    auto image = load_image_file(test::data_dir() + "/" + file);
    ASSERT_TRUE(image.ok()) << image.status().message();
    PreprocessOptions opts;
    if (!c["min_pixels"].is_null()) opts.min_pixels = c["min_pixels"];
    if (!c["max_pixels"].is_null()) opts.max_pixels = c["max_pixels"];
    auto pre = preprocess_image(*image, *cfg, opts);
    if (c.contains("error")) {
      EXPECT_FALSE(pre.ok()) << "transformers refused it: " << c["error"];
      continue;
    }
    ASSERT_TRUE(pre.ok()) << pre.status().message();
    EXPECT_EQ(pre->resized.height, c["resized"][0].get<int>());
    EXPECT_EQ(pre->resized.width, c["resized"][1].get<int>());
    EXPECT_EQ(pre->grid_t, c["grid_thw"][0].get<int>());
    EXPECT_EQ(pre->grid_h, c["grid_thw"][1].get<int>());
    EXPECT_EQ(pre->grid_w, c["grid_thw"][2].get<int>());
    EXPECT_EQ(pre->num_tokens(), c["tokens"].get<int>());
    const std::string sha = qvl::sha256_hex(pre->pixel_values.data(), pre->pixel_values.size() * sizeof(float));
    const bool exact = sha == c["pixel_values_sha256"].get<std::string>();
    n_exact += exact;
    if (c.contains("resized_png")) {
      // Compare the 8-bit resized image: |diff| <= 1 is 1/127.5 after normalisation.
      auto want = load_image_file(test::data_dir() + "/" + c["resized_png"].get<std::string>());
      ASSERT_TRUE(want.ok()) << want.status().message();
      const ImageRGB got = resize_bicubic_antialias(*image, pre->resized.width, pre->resized.height);
      ASSERT_EQ(got.pixels.size(), want->pixels.size());
      int differing = 0;
      for (size_t i = 0; i < got.pixels.size(); ++i) {
        const int d = std::abs(int(got.pixels[i]) - int(want->pixels[i]));
        differing += d != 0;
        max_diff = std::max(max_diff, d);
      }
      EXPECT_LE(max_diff, 1);
      values_compared += static_cast<int64_t>(got.pixels.size());
      values_differing += differing;
      ++n_resized_compared;
      if (differing == 0) {
        EXPECT_TRUE(exact) << "same 8-bit pixels must give the same pixel_values";
      }
    } else {
      EXPECT_TRUE(exact) << "pixel_values differ from transformers (sha256)";
    }
  }
  std::printf("[preprocess] %d cases; %d with bit-identical pixel_values; %d resized images compared: %lld of %lld "
              "values differ, max |diff| %d (of 255)\n",
              n_cases, n_exact, n_resized_compared, static_cast<long long>(values_differing),
              static_cast<long long>(values_compared), max_diff);
  EXPECT_GE(n_cases, 30);
}

TEST(Preprocess, PatchifyOrderIsMergeWindowMajor) {
  // A 64x32 image whose pixel value encodes its position: check rows and columns of pixel_values.
  ImageRGB img{64, 32, std::vector<uint8_t>(64 * 32 * 3)};
  for (int y = 0; y < 32; ++y)
    for (int x = 0; x < 64; ++x)
      for (int c = 0; c < 3; ++c) img.pixels[(y * 64 + x) * 3 + c] = static_cast<uint8_t>((x + 2 * y + 50 * c) % 256);
  ImageProcessorConfig cfg;
  PreprocessedImage p = patchify(img, cfg);
  ASSERT_EQ(p.grid_h, 2);
  ASSERT_EQ(p.grid_w, 4);
  ASSERT_EQ(p.num_tokens(), 2);
  // Row for patch (R, C) = ((R/2 * gw/2 + C/2) * 2 + R%2) * 2 + C%2; column ((c*2 + t)*16 + ky)*16 + kx.
  for (int R = 0; R < 2; ++R)
    for (int C = 0; C < 4; ++C)
      for (int c = 0; c < 3; ++c)
        for (int t = 0; t < 2; ++t)
          for (int ky : {0, 7, 15})
            for (int kx : {0, 9, 15}) {
              const int row = (((R / 2) * 2 + C / 2) * 2 + R % 2) * 2 + C % 2;
              const int col = ((c * 2 + t) * 16 + ky) * 16 + kx;
              const int v = (16 * C + kx + 2 * (16 * R + ky) + 50 * c) % 256;
              EXPECT_FLOAT_EQ(p.pixel_values[row * 1536 + col], (v - 127.5f) / 127.5f);
            }
}

}  // namespace
}  // namespace qvl
