// Next-token selection in transformers 4.57's order (generation/utils.py `_get_logits_processor`, `_sample`),
// working on the few surviving candidates instead of sorting the 151,936-entry vocabulary.
#include "engine/sampler.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <functional>

namespace qvl {

namespace {

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// Descending logits; equal logits in ascending id order, as torch.argmax picks them. (HF sorts with the
// unstable torch.sort, so its order among equal logits is arbitrary; it only matters when ties straddle a
// top-p cut.)
struct Descending {
  const float* x;
  bool operator()(int32_t a, int32_t b) const { return x[a] > x[b] || (x[a] == x[b] && a < b); }
};

}  // namespace

// ---------------------------------------------------------------------------------------------------------
// SamplingParams

Status SamplingParams::validate() const {
  auto bad = [](const std::string& what) { return Status::Error("sampling parameter " + what); };
  if (!(temperature >= 0.0f) || !std::isfinite(temperature))
    return bad("temperature must be a finite number >= 0 (0 = greedy), got " + num(temperature));
  if (top_k < 0) return bad("top_k must be >= 0 (0 turns top-k off), got " + std::to_string(top_k));
  if (!(top_p >= 0.0f && top_p <= 1.0f))  // HF's TopPLogitsWarper takes 0: only the most likely token is kept
    return bad("top_p must be in [0, 1] (1 turns top-p off, 0 keeps the most likely token), got " + num(top_p));
  if (!(min_p >= 0.0f && min_p <= 1.0f))
    return bad("min_p must be in [0, 1] (0 turns min-p off), got " + num(min_p));
  if (!(repetition_penalty > 0.0f) || !std::isfinite(repetition_penalty))
    return bad("repetition_penalty must be a finite number > 0 (1 turns it off), got " + num(repetition_penalty));
  if (!(presence_penalty >= -2.0f && presence_penalty <= 2.0f))
    return bad("presence_penalty must be in [-2, 2] (0 turns it off), got " + num(presence_penalty));
  if (!(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f))
    return bad("frequency_penalty must be in [-2, 2] (0 turns it off), got " + num(frequency_penalty));
  for (size_t i = 0; i < logit_bias.size(); ++i) {
    const auto [id, bias] = logit_bias[i];
    if (id < 0) return bad("logit_bias: token id " + std::to_string(id) + " is negative; expected an id of the vocabulary");
    if (i > 0 && id <= logit_bias[i - 1].first)
      return bad("logit_bias: token ids must be ascending and each given once, got " +
                 std::to_string(logit_bias[i - 1].first) + " then " + std::to_string(id));
    if (!(bias >= -kMaxLogitBias && bias <= kMaxLogitBias))
      return bad("logit_bias: the bias of token " + std::to_string(id) + " must be in [-100, 100], got " + num(bias));
  }
  return Status::Ok();
}

Result<SamplingParams> SamplingParams::from_generation_config(const GenerationConfig& g) {
  SamplingParams p;
  // do_sample=False: `generate` builds no warpers and takes the argmax (the repetition penalty still applies).
  p.temperature = g.do_sample ? static_cast<float>(g.temperature) : 0.0f;
  p.top_k = static_cast<int>(g.top_k);
  p.top_p = static_cast<float>(g.top_p);
  p.min_p = static_cast<float>(g.min_p);
  p.repetition_penalty = static_cast<float>(g.repetition_penalty);
  QVL_RETURN_IF_ERROR(p.validate().with_context("generation_config.json"));
  return p;
}

// ---------------------------------------------------------------------------------------------------------
// Sampler

Sampler::Sampler(const SamplingParams& params) : params_(params) { reset({}); }

void Sampler::reset(const std::vector<int32_t>& prompt_ids) {
  for (int32_t id : seen_ids_) seen_[id] = 0;
  seen_ids_.clear();
  for (int32_t id : gen_ids_) gen_count_[id] = 0;
  gen_ids_.clear();
  rng_state_ = params_.seed;
  for (int32_t id : prompt_ids) {
    if (id < 0) continue;  // not a token: nothing to penalize
    if (static_cast<size_t>(id) >= seen_.size()) seen_.resize(static_cast<size_t>(id) + 1, 0);
    if (!seen_[id]) { seen_[id] = 1; seen_ids_.push_back(id); }
  }
}

void Sampler::accept(int32_t token) {
  if (token < 0) return;
  const size_t need = static_cast<size_t>(token) + 1;
  if (seen_.size() < need) seen_.resize(need, 0);
  if (gen_count_.size() < need) gen_count_.resize(need, 0);
  if (!seen_[token]) { seen_[token] = 1; seen_ids_.push_back(token); }
  if (gen_count_[token]++ == 0) gen_ids_.push_back(token);
}

// splitmix64 (Steele, Lea, Flood 2014): integer-only, so the same seed gives the same stream everywhere.
uint64_t Sampler::next_u64() {
  uint64_t z = (rng_state_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

void Sampler::apply_penalties(float* logits, int vocab) const {
  // SequenceBiasLogitsProcessor, which _get_logits_processor puts before the repetition penalty: for one-token
  // sequences, scores[:, id] += bias.
  for (const auto& [id, bias] : params_.logit_bias)
    if (id < vocab) logits[id] += bias;
  // RepetitionPenaltyLogitsProcessor, once per distinct id of prompt + generated:
  //   score = torch.where(score < 0, score * self.penalty, score / self.penalty)
  const float rp = params_.repetition_penalty;
  if (rp != 1.0f) {
    for (int32_t id : seen_ids_) {
      if (id >= vocab) continue;
      const float x = logits[id];
      logits[id] = x < 0.0f ? x * rp : x / rp;
    }
  }
  // vLLM apply_penalties, over generated ids only (OpenAI: "tokens generated so far"):
  //   logits -= frequency_penalties * output_bin_counts; logits -= presence_penalties * output_mask
  const float fp = params_.frequency_penalty, pp = params_.presence_penalty;
  if (fp != 0.0f || pp != 0.0f) {
    for (int32_t id : gen_ids_) {
      if (id >= vocab) continue;
      logits[id] -= fp * static_cast<float>(gen_count_[id]);
      logits[id] -= pp;
    }
  }
}

std::span<const int32_t> Sampler::filter(float* logits, int vocab) {
  QVL_CHECK(logits != nullptr && vocab > 0);
  if (cand_.size() < static_cast<size_t>(vocab)) cand_.resize(vocab);
  apply_penalties(logits, vocab);

  if (params_.greedy()) {
    // next_tokens = torch.argmax(next_token_scores, dim=-1): the first maximum.
    int32_t best = 0;
    float best_x = -INFINITY;
    for (int i = 0; i < vocab; ++i)
      if (logits[i] > best_x) { best_x = logits[i]; best = i; }
    cand_[0] = best;
    n_cand_ = 1;
    sorted_ = true;
    return {cand_.data(), 1};
  }

  // TemperatureLogitsWarper: scores / self.temperature. NaN (a model bug) becomes -inf so that comparisons
  // stay a strict order; a finite score that overflows at a tiny temperature stays finite (+-FLT_MAX), so
  // the softmax is defined and a token a constraint allowed (finite) never becomes -inf like the ones it
  // removed.
  const float t = params_.temperature;
  for (int i = 0; i < vocab; ++i) {
    const float in = logits[i];
    float x = in / t;
    if (std::isnan(x)) x = -INFINITY;
    if (std::isfinite(in)) x = std::clamp(x, -FLT_MAX, FLT_MAX);
    logits[i] = x;
  }

  // TopKLogitsWarper: scores < torch.topk(scores, top_k)[0][..., -1, None] are removed (ties at the k-th
  // value all stay). top_k >= vocab keeps everything.
  if (params_.top_k > 0 && params_.top_k < vocab) {
    top_k_candidates(logits, vocab);
  } else {
    for (int i = 0; i < vocab; ++i) cand_[i] = i;
    n_cand_ = vocab;
    sorted_ = false;
  }
  // TopPLogitsWarper, then MinPLogitsWarper (each is added only when it can remove something).
  if (params_.top_p < 1.0f) {
    if (sorted_) top_p_sorted(logits);
    else top_p_full_vocab(logits, vocab);
  }
  if (params_.min_p > 0.0f) min_p_filter(logits);
  return {cand_.data(), static_cast<size_t>(n_cand_)};
}

void Sampler::top_k_candidates(const float* logits, int vocab) {
  // The k-th largest value through a min-heap of the k largest seen so far: one pass, and for a model's
  // logits only a few hundred heap updates (a new value must beat the current k-th).
  const int k = params_.top_k;
  heap_.assign(logits, logits + k);
  std::make_heap(heap_.begin(), heap_.end(), std::greater<float>());
  for (int i = k; i < vocab; ++i) {
    if (logits[i] > heap_.front()) {
      std::pop_heap(heap_.begin(), heap_.end(), std::greater<float>());
      heap_.back() = logits[i];
      std::push_heap(heap_.begin(), heap_.end(), std::greater<float>());
    }
  }
  const float kth = heap_.front();
  int n = 0;
  for (int i = 0; i < vocab; ++i)
    if (logits[i] >= kth) cand_[n++] = i;
  std::sort(cand_.begin(), cand_.begin() + n, Descending{logits});
  n_cand_ = n;
  sorted_ = true;
}

namespace {

// TopPLogitsWarper on candidates in descending order with float probabilities prob(j), j = 0..n-1, and the
// total probability `tail` of all tokens ranked below them. HF sorts ascending and removes
//   cumulative_probs <= (1 - top_p)   (float32 cumsum, accumulated in double by torch on the CPU)
// i.e. every token whose probability plus that of all smaller tokens is at most 1 - top_p. Returns how many
// of the n to keep (at least 1: min_tokens_to_keep), or -1 when the cut lies inside the tail.
template <class Prob>
int top_p_keep(int n, double tail, float threshold, Prob prob) {
  if (static_cast<float>(tail) > threshold) return -1;
  double cum = tail;
  for (int j = n - 1; j >= 0; --j) {
    cum += prob(j);
    if (static_cast<float>(cum) > threshold) return j + 1;
  }
  return 1;
}

}  // namespace

void Sampler::top_p_sorted(const float* logits) {
  // sorted_logits.softmax(dim=-1) over the candidates (the filtered -inf entries have probability 0).
  const int n = n_cand_;
  if (probs_.size() < static_cast<size_t>(n)) probs_.resize(n);
  const float max = logits[cand_[0]];
  double sum = 0.0;
  for (int j = 0; j < n; ++j) {
    probs_[j] = std::exp(logits[cand_[j]] - max);
    sum += probs_[j];
  }
  for (int j = 0; j < n; ++j) probs_[j] = static_cast<float>(probs_[j] / sum);
  const float threshold = static_cast<float>(1.0 - static_cast<double>(params_.top_p));
  n_cand_ = top_p_keep(n, 0.0, threshold, [&](int j) { return probs_[j]; });
}

void Sampler::top_p_full_vocab(const float* logits, int vocab) {
  // Without top-k every id is a candidate. Instead of sorting the whole vocabulary, bring the largest
  // `ranked` logits to the front in order (nth_element + sort of that part), and widen only while the
  // probability mass below them is more than 1 - top_p. A model's distribution needs one or two rounds.
  if (probs_.size() < static_cast<size_t>(vocab)) probs_.resize(vocab);
  float max = -INFINITY;
  for (int i = 0; i < vocab; ++i) max = std::max(max, logits[i]);
  double sum = 0.0;
  for (int i = 0; i < vocab; ++i) {
    probs_[i] = std::exp(logits[i] - max);
    sum += probs_[i];
  }
  for (int i = 0; i < vocab; ++i) probs_[i] = static_cast<float>(probs_[i] / sum);
  const float threshold = static_cast<float>(1.0 - static_cast<double>(params_.top_p));

  const Descending desc{logits};
  int ranked = 0;  // cand_[0..ranked) are the `ranked` largest, in order
  for (int want = 256;; want *= 4) {
    want = std::min(want, vocab);
    if (want < vocab) std::nth_element(cand_.begin() + ranked, cand_.begin() + want, cand_.begin() + vocab, desc);
    std::sort(cand_.begin() + ranked, cand_.begin() + want, desc);
    ranked = want;
    double tail = 0.0;
    for (int j = ranked; j < vocab; ++j) tail += probs_[cand_[j]];
    const int keep = top_p_keep(ranked, tail, threshold, [&](int j) { return probs_[cand_[j]]; });
    if (keep >= 0) {
      n_cand_ = keep;
      sorted_ = true;
      return;
    }
    QVL_CHECK(ranked < vocab);  // with nothing below, the cut cannot lie below
  }
}

void Sampler::min_p_filter(const float* logits) {
  // MinPLogitsWarper: probs = softmax(scores); remove probs < min_p * probs.max(); keep the top token.
  const int n = n_cand_;
  int top = 0;
  if (!sorted_)
    for (int j = 1; j < n; ++j)
      if (Descending{logits}(cand_[j], cand_[top])) top = j;
  const float max = logits[cand_[top]];
  double sum = 0.0;
  for (int j = 0; j < n; ++j) sum += std::exp(logits[cand_[j]] - max);
  const float top_prob = static_cast<float>(1.0 / sum);
  const float scaled_min_p = params_.min_p * top_prob;
  int kept = 0;
  for (int j = 0; j < n; ++j) {
    const float p = static_cast<float>(std::exp(logits[cand_[j]] - max) / sum);
    if (j == top || !(p < scaled_min_p)) cand_[kept++] = cand_[j];
  }
  n_cand_ = kept;
}

int32_t Sampler::draw(const float* logits) {
  // probs = softmax(next_token_scores); torch.multinomial(probs, 1): invert the cumulative distribution at
  // a uniform double in [0, 1) made of 53 random bits, with weights exp(x - max) in double.
  const int n = n_cand_;
  float max = -INFINITY;
  for (int j = 0; j < n; ++j) max = std::max(max, logits[cand_[j]]);
  double total = 0.0;
  for (int j = 0; j < n; ++j) total += std::exp(static_cast<double>(logits[cand_[j]]) - max);
  const double u = static_cast<double>(next_u64() >> 11) * 0x1.0p-53;
  if (!(total > 0.0) || !std::isfinite(total)) return cand_[0];  // every logit -inf: a model bug
  const double target = u * total;
  double cum = 0.0;
  for (int j = 0; j < n; ++j) {
    cum += std::exp(static_cast<double>(logits[cand_[j]]) - max);
    if (cum > target) return cand_[j];
  }
  // Rounding left the target just above the last partial sum: the last token with any weight.
  for (int j = n - 1; j > 0; --j)
    if (std::exp(static_cast<double>(logits[cand_[j]]) - max) > 0.0) return cand_[j];
  return cand_[0];
}

int32_t Sampler::sample(float* logits, int vocab) {
  std::span<const int32_t> survivors = filter(logits, vocab);
  if (params_.greedy()) return survivors[0];
  return draw(logits);  // consumes one random number per token, even with one survivor
}

}  // namespace qvl
