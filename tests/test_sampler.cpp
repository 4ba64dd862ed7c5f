// Token sampling against transformers' logits processors, the penalties' math by hand, sampling statistics,
// seeding, parameter validation, and stop strings over streamed text.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>

#include <nlohmann/json.hpp>

#include "engine/sampler.h"
#include "engine/stop.h"
#include "test_paths.h"
#include "test_timing.h"
#include "util/file.h"

namespace qvl {
namespace {

// ---------------------------------------------------------------------------------------------------------
// Golden data from tools/reference/gen_sampler_goldens.py (the real HF processors).

uint64_t splitmix64(uint64_t x) {
  uint64_t z = x + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// The generator's synth_logits, bit for bit: integer hash, then double arithmetic, then float32.
std::vector<float> synth_logits(const nlohmann::json& s) {
  const int vocab = s["vocab"];
  const uint64_t seed = s["seed"], levels = s["levels"], peak_every = s["peak_every"];
  const double step = s["step"], boost = s["peak_boost"];
  const int64_t half = static_cast<int64_t>(levels / 2);
  std::vector<float> x(vocab);
  for (int i = 0; i < vocab; ++i) {
    const uint64_t h = splitmix64((seed << 32) + static_cast<uint64_t>(i));
    double v = static_cast<double>(static_cast<int64_t>(h % levels) - half) * step;
    if (peak_every && (h >> 40) % peak_every == 0) v += boost;
    x[i] = static_cast<float>(v);
  }
  if (s.contains("forced"))
    for (const auto& [value, ids] : s["forced"].items())
      for (int id : ids) x[id] = static_cast<float>(std::stod(value));
  return x;
}

SamplingParams params_from(const nlohmann::json& p) {
  SamplingParams sp;
  sp.temperature = p.value("temperature", 1.0f);
  sp.top_k = p.value("top_k", 0);
  sp.top_p = p.value("top_p", 1.0f);
  sp.min_p = p.value("min_p", 0.0f);
  sp.repetition_penalty = p.value("repetition_penalty", 1.0f);
  if (p.contains("logit_bias"))
    for (const auto& pair : p["logit_bias"]) sp.logit_bias.emplace_back(pair[0].get<int32_t>(), pair[1].get<float>());
  std::sort(sp.logit_bias.begin(), sp.logit_bias.end());
  return sp;
}

TEST(Sampler, FilterMatchesTransformersWarpers) {
  auto text = read_file_text(test::data_dir() + "/sampler_golden.json");
  ASSERT_TRUE(text.ok()) << text.status().message();
  const auto doc = nlohmann::json::parse(*text);
  ASSERT_GE(doc["cases"].size(), 21u);
  int biased = 0;
  for (const auto& c : doc["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const std::vector<float> logits =
        c.contains("logits") ? c["logits"].get<std::vector<float>>() : synth_logits(c["synth"]);
    const SamplingParams sp = params_from(c["params"]);
    ASSERT_TRUE(sp.validate().ok());
    biased += !sp.logit_bias.empty();
    const std::vector<int32_t> history = c["input_ids"].get<std::vector<int32_t>>();

    // The values HF's warpers see, computed here independently: the logit bias, the repetition penalty, then
    // / temperature.
    std::vector<float> processed = logits;
    for (const auto& [id, bias] : sp.logit_bias) processed[id] += bias;
    for (int32_t id : std::set<int32_t>(history.begin(), history.end()))
      processed[id] = processed[id] < 0 ? processed[id] * sp.repetition_penalty : processed[id] / sp.repetition_penalty;
    for (float& v : processed) v /= sp.temperature;

    Sampler sampler(sp);
    sampler.reset(history);
    std::vector<float> work = logits;
    auto span = sampler.filter(work.data(), static_cast<int>(work.size()));
    std::vector<int32_t> got(span.begin(), span.end());
    std::sort(got.begin(), got.end());
    ASSERT_EQ(got.size(), c["n_kept"].get<size_t>());
    if (c.contains("kept")) {
      EXPECT_EQ(got, c["kept"].get<std::vector<int32_t>>());
      const auto want_values = c["kept_logits"].get<std::vector<float>>();
      for (size_t j = 0; j < got.size() && j < want_values.size(); ++j)
        EXPECT_EQ(work[got[j]], want_values[j]) << "token " << got[j];  // same float32 operations as torch
    }
    // HF's survivors are the values >= kept_min (the generator checks that nothing removed reaches it).
    const float kept_min = c["kept_min"];
    std::vector<int32_t> want;
    for (size_t i = 0; i < processed.size(); ++i)
      if (processed[i] >= kept_min) want.push_back(static_cast<int32_t>(i));
    EXPECT_EQ(got, want);

    // do_sample=False: argmax after the repetition penalty.
    SamplingParams greedy = sp;
    greedy.temperature = 0.0f;
    Sampler g(greedy);
    g.reset(history);
    work = logits;
    EXPECT_EQ(g.sample(work.data(), static_cast<int>(work.size())), c["greedy"].get<int32_t>());
  }
  EXPECT_GE(biased, 3);  // HF's SequenceBiasLogitsProcessor, alone and before the repetition penalty
}

// ---------------------------------------------------------------------------------------------------------
// A slow twin: HF's warpers transliterated over the whole vocabulary with a full sort, compared with the
// candidate-based fast path on random logits with many ties and on awkward sizes.

std::vector<int32_t> reference_filter(std::vector<float> x, const SamplingParams& p) {
  const int n = static_cast<int>(x.size());
  for (float& v : x) v /= p.temperature;
  auto softmax = [](const std::vector<float>& s) {
    float mx = -INFINITY;
    for (float v : s) mx = std::max(mx, v);
    double sum = 0;
    for (float v : s) sum += std::exp(v - mx);
    std::vector<float> pr(s.size());
    for (size_t i = 0; i < s.size(); ++i) pr[i] = static_cast<float>(std::exp(s[i] - mx) / sum);
    return pr;
  };
  if (p.top_k > 0 && p.top_k < n) {  // scores < topk(scores, k)[-1] -> -inf
    std::vector<float> s = x;
    std::sort(s.begin(), s.end(), std::greater<float>());
    const float kth = s[p.top_k - 1];
    for (float& v : x) if (v < kth) v = -INFINITY;
  }
  if (p.top_p < 1.0f) {  // ascending sort (equal values: higher id first), cumsum <= 1 - top_p -> -inf
    std::vector<int32_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int a, int b) { return x[a] < x[b] || (x[a] == x[b] && a > b); });
    const std::vector<float> pr = softmax(x);
    const float thr = static_cast<float>(1.0 - static_cast<double>(p.top_p));
    double cum = 0;
    std::vector<bool> remove(n, false);
    for (int j = 0; j < n; ++j) {
      cum += pr[order[j]];
      remove[order[j]] = static_cast<float>(cum) <= thr && j != n - 1;
    }
    for (int i = 0; i < n; ++i) if (remove[i]) x[i] = -INFINITY;
  }
  if (p.min_p > 0.0f) {  // probs < min_p * probs.max() -> -inf
    const std::vector<float> pr = softmax(x);
    const float top = *std::max_element(pr.begin(), pr.end());
    const float scaled = p.min_p * top;
    for (int i = 0; i < n; ++i) if (pr[i] < scaled) x[i] = -INFINITY;
  }
  std::vector<int32_t> kept;
  for (int i = 0; i < n; ++i) if (x[i] > -INFINITY) kept.push_back(i);
  return kept;
}

TEST(Sampler, FastPathMatchesFullSortTwin) {
  uint64_t state = 12345;
  auto rnd = [&] { return splitmix64(state++); };
  const int sizes[] = {1, 2, 31, 33, 257, 1000, 4095, 20000};
  int checked = 0;
  for (int n : sizes) {
    for (int trial = 0; trial < 24; ++trial) {
      // Coarse values (many ties) or fine ones, with an occasional peak.
      const bool coarse = trial % 2 == 0;
      std::vector<float> x(n);
      for (float& v : x) {
        const uint64_t h = rnd();
        v = coarse ? static_cast<float>(static_cast<int>(h % 41) - 20) * 0.25f
                   : static_cast<float>(static_cast<double>(h >> 11) * 0x1.0p-53 * 12.0 - 6.0);
        if (h % 97 == 0) v += 5.0f;
      }
      SamplingParams p;
      const uint64_t h = rnd();
      p.temperature = std::array<float, 4>{1.0f, 0.7f, 0.3f, 1.6f}[h % 4];
      p.top_k = std::array<int, 5>{0, 0, 1, 20, 300}[(h >> 8) % 5];
      p.top_p = std::array<float, 6>{1.0f, 0.8f, 0.95f, 0.999f, 0.3f, 0.0f}[(h >> 16) % 6];  // 0: HF keeps the top one
      p.min_p = std::array<float, 3>{0.0f, 0.05f, 0.0f}[(h >> 24) % 3];
      SCOPED_TRACE("n=" + std::to_string(n) + " trial=" + std::to_string(trial) + " k=" + std::to_string(p.top_k) +
                   " p=" + std::to_string(p.top_p) + " min_p=" + std::to_string(p.min_p));
      Sampler s(p);
      std::vector<float> work = x;
      auto span = s.filter(work.data(), n);
      std::vector<int32_t> got(span.begin(), span.end());
      std::sort(got.begin(), got.end());
      EXPECT_EQ(got, reference_filter(x, p));
      ++checked;
    }
  }
  EXPECT_EQ(checked, 8 * 24);
}

// ---------------------------------------------------------------------------------------------------------
// Greedy and the penalties, on hand-made logits with hand-computed values.

TEST(Sampler, GreedyIsArgmaxWithLowestIdOnTies) {
  SamplingParams p;
  p.temperature = 0.0f;
  ASSERT_TRUE(p.greedy());
  Sampler s(p);
  std::vector<float> x = {1.0f, 5.0f, -2.0f, 5.0f, 4.999f};
  EXPECT_EQ(s.sample(x.data(), 5), 1);
  std::vector<float> all_equal(7, 0.25f);
  EXPECT_EQ(s.sample(all_equal.data(), 7), 0);
  std::vector<float> neg = {-3.0f, -1.0f, -1.0f, -INFINITY};
  EXPECT_EQ(s.sample(neg.data(), 4), 1);
  std::vector<float> one = {42.0f};
  EXPECT_EQ(s.sample(one.data(), 1), 0);
  // Greedy ignores top-k/top-p/min-p and the seed, as HF ignores the warpers when do_sample=False.
  p.top_k = 1;
  p.top_p = 0.01f;
  p.seed = 99;
  Sampler s2(p);
  x = {1.0f, 5.0f, -2.0f, 5.0f, 4.999f};
  EXPECT_EQ(s2.sample(x.data(), 5), 1);
}

TEST(Sampler, RepetitionPenaltyDividesPositiveAndMultipliesNegative) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.repetition_penalty = 2.0f;
  Sampler s(p);
  s.reset({0, 1, 1, 5});  // each distinct id once, however often it occurs
  s.accept(4);            // generated ids count too
  std::vector<float> x = {2.0f, -1.0f, 0.5f, 3.0f, -2.0f, 0.0f, 1.5f};
  EXPECT_EQ(s.sample(x.data(), 7), 3);
  const std::vector<float> want = {1.0f, -2.0f, 0.5f, 3.0f, -4.0f, 0.0f, 1.5f};
  EXPECT_EQ(x, want);
  // Generating id 3 penalizes it too: 3 / 2 = 1.5 ties with id 6.
  s.accept(3);
  x = {2.0f, -1.0f, 0.5f, 3.0f, -2.0f, 0.0f, 1.5f};
  EXPECT_EQ(s.sample(x.data(), 7), 3);  // ties 1.5 (id 3) and 1.5 (id 6): lowest id
  EXPECT_EQ(x[3], 1.5f);
  // reset() forgets the history.
  s.reset({});
  x = {2.0f, -1.0f, 0.5f, 3.0f, -2.0f, 0.0f, 1.5f};
  s.sample(x.data(), 7);
  EXPECT_EQ(x[0], 2.0f);
  EXPECT_EQ(x[3], 3.0f);
}

TEST(Sampler, PresenceAndFrequencyPenaltiesCountGeneratedTokensOnly) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  Sampler s(p);
  s.reset({0, 1, 2});  // the prompt is not penalized by presence/frequency
  s.accept(2);
  s.accept(2);
  s.accept(3);
  s.accept(2);
  std::vector<float> x = {2.0f, -1.0f, 0.5f, 3.0f, -2.0f};
  s.sample(x.data(), 5);
  // id 2: generated 3 times: 0.5 - 0.25*3 - 0.5 = -0.75; id 3: once: 3 - 0.25 - 0.5 = 2.25.
  const std::vector<float> want = {2.0f, -1.0f, -0.75f, 2.25f, -2.0f};
  EXPECT_EQ(x, want);

