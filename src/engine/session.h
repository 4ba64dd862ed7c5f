// One conversation's mutable state: its KV cache, sampler and text streaming, in phases a scheduler can
// interleave with other sessions: prepare() (images preprocessed, prompt built, a cached prefix restored),
// vision (the images not yet encoded, supplied with provide_image()), prefill (the prompt read in slices,
// each a TextSeq of a batched forward pass) and decode (one token per round). start() and step() run the
// phases for one session alone.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/generate.h"
#include "engine/image_cache.h"
#include "engine/json_constraint.h"
#include "engine/prefix_cache.h"
#include "engine/stop.h"
#include "model/mrope.h"
#include "model/text.h"
#include "model/video_processor.h"
#include "model/vision.h"

namespace qvl {

// Caches shared by sessions (either may be null: no caching).
struct SessionCaches {
  ImageCache* images = nullptr;
  PrefixCache* prefixes = nullptr;
};

class Session {
 public:
  explicit Session(const Model& model, SessionCaches caches = {}) : model_(model), caches_(caches) {}
  ~Session();  // retire()

  enum class Phase { kVision, kPrefill, kDecode, kDone };

  // Preprocesses the images that must be encoded (those not in the image cache whose tokens are not all in
  // the restored prefix), builds the prompt and restores the longest cached prefix. A failure a user can
  // cause (bad image, prompt over the context, bad options) comes back as a Status; the session is then done.
  Status prepare(const std::vector<ChatMessage>& messages, const std::vector<ImageRGB>& images,
                 const GenerateOptions& options);
  // The same with videos (already sampled and preprocessed), in the order of the conversation's video parts:
  // each frame group is a vision block of its own, encoded and cached like an image.
  Status prepare(const std::vector<ChatMessage>& messages, const std::vector<ImageRGB>& images,
                 const std::vector<std::shared_ptr<const PreprocessedVideo>>& videos, const GenerateOptions& options);

  Phase phase() const { return phase_; }
  // prepare() refused the prompt because it does not fit the context (an API's context_length_exceeded).
  bool over_context() const { return over_context_; }
  bool done() const { return phase_ == Phase::kDone; }

  // kVision: the images still missing, each with its key (an image given twice appears once).
  struct PendingImage {
    ImageKey key;
    std::shared_ptr<const PreprocessedImage> pixels;
  };
  std::vector<PendingImage> pending_images() const;
  // An encoded image for every pending one with this key; the last one moves the session to kPrefill.
  void provide_image(const ImageKey& key, std::shared_ptr<const EncodedImage> image);

  // kPrefill: the next slice of the prompt (at most max_tokens) as a part of a forward pass; it asks for
  // the last token's logits when it ends the prompt. Valid until prefill_done(), which is called after the pass.
  TextSeq prefill_slice(int64_t max_tokens);
  void prefill_done(const TextSeq& slice);

  // kDecode: samples the next token from the last logits and streams its text. When the answer goes on,
  // decode_row() is the token's forward pass (one row), to be run before the next sample().
  struct Step {
    std::string text;  // newly complete text (may be empty)
    bool done = false;
  };
  Step sample();
  TextSeq decode_row();
  void decode_done();

  // Everything above for this session alone: prepare, encode (one tower pass for all missing images, with
  // `callbacks.dump`), prefill in options.prefill_chunk slices (keep_going asked between them) ...
  Status start(ThreadPool& pool, const std::vector<ChatMessage>& messages, const std::vector<ImageRGB>& images,
               const GenerateOptions& options, const GenerateCallbacks& callbacks = {});
  Status start(ThreadPool& pool, const std::vector<ChatMessage>& messages, const std::vector<ImageRGB>& images,
               const std::vector<std::shared_ptr<const PreprocessedVideo>>& videos, const GenerateOptions& options,
               const GenerateCallbacks& callbacks = {});
  // ... and sample + decode_row + forward.
  Step step(ThreadPool& pool);

