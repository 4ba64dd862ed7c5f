// Videos through the server: OpenAI video_url parts (data: URIs, bare base64, paths under --media-dir) with
// per-part fps and pixel bounds, Ollama "images" entries that are clips, the frame groups cached like
// images, and the refusals (bad files, URLs, paths outside the directory, a video over the context).
#include "test_server_fixture.h"

namespace qvl::test {
namespace {

std::string video_base64(const std::string& name) {
  auto bytes = read_file_bytes(data_dir() + "/videos/" + name);
  EXPECT_TRUE(bytes.ok()) << bytes.status().message();
  return bytes.ok() ? server::base64_encode(bytes->data(), bytes->size()) : std::string();
}

json video_part(const json& video_url) { return json{{"type", "video_url"}, {"video_url", video_url}}; }

json video_body(const json& part, const std::string& text = "What happens in this clip?") {
  return json{{"messages", json::array({json{{"role", "user"},
                                              {"content", json::array({part, json{{"type", "text"}, {"text", text}}})}}})},
              {"max_tokens", 4},
              {"temperature", 0}};
}

class ServerVideo : public ServerTest {
 protected:
  void SetUp() override {
    if (!video_supported()) GTEST_SKIP() << "built without FFmpeg";
  }
};

TEST_F(ServerVideo, OpenAIVideoUrlIsSampledAndItsGroupsAreCached) {
  start();
  const json part = video_part(json{{"url", "data:video/mp4;base64," + video_base64("h264_30fps_64x48.mp4")}});
  Reply r = post("/v1/chat/completions", video_body(part));
  ASSERT_EQ(r.status, 200) << r.body;
  json j = r.json_body();
  // 45 frames at 30 fps, 2 per second: 4 frames (the minimum), 64x64, 2 groups of 4 tokens.
  EXPECT_EQ(j["timings"]["videos"], 1);
  EXPECT_EQ(j["timings"]["video_frames"], 4);
  EXPECT_EQ(j["timings"]["video_tokens"], 8);
  const int with_video = j["usage"]["prompt_tokens"];
  json plain = video_body(json{{"type", "text"}, {"text", ""}});
  const int without = post("/v1/chat/completions", plain).json_body()["usage"]["prompt_tokens"];
  // 8 pads, and per group a timestamp ("<0.2 seconds>": 6 tokens) with vision start and end.
  EXPECT_EQ(with_video - without, 8 + 2 * (6 + 2));
  // The same clip again: both frame groups come from the image cache.
  Reply again = post("/v1/chat/completions", video_body(part));
  ASSERT_EQ(again.status, 200) << again.body;
  EXPECT_EQ(again.json_body()["timings"]["images_cached"], 2);
  EXPECT_EQ(again.json_body()["choices"][0]["message"]["content"], j["choices"][0]["message"]["content"]);

  // fps on the part: 10 per second of a 1.5 s clip: 15 frames, padded to 8 groups.
  json fast = video_part(json{{"url", "data:video/mp4;base64," + video_base64("h264_30fps_64x48.mp4")}, {"fps", 10}});
  Reply f = post("/v1/chat/completions", video_body(fast));
  ASSERT_EQ(f.status, 200) << f.body;
  EXPECT_EQ(f.json_body()["timings"]["video_frames"], 15);
  EXPECT_EQ(f.json_body()["timings"]["video_tokens"], 8 * 4);
  // transformers' own part: {"type": "video", "video": <base64>}.
  Reply t = post("/v1/chat/completions", video_body(json{{"type", "video"}, {"video", video_base64("vp9_25fps_70x50.webm")}}));
  ASSERT_EQ(t.status, 200) << t.body;
  EXPECT_EQ(t.json_body()["timings"]["videos"], 1);
}

TEST_F(ServerVideo, BadVideosAreRefusedNamingThePart) {
  start();
  auto refused = [&](const json& part, const std::string& needle) {
    Reply r = post("/v1/chat/completions", video_body(part));
    EXPECT_EQ(r.status, 400) << r.body;
    const json e = r.json_body()["error"];
    EXPECT_NE(e["message"].get<std::string>().find(needle), std::string::npos) << e.dump();
    EXPECT_EQ(e["param"], "messages[0].content[0].video_url") << e.dump();
  };
  refused(video_part(json{{"url", "data:video/mp4;base64," + video_base64("bad_garbage.mp4")}}), "not a video file");
  refused(video_part(json{{"url", "data:video/mp4;base64," + video_base64("bad_truncated.mp4")}}), "video");
  refused(video_part(json{{"url", "data:video/mp4;base64," + video_base64("bad_still_1frame.mp4")}}), "at least 2");
  refused(video_part(json{{"url", "https://example.com/clip.mp4"}}), "not fetched");
  refused(video_part(json{{"url", "clip.mp4"}}), "--media-dir");
  // Scaled up past the context (1024 tokens): refused before any frame is decoded.
  refused(video_part(json{{"url", "data:video/mp4;base64," + video_base64("h264_30fps_64x48.mp4")},
                          {"min_pixels", 8000000}}),
          "prompt tokens");
  // Bad sampling fields.
  Reply fps = post("/v1/chat/completions", video_body(video_part(json{{"url", "x"}, {"fps", -1}})));
  EXPECT_EQ(fps.status, 400) << fps.body;
  // A video in an assistant message is dropped with a warning, as the template drops it.
  json body = video_body(json{{"type", "text"}, {"text", "hi"}});
  body["messages"].insert(body["messages"].begin(),
                          json{{"role", "assistant"},
                               {"content", json::array({video_part(json{{"url", "data:video/mp4;base64,AAAA"}})})}});
  Reply dropped = post("/v1/chat/completions", body);
  ASSERT_EQ(dropped.status, 200) << dropped.body;
  EXPECT_NE(dropped.body.find("not shown to the model"), std::string::npos) << dropped.body;
}

TEST_F(ServerVideo, PathsUnderTheMediaDirOnly) {
  server::ServerOptions o = test_options();
  o.image_dir = data_dir() + "/videos";
  start(o);
  Reply ok = post("/v1/chat/completions", video_body(video_part(json{{"url", "anim_10fps_48x40.gif"}})));
  ASSERT_EQ(ok.status, 200) << ok.body;
  EXPECT_EQ(ok.json_body()["timings"]["videos"], 1);
  Reply file = post("/v1/chat/completions", video_body(video_part(json{{"url", "file://h264_24fps_96x64.mkv"}})));
  EXPECT_EQ(file.status, 200) << file.body;
  Reply out = post("/v1/chat/completions", video_body(video_part(json{{"url", "../images/png_rgb8_1x1.png"}})));
  EXPECT_EQ(out.status, 400) << out.body;
}

TEST_F(ServerVideo, VideosDecodeWithinTheServersDecodeMemory) {
  server::ServerOptions o = test_options();
  o.decode_memory_mb = 1;
  o.timeout_s = scaled(5);  // a reservation never given back would make a later request wait this long, then 503
  start(o);
  const std::string clip = video_base64("h264_30fps_64x48.mp4");
  // 64x48 frames, 4 to 14 kept at 64x64: at most 3072 * 32 + 14 * 4096 * 3 bytes, within 1 MiB, and given back
  // each time (eight would not fit together).
  for (int i = 0; i < 8; ++i) {
    Reply r = post("/v1/chat/completions", video_body(video_part(json{{"url", "data:video/mp4;base64," + clip},
                                                                       {"fps", 2 + i}})));  // not from the cache
    ASSERT_EQ(r.status, 200) << i << ": " << r.body;
  }
  // Scaled up to 4 frames of 352x352 (the pixel bounds count all frames): 1.5 MB of kept frames, more than
  // the whole budget: refused before any frame is decoded, naming the option.
  Reply big = post("/v1/chat/completions", video_body(video_part(json{{"url", "data:video/mp4;base64," + clip},
                                                                     {"min_pixels", 500000}})));
  EXPECT_EQ(big.status, 400) << big.body;
  EXPECT_NE(big.body.find("--decode-memory-mb"), std::string::npos) << big.body;
}

TEST_F(ServerVideo, OllamaImagesEntryThatIsAClipIsAVideo) {
  start();
  const std::string clip = video_base64("h264_30fps_64x48.mp4");
  json ollama{{"model", "tiny"},
              {"messages", json::array({json{{"role", "user"}, {"content", "What happens in this clip?"},
                                             {"images", json::array({clip})}}})},
              {"stream", false},
              {"options", json{{"num_predict", 4}, {"temperature", 0}}}};
  Reply r = post("/api/chat", ollama);
  ASSERT_EQ(r.status, 200) << r.body;
  // The same prompt as the OpenAI request with a video part before the text.
  Reply o = post("/v1/chat/completions",
                 video_body(video_part(json{{"url", "data:video/mp4;base64," + clip}})));
  ASSERT_EQ(o.status, 200) << o.body;
  EXPECT_EQ(r.json_body()["prompt_eval_count"], o.json_body()["usage"]["prompt_tokens"]);
  EXPECT_EQ(r.json_body()["message"]["content"], o.json_body()["choices"][0]["message"]["content"]);
}

}  // namespace
}  // namespace qvl::test