  // Negative penalties reward instead.
  p.presence_penalty = -1.0f;
  p.frequency_penalty = 0.0f;
  Sampler r(p);
  r.accept(4);
  x = {2.0f, -1.0f, 0.5f, 3.0f, -2.0f};
  r.sample(x.data(), 5);
  EXPECT_EQ(x[4], -1.0f);
}

TEST(Sampler, PenaltiesApplyInHfThenVllmOrder) {
  // Repetition penalty first (HF), then frequency and presence (vLLM's order), then temperature.
  SamplingParams p;
  p.temperature = 0.5f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.repetition_penalty = 2.0f;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  Sampler s(p);
  s.reset({0});
  s.accept(2);
  s.accept(2);
  s.accept(3);
  std::vector<float> x = {2.0f, -1.0f, 0.5f, 3.0f, -2.0f};
  auto kept = s.filter(x.data(), 5);
  EXPECT_EQ(kept.size(), 5u);
  // id 0: 2/2 = 1 -> /0.5 = 2; id 2: 0.5/2 = 0.25 - 0.5 - 0.5 = -0.75 -> -1.5; id 3: 3/2 = 1.5 - 0.25 - 0.5 = 0.75
  // -> 1.5; ids 1, 4 untouched -> -2, -4.
  const std::vector<float> want = {2.0f, -2.0f, -1.5f, 1.5f, -4.0f};
  EXPECT_EQ(x, want);
}

