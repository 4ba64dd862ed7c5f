// Every endpoint of `qvl serve` through a plain HTTP client against an in-process server running the tiny
// model: OpenAI, Ollama and the legacy endpoints, streaming and not, plus health, models, metrics and page.
#include "test_server_fixture.h"

#include <set>

namespace qvl::test {
namespace {

using ServerApi = ServerTest;

TEST_F(ServerApi, HealthModelsPageAndVersion) {
  start();
  Reply h = get("/health");
  ASSERT_EQ(h.status, 200) << h.body;
  EXPECT_EQ(h.json_body()["status"], "ok");
  EXPECT_EQ(h.json_body()["mode"], "cpu");

  Reply page = get("/");
  EXPECT_EQ(page.status, 200);
  EXPECT_NE(page.body.find("<html"), std::string::npos);

  Reply models = get("/v1/models");
  ASSERT_EQ(models.status, 200) << models.body;
  json m = models.json_body();
  EXPECT_EQ(m["object"], "list");
  ASSERT_EQ(m["data"].size(), 1u);
  EXPECT_EQ(m["data"][0]["id"], "tiny");
  EXPECT_EQ(m["data"][0]["object"], "model");
  EXPECT_TRUE(m["data"][0]["created"].is_number());
  EXPECT_EQ(m["data"][0]["input_modalities"], json::array({"text", "image"}));
  EXPECT_EQ(get("/v1/models/tiny").status, 200);
  EXPECT_EQ(get("/v1/models/other").status, 404);

  Reply tags = get("/api/tags");
  ASSERT_EQ(tags.status, 200);
  EXPECT_EQ(tags.json_body()["models"][0]["name"], "tiny");
  EXPECT_TRUE(tags.json_body()["models"][0]["details"].is_object());
  EXPECT_TRUE(get("/api/version").json_body()["version"].is_string());
  Reply show = post("/api/show", json{{"model", "tiny"}});
  ASSERT_EQ(show.status, 200);
  EXPECT_TRUE(show.json_body()["model_info"].is_object());
  EXPECT_EQ(show.json_body()["capabilities"], json::array({"completion", "vision", "tools"}));
  EXPECT_EQ(get("/api/ps").json_body()["models"].size(), 1u);
}

TEST_F(ServerApi, OpenAIChatCompletion) {
  start();
  Reply r = post("/v1/chat/completions", chat_body("Say hello.", 8));
  ASSERT_EQ(r.status, 200) << r.body;
  json j = r.json_body();
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["model"], "tiny");
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_TRUE(j["choices"][0]["message"]["content"].is_string());
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");  // random weights rarely say <|im_end|>
  EXPECT_EQ(j["usage"]["completion_tokens"], 8);
  EXPECT_GT(j["usage"]["prompt_tokens"].get<int>(), 5);
  EXPECT_EQ(j["usage"]["total_tokens"], j["usage"]["prompt_tokens"].get<int>() + 8);
  for (const char* k : {"prompt_ms", "image_ms", "predicted_ms", "ttft_ms", "predicted_per_second"}) {
    EXPECT_TRUE(j["timings"][k].is_number()) << k;
  }
  // max_completion_tokens wins over max_tokens, as in OpenAI's API.
  json body = chat_body("Say hello.", 8);
  body["max_completion_tokens"] = 3;
  EXPECT_EQ(post("/v1/chat/completions", body).json_body()["usage"]["completion_tokens"], 3);
}

TEST_F(ServerApi, OpenAIImagesAcrossTurns) {
  start();
  json text_only = chat_body("What is in the pictures?", 4);
  const int text_prompt = post("/v1/chat/completions", text_only).json_body()["usage"]["prompt_tokens"];

  json messages = json::array();
  messages.push_back(json{{"role", "user"},
                          {"content", json::array({json{{"type", "image_url"},
                                                        {"image_url", json{{"url", data_uri("png_rgba8_33x17.png")}}}},
                                                   json{{"type", "text"}, {"text", "Describe it."}}})}});
  messages.push_back(json{{"role", "assistant"}, {"content", "A small picture."}});
  messages.push_back(json{{"role", "user"},
                          {"content", json::array({json{{"type", "image_url"},
                                                        {"image_url", image_base64("jpeg_420_31x33.jpg")}},
                                                   json{{"type", "image_url"},
                                                        {"image_url", json{{"url", data_uri("png_rgb8_1x1.png")}}}},
                                                   json{{"type", "text"}, {"text", "And these?"}}})}});
  json body{{"messages", messages}, {"max_tokens", 4}, {"temperature", 0}};
  Reply r = post("/v1/chat/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  json j = r.json_body();
  EXPECT_GT(j["usage"]["prompt_tokens"].get<int>(), text_prompt + 3 * 16);
  EXPECT_GT(j["timings"]["image_tokens"].get<int>(), 0);
  EXPECT_EQ(j["usage"]["completion_tokens"], 4);
}

// Images in system and assistant messages: the chat template does not show them, so they are dropped with
// a warning naming the part, and the answer is the one without them (same prompt tokens, same text).
TEST_F(ServerApi, ImagesTheTemplateDropsAreDroppedWithAWarning) {
  start();
  const json img = json{{"type", "image_url"}, {"image_url", json{{"url", data_uri("png_rgba8_33x17.png")}}}};
  const json user = json{{"role", "user"}, {"content", json::array({img, json{{"type", "text"}, {"text", "And now?"}}})}};
  json plain = json::array({json{{"role", "system"}, {"content", json::array({json{{"type", "text"}, {"text", "Be brief."}}})}},
                            json{{"role", "assistant"}, {"content", "Earlier answer."}}, user});
  json with = plain;
  with[0]["content"].push_back(img);
  with[1]["content"] = json::array({img, json{{"type", "text"}, {"text", "Earlier answer."}}});
  Reply a = post("/v1/chat/completions", json{{"messages", plain}, {"max_tokens", 4}, {"temperature", 0}});
  Reply b = post("/v1/chat/completions", json{{"messages", with}, {"max_tokens", 4}, {"temperature", 0}});
  ASSERT_EQ(a.status, 200) << a.body;
  ASSERT_EQ(b.status, 200) << b.body;
  EXPECT_EQ(b.json_body()["usage"]["prompt_tokens"], a.json_body()["usage"]["prompt_tokens"]);
  EXPECT_EQ(b.json_body()["choices"][0]["message"]["content"], a.json_body()["choices"][0]["message"]["content"]);
  EXPECT_FALSE(a.json_body().contains("warnings"));
  const json w = b.json_body()["warnings"];
  ASSERT_EQ(w.size(), 2u) << b.body;
  EXPECT_NE(w[0].get<std::string>().find("messages[0].content[1]"), std::string::npos) << w;
  EXPECT_NE(w[1].get<std::string>().find("assistant"), std::string::npos) << w;
  // Ollama: images on an assistant message.
  const std::string b64 = image_base64("png_rgba8_33x17.png");
  Reply o = post("/api/chat", json{{"stream", false}, {"options", json{{"num_predict", 2}}},
                                   {"messages", json::array({json{{"role", "user"}, {"content", "hi"}, {"images", json::array({b64})}},
                                                             json{{"role", "assistant"}, {"content", "x"}, {"images", json::array({b64, b64})}},
                                                             json{{"role", "user"}, {"content", "again"}}})}});
  ASSERT_EQ(o.status, 200) << o.body;
  ASSERT_EQ(o.json_body()["warnings"].size(), 1u) << o.body;
  EXPECT_NE(o.json_body()["warnings"][0].get<std::string>().find("messages[1].images: 2 image(s)"), std::string::npos) << o.body;
}

// A multi-page TIFF: an image part's "page" picks the page (0, the first, by default, as the reference
// opens the file); a page past the last is a 400 that says how many there are.
TEST_F(ServerApi, PageOfAMultiPageTiff) {
  start(test::test_options());
  auto ask = [&](json url_extra) {
    json url = json{{"url", data_uri("tiff_multipage_3.tif", "image/tiff")}};
    for (auto it = url_extra.begin(); it != url_extra.end(); ++it) url[it.key()] = it.value();
    json msg = json{{"role", "user"}, {"content", json::array({json{{"type", "image_url"}, {"image_url", url}},
                                                               json{{"type", "text"}, {"text", "What?"}}})}};
    return post("/v1/chat/completions", json{{"messages", json::array({msg})}, {"max_tokens", 2}, {"temperature", 0}});
  };
  auto tokens = [](const Reply& r) { return r.json_body()["timings"]["image_tokens"].get<int>(); };
  const Reply first = ask(json::object()), page0 = ask(json{{"page", 0}}), page1 = ask(json{{"page", 1}});
  ASSERT_EQ(first.status, 200) << first.body;
  ASSERT_EQ(page1.status, 200) << page1.body;
  // Page 0 is 40x30 (224x320 after smart_resize: 70 tokens), page 1 is 20x10 (192x384: 72 tokens).
  EXPECT_EQ(tokens(first), 70);
  EXPECT_EQ(tokens(page0), 70);
  EXPECT_EQ(tokens(page1), 72);
  const Reply past = ask(json{{"page", 3}});
  EXPECT_EQ(past.status, 400);
  EXPECT_NE(past.body.find("the file has 3"), std::string::npos) << past.body;
  EXPECT_EQ(ask(json{{"page", -1}}).status, 400);
  EXPECT_EQ(ask(json{{"page", "2"}}).status, 400);
}

// Per-image resolution in a message's image part: qwen-vl-utils' fields and OpenAI's detail, bounded by the
// server's limit; the same bounds per image or server-wide give the same prompt and the same answer.
TEST_F(ServerApi, PerImageResolution) {
  server::ServerOptions o = test::test_options();
  o.max_pixels = 160000;
  start(o);
  auto ask = [&](json extra_part, json extra_url) {
    json url = json{{"url", data_uri("png_rgb8_448x448.png")}};
    for (auto it = extra_url.begin(); it != extra_url.end(); ++it) url[it.key()] = it.value();
    json part = json{{"type", "image_url"}, {"image_url", url}};
    for (auto it = extra_part.begin(); it != extra_part.end(); ++it) part[it.key()] = it.value();
    json msg = json{{"role", "user"}, {"content", json::array({part, json{{"type", "text"}, {"text", "What?"}}})}};
    return post("/v1/chat/completions", json{{"messages", json::array({msg})}, {"max_tokens", 6}, {"temperature", 0}});
  };
  auto tokens = [](const Reply& r) { return r.json_body()["timings"]["image_tokens"].get<int>(); };
  // 448² under the server's 160000-pixel limit: 384×384 (smart_resize), 144 tokens.
  const Reply server_wide = ask(json::object(), json::object());
  ASSERT_EQ(server_wide.status, 200) << server_wide.body;
  EXPECT_EQ(tokens(server_wide), 144);
  EXPECT_EQ(tokens(ask(json{{"resized_height", 64}, {"resized_width", 96}}, json::object())), 6);
  EXPECT_EQ(tokens(ask(json::object(), json{{"resized_height", 100}, {"resized_width", 130}})), 12);  // 96 × 128
  EXPECT_EQ(tokens(ask(json::object(), json{{"detail", "low"}})), 64);   // the model's min_pixels: 256²
  EXPECT_EQ(tokens(ask(json::object(), json{{"detail", "high"}})), 144);
  EXPECT_EQ(tokens(ask(json{{"max_pixels", 100000}}, json::object())), 81);  // 288²
  EXPECT_EQ(tokens(ask(json{{"max_pixels", 10000000}}, json::object())), 144) << "bounded by the server";
  EXPECT_EQ(tokens(ask(json{{"min_pixels", 10000000}}, json::object())), 144) << "bounded by the server";
  EXPECT_EQ(tokens(ask(json{{"resized_height", 4000}, {"resized_width", 4000}}, json::object())), 144) << "bounded";
  const Reply bad = ask(json{{"resized_height", 64}}, json::object());
  EXPECT_EQ(bad.status, 400);
  EXPECT_NE(bad.body.find("resized_width"), std::string::npos) << bad.body;
  EXPECT_EQ(ask(json::object(), json{{"detail", "ultra"}}).status, 400);
  EXPECT_EQ(ask(json{{"max_pixels", -5}}, json::object()).status, 400);
  // The context budget at the edge counts each image at its own size: 8 images of 144 tokens are over the
  // test server's 1024-token context, 8 at detail low (64 tokens) fit.
  auto many = [&](json url_extra) {
    json url = json{{"url", data_uri("png_rgb8_448x448.png")}};
    for (auto it = url_extra.begin(); it != url_extra.end(); ++it) url[it.key()] = it.value();
    json parts = json::array();
    for (int i = 0; i < 8; ++i) parts.push_back(json{{"type", "image_url"}, {"image_url", url}});
    parts.push_back(json{{"type", "text"}, {"text", "Compare them."}});
    return post("/v1/chat/completions", json{{"messages", json::array({json{{"role", "user"}, {"content", parts}}})},
                                             {"max_tokens", 2}, {"temperature", 0}});
  };
  const Reply over = many(json::object());
  EXPECT_EQ(over.status, 400) << over.body;
  EXPECT_NE(over.body.find("over the context"), std::string::npos) << over.body;
  EXPECT_EQ(over.json_body()["error"]["code"], "context_length_exceeded") << over.body;  // refused before the engine
  const Reply fits = many(json{{"detail", "low"}});
  ASSERT_EQ(fits.status, 200) << fits.body;
  EXPECT_EQ(tokens(fits), 8 * 64);
  // Per image = server-wide: a server limited to 100000 pixels answers a plain request as this one did.
  const Reply per_image = ask(json{{"max_pixels", 100000}}, json::object());
  server_.reset();
  o.max_pixels = 100000;
  start(o);
  const Reply global = ask(json::object(), json::object());
  EXPECT_EQ(tokens(global), tokens(per_image));
  EXPECT_EQ(global.json_body()["usage"]["prompt_tokens"], per_image.json_body()["usage"]["prompt_tokens"]);
  EXPECT_EQ(global.json_body()["choices"][0]["message"]["content"], per_image.json_body()["choices"][0]["message"]["content"]);
}

TEST_F(ServerApi, OpenAIStreamingMatchesNonStreaming) {
  start();
  const std::string whole = post("/v1/chat/completions", chat_body("Count to ten.", 12))
                                .json_body()["choices"][0]["message"]["content"];
  json body = chat_body("Count to ten.", 12, /*stream=*/true);
  body["stream_options"] = json{{"include_usage", true}};
  Reply r = post_stream("/v1/chat/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_NE(r.headers.find("Content-Type")->second.find("text/event-stream"), std::string::npos);
  std::vector<std::string> events = sse_events(r.body);
  ASSERT_GE(events.size(), 4u) << r.body;
  EXPECT_EQ(events.back(), "[DONE]");
  json first = json::parse(events[0]);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  std::string text;
  json finish, usage;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    json e = json::parse(events[i]);
    if (!e["choices"].empty()) {
      const json& c = e["choices"][0];
      if (c["delta"].contains("content")) text += c["delta"]["content"].get<std::string>();
      if (!c["finish_reason"].is_null()) finish = e;
    }
    if (e["usage"].is_object()) usage = e;
  }
  EXPECT_EQ(text, whole);
  ASSERT_TRUE(finish.is_object());
  EXPECT_EQ(finish["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(finish["timings"]["ttft_ms"].is_number());
  ASSERT_TRUE(usage.is_object()) << r.body;
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 12);
}

// OpenAI's n: choice i is the answer a single request with seed + i gets; the image is encoded once and the
// prompt read once (the others restore it); streamed, the choices come side by side, each with its role, its
// pieces (joined: the non-streamed text) and its finish, then the usage of all. With 2 slots the third choice
// starts when one ends. /v1/completions: prompts × n choices, prompt i's choice j at i * n + j.
TEST_F(ServerApi, OpenAIChoicesShareThePromptAndStreamSideBySide) {
  start();
  json body = chat_body("What is in the picture?", 6);
  body["messages"][0]["content"] = json::array({json{{"type", "image_url"}, {"image_url", json{{"url", data_uri("png_rgba8_33x17.png")}}}},
                                                json{{"type", "text"}, {"text", "What is in the picture?"}}});
  body["temperature"] = 1.5;
  body["seed"] = 77;
  body["n"] = 3;
  Reply r = post("/v1/chat/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  const json j = r.json_body();
  ASSERT_EQ(j["choices"].size(), 3u) << r.body;
  const std::string metrics = get("/metrics").body;
  EXPECT_NE(metrics.find("qvl_images_encoded_total 1\n"), std::string::npos) << metrics;
  std::vector<std::string> texts;
  int completion_tokens = 0, prompt_tokens = 0;
  for (int c = 0; c < 3; ++c) {
    EXPECT_EQ(j["choices"][c]["index"], c);
    json one = body;
    one.erase("n");
    one["seed"] = 77 + c;
    const json alone = post("/v1/chat/completions", one).json_body();
    texts.push_back(j["choices"][c]["message"]["content"]);
    EXPECT_EQ(texts.back(), alone["choices"][0]["message"]["content"]) << "choice " << c;
    completion_tokens += alone["usage"]["completion_tokens"].get<int>();
    prompt_tokens = alone["usage"]["prompt_tokens"];
  }
  EXPECT_TRUE(texts[0] != texts[1] || texts[0] != texts[2]) << "the seeds give the same answers";
  EXPECT_EQ(j["usage"]["prompt_tokens"], prompt_tokens) << "the prompt counts once";
  EXPECT_EQ(j["usage"]["completion_tokens"], completion_tokens);

  body["stream"] = true;
  body["stream_options"] = json{{"include_usage", true}};
  Reply s = post_stream("/v1/chat/completions", body);
  ASSERT_EQ(s.status, 200) << s.body;
  std::vector<std::string> events = sse_events(s.body);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back(), "[DONE]");
  std::vector<std::string> streamed(3);
  std::vector<int> roles(3, 0), finishes(3, 0);
  json usage;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    const json e = json::parse(events[i]);
    if (e["choices"].empty()) {
      usage = e["usage"];
      continue;
    }
    ASSERT_EQ(e["choices"].size(), 1u);
    const json& ch = e["choices"][0];
    const int c = ch["index"];
    ASSERT_TRUE(c >= 0 && c < 3) << events[i];
    EXPECT_EQ(finishes[static_cast<size_t>(c)], 0) << "a piece after choice " << c << "'s finish";
    if (ch["delta"].contains("role")) ++roles[static_cast<size_t>(c)];
    if (ch["delta"].contains("content")) streamed[static_cast<size_t>(c)] += ch["delta"]["content"].get<std::string>();
    if (!ch["finish_reason"].is_null()) ++finishes[static_cast<size_t>(c)];
  }
  for (size_t c = 0; c < 3; ++c) {
    EXPECT_EQ(roles[c], 1) << "choice " << c;
    EXPECT_EQ(finishes[c], 1) << "choice " << c;
    EXPECT_EQ(streamed[c], texts[c]) << "choice " << c;
  }
  ASSERT_TRUE(usage.is_object()) << s.body;
  EXPECT_EQ(usage["completion_tokens"], completion_tokens);

  // The legacy completion: two prompts, two choices each, streamed and not.
  json legacy{{"prompt", json::array({"One", "Two"})}, {"n", 2}, {"max_tokens", 4}, {"temperature", 1.5}, {"seed", 5}};
  const json whole = post("/v1/completions", legacy).json_body();
  ASSERT_EQ(whole["choices"].size(), 4u) << whole.dump();
  for (int c = 0; c < 4; ++c) {
    EXPECT_EQ(whole["choices"][c]["index"], c);
    const json alone =
        post("/v1/completions", json{{"prompt", c < 2 ? "One" : "Two"}, {"max_tokens", 4}, {"temperature", 1.5}, {"seed", 5 + c % 2}})
            .json_body();
    EXPECT_EQ(whole["choices"][c]["text"], alone["choices"][0]["text"]) << "choice " << c;
  }
  legacy["stream"] = true;
  legacy["echo"] = true;
  Reply ls = post_stream("/v1/completions", legacy);
  ASSERT_EQ(ls.status, 200) << ls.body;
  std::vector<std::string> ltexts(4);
  std::vector<int> lfinishes(4, 0);
  for (const std::string& ev : sse_events(ls.body)) {
    if (ev == "[DONE]") continue;
    const json e = json::parse(ev);
    ASSERT_EQ(e["choices"].size(), 1u) << ev;
    const int c = e["choices"][0]["index"];
    ASSERT_TRUE(c >= 0 && c < 4) << ev;
    ltexts[static_cast<size_t>(c)] += e["choices"][0]["text"].get<std::string>();
    if (!e["choices"][0]["finish_reason"].is_null()) ++lfinishes[static_cast<size_t>(c)];
  }
  for (size_t c = 0; c < 4; ++c) {
    EXPECT_EQ(ltexts[c], (c < 2 ? "One" : "Two") + whole["choices"][c]["text"].get<std::string>()) << "choice " << c;
    EXPECT_EQ(lfinishes[c], 1) << "choice " << c;
  }
  // Too many answers: n times the prompts over the limit, and best_of other than n.
  EXPECT_EQ(post("/v1/completions", json{{"prompt", json::array({"a", "b", "c"})}, {"n", 6}}).status, 400);
  EXPECT_EQ(post("/v1/completions", json{{"prompt", "a"}, {"n", 2}, {"best_of", 3}}).status, 400);
  EXPECT_EQ(post("/v1/completions", json{{"prompt", "a"}, {"n", 2}, {"best_of", 2}, {"max_tokens", 1}}).status, 200);
}

// More choices than the server has slots and queue places (one slot, no queue): the later ones wait while the
// earlier ones run instead of failing the request with 503; streamed, the same answers come.
TEST_F(ServerApi, ChoicesBeyondTheSlotsAndQueueWaitTheirTurn) {
  server::ServerOptions o = test_options();
  o.parallel = 1;
  o.queue = 0;
  start(o);
  json body = chat_body("Tell a story.", 5);
  body["temperature"] = 1.5;
  body["seed"] = 9;
  body["n"] = 4;
  Reply r = post("/v1/chat/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  const json j = r.json_body();
  ASSERT_EQ(j["choices"].size(), 4u);
  body["stream"] = true;
  Reply s = post_stream("/v1/chat/completions", body);
  ASSERT_EQ(s.status, 200) << s.body;
  std::vector<std::string> streamed(4);
  for (const std::string& ev : sse_events(s.body)) {
    if (ev == "[DONE]") continue;
    const json e = json::parse(ev);
    ASSERT_FALSE(e.contains("error")) << ev;
    const json& ch = e["choices"][0];
    if (ch["delta"].contains("content")) streamed[ch["index"].get<size_t>()] += ch["delta"]["content"].get<std::string>();
  }
  for (size_t c = 0; c < 4; ++c) EXPECT_EQ(streamed[c], j["choices"][c]["message"]["content"]) << "choice " << c;
  // The same across several prompts of a legacy completion: prompt 1 waits for prompt 0's answers.
  Reply l = post("/v1/completions", json{{"prompt", json::array({"One", "Two"})}, {"n", 2}, {"max_tokens", 3}});
  ASSERT_EQ(l.status, 200) << l.body;
  EXPECT_EQ(l.json_body()["choices"].size(), 4u);
}

TEST_F(ServerApi, OpenAIStopStringsAndSampling) {
  start();
  const std::string whole = post("/v1/chat/completions", chat_body("Tell a story.", 24))
                                .json_body()["choices"][0]["message"]["content"];
  ASSERT_GT(whole.size(), 12u);
  // A stop string taken from the middle of the greedy answer (on UTF-8 character boundaries) cuts the answer
  // right before its first match.
  auto boundary = [&](size_t i) {
    while (i < whole.size() && (static_cast<unsigned char>(whole[i]) & 0xC0) == 0x80) ++i;
    return i;
  };
  const size_t from = boundary(whole.size() / 2), to = boundary(from + 3);
  ASSERT_LT(from, to);
  const std::string stop = whole.substr(from, to - from);
  json body = chat_body("Tell a story.", 24);
  body["stop"] = json::array({stop, "never-appears"});
  json j = post("/v1/chat/completions", body).json_body();
  EXPECT_EQ(j["choices"][0]["message"]["content"], whole.substr(0, whole.find(stop)));
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");

  // Seeded sampling repeats itself.
  json s = chat_body("Tell a story.", 10);
  s["temperature"] = 1.0;
  s["top_p"] = 0.9;
  s["top_k"] = 40;
  s["min_p"] = 0.01;
  s["presence_penalty"] = 0.5;
  s["frequency_penalty"] = 0.2;
  s["repetition_penalty"] = 1.1;
  s["seed"] = 1234;
  Reply a = post("/v1/chat/completions", s), b = post("/v1/chat/completions", s);
  ASSERT_EQ(a.status, 200) << a.body;
  EXPECT_EQ(a.json_body()["choices"][0]["message"]["content"], b.json_body()["choices"][0]["message"]["content"]);
}

TEST_F(ServerApi, OllamaChat) {
  start();
  json body{{"model", "tiny"},
            {"messages", json::array({json{{"role", "user"},
                                           {"content", "What is this?"},
                                           {"images", json::array({image_base64("png_rgba8_33x17.png")})}}})},
            {"options", json{{"num_predict", 6}, {"temperature", 0}, {"seed", 3}, {"top_k", 10}}},
            {"stream", false}};
  Reply r = post("/api/chat", body);
  ASSERT_EQ(r.status, 200) << r.body;
  json j = r.json_body();
  EXPECT_EQ(j["model"], "tiny");
  EXPECT_EQ(j["message"]["role"], "assistant");
  EXPECT_TRUE(j["done"].get<bool>());
  EXPECT_EQ(j["done_reason"], "length");
  EXPECT_EQ(j["eval_count"], 6);
  EXPECT_GT(j["prompt_eval_count"].get<int>(), 16);
  EXPECT_GT(j["total_duration"].get<int64_t>(), 0);
  EXPECT_GT(j["eval_duration"].get<int64_t>(), 0);
  EXPECT_TRUE(j["created_at"].is_string());

  body["stream"] = true;  // and the default: streams
  Reply s = post_stream("/api/chat", body);
  ASSERT_EQ(s.status, 200) << s.body;
  std::vector<json> lines = ndjson_lines(s.body);
  ASSERT_GE(lines.size(), 2u);
  std::string text;
  for (size_t i = 0; i + 1 < lines.size(); ++i) {
    EXPECT_FALSE(lines[i]["done"].get<bool>());
    text += lines[i]["message"]["content"].get<std::string>();
  }
  EXPECT_TRUE(lines.back()["done"].get<bool>());
  EXPECT_EQ(lines.back()["eval_count"], 6);
  EXPECT_EQ(text, j["message"]["content"]);

  // No messages: Ollama's "load the model" call, and with keep_alive 0 its "unload" call.
  Reply load = post("/api/chat", json{{"model", "tiny"}});
  ASSERT_EQ(load.status, 200) << load.body;
  EXPECT_EQ(load.json_body()["done_reason"], "load");
  for (const json& zero : {json(0), json("0"), json("0s")}) {
    Reply unload = post("/api/chat", json{{"model", "tiny"}, {"messages", json::array()}, {"keep_alive", zero}});
    ASSERT_EQ(unload.status, 200) << unload.body;
    EXPECT_EQ(unload.json_body()["done_reason"], "unload") << zero;
  }

  // seed -1 is Ollama's default: a random seed each time, so sampled answers differ (four of them agreeing
  // on 12 random-weight tokens at temperature 1.5 does not happen); a given seed repeats.
  json sampled{{"model", "tiny"}, {"stream", false}, {"messages", json::array({json{{"role", "user"}, {"content", "Story"}}})},
               {"options", json{{"num_predict", 12}, {"temperature", 1.5}, {"top_k", 0}, {"top_p", 1}, {"seed", -1}}}};
  std::set<std::string> answers;
  for (int i = 0; i < 4; ++i) answers.insert(post("/api/chat", sampled).json_body()["message"]["content"].get<std::string>());
  EXPECT_GT(answers.size(), 1u);
  sampled["options"]["seed"] = 7;
  EXPECT_EQ(post("/api/chat", sampled).json_body()["message"], post("/api/chat", sampled).json_body()["message"]);
}

TEST_F(ServerApi, OllamaGenerate) {
  start();
  json body{{"model", "tiny"},
            {"prompt", "Describe the image."},
            {"system", "You are terse."},
            {"images", json::array({image_base64("jpeg_420_31x33.jpg")})},
            {"options", json{{"num_predict", 5}, {"temperature", 0}}}};
  Reply s = post_stream("/api/generate", body);
  ASSERT_EQ(s.status, 200) << s.body;
  EXPECT_NE(s.headers.find("Content-Type")->second.find("application/x-ndjson"), std::string::npos);
  std::vector<json> lines = ndjson_lines(s.body);
  ASSERT_GE(lines.size(), 2u);
  std::string text;
  for (const json& l : lines) text += l["response"].get<std::string>();
  EXPECT_TRUE(lines.back()["done"].get<bool>());
  EXPECT_EQ(lines.back()["eval_count"], 5);

  body["stream"] = false;
  Reply r = post("/api/generate", body);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json_body()["response"], text);
}

TEST_F(ServerApi, LegacyVisionCompletion) {
  start();
  auto bytes = read_file_bytes(data_dir() + "/images/png_rgba8_33x17.png");
  ASSERT_TRUE(bytes.ok());
  httplib::MultipartFormDataItems form{
      {"image", std::string(bytes->begin(), bytes->end()), "photo.png", "image/png"},
      {"max_tokens", "4", "", ""},
  };
  auto r = client()->Post("/v1/vision/completion", form);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  json j = json::parse(r->body);
  EXPECT_TRUE(j["result"].is_string());
  EXPECT_FALSE(j.contains("error"));

  httplib::MultipartFormDataItems no_image{{"prompt", "hi", "", ""}};
  auto bad = client()->Post("/v1/vision/completion", no_image);
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  EXPECT_TRUE(json::parse(bad->body)["error"].is_string());
}

TEST_F(ServerApi, LegacyChatStream) {
  start();
  Reply r = post_stream("/chat", json{{"image", data_uri("png_rgba8_33x17.png")}, {"question", "What?"}, {"max_tokens", 5}});
  ASSERT_EQ(r.status, 200) << r.body;
  std::vector<std::string> events = sse_events(r.body);
  ASSERT_GE(events.size(), 2u) << r.body;
  EXPECT_EQ(events.back(), "[DONE]");
  for (size_t i = 0; i + 1 < events.size(); ++i) EXPECT_TRUE(json::parse(events[i])["delta"].is_string());

  Reply bad = post("/chat", json{{"image", image_base64("png_rgba8_33x17.png")}});
  EXPECT_EQ(bad.status, 400);
  EXPECT_NE(bad.json_body()["error"].get<std::string>().find("question"), std::string::npos);
}

TEST_F(ServerApi, MetricsCountersMove) {
  start();
  Reply before = get("/metrics");
  ASSERT_EQ(before.status, 200);
  EXPECT_NE(before.body.find("# TYPE qvl_requests_total counter"), std::string::npos);
  EXPECT_NE(before.body.find("qvl_generated_tokens_total 0"), std::string::npos);
  ASSERT_EQ(post("/v1/chat/completions", chat_body("hi", 7)).status, 200);
  ASSERT_EQ(post("/v1/chat/completions", json{{"messages", 3}}).status, 400);
  // A request is counted once its answer is written, a moment after the client has it.
  const std::string ok_line = "qvl_requests_total{endpoint=\"/v1/chat/completions\",status=\"200\"} 1";
  const std::string bad_line = "qvl_requests_total{endpoint=\"/v1/chat/completions\",status=\"400\"} 1";
  Reply after;
  EXPECT_TRUE(wait_for([&] {
    after = get("/metrics");
    return after.body.find(ok_line) != std::string::npos && after.body.find(bad_line) != std::string::npos;
  }, 5)) << after.body;
  EXPECT_NE(after.body.find("qvl_generated_tokens_total 7"), std::string::npos);
  EXPECT_NE(after.body.find("qvl_time_to_first_token_seconds_count 1"), std::string::npos);
  EXPECT_NE(after.body.find("qvl_request_duration_seconds_count 1"), std::string::npos);
  EXPECT_NE(after.body.find("qvl_busy_slots 0"), std::string::npos);
  EXPECT_NE(after.body.find("qvl_queue_depth 0"), std::string::npos);
}

}  // namespace
}  // namespace qvl::test
