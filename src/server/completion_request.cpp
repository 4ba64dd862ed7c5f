// The OpenAI legacy completion request body (POST /v1/completions) read into a plain request struct.
#include "server/completion_request.h"

#include "server/api.h"
#include "server/openai_request.h"

#include <limits>

namespace qvl::server {

namespace {

// A list of token ids, each an integer in [0, 2^31).
Result<std::vector<int32_t>> token_list(const json& v, const std::string& where) {
  std::vector<int32_t> ids;
  ids.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const json& t = v[i];
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX)
      return Status::Error(where + "[" + std::to_string(i) + "]: expected a token id (an integer >= 0), got " + t.dump().substr(0, 40));
    ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  if (ids.empty()) return Status::Error(where + ": an empty list of token ids; give at least one token");
  return ids;
}

Status read_prompts(const json& body, CompletionRequest& r) {
  const auto it = body.find("prompt");
  const char* shapes = "expected a string, a list of strings, a list of token ids or a list of such lists";
  if (it == body.end() || it->is_null()) return Status::Error(std::string("prompt: missing; ") + shapes);
  const json& p = *it;
  if (p.is_string()) {
    r.prompts.emplace_back(p.get<std::string>());
  } else if (p.is_array() && !p.empty() && p[0].is_number()) {
    QVL_ASSIGN_OR_RETURN(std::vector<int32_t> ids, token_list(p, "prompt"));
    r.prompts.emplace_back(std::move(ids));
  } else if (p.is_array() && !p.empty()) {
    if (p.size() > kMaxCompletionPrompts)
      return Status::Error("prompt: at most " + std::to_string(kMaxCompletionPrompts) + " prompts per request, got " +
                           std::to_string(p.size()));
    for (size_t i = 0; i < p.size(); ++i) {
      const std::string where = "prompt[" + std::to_string(i) + "]";
      if (p[i].is_string()) {
        r.prompts.emplace_back(p[i].get<std::string>());
      } else if (p[i].is_array()) {
        QVL_ASSIGN_OR_RETURN(std::vector<int32_t> ids, token_list(p[i], where));
        r.prompts.emplace_back(std::move(ids));
      } else {
        return Status::Error(where + ": expected a string or a list of token ids, got " + std::string(p[i].type_name()));
      }
    }
  } else {
    return Status::Error(std::string("prompt: ") + shapes + ", got " + (p.is_array() ? "an empty list" : p.type_name()));
  }
  for (size_t i = 0; i < r.prompts.size(); ++i)
    if (const auto* s = std::get_if<std::string>(&r.prompts[i]); s && s->empty())
      return Status::Error(r.prompts.size() == 1 ? "prompt: the prompt is empty"
                                                 : "prompt[" + std::to_string(i) + "]: the prompt is empty");
  return Status::Ok();
}

}  // namespace

Result<CompletionRequest> parse_completion(const json& body, const GenerateOptions& defaults) {
  CompletionRequest r;
  r.options = defaults;
  r.options.max_tokens = 16;  // OpenAI's default for this endpoint
  QVL_RETURN_IF_ERROR(read_string(body, "model", r.model));
  QVL_RETURN_IF_ERROR(read_prompts(body, r));
  if (auto s = body.find("suffix"); s != body.end() && !s->is_null() && !(s->is_string() && s->get<std::string>().empty()))
    return Status::Error("suffix: not supported (Qwen3-VL has no fill-in-the-middle format); leave it out");
  int64_t n = 1;
  QVL_RETURN_IF_ERROR(read_int(body, "n", n));
  if (n < 1 || n > kMaxChoices)
    return Status::Error("n: expected 1 to " + std::to_string(kMaxChoices) + " choices, got " + std::to_string(n));
  if (n * static_cast<int64_t>(r.prompts.size()) > kMaxChoices)
    return Status::Error("n: " + std::to_string(n) + " choices for each of " + std::to_string(r.prompts.size()) +
                         " prompts make " + std::to_string(n * static_cast<int64_t>(r.prompts.size())) +
                         " answers; at most " + std::to_string(kMaxChoices) + " per request");
  r.n = static_cast<int>(n);
  // best_of > n would rank extra answers by their log-probability and drop them: not done here.
  int64_t best_of = n;
  QVL_RETURN_IF_ERROR(read_int(body, "best_of", best_of));
  if (best_of != n)
    return Status::Error("best_of: only best_of equal to n (" + std::to_string(n) + ") is supported, got " +
                         std::to_string(best_of));
  QVL_RETURN_IF_ERROR(read_logit_bias(body, "logit_bias", r.options.sampling.logit_bias));
  QVL_RETURN_IF_ERROR(read_bool(body, "stream", r.stream));
  if (auto so = body.find("stream_options"); so != body.end() && !so->is_null()) {
    if (!so->is_object()) return Status::Error("stream_options: expected an object such as {\"include_usage\": true}");
    QVL_RETURN_IF_ERROR(read_bool(*so, "include_usage", r.include_usage, "stream_options"));
  }
  QVL_RETURN_IF_ERROR(read_bool(body, "echo", r.echo));
  constexpr int64_t kUnset = std::numeric_limits<int64_t>::min();  // not -1: a client's -1 is refused
  int64_t lp = kUnset;
  QVL_RETURN_IF_ERROR(read_int(body, "logprobs", lp));
  if (lp == kUnset) lp = -1;  // off
  else if (lp < 0 || lp > kMaxTopLogprobs)
    return Status::Error("logprobs: expected 0 to " + std::to_string(kMaxTopLogprobs) + " (alternatives per token), got " +
                         std::to_string(lp));
  r.logprobs = static_cast<int>(lp);
  r.options.logprobs = r.logprobs;
  if (r.echo) r.options.prompt_logprobs = r.logprobs;
  if (r.stream && r.echo && r.logprobs >= 0)
    return Status::Error("logprobs: the prompt's log-probabilities (echo) are not streamed; set stream to false");
  // max_tokens 0 (with echo: score the prompt, as evaluation harnesses do).
  QVL_RETURN_IF_ERROR(read_max_tokens(body, "max_tokens", r.options.max_tokens, "", /*allow_zero=*/true));
  SamplingParams& sp = r.options.sampling;
  QVL_RETURN_IF_ERROR(read_float(body, "temperature", sp.temperature));
  QVL_RETURN_IF_ERROR(read_float(body, "top_p", sp.top_p));
  QVL_RETURN_IF_ERROR(read_float(body, "min_p", sp.min_p));
  QVL_RETURN_IF_ERROR(read_float(body, "presence_penalty", sp.presence_penalty));
  QVL_RETURN_IF_ERROR(read_float(body, "frequency_penalty", sp.frequency_penalty));
  QVL_RETURN_IF_ERROR(read_float(body, "repetition_penalty", sp.repetition_penalty));
  int64_t top_k = sp.top_k;
  QVL_RETURN_IF_ERROR(read_int(body, "top_k", top_k));
  if (top_k == -1) top_k = 0;
  if (top_k < 0 || top_k > (1 << 30)) return Status::Error("top_k: must be >= 0 (or -1: off), got " + std::to_string(top_k));
  sp.top_k = static_cast<int>(top_k);
  sp.seed = random_seed();
  if (body.contains("seed") && !body["seed"].is_null()) {
    int64_t seed = 0;
    QVL_RETURN_IF_ERROR(read_int(body, "seed", seed));
    sp.seed = static_cast<uint64_t>(seed);
  }
  QVL_RETURN_IF_ERROR(read_stop(body, "stop", r.options.stop));
  QVL_RETURN_IF_ERROR(sp.validate());
  return r;
}

}  // namespace qvl::server
