// The forward pass against transformers (float32, eager attention) on the tiny test model: vision output
// and DeepStack features, the hidden state after every text layer, logits at every prompt position and 32
// greedy tokens, for text only, one image, two images and a two-turn conversation.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>

#include <nlohmann/json.hpp>

#include "engine/generate.h"
#include "engine/prompt.h"
#include "io/npy.h"
#include "model/mrope.h"
#include "model/convert.h"
#include "model/test_model.h"
#include "model/text.h"
#include "model/video_processor.h"
#include "model/vision.h"
#include "test_paths.h"
#include "chat/chat_json.h"
#include "util/file.h"

namespace qvl {
namespace {

constexpr double kTolerance = 1e-4;  // max |ours - theirs| / max |theirs| per tensor (logits: per position)

class ModelForward : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string((std::filesystem::temp_directory_path() / ("qvl-test-tiny-" + std::to_string(::getpid()))).string());
    TestModelOptions o;
    o.preset = "tiny";
    o.seed = 1;
    o.out_dir = *dir_;
    o.model_files_dir = test::model_files_dir();
    Status s = make_test_model(o);
    ASSERT_TRUE(s.ok()) << s.message();
    auto m = Model::load(*dir_);
    ASSERT_TRUE(m.ok()) << m.status().message();
    model_ = m->release();
    pool_ = new ThreadPool(2);
  }
  static void TearDownTestSuite() {
    delete model_;
    delete pool_;
    std::filesystem::remove_all(*dir_);
    delete dir_;
  }
  static std::string* dir_;
  static Model* model_;
  static ThreadPool* pool_;
};
std::string* ModelForward::dir_ = nullptr;
Model* ModelForward::model_ = nullptr;
ThreadPool* ModelForward::pool_ = nullptr;

// Relative error of `got` against the reference array: max |diff| / max |ref|.
double rel_error(const float* got, const NpyArray& ref, int64_t count) {
  const float* r = reinterpret_cast<const float*>(ref.data.data());
  double max_ref = 0, max_diff = 0;
  for (int64_t i = 0; i < count; ++i) {
    max_ref = std::max(max_ref, std::abs(static_cast<double>(r[i])));
    max_diff = std::max(max_diff, std::abs(static_cast<double>(got[i]) - r[i]));
  }
  return max_ref > 0 ? max_diff / max_ref : max_diff;
}

NpyArray load(const std::string& path) {
  auto a = read_npy(path);
  EXPECT_TRUE(a.ok()) << a.status().message();
  return a.ok() ? std::move(a).value() : NpyArray{};
}

