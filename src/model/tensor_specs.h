// The names and shapes of every weight tensor a Qwen3-VL checkpoint holds, derived from its config.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"

namespace qvl {

struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

// The tensors of a Qwen3VLForConditionalGeneration checkpoint in the Hugging Face hub's naming, in the
// order of the model's state_dict: the vision tower (model.visual.*), then the language model
// (model.language_model.*), then lm_head.weight only when the embeddings are not tied (the hub's
// checkpoints with tied embeddings do not store it). For the 2B config: 315 + 310 tensors.
std::vector<TensorSpec> expected_tensors(const ModelConfig& config);

}  // namespace qvl
