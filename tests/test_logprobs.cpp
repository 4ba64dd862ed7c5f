// Log-probabilities (OpenAI's logprobs/top_logprobs, the legacy completions' echo): the prompt's against the
// logsumexp and top logits transformers computed (tests/data/model goldens), the generated tokens' recomputed
// from the model's logits of the same sequence, and the grammar mask's renormalisation.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <random>

#include <nlohmann/json.hpp>

#include "engine/generate.h"
#include "engine/logprobs.h"
#include "model/mrope.h"
#include "model/test_model.h"
#include "model/text.h"
#include "test_paths.h"
#include "util/file.h"

namespace qvl {
namespace {

// log_softmax(row) in double, the obvious way.
std::vector<double> log_softmax(const float* row, int64_t V) {
  double mx = -std::numeric_limits<double>::infinity();
  for (int64_t v = 0; v < V; ++v) mx = std::max(mx, static_cast<double>(row[v]));
  double sum = 0;
  for (int64_t v = 0; v < V; ++v) sum += std::exp(row[v] - mx);
  std::vector<double> out(static_cast<size_t>(V));
  for (int64_t v = 0; v < V; ++v) out[static_cast<size_t>(v)] = row[v] - mx - std::log(sum);
  return out;
}

TEST(TokenLogprob, IsTheLogSoftmaxWithItsLargestEntries) {
  std::mt19937 gen(7);
  std::normal_distribution<float> d(0.0f, 4.0f);
  std::vector<float> logits(1000);
  for (float& x : logits) x = d(gen);
  logits[17] = logits[400] = 30.0f;  // a tie at the top: the lower id first
  const std::vector<double> ref = log_softmax(logits.data(), 1000);
  const TokenLogprob lp = token_logprob(logits.data(), 1000, 123, 5);
  EXPECT_EQ(lp.token, 123);
  EXPECT_NEAR(lp.logprob, ref[123], 1e-5);
  ASSERT_EQ(lp.top.size(), 5u);
  EXPECT_EQ(lp.top[0].first, 17);
  EXPECT_EQ(lp.top[1].first, 400);
  std::vector<int> order(1000);
  for (int i = 0; i < 1000; ++i) order[static_cast<size_t>(i)] = i;
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return logits[a] > logits[b]; });
  for (int k = 0; k < 5; ++k) {
    EXPECT_EQ(lp.top[static_cast<size_t>(k)].first, order[static_cast<size_t>(k)]);
    EXPECT_NEAR(lp.top[static_cast<size_t>(k)].second, ref[static_cast<size_t>(order[static_cast<size_t>(k)])], 1e-5);
  }
  EXPECT_TRUE(token_logprob(logits.data(), 1000, 0, 0).top.empty());

  // Masked entries (-inf) carry no mass and are never listed; the rest renormalise among themselves.
  std::vector<float> masked(1000, -std::numeric_limits<float>::infinity());
  masked[5] = 1.0f;
  masked[9] = 1.0f;
  const TokenLogprob m = token_logprob(masked.data(), 1000, 9, 20);
  EXPECT_NEAR(m.logprob, std::log(0.5), 1e-6);
  ASSERT_EQ(m.top.size(), 2u);
  EXPECT_EQ(m.top[0].first, 5);
  EXPECT_EQ(token_logprob(masked.data(), 1000, 0, 3).logprob, -std::numeric_limits<float>::infinity());
}

class Logprobs : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string((std::filesystem::temp_directory_path() / ("qvl-test-lp-" + std::to_string(::getpid()))).string());
    TestModelOptions o;
    o.preset = "tiny";
    o.seed = 1;  // the model the goldens in tests/data/model were made from
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
  // Every position's logits of `ids` in one pass on a float32 cache.
  static std::vector<float> all_logits(const std::vector<int32_t>& ids) {
    const int64_t n = static_cast<int64_t>(ids.size()), V = model_->config().text.vocab_size;
    auto pos = get_rope_index(ids, {}, {}, model_->config().vision.spatial_merge_size);
    EXPECT_TRUE(pos.ok());
    KVCache cache(model_->config().text, n + 1, KVType::kF32);
    std::vector<float> logits(static_cast<size_t>(n * V));
    const int32_t* p3[3] = {pos->pos[0].data(), pos->pos[1].data(), pos->pos[2].data()};
    text_forward(*model_, *pool_, cache, ids.data(), n, p3, nullptr, LogitsMode::kAll, logits.data());
    return logits;
  }
  static std::string* dir_;
  static Model* model_;
  static ThreadPool* pool_;
};
std::string* Logprobs::dir_ = nullptr;
Model* Logprobs::model_ = nullptr;
ThreadPool* Logprobs::pool_ = nullptr;