// root: the golden folder under tests/data ("model" for the tiny preset, "model-tiny-8b", ...).
void check_case(const Model& model, ThreadPool& pool, const std::string& name, const std::string& root = "model") {
  SCOPED_TRACE(root + "/" + name);
  const std::string dir = test::data_dir() + "/" + root + "/" + name;
  auto text = read_file_text(dir + "/case.json");
  ASSERT_TRUE(text.ok()) << text.status().message();
  const auto c = nlohmann::ordered_json::parse(*text);

  // Prompt: messages -> ids, exactly the processor's.
  auto messages = chat_messages_from_json(c["messages"]);
  ASSERT_TRUE(messages.ok()) << messages.status().message();
  std::vector<ImageRGB> images;
  std::vector<PreprocessedImage> pre;
  std::vector<int> tokens;
  std::vector<GridTHW> grids;
  PreprocessOptions popts;
  popts.min_pixels = c["min_pixels"];
  popts.max_pixels = c["max_pixels"];
  for (const auto& f : c["images"]) {
    auto img = load_image_file(test::data_dir() + "/" + f.get<std::string>());
    ASSERT_TRUE(img.ok()) << img.status().message();
    auto p = preprocess_image(*img, model.image_config(), popts);
    ASSERT_TRUE(p.ok()) << p.status().message();
    tokens.push_back(p->num_tokens());
    grids.push_back({p->grid_t, p->grid_h, p->grid_w});
    images.push_back(std::move(img).value());
    pre.push_back(std::move(p).value());
  }
  // Videos (the case's clip decoded and preprocessed as qvl does): frame groups after the images.
  std::vector<std::shared_ptr<const PreprocessedVideo>> videos;
  std::vector<VideoPromptPart> video_parts;
  std::vector<GridTHW> video_grids;
  for (const auto& vj : c.value("videos", nlohmann::ordered_json::array())) {
    ASSERT_TRUE(video_supported()) << "built without FFmpeg";
    auto bytes = read_file_bytes(test::data_dir() + "/" + vj["file"].get<std::string>());
    ASSERT_TRUE(bytes.ok()) << bytes.status().message();
    VideoOptions vo;
    vo.min_pixels = vj["min_pixels"];
    vo.max_pixels = vj["max_pixels"];
    if (!vj["fps"].is_null()) vo.fps = vj["fps"];
    auto v = preprocess_video_file(*bytes, model.video_config(), vo);
    ASSERT_TRUE(v.ok()) << v.status().message();
    video_parts.push_back({v->timestamps, v->tokens_per_group()});
    video_grids.push_back({v->grid_t, v->grid_h, v->grid_w});
    videos.push_back(std::make_shared<const PreprocessedVideo>(std::move(v).value()));
  }
  ASSERT_EQ(video_grids.size(), c.value("video_grid_thw", nlohmann::ordered_json::array()).size());
  auto ids = build_prompt_ids(model.tokenizer(), render_chat_with_spans(*messages), tokens, video_parts);
  ASSERT_TRUE(ids.ok()) << ids.status().message();
  ASSERT_EQ(*ids, c["input_ids"].get<std::vector<int32_t>>());
  const int64_t n = static_cast<int64_t>(ids->size());
  auto pos = get_rope_index(*ids, grids, video_grids, model.config().vision.spatial_merge_size);
  ASSERT_TRUE(pos.ok()) << pos.status().message();

  // Vision tower and DeepStack features (transformers runs images and videos in separate passes; each
  // image and each frame group attends within itself, so one pass over them in prompt order is the same).
  VisionOutput vis;
  VisualInputs visual;
  ASSERT_TRUE(pre.empty() || videos.empty()) << "a case with both: the visual.npy order would need care";
  if (!pre.empty() || !videos.empty()) {
    std::vector<const PreprocessedImage*> ptrs;
    for (const auto& p : pre) ptrs.push_back(&p);
    for (const auto& v : videos)
      for (const auto& g : v->groups) ptrs.push_back(&g);
    vis = encode_images(model, pool, ptrs);
    NpyArray ref = load(dir + "/visual.npy");
    ASSERT_EQ(ref.numel(), vis.n_tokens * vis.dim);
    const double e = rel_error(vis.embeds.data(), ref, ref.numel());
    std::printf("[forward] %s visual rel err %.2e\n", name.c_str(), e);
    EXPECT_LE(e, kTolerance) << "vision tower output";
    for (size_t j = 0; j < vis.deepstack.size(); ++j) {
      NpyArray d = load(dir + "/deepstack_" + std::to_string(j) + ".npy");
      ASSERT_EQ(d.numel(), vis.n_tokens * vis.dim);
      EXPECT_LE(rel_error(vis.deepstack[j].data(), d, d.numel()), kTolerance) << "DeepStack feature " << j;
    }
    visual.embeds = vis.embeds.data();
    visual.n_visual = vis.n_tokens;
    for (const auto& d : vis.deepstack) visual.deepstack.push_back(d.data());
  }

  // Prefill with every layer's output captured; logits at every position.
  std::map<std::string, std::vector<float>> layers;
  DumpFn dump = [&](const std::string& key, const float* data, const std::vector<int64_t>& shape) {
    if (key.rfind("model.language_model.layers.", 0) != 0) return;
    size_t count = 1;
    for (int64_t d : shape) count *= static_cast<size_t>(d);
    layers[key].assign(data, data + count);
  };
  const int64_t V = model.config().text.vocab_size;
  KVCache cache(model.config().text, n + 8, KVType::kF32);  // exactly what transformers computes
  std::vector<float> logits(static_cast<size_t>(n * V));
  const int32_t* p3[3] = {pos->pos[0].data(), pos->pos[1].data(), pos->pos[2].data()};
  text_forward(model, pool, cache, ids->data(), n, p3, visual.n_visual == 0 ? nullptr : &visual, LogitsMode::kAll,
               logits.data(), &dump);
  int first_diverging = -1;
  for (int i = 0; i < model.config().text.num_hidden_layers; ++i) {
    NpyArray ref = load(dir + "/layer_" + std::to_string(i) + ".npy");
    const auto& got = layers["model.language_model.layers." + std::to_string(i)];
    ASSERT_EQ(static_cast<int64_t>(got.size()), ref.numel());
    const double e = rel_error(got.data(), ref, ref.numel());
    if (e > kTolerance && first_diverging < 0) first_diverging = i;
  }
  EXPECT_EQ(first_diverging, -1) << "first text layer whose output diverges from transformers";

  const auto& L = c["logits"];
  double worst = 0;
  int argmax_mismatch = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float* row = &logits[static_cast<size_t>(i * V)];
    const double max_abs = L["max_abs"][i].get<double>();
    auto check = [&](int64_t id, double want) { worst = std::max(worst, std::abs(row[id] - want) / max_abs); };
    for (size_t k = 0; k < L["top_ids"][i].size(); ++k) check(L["top_ids"][i][k], L["top_values"][i][k]);
    for (size_t k = 0; k < L["fixed_ids"].size(); ++k) check(L["fixed_ids"][k], L["fixed_values"][i][k]);
    double mx = row[0];
    int64_t am = 0;
    for (int64_t v = 1; v < V; ++v)
      if (row[v] > mx) mx = row[v], am = v;
    double sum = 0;
    for (int64_t v = 0; v < V; ++v) sum += std::exp(static_cast<double>(row[v]) - mx);
    const double lse = mx + std::log(sum);
    worst = std::max(worst, std::abs(lse - L["logsumexp"][i].get<double>()) / max_abs);
    argmax_mismatch += am != L["argmax"][i].get<int64_t>();
  }
  std::printf("[forward] %s: %lld positions, max relative logit error %.2e\n", name.c_str(),
              static_cast<long long>(n), worst);
  EXPECT_LE(worst, kTolerance) << "logits";
  EXPECT_EQ(argmax_mismatch, 0);

  // 32 greedy tokens through the whole engine (prefill + cached decode steps).
  GenerateOptions g;
  g.sampling.temperature = 0;
  g.sampling.repetition_penalty = 1.0f;
  g.max_tokens = 32;
  g.ignore_eos = true;
  g.image = popts;
  auto r = generate(model, pool, *messages, images, videos, g);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->tokens, c["greedy"].get<std::vector<int32_t>>());
  // The same with the prompt read 7 tokens at a time (slices that cut through the images' tokens).
  g.prefill_chunk = 7;
  auto sliced = generate(model, pool, *messages, images, videos, g);
  ASSERT_TRUE(sliced.ok()) << sliced.status().message();
  EXPECT_EQ(sliced->tokens, c["greedy"].get<std::vector<int32_t>>()) << "prefill in slices of 7 tokens";
}

