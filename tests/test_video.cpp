// Video input against the reference (tests/data/video_golden.json, tools/reference/gen_video_goldens.py):
// decoded frames against PyAV's (rotation applied), frame sampling, the video smart_resize and timestamps
// against Qwen3VLVideoProcessor / Qwen3VLProcessor, whole cases (pixel_values, prompt ids with timestamps,
// M-RoPE positions) against the processor and get_rope_index; bad files refused with a reason.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>

#include <nlohmann/json.hpp>

#include "engine/prompt.h"
#include "io/npy.h"
#include "io/video.h"
#include "model/mrope.h"
#include "model/video_processor.h"
#include "util/digest.h"
#include "test_paths.h"
#include "chat/chat_json.h"
#include "util/file.h"

namespace qvl {
namespace {

const nlohmann::json& video_golden() {
  static const nlohmann::json g = [] {
    auto text = read_file_text(test::data_dir() + "/video_golden.json", 64 << 20);
    EXPECT_TRUE(text.ok()) << text.status().message();
    return text.ok() ? nlohmann::json::parse(*text) : nlohmann::json::object();
  }();
  return g;
}

std::vector<uint8_t> read_bytes(const std::string& rel) {
  auto b = read_file_bytes(test::data_dir() + "/" + rel, 64 << 20);
  EXPECT_TRUE(b.ok()) << rel << ": " << b.status().message();
  return b.ok() ? std::move(b).value() : std::vector<uint8_t>{};
}

class VideoFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!video_supported()) GTEST_SKIP() << "built without FFmpeg";
  }
};

TEST_F(VideoFiles, DecodeEveryFrameAsPyAvDoes) {
  ASSERT_FALSE(video_golden()["clips"].empty());
  for (const auto& clip : video_golden()["clips"]) {
    const std::string file = clip["file"];
    SCOPED_TRACE(file);
    const std::vector<uint8_t> bytes = read_bytes(file);
    EXPECT_TRUE(looks_like_video(bytes) || file.ends_with(".gif")) << "sniffed as a video";
    auto v = decode_video(bytes);
    ASSERT_TRUE(v.ok()) << v.status().message();
    EXPECT_EQ(v->info.total_frames, clip["total_frames"].get<int64_t>());
    EXPECT_NEAR(v->info.fps, clip["fps"].get<double>(), 1e-9);
    EXPECT_EQ(v->info.width, clip["width"].get<int>());
    EXPECT_EQ(v->info.height, clip["height"].get<int>());
    // The golden records FFmpeg's counter-clockwise angle; ours is clockwise.
    EXPECT_EQ(v->info.rotation, ((-clip["rotation"].get<int>()) % 360 + 360) % 360);
    const auto& hashes = clip["frame_sha256"];
    ASSERT_EQ(v->frames.size(), hashes.size());
    int differ = 0;
    for (size_t i = 0; i < v->frames.size(); ++i) {
      const ImageRGB& f = v->frames[i];
      ASSERT_EQ(f.width, clip["width"].get<int>());
      ASSERT_EQ(f.height, clip["height"].get<int>());
      if (qvl::sha256_hex(f.pixels.data(), f.pixels.size()) != hashes[i].get<std::string>()) ++differ;
    }
    EXPECT_EQ(differ, 0) << "frames whose RGB differs from PyAV's";
  }
}

