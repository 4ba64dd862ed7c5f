// The retrieval endpoints end to end on the tiny embedding and reranker models: /v1/embeddings and /api/embed
// give the engine's vectors (the goldens' path, engine/retrieval.h) for strings, lists and multimodal objects,
// alone or in a batch; dimensions and base64; /v1/rerank sorts by the engine's scores, with top_n and
// return_documents, and encodes a query's image once for all its documents; a wrong kind of model, token
// arrays and over-long inputs are 400s that say why.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "engine/generate.h"
#include "engine/retrieval.h"
#include "test_server_fixture.h"
#include "util/thread_pool.h"

namespace qvl::test {
namespace {

std::vector<float> floats(const json& v) { return v.get<std::vector<float>>(); }

class RetrievalServerTest : public ServerTest {
 protected:
  void start_kind(const std::string& kind) {
    const std::string dir = tiny_retrieval_model_dir(kind);
    start(test_options(), [dir] { return Model::load(dir); });
  }
  // The engine's own vector for one text (what the goldens check).
  static std::vector<float> engine_embedding(const std::string& text, int64_t dims = 0) {
    static std::unique_ptr<Model> m = std::move(Model::load(tiny_retrieval_model_dir("embedding"))).value();
    ThreadPool pool(1);
    RetrievalInput in;
    in.texts = {text};
    auto r = generate(*m, pool, embedding_messages(in), {}, retrieval_options(*m));
    EXPECT_TRUE(r.ok());
    return std::move(embedding_vector(r->hidden, dims)).value();
  }
};

double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) m = std::max(m, static_cast<double>(std::abs(a[i] - b[i])));
  return m;
}