// The 4B and 8B structures at tiny widths (make-test-model --preset tiny-4b / tiny-8b), against transformers
// on their own goldens: the 4B's q width (heads x head_dim = 512) wider than its hidden size (96) and 4:1
// GQA; the 8B's untied lm_head, 72-wide vision heads, a vision MLP 200 wide and DeepStack at [1, 2, 4].
struct FamilyModel {
  std::string dir;
  std::unique_ptr<Model> model;
};
FamilyModel& family_model(const std::string& preset) {
  static std::map<std::string, FamilyModel> loaded;
  FamilyModel& f = loaded[preset];
  if (!f.model) {
    f.dir = (std::filesystem::temp_directory_path() / ("qvl-test-" + preset + "-" + std::to_string(::getpid()))).string();
    TestModelOptions o;
    o.preset = preset;
    o.seed = 1;
    o.out_dir = f.dir;
    o.model_files_dir = test::model_files_dir();
    Status s = make_test_model(o);
    EXPECT_TRUE(s.ok()) << s.message();
    auto m = Model::load(f.dir);
    EXPECT_TRUE(m.ok()) << m.status().message();
    if (m.ok()) f.model = std::move(m).value();
    std::filesystem::remove_all(f.dir);  // the weights stay mapped
  }
  return f;
}

