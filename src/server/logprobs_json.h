// Log-probabilities (engine/logprobs.h) in each API's shape: OpenAI chat's and the Responses API's
// {"token", "logprob", "bytes", "top_logprobs"} entries, Ollama's (the same fields), and the legacy
// completions' columns {"tokens", "token_logprobs", "top_logprobs", "text_offset"}.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/logprobs.h"
#include "tokenizer/tokenizer.h"

namespace qvl::server {

// One token: its text (the raw bytes, invalid UTF-8 replaced when written), log-probability (-9999 where the
// value is -inf, as OpenAI writes it: JSON has no infinity), bytes, and the alternatives.
nlohmann::ordered_json logprob_entry(const Tokenizer& tok, const TokenLogprob& lp);
// A list of those.
nlohmann::ordered_json logprob_entries(const Tokenizer& tok, const std::vector<TokenLogprob>& lps);

// The legacy /v1/completions columns, appended to `out` (created when null): each token's text, value,
// alternatives as {text: value}, and offset in the returned text, which starts at `offset`. A null
// TokenLogprob pointer is the prompt's first token, which has none.
void append_legacy_logprobs(const Tokenizer& tok, const std::vector<int32_t>& tokens,
                            const std::vector<const TokenLogprob*>& values, size_t& offset, nlohmann::ordered_json& out);

}  // namespace qvl::server
