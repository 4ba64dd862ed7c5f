// The vision tower (Qwen3VLVisionModel): patch embedding, interpolated position embedding, 2-D rotary
// attention blocks, DeepStack mergers and the final merger — image patches in, LLM-width tokens out.
#pragma once

#include <vector>

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

// Encodes the images (each already preprocessed) in one pass; attention stays within each image.
VisionOutput encode_images(const Model& model, ThreadPool& pool, const std::vector<const PreprocessedImage*>& images,
                           const DumpFn* dump = nullptr);

}  // namespace qvl