TEST(Sampler, IdsOutsideTheVocabularyAreIgnored) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.repetition_penalty = 3.0f;
  p.presence_penalty = 1.0f;
  Sampler s(p);
  s.reset({-5, 1, 1000});
  s.accept(2000);
  s.accept(-1);
  std::vector<float> x = {1.0f, 3.0f, 2.0f};
  EXPECT_EQ(s.sample(x.data(), 3), 2);
  EXPECT_EQ(x[1], 1.0f);
  // A bias on an id past this call's logits touches nothing (Session::prepare refuses it for a model).
  p.logit_bias = {{0, 0.5f}, {3, 100.0f}};
  Sampler b(p);
  x = {1.0f, 3.0f, 2.0f};
  EXPECT_EQ(b.sample(x.data(), 3), 1);
  EXPECT_EQ(x[0], 1.5f);
}

TEST(Sampler, LogitBiasBansForcesAndComesBeforeThePenalties) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.logit_bias = {{1, -100.0f}};
  Sampler ban(p);
  std::vector<float> x = {1.0f, 50.0f, 2.0f};
  EXPECT_EQ(ban.sample(x.data(), 3), 2);  // 50 - 100 < 2
  // HF order: (x + bias), then the repetition penalty on the sum: (1 + 3) / 2 = 2 beats 1.9.
  p.logit_bias = {{0, 3.0f}};
  p.repetition_penalty = 2.0f;
  Sampler order(p);
  order.reset({0});
  x = {1.0f, 1.9f, -1.0f};
  EXPECT_EQ(order.sample(x.data(), 3), 0);
  EXPECT_EQ(x[0], 2.0f);
  // Sampled: +100 on one token takes every draw from a flat distribution.
  p = SamplingParams{};
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.logit_bias = {{7, 100.0f}};
  for (uint64_t seed = 0; seed < 20; ++seed) {
    p.seed = seed;
    Sampler s(p);
    std::vector<float> flat(64, 0.0f);
    EXPECT_EQ(s.sample(flat.data(), 64), 7);
  }
}

