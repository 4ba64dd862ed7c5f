// Qwen3-VL-Embedding and Qwen3-VL-Reranker against their reference (tests/data/embedding_golden.json, written by
// tools/reference/gen_embedding_goldens.py from transformers, qwen-vl-utils and the official scripts' steps on
// the tiny model): the rendered prompts, the prompt lengths, the pooled and normalised embeddings (and their
// Matryoshka truncations) and the reranker's scores; and the model kind read from a checkpoint.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "engine/generate.h"
#include "engine/retrieval.h"
#include "io/image.h"
#include "model/gguf_export.h"
#include "model/model.h"
#include "model/model_kind.h"
#include "model/video_processor.h"
#include "util/file.h"
#include "test_paths.h"
#include "test_server_fixture.h"
#include "tokenizer/unicode.h"
#include "util/thread_pool.h"

namespace qvl {
namespace {

using json = nlohmann::json;

json golden() {
  std::ifstream f(test::data_dir() + "/embedding_golden.json");
  return json::parse(f);
}

std::vector<std::string> names(const json& v) {
  if (v.is_null()) return {};
  if (v.is_string()) return {v.get<std::string>()};
  return v.get<std::vector<std::string>>();
}

// A golden input as the engine takes it, its images decoded from tests/data/images and its video (a file under
// tests/data/videos) sampled and sized as qwen-vl-utils reads a video file.
RetrievalInput to_input(const json& in, std::vector<ImageRGB>& images,
                        std::vector<std::shared_ptr<const PreprocessedVideo>>& videos, const Model& model) {
  RetrievalInput r;
  if (in.contains("video")) {
    auto bytes = read_file_bytes(test::data_dir() + "/videos/" + in["video"].get<std::string>());
    EXPECT_TRUE(bytes.ok());
    VideoOptions vo;
    vo.fps = 1;
    vo.max_frames = 64;
    vo.qwen_vl_utils = true;
    auto v = preprocess_video_file(*bytes, model.video_config(), vo);
    EXPECT_TRUE(v.ok()) << v.status().message();
    if (v.ok()) videos.push_back(std::make_shared<const PreprocessedVideo>(std::move(*v)));
    r.videos = 1;
  }
  r.texts = names(in.value("text", json()));
  for (const std::string& n : names(in.value("image", json()))) {
    auto img = load_image_file(test::data_dir() + "/images/" + n);
    EXPECT_TRUE(img.ok()) << n;
    if (img.ok()) images.push_back(std::move(*img));
    ++r.images;
  }
  r.instruction = in.value("instruction", "");
  if (in.contains("instruction") && in["instruction"].is_null()) r.instruction.clear();
  return r;
}

double max_abs_diff(const std::vector<float>& a, const json& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) m = std::max(m, std::abs(a[i] - b[i].get<double>()));
  return m;
}

const Model& embedding_model() {
  static std::unique_ptr<Model> m = [] {
    auto r = Model::load(test::tiny_retrieval_model_dir("embedding"));
    EXPECT_TRUE(r.ok()) << r.status().message();
    return std::move(r).value();
  }();
  return *m;
}

const Model& reranker_model() {
  static std::unique_ptr<Model> m = [] {
    auto r = Model::load(test::tiny_retrieval_model_dir("reranker"));
    EXPECT_TRUE(r.ok()) << r.status().message();
    return std::move(r).value();
  }();
  return *m;
}

TEST(Retrieval, EmbeddingsMatchTheReference) {
  const Model& model = embedding_model();
  ASSERT_EQ(model.kind(), ModelKind::kEmbedding);
  ThreadPool pool(2);
  double worst = 0;
  int checked = 0;
  const json g = golden();
  for (const json& c : g["embedding"]["cases"]) {
    const std::string name = c["name"];
    for (size_t k = 0; k < c["inputs"].size(); ++k) {
      const json& in = c["inputs"][k];
      SCOPED_TRACE(name + " input " + std::to_string(k));
      std::vector<ImageRGB> images;
      std::vector<std::shared_ptr<const PreprocessedVideo>> videos;
      const RetrievalInput input = to_input(in, images, videos, model);
      const auto messages = embedding_messages(input);
      GenerateOptions o = retrieval_options(model);
      EXPECT_EQ(render_chat(messages, o.chat), c["prompts"][k].get<std::string>());
      auto r = generate(model, pool, messages, images, videos, o);
      ASSERT_TRUE(r.ok()) << r.status().message();
      EXPECT_EQ(r->timings.prompt_tokens, static_cast<int>(c["input_ids"][k].size()));
      EXPECT_TRUE(r->tokens.empty());
      auto v = embedding_vector(r->hidden);
      ASSERT_TRUE(v.ok());
      const double d = max_abs_diff(*v, c["embeddings"][k]);
      EXPECT_LE(d, 1e-5);
      worst = std::max(worst, d);
      for (const auto& [dims, rows] : c["matryoshka"].items()) {
        auto t = embedding_vector(r->hidden, std::stoll(dims));
        ASSERT_TRUE(t.ok());
        const double dt = max_abs_diff(*t, rows[k]);
        EXPECT_LE(dt, 1e-5) << dims;
        worst = std::max(worst, dt);
      }
      ++checked;
    }
  }
  EXPECT_GE(checked, 15);
  std::printf("embedding goldens: %d inputs, worst |difference| %.3g (vectors of norm 1)\n", checked, worst);
}

TEST(Retrieval, RerankerScoresMatchTheReference) {
  const Model& model = reranker_model();
  ASSERT_EQ(model.kind(), ModelKind::kReranker);
  ThreadPool pool(2);
  double worst = 0;
  int checked = 0;
  const json g = golden();
  for (const json& c : g["reranker"]["cases"]) {
    const std::string name = c["name"];
    const std::string instruction = c["instruction"].is_string() ? c["instruction"].get<std::string>() : "";
    for (size_t k = 0; k < c["documents"].size(); ++k) {
      SCOPED_TRACE(name + " document " + std::to_string(k));
      std::vector<ImageRGB> images;
      std::vector<std::shared_ptr<const PreprocessedVideo>> videos;
      const RetrievalInput q = to_input(c["query"], images, videos, model);
      const RetrievalInput d = to_input(c["documents"][k], images, videos, model);
      const auto messages = rerank_messages(q, d, instruction);
      GenerateOptions o = retrieval_options(model);
      EXPECT_EQ(render_chat(messages, o.chat), c["prompts"][k].get<std::string>());
      auto r = generate(model, pool, messages, images, videos, o);
      ASSERT_TRUE(r.ok()) << r.status().message();
      EXPECT_EQ(r->timings.prompt_tokens, static_cast<int>(c["input_ids"][k].size()));
      const double score = rerank_score(model, r->hidden);
      const double diff = std::abs(score - c["scores"][k].get<double>());
      EXPECT_LE(diff, 1e-5) << score;
      worst = std::max(worst, diff);
      ++checked;
    }
  }
  EXPECT_GE(checked, 12);
  std::printf("reranker goldens: %d pairs, worst |difference| %.3g\n", checked, worst);
}

TEST(Retrieval, InstructionIsPunctuatedAsTheReferenceDoes) {
  EXPECT_EQ(embedding_instruction(""), kDefaultEmbedInstruction);
  EXPECT_EQ(embedding_instruction(" \t\n\x1c"), kDefaultEmbedInstruction);
  EXPECT_EQ(embedding_instruction("  Find cats "), "Find cats.");
  EXPECT_EQ(embedding_instruction("Find cats:"), "Find cats:");
  EXPECT_EQ(embedding_instruction("Find cats?"), "Find cats?");
  EXPECT_EQ(embedding_instruction("猫を探す。"), "猫を探す。");  // U+3002 is Po
  EXPECT_EQ(embedding_instruction("Find cats+"), "Find cats+.");  // '+' is Sm, not punctuation
  EXPECT_EQ(embedding_instruction("\u3000Find\u3000"), "Find.");  // ideographic space is stripped
  EXPECT_TRUE(unicode::is_punctuation(U'!'));
  EXPECT_TRUE(unicode::is_punctuation(U'\u00BF'));
  EXPECT_FALSE(unicode::is_punctuation(U'$'));
  EXPECT_FALSE(unicode::is_punctuation(U'a'));
}

// qwen-vl-utils' smart_nframes and torch.linspace(...).round(): an even count, at least 4 frames.
TEST(Retrieval, VideoFramesAreChosenAsQwenVlUtilsDoes) {
  auto a = qwen_vl_utils_frame_indices(30, 30.0, 1.0, 4, 64);  // 1 s at 30 fps: 4 frames (the floor)
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(*a, (std::vector<int64_t>{0, 10, 19, 29}));
  auto b = qwen_vl_utils_frame_indices(300, 30.0, 1.0, 4, 64);  // 10 s: 10 frames
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->size(), 10u);
  EXPECT_EQ(b->front(), 0);
  EXPECT_EQ(b->back(), 299);
  auto c = qwen_vl_utils_frame_indices(3000, 30.0, 1.0, 4, 64);  // 100 s: at most 64
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->size(), 64u);
  auto d = qwen_vl_utils_frame_indices(5, 30.0, 1.0, 4, 64);  // 5 frames: 4 (even)
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(*d, (std::vector<int64_t>{0, 1, 3, 4}));
  EXPECT_FALSE(qwen_vl_utils_frame_indices(1, 30.0, 1.0, 4, 64).ok());  // one frame: fewer than 2
}