TEST_F(RetrievalServerTest, EmbeddingsAreTheEnginesVectorsAloneOrInABatch) {
  start_kind("embedding");
  const Reply one = post("/v1/embeddings", json{{"input", "a red bicycle"}});
  ASSERT_EQ(one.status, 200) << one.body;
  const json b1 = one.json_body();
  EXPECT_EQ(b1["object"], "list");
  ASSERT_EQ(b1["data"].size(), 1u);
  EXPECT_LE(max_diff(floats(b1["data"][0]["embedding"]), engine_embedding("a red bicycle")), 1e-6);
  EXPECT_GT(b1["usage"]["prompt_tokens"].get<int>(), 10);

  const Reply batch = post("/v1/embeddings", json{{"input", {"first text", "a red bicycle", {{"text", "an object"}}}}});
  ASSERT_EQ(batch.status, 200) << batch.body;
  const json b3 = batch.json_body();
  ASSERT_EQ(b3["data"].size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(b3["data"][i]["index"], i);
  EXPECT_LE(max_diff(floats(b3["data"][1]["embedding"]), floats(b1["data"][0]["embedding"])), 1e-6);
  EXPECT_LE(max_diff(floats(b3["data"][2]["embedding"]), engine_embedding("an object")), 1e-6);

  // Matryoshka and base64.
  const Reply cut = post("/v1/embeddings", json{{"input", "a red bicycle"}, {"dimensions", 32}, {"encoding_format", "base64"}});
  ASSERT_EQ(cut.status, 200) << cut.body;
  const std::string b64 = cut.json_body()["data"][0]["embedding"];
  const std::vector<uint8_t> bytes = server::base64_decode(b64).value();
  ASSERT_EQ(bytes.size(), 32u * 4);
  std::vector<float> v(32);
  std::memcpy(v.data(), bytes.data(), bytes.size());
  EXPECT_LE(max_diff(v, engine_embedding("a red bicycle", 32)), 1e-7);

  // Ollama.
  const Reply ol = post("/api/embed", json{{"model", "tiny"}, {"input", {"a red bicycle"}}});
  ASSERT_EQ(ol.status, 200) << ol.body;
  EXPECT_LE(max_diff(floats(ol.json_body()["embeddings"][0]), engine_embedding("a red bicycle")), 1e-6);
  EXPECT_GT(ol.json_body()["prompt_eval_count"].get<int>(), 10);
  // Nothing to embed is answered with no vectors, as Ollama does.
  for (const json& nothing : {json::array(), json("")}) {
    const Reply none = post("/api/embed", json{{"model", "tiny"}, {"input", nothing}});
    ASSERT_EQ(none.status, 200) << none.body;
    EXPECT_EQ(none.json_body()["embeddings"], json::array()) << none.body;
    EXPECT_EQ(post("/api/embed", json{{"model", 5}, {"input", nothing}}).status, 400);  // the rest is still checked
  }
  // Ollama's earlier /api/embeddings: one prompt, one vector, the same.
  const Reply legacy = post("/api/embeddings", json{{"model", "tiny"}, {"prompt", "a red bicycle"}});
  ASSERT_EQ(legacy.status, 200) << legacy.body;
  EXPECT_LE(max_diff(floats(legacy.json_body()["embedding"]), engine_embedding("a red bicycle")), 1e-6);
  EXPECT_EQ(post("/api/embeddings", json{{"prompt", ""}}).json_body()["embedding"], json::array());
  EXPECT_EQ(post("/api/embeddings", json{{"input", "x"}}).status, 400);
}

TEST_F(RetrievalServerTest, ImagesEmbedAndAnImageAloneDiffersFromText) {
  start_kind("embedding");
  const Reply r = post("/v1/embeddings",
                       json{{"input", {{{"image", data_uri("png_rgb8_256x256.png")}},
                                       {{"image", data_uri("png_rgb8_256x256.png")}, {"text", "a caption"}}}}});
  ASSERT_EQ(r.status, 200) << r.body;
  const json b = r.json_body();
  EXPECT_GT(max_diff(floats(b["data"][0]["embedding"]), floats(b["data"][1]["embedding"])), 1e-3);
  // The same image twice in a request is encoded once.
  const std::string m = get("/metrics").body;
  EXPECT_EQ(metric(m, "qvl_images_encoded_total"), 1) << m.substr(0, 400);
}

TEST_F(RetrievalServerTest, RerankSortsByTheEnginesScores) {
  start_kind("reranker");
  const json body = {{"query", "What is the capital of France?"},
                     {"documents", {"Paris is the capital of France.", "Bananas are yellow.", {{"text", "Lyon"}}}},
                     {"top_n", 2}, {"return_documents", true}};
  const Reply r = post("/v1/rerank", body);
  ASSERT_EQ(r.status, 200) << r.body;
  const json b = r.json_body();
  ASSERT_EQ(b["results"].size(), 2u);
  EXPECT_GE(b["results"][0]["relevance_score"].get<double>(), b["results"][1]["relevance_score"].get<double>());
  // The scores are the engine's.
  std::unique_ptr<Model> m = std::move(Model::load(tiny_retrieval_model_dir("reranker"))).value();
  ThreadPool pool(1);
  std::vector<double> scores;
  for (const char* d : {"Paris is the capital of France.", "Bananas are yellow.", "Lyon"}) {
    RetrievalInput q, doc;
    q.texts = {"What is the capital of France?"};
    doc.texts = {d};
    auto g = generate(*m, pool, rerank_messages(q, doc, ""), {}, retrieval_options(*m));
    ASSERT_TRUE(g.ok());
    scores.push_back(rerank_score(*m, g->hidden));
  }
  for (const json& item : b["results"]) {
    const size_t i = item["index"];
    EXPECT_NEAR(item["relevance_score"].get<double>(), scores[i], 1e-6);
    const json expected = i == 2 ? json{{"text", "Lyon"}} : json{{"text", body["documents"][i]}};
    EXPECT_EQ(item["document"], expected);
  }
  // A query image is encoded once for all documents.
  const Reply img = post("/v1/rerank", json{{"query", {{"image", data_uri("png_rgb8_256x256.png")}}},
                                            {"documents", {"a", "b", "c"}}});
  ASSERT_EQ(img.status, 200) << img.body;
  EXPECT_EQ(img.json_body()["results"].size(), 3u);
  EXPECT_EQ(metric(get("/metrics").body, "qvl_images_encoded_total"), 1);
}

TEST_F(RetrievalServerTest, AWrongKindOfModelIsA400ThatSaysWhatIsLoaded) {
  start_kind("embedding");
  for (const char* path : {"/v1/chat/completions", "/v1/completions", "/api/chat", "/v1/responses"}) {
    const Reply r = post(path, json{{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"prompt", "hi"}, {"input", "hi"}});
    EXPECT_EQ(r.status, 400) << path;
    EXPECT_NE(r.body.find("embedding model"), std::string::npos) << r.body;
  }
  const Reply rr = post("/v1/rerank", json{{"query", "a"}, {"documents", {"b"}}});
  EXPECT_EQ(rr.status, 400);
  EXPECT_NE(rr.body.find("model_not_supported"), std::string::npos) << rr.body;
  // Bad bodies.
  for (const json& bad : {json{{"input", {{1, 2, 3}}}}, json{{"input", json::array()}}, json{{"input", "x"}, {"dimensions", 0}},
                          json{{"input", "x"}, {"dimensions", 100000}}, json{{"input", "x"}, {"encoding_format", "int8"}},
                          json{{"input", {{"text", "x"}, {"colour", "red"}}}}}) {
    const Reply r = post("/v1/embeddings", bad);
    EXPECT_EQ(r.status, 400) << bad.dump() << " " << r.body;
  }
  // Over the context (8,192 tokens) is refused before anything runs.
  std::string lots;
  for (int i = 0; i < 9000; ++i) lots += " word";
  const Reply big = post("/v1/embeddings", json{{"input", {"short", lots}}});
  EXPECT_EQ(big.status, 400);
  EXPECT_NE(big.body.find("input[1]"), std::string::npos) << big.body.substr(0, 300);
  EXPECT_NE(big.body.find("context_length_exceeded"), std::string::npos);
}

// A request of more inputs than the queue holds waits for its own passes instead of failing halfway; the
// request's instruction is checked once; URLs are counted across the request.
TEST_F(RetrievalServerTest, ARequestLargerThanTheQueueWaitsForItsOwnPasses) {
  const std::string dir = tiny_retrieval_model_dir("embedding");
  server::ServerOptions o = test_options();
  o.parallel = 1;
  o.queue = 0;
  start(o, [dir] { return Model::load(dir); });
  const Reply r = post("/v1/embeddings", json{{"input", {"one", "two", "three", "four"}}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json_body()["data"].size(), 4u);
  std::string lots;
  for (int i = 0; i < 9000; ++i) lots += " word";
  const Reply big = post("/v1/embeddings", json{{"input", {"a", "b"}}, {"instruction", lots}});
  EXPECT_EQ(big.status, 400);
  EXPECT_NE(big.body.find("instruction: "), std::string::npos) << big.body.substr(0, 300);
  json many = json::array();
  for (int i = 0; i < 9; ++i) many.push_back(json{{"image", "http://127.0.0.1:9/x" + std::to_string(i) + ".png"}});
  const Reply urls = post("/v1/embeddings", json{{"input", many}});
  EXPECT_EQ(urls.status, 400);
  EXPECT_NE(urls.body.find("too_many_urls"), std::string::npos) << urls.body;
}

TEST_F(RetrievalServerTest, AChatModelRefusesEmbeddings) {
  start();
  const Reply r = post("/v1/embeddings", json{{"input", "x"}});
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("chat model"), std::string::npos) << r.body;
  EXPECT_EQ(post("/api/embed", json{{"input", "x"}}).status, 400);
  EXPECT_EQ(post("/api/embeddings", json{{"prompt", "x"}}).status, 400);
  EXPECT_EQ(post("/v1/rerank", json{{"query", "x"}, {"documents", {"y"}}}).status, 400);
}

}  // namespace
}  // namespace qvl::test