// ---------------------------------------------------------------------------------------------------------
// The draw: frequencies follow the softmax of the filtered logits; seeds.

TEST(Sampler, DrawFrequenciesMatchSoftmaxOfSurvivors) {
  const std::vector<float> logits = {1.2f, -0.3f, 2.0f, 0.7f, 2.0f, -1.5f, 0.1f, 1.9f, -4.0f, 0.4f, 1.0f, -0.2f};
  struct Setting { float t; int k; float top_p; float min_p; };
  for (const Setting& st : {Setting{1.0f, 0, 1.0f, 0.0f}, Setting{0.8f, 6, 0.95f, 0.0f},
                            Setting{1.3f, 0, 0.9f, 0.05f}, Setting{0.5f, 3, 1.0f, 0.0f}}) {
    SamplingParams p;
    p.temperature = st.t;
    p.top_k = st.k;
    p.top_p = st.top_p;
    p.min_p = st.min_p;
    p.seed = 2024;
    SCOPED_TRACE("t=" + std::to_string(st.t) + " k=" + std::to_string(st.k));
    Sampler s(p);
    std::vector<float> work = logits;
    auto span = s.filter(work.data(), static_cast<int>(work.size()));
    std::vector<double> expected(logits.size(), 0.0);
    double mx = -INFINITY, sum = 0.0;
    for (int32_t id : span) mx = std::max(mx, static_cast<double>(work[id]));
    for (int32_t id : span) sum += expected[id] = std::exp(work[id] - mx);
    for (double& e : expected) e /= sum;

    const int draws = 20000;
    std::vector<int> count(logits.size(), 0);
    for (int i = 0; i < draws; ++i) {
      work = logits;
      ++count[s.sample(work.data(), static_cast<int>(work.size()))];
    }
    double chi2 = 0.0;
    int dof = -1;
    for (size_t i = 0; i < logits.size(); ++i) {
      if (expected[i] == 0.0) {
        EXPECT_EQ(count[i], 0) << "token " << i << " was filtered out but drawn";
        continue;
      }
      const double e = expected[i] * draws;
      chi2 += (count[i] - e) * (count[i] - e) / e;
      ++dof;
    }
    // chi-square with dof degrees of freedom: mean dof, sd sqrt(2 dof); 6 sd is far beyond chance.
    EXPECT_LT(chi2, dof + 6.0 * std::sqrt(2.0 * std::max(dof, 1))) << "dof " << dof;
  }
}