TEST(Retrieval, MatryoshkaRangeIsChecked) {
  const std::vector<float> h{3, 4, 12};
  auto all = embedding_vector(h);
  ASSERT_TRUE(all.ok());
  EXPECT_NEAR((*all)[2], 12.0 / 13.0, 1e-7);
  auto two = embedding_vector(h, 2);
  ASSERT_TRUE(two.ok());
  EXPECT_NEAR((*two)[0], 0.6, 1e-7);
  EXPECT_FALSE(embedding_vector(h, 4).ok());
  EXPECT_FALSE(embedding_vector(h, -1).ok());
}

TEST(Retrieval, KindIsReadFromTheCheckpoint) {
  EXPECT_EQ(detect_model_kind(R"({"architectures":["Qwen3VLForConditionalGeneration"]})", "", "x"), ModelKind::kChat);
  EXPECT_EQ(detect_model_kind(R"({"architectures":["Qwen3VLForEmbedding"]})", "", "x"), ModelKind::kEmbedding);
  EXPECT_EQ(detect_model_kind(R"({"architectures":["Qwen3VLForSequenceClassification"]})", "", "x"),
            ModelKind::kReranker);
  EXPECT_EQ(detect_model_kind("{}", "---\nlicense: apache-2.0\n---\n\n# Qwen3-VL-Embedding-2B\n", "snapshot"),
            ModelKind::kEmbedding);
  EXPECT_EQ(detect_model_kind("{}", "# Qwen3-VL-2B-Instruct\n\nAn embedding of ...", "x"), ModelKind::kChat);
  EXPECT_EQ(detect_model_kind("not json", "", "Qwen3-VL-Reranker-2B-Q8_0.gguf"), ModelKind::kReranker);
  EXPECT_EQ(embedding_model().kind(), ModelKind::kEmbedding);
  EXPECT_EQ(reranker_model().kind(), ModelKind::kReranker);
  EXPECT_EQ(reranker_model().rerank_row().size(), static_cast<size_t>(reranker_model().config().text.hidden_size));
  EXPECT_TRUE(embedding_model().rerank_row().empty());
}

