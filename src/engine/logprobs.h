// The log-probabilities a client asks for (OpenAI's logprobs/top_logprobs, Ollama's, the legacy completions
// shape): the log-softmax of one row of logits, the chosen token's value and the most likely alternatives.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace qvl {

inline constexpr int kMaxTopLogprobs = 20;  // OpenAI's bound on top_logprobs

struct TokenLogprob {
  int32_t token = -1;
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top;  // the top_n most likely tokens, most likely first (ties: lower id)
};

// log_softmax(logits)[token] and the top_n largest entries (0 <= top_n <= kMaxTopLogprobs). Entries of -inf
// (tokens a grammar masked) have probability 0 and are never listed among the top ones; a row with nothing
// finite gives -inf everywhere. Computed in double, so the values agree with a float64 reference to ~1e-6.
TokenLogprob token_logprob(const float* logits, int vocab, int32_t token, int top_n);

}  // namespace qvl