std::vector<int32_t> draw_sequence(uint64_t seed, int n) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.seed = seed;
  Sampler s(p);
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    std::vector<float> x(64);
    for (int j = 0; j < 64; ++j) x[j] = std::sin(0.37f * j);
    out.push_back(s.sample(x.data(), 64));
  }
  return out;
}

TEST(Sampler, SameSeedSameTokensDifferentSeedDifferentTokens) {
  const auto a = draw_sequence(7, 200), b = draw_sequence(7, 200), c = draw_sequence(8, 200);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  // The stream is fixed by the seed on every machine: splitmix64 and 53-bit doubles, no std distributions.
  const std::vector<int32_t> first = {a.begin(), a.begin() + 8};
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.seed = 7;
  Sampler s(p);
  std::vector<float> x(64);
  for (int j = 0; j < 64; ++j) x[j] = std::sin(0.37f * j);
  // reset() restarts the stream.
  std::vector<float> w = x;
  s.sample(w.data(), 64);
  s.reset({});
  std::vector<int32_t> again;
  for (int i = 0; i < 8; ++i) {
    w = x;
    again.push_back(s.sample(w.data(), 64));
  }
  EXPECT_EQ(again, first);
}

TEST(Sampler, TinyTemperatureAndInfiniteLogitsStayDefined) {
  SamplingParams p;
  p.temperature = 1e-30f;  // overflows the logits to +inf: behaves like greedy instead of NaN
  p.top_k = 0;
  p.top_p = 0.9f;
  Sampler s(p);
  std::vector<float> x = {1.0f, 3.0f, 2.0f, 2.5f};
  EXPECT_EQ(s.sample(x.data(), 4), 1);
  p.temperature = 1.0f;
  Sampler s2(p);
  x = {-INFINITY, NAN, 0.0f, -INFINITY};
  EXPECT_EQ(s2.sample(x.data(), 4), 2);
}

TEST(Sampler, LargeVocabularyDefaultsAreQuick) {
  // 151,936 logits with the checkpoint's defaults and with top-k off. About 0.6 ms and 7 ms per token at -O2
  // (this synthetic tail is flatter than a model's); the bound only catches something pathological, such as
  // a sort per candidate, even in a sanitizer or -O0 build.
  nlohmann::json synth = {{"vocab", 151936}, {"seed", 3}, {"levels", 2001}, {"step", 0.005},
                          {"peak_every", 1000}, {"peak_boost", 10.0}};
  const std::vector<float> logits = synth_logits(synth);
  SamplingParams flat;
  flat.temperature = 1.0f;
  flat.top_k = 0;
  flat.top_p = 0.95f;
  for (SamplingParams p : {SamplingParams{}, flat}) {
    Sampler s(p);
    std::vector<float> work;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 50; ++i) {
      work = logits;
      s.accept(s.sample(work.data(), static_cast<int>(work.size())));
    }
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / 50;
    RecordProperty("ms_per_token_k" + std::to_string(p.top_k), std::to_string(ms));
    EXPECT_LT(ms, test::scaled(250.0));
  }
}

