// The model's hyper-parameters, read from a model directory's config.json (Qwen3VLForConditionalGeneration).
#include "model/config.h"

#include <cmath>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "model/json_fields.h"
#include "util/file.h"
#include "util/builtin_files.h"

namespace qvl {

Result<ModelConfig> ModelConfig::load(const std::string& path) {
  std::string file = path;
  if (is_builtin_path(path) || std::filesystem::is_directory(path)) file = (std::filesystem::path(path) / "config.json").string();
  QVL_ASSIGN_OR_RETURN(std::string text, read_model_file(file, 1 << 22));
  return parse(text, file);
}

Result<ModelConfig> ModelConfig::parse(const std::string& json_text, const std::string& where) {
  auto j = nlohmann::json::parse(json_text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return Status::Error(where + ": not a JSON object");
  auto bad = [&](const std::string& what) { return Status::Error(where + ": " + what); };
  if (!j.contains("vision_config") || !j.contains("text_config"))
    return bad("missing vision_config or text_config (expected a Qwen3-VL config.json)");
  ModelConfig c;
  try {
    const auto& v = j["vision_config"];
    VisionConfig& vc = c.vision;
    QVL_RETURN_IF_ERROR(read_int_field(v, "depth", vc.depth, where + ": vision_config"));
    QVL_RETURN_IF_ERROR(read_int_field(v, "hidden_size", vc.hidden_size, where + ": vision_config"));
    QVL_RETURN_IF_ERROR(read_int_field(v, "intermediate_size", vc.intermediate_size, where + ": vision_config"));
    QVL_RETURN_IF_ERROR(read_int_field(v, "num_heads", vc.num_heads, where + ": vision_config"));
    QVL_RETURN_IF_ERROR(read_int_field(v, "patch_size", vc.patch_size, where + ": vision_config"));
    QVL_RETURN_IF_ERROR(read_int_field(v, "temporal_patch_size", vc.temporal_patch_size, where + ": vision_config"));
    QVL_RETURN_IF_ERROR(read_int_field(v, "spatial_merge_size", vc.spatial_merge_size, where + ": vision_config"));
    QVL_RETURN_IF_ERROR(read_int_field(v, "in_channels", vc.in_channels, where + ": vision_config"));
    QVL_RETURN_IF_ERROR(read_int_field(v, "out_hidden_size", vc.out_hidden_size, where + ": vision_config"));
    QVL_RETURN_IF_ERROR(read_int_field(v, "num_position_embeddings", vc.num_position_embeddings, where + ": vision_config"));
    QVL_RETURN_IF_ERROR(read_int_list(v, "deepstack_visual_indexes", vc.deepstack_visual_indexes, where + ": vision_config"));
    vc.hidden_act = v.value("hidden_act", vc.hidden_act);

    const auto& t = j["text_config"];
    TextConfig& tc = c.text;
    QVL_RETURN_IF_ERROR(read_int_field(t, "hidden_size", tc.hidden_size, where + ": text_config"));
    QVL_RETURN_IF_ERROR(read_int_field(t, "intermediate_size", tc.intermediate_size, where + ": text_config"));
    QVL_RETURN_IF_ERROR(read_int_field(t, "num_hidden_layers", tc.num_hidden_layers, where + ": text_config"));
    QVL_RETURN_IF_ERROR(read_int_field(t, "num_attention_heads", tc.num_attention_heads, where + ": text_config"));
    QVL_RETURN_IF_ERROR(read_int_field(t, "num_key_value_heads", tc.num_key_value_heads, where + ": text_config"));
    tc.head_dim = tc.num_attention_heads > 0 ? tc.hidden_size / tc.num_attention_heads : 0;
    QVL_RETURN_IF_ERROR(read_int_field(t, "head_dim", tc.head_dim, where + ": text_config"));
    QVL_RETURN_IF_ERROR(read_int_field(t, "vocab_size", tc.vocab_size, where + ": text_config"));
    tc.rms_norm_eps = t.value("rms_norm_eps", tc.rms_norm_eps);
    QVL_RETURN_IF_ERROR(read_int_field(t, "max_position_embeddings", tc.max_position_embeddings, where + ": text_config"));
    tc.hidden_act = t.value("hidden_act", tc.hidden_act);
    tc.tie_word_embeddings = t.value("tie_word_embeddings", j.value("tie_word_embeddings", tc.tie_word_embeddings));
    // transformers 4.57 writes rope_theta + rope_scaling; v5 writes rope_parameters holding both.
    const auto& rope = t.contains("rope_parameters") ? t["rope_parameters"] : t.value("rope_scaling", nlohmann::json::object());
    tc.rope_theta = t.value("rope_theta", rope.is_object() ? rope.value("rope_theta", tc.rope_theta) : tc.rope_theta);
    if (rope.is_object()) {
      if (rope.contains("mrope_section")) {
        std::vector<int> s;
        QVL_RETURN_IF_ERROR(read_int_list(rope, "mrope_section", s, where + ": text_config rope"));
        if (s.size() != 3) return bad("text_config rope mrope_section must have 3 entries, got " + std::to_string(s.size()));
        tc.mrope_section = {s[0], s[1], s[2]};
      }
      tc.mrope_interleaved = rope.value("mrope_interleaved", tc.mrope_interleaved);
      const std::string type = rope.value("rope_type", std::string("default"));
      if (type != "default") return bad("rope_type '" + type + "' is not supported (expected 'default')");
    }
    QVL_RETURN_IF_ERROR(read_int_field(j, "image_token_id", c.image_token_id, where));
    QVL_RETURN_IF_ERROR(read_int_field(j, "video_token_id", c.video_token_id, where));
    QVL_RETURN_IF_ERROR(read_int_field(j, "vision_start_token_id", c.vision_start_token_id, where));
    QVL_RETURN_IF_ERROR(read_int_field(j, "vision_end_token_id", c.vision_end_token_id, where));
  } catch (const nlohmann::json::exception& e) {
    return bad(std::string("a field has the wrong type: ") + e.what());
  }

  const VisionConfig& vc = c.vision;
  const TextConfig& tc = c.text;
  auto positive = [&](int v, const char* name) -> Status {
    return v > 0 ? Status::Ok() : bad(std::string(name) + " must be positive, got " + std::to_string(v));
  };
  for (auto [v, name] : {std::pair{vc.depth, "vision_config.depth"}, {vc.hidden_size, "vision_config.hidden_size"},
                         {vc.intermediate_size, "vision_config.intermediate_size"}, {vc.num_heads, "vision_config.num_heads"},
                         {vc.patch_size, "vision_config.patch_size"}, {vc.spatial_merge_size, "vision_config.spatial_merge_size"},
                         {vc.temporal_patch_size, "vision_config.temporal_patch_size"},
                         {vc.in_channels, "vision_config.in_channels"},
                         {vc.out_hidden_size, "vision_config.out_hidden_size"},
                         {vc.num_position_embeddings, "vision_config.num_position_embeddings"},
                         {tc.hidden_size, "text_config.hidden_size"}, {tc.intermediate_size, "text_config.intermediate_size"},
                         {tc.num_hidden_layers, "text_config.num_hidden_layers"},
                         {tc.num_attention_heads, "text_config.num_attention_heads"},
                         {tc.num_key_value_heads, "text_config.num_key_value_heads"}, {tc.head_dim, "text_config.head_dim"},
                         {tc.vocab_size, "text_config.vocab_size"}})
    QVL_RETURN_IF_ERROR(positive(v, name));
  if (vc.hidden_size % vc.num_heads != 0 || vc.head_dim() % 4 != 0)
    return bad("vision hidden_size must split into heads whose size is a multiple of 4");
  // sqrt rounded, then checked exactly (GCC 12 at -O2 narrowed the old counting loop to 32 bits and wrapped).
  const int64_t side = std::llround(std::sqrt(static_cast<double>(vc.num_position_embeddings)));
  if (side * side != vc.num_position_embeddings)
    return bad("vision_config.num_position_embeddings must be a square, got " + std::to_string(vc.num_position_embeddings));
  for (int k : vc.deepstack_visual_indexes)
    if (k < 0 || k >= vc.depth) return bad("deepstack_visual_indexes entry " + std::to_string(k) + " is outside the tower");
  if (vc.out_hidden_size != tc.hidden_size)
    return bad("vision out_hidden_size " + std::to_string(vc.out_hidden_size) + " must equal text hidden_size " +
               std::to_string(tc.hidden_size));
  if (tc.num_attention_heads % tc.num_key_value_heads != 0)
    return bad("num_attention_heads must be a multiple of num_key_value_heads");
  if (tc.head_dim % 2 != 0 || tc.mrope_section[0] < 0 || tc.mrope_section[1] < 0 || tc.mrope_section[2] < 0 ||
      int64_t{tc.mrope_section[0]} + tc.mrope_section[1] + tc.mrope_section[2] != tc.head_dim / 2)
    return bad("mrope_section must sum to head_dim / 2 = " + std::to_string(tc.head_dim / 2));
  if (!tc.mrope_interleaved) return bad("only interleaved M-RoPE (mrope_interleaved: true) is supported");
  if (vc.hidden_act != "gelu_pytorch_tanh") return bad("vision hidden_act '" + vc.hidden_act + "' is not supported");
  if (tc.hidden_act != "silu") return bad("text hidden_act '" + tc.hidden_act + "' is not supported");
  return c;
}

}  // namespace qvl