// A retrieval model written as GGUF keeps its kind (in general.name), whatever its directory is called.
TEST(Retrieval, AGgufOfARetrievalModelLoadsAsItsKind) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("qvl-test-gguf-" + std::to_string(::getpid()));
  auto m = Model::load(test::tiny_retrieval_model_dir("reranker"), WeightTypes{});
  ASSERT_TRUE(m.ok()) << m.status().message();
  auto path = write_gguf_model(**m, WeightTypes{}, dir.string(), "plain-name");
  ASSERT_TRUE(path.ok()) << path.status().message();
  auto g = Model::load(*path);
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ((*g)->kind(), ModelKind::kReranker);
  EXPECT_EQ((*g)->rerank_row().size(), reranker_model().rerank_row().size());
  std::error_code ec;
  fs::remove_all(dir, ec);
}

// make-test-model's retrieval presets write the tiny weights with the card that names the kind.
TEST(Retrieval, RetrievalPresetsLoadAsTheirKind) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("qvl-test-tiny-reranker-" + std::to_string(::getpid()));
  TestModelOptions o;
  o.preset = "tiny-reranker";
  o.seed = 1;
  o.out_dir = dir.string();
  o.model_files_dir = test::model_files_dir();
  ASSERT_TRUE(make_test_model(o).ok());
  auto m = Model::load(dir.string());
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ((*m)->kind(), ModelKind::kReranker);
  EXPECT_EQ((*m)->rerank_row(), reranker_model().rerank_row());  // the tiny weights
  std::error_code ec;
  fs::remove_all(dir, ec);
}

}  // namespace
}  // namespace qvl