TEST(ModelFamily, Tiny4BMatchesTransformers) {
  FamilyModel& f = family_model("tiny-4b");
  ASSERT_TRUE(f.model);
  EXPECT_NE(f.model->config().text.num_attention_heads * f.model->config().text.head_dim, f.model->config().text.hidden_size);
  ThreadPool pool(2);
  check_case(*f.model, pool, "text_only", "model-tiny-4b");
  check_case(*f.model, pool, "one_image", "model-tiny-4b");
}

TEST(ModelFamily, Tiny8BMatchesTransformers) {
  FamilyModel& f = family_model("tiny-8b");
  ASSERT_TRUE(f.model);
  EXPECT_FALSE(f.model->config().text.tie_word_embeddings);
  ThreadPool pool(2);
  check_case(*f.model, pool, "text_only", "model-tiny-8b");
  check_case(*f.model, pool, "one_image", "model-tiny-8b");
}

// Quantized at load, the 8B's vision MLP (its width is not a multiple of the 32-value block, as the real
// 8B's 4304 is not) keeps its stored type; everything else is q8_0, and the model answers.
TEST(ModelFamily, Tiny8BQuantizedKeepsTheUnblockableMatrices) {
  const std::string dir = (std::filesystem::temp_directory_path() / ("qvl-test-8bq-" + std::to_string(::getpid()))).string();
  TestModelOptions o;
  o.preset = "tiny-8b";
  o.seed = 1;
  o.out_dir = dir;
  o.model_files_dir = test::model_files_dir();
  ASSERT_TRUE(make_test_model(o).ok());
  auto m = Model::load(dir, default_weight_types());
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(m.ok()) << m.status().message();
  const auto& kept = (*m)->kept_matrices();
  ASSERT_EQ(kept.size(), 5u);  // one fc2 per vision block
  for (const std::string& k : kept) EXPECT_NE(k.find("mlp.linear_fc2"), std::string::npos) << k;
  EXPECT_EQ((*m)->vision_weight_type(), WeightType::kQ8_0);
  ThreadPool pool(2);
  GenerateOptions g;
  g.sampling.temperature = 0;
  g.max_tokens = 4;
  auto img = load_image_file(test::data_dir() + "/images/png_rgb8_256x256.png");
  ASSERT_TRUE(img.ok());
  auto r = generate(**m, pool, {user_message(1, "What is it?")}, {*img}, g);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->tokens.size(), 4u);
}

TEST_F(ModelForward, TextOnly) { check_case(*model_, *pool_, "text_only"); }
TEST_F(ModelForward, OneImage) { check_case(*model_, *pool_, "one_image"); }
TEST_F(ModelForward, TwoImages) { check_case(*model_, *pool_, "two_images"); }
TEST_F(ModelForward, TwoTurnsImageInFirst) { check_case(*model_, *pool_, "two_turns"); }
// A clip: two frame groups with their timestamps, through the tower and the decoder.
TEST_F(ModelForward, OneVideo) {
  if (!video_supported()) GTEST_SKIP() << "built without FFmpeg";
  check_case(*model_, *pool_, "one_video");
}

