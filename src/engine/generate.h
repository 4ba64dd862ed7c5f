// The options, timings and result of one request, and generate(): a Session run to the end, streaming
// its text (the server's scheduler steps Sessions itself to interleave them).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/logprobs.h"
#include "engine/json_grammar.h"
#include "engine/sampler.h"
#include "io/image.h"
#include "model/kv_type.h"
#include "model/image_processor.h"
#include "model/model.h"
#include "chat/chat_format.h"
#include "util/thread_pool.h"

namespace qvl {

struct GenerateOptions {
  SamplingParams sampling;
  int max_tokens = 256;                 // new tokens at most
  std::vector<std::string> stop;        // stop strings (not included in the output)
  bool ignore_eos = false;              // keep going past end tokens (tests and benchmarks)
  int64_t context = 4096;               // KV cache size: prompt + generated tokens
  KVType kv_type = KVType::kF16;        // how the KV cache stores keys and values
  int64_t prefill_chunk = 512;          // the prompt is read this many tokens at a time (activation memory)
  ChatOptions chat;                     // add_generation_prompt, add_vision_id, tools
  PreprocessOptions image;              // min/max pixels
  // Image k's own sizes (a request's per-image min_pixels, max_pixels, resized_height/width, detail):
  // per_image[k] where given, within options.image's bounds (image_options()).
  std::vector<PreprocessOptions> per_image;
  // Structured output: the answer is JSON this grammar accepts (constrained decoding); null: free text.
  // The text around it, forced token by token (a tool call's "<tool_call>\n" and "\n</tool_call>").
  std::shared_ptr<const JsonGrammar> json;
  std::string json_prefix, json_suffix;
  // Log-probabilities of each generated token (-1: none; 0..kMaxTopLogprobs: the chosen token's and this many
  // alternatives'): the log-softmax of the logits the sampler is given, after the grammar mask where one
  // applies, before penalties, temperature and the top-k/top-p/min-p filters (the model's own distribution).
  int logprobs = -1;
  // The same for every prompt token after the first (the legacy completions' echo): the prompt is read again
  // in full (no prefix cache) with the logits of every row. Text prompts only.
  int prompt_logprobs = -1;
  // A raw prompt (completions): these token ids are the prompt, without the chat format; no images or videos.
  std::vector<int32_t> raw_prompt;
  // Pooling (an embedding or reranker model): the prompt is read and its last token's hidden state after the
  // final norm is the result (GenerateResult::hidden); nothing is generated and the KV cache holds the prompt.
  bool pooled = false;
  // Other choices of the same request follow with this prompt (an API's n): its KV cache goes to the prefix
  // cache as soon as the prompt is read, not only at the end, so that they restore it instead of reading it.
  bool share_prompt = false;
};

// The preprocessing of image k: per_image[k] over `image`, bounded by it: max_pixels at most the global
// maximum (the server's or the model's), min_pixels at most that; a per-image max_pixels of 0 means
// OpenAI's detail "low": the smallest budget, the global minimum.
PreprocessOptions image_options(const GenerateOptions& options, size_t k, const ImageProcessorConfig& config);

// Makes the answer one tool call of the Qwen3 chat format, <tool_call>\n{"name": ..., "arguments": {...}}
// \n</tool_call>: of the tool `name` (its parameters' schema enforced where json_grammar.h supports it,
// else any object), or of any tool of options.chat.tools when `name` is empty (arguments: any object).
// An error says which tool is unknown.
Status require_tool_call(GenerateOptions& options, const std::string& name);

struct GenerateTimings {
  double preprocess_ms = 0, vision_ms = 0, prefill_ms = 0, decode_ms = 0, ttft_ms = 0;
  int prompt_tokens = 0, image_tokens = 0, generated_tokens = 0;
  int images = 0;
  int videos = 0, video_frames = 0, video_tokens = 0;  // sampled frames; pad tokens of all frame groups
  int cached_tokens = 0;  // prompt tokens restored from the prefix cache (not read again)
  int cached_images = 0;  // images taken from the image cache (not encoded again)
  // The forward passes' buffers at their largest (model/activations.h), when the session ran them itself.
  size_t text_activation_bytes = 0, vision_activation_bytes = 0;
};

enum class FinishReason { kStop, kLength, kCancelled };
const char* finish_reason_name(FinishReason r);

struct GenerateResult {
  std::string text;
  std::vector<int32_t> tokens;
  std::vector<TokenLogprob> logprobs;         // [tokens] when options.logprobs >= 0
  std::vector<int32_t> prompt_ids;            // [prompt] when options.prompt_logprobs >= 0
  std::vector<TokenLogprob> prompt_logprobs;  // [prompt - 1]: prompt token i + 1 given the tokens before it
  FinishReason finish = FinishReason::kStop;
  GenerateTimings timings;
  std::vector<float> hidden;  // [hidden] when options.pooled: the last prompt token's normed hidden state
};

// Streams text pieces to on_text as they become complete UTF-8; on_text returns false to cancel.
// `progress` (optional) hears the phases: "preprocess", "vision", "prefill", "decode".
struct GenerateCallbacks {
  std::function<bool(std::string_view)> on_text;
  std::function<void(const char* phase)> progress;
  const DumpFn* dump = nullptr;  // named intermediates of the vision pass and the prefill
  // Asked before the vision pass and between prefill slices: false ends the prompt's reading there, the
  // answer finishing as cancelled (a client gone or a deadline passed during a long prefill).
  std::function<bool()> keep_going;
};

Result<GenerateResult> generate(const Model& model, ThreadPool& pool, const std::vector<ChatMessage>& messages,
                                const std::vector<ImageRGB>& images, const GenerateOptions& options,
                                const GenerateCallbacks& callbacks = {});
// The same with videos (preprocessed; in the order of the conversation's video parts).
Result<GenerateResult> generate(const Model& model, ThreadPool& pool, const std::vector<ChatMessage>& messages,
                                const std::vector<ImageRGB>& images,
                                const std::vector<std::shared_ptr<const PreprocessedVideo>>& videos,
                                const GenerateOptions& options, const GenerateCallbacks& callbacks = {});

}  // namespace qvl