// ---------------------------------------------------------------------------------------------------------
// Parameters: validation and generation_config.json.

TEST(SamplingParams, ValidateRejectsNonsenseWithClearMessages) {
  EXPECT_TRUE(SamplingParams{}.validate().ok());
  struct Bad { SamplingParams p; const char* needle; };
  auto with = [](auto f) { SamplingParams p; f(p); return p; };
  const Bad cases[] = {
      {with([](SamplingParams& p) { p.temperature = -0.5f; }), "temperature must be a finite number >= 0 (0 = greedy), got -0.5"},
      {with([](SamplingParams& p) { p.temperature = NAN; }), "temperature"},
      {with([](SamplingParams& p) { p.temperature = INFINITY; }), "temperature"},
      {with([](SamplingParams& p) { p.top_p = -0.1f; }), "top_p must be in [0, 1] (1 turns top-p off, 0 keeps the most likely token), got -0.1"},
      {with([](SamplingParams& p) { p.top_p = 1.5f; }), "top_p must be in [0, 1]"},
      {with([](SamplingParams& p) { p.top_p = NAN; }), "top_p"},
      {with([](SamplingParams& p) { p.top_k = -1; }), "top_k must be >= 0 (0 turns top-k off), got -1"},
      {with([](SamplingParams& p) { p.min_p = -0.1f; }), "min_p must be in [0, 1]"},
      {with([](SamplingParams& p) { p.min_p = 1.01f; }), "min_p"},
      {with([](SamplingParams& p) { p.repetition_penalty = 0.0f; }), "repetition_penalty must be a finite number > 0"},
      {with([](SamplingParams& p) { p.repetition_penalty = -1.0f; }), "repetition_penalty"},
      {with([](SamplingParams& p) { p.presence_penalty = 2.5f; }), "presence_penalty must be in [-2, 2] (0 turns it off), got 2.5"},
      {with([](SamplingParams& p) { p.frequency_penalty = -3.0f; }), "frequency_penalty must be in [-2, 2]"},
      {with([](SamplingParams& p) { p.logit_bias = {{5, 100.5f}}; }), "logit_bias: the bias of token 5 must be in [-100, 100], got 100.5"},
      {with([](SamplingParams& p) { p.logit_bias = {{5, NAN}}; }), "the bias of token 5"},
      {with([](SamplingParams& p) { p.logit_bias = {{-1, 1.0f}}; }), "logit_bias: token id -1 is negative"},
      {with([](SamplingParams& p) { p.logit_bias = {{9, 1.0f}, {9, 2.0f}}; }), "ascending and each given once, got 9 then 9"},
      {with([](SamplingParams& p) { p.logit_bias = {{9, 1.0f}, {3, 2.0f}}; }), "got 9 then 3"},
  };
  for (const Bad& b : cases) {
    const Status st = b.p.validate();
    ASSERT_FALSE(st.ok()) << b.needle;
    EXPECT_NE(st.message().find(b.needle), std::string::npos) << st.message();
  }
  // Edges that are allowed.
  EXPECT_TRUE(with([](SamplingParams& p) { p.temperature = 0; p.top_p = 1; p.top_k = 0; p.min_p = 1; }).validate().ok());
  EXPECT_TRUE(with([](SamplingParams& p) { p.presence_penalty = -2; p.frequency_penalty = 2; }).validate().ok());
  EXPECT_TRUE(with([](SamplingParams& p) { p.logit_bias = {{0, -100}, {151935, 100}}; }).validate().ok());
}

// What Model::load and the server do with a model directory's generation_config.json.
Result<SamplingParams> sampling_from_dir(const std::string& dir) {
  QVL_ASSIGN_OR_RETURN(GenerationConfig g, GenerationConfig::load(dir));
  return SamplingParams::from_generation_config(g);
}

class GenerationConfigFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("qvl_sampler_test_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  Result<SamplingParams> load(const std::string& json) {
    std::ofstream(dir_ / "generation_config.json") << json;
    return sampling_from_dir(dir_.string());
  }
  std::filesystem::path dir_;
};

