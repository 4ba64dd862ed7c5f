// How `qvl serve` schedules: parallel streams all complete, a full queue answers 503 with Retry-After, a
// client that hangs up frees its slot, timeouts end requests, a short request overtakes a long one, /health
// says "loading" until the model is loaded, and shutdown lets running streams finish.
#include <atomic>
#include <future>

#include "test_server_fixture.h"

namespace qvl::test {
namespace {

using ServerSched = ServerTest;

TEST_F(ServerSched, ThreeParallelStreamsAllComplete) {
  server::ServerOptions o = test_options();
  o.parallel = 3;
  start(o);
  std::vector<std::future<Reply>> replies;
  for (int i = 0; i < 3; ++i) {
    replies.push_back(std::async(std::launch::async, [this, i] {
      return post_stream("/v1/chat/completions", chat_body("Request number " + std::to_string(i), 10, true));
    }));
  }
  for (auto& f : replies) {
    Reply r = f.get();
    ASSERT_EQ(r.status, 200) << r.body;
    std::vector<std::string> events = sse_events(r.body);
    ASSERT_FALSE(events.empty());
    EXPECT_EQ(events.back(), "[DONE]");
    int pieces = 0;
    for (size_t i = 1; i + 1 < events.size(); ++i) pieces += json::parse(events[i])["choices"][0]["delta"].contains("content");
    EXPECT_GE(pieces, 1);
  }
  EXPECT_TRUE(wait_for([&] { return server_->busy_slots() == 0; }, 5));
}

TEST_F(ServerSched, FullQueueAnswers503WithRetryAfter) {
  server::ServerOptions o = test_options();
  o.parallel = 1;
  o.queue = 1;
  start(o);
  std::atomic<bool> hang_up{false};
  auto long_stream = [&] {
    return post_stream("/v1/chat/completions", chat_body("long", 900, true),
                       [&](const std::string&) { return !hang_up.load(); });
  };
  auto a = std::async(std::launch::async, long_stream);
  ASSERT_TRUE(wait_for([&] { return server_->busy_slots() == 1; }, 10));
  auto b = std::async(std::launch::async, long_stream);
  ASSERT_TRUE(wait_for([&] { return server_->queue_depth() == 1; }, 10));

  Reply c = post("/v1/chat/completions", chat_body("one too many", 2));
  ASSERT_EQ(c.status, 503) << c.body;
  EXPECT_EQ(c.headers.count("Retry-After"), 1u);
  EXPECT_EQ(c.json_body()["error"]["code"], "overloaded");
  Reply d = post("/api/generate", json{{"prompt", "x"}});
  EXPECT_EQ(d.status, 503);
  EXPECT_TRUE(d.json_body()["error"].is_string());

  hang_up = true;  // both clients hang up: the queued one leaves the queue, the running one its slot
  a.get();
  EXPECT_TRUE(wait_for([&] { return server_->busy_slots() == 1 || server_->queue_depth() == 0; }, 10));
  b.get();
  EXPECT_TRUE(wait_for([&] { return server_->busy_slots() == 0 && server_->queue_depth() == 0; }, 10));
  EXPECT_EQ(post("/v1/chat/completions", chat_body("now there is room", 2)).status, 200);
}

TEST_F(ServerSched, DisconnectMidStreamFreesTheSlot) {
  server::ServerOptions o = test_options();
  o.parallel = 1;
  start(o);
  int chunks = 0;
  Reply r = post_stream("/v1/chat/completions", chat_body("go on forever", 900, true),
                        [&](const std::string&) { return ++chunks < 3; });
  EXPECT_EQ(r.status, 200);
  EXPECT_TRUE(wait_for([&] { return server_->busy_slots() == 0; }, 5)) << "the slot stayed busy";
  Reply after = post("/v1/chat/completions", chat_body("next", 3));
  EXPECT_EQ(after.status, 200);
  EXPECT_NE(get("/metrics").body.find("qvl_generations_total{outcome=\"error\"} 1"), std::string::npos);
}

TEST_F(ServerSched, DisconnectWithoutStreamingFreesTheSlot) {
  server::ServerOptions o = test_options();
  o.parallel = 1;
  start(o);
  auto c = client(/*read_timeout_s=*/1);  // gives up after a (scaled) second and closes the connection
  auto r = c->Post("/v1/chat/completions", chat_body("a long answer", 900).dump(), "application/json");
  EXPECT_FALSE(r);
  c.reset();
  EXPECT_TRUE(wait_for([&] { return server_->busy_slots() == 0; }, 5)) << "the slot stayed busy";
  EXPECT_EQ(post("/v1/chat/completions", chat_body("next", 3)).status, 200);
}

TEST_F(ServerSched, TimeoutEndsRequests) {
  server::ServerOptions o = test_options();
  o.timeout_s = 0.5;
  start(o);
  Reply r = post("/v1/chat/completions", chat_body("a long answer", 900));
  ASSERT_EQ(r.status, 504) << r.body;
  EXPECT_NE(r.json_body()["error"]["message"].get<std::string>().find("timeout"), std::string::npos);

  Reply s = post_stream("/v1/chat/completions", chat_body("a long answer", 900, true));
  ASSERT_EQ(s.status, 200);
  std::vector<std::string> events = sse_events(s.body);
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events.back(), "[DONE]");
  EXPECT_TRUE(json::parse(events[events.size() - 2]).contains("error")) << s.body.substr(s.body.size() - 300);

