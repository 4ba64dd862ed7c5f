// Picks the next token from the logits the way transformers 4.57 `generate` does (a bias per token, repetition
// penalty, temperature, top-k, top-p, min-p, multinomial draw or greedy argmax), plus OpenAI-style
// presence/frequency penalties, with a seeded, machine-independent random generator.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "model/generation_config.h"
#include "util/status.h"

namespace qvl {

struct SamplingParams {
  // Qwen3-VL-2B-Instruct's generation_config.json values (MODEL.md §6.3).
  float temperature = 0.7f;        // <= 0: greedy (HF do_sample=False)
  int top_k = 20;                  // 0: off
  float top_p = 0.8f;              // 1: off
  float min_p = 0.0f;              // 0: off
  float repetition_penalty = 1.0f; // HF/CTRL: on prompt + generated ids; 1: off
  float presence_penalty = 0.0f;   // OpenAI/vLLM: on generated ids only; 0: off
  float frequency_penalty = 0.0f;  // OpenAI/vLLM: on generated ids only; 0: off
  uint64_t seed = 0;
  // OpenAI's logit_bias (HF's sequence_bias for one-token sequences): (token id, bias) pairs, each bias added to
  // its token's logit before every other step; -100 bans a token, +100 all but forces it. Ids ascending, each
  // once. Ids are checked against the vocabulary where it is known (Session::prepare).
  std::vector<std::pair<int32_t, float>> logit_bias;

  bool greedy() const { return !(temperature > 0.0f); }

  // The sampling `model.generate()` does with the model's generation_config.json (Model::generation()): a
  // file without "do_sample": true means greedy, exactly as in transformers.
  static Result<SamplingParams> from_generation_config(const GenerationConfig& config);

  // Rejects values HF or the OpenAI API would reject: temperature < 0 or NaN, top_p outside [0, 1],
  // top_k < 0, min_p outside [0, 1], repetition_penalty <= 0, presence/frequency penalty outside [-2, 2], a
  // logit bias outside [-100, 100], a negative or repeated token id in it.
  Status validate() const;

  // The largest logit-bias magnitude OpenAI takes.
  static constexpr float kMaxLogitBias = 100.0f;
};

// One sequence's sampler: holds the penalty history and the random state. Not thread-safe; one per sequence.
class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);

  // Starts a new sequence: forgets generated tokens, records the prompt for the repetition penalty and
  // reseeds the generator, so the same params + prompt + logits give the same tokens every time.
  void reset(const std::vector<int32_t>& prompt_ids);

  // Picks the next token from `logits[0..vocab)`, which it overwrites (penalties and temperature are applied
  // in place). Greedy: argmax after the penalties (lowest id on ties, as torch.argmax). Otherwise a draw
  // from the softmax of the logits that survive filter(). Does not record the token: call accept().
  int32_t sample(float* logits, int vocab);

  // Records a generated token for the penalties.
  void accept(int32_t token);

  // The processing part of sample(): applies the penalties and, when not greedy, the temperature and the
  // top-k, top-p and min-p filters, returning the surviving ids (logits[id] holds each one's processed
  // value; other entries are left unspecified, not set to -inf). Greedy: the single argmax.
  // The span lives until the next call. Public so that tests can compare it with HF's warpers.
  std::span<const int32_t> filter(float* logits, int vocab);

  const SamplingParams& params() const { return params_; }

 private:
  void apply_penalties(float* logits, int vocab) const;
  void top_k_candidates(const float* logits, int vocab);
  void top_p_full_vocab(const float* logits, int vocab);
  void top_p_sorted(const float* logits);
  void min_p_filter(const float* logits);
  int32_t draw(const float* logits);
  uint64_t next_u64();

  SamplingParams params_;
  uint64_t rng_state_ = 0;

  // Penalty history. seen_: 1 for every id in prompt + generated (repetition penalty), listed once in
  // seen_ids_; gen_count_: how often each id was generated, listed once in gen_ids_. Indexed by token id,
  // grown on demand; cleared through the lists so reset() costs O(distinct ids), not O(vocab).
  std::vector<uint8_t> seen_;
  std::vector<int32_t> seen_ids_;
  std::vector<int32_t> gen_count_;
  std::vector<int32_t> gen_ids_;

  // Per-call work buffers, reused: cand_[0..n_cand_) are the surviving ids; sorted_ says whether they are
  // in descending logit order (ties: lower id first). probs_ holds float probabilities indexed by id
  // (full-vocab top-p) and heap_ the k largest logits while finding the top-k threshold.
  std::vector<int32_t> cand_;
  int n_cand_ = 0;
  bool sorted_ = false;
  std::vector<float> probs_;
  std::vector<float> heap_;
};

}  // namespace qvl