// The f16 cache (the default) against the f32 one: a 40-token prefill, then 8 single-token steps (the
// decode path), logits within 1e-2 of the largest logit and the same argmax at every step.
TEST_F(ModelForward, F16CacheFollowsTheF32Cache) {
  const TextConfig& tc = model_->config().text;
  const int64_t V = tc.vocab_size, n0 = 40, steps = 8;
  std::vector<int32_t> ids(n0 + steps), p(n0 + steps);
  for (int64_t i = 0; i < n0 + steps; ++i) ids[i] = static_cast<int32_t>((i * 7919 + 13) % 1000), p[i] = static_cast<int32_t>(i);
  KVCache c32(tc, n0 + steps, KVType::kF32), c16(tc, n0 + steps, KVType::kF16);
  std::vector<float> l32(V), l16(V);
  for (int64_t at = 0; at < n0 + steps; at += (at == 0 ? n0 : 1)) {
    const int64_t n = at == 0 ? n0 : 1;
    const int32_t* p3[3] = {&p[at], &p[at], &p[at]};
    text_forward(*model_, *pool_, c32, &ids[at], n, p3, nullptr, LogitsMode::kLast, l32.data());
    text_forward(*model_, *pool_, c16, &ids[at], n, p3, nullptr, LogitsMode::kLast, l16.data());
    double max_abs = 0, max_err = 0;
    for (int64_t v = 0; v < V; ++v) {
      max_abs = std::max(max_abs, std::abs(double{l32[v]}));
      max_err = std::max(max_err, std::abs(double{l32[v]} - l16[v]));
    }
    EXPECT_LE(max_err / max_abs, 1e-2) << "at position " << at;
    EXPECT_GT(max_err, 0.0) << "the f16 cache should round something";
    EXPECT_EQ(std::max_element(l32.begin(), l32.end()) - l32.begin(), std::max_element(l16.begin(), l16.end()) - l16.begin())
        << "at position " << at;
  }
}

// keep_going is asked before the vision pass and between prefill slices; false ends the answer there as
// cancelled, with no token generated.
TEST_F(ModelForward, PrefillStopsBetweenSlicesWhenAsked) {
  ChatMessage m;
  m.role = "user";
  m.content_string = "one two three four five six seven eight nine ten eleven twelve";
  GenerateOptions g;
  g.prefill_chunk = 4;
  g.max_tokens = 8;
  g.ignore_eos = true;
  int asked = 0;
  GenerateCallbacks cb;
  cb.keep_going = [&] { return ++asked < 3; };  // yes before the vision pass and slice 2, no before slice 3
  auto r = generate(*model_, *pool_, {m}, {}, g, cb);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->finish, FinishReason::kCancelled);
  EXPECT_TRUE(r->tokens.empty());
  EXPECT_EQ(asked, 3);
  // Never asked to stop: the same prompt runs to its 8 tokens.
  cb.keep_going = [] { return true; };
  auto full = generate(*model_, *pool_, {m}, {}, g, cb);
  ASSERT_TRUE(full.ok()) << full.status().message();
  EXPECT_EQ(full->tokens.size(), 8u);
}