TEST_F(GenerationConfigFile, CheckpointValues) {
  auto p = sampling_from_dir(test::model_files_dir());
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->temperature, 0.7f);
  EXPECT_EQ(p->top_k, 20);
  EXPECT_EQ(p->top_p, 0.8f);
  EXPECT_EQ(p->repetition_penalty, 1.0f);
  EXPECT_EQ(p->min_p, 0.0f);
  EXPECT_FALSE(p->greedy());
}

TEST_F(GenerationConfigFile, MissingFileGivesDefaults) {
  auto p = sampling_from_dir(dir_.string());
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->temperature, SamplingParams{}.temperature);
  EXPECT_EQ(p->top_k, SamplingParams{}.top_k);
}

TEST_F(GenerationConfigFile, DoSampleFalseIsGreedy) {
  auto p = load(R"({"do_sample": false, "temperature": 0.7, "top_k": 20, "repetition_penalty": 1.05})");
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_TRUE(p->greedy());
  EXPECT_EQ(p->repetition_penalty, 1.05f);  // still applies to greedy decoding
}

TEST_F(GenerationConfigFile, AbsentKeysTakeTransformersDefaults) {
  auto p = load(R"({"eos_token_id": [151645, 151643]})");  // no do_sample: HF decodes greedily
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_TRUE(p->greedy());
  p = load(R"({"do_sample": true})");
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->temperature, 1.0f);
  EXPECT_EQ(p->top_k, 50);
  EXPECT_EQ(p->top_p, 1.0f);
  EXPECT_EQ(p->repetition_penalty, 1.0f);
  p = load(R"({"do_sample": true, "top_k": null, "top_p": null, "temperature": null, "min_p": 0.1})");
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->top_k, 0);
  EXPECT_EQ(p->top_p, 1.0f);
  EXPECT_EQ(p->temperature, 1.0f);
  EXPECT_EQ(p->min_p, 0.1f);
}

TEST_F(GenerationConfigFile, BadFilesAreErrorsNamingTheFile) {
  for (const char* json : {R"([1, 2])", R"({"top_k": "20"})", R"({"do_sample": "yes"})", R"({"top_k": 2.5})",
                           R"({"do_sample": true, "top_p": 1.5})", "{not json"}) {
    auto p = load(json);
    ASSERT_FALSE(p.ok()) << json;
    EXPECT_NE(p.status().message().find("generation_config.json"), std::string::npos) << p.status().message();
  }
  auto p = load(R"({"do_sample": true, "temperature": -1})");
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("temperature must be"), std::string::npos) << p.status().message();
}

// ---------------------------------------------------------------------------------------------------------
// Stop strings.

struct Streamed {
  std::string text;
  bool stopped = false;
};

Streamed stream(const std::vector<std::string>& stops, const std::vector<std::string>& pieces) {
  StopChecker c(stops);
  Streamed out;
  for (const std::string& p : pieces) {
    StopChecker::Emit e = c.push(p);
    out.text += e.text;
    if (e.stopped) { out.stopped = true; break; }
  }
  if (!out.stopped) out.text += c.flush();
  return out;
}

TEST(StopChecker, NoStopStringsPassesEverythingThrough) {
  StopChecker c({});
  EXPECT_EQ(c.push("Hello").text, "Hello");
  EXPECT_EQ(c.push(", world").text, ", world");
  EXPECT_EQ(c.flush(), "");
  StopChecker empty({"", ""});  // empty stop strings are ignored
  EXPECT_EQ(empty.push("abc").text, "abc");
  EXPECT_FALSE(empty.stopped());
}

TEST(StopChecker, StopSplitAcrossPieces) {
  StopChecker c({"<|end|>"});
  auto e = c.push("Hello <|");
  EXPECT_EQ(e.text, "Hello ");
  EXPECT_FALSE(e.stopped);
  e = c.push("end");
  EXPECT_EQ(e.text, "");
  e = c.push("|> trailing");
  EXPECT_EQ(e.text, "");
  EXPECT_TRUE(e.stopped);
  EXPECT_TRUE(c.stopped());
  EXPECT_EQ(c.push("more").text, "");  // nothing after a stop
  EXPECT_TRUE(c.push("more").stopped);
  EXPECT_EQ(c.flush(), "");
}