// The prompt's log-probabilities (a raw prompt, as /v1/completions with echo reads it) against transformers:
// its top entries at every position are top logit - logsumexp of the golden.
TEST_F(Logprobs, PromptLogprobsMatchTransformers) {
  auto text = read_file_text(test::data_dir() + "/model/text_only/case.json");
  ASSERT_TRUE(text.ok()) << text.status().message();
  const auto c = nlohmann::ordered_json::parse(*text);
  const auto ids = c["input_ids"].get<std::vector<int32_t>>();
  const auto& L = c["logits"];
  GenerateOptions g;
  g.raw_prompt = ids;
  g.prompt_logprobs = 5;
  g.logprobs = 5;
  g.max_tokens = 1;
  g.sampling.temperature = 0;
  g.kv_type = KVType::kF32;
  g.prefill_chunk = 7;  // slices that end inside the prompt
  auto r = generate(*model_, *pool_, {}, {}, g);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->prompt_ids, ids);
  ASSERT_EQ(r->prompt_logprobs.size(), ids.size() - 1);
  double worst = 0;
  for (size_t j = 0; j + 1 < ids.size(); ++j) {
    const TokenLogprob& lp = r->prompt_logprobs[j];
    EXPECT_EQ(lp.token, ids[j + 1]);
    ASSERT_EQ(lp.top.size(), 5u);
    const double lse = L["logsumexp"][j].get<double>(), scale = L["max_abs"][j].get<double>();
    for (size_t k = 0; k < 5; ++k) {
      EXPECT_EQ(lp.top[k].first, L["top_ids"][j][k].get<int32_t>()) << "position " << j << " rank " << k;
      worst = std::max(worst, std::abs(lp.top[k].second - (L["top_values"][j][k].get<double>() - lse)) / scale);
    }
  }
  std::printf("[logprobs] prompt: %zu positions, max relative error %.2e against transformers\n", ids.size() - 1, worst);
  EXPECT_LE(worst, 1e-4);
  // The answer's first token, from the prompt's last row: greedy is that row's top entry.
  ASSERT_EQ(r->logprobs.size(), 1u);
  EXPECT_EQ(r->logprobs[0].token, L["argmax"][ids.size() - 1].get<int32_t>());
  EXPECT_NEAR(r->logprobs[0].logprob, L["top_values"][ids.size() - 1][0].get<double>() - L["logsumexp"][ids.size() - 1].get<double>(),
              1e-4 * L["max_abs"][ids.size() - 1].get<double>());
}

// Generated tokens, sampled with penalties and temperature: the values are those of the model's own
// distribution at each step, recomputed from one pass over prompt + answer.
TEST_F(Logprobs, GeneratedLogprobsAreTheModelsDistribution) {
  const Tokenizer& tok = model_->tokenizer();
  const std::vector<int32_t> prompt =
      tok.encode("<|im_start|>user\nName three colours.<|im_end|>\n<|im_start|>assistant\n", /*allow_special=*/true);
  GenerateOptions g;
  g.raw_prompt = prompt;
  g.logprobs = 4;
  g.max_tokens = 12;
  g.ignore_eos = true;
  g.kv_type = KVType::kF32;
  g.sampling.temperature = 1.3f;
  g.sampling.top_k = 7;
  g.sampling.repetition_penalty = 1.4f;
  g.sampling.seed = 11;
  auto r = generate(*model_, *pool_, {}, {}, g);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->tokens.size(), 12u);
  ASSERT_EQ(r->logprobs.size(), 12u);
  EXPECT_TRUE(r->prompt_logprobs.empty());
  std::vector<int32_t> seq = prompt;
  seq.insert(seq.end(), r->tokens.begin(), r->tokens.end());
  const std::vector<float> logits = all_logits(seq);
  const int64_t V = model_->config().text.vocab_size;
  for (size_t i = 0; i < r->tokens.size(); ++i) {
    const std::vector<double> ref = log_softmax(&logits[(prompt.size() - 1 + i) * static_cast<size_t>(V)], V);
    const TokenLogprob& lp = r->logprobs[i];
    EXPECT_EQ(lp.token, r->tokens[i]);
    EXPECT_NEAR(lp.logprob, ref[static_cast<size_t>(lp.token)], 1e-4) << "token " << i;
    ASSERT_EQ(lp.top.size(), 4u);
    for (size_t k = 0; k < 4; ++k) EXPECT_NEAR(lp.top[k].second, ref[static_cast<size_t>(lp.top[k].first)], 1e-4);
    const double best = *std::max_element(ref.begin(), ref.end());
    EXPECT_NEAR(lp.top[0].second, best, 1e-4);
  }
}