  Reply n = post_stream("/api/chat", json{{"messages", json::array({json{{"role", "user"}, {"content", "x"}}})},
                                          {"options", json{{"num_predict", 900}}}});
  std::vector<json> lines = ndjson_lines(n.body);
  ASSERT_FALSE(lines.empty());
  EXPECT_TRUE(lines.back().contains("error"));
  EXPECT_TRUE(wait_for([&] { return server_->busy_slots() == 0; }, 5));
}

TEST_F(ServerSched, ShortRequestOvertakesALongOne) {
  server::ServerOptions o = test_options();
  o.parallel = 2;
  start(o);
  std::atomic<bool> long_done{false};
  std::promise<void> first_piece;
  std::atomic<bool> signalled{false};
  auto long_one = std::async(std::launch::async, [&] {
    Reply r = post_stream("/v1/chat/completions", chat_body("long", 200, true), [&](const std::string&) {
      if (!signalled.exchange(true)) first_piece.set_value();
      return true;
    });
    long_done = true;
    return r;
  });
  first_piece.get_future().wait();
  Reply short_one = post("/v1/chat/completions", chat_body("short", 3));
  EXPECT_EQ(short_one.status, 200);
  EXPECT_FALSE(long_done.load()) << "the short request waited for the long one";
  EXPECT_EQ(long_one.get().status, 200);
}

TEST_F(ServerSched, HealthSaysLoadingUntilTheModelIsLoaded) {
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  const std::string dir = tiny_model_dir();
  start(test_options(), [dir, released]() {
    released.wait();
    return Model::load(dir);
  }, /*wait_ready=*/false);
  Reply h = get("/health");
  ASSERT_EQ(h.status, 503);
  EXPECT_EQ(h.json_body()["status"], "loading");
  Reply busy = post("/v1/chat/completions", chat_body("hi", 2));
  EXPECT_EQ(busy.status, 503);
  EXPECT_EQ(busy.headers.count("Retry-After"), 1u);
  EXPECT_EQ(get("/v1/models").status, 200);  // answered without the model
  release.set_value();
  ASSERT_TRUE(wait_for([&] { return get("/health").status == 200; }, 60));
  EXPECT_EQ(get("/health").json_body()["status"], "ok");
  EXPECT_EQ(post("/v1/chat/completions", chat_body("hi", 2)).status, 200);
}

TEST_F(ServerSched, FailedLoadIsReported) {
  start(test_options(), [] { return Result<std::unique_ptr<Model>>(Status::Error("no weights here")); },
        /*wait_ready=*/false);
  ASSERT_TRUE(wait_for([&] { return server_->load_state() == LoadState::kFailed; }, 10));
  Reply h = get("/health");
  EXPECT_EQ(h.status, 500);
  EXPECT_NE(h.json_body()["error"].get<std::string>().find("no weights here"), std::string::npos);
  EXPECT_EQ(post("/v1/chat/completions", chat_body("hi", 2)).status, 500);
}

TEST_F(ServerSched, ShutdownLetsRunningStreamsFinish) {
  start();
  std::promise<void> first_piece;
  std::atomic<bool> signalled{false};
  auto stream = std::async(std::launch::async, [&] {
    return post_stream("/v1/chat/completions", chat_body("finish me", 30, true), [&](const std::string&) {
      if (!signalled.exchange(true)) first_piece.set_value();
      return true;
    });
  });
  first_piece.get_future().wait();
  auto stopping = std::async(std::launch::async, [&] { server_->shutdown(scaled(30)); });
  ASSERT_TRUE(wait_for([&] { return get("/health").status != 200; }, 5));
  Reply late = post("/v1/chat/completions", chat_body("too late", 2));
  EXPECT_TRUE(late.status == 503 || late.status == -1) << late.status;
  Reply r = stream.get();
  stopping.get();
  std::vector<std::string> events = sse_events(r.body);
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events.back(), "[DONE]");
  EXPECT_EQ(json::parse(events[events.size() - 2])["choices"][0]["finish_reason"], "length") << r.body;
}

TEST_F(ServerSched, ShutdownGraceRunsOutAndCancels) {
  start();
  std::promise<void> first_piece;
  std::atomic<bool> signalled{false};
  auto stream = std::async(std::launch::async, [&] {
    return post_stream("/v1/chat/completions", chat_body("never finishes", 900, true), [&](const std::string&) {
      if (!signalled.exchange(true)) first_piece.set_value();
      return true;
    });
  });
  first_piece.get_future().wait();
  const auto t0 = std::chrono::steady_clock::now();
  server_->shutdown(0.3);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, scaled_ms(8000));
  Reply r = stream.get();
  std::vector<std::string> events = sse_events(r.body);
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events.back(), "[DONE]");
  EXPECT_NE(events[events.size() - 2].find("shutting down"), std::string::npos);
}

}  // namespace
}  // namespace qvl::test