TEST(StopChecker, FalseStartIsReleased) {
  StopChecker c({"abc"});
  EXPECT_EQ(c.push("ab").text, "");
  auto e = c.push("ac");
  EXPECT_EQ(e.text, "abac");
  EXPECT_FALSE(e.stopped);
  // "aab" holds back only "ab", the part that can still become "abc".
  StopChecker d({"abc"});
  EXPECT_EQ(d.push("xaab").text, "xa");
  e = d.push("c!");
  EXPECT_EQ(e.text, "");
  EXPECT_TRUE(e.stopped);
  // Generation ends without the stop: flush releases the held text.
  StopChecker f({"abc"});
  EXPECT_EQ(f.push("xyzab").text, "xyz");
  EXPECT_EQ(f.flush(), "ab");
}

TEST(StopChecker, MultipleStopStrings) {
  EXPECT_EQ(stream({"STOP", "END"}, {"one ", "EN", "two ", "ST", "OP three"}).text, "one ENtwo ");
  EXPECT_EQ(stream({"STOP", "END"}, {"one EN", "D two STOP"}).text, "one ");
  // Overlapping stop strings: the one completed first wins, whatever the pieces.
  EXPECT_EQ(stream({"abcd", "bc"}, {"xabcd"}).text, "xa");
  EXPECT_EQ(stream({"abcd", "bc"}, {"x", "a", "b", "c", "d"}).text, "xa");
  // Same end: the longer (earlier) one.
  EXPECT_EQ(stream({"c", "abc"}, {"xabc"}).text, "x");
  EXPECT_EQ(stream({"c", "abc"}, {"xa", "bc"}).text, "x");
}

TEST(StopChecker, StopAtTheVeryStart) {
  Streamed s = stream({"Human:"}, {"Human: hi"});
  EXPECT_EQ(s.text, "");
  EXPECT_TRUE(s.stopped);
  s = stream({"\n\n"}, {"\n", "\nnext"});
  EXPECT_EQ(s.text, "");
  EXPECT_TRUE(s.stopped);
}

TEST(StopChecker, MultibyteStopStrings) {
  // "終わり" (9 bytes), "→" (3 bytes), "é!" (3 bytes).
  Streamed s = stream({"終わり"}, {"これで", "終", "わ", "り。"});
  EXPECT_EQ(s.text, "これで");
  EXPECT_TRUE(s.stopped);
  s = stream({"→"}, {"a→b"});
  EXPECT_EQ(s.text, "a");
  StopChecker c({"é!"});
  EXPECT_EQ(c.push("café").text, "caf");  // holds the whole 2-byte "é"
  EXPECT_EQ(c.push("?").text, "é?");
  // A piece that ends inside a character holds back the partial character.
  StopChecker d({"xyz"});
  EXPECT_EQ(d.push("ab\xC3").text, "ab");
  EXPECT_EQ(d.push("\xA9 ok").text, "\xC3\xA9 ok");
  StopChecker e({});
  EXPECT_EQ(e.push("\xE2\x86").text, "");
  EXPECT_EQ(e.push("\x92").text, "→");
  // A stop string whose first bytes match the start of a different character is not a false hit.
  s = stream({"終わり"}, {"終了", "です"});
  EXPECT_EQ(s.text, "終了です");
  EXPECT_FALSE(s.stopped);
}

TEST(StopChecker, OutputDoesNotDependOnHowTextIsSplit) {
  const std::vector<std::string> stops = {"</answer>", "\n\nUser:", "ab", "aba"};
  const std::vector<std::string> texts = {"The answer is 42.</answer> and more", "x\n\nUse\n\nUser: hi",
                                          "no stop here at all", "cab", "aaab", "</answe", "<</answer>"};
  for (const std::string& t : texts) {
    const Streamed whole = stream(stops, {t});
    std::vector<std::string> bytes;
    for (char ch : t) bytes.push_back(std::string(1, ch));
    const Streamed each = stream(stops, bytes);
    EXPECT_EQ(each.text, whole.text) << t;
    EXPECT_EQ(each.stopped, whole.stopped) << t;
    for (size_t cut = 0; cut <= t.size(); ++cut) {
      const Streamed two = stream(stops, {t.substr(0, cut), t.substr(cut)});
      EXPECT_EQ(two.text, whole.text) << t << " cut " << cut;
    }
  }
}

}  // namespace
}  // namespace qvl
