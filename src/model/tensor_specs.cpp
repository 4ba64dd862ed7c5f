// The names and shapes of every weight tensor a Qwen3-VL checkpoint holds, derived from its config.
#include "model/tensor_specs.h"

namespace qvl {

std::vector<TensorSpec> expected_tensors(const ModelConfig& config) {
  const VisionConfig& v = config.vision;
  const TextConfig& t = config.text;
  std::vector<TensorSpec> out;
  auto add = [&](std::string name, std::vector<int64_t> shape) { out.push_back({std::move(name), std::move(shape)}); };

  // Vision tower: Qwen3VLVisionModel.
  const int64_t h = v.hidden_size;
  const int64_t merged = v.merged_dim();  // hidden × merge², the width after the 2×2 patch merge
  add("model.visual.patch_embed.proj.weight", {h, v.in_channels, v.temporal_patch_size, v.patch_size, v.patch_size});
  add("model.visual.patch_embed.proj.bias", {h});
  add("model.visual.pos_embed.weight", {v.num_position_embeddings, h});
  for (int i = 0; i < v.depth; ++i) {
    const std::string p = "model.visual.blocks." + std::to_string(i) + ".";
    add(p + "norm1.weight", {h});
    add(p + "norm1.bias", {h});
    add(p + "norm2.weight", {h});
    add(p + "norm2.bias", {h});
    add(p + "attn.qkv.weight", {3 * h, h});  // rows: q ‖ k ‖ v
    add(p + "attn.qkv.bias", {3 * h});
    add(p + "attn.proj.weight", {h, h});
    add(p + "attn.proj.bias", {h});
    add(p + "mlp.linear_fc1.weight", {v.intermediate_size, h});
    add(p + "mlp.linear_fc1.bias", {v.intermediate_size});
    add(p + "mlp.linear_fc2.weight", {h, v.intermediate_size});
    add(p + "mlp.linear_fc2.bias", {h});
  }
  // The final merger normalizes before the shuffle (width h), the DeepStack mergers after it (width merged).
  auto add_merger = [&](const std::string& p, int64_t norm_width) {
    add(p + "norm.weight", {norm_width});
    add(p + "norm.bias", {norm_width});
    add(p + "linear_fc1.weight", {merged, merged});
    add(p + "linear_fc1.bias", {merged});
    add(p + "linear_fc2.weight", {v.out_hidden_size, merged});
    add(p + "linear_fc2.bias", {v.out_hidden_size});
  };
  add_merger("model.visual.merger.", h);
  for (size_t j = 0; j < v.deepstack_visual_indexes.size(); ++j)
    add_merger("model.visual.deepstack_merger_list." + std::to_string(j) + ".", merged);

  // Language model: Qwen3VLTextModel. No biases.
  const int64_t d = t.hidden_size;
  const int64_t q_width = int64_t{t.num_attention_heads} * t.head_dim;
  const int64_t kv_width = int64_t{t.num_key_value_heads} * t.head_dim;
  add("model.language_model.embed_tokens.weight", {t.vocab_size, d});
  for (int l = 0; l < t.num_hidden_layers; ++l) {
    const std::string p = "model.language_model.layers." + std::to_string(l) + ".";
    add(p + "self_attn.q_proj.weight", {q_width, d});
    add(p + "self_attn.k_proj.weight", {kv_width, d});
    add(p + "self_attn.v_proj.weight", {kv_width, d});
    add(p + "self_attn.o_proj.weight", {d, q_width});
    add(p + "self_attn.q_norm.weight", {t.head_dim});
    add(p + "self_attn.k_norm.weight", {t.head_dim});
    add(p + "mlp.gate_proj.weight", {t.intermediate_size, d});
    add(p + "mlp.up_proj.weight", {t.intermediate_size, d});
    add(p + "mlp.down_proj.weight", {d, t.intermediate_size});
    add(p + "input_layernorm.weight", {d});
    add(p + "post_attention_layernorm.weight", {d});
  }
  add("model.language_model.norm.weight", {d});
  if (!t.tie_word_embeddings) add("lm_head.weight", {t.vocab_size, d});
  return out;
}

}  // namespace qvl
