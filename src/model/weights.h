// The model's weights bound by name from a checkpoint: matrices stay in the file's dtype (views into the
// mapping), small vectors (norms, biases) become float32; every name and shape is checked against config.
#pragma once

#include <vector>

#include "io/safetensors.h"
#include "kernels/ops.h"
#include "model/config.h"
#include "util/status.h"

namespace qvl {

struct LinearW {
  Mat w;                 // [out, in]
  std::vector<float> b;  // [out] or empty
  const float* bias() const { return b.empty() ? nullptr : b.data(); }
};

struct NormW {
  std::vector<float> w;
  std::vector<float> b;  // LayerNorm only
};

struct VisionBlockW {
  NormW norm1, norm2;
  LinearW qkv;   // [3 * hidden, hidden]: q, k, v stacked, each heads x head_dim
  LinearW proj;  // [hidden, hidden]
  LinearW fc1;   // [intermediate, hidden]
  LinearW fc2;   // [hidden, intermediate]
};

struct MergerW {
  NormW norm;   // [hidden] before the 2x2 shuffle (final merger) or [4 * hidden] after (DeepStack)
  LinearW fc1;  // [4 * hidden, 4 * hidden]
  LinearW fc2;  // [out_hidden, 4 * hidden]
};

struct VisionW {
  LinearW patch_embed;           // Conv3d as a matrix: [hidden, in_channels * temporal * patch * patch]
  std::vector<float> pos_embed;  // [num_position_embeddings, hidden]
  std::vector<VisionBlockW> blocks;
  MergerW merger;
  std::vector<MergerW> deepstack;  // one per deepstack_visual_indexes entry
};

struct TextLayerW {
  std::vector<float> input_norm, post_norm;  // [hidden]
  std::vector<float> q_norm, k_norm;         // [head_dim]
  Mat q, k, v, o;                            // [heads * hd, hidden], [kv * hd, hidden] x2, [hidden, heads * hd]
  Mat gate, up, down;                        // [inter, hidden] x2, [hidden, inter]
};

struct TextW {
  Mat embed;  // [vocab, hidden]
  std::vector<TextLayerW> layers;
  std::vector<float> norm;  // [hidden]
  Mat lm_head;              // [vocab, hidden]: the embedding itself when tied
};

// The metadata key under which `qvl quantize` records a quantized matrix's type ("q8_0", "q4_0", or with
// "x8" appended when its rows are interleaved in groups of 8); the
// tensor itself is stored as U8 [rows, row_bytes].
std::string quantized_type_key(const std::string& tensor);

// Binds every tensor of `file` that the model needs; an error names the missing or misshapen tensor.
Result<VisionW> bind_vision_weights(const SafetensorsModel& file, const VisionConfig& c);
Result<TextW> bind_text_weights(const SafetensorsModel& file, const TextConfig& c);

}  // namespace qvl