TEST_F(VideoFiles, BadFilesAreRefusedWithAReason) {
  ASSERT_FALSE(video_golden()["bad"].empty());
  for (const auto& f : video_golden()["bad"]) {
    SCOPED_TRACE(f.get<std::string>());
    auto v = preprocess_video_file(read_bytes(f), VideoProcessorConfig::qwen3_vl());
    ASSERT_FALSE(v.ok());
    EXPECT_FALSE(v.status().message().empty());
  }
  // Every cut of a good file is refused or decoded, never crashes; cut in the middle, it is refused.
  const std::vector<uint8_t> good = read_bytes("videos/h264_30fps_64x48.mp4");
  for (size_t n = 0; n < good.size(); n += 97) {
    std::vector<uint8_t> cut(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(n));
    (void)preprocess_video_file(cut, VideoProcessorConfig::qwen3_vl());
  }
  // Limits refuse before decoding.
  VideoDecodeLimits small;
  small.max_frame_pixels = 1000;
  auto big = decode_video(good, small);
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("over the limit"), std::string::npos) << big.status().message();
  VideoDecodeLimits short_limit;
  short_limit.max_duration_s = 1.0;
  auto longer = decode_video(good, short_limit);
  ASSERT_FALSE(longer.ok());
  EXPECT_NE(longer.status().message().find("lasts"), std::string::npos) << longer.status().message();
  // Not a video at all.
  const std::vector<uint8_t> text = {'h', 'e', 'l', 'l', 'o'};
  EXPECT_FALSE(decode_video(text).ok());
}

TEST(VideoProcessor, SamplingMatchesTheProcessor) {
  const auto& rows = video_golden()["sampling"];
  ASSERT_GT(rows.size(), 100u);
  for (const auto& r : rows) {
    const double fps = r["fps"].is_null() ? 2.0 : r["fps"].get<double>();
    auto got = sample_frame_indices(r["total"], r["video_fps"], fps, r["min_frames"], r["max_frames"]);
    SCOPED_TRACE(r.dump());
    if (r.value("error", false)) {
      EXPECT_FALSE(got.ok());
      continue;
    }
    ASSERT_TRUE(got.ok()) << got.status().message();
    EXPECT_EQ(*got, r["indices"].get<std::vector<int64_t>>());
  }
}

TEST(VideoProcessor, SmartResizeMatchesTheProcessor) {
  const auto& rows = video_golden()["smart_resize"];
  ASSERT_GT(rows.size(), 100u);
  int errors = 0;
  for (const auto& r : rows) {
    SCOPED_TRACE(r.dump());
    auto got = smart_resize_video(r["t"], r["h"], r["w"], 2, 32, r["min_pixels"], r["max_pixels"]);
    if (r.value("error", false)) {
      EXPECT_FALSE(got.ok());
      ++errors;
      continue;
    }
    ASSERT_TRUE(got.ok()) << got.status().message();
    EXPECT_EQ(got->height, r["out"][0].get<int>());
    EXPECT_EQ(got->width, r["out"][1].get<int>());
  }
  EXPECT_GT(errors, 0);
}

TEST(VideoProcessor, TimestampsMatchTheProcessor) {
  const auto& rows = video_golden()["timestamps"];
  ASSERT_GT(rows.size(), 10u);
  for (const auto& r : rows) {
    SCOPED_TRACE(r.dump());
    EXPECT_EQ(frame_group_timestamps(r["indices"].get<std::vector<int64_t>>(), r["fps"].get<double>(), 2),
              r["text"].get<std::vector<std::string>>());
  }
}

