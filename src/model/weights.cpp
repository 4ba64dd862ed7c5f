// The model's weights bound by name from a checkpoint: matrices stay in the file's dtype (views into the
// mapping), small vectors (norms, biases) become float32; every name and shape is checked against config.
#include "model/weights.h"

#include <string>

namespace qvl {

std::string quantized_type_key(const std::string& tensor) { return "qvl.quantized." + tensor; }

namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

class Binder {
 public:
  explicit Binder(const SafetensorsModel& f) : f_(f) {}

  Result<const TensorView*> get(const std::string& name, const std::vector<int64_t>& shape) const {
    const TensorView* t = f_.find(name);
    if (!t) return Status::Error("checkpoint lacks tensor " + name + " (expected shape " + shape_str(shape) +
                                 "); is this a Qwen3-VL checkpoint matching config.json?");
    if (t->shape != shape)
      return Status::Error("tensor " + name + " has shape " + shape_str(t->shape) + ", config.json implies " +
                           shape_str(shape));
    return t;
  }

  // A matrix [rows, cols]; tensors of more dimensions (the Conv3d kernel) are flattened after the first.
  // A matrix `qvl quantize` stored as U8 blocks is named in the metadata as quantized_type_key: "q8_0" or
  // "q4_0" for rows of blocks, "q8_0x8" or "q4_0x8" for interleaved groups of 8 rows; a GGUF's K-quant
  // matrix as "q4_k", "q5_k" or "q6_k" (rows of super-blocks).
  Result<Mat> mat(const std::string& name, const std::vector<int64_t>& shape) const {
    int64_t cols = 1;
    for (size_t i = 1; i < shape.size(); ++i) cols *= shape[i];
    if (const std::string* q = f_.metadata(quantized_type_key(name))) {
      std::string type_name = *q;
      Layout layout = Layout::kRows;
      if (type_name.size() > 2 && type_name.compare(type_name.size() - 2, 2, "x8") == 0) {
        type_name.resize(type_name.size() - 2);
        layout = Layout::kInterleaved8;
      }
      WeightType type = WeightType::kF32;
      const bool named = weight_type_from_any_name(type_name, &type);
      const bool kquant = named && is_kquant(type) && layout == Layout::kRows;  // stored by rows only
      if (!named || !(kquant || is_block32_quant(type)) || cols % kQK != 0 ||
          (kquant && cols % kQKK != 0) || (layout == Layout::kInterleaved8 && shape[0] % 8 != 0))
        return Status::Error("tensor " + name + " [" + std::to_string(shape[0]) + ", " + std::to_string(cols) +
                             "]: metadata names type '" + *q + "', expected q8_0, q4_0, q8_0x8 or q4_0x8 (x8: rows a "
                             "multiple of 8; columns a multiple of 32), or q4_k, q5_k, q6_k (columns a multiple of 256)");
      QVL_ASSIGN_OR_RETURN(const TensorView* t, get(name, {shape[0], static_cast<int64_t>(row_bytes(type, cols))}));
      if (t->dtype != DType::kU8) return Status::Error("tensor " + name + " is quantized but not stored as U8");
      // Blocks hold f16 scales, read in place.
      if (reinterpret_cast<uintptr_t>(t->data) % alignof(BlockQ4_0) != 0)
        return Status::Error("tensor " + name + ": its quantized blocks start at an odd offset in the file; expected "
                             "2-byte alignment (as `qvl quantize` and GGUF writers lay them out)");
      return Mat{type, shape[0], cols, t->data, layout};
    }
    QVL_ASSIGN_OR_RETURN(const TensorView* t, get(name, shape));
    if (t->dtype == DType::kU8) return Status::Error("tensor " + name + " is U8 without a quantization type in the metadata");
    return Mat{weight_type_of(t->dtype), shape[0], cols, t->data};
  }

  Result<std::vector<float>> vec(const std::string& name, int64_t n) const {
    QVL_ASSIGN_OR_RETURN(const TensorView* t, get(name, {n}));
    std::vector<float> out(static_cast<size_t>(n));
    row_to_f32(Mat{weight_type_of(t->dtype), 1, n, t->data}, 0, out.data());
    return out;
  }

  Result<LinearW> linear(const std::string& prefix, int64_t out, int64_t in, bool bias) const {
    LinearW l;
    QVL_ASSIGN_OR_RETURN(l.w, mat(prefix + ".weight", {out, in}));
    if (bias) {
      QVL_ASSIGN_OR_RETURN(l.b, vec(prefix + ".bias", out));
    }
    return l;
  }

  Result<NormW> layer_norm(const std::string& prefix, int64_t n) const {
    NormW norm;
    QVL_ASSIGN_OR_RETURN(norm.w, vec(prefix + ".weight", n));
    QVL_ASSIGN_OR_RETURN(norm.b, vec(prefix + ".bias", n));
    return norm;
  }

  Result<MergerW> merger(const std::string& prefix, int64_t norm_dim, int64_t merged, int64_t out) const {
    MergerW m;
    QVL_ASSIGN_OR_RETURN(m.norm, layer_norm(prefix + ".norm", norm_dim));
    QVL_ASSIGN_OR_RETURN(m.fc1, linear(prefix + ".linear_fc1", merged, merged, true));
    QVL_ASSIGN_OR_RETURN(m.fc2, linear(prefix + ".linear_fc2", out, merged, true));
    return m;
  }

