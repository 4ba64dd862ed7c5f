// What the OpenAI-family endpoints (chat completions, completions, responses) write alike: ids, times,
// usage, qvl's per-request timings and server-sent events.
#pragma once

#include <cstdint>
#include <string>

#include "server/api.h"

namespace qvl::server {

// prefix + 32 hex digits of 128 bits from getrandom() ("chatcmpl-", "cmpl-", "resp_", ...).
std::string random_id(const char* prefix);
int64_t unix_now();

// Per-request timings (llama.cpp's names where they exist). ttft_ms counts from the request's arrival.
json timings_json(const JobUpdate& u);
// Chat and legacy completions' usage: prompt, completion and total tokens, and the cached prompt tokens.
// `reasoning_tokens` >= 0 (a Thinking model's answer): completion_tokens_details.reasoning_tokens, as OpenAI reports.
json usage_json(const GenerateTimings& t, int reasoning_tokens = -1);
// One server-sent event: "data: JSON\n\n".
std::string sse(const json& j);

}  // namespace qvl::server
