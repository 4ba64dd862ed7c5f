// log_softmax of one row of logits: the chosen token and the top alternatives.
#include "engine/logprobs.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "util/status.h"

namespace qvl {

TokenLogprob token_logprob(const float* logits, int vocab, int32_t token, int top_n) {
  QVL_CHECK(vocab > 0 && token >= 0 && token < vocab && top_n >= 0 && top_n <= kMaxTopLogprobs);
  float mx = -std::numeric_limits<float>::infinity();
  for (int i = 0; i < vocab; ++i) mx = std::max(mx, logits[i]);
  TokenLogprob out;
  out.token = token;
  const double neg_inf = -std::numeric_limits<double>::infinity();
  if (!std::isfinite(mx)) {  // nothing allowed (cannot happen with a sane mask): every value is -inf
    out.logprob = static_cast<float>(neg_inf);
    return out;
  }
  double sum = 0.0;
  for (int i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(logits[i]) - mx);
  const double log_z = mx + std::log(sum);
  out.logprob = static_cast<float>(static_cast<double>(logits[token]) - log_z);
  if (top_n == 0) return out;
  // The top_n largest finite entries: a min-heap of (value, -id) keeps ties ordered by lower id first.
  std::vector<std::pair<float, int32_t>> heap;  // (logit, id)
  heap.reserve(static_cast<size_t>(top_n) + 1);
  auto worse = [](const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);  // a ranks above b
  };
  for (int i = 0; i < vocab; ++i) {
    const float v = logits[i];
    if (!(v > -std::numeric_limits<float>::infinity())) continue;
    if (static_cast<int>(heap.size()) < top_n) {
      heap.emplace_back(v, i);
      std::push_heap(heap.begin(), heap.end(), worse);
    } else if (worse({v, i}, heap.front())) {
      std::pop_heap(heap.begin(), heap.end(), worse);
      heap.back() = {v, i};
      std::push_heap(heap.begin(), heap.end(), worse);
    }
  }
  std::sort(heap.begin(), heap.end(), worse);
  for (const auto& [v, id] : heap) out.top.emplace_back(id, static_cast<float>(static_cast<double>(v) - log_z));
  return out;
}

}  // namespace qvl