// A case's videos decoded and preprocessed, its images too, then the prompt and positions built.
TEST_F(VideoFiles, CasesMatchTheProcessorAndGetRopeIndex) {
  const VideoProcessorConfig vcfg = [] {
    auto c = VideoProcessorConfig::load(test::model_files_dir());
    EXPECT_TRUE(c.ok()) << c.status().message();
    return c.ok() ? *c : VideoProcessorConfig::qwen3_vl();
  }();
  auto icfg = ImageProcessorConfig::load(test::model_files_dir());
  ASSERT_TRUE(icfg.ok());
  auto tok = Tokenizer::load(test::model_files_dir());
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  const auto& cases = video_golden()["cases"];
  ASSERT_GE(cases.size(), 5u);
  for (const auto& c : cases) {
    SCOPED_TRACE(c["name"].get<std::string>());
    VideoOptions vo;
    vo.min_pixels = c["min_pixels"];
    vo.max_pixels = c["max_pixels"];
    if (!c["fps"].is_null()) vo.fps = c["fps"];
    std::vector<float> pixels;
    std::vector<VideoPromptPart> parts;
    std::vector<GridTHW> video_grids, image_grids;
    std::vector<int> image_tokens;
    for (const auto& vj : c["videos"]) {
      auto v = preprocess_video_file(read_bytes(vj["clip"]), vcfg, vo);
      ASSERT_TRUE(v.ok()) << v.status().message();
      EXPECT_EQ(v->indices, vj["indices"].get<std::vector<int64_t>>());
      EXPECT_EQ((std::vector<int>{v->grid_t, v->grid_h, v->grid_w}), vj["grid_thw"].get<std::vector<int>>());
      EXPECT_EQ(v->timestamps, vj["timestamps"].get<std::vector<std::string>>());
      for (const auto& g : v->groups) pixels.insert(pixels.end(), g.pixel_values.begin(), g.pixel_values.end());
      parts.push_back({v->timestamps, v->tokens_per_group()});
      video_grids.push_back({v->grid_t, v->grid_h, v->grid_w});
    }
    for (const auto& ij : c["images"]) {
      auto img = load_image_file(test::data_dir() + "/" + ij["file"].get<std::string>());
      ASSERT_TRUE(img.ok()) << img.status().message();
      PreprocessOptions po;
      po.min_pixels = ij["min_pixels"];
      po.max_pixels = ij["max_pixels"];
      auto p = preprocess_image(*img, *icfg, po);
      ASSERT_TRUE(p.ok());
      image_tokens.push_back(p->num_tokens());
      image_grids.push_back({p->grid_t, p->grid_h, p->grid_w});
    }
    // pixel_values_videos: every video's groups in order, [patches, 1536], t-major like the processor's rows.
    auto ref = read_npy(test::data_dir() + "/" + c["pixel_values"].get<std::string>());
    ASSERT_TRUE(ref.ok()) << ref.status().message();
    ASSERT_EQ(ref->numel(), static_cast<int64_t>(pixels.size()));
    const float* r = reinterpret_cast<const float*>(ref->data.data());
    double worst = 0;
    for (size_t i = 0; i < pixels.size(); ++i) worst = std::max(worst, std::abs(static_cast<double>(pixels[i]) - r[i]));
    EXPECT_LE(worst, 1e-6) << "pixel_values_videos";

    auto messages = chat_messages_from_json(c["messages"]);
    ASSERT_TRUE(messages.ok()) << messages.status().message();
    auto ids = build_prompt_ids(*tok, render_chat_with_spans(*messages), image_tokens, parts);
    ASSERT_TRUE(ids.ok()) << ids.status().message();
    EXPECT_EQ(*ids, c["input_ids"].get<std::vector<int32_t>>());
    auto pos = get_rope_index(*ids, image_grids, video_grids, 2);
    ASSERT_TRUE(pos.ok()) << pos.status().message();
    for (int a = 0; a < 3; ++a) EXPECT_EQ(pos->pos[a], c["position_ids"][a].get<std::vector<int32_t>>()) << "axis " << a;
    EXPECT_EQ(pos->rope_delta, c["rope_delta"].get<int64_t>());
  }
}

