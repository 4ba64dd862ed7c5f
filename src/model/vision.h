// The vision tower (Qwen3VLVisionModel): patch embedding, interpolated position embedding, 2-D rotary
// attention blocks, DeepStack mergers and the final merger — image patches in, LLM-width tokens out.
#pragma once

#include <string>
#include <vector>

#include "model/activations.h"
#include "model/image_processor.h"
#include "model/model.h"
#include "util/thread_pool.h"

namespace qvl {

struct VisionOutput {
  int64_t n_tokens = 0;  // merged tokens of all images, in prompt order
  int64_t dim = 0;       // out_hidden_size
  std::vector<float> embeds;                  // [n_tokens, dim]
  std::vector<std::vector<float>> deepstack;  // per DeepStack tap: [n_tokens, dim]
};

// The tower run in pieces, so that a scheduler can put decode rounds of other requests between them: the
// constructor embeds the patches, each step() runs up to max_blocks blocks (the final merger gets a step
// of its own), and take() hands over the output once done(). The images and the activations (whose
// buffers the pass sizes, uses and gives back at its end) must outlive the encoder.
class VisionEncoder {
 public:
  VisionEncoder(const Model& model, ThreadPool& pool, std::vector<const PreprocessedImage*> images,
                VisionActivations& act, const DumpFn* dump = nullptr);
  // Runs up to max_blocks blocks, or the merger when the blocks are done; true once everything is done.
  bool step(ThreadPool& pool, int max_blocks);
  bool done() const { return merged_; }
  int blocks_left() const;  // blocks not yet run, plus one for the merger
  int64_t patches() const { return N_; }
  VisionOutput take();
  // Multiply-accumulates of the weight products of one block over `patches` patches (to size slices).
  static int64_t block_macs(const VisionConfig& c, int64_t patches);

 private:
  void emit(const std::string& name, const float* data, std::vector<int64_t> shape) const;
  const Model& model_;
  std::vector<const PreprocessedImage*> images_;
  const DumpFn* dump_;
  VisionActivations& act_;    // every buffer of the pass (model/activations.h)
  int64_t N_ = 0;             // patches of all images
  int layer_ = 0;             // the next block
  bool merged_ = false;
  VisionOutput out_;
};

// Encodes the images (each already preprocessed) in one pass; attention stays within each image. Its
// buffers are act's (a local one when null).
VisionOutput encode_images(const Model& model, ThreadPool& pool, const std::vector<const PreprocessedImage*>& images,
                           const DumpFn* dump = nullptr, VisionActivations* act = nullptr);

}  // namespace qvl
