// One conversation's mutable state: its KV cache, sampler and text streaming. start() encodes the images
// and prefills the prompt; step() produces one token at a time, so a scheduler can interleave sessions.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/generate.h"
#include "engine/stop.h"
#include "model/mrope.h"
#include "model/text.h"

namespace qvl {

class Session {
 public:
  explicit Session(const Model& model) : model_(model) {}

  // Preprocesses and encodes the images, builds the prompt and prefills it. A failure a user can cause
  // (bad image, prompt over the context, bad options) comes back as a Status; the session is then unusable.
  Status start(ThreadPool& pool, const std::vector<ChatMessage>& messages, const std::vector<ImageRGB>& images,
               const GenerateOptions& options, const GenerateCallbacks& callbacks = {});

  struct Step {
    std::string text;  // newly complete text (may be empty)
    bool done = false;
  };
  // Samples the next token and runs it through the model. After done, finish() says why.
  Step step(ThreadPool& pool);

  // Ends the session early (client gone, timeout): finish becomes kCancelled.
  void cancel() { done_ = true; result_.finish = FinishReason::kCancelled; }

  bool done() const { return done_; }
  const GenerateResult& result() const { return result_; }
  int64_t context_used() const { return cache_ ? cache_->length() : 0; }

 private:
  const Model& model_;
  GenerateOptions options_;
  std::unique_ptr<KVCache> cache_;
  std::unique_ptr<Sampler> sampler_;
  std::unique_ptr<TokenStreamDecoder> detok_;
  std::unique_ptr<StopChecker> stops_;
  std::vector<float> logits_;
  int64_t rope_delta_ = 0;
  int64_t max_new_ = 0;
  int32_t eos_[2] = {-1, -1};
  bool done_ = true;
  double decode_started_ms_ = 0, start_ms_ = 0;
  GenerateResult result_;
};

}  // namespace qvl
