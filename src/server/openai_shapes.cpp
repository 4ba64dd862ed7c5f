// What the OpenAI-family endpoints write alike: ids, times, usage, timings and server-sent events.
#include "server/openai_shapes.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cerrno>

#include <sys/random.h>

namespace qvl::server {

namespace {
double per_second(int n, double ms) { return ms > 0 ? n * 1000.0 / ms : 0.0; }
}  // namespace

std::string random_id(const char* prefix) {
  // 128 bits from the kernel: a stored response's id is what lets its conversation be read back, so it must
  // not be guessable from ids seen before.
  uint8_t bytes[16];
  size_t got = 0;
  while (got < sizeof bytes) {
    const ssize_t n = getrandom(bytes + got, sizeof bytes - got, 0);
    if (n > 0) got += static_cast<size_t>(n);
    else if (errno != EINTR) QVL_CHECK(false && "getrandom failed");
  }
  static const char* hex = "0123456789abcdef";
  std::string out(prefix);
  for (uint8_t b : bytes) {
    out += hex[b >> 4];
    out += hex[b & 15];
  }
  return out;
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}


json timings_json(const JobUpdate& u) {
  const GenerateTimings& t = u.result.timings;
  json j;
  j["prompt_n"] = t.prompt_tokens - t.cached_tokens;  // read (llama.cpp: the tokens not from the cache)
  j["cache_n"] = t.cached_tokens;
  j["prompt_ms"] = t.prefill_ms;
  j["prompt_per_second"] = per_second(t.prompt_tokens - t.cached_tokens, t.prefill_ms);
  j["images_cached"] = t.cached_images;
  j["image_tokens"] = t.image_tokens;
  if (t.videos > 0) {
    j["videos"] = t.videos;
    j["video_frames"] = t.video_frames;
    j["video_tokens"] = t.video_tokens;
  }
  j["image_ms"] = t.preprocess_ms + t.vision_ms;
  j["predicted_n"] = t.generated_tokens;
  j["predicted_ms"] = t.decode_ms;
  j["predicted_per_second"] = per_second(t.generated_tokens, t.decode_ms);
  j["ttft_ms"] = t.generated_tokens > 0 ? u.queue_ms + t.ttft_ms : 0.0;
  j["queue_ms"] = u.queue_ms;
  j["total_ms"] = u.total_ms;
  return j;
}

json usage_json(const GenerateTimings& t, int reasoning_tokens) {
  json u{{"prompt_tokens", t.prompt_tokens},
         {"completion_tokens", t.generated_tokens},
         {"total_tokens", t.prompt_tokens + t.generated_tokens},
         {"prompt_tokens_details", json{{"cached_tokens", t.cached_tokens}}}};
  if (reasoning_tokens >= 0)
    u["completion_tokens_details"] = json{{"reasoning_tokens", std::min(reasoning_tokens, t.generated_tokens)}};
  return u;
}

std::string sse(const json& j) { return "data: " + dump_json(j) + "\n\n"; }
}  // namespace qvl::server