 private:
  const SafetensorsModel& f_;
};

}  // namespace

Result<VisionW> bind_vision_weights(const SafetensorsModel& file, const VisionConfig& c) {
  Binder b(file);
  VisionW v;
  const std::string p = "model.visual.";
  const int64_t h = c.hidden_size, merged = c.merged_dim();
  QVL_ASSIGN_OR_RETURN(v.patch_embed.w, b.mat(p + "patch_embed.proj.weight",
                                               {h, c.in_channels, c.temporal_patch_size, c.patch_size, c.patch_size}));
  QVL_ASSIGN_OR_RETURN(v.patch_embed.b, b.vec(p + "patch_embed.proj.bias", h));
  {
    QVL_ASSIGN_OR_RETURN(Mat pos, b.mat(p + "pos_embed.weight", {c.num_position_embeddings, h}));
    v.pos_embed.resize(static_cast<size_t>(pos.rows * pos.cols));
    for (int64_t r = 0; r < pos.rows; ++r) row_to_f32(pos, r, &v.pos_embed[static_cast<size_t>(r * h)]);
  }
  for (int i = 0; i < c.depth; ++i) {
    const std::string q = p + "blocks." + std::to_string(i) + ".";
    VisionBlockW blk;
    QVL_ASSIGN_OR_RETURN(blk.norm1, b.layer_norm(q + "norm1", h));
    QVL_ASSIGN_OR_RETURN(blk.norm2, b.layer_norm(q + "norm2", h));
    QVL_ASSIGN_OR_RETURN(blk.qkv, b.linear(q + "attn.qkv", 3 * h, h, true));
    QVL_ASSIGN_OR_RETURN(blk.proj, b.linear(q + "attn.proj", h, h, true));
    QVL_ASSIGN_OR_RETURN(blk.fc1, b.linear(q + "mlp.linear_fc1", c.intermediate_size, h, true));
    QVL_ASSIGN_OR_RETURN(blk.fc2, b.linear(q + "mlp.linear_fc2", h, c.intermediate_size, true));
    v.blocks.push_back(std::move(blk));
  }
  QVL_ASSIGN_OR_RETURN(v.merger, b.merger(p + "merger", h, merged, c.out_hidden_size));
  for (size_t j = 0; j < c.deepstack_visual_indexes.size(); ++j) {
    QVL_ASSIGN_OR_RETURN(MergerW m, b.merger(p + "deepstack_merger_list." + std::to_string(j), merged, merged,
                                             c.out_hidden_size));
    v.deepstack.push_back(std::move(m));
  }
  return v;
}

Result<TextW> bind_text_weights(const SafetensorsModel& file, const TextConfig& c) {
  Binder b(file);
  TextW t;
  const std::string p = "model.language_model.";
  const int64_t h = c.hidden_size, hd = c.head_dim, qd = int64_t{c.num_attention_heads} * hd,
                kvd = int64_t{c.num_key_value_heads} * hd, inter = c.intermediate_size;
  QVL_ASSIGN_OR_RETURN(t.embed, b.mat(p + "embed_tokens.weight", {c.vocab_size, h}));
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    const std::string q = p + "layers." + std::to_string(i) + ".";
    TextLayerW l;
    QVL_ASSIGN_OR_RETURN(l.input_norm, b.vec(q + "input_layernorm.weight", h));
    QVL_ASSIGN_OR_RETURN(l.post_norm, b.vec(q + "post_attention_layernorm.weight", h));
    QVL_ASSIGN_OR_RETURN(l.q_norm, b.vec(q + "self_attn.q_norm.weight", hd));
    QVL_ASSIGN_OR_RETURN(l.k_norm, b.vec(q + "self_attn.k_norm.weight", hd));
    QVL_ASSIGN_OR_RETURN(l.q, b.mat(q + "self_attn.q_proj.weight", {qd, h}));
    QVL_ASSIGN_OR_RETURN(l.k, b.mat(q + "self_attn.k_proj.weight", {kvd, h}));
    QVL_ASSIGN_OR_RETURN(l.v, b.mat(q + "self_attn.v_proj.weight", {kvd, h}));
    QVL_ASSIGN_OR_RETURN(l.o, b.mat(q + "self_attn.o_proj.weight", {h, qd}));
    QVL_ASSIGN_OR_RETURN(l.gate, b.mat(q + "mlp.gate_proj.weight", {inter, h}));
    QVL_ASSIGN_OR_RETURN(l.up, b.mat(q + "mlp.up_proj.weight", {inter, h}));
    QVL_ASSIGN_OR_RETURN(l.down, b.mat(q + "mlp.down_proj.weight", {h, inter}));
    t.layers.push_back(std::move(l));
  }
  QVL_ASSIGN_OR_RETURN(t.norm, b.vec(p + "norm.weight", h));
  if (c.tie_word_embeddings && !file.find("lm_head.weight")) {
    t.lm_head = t.embed;
  } else if (!file.find("lm_head.weight")) {
    // An embedding model (Qwen3VLModel without the head): left empty; Model::bind refuses it for the others.
  } else {  // untied, or a quantized copy of the tied head written by `qvl quantize`
    QVL_ASSIGN_OR_RETURN(t.lm_head, b.mat("lm_head.weight", {c.vocab_size, h}));
  }
  return t;
}

}  // namespace qvl
