// The model's hyper-parameters, read from a model directory's config.json (Qwen3VLForConditionalGeneration).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "util/status.h"

namespace qvl {

struct VisionConfig {
  int depth = 24;
  int hidden_size = 1024;
  int intermediate_size = 4096;
  int num_heads = 16;
  int patch_size = 16;
  int temporal_patch_size = 2;
  int spatial_merge_size = 2;
  int in_channels = 3;
  int out_hidden_size = 2048;
  int num_position_embeddings = 2304;
  std::vector<int> deepstack_visual_indexes{5, 11, 17};
  std::string hidden_act = "gelu_pytorch_tanh";
  float layer_norm_eps = 1e-6f;  // nn.LayerNorm(eps=1e-6) in the blocks and mergers

  int head_dim() const { return hidden_size / num_heads; }
  int patch_dim() const { return in_channels * temporal_patch_size * patch_size * patch_size; }
  int merged_dim() const { return hidden_size * spatial_merge_size * spatial_merge_size; }
};

struct TextConfig {
  int hidden_size = 2048;
  int intermediate_size = 6144;
  int num_hidden_layers = 28;
  int num_attention_heads = 16;
  int num_key_value_heads = 8;
  int head_dim = 128;
  int vocab_size = 151936;
  float rms_norm_eps = 1e-6f;
  double rope_theta = 5000000.0;
  std::array<int, 3> mrope_section{24, 20, 20};
  bool mrope_interleaved = true;
  bool tie_word_embeddings = true;
  int max_position_embeddings = 262144;
  std::string hidden_act = "silu";
};

struct ModelConfig {
  VisionConfig vision;
  TextConfig text;
  int32_t image_token_id = 151655;
  int32_t video_token_id = 151656;
  int32_t vision_start_token_id = 151652;
  int32_t vision_end_token_id = 151653;

  // Reads `path` (config.json or a directory holding it). Every structural value is checked for sense
  // (positive sizes, heads dividing widths, M-RoPE sections summing to head_dim / 2, DeepStack indexes
  // inside the tower); an error names the field.
  static Result<ModelConfig> load(const std::string& path);
  static Result<ModelConfig> parse(const std::string& json_text, const std::string& where);
};

}  // namespace qvl