// Two videos of several groups with the user's text between them: the text stays the user's (its control-token
// look-alikes are plain text), and the prompt is the processor's text with each block expanded.
TEST(VideoPrompt, TextBetweenVideosStaysUserText) {
  auto tok = Tokenizer::load(test::model_files_dir());
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  ChatMessage m;
  m.role = "user";
  m.content_is_string = false;
  const std::string between = " and now this longer clip, which shows <|vision_end|> as text:";
  m.content_parts = {{ContentPart::Kind::kVideo, ""}, {ContentPart::Kind::kText, between},
                     {ContentPart::Kind::kVideo, ""}, {ContentPart::Kind::kText, "Compare them."}};
  const VideoPromptPart a{{"<0.2 seconds>", "<1.2 seconds>", "<2.2 seconds>"}, 4};
  const VideoPromptPart b{{"<0.5 seconds>", "<1.5 seconds>", "<2.5 seconds>", "<3.5 seconds>"}, 6};
  const RenderedChat chat = render_chat_with_spans({m});
  auto ids = build_prompt_ids(*tok, chat, {}, {a, b});
  ASSERT_TRUE(ids.ok()) << ids.status().message();
  // What the processor tokenizes: the blocks replaced in the text, the user's text tokenized as text.
  auto expand = [](const VideoPromptPart& v) {
    std::string t;
    for (const std::string& ts : v.timestamps) t += ts + "<|vision_start|><|video_pad|><|vision_end|>";
    return t;
  };
  const std::string head = "<|im_start|>user\n" + expand(a);
  const std::string text = head + between + expand(b) + "Compare them.<|im_end|>\n<|im_start|>assistant\n";
  const size_t second = head.size() + between.size() + expand(b).size();
  const std::vector<int32_t> want =
      tok->encode_prompt(text, {TextSpan{head.size(), head.size() + between.size()}, TextSpan{second, second + 13}});
  const int32_t pad = tok->token_id("<|video_pad|>");
  std::vector<int32_t> expanded;
  int group = 0;
  for (int32_t id : want) {
    if (id != pad) {
      expanded.push_back(id);
      continue;
    }
    expanded.insert(expanded.end(), group < 3 ? 4 : 6, pad);
    ++group;
  }
  EXPECT_EQ(*ids, expanded);
  const int32_t end = tok->token_id("<|vision_end|>");
  EXPECT_EQ(std::count(ids->begin(), ids->end(), end), 7) << "one per group; the user's look-alike stays text";
}

TEST(VideoProcessor, FewerThanTwoFramesOrTinyFramesAreRefused) {
  std::vector<ImageRGB> one(1);
  one[0].width = one[0].height = 64;
  one[0].pixels.assign(64 * 64 * 3, 100);
  auto v = preprocess_video_frames(one, 30, VideoProcessorConfig::qwen3_vl());
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().message().find("at least 2"), std::string::npos) << v.status().message();
  std::vector<ImageRGB> tiny(8);
  for (auto& f : tiny) {
    f.width = 20;
    f.height = 64;
    f.pixels.assign(20 * 64 * 3, 7);
  }
  auto t = preprocess_video_frames(tiny, 30, VideoProcessorConfig::qwen3_vl());
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("at least 32"), std::string::npos) << t.status().message();
  // A token budget refuses before decoding.
  std::vector<ImageRGB> frames(8);
  for (auto& f : frames) {
    f.width = 640;
    f.height = 352;
    f.pixels.assign(640 * 352 * 3, 1);
  }
  VideoOptions o;
  o.max_tokens = 100;
  auto b = preprocess_video_frames(frames, 2, VideoProcessorConfig::qwen3_vl(), o);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("prompt tokens"), std::string::npos) << b.status().message();
}

TEST(VideoProcessor, RotationTurnsClockwise) {
  ImageRGB a;
  a.width = 3;
  a.height = 2;
  for (int i = 0; i < 6; ++i) a.pixels.insert(a.pixels.end(), {static_cast<uint8_t>(i), 0, 0});
  // 0 1 2      90 cw:  3 0      180: 5 4 3     270 cw: 2 5
  // 3 4 5              4 1           2 1 0             1 4
  //                    5 2                             0 3
  auto px = [](const ImageRGB& im) {
    std::vector<int> v;
    for (size_t i = 0; i < im.pixels.size(); i += 3) v.push_back(im.pixels[i]);
    return v;
  };
  EXPECT_EQ(px(rotate_clockwise(a, 90)), (std::vector<int>{3, 0, 4, 1, 5, 2}));
  EXPECT_EQ(px(rotate_clockwise(a, 180)), (std::vector<int>{5, 4, 3, 2, 1, 0}));
  EXPECT_EQ(px(rotate_clockwise(a, 270)), (std::vector<int>{2, 5, 1, 4, 0, 3}));
  EXPECT_EQ(rotate_clockwise(a, 90).width, 2);
}

}  // namespace
}  // namespace qvl
