// Serving many requests at once (engine/scheduler): batched decoding gives every request the tokens it gets
// alone; prompts read in slices between decode rounds; the image and prefix caches give the same logits as
// a cold run, are bounded by their budgets, and an image sent by several clients at once is encoded once.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "engine/scheduler.h"
#include "engine/session.h"
#include "test_server_fixture.h"

namespace qvl::test {
namespace {

using namespace std::chrono_literals;

// A picture that differs with `seed`: smooth gradients plus a pattern.
ImageRGB test_image(int w, int h, int seed) {
  ImageRGB im;
  im.width = w;
  im.height = h;
  im.pixels.resize(static_cast<size_t>(w) * h * 3);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < 3; ++c)
        im.pixels[(static_cast<size_t>(y) * w + x) * 3 + c] =
            static_cast<uint8_t>((x * (3 + seed) + y * (5 + c) + seed * 40 + ((x / 4 + y / 4 + seed) % 2) * 60) & 255);
  return im;
}

struct Req {
  std::vector<ChatMessage> messages;
  std::vector<ImageRGB> images;
  GenerateOptions options;
};

Req make_request(const std::string& text, int n_images, int seed, int max_tokens) {
  Req r;
  r.messages.push_back(user_message(static_cast<size_t>(n_images), text));
  for (int k = 0; k < n_images; ++k) r.images.push_back(test_image(64 + 32 * ((seed + k) % 3), 64, seed + k));
  r.options.sampling.temperature = 0;  // greedy
  r.options.max_tokens = max_tokens;
  r.options.ignore_eos = true;
  r.options.context = 1024;
  r.options.image.min_pixels = 3136;
  r.options.image.max_pixels = 50176;
  r.options.prefill_chunk = 7;  // several slices even for short prompts
  return r;
}

class Batching : public ::testing::TestWithParam<bool> {  // param: quantized (default) weight types
 protected:
  static WeightTypes types(bool quantized) { return quantized ? default_weight_types() : WeightTypes{}; }
  const Model& model() {
    auto& m = GetParam() ? quantized_ : plain_;
    if (!m) {
      auto loaded = Model::load(tiny_model_dir(), types(GetParam()), 1);
      EXPECT_TRUE(loaded.ok()) << loaded.status().message();
      m = std::move(loaded).value();
    }
    return *m;
  }
  // The request alone, through Session::start/step: the reference.
  GenerateResult alone(const Req& r) {
    ThreadPool pool(1);
    auto g = generate(model(), pool, r.messages, r.images, r.options);
    EXPECT_TRUE(g.ok()) << g.status().message();
    return g.ok() ? *g : GenerateResult{};
  }
  std::unique_ptr<Scheduler> scheduler(int parallel, int slice_tokens = 16, size_t image_cache = 64 << 20,
                                       size_t prefix_cache = 64 << 20) {
    SchedulerOptions o;
    o.parallel = parallel;
    o.queue = 32;
    o.slice_tokens = slice_tokens;
    o.image_cache_bytes = image_cache;
    o.prefix_cache_bytes = prefix_cache;
    const bool q = GetParam();
    o.load = [q]() { return Model::load(tiny_model_dir(), types(q), 1); };
    o.on_round = [this](int64_t prompt, int64_t generated, const std::vector<double>&) {
      rounds_.fetch_add(1);
      max_prompt_per_round_ = std::max<int64_t>(max_prompt_per_round_.load(), prompt);
      (void)generated;
    };
    auto s = std::make_unique<Scheduler>(std::move(o));
    s->start();
    // Loading takes seconds under the sanitizers.
    const auto deadline = test::deadline_in(180);
    while (s->state() == LoadState::kLoading && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(10ms);
    EXPECT_EQ(s->state(), LoadState::kReady);
    return s;
  }
  static std::shared_ptr<Job> submit(Scheduler& s, const Req& r, double timeout_s = 0) {
    InferenceRequest ir{r.messages, r.images, r.options, timeout_s, {}, {}};
    Scheduler::Submitted sub = s.submit(std::move(ir));
    EXPECT_EQ(sub.error, SubmitError::kNone);
    return sub.job;
  }
  static JobUpdate wait_end(const std::shared_ptr<Job>& job) {
    if (!job) {
      ADD_FAILURE() << "no job (not submitted)";
      return {};
    }
    const auto deadline = test::deadline_in(300);
    while (std::chrono::steady_clock::now() < deadline) {
      JobUpdate u = job->wait(50ms);
      if (u.finished) return u;
    }
    ADD_FAILURE() << "the job did not finish";
    return {};
  }

  std::atomic<int64_t> rounds_{0}, max_prompt_per_round_{0};
  static std::unique_ptr<Model> plain_, quantized_;
};
std::unique_ptr<Model> Batching::plain_, Batching::quantized_;

// One to four slots, prompts of different lengths with zero, one or two images: each request's greedy
// tokens are the ones it gets alone.
TEST_P(Batching, BatchedDecodeGivesTheTokensOfEachRequestAlone) {
  std::vector<Req> reqs = {make_request("Hi", 0, 1, 12), make_request("Describe this picture in detail please", 1, 2, 9),
                           make_request("Compare", 2, 3, 14), make_request("A much longer question about nothing at all, "
                                                                           "with many words to read first", 0, 4, 6)};
  std::vector<GenerateResult> ref;
  for (const Req& r : reqs) ref.push_back(alone(r));
  for (int parallel = 1; parallel <= 4; ++parallel) {
    auto s = scheduler(parallel);
    std::vector<std::shared_ptr<Job>> jobs;
    for (const Req& r : reqs) jobs.push_back(submit(*s, r));
    for (size_t i = 0; i < reqs.size(); ++i) {
      JobUpdate u = wait_end(jobs[i]);
      ASSERT_EQ(u.error, JobError::kNone) << u.error_message;
      EXPECT_EQ(u.result.tokens, ref[i].tokens) << "request " << i << " with " << parallel << " slots";
      EXPECT_EQ(u.result.text, ref[i].text);
    }
  }
}

// Requests join while others decode, one is cancelled and one times out mid-batch: the rest are unchanged.
TEST_P(Batching, JoiningCancellingAndTimingOutMidBatchLeaveTheOthersUnchanged) {
  Req a = make_request("First stream", 1, 5, 40), b = make_request("Second", 0, 6, 30),
      c = make_request("Third, cancelled", 0, 7, 400), d = make_request("Fourth, times out", 1, 8, 100000);
  d.options.context = 4096;
  const GenerateResult ra = alone(a), rb = alone(b);
  auto s = scheduler(4);
  auto ja = submit(*s, a);
  auto jc = submit(*s, c);
  // b joins once a streams.
  for (const auto deadline = test::deadline_in(8); std::chrono::steady_clock::now() < deadline;) {
    if (!ja->wait(20ms).text.empty()) break;
  }
  auto jb = submit(*s, b);
  auto jd = submit(*s, d, /*timeout_s=*/0.5);
  std::this_thread::sleep_for(50ms);
  jc->cancel();
  EXPECT_EQ(wait_end(jc).error, JobError::kCancelled);
  EXPECT_EQ(wait_end(jd).error, JobError::kTimeout);
  JobUpdate ua = wait_end(ja), ub = wait_end(jb);
  EXPECT_EQ(ua.result.tokens, ra.tokens);
  EXPECT_EQ(ub.result.tokens, rb.tokens);
}

// While one request streams, another's images and prompt are read in slices: the stream gets a token every
// round, and no round reads more than slice_tokens prompt tokens.
TEST_P(Batching, PromptsAreReadInSlicesBetweenDecodeRounds) {
  Req a = make_request("Stream", 0, 9, 60);
  Req b = make_request(std::string(300, 'x') + " a long prompt with two images", 2, 10, 3);
  auto s = scheduler(2, /*slice_tokens=*/8);
  auto ja = submit(*s, a);
  for (const auto deadline = test::deadline_in(8); std::chrono::steady_clock::now() < deadline;)
    if (!ja->wait(20ms).text.empty()) break;
  const int64_t rounds_before = rounds_.load();
  auto jb = submit(*s, b);
  JobUpdate ub = wait_end(jb);
  ASSERT_EQ(ub.error, JobError::kNone) << ub.error_message;
  JobUpdate ua = wait_end(ja);
  EXPECT_LE(max_prompt_per_round_.load(), 8);
  // b's prompt (> 100 tokens at 8 a round) took many rounds, and a streamed through them.
  EXPECT_GT(rounds_.load() - rounds_before, ub.result.timings.prompt_tokens / 8);
  EXPECT_EQ(ua.result.tokens, alone(a).tokens);
  EXPECT_EQ(ub.result.tokens, alone(b).tokens);
}

// The image cache: the second request with the same image is not encoded again and its logits equal the
// cold run's; the prefix cache: the next turn of a conversation reads only its new tokens, same logits.
TEST_P(Batching, CacheHitsGiveTheLogitsOfAColdRun) {
  ThreadPool pool(1);
  Req turn1 = make_request("What is in this picture?", 1, 11, 6);
  ImageCache images(64 << 20);
  PrefixCache prefixes(64 << 20);
  SessionCaches caches{&images, &prefixes};

  std::vector<float> cold_logits;
  std::string answer;
  {
    Session cold(model());
    ASSERT_TRUE(cold.start(pool, turn1.messages, turn1.images, turn1.options).ok());
    cold_logits = cold.logits();
  }
  {
    Session first(model(), caches);  // fills both caches
    ASSERT_TRUE(first.start(pool, turn1.messages, turn1.images, turn1.options).ok());
    EXPECT_EQ(first.result().timings.cached_images, 0);
    EXPECT_EQ(first.logits(), cold_logits);
    while (!first.done()) first.step(pool);
    answer = first.result().text;
  }
  {
    // Only the image cache (a different question about the same picture).
    Req other = make_request("Another question?", 1, 11, 6);
    Session cold(model());
    ASSERT_TRUE(cold.start(pool, other.messages, other.images, other.options).ok());
    Session warm(model(), SessionCaches{&images, nullptr});
    ASSERT_TRUE(warm.start(pool, other.messages, other.images, other.options).ok());
    EXPECT_EQ(warm.result().timings.cached_images, 1);
    EXPECT_EQ(warm.logits(), cold.logits());
  }
  // Turn 2: the whole conversation again, with the answer and a new question.
  Req turn2 = turn1;
  ChatMessage assistant;
  assistant.role = "assistant";
  assistant.content_string = answer;
  turn2.messages.push_back(assistant);
  turn2.messages.push_back(user_message(0, "And what colour is it?"));
  Session cold(model());
  ASSERT_TRUE(cold.start(pool, turn2.messages, turn2.images, turn2.options).ok());
  Session warm(model(), caches);
  ASSERT_TRUE(warm.start(pool, turn2.messages, turn2.images, turn2.options).ok());
  const GenerateTimings& t = warm.result().timings;
  EXPECT_GT(t.cached_tokens, t.image_tokens) << "the image and the first turn come from the cache";
  EXPECT_LT(t.cached_tokens, t.prompt_tokens);
  EXPECT_EQ(warm.logits(), cold.logits());
  while (!cold.done()) cold.step(pool);
  while (!warm.done()) warm.step(pool);
  EXPECT_EQ(warm.result().tokens, cold.result().tokens);

  // A different image at the same place matches only up to the image.
  Req other_image = turn2;
  other_image.images[0] = test_image(64, 64, 99);
  Session diff(model(), caches);
  ASSERT_TRUE(diff.start(pool, other_image.messages, other_image.images, other_image.options).ok());
  EXPECT_GT(diff.result().timings.cached_tokens, 0);
  EXPECT_LT(diff.result().timings.cached_tokens, t.cached_tokens - t.image_tokens + 1);
  Session diff_cold(model());
  ASSERT_TRUE(diff_cold.start(pool, other_image.messages, other_image.images, other_image.options).ok());
  EXPECT_EQ(diff.logits(), diff_cold.logits());
}

// Every row's result is independent of the rows computed with it (the kernels' tiles and attention), so a
// prompt read in slices of any size, or token by token, gives the same bits: what makes batched decoding
// and prefix-cache hits exact.
TEST_P(Batching, SliceSizeDoesNotChangeTheLogits) {
  ThreadPool pool(1);
  Req r = make_request("Hello there, how are you doing today my friend? Tell me about this picture.", 1, 30, 1);
  std::vector<float> ref;
  for (int chunk : {1, 3, 4, 7, 64, 0}) {
    r.options.prefill_chunk = chunk;
    Session s(model());
    ASSERT_TRUE(s.start(pool, r.messages, r.images, r.options).ok());
    if (ref.empty()) {
      ref = s.logits();
    } else {
      EXPECT_EQ(s.logits(), ref) << "prefill_chunk " << chunk;
    }
  }
}

// Three clients send the same image at once: one tower pass; a fourth later is a cache hit.
TEST_P(Batching, TheSameImageFromSeveralClientsIsEncodedOnce) {
  auto s = scheduler(3);
  std::vector<std::shared_ptr<Job>> jobs;
  for (int i = 0; i < 3; ++i) jobs.push_back(submit(*s, make_request("Question " + std::to_string(i), 1, 20, 4)));
  for (auto& j : jobs) EXPECT_EQ(wait_end(j).error, JobError::kNone);
  EXPECT_EQ(s->cache_stats().images_encoded, 1u);
  JobUpdate later = wait_end(submit(*s, make_request("Later", 1, 20, 2)));
  EXPECT_EQ(later.result.timings.cached_images, 1);
  EXPECT_EQ(s->cache_stats().images_encoded, 1u);
}

// A request's n choices (submit_choices in the server): the first keeps its prompt in the prefix cache as soon
// as it is read, the others wait in the queue until then and restore it (all but the last prompt token, whose
// logits they need), so the image is encoded once; each samples with its own seed and gets exactly the tokens
// it gets alone. With one slot the others start after the first ends (its longer entry holds the prompt); with
// no prefix cache they read the prompt themselves, same tokens.
TEST_P(Batching, ChoicesOfOnePromptReadItOnceAndKeepTheirOwnSeeds) {
  Req r = make_request("Describe the picture in a few words", 1, 40, 10);
  r.options.sampling.temperature = 1.5f;  // sampled: the seeds tell the choices apart
  r.options.sampling.top_k = 0;
  r.options.sampling.top_p = 1.0f;
  constexpr int kChoices = 3;
  std::vector<GenerateResult> ref;
  for (int c = 0; c < kChoices; ++c) {
    Req rc = r;
    rc.options.sampling.seed = 1000 + static_cast<uint64_t>(c);
    ref.push_back(alone(rc));
  }
  EXPECT_TRUE(ref[0].tokens != ref[1].tokens || ref[0].tokens != ref[2].tokens) << "the seeds give the same answers";
  struct Case {
    int parallel;
    size_t prefix_cache;
  };
  for (const Case k : {Case{3, size_t{64} << 20}, Case{1, size_t{64} << 20}, Case{3, 0}}) {
    SCOPED_TRACE("parallel " + std::to_string(k.parallel) + ", prefix cache " + std::to_string(k.prefix_cache));
    auto s = scheduler(k.parallel, 16, 64 << 20, k.prefix_cache);
    std::vector<std::shared_ptr<Job>> jobs;
    for (int c = 0; c < kChoices; ++c) {
      InferenceRequest ir{r.messages, r.images, r.options, 0, {}, {}};
      ir.options.sampling.seed = 1000 + static_cast<uint64_t>(c);
      ir.options.share_prompt = c == 0;
      if (c > 0) ir.same_prompt_as = jobs[0];
      Scheduler::Submitted sub = s->submit(std::move(ir));
      ASSERT_EQ(sub.error, SubmitError::kNone);
      jobs.push_back(sub.job);
    }
    std::vector<JobUpdate> ends;
    for (auto& j : jobs) ends.push_back(wait_end(j));
    for (int c = 0; c < kChoices; ++c) {
      const JobUpdate& u = ends[static_cast<size_t>(c)];
      ASSERT_EQ(u.error, JobError::kNone) << u.error_message;
      EXPECT_EQ(u.result.tokens, ref[static_cast<size_t>(c)].tokens) << "choice " << c;
      const GenerateTimings& t = u.result.timings;
      if (c == 0 || k.prefix_cache == 0) {
        EXPECT_EQ(t.cached_tokens, 0) << "choice " << c;
      } else {
        EXPECT_EQ(t.cached_tokens, t.prompt_tokens - 1) << "choice " << c << " read the prompt again";
      }
    }
    EXPECT_EQ(s->cache_stats().images_encoded, 1u);
  }
}

INSTANTIATE_TEST_SUITE_P(Types, Batching, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "quantized" : "checkpoint"; });

// The caches stay within their budgets, dropping the least recently used entries.
TEST(Caches, EvictLeastRecentlyUsedWithinTheBudget) {
  auto image = [](float v) {
    auto e = std::make_shared<EncodedImage>();
    e->n_tokens = 4;
    e->dim = 256;
    e->embeds.assign(1024, v);
    return e;
  };
  const size_t one = image(0)->bytes();
  ImageCache cache(2 * one + one / 2);
  ImageKey a{}, b{}, c{};
  a[0] = 1, b[0] = 2, c[0] = 3;
  cache.put(a, image(1));
  cache.put(b, image(2));
  ASSERT_NE(cache.find(a), nullptr);  // a is now the most recent
  cache.put(c, image(3));             // b goes
  EXPECT_EQ(cache.find(b), nullptr);
  ASSERT_NE(cache.find(a), nullptr);
  EXPECT_EQ(cache.find(a)->embeds[0], 1);
  EXPECT_EQ(cache.stats().evictions, 1u);
  EXPECT_LE(cache.stats().bytes, cache.stats().budget);
  ImageCache tiny(one / 2);
  tiny.put(a, image(1));
  EXPECT_EQ(tiny.find(a), nullptr) << "an entry over the whole budget is not kept";

  TextConfig tc;
  tc.num_hidden_layers = 2;
  tc.num_key_value_heads = 2;
  tc.head_dim = 8;
  auto kv = [&](int n, float v) {
    auto c = std::make_unique<KVCache>(tc, 64, KVType::kF32);
    std::vector<float> x(8, v);
    for (int p = 0; p < n; ++p)
      for (int l = 0; l < 2; ++l)
        for (int h = 0; h < 2; ++h) c->store(l, h, p, x.data(), x.data());
    c->advance(n);
    return c;
  };
  const size_t per_token = kv(1, 0)->committed_bytes();
  PrefixCache prefixes(25 * per_token);
  prefixes.put({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, kv(10, 1));
  prefixes.put({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, kv(12, 2));  // holds the first: it goes
  EXPECT_EQ(prefixes.stats().entries, 1u);
  prefixes.put({7, 7, 7, 7, 7, 7, 7, 7, 7, 7}, kv(10, 3));
  EXPECT_EQ(prefixes.stats().entries, 2u);
  prefixes.put({8, 8, 8, 8, 8, 8, 8, 8, 8, 8}, kv(10, 4));  // over 25 tokens: the oldest ({1..12}) goes
  EXPECT_EQ(prefixes.stats().entries, 2u);
  EXPECT_EQ(prefixes.stats().evictions, 1u);
  KVCache into(tc, 64, KVType::kF32);
  EXPECT_EQ(prefixes.restore({1, 2, 3}, 100, into), 0);
  EXPECT_EQ(prefixes.restore({7, 7, 7, 9}, 100, into), 3);
  std::vector<float> buf;
  EXPECT_EQ(into.keys(1, 1, 3, buf)[2], 3.0f);  // position 2's first value: column 2 of the first kᵀ panel
  KVCache into2(tc, 64, KVType::kF32);
  EXPECT_EQ(prefixes.restore({8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8}, 4, into2), 4) << "at most max_tokens";
  // One over the whole budget is not kept, and the entry it holds stays.
  std::vector<TokenKey> long_keys(30, 8);
  EXPECT_FALSE(prefixes.fits(kv(30, 5)->committed_bytes()));
  prefixes.put(long_keys, kv(30, 5));
  EXPECT_EQ(prefixes.stats().entries, 2u);
  KVCache into3(tc, 64, KVType::kF32);
  EXPECT_EQ(prefixes.restore(long_keys, 100, into3), 10);
}

}  // namespace
}  // namespace qvl::test

namespace qvl::test {
namespace {

// Through the HTTP API: the second turn of a conversation (sent whole, image included) reports the tokens
// it took from the prefix cache and the image it did not encode; /metrics counts both, and the streams'
// inter-token latencies.
TEST_F(ServerTest, FollowUpTurnsReportCachedTokensAndMetrics) {
  start();
  json turn1 = {{"model", "tiny"}, {"max_tokens", 5}, {"temperature", 0},
                {"messages", json::array({json{{"role", "user"},
                                               {"content", json::array({json{{"type", "image_url"},
                                                                             {"image_url", json{{"url", data_uri("png_rgb8_448x448.png")}}}},
                                                                        json{{"type", "text"}, {"text", "What is this?"}}})}}})}};
  Reply r1 = post("/v1/chat/completions", turn1);
  ASSERT_EQ(r1.status, 200) << r1.body;
  json j1 = r1.json_body();
  EXPECT_EQ(j1["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  json turn2 = turn1;
  turn2["messages"].push_back(json{{"role", "assistant"}, {"content", j1["choices"][0]["message"]["content"]}});
  turn2["messages"].push_back(json{{"role", "user"}, {"content", "And the colours?"}});
  Reply r2 = post("/v1/chat/completions", turn2);
  ASSERT_EQ(r2.status, 200) << r2.body;
  json j2 = r2.json_body();
  const int cached = j2["usage"]["prompt_tokens_details"]["cached_tokens"];
  EXPECT_GT(cached, j1["usage"]["prompt_tokens"].get<int>() - 2) << r2.body;
  EXPECT_LT(cached, j2["usage"]["prompt_tokens"].get<int>());
  EXPECT_EQ(j2["timings"]["cache_n"], cached);
  // The same question again from a new "client": the image from the image cache, the prompt from the prefix cache.
  Reply r3 = post("/api/chat", json{{"model", "tiny"}, {"stream", false}, {"options", json{{"num_predict", 3}}},
                                    {"messages", json::array({json{{"role", "user"}, {"content", "What is this?"},
                                                                   {"images", json::array({image_base64("png_rgb8_448x448.png")})}}})}});
  ASSERT_EQ(r3.status, 200) << r3.body;
  Reply m = get("/metrics");
  ASSERT_EQ(m.status, 200);
  auto value = [&](const std::string& name) {
    const size_t at = m.body.find("\n" + name + " ");
    return at == std::string::npos ? -1.0 : std::stod(m.body.substr(at + name.size() + 2));
  };
  EXPECT_EQ(value("qvl_images_encoded_total"), 1) << m.body;
  EXPECT_GE(value("qvl_prefix_cache_hits_total"), 1);
  EXPECT_GE(value("qvl_prefix_cache_reused_tokens_total"), cached);
  EXPECT_EQ(value("qvl_prompt_tokens_cached_total"), value("qvl_prefix_cache_reused_tokens_total"));
  EXPECT_GT(value("qvl_image_cache_bytes"), 0);
  EXPECT_GT(value("qvl_inter_token_latency_seconds_count"), 0);
  EXPECT_GE(value("qvl_generated_tokens_per_second"), 0);
  EXPECT_NE(m.body.find("qvl_time_to_first_token_seconds_bucket"), std::string::npos);
}

}  // namespace
}  // namespace qvl::test