// Under a grammar the values are the masked distribution's: each token's at least its unmasked value, and the
// listed alternatives are tokens the grammar allows (together at most probability 1).
TEST_F(Logprobs, ConstrainedLogprobsAreRenormalisedOverTheAllowedTokens) {
  const Tokenizer& tok = model_->tokenizer();
  const std::vector<int32_t> prompt =
      tok.encode("<|im_start|>user\nJSON please.<|im_end|>\n<|im_start|>assistant\n", /*allow_special=*/true);
  GenerateOptions g;
  g.raw_prompt = prompt;
  g.logprobs = 20;
  g.max_tokens = 10;
  g.kv_type = KVType::kF32;
  g.sampling.temperature = 0;
  g.json = JsonGrammar::any_object();
  auto r = generate(*model_, *pool_, {}, {}, g);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_FALSE(r->tokens.empty());
  ASSERT_EQ(r->logprobs.size(), r->tokens.size());
  EXPECT_EQ(r->text.substr(0, 1), "{");
  std::vector<int32_t> seq = prompt;
  seq.insert(seq.end(), r->tokens.begin(), r->tokens.end());
  const std::vector<float> logits = all_logits(seq);
  const int64_t V = model_->config().text.vocab_size;
  bool renormalised = false;
  for (size_t i = 0; i < r->tokens.size(); ++i) {
    const std::vector<double> ref = log_softmax(&logits[(prompt.size() - 1 + i) * static_cast<size_t>(V)], V);
    const TokenLogprob& lp = r->logprobs[i];
    EXPECT_GE(lp.logprob, ref[static_cast<size_t>(lp.token)] - 1e-5);
    renormalised = renormalised || lp.logprob > ref[static_cast<size_t>(lp.token)] + 1e-3;
    double mass = 0;
    for (const auto& [id, v] : lp.top) mass += std::exp(v);
    EXPECT_LE(mass, 1.0 + 1e-5);
    // The first token must open the object: every listed alternative is text that starts one.
    if (i == 0)
      for (const auto& [id, v] : lp.top) {
        const std::string piece(tok.token_bytes(id));
        const size_t at = piece.find_first_not_of(" \n\t");
        EXPECT_TRUE(at == std::string::npos || piece[at] == '{') << "token " << id << " '" << piece << "'";
      }
  }
  EXPECT_TRUE(renormalised) << "the mask removed no probability at any step: the test shows nothing";
}

TEST_F(Logprobs, RawPromptsRefuseImagesAndBadIds) {
  GenerateOptions g;
  g.raw_prompt = {1, 2, model_->config().image_token_id, 3};
  auto r = generate(*model_, *pool_, {}, {}, g);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("prompt token 2"), std::string::npos) << r.status().message();
  g.raw_prompt = {1, -4};
  r = generate(*model_, *pool_, {}, {}, g);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("outside the vocabulary"), std::string::npos) << r.status().message();
  g.raw_prompt = {1, 2};
  g.logprobs = 21;
  r = generate(*model_, *pool_, {}, {}, g);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("logprobs must be in [0, 20]"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace qvl