// One TextActivations for every pass (model/activations.h): a pass of no more rows than the last allocates
// nothing, and buffers left dirty by a longer pass give the logits a fresh one gives, bit for bit.
TEST_F(ModelForward, ActivationsAreReusedAndLeaveNoTrace) {
  const TextConfig& tc = model_->config().text;
  const int64_t V = tc.vocab_size, n0 = 24, n1 = 5;
  std::vector<int32_t> ids(n0), p(n0);
  for (int64_t i = 0; i < n0; ++i) ids[i] = static_cast<int32_t>((i * 4099 + 7) % 1000), p[i] = static_cast<int32_t>(i);
  const int32_t* p3[3] = {p.data(), p.data(), p.data()};
  auto pass = [&](int64_t n, TextActivations* act, std::vector<float>& logits) {
    KVCache cache(tc, n0);
    TextSeq s;
    s.cache = &cache;
    s.ids = ids.data();
    s.n = n;
    s.pos[0] = p3[0], s.pos[1] = p3[1], s.pos[2] = p3[2];
    s.mode = LogitsMode::kAll;
    logits.assign(static_cast<size_t>(n * V), 0);
    s.logits = logits.data();
    text_forward_batch(*model_, *pool_, {s}, nullptr, act);
  };
  TextActivations act;
  std::vector<float> big, reused, fresh;
  pass(n0, &act, big);
  const size_t bytes = act.bytes();
  // At least every buffer of a 24-row pass: h, x, tmp [n, H]; q, attn [n, heads * hd]; k, v; gate, up; cos, sin.
  const int64_t H = tc.hidden_size, hd = tc.head_dim, qd = tc.num_attention_heads * hd, kvd = tc.num_key_value_heads * hd;
  EXPECT_GE(bytes, sizeof(float) * static_cast<size_t>(n0 * (3 * H + 2 * qd + 2 * kvd + 2 * tc.intermediate_size + 2 * hd)));
  const float* h_before = act.h.data();
  const float* gate_before = act.gate.data();
  pass(n1, &act, reused);
  EXPECT_EQ(act.h.data(), h_before) << "a shorter pass reallocated the hidden states";
  EXPECT_EQ(act.gate.data(), gate_before) << "a shorter pass reallocated the MLP buffer";
  EXPECT_EQ(act.bytes(), bytes);
  pass(n1, nullptr, fresh);
  ASSERT_EQ(reused.size(), fresh.size());
  for (size_t i = 0; i < fresh.size(); ++i) ASSERT_EQ(reused[i], fresh[i]) << "logit " << i;
  // Two sequences in one pass: their logits gathered in act.logits, then handed out.
  auto two = [&](TextActivations* act, std::vector<float>& logits) {
    KVCache c0(tc, n0), c1(tc, n0);
    logits.assign(static_cast<size_t>(2 * V), 0);
    std::vector<TextSeq> seqs(2);
    for (int j = 0; j < 2; ++j) {
      seqs[j].cache = j == 0 ? &c0 : &c1;
      seqs[j].ids = ids.data() + 3 * j;
      seqs[j].n = 4 + 3 * j;
      seqs[j].pos[0] = seqs[j].pos[1] = seqs[j].pos[2] = p.data();
      seqs[j].mode = LogitsMode::kLast;
      seqs[j].logits = logits.data() + j * V;
    }
    text_forward_batch(*model_, *pool_, seqs, nullptr, act);
  };
  std::vector<float> two_reused, two_fresh;
  two(&act, two_reused);
  two(&act, two_reused);  // the second time over buffers the first left
  two(nullptr, two_fresh);
  for (size_t i = 0; i < two_fresh.size(); ++i) ASSERT_EQ(two_reused[i], two_fresh[i]) << "batched logit " << i;
  // The vision tower's buffers: sized for its patches during the pass, given back after it.
  VisionActivations vact;
  ImageRGB img;
  img.width = 64, img.height = 48;
  img.pixels.assign(64 * 48 * 3, 90);
  auto pre = preprocess_image(img, model_->image_config());
  ASSERT_TRUE(pre.ok()) << pre.status().message();
  const std::vector<const PreprocessedImage*> ptrs{&*pre};
  VisionOutput with_act = encode_images(*model_, *pool_, ptrs, nullptr, &vact);
  const VisionConfig& vc = model_->config().vision;
  const int64_t N = pre->num_patches(), D = vc.hidden_size;
  EXPECT_GE(vact.peak, sizeof(float) * static_cast<size_t>(N * (6 * D + 2 * vc.head_dim()) + std::min<int64_t>(N, 512) * vc.intermediate_size));
  EXPECT_EQ(vact.bytes(), 0u) << "the tower's buffers outlived its pass";
  VisionOutput alone = encode_images(*model_, *pool_, ptrs);
  EXPECT_EQ(with_act.embeds, alone.embeds);
  EXPECT_EQ(with_act.deepstack, alone.deepstack);
}

TEST_F(ModelForward, RejectsAPromptLongerThanTheContext) {
  ChatMessage m;
  m.role = "user";
  m.content_string = std::string(400, 'a') + " b c d e f g";
  GenerateOptions g;
  g.context = 32;
  auto r = generate(*model_, *pool_, {m}, {}, g);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("context"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace qvl
