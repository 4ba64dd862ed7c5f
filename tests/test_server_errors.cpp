// Requests `qvl serve` must refuse with a clear 4xx in each API's error shape while it keeps serving: bad
// JSON, missing fields, bad or unsupported images, oversize bodies, prompts over the context, API keys, CORS
// and local image paths outside --image-dir; plus the base64 decoder.
#include "server/http/request.h"
#include "test_server_fixture.h"

namespace qvl::test {
namespace {

namespace fs = std::filesystem;
using ServerErrors = ServerTest;

std::string openai_message(const Reply& r) { return r.json_body()["error"]["message"].get<std::string>(); }

json image_body(const std::string& ref) {
  return json{{"messages", json::array({json{{"role", "user"},
                                             {"content", json::array({json{{"type", "image_url"},
                                                                           {"image_url", json{{"url", ref}}}},
                                                                      json{{"type", "text"}, {"text", "What?"}}})}}})},
              {"max_tokens", 2}};
}

TEST_F(ServerErrors, BadRequestsGetClearMessagesAndTheServerKeepsServing) {
  start();
  Reply r = post("/v1/chat/completions", std::string("{\"messages\": [}"));
  ASSERT_EQ(r.status, 400);
  json e = r.json_body()["error"];
  EXPECT_EQ(e["type"], "invalid_request_error");
  EXPECT_NE(e["message"].get<std::string>().find("not valid JSON"), std::string::npos);
  EXPECT_TRUE(e.contains("param") && e.contains("code"));

  EXPECT_NE(openai_message(post("/v1/chat/completions", json{{"model", "x"}})).find("messages"), std::string::npos);
  json hot = chat_body("hi", 2);
  hot["temperature"] = "hot";
  EXPECT_NE(openai_message(post("/v1/chat/completions", hot)).find("temperature"), std::string::npos);
  json neg = chat_body("hi", 2);
  neg["top_p"] = 1.5;
  EXPECT_EQ(post("/v1/chat/completions", neg).status, 400);
  for (int n : {0, 17}) {
    json many = chat_body("hi", 2);
    many["n"] = n;
    EXPECT_NE(openai_message(post("/v1/chat/completions", many)).find("n: expected 1 to 16"), std::string::npos) << n;
  }
  json role = chat_body("hi", 2);
  role["messages"][0]["role"] = "wizard";
  EXPECT_NE(openai_message(post("/v1/chat/completions", role)).find("role"), std::string::npos);
  json video{{"messages", json::array({json{{"role", "user"}, {"content", json::array({json{{"type", "video"}, {"video", "x.mp4"}}})}}})}};
  EXPECT_NE(openai_message(post("/v1/chat/completions", video)).find("video"), std::string::npos);

  // Ollama's shape: {"error": "..."}.
  Reply o = post("/api/chat", std::string("not json"));
  ASSERT_EQ(o.status, 400);
  EXPECT_TRUE(o.json_body()["error"].is_string());
  Reply opt = post("/api/generate", json{{"prompt", "hi"}, {"options", json{{"num_predict", "many"}}}});
  EXPECT_EQ(opt.status, 400);
  EXPECT_NE(opt.json_body()["error"].get<std::string>().find("num_predict"), std::string::npos);
  EXPECT_EQ(post("/api/chat", json{{"messages", json::array({json{{"role", "user"}, {"content", "x"}}})},
                                   {"format", "yaml"}}).status, 400);

  // Unknown endpoints and wrong methods.
  Reply nf = post("/v1/nothing", json::object());
  EXPECT_EQ(nf.status, 404);
  EXPECT_TRUE(nf.json_body()["error"]["message"].is_string());
  EXPECT_EQ(get("/v1/chat/completions").status, 405);
  EXPECT_EQ(get("/api/nothing").status, 404);

  ASSERT_EQ(post("/v1/chat/completions", chat_body("still there?", 2)).status, 200);
}

TEST_F(ServerErrors, BadImages) {
  start();
  Reply url = post("/v1/chat/completions", image_body("https://example.com/cat.jpg"));
  ASSERT_EQ(url.status, 400);
  EXPECT_NE(openai_message(url).find("not fetched"), std::string::npos);

  // PNG signature, then garbage.
  std::string png = "\x89PNG\r\n\x1a\n";
  png += std::string(300, 'x');
  Reply corrupt = post("/v1/chat/completions",
                       image_body("data:image/png;base64," +
                                  server::base64_encode(reinterpret_cast<const uint8_t*>(png.data()), png.size())));
  ASSERT_EQ(corrupt.status, 400);
  EXPECT_NE(openai_message(corrupt).find("PNG"), std::string::npos) << corrupt.body;

  auto text = read_file_bytes(data_dir() + "/images/bad/text.txt");
  ASSERT_TRUE(text.ok());
  std::string junk(text->begin(), text->end());
  while (junk.size() < 400) junk += junk;
  Reply unknown = post("/v1/chat/completions",
                       image_body(server::base64_encode(reinterpret_cast<const uint8_t*>(junk.data()), junk.size())));
  EXPECT_EQ(unknown.status, 400);

  Reply trunc = post("/v1/chat/completions", image_body(data_uri("bad/truncated.jpg", "image/jpeg")));
  EXPECT_EQ(trunc.status, 400);
  Reply not_b64 = post("/v1/chat/completions", image_body("data:image/png;base64,@@@@"));
  EXPECT_EQ(not_b64.status, 400);
  Reply path = post("/v1/chat/completions", image_body("/etc/passwd"));
  ASSERT_EQ(path.status, 400);
  EXPECT_NE(openai_message(path).find("--image-dir"), std::string::npos);

  Reply ollama = post("/api/chat", json{{"messages", json::array({json{{"role", "user"},
                                                                       {"content", "x"},
                                                                       {"images", json::array({"AAAA"})}}})}});
  EXPECT_EQ(ollama.status, 400);
  ASSERT_EQ(post("/v1/chat/completions", image_body(data_uri("png_rgb8_1x1.png"))).status, 200);
}

TEST_F(ServerErrors, OversizeBodyAndLongPrompt) {
  server::ServerOptions o = test_options();
  o.max_body = 64 * 1024;
  o.context = 64;
  start(o);
  json big = chat_body(std::string(100 * 1024, 'a'), 2);
  Reply r = post("/v1/chat/completions", big);
  ASSERT_EQ(r.status, 413);
  EXPECT_NE(openai_message(r).find("--max-body"), std::string::npos);
  EXPECT_EQ(post("/api/chat", big).status, 413);

  std::string words;
  for (int i = 0; i < 100; ++i) words += "word ";
  Reply lp = post("/v1/chat/completions", chat_body(words, 2));
  ASSERT_EQ(lp.status, 400);
  EXPECT_NE(openai_message(lp).find("over the context"), std::string::npos);
  EXPECT_EQ(lp.json_body()["error"]["code"], "context_length_exceeded") << lp.body;  // as OpenAI names it
  Reply legacy = post("/v1/completions", json{{"prompt", words}, {"max_tokens", 2}});
  ASSERT_EQ(legacy.status, 400) << legacy.body;
  EXPECT_EQ(legacy.json_body()["error"]["code"], "context_length_exceeded") << legacy.body;
  Reply resp = post("/v1/responses", json{{"input", words}, {"max_output_tokens", 16}});
  ASSERT_EQ(resp.status, 400) << resp.body;
  EXPECT_EQ(resp.json_body()["error"]["code"], "context_length_exceeded") << resp.body;
  // A request refused for another reason keeps a null code.
  Reply other = post("/v1/chat/completions", json{{"messages", json::array({json{{"role", "user"}, {"content", "x"}}})},
                                                  {"logit_bias", {{"999999999", 1}}}});
  ASSERT_EQ(other.status, 400) << other.body;
  EXPECT_TRUE(other.json_body()["error"]["code"].is_null()) << other.body;
  // Also when streaming: the prompt is read before the stream starts, so the status is still 400.
  Reply ls = post_stream("/v1/chat/completions", chat_body(words, 2, true));
  EXPECT_EQ(ls.status, 400);
  EXPECT_EQ(post("/v1/chat/completions", chat_body("short", 2)).status, 200);
}

TEST_F(ServerErrors, ApiKeys) {
  server::ServerOptions o = test_options();
  o.api_keys = {"secret-1", "secret-2"};
  start(o);
  Reply none = post("/v1/chat/completions", chat_body("hi", 2));
  ASSERT_EQ(none.status, 401);
  EXPECT_EQ(none.json_body()["error"]["type"], "authentication_error");
  Reply wrong = post("/api/chat", chat_body("hi", 2), {{"Authorization", "Bearer secret-3"}});
  ASSERT_EQ(wrong.status, 401);
  EXPECT_TRUE(wrong.json_body()["error"].is_string());
  EXPECT_EQ(get("/v1/models", {{"Authorization", "secret-1"}}).status, 401);
  EXPECT_EQ(get("/metrics").status, 401);
  EXPECT_EQ(post("/chat", json{{"question", "x"}}).status, 401);

  EXPECT_EQ(get("/health").status, 200);
  EXPECT_EQ(get("/").status, 200);
  EXPECT_EQ(post("/v1/chat/completions", chat_body("hi", 2), {{"Authorization", "Bearer secret-2"}}).status, 200);
  EXPECT_EQ(get("/v1/models", {{"Authorization", "Bearer secret-1"}}).status, 200);
}

TEST_F(ServerErrors, CorsOnlyWhenConfigured) {
  start();
  // Without --cors a foreign origin is refused outright (a cross-origin page must not drive the model).
  Reply plain = get("/v1/models", {{"Origin", "http://example.com"}});
  EXPECT_EQ(plain.status, 403);
  EXPECT_EQ(plain.headers.count("Access-Control-Allow-Origin"), 0u);
  server_.reset();

  server::ServerOptions o = test_options();
  o.cors_origins = {"http://example.com"};
  o.api_keys = {"k"};
  start(o);
  Reply ok = get("/v1/models", {{"Origin", "http://example.com"}, {"Authorization", "Bearer k"}});
  ASSERT_EQ(ok.status, 200);
  EXPECT_EQ(ok.headers.find("Access-Control-Allow-Origin")->second, "http://example.com");
  Reply other = get("/v1/models", {{"Origin", "http://evil.test"}, {"Authorization", "Bearer k"}});
  EXPECT_EQ(other.status, 403);
  EXPECT_EQ(other.headers.count("Access-Control-Allow-Origin"), 0u);
  auto pre = client()->Options("/v1/chat/completions",
                               {{"Origin", "http://example.com"}, {"Access-Control-Request-Method", "POST"}});
  ASSERT_TRUE(pre);
  EXPECT_EQ(pre->status, 204);
  EXPECT_NE(pre->get_header_value("Access-Control-Allow-Headers").find("Authorization"), std::string::npos);
}

TEST_F(ServerErrors, ImageDirRefusesEverythingOutsideIt) {
  const fs::path root = fs::temp_directory_path() / ("qvl-test-imagedir-" + std::to_string(::getpid()));
  fs::remove_all(root);
  fs::create_directories(root / "inside" / "sub");
  fs::create_directories(root / "outside");
  const std::string png = data_dir() + "/images/png_rgba8_33x17.png";
  fs::copy_file(png, root / "inside" / "sub" / "a.png");
  fs::copy_file(png, root / "outside" / "secret.png");
  fs::create_symlink(root / "outside" / "secret.png", root / "inside" / "link.png");
  fs::create_symlink(root / "outside", root / "inside" / "linkdir");

  server::ServerOptions o = test_options();
  o.image_dir = (root / "inside").string();
  start(o);
  EXPECT_EQ(post("/v1/chat/completions", image_body("sub/a.png")).status, 200);
  EXPECT_EQ(post("/v1/chat/completions", image_body((root / "inside" / "sub" / "a.png").string())).status, 200);
  EXPECT_EQ(post("/v1/chat/completions", image_body("file://" + (root / "inside" / "sub" / "a.png").string())).status, 200);

  auto refused = [&](const std::string& ref, const char* why) {
    Reply r = post("/v1/chat/completions", image_body(ref));
    EXPECT_EQ(r.status, 400) << ref;
    if (r.status == 400) {
      EXPECT_NE(openai_message(r).find(why), std::string::npos) << ref << ": " << r.body;
    }
  };
  refused("../outside/secret.png", "'..'");
  refused("sub/../../outside/secret.png", "'..'");
  refused((root / "outside" / "secret.png").string(), "outside the image directory");
  refused("link.png", "outside the image directory");
  refused("linkdir/secret.png", "outside the image directory");
  refused("/etc/passwd", "outside the image directory");
  refused("sub/missing.png", "no such file");
  // Ollama images are base64 only in Ollama's API, but a path is taken the same way.
  Reply ol = post("/api/generate", json{{"prompt", "x"}, {"images", json::array({"../outside/secret.png"})}});
  EXPECT_EQ(ol.status, 400);
  server_.reset();
  fs::remove_all(root);
}

// A path is percent-decoded before it is routed (the openai package escapes the slash of a hub id in
// /v1/models/{id}); an escape that is not two hex digits, or that decodes to a control character or to bytes that
// are not UTF-8, is a 400. A known path asked with the wrong method is a 405 whose Allow names the methods it takes.
TEST_F(ServerErrors, PathsAreDecodedAndAWrongMethodIs405) {
  server::ServerOptions o = test::test_options();
  o.model_id = "Qwen/Tiny-VL";
  start(o);
  for (const char* path : {"/v1/models/Qwen%2FTiny-VL", "/v1/models/Qwen%2fTiny-VL", "/v1/models/Qwen/Tiny-VL", "/v1/%6Dodels/Qwen%2FTiny%2DVL"}) {
    const Reply r = get(path);
    ASSERT_EQ(r.status, 200) << path << ": " << r.body;
    EXPECT_EQ(r.json_body()["id"], "Qwen/Tiny-VL") << path;
  }
  EXPECT_EQ(get("/v1/models/Qwen%2Ftiny-vl").status, 404);
  EXPECT_EQ(get("/v1/models/Qwen%252FTiny-VL").status, 404);  // decoded once: the id "Qwen%2FTiny-VL"
  // An escaped '/' is data, not a separator (RFC 3986 2.2): it never makes a path some rule did not see.
  EXPECT_EQ(post("/v1%2Fchat%2Fcompletions", json{{"messages", json::array({json{{"role", "user"}, {"content", "hi"}}})}}).status, 404);
  EXPECT_EQ(get("/v1%2Fmodels").status, 404);
  for (const char* path : {"/v1/models/%zz", "/v1/models/%2", "/v1/models/a%", "/v1/models/a%00b", "/v1/models/a%0Ab",
                           "/v1/models/%7F", "/v1/models/%ff", "/v1/models/%C2%9B", "/health%00"}) {
    const Reply r = get(path);
    EXPECT_EQ(r.status, 400) << path << ": " << r.body;
  }
  EXPECT_EQ(get("/health").status, 200);  // the server carries on
  struct Wrong {
    const char* method;
    const char* path;
    const char* allow;
  };
  for (const Wrong& w : {Wrong{"POST", "/v1/models", "GET, HEAD"}, Wrong{"POST", "/v1/models/Qwen%2FTiny-VL", "GET, HEAD"},
                         Wrong{"POST", "/health", "GET, HEAD"}, Wrong{"GET", "/v1/embeddings", "POST"},
                         Wrong{"GET", "/v1/chat/completions", "POST"}, Wrong{"GET", "/api/embeddings", "POST"},
                         Wrong{"POST", "/", "GET, HEAD"}, Wrong{"POST", "/v1/responses/resp_x", "GET, HEAD, DELETE"},
                         Wrong{"DELETE", "/v1/models", "GET, HEAD"}, Wrong{"GET", "/api/delete", "DELETE"},
                         Wrong{"DELETE", "/v1/responses/resp_x/input_items", "GET, HEAD"},
                         Wrong{"POST", "/v1/responses/resp_x/input_items", "GET, HEAD"}}) {
    auto c = client();
    const std::string m = w.method;
    auto r = m == "GET" ? c->Get(w.path) : m == "DELETE" ? c->Delete(w.path) : c->Post(w.path, "{}", "application/json");
    ASSERT_TRUE(r) << w.path;
    EXPECT_EQ(r->status, 405) << w.method << " " << w.path << ": " << r->body;
    EXPECT_EQ(r->get_header_value("Allow"), w.allow) << w.method << " " << w.path;
  }
  EXPECT_EQ(post("/v1/nothing", json::object()).status, 404);
}

// A query string's pairs: %XX and '+' decoded, empty pairs skipped, a name without '=' an empty value; a bad
// escape or a control character refuses the whole query.
TEST(HttpQuery, PairsAreDecodedInOrderAndBadEscapesRefused) {
  using Pairs = std::vector<std::pair<std::string, std::string>>;
  Pairs got;
  ASSERT_TRUE(server::http::parse_query("limit=2&order=asc&&include%5B%5D=message.input_image.image_url&flag&x=a+b%2Bc=d", got));
  EXPECT_EQ(got, (Pairs{{"limit", "2"}, {"order", "asc"}, {"include[]", "message.input_image.image_url"}, {"flag", ""},
                        {"x", "a b+c=d"}}));
  ASSERT_TRUE(server::http::parse_query("", got));
  EXPECT_TRUE(got.empty());
  ASSERT_TRUE(server::http::parse_query("caf%C3%A9=%E2%82%AC", got));
  EXPECT_EQ(got, (Pairs{{"caf\xC3\xA9", "\xE2\x82\xAC"}}));
  for (const char* bad : {"a=%zz", "a=%2", "a%", "a=%00", "a=b%0Ac", "a=%C3", "a=%C2%85", "a=\x01"})
    EXPECT_FALSE(server::http::parse_query(bad, got)) << bad;
}

// GET /v1/responses/{id}/input_items as OpenAI lists them: newest first, limit/after/order from the query, the
// query's bad values named; an unknown or unstored response is a 404.
TEST_F(ServerErrors, ResponseInputItemsAreListedFromTheQuery) {
  start();
  const Reply first = post("/v1/responses", json{{"input", "one"}, {"max_output_tokens", 2}});
  ASSERT_EQ(first.status, 200) << first.body;
  const std::string a = first.json_body()["id"];
  const Reply second = post("/v1/responses", json{{"input", json::array({json{{"role", "user"}, {"content", "two"}},
                                                                         json{{"role", "user"}, {"content", "three"}}})},
                                                  {"previous_response_id", a}, {"max_output_tokens", 2}});
  ASSERT_EQ(second.status, 200) << second.body;
  const std::string b = second.json_body()["id"];
  const Reply all = get("/v1/responses/" + b + "/input_items");
  ASSERT_EQ(all.status, 200) << all.body;
  const json items = all.json_body()["data"];
  ASSERT_EQ(items.size(), 4u) << all.body;  // three, two, the first answer, one
  EXPECT_EQ(items[0]["content"][0]["text"], "three");
  EXPECT_EQ(items[1]["content"][0]["text"], "two");
  EXPECT_EQ(items[2]["id"], first.json_body()["output"][0]["id"]);
  EXPECT_EQ(items[3]["content"][0], (json{{"type", "input_text"}, {"text", "one"}}));
  EXPECT_EQ(all.json_body()["object"], "list");
  EXPECT_EQ(all.json_body()["first_id"], items[0]["id"]);
  EXPECT_EQ(all.json_body()["last_id"], items[3]["id"]);
  EXPECT_EQ(all.json_body()["has_more"], false);
  const Reply page = get("/v1/responses/" + b + "/input_items?order=asc&limit=3&after=" + items[3]["id"].get<std::string>());
  ASSERT_EQ(page.status, 200) << page.body;
  EXPECT_EQ(page.json_body()["data"].size(), 3u);
  EXPECT_EQ(page.json_body()["data"][0]["id"], items[2]["id"]);
  EXPECT_EQ(page.json_body()["has_more"], false);
  EXPECT_EQ(get("/v1/responses/" + a + "/input_items").json_body()["data"].size(), 1u);
  for (const auto& [query, says] : std::vector<std::pair<std::string, std::string>>{
           {"limit=0", "limit: expected an integer from 1 to 100, got '0'"}, {"limit=1x", "limit"},
           {"order=up", "order: expected asc or desc"}, {"after=msg_none", "after: no input item 'msg_none'"},
           {"include=file_search_call.results", "include: 'file_search_call.results' is not supported"},
           {"limit=%zz", "the query string is malformed"}, {"limit=+5", "limit"}, {"limit=%205", "limit"}}) {
    const Reply r = get("/v1/responses/" + b + "/input_items?" + query);
    EXPECT_EQ(r.status, 400) << query << ": " << r.body;
    EXPECT_NE(r.body.find(says), std::string::npos) << r.body;
  }
  EXPECT_EQ(get("/v1/responses/resp_none/input_items").status, 404);
  EXPECT_EQ(post("/v1/responses/" + b + "/input_items", json::object()).status, 405);
  // DELETE forgets a stored response: it cannot be read, listed or continued any more; the one after it still can.
  auto del = client()->Delete("/v1/responses/" + a);
  ASSERT_TRUE(del);
  ASSERT_EQ(del->status, 200) << del->body;
  EXPECT_EQ(json::parse(del->body), (json{{"id", a}, {"object", "response"}, {"deleted", true}}));
  EXPECT_EQ(get("/v1/responses/" + a).status, 404);
  EXPECT_EQ(post("/v1/responses", json{{"input", "x"}, {"previous_response_id", a}}).status, 404);
  EXPECT_EQ(client()->Delete("/v1/responses/" + a)->status, 404);
  EXPECT_EQ(get("/v1/responses/" + b + "/input_items").status, 200);
  // Listed and read apart in the metrics (the listing counted a moment after its answer is sent).
  Reply m;
  EXPECT_TRUE(wait_for([&] {
    m = get("/metrics");
    return m.body.find("qvl_requests_total{endpoint=\"/v1/responses/{id}/input_items\",status=\"200\"}") != std::string::npos;
  }, 5)) << m.body;
  EXPECT_NE(m.body.find("qvl_requests_total{endpoint=\"/v1/responses/{id}\",status=\"404\"}"), std::string::npos) << m.body;

  // Images are listed as null unless asked for, in a message or a function call's output, from any earlier turn.
  const std::string png = data_uri("png_rgb8_1x1.png");
  const json image{{"type", "input_image"}, {"image_url", png}};
  const Reply c1 = post("/v1/responses", json{{"max_output_tokens", 2},
                                              {"input", json::array({json{{"role", "user"}, {"content", json::array({image})}},
                                                                     json{{"type", "function_call"}, {"call_id", "c1"}, {"name", "look"},
                                                                          {"arguments", "{}"}},
                                                                     json{{"type", "function_call_output"}, {"call_id", "c1"},
                                                                          {"output", json::array({image})}}})}});
  ASSERT_EQ(c1.status, 200) << c1.body;
  const Reply c2 = post("/v1/responses", json{{"input", "and then?"}, {"max_output_tokens", 2},
                                              {"previous_response_id", c1.json_body()["id"]}});
  ASSERT_EQ(c2.status, 200) << c2.body;
  const std::string list = "/v1/responses/" + c2.json_body()["id"].get<std::string>() + "/input_items?order=asc";
  const json plain = get(list).json_body()["data"];
  const json urls = get(list + "&include=message.input_image.image_url").json_body()["data"];
  ASSERT_EQ(plain.size(), 5u) << plain.dump().substr(0, 400);  // image, call, output, the answer, "and then?"
  EXPECT_TRUE(plain[0]["content"][0]["image_url"].is_null());
  EXPECT_TRUE(plain[2]["output"][0]["image_url"].is_null());
  EXPECT_EQ(urls[0]["content"][0]["image_url"], png);
  EXPECT_EQ(urls[2]["output"][0]["image_url"], png);
  EXPECT_EQ(urls[1]["type"], "function_call");
}

// Sampling and log-probability fields at the edges of their ranges: top_p 0 is taken (transformers keeps the most
// likely token: the greedy answer); a negative count of alternatives is refused.
TEST_F(ServerErrors, SamplingEdgesAreTakenOrRefusedNeverIgnored) {
  start();
  const json msgs = json::array({json{{"role", "user"}, {"content", "Hello"}}});
  const Reply greedy = post("/v1/chat/completions", json{{"messages", msgs}, {"max_tokens", 6}, {"temperature", 0}});
  ASSERT_EQ(greedy.status, 200) << greedy.body;
  for (int seed : {1, 2, 3}) {
    const Reply r = post("/v1/chat/completions",
                         json{{"messages", msgs}, {"max_tokens", 6}, {"temperature", 1.5}, {"top_p", 0}, {"seed", seed}});
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.json_body()["choices"][0]["message"]["content"], greedy.json_body()["choices"][0]["message"]["content"]);
  }
  const Reply tp = post("/v1/chat/completions", json{{"messages", msgs}, {"max_tokens", 2}, {"top_p", -0.1}});
  EXPECT_EQ(tp.status, 400) << tp.body;
  const Reply top = post("/v1/chat/completions", json{{"messages", msgs}, {"max_tokens", 2}, {"logprobs", true}, {"top_logprobs", -1}});
  EXPECT_EQ(top.status, 400) << top.body;
  EXPECT_NE(top.body.find("top_logprobs: expected 0 to 20, got -1"), std::string::npos) << top.body;
  const Reply legacy = post("/v1/completions", json{{"prompt", "Hello"}, {"max_tokens", 2}, {"logprobs", -1}});
  EXPECT_EQ(legacy.status, 400) << legacy.body;
}

// logit_bias reaches the sampler from chat and legacy completions, streamed or not: +100 on one token makes
// the greedy answer that token each time; -100 on it (with +50 on another) bans it. Bad maps are refused,
// naming the key; an id past the vocabulary is refused by the engine.
TEST_F(ServerErrors, LogitBiasSteersTheAnswerAndBadMapsAreRefused) {
  start();
  const json msgs = json::array({json{{"role", "user"}, {"content", "Hello"}}});
  auto text_of = [&](std::vector<int> ids) {
    const Reply r = post("/detokenize", json{{"tokens", ids}});
    EXPECT_EQ(r.status, 200) << r.body;
    return r.json_body()["content"].get<std::string>();
  };
  const int x = 9707, y = 14990;  // two ordinary tokens of the Qwen vocabulary
  const std::string xxx = text_of({x, x, x}), yyy = text_of({y, y, y});
  ASSERT_NE(xxx, yyy);
  auto chat = [&](const json& bias, bool stream = false) {
    json body{{"messages", msgs}, {"max_tokens", 3}, {"temperature", 0}, {"logit_bias", bias}};
    if (stream) body["stream"] = true;
    return stream ? post_stream("/v1/chat/completions", body) : post("/v1/chat/completions", body);
  };
  const Reply forced = chat(json{{std::to_string(x), 100}});
  ASSERT_EQ(forced.status, 200) << forced.body;
  EXPECT_EQ(forced.json_body()["choices"][0]["message"]["content"], xxx);
  const Reply banned = chat(json{{std::to_string(x), -100}, {std::to_string(y), 50}});
  ASSERT_EQ(banned.status, 200) << banned.body;
  EXPECT_EQ(banned.json_body()["choices"][0]["message"]["content"], yyy);
  // Sampled at a high temperature, +100 still takes every draw.
  const Reply sampled = post("/v1/chat/completions", json{{"messages", msgs}, {"max_tokens", 3}, {"temperature", 1.5},
                                                         {"seed", 7}, {"logit_bias", {{std::to_string(y), 100}}}});
  ASSERT_EQ(sampled.status, 200) << sampled.body;
  EXPECT_EQ(sampled.json_body()["choices"][0]["message"]["content"], yyy);
  const Reply streamed = chat(json{{std::to_string(y), 100}}, true);
  ASSERT_EQ(streamed.status, 200) << streamed.body;
  EXPECT_NE(streamed.body.find(text_of({y})), std::string::npos) << streamed.body;
  const Reply legacy = post("/v1/completions", json{{"prompt", "Hello"}, {"max_tokens", 3}, {"temperature", 0},
                                                    {"logit_bias", {{std::to_string(x), 100}}}});
  ASSERT_EQ(legacy.status, 200) << legacy.body;
  EXPECT_EQ(legacy.json_body()["choices"][0]["text"], xxx);
  EXPECT_EQ(chat(json::object()).status, 200);
  EXPECT_EQ(chat(nullptr).status, 200);
  EXPECT_EQ(chat(json{{"000000009707", 100}}).json_body()["choices"][0]["message"]["content"], xxx);  // leading zeros

  struct Bad { json bias; const char* says; };
  const Bad bad[] = {
      {json{{"9707", 100.5}}, "logit_bias.9707: expected a bias in [-100, 100], got 100.5"},
      {json{{"hello", 1}}, "logit_bias: the key 'hello' is not a token id"},
      {json{{"-3", 1}}, "the key '-3' is not a token id"},
      {json{{"12345678901", 1}}, "logit_bias: token id 12345678901 is outside the vocabulary"},
      {json{{"12", "high"}}, "logit_bias.12"},
      {json{{"7", 1}, {"007", 2}}, "token 7 is given twice"},
      {json::array({1, 2}), "logit_bias: expected an object of token ids to biases"},
      {json{{"999999999", 1}}, "logit_bias: token id 999999999 is outside the vocabulary [0, "},
  };
  for (const Bad& b : bad) {
    const Reply r = chat(b.bias);
    EXPECT_EQ(r.status, 400) << b.bias.dump() << ": " << r.body;
    EXPECT_NE(r.body.find(b.says), std::string::npos) << r.body;
  }
  const Reply legacy_bad = post("/v1/completions", json{{"prompt", "Hello"}, {"logit_bias", {{"x", 1}}}});
  EXPECT_EQ(legacy_bad.status, 400) << legacy_bad.body;
}

// An image part without its image, and tools that are not OpenAI functions, get a 400 naming what is wrong.
TEST_F(ServerErrors, PartsAndToolsAreCheckedForWhatTheyAre) {
  start();
  auto contains = [](const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; };
  auto ask = [&](const json& content, const json& tools = nullptr) {
    json body{{"messages", json::array({json{{"role", "user"}, {"content", content}}})}, {"max_tokens", 2}};
    if (!tools.is_null()) body["tools"] = tools;
    return post("/v1/chat/completions", body);
  };
  const Reply no_image = ask(json::array({json{{"type", "image_url"}}, json{{"type", "text"}, {"text", "hi"}}}));
  EXPECT_EQ(no_image.status, 400);
  EXPECT_FALSE(contains(no_image.body, "is not supported")) << no_image.body;
  EXPECT_TRUE(contains(no_image.body, "messages[0].content[0]")) << no_image.body;
  const json fn{{"type", "function"}, {"function", {{"name", "f"}, {"parameters", {{"type", "object"}}}}}};
  EXPECT_EQ(ask("hi", json::array({fn})).status, 200);
  const Reply interp = ask("hi", json::array({fn, json{{"type", "code_interpreter"}}}));
  EXPECT_EQ(interp.status, 400);
  EXPECT_TRUE(contains(interp.body, "tools[1].type")) << interp.body;
  const Reply bare = ask("hi", json::array({json{{"type", "function"}}}));
  EXPECT_EQ(bare.status, 400);
  EXPECT_TRUE(contains(bare.body, "tools[0].function")) << bare.body;
}

TEST(ServerBase64, RoundTripAndErrors) {
  for (std::string s : {"", "a", "ab", "abc", "abcd", "hello world!"}) {
    std::string enc = server::base64_encode(reinterpret_cast<const uint8_t*>(s.data()), s.size());
    auto dec = server::base64_decode(enc);
    ASSERT_TRUE(dec.ok()) << s;
    EXPECT_EQ(std::string(dec->begin(), dec->end()), s);
  }
  auto spaced = server::base64_decode("aGVs\nbG8=\r\n");
  ASSERT_TRUE(spaced.ok());
  EXPECT_EQ(std::string(spaced->begin(), spaced->end()), "hello");
  auto urlsafe = server::base64_decode("-_8");
  ASSERT_TRUE(urlsafe.ok());
  EXPECT_EQ(urlsafe->size(), 2u);
  EXPECT_FALSE(server::base64_decode("ab$c").ok());
  EXPECT_FALSE(server::base64_decode("a").ok());
  EXPECT_FALSE(server::base64_decode("ab=c").ok());
}

}  // namespace
}  // namespace qvl::test