  // Ends the session early (client gone, timeout): finish becomes kCancelled.
  void cancel();
  // Hands the KV cache to the prefix cache (once; the session is done). Called by the destructor.
  void retire();

  const GenerateResult& result() const { return result_; }
  int64_t context_used() const { return cache_ ? cache_->length() : 0; }
  int64_t prompt_tokens() const { return static_cast<int64_t>(ids_.size()); }
  int64_t prompt_read() const { return prefill_at_; }
  // The last forward pass's logits for this session ([vocab]): those the next sample() draws from.
  const std::vector<float>& logits() const { return logits_; }

 private:
  void build_visual_rows();
  void begin_decode();
  void finish(FinishReason why);

  const Model& model_;
  SessionCaches caches_;
  GenerateOptions options_;
  Phase phase_ = Phase::kDone;
  bool over_context_ = false;  // the last prepare() refused a prompt over the context

  // The prompt.
  std::vector<int32_t> ids_;         // [n_prompt]
  MRopePositions pos_;               // [3][n_prompt]
  std::vector<TokenKey> keys_;       // [n_prompt + generated fed]: what each cache position holds
  int64_t prefill_at_ = 0;           // prompt tokens in the cache

  // The vision blocks in prompt order (an image, or a video's frame group): its key, its pad tokens' first
  // prompt index, its encoding.
  struct ImageSlot {
    ImageKey key{};
    int image_index = -1;  // an image: its index in the request's images (a frame group: -1)
    int64_t first_pad = 0, n_tokens = 0;
    std::shared_ptr<const PreprocessedImage> pixels;  // when it must be encoded
    std::shared_ptr<const EncodedImage> encoded;       // when known
    bool needed = false;                               // pads after the restored prefix
  };
  std::vector<ImageSlot> images_;
  // The image rows of the prompt from prefill_at_ on (at prepare time), gathered once all are encoded.
  std::vector<float> vis_embeds_;                  // [n_visual_left, hidden]
  std::vector<std::vector<float>> vis_deepstack_;  // per tap: [n_visual_left, hidden]
  int64_t visual_done_ = 0;                        // rows of vis_embeds_ already read
  VisualInputs slice_visual_;                      // the current prefill slice's view

  std::unique_ptr<KVCache> cache_;
  std::unique_ptr<Sampler> sampler_;
  std::unique_ptr<TokenStreamDecoder> detok_;
  std::unique_ptr<StopChecker> stops_;
  std::unique_ptr<JsonConstraint> json_;  // options_.json: the token mask
  std::vector<float> logits_;  // [vocab]
  std::vector<float> seen_logits_;    // [vocab]: the masked logits of the latest sample (options_.logprobs >= 0)
  std::vector<float> prompt_logits_;  // [slice rows, vocab]: a prefill slice's every row (prompt_logprobs >= 0)
  static constexpr int64_t kPromptLogitRows = 32;  // rows per slice then (32 x 151,936 floats: 19 MB)
  // The buffers of the passes start() and step() run (a scheduler runs its own).
  TextActivations text_act_;
  VisionActivations vision_act_;
  int64_t rope_delta_ = 0;
  int64_t max_new_ = 0;
  int32_t eos_[2] = {-1, -1};
  int32_t next_token_ = -1;
  int32_t next_pos_ = 0;
  double start_ms_ = 0, images_ready_ms_ = 0, prefill_started_ms_ = 0, decode_started_ms_ = 0;
  bool retired_ = false;
  GenerateResult result_;
};

// The key of pad j of an image (see TokenKey).
TokenKey image_pad_key(const ImageKey& image, int64_t j);

// Splits one tower pass over several images into one EncodedImage per image (in the order given).
std::vector<std::shared_ptr<const EncodedImage>> split_encoded(VisionOutput&& out,
                                                               const std::vector<const PreprocessedImage*>& images);

}  // namespace qvl
