// A model written as llama.cpp's Qwen3-VL GGUF pair (gguf_export.h).
#include "model/gguf_export.h"

#include <cmath>
#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "io/gguf.h"
#include "model/gguf_checkpoint.h"
#include "tensor/dtype.h"
#include "tensor/quant.h"
#include "util/cpu_budget.h"
#include "util/file.h"
#include "util/thread_pool.h"

namespace qvl {

namespace fs = std::filesystem;

namespace {

// A GGUF write type's base GGML type and its mix rule.
struct WriteType {
  GgmlType base = GgmlType::kQ8_0;
  bool mix = false;       // q4_k_m / q5_k_m: Q6_K for the LM head and some attn_v / ffn_down matrices
  uint32_t file_type = 7;  // general.file_type (llama.cpp's LLAMA_FTYPE_MOSTLY_*)
};

bool parse_write_type(const std::string& n, WriteType* out) {
  static const std::pair<const char*, WriteType> kTypes[] = {
      {"f32", {GgmlType::kF32, false, 0}},   {"f16", {GgmlType::kF16, false, 1}},     {"bf16", {GgmlType::kBF16, false, 32}},
      {"q8_0", {GgmlType::kQ8_0, false, 7}}, {"q4_0", {GgmlType::kQ4_0, false, 2}},   {"q4_k", {GgmlType::kQ4_K, false, 14}},
      {"q5_k", {GgmlType::kQ5_K, false, 16}}, {"q6_k", {GgmlType::kQ6_K, false, 18}}, {"q4_k_m", {GgmlType::kQ4_K, true, 15}},
      {"q5_k_m", {GgmlType::kQ5_K, true, 17}}};
  for (const auto& [name, t] : kTypes)
    if (n == name) {
      *out = t;
      return true;
    }
  return false;
}

// The tensor's values in `type`, row by row, from its stored float dtype.
// Rows are independent: spread over `pool` (the K-quant fit is the slow part of writing a file).
std::vector<uint8_t> encode(const TensorView& t, GgmlType type, ThreadPool& pool) {
  const int64_t cols = t.shape.back(), rows = t.numel() / cols;
  const Mat m{weight_type_of(t.dtype), rows, cols, t.data};
  WeightType wt = WeightType::kF32;
  QVL_CHECK(weight_type_from_ggml(static_cast<uint32_t>(type), &wt));
  const int64_t row_out = static_cast<int64_t>(row_bytes(wt, cols));
  std::vector<uint8_t> out(static_cast<size_t>(rows * row_out));
  pool.parallel_for(rows, 16, [&](int, int64_t r0, int64_t r1) {
  std::vector<float> row(static_cast<size_t>(cols));  // [cols]
  for (int64_t r = r0; r < r1; ++r) {
    row_to_f32(m, r, row.data());
    uint8_t* dst = out.data() + r * row_out;
    weight_type_traits(wt).from_f32(row.data(), dst, cols);
  }
  });
  return out;
}

// The layer of a "blk.N." tensor, or -1.
int64_t layer_of(const std::string& g) {
  if (g.rfind("blk.", 0) != 0) return -1;
  int64_t n = 0;
  size_t i = 4;
  for (; i < g.size() && g[i] >= '0' && g[i] <= '9'; ++i) n = n * 10 + (g[i] - '0');
  return i > 4 && i < g.size() && g[i] == '.' ? n : -1;
}

// llama.cpp's type rule: 1-D tensors, norms and biases F32; matrices the requested type (a mix: Q6_K for the
// LM head, or the token embedding of a tied model, and for attn_v / ffn_down where llama-quantize's use_more_bits holds: the first and last eighth of
// the layers and every third layer between); where a row is not whole blocks, Q8_0 for a K-quant whose rows
// are whole 32-value blocks, else F16 (llama.cpp's fallback), or BF16 from a BF16 checkpoint, which keeps
// the values exact.
GgmlType type_for(const std::string& gguf_name, const TensorView& t, const WriteType& wanted, int64_t n_layers,
                  bool tied) {
  if (t.shape.size() <= 1 || gguf_name.ends_with("_norm.weight") || !gguf_name.ends_with(".weight")) return GgmlType::kF32;
  GgmlType g = wanted.base;
  if (wanted.mix) {
    const int64_t i = layer_of(gguf_name);
    const bool more_bits = i >= 0 && (i < n_layers / 8 || i >= 7 * n_layers / 8 || (i - n_layers / 8) % 3 == 2);
    // A tied model's token embedding is its LM head too: it gets the head's type.
    if (gguf_name == "output.weight" || (tied && gguf_name == "token_embd.weight") ||
        (more_bits && (gguf_name.ends_with(".attn_v.weight") || gguf_name.ends_with(".ffn_down.weight"))))
      g = GgmlType::kQ6_K;
  }
  const int64_t cols = t.shape.back();
  if (ggml_block_values(g) > 1 && cols % ggml_block_values(g) != 0) {
    if (ggml_block_values(g) == 256 && cols % 32 == 0) return GgmlType::kQ8_0;
    return t.dtype == DType::kBF16 ? GgmlType::kBF16 : GgmlType::kF16;
  }
  return g;
}

}  // namespace

bool is_gguf_write_type(const std::string& name) {
  WriteType t;
  return parse_write_type(name, &t);
}

const char* gguf_write_type_list() { return "f32, f16, bf16, q8_0, q4_0, q4_k, q5_k, q6_k, q4_k_m, q5_k_m"; }

Result<std::string> write_gguf_model(const Model& model, const WeightTypes& types, const std::string& out_dir,
                                     const std::string& name) {
  GgufWriteTypes w;
  w.text = weight_type_name(types.text.value_or(WeightType::kQ8_0));
  w.vision = weight_type_name(types.vision.value_or(WeightType::kQ8_0));
  return write_gguf_model(model, w, out_dir, name);
}

Result<std::string> write_gguf_model(const Model& model, const GgufWriteTypes& types, const std::string& out_dir,
                                     const std::string& name) {
  WriteType text_type, vision_type;
  if (!parse_write_type(types.text, &text_type))
    return Status::Error("GGUF text type '" + types.text + "' is not one of " + gguf_write_type_list());
  if (!parse_write_type(types.vision, &vision_type))
    return Status::Error("GGUF vision type '" + types.vision + "' is not one of " + gguf_write_type_list());
  const std::string tname = types.text;
  ThreadPool pool(default_threads());
  const ModelConfig& c = model.config();
  const SafetensorsModel& ck = model.checkpoint();
  for (const TensorView& t : ck.tensors())
    if (t.dtype == DType::kU8)
      return Status::Error(model.dir() + ": holds quantized weights (a `qvl quantize` folder, or a GGUF with quantized "
                           "tensors); write GGUF from a float checkpoint (safetensors, or an F32/F16/BF16 GGUF)");
  if (model.tokenizer_from_gguf())
    return Status::Error(model.dir() + ": its tokenizer came from the GGUF's metadata (no tokenizer.json beside it); put "
                         "the model's tokenizer.json beside it to write a GGUF from it");
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) return Status::Error(out_dir + ": cannot create: " + ec.message());
  // Refused before anything is written: the model's files are copied beside the GGUF files, onto themselves here.
  const fs::path own = fs::is_directory(model.dir(), ec) ? fs::path(model.dir()) : fs::path(model.dir()).parent_path();
  if (fs::equivalent(out_dir, own.empty() ? fs::path(".") : own, ec))
    return Status::Error(out_dir + ": is the model's own directory; choose another output directory");

  // --- The text model.
  GgufWriter text;
  text.add_string("general.architecture", "qwen3vl");
  text.add_string("general.type", "model");
  // A retrieval model's kind travels in its name, where the loader (and llama.cpp's converter) look for it.
  std::string kind_name = name;
  if (model.kind() != ModelKind::kChat && detect_model_kind("", "", name) != model.kind())
    kind_name = std::string(model.kind() == ModelKind::kEmbedding ? "Qwen3-VL-Embedding " : "Qwen3-VL-Reranker ") + name;
  text.add_string("general.name", kind_name);
  text.add_u32("qwen3vl.block_count", static_cast<uint32_t>(c.text.num_hidden_layers));
  text.add_u32("qwen3vl.context_length", static_cast<uint32_t>(c.text.max_position_embeddings));
  text.add_u32("qwen3vl.embedding_length", static_cast<uint32_t>(c.text.hidden_size));
  text.add_u32("qwen3vl.feed_forward_length", static_cast<uint32_t>(c.text.intermediate_size));
  text.add_u32("qwen3vl.attention.head_count", static_cast<uint32_t>(c.text.num_attention_heads));
  text.add_u32("qwen3vl.attention.head_count_kv", static_cast<uint32_t>(c.text.num_key_value_heads));
  std::vector<int32_t> sections(c.text.mrope_section.begin(), c.text.mrope_section.end());
  sections.resize(4, 0);
  text.add_i32_array("qwen3vl.rope.dimension_sections", sections);
  text.add_f32("qwen3vl.rope.freq_base", static_cast<float>(c.text.rope_theta));
  text.add_f32("qwen3vl.attention.layer_norm_rms_epsilon", static_cast<float>(c.text.rms_norm_eps));
  text.add_u32("qwen3vl.attention.key_length", static_cast<uint32_t>(c.text.head_dim));
  text.add_u32("qwen3vl.attention.value_length", static_cast<uint32_t>(c.text.head_dim));
  text.add_u32("general.file_type", text_type.file_type);
  text.add_u32("qwen3vl.n_deepstack_layers", static_cast<uint32_t>(c.vision.deepstack_visual_indexes.size()));
  // The tokenizer as llama.cpp's gpt2-style vocabulary, from tokenizer.json.
  {
    QVL_ASSIGN_OR_RETURN(std::string tj, read_file_text((fs::path(model.tokenizer_dir()) / "tokenizer.json").string(), 1ull << 30));
    auto j = nlohmann::json::parse(tj, nullptr, false);
    if (j.is_discarded()) return Status::Error(model.tokenizer_dir() + "/tokenizer.json: not valid JSON");
    std::vector<std::string> tokens(static_cast<size_t>(c.text.vocab_size));
    std::vector<int32_t> kinds(tokens.size(), 5);  // UNUSED
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = "[PAD" + std::to_string(i) + "]";
    for (const auto& [s, id] : j["model"]["vocab"].items()) {
      const int64_t i = id.get<int64_t>();
      if (i >= 0 && i < static_cast<int64_t>(tokens.size())) { tokens[static_cast<size_t>(i)] = s; kinds[static_cast<size_t>(i)] = 1; }
    }
    for (const auto& a : j["added_tokens"]) {
      const int64_t i = a["id"].get<int64_t>();
      if (i < 0 || i >= static_cast<int64_t>(tokens.size())) continue;
      tokens[static_cast<size_t>(i)] = a["content"].get<std::string>();
      kinds[static_cast<size_t>(i)] = a.value("special", false) ? 3 : 4;  // CONTROL, USER_DEFINED
    }
    std::vector<std::string> merges;
    for (const auto& m : j["model"]["merges"])
      merges.push_back(m.is_string() ? m.get<std::string>() : m[0].get<std::string>() + " " + m[1].get<std::string>());
    text.add_string("tokenizer.ggml.model", "gpt2");
    text.add_string("tokenizer.ggml.pre", "qwen2");
    text.add_string_array("tokenizer.ggml.tokens", tokens);
    text.add_i32_array("tokenizer.ggml.token_type", kinds);
    text.add_string_array("tokenizer.ggml.merges", merges);
    text.add_u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(model.tokenizer().token_id("<|im_end|>")));
    text.add_u32("tokenizer.ggml.padding_token_id", static_cast<uint32_t>(model.tokenizer().token_id("<|endoftext|>")));
    text.add_u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(model.tokenizer().token_id("<|endoftext|>")));
    text.add_bool("tokenizer.ggml.add_bos_token", false);
    auto tmpl = read_file_text((fs::path(model.tokenizer_dir()) / "chat_template.json").string(), 1 << 22);
    if (tmpl.ok()) {
      auto t = nlohmann::json::parse(*tmpl, nullptr, false);
      if (t.is_object() && t.contains("chat_template") && t["chat_template"].is_string())
        text.add_string("tokenizer.chat_template", t["chat_template"].get<std::string>());
    }
  }

  // --- The vision tower.
  GgufWriter vis;
  vis.add_string("general.architecture", "clip");
  vis.add_string("general.type", "mmproj");
  vis.add_string("general.name", name);
  vis.add_u32("general.file_type", vision_type.file_type);
  vis.add_bool("clip.has_vision_encoder", true);
  vis.add_u32("clip.vision.projection_dim", static_cast<uint32_t>(c.text.hidden_size));
  vis.add_u32("clip.vision.image_size", static_cast<uint32_t>(std::lround(std::sqrt(c.vision.num_position_embeddings)) * c.vision.patch_size));
  vis.add_u32("clip.vision.patch_size", static_cast<uint32_t>(c.vision.patch_size));
  vis.add_u32("clip.vision.embedding_length", static_cast<uint32_t>(c.vision.hidden_size));
  vis.add_u32("clip.vision.feed_forward_length", static_cast<uint32_t>(c.vision.intermediate_size));
  vis.add_u32("clip.vision.block_count", static_cast<uint32_t>(c.vision.depth));
  vis.add_u32("clip.vision.attention.head_count", static_cast<uint32_t>(c.vision.num_heads));
  const ImageProcessorConfig& ip = model.image_config();
  vis.add_f32_array("clip.vision.image_mean", {ip.image_mean[0], ip.image_mean[1], ip.image_mean[2]});
  vis.add_f32_array("clip.vision.image_std", {ip.image_std[0], ip.image_std[1], ip.image_std[2]});
  vis.add_string("clip.projector_type", "qwen3vl_merger");
  vis.add_bool("clip.use_gelu", true);
  vis.add_u32("clip.vision.spatial_merge_size", static_cast<uint32_t>(c.vision.spatial_merge_size));
  vis.add_f32("clip.vision.attention.layer_norm_epsilon", static_cast<float>(c.text.rms_norm_eps));
  std::vector<bool> is_ds(static_cast<size_t>(c.vision.depth), false);
  for (int64_t i : c.vision.deepstack_visual_indexes) is_ds[static_cast<size_t>(i)] = true;
  vis.add_bool_array("clip.vision.is_deepstack_layers", is_ds);

  // --- The tensors, renamed.
  std::vector<int64_t> deepstack(c.vision.deepstack_visual_indexes.begin(), c.vision.deepstack_visual_indexes.end());
  for (const TensorView& t : ck.tensors()) {
    if (t.name == "model.visual.patch_embed.proj.weight") {
      // [out, 3, 2, p, p] -> its two time slices [out, 3, p, p].
      const int64_t out_c = t.shape[0], ch = t.shape[1], pp = t.shape[3] * t.shape[4];
      std::vector<float> all(static_cast<size_t>(t.numel()));
      const Mat m{weight_type_of(t.dtype), 1, t.numel(), t.data};
      row_to_f32(m, 0, all.data());
      const GgmlType pt = vision_type.base == GgmlType::kF16 ? GgmlType::kF16 : GgmlType::kF32;
      for (int64_t slice = 0; slice < 2; ++slice) {
        std::vector<float> part(static_cast<size_t>(out_c * ch * pp));
        for (int64_t oc = 0; oc < out_c * ch; ++oc)
          std::memcpy(part.data() + oc * pp, all.data() + (oc * 2 + slice) * pp, static_cast<size_t>(pp) * 4);
        const TensorView pv{"", DType::kF32, {out_c, ch, t.shape[3], t.shape[4]}, reinterpret_cast<const uint8_t*>(part.data()),
                            part.size() * 4};
        vis.add_tensor(slice == 0 ? "v.patch_embd.weight" : "v.patch_embd.weight.1", pv.shape, pt, encode(pv, pt, pool));
      }
      continue;
    }
    const std::string g = gguf_tensor_name(t.name, deepstack);
    if (g.empty()) return Status::Error(model.dir() + ": tensor " + t.name + " has no place in llama.cpp's Qwen3-VL layout");
    const bool vision = g.rfind("v.", 0) == 0 || g.rfind("mm.", 0) == 0;
    const GgmlType type = g == "v.position_embd.weight"
                              ? GgmlType::kF32
                              : type_for(g, t, vision ? vision_type : text_type, vision ? c.vision.depth : c.text.num_hidden_layers,
                                         c.text.tie_word_embeddings);
    (vision ? vis : text).add_tensor(g, t.shape, type, encode(t, type, pool));
  }
  const std::string text_path = (fs::path(out_dir) / (name + "-" + tname + ".gguf")).string();
  QVL_RETURN_IF_ERROR(text.write(text_path));
  QVL_RETURN_IF_ERROR(vis.write((fs::path(out_dir) / ("mmproj-" + name + "-" + types.vision + ".gguf")).string()));
  // The small files qvl reads beside a GGUF model (no config.json: the folder is a GGUF model).
  for (const char* f : {"tokenizer.json", "generation_config.json", "preprocessor_config.json",
                        "video_preprocessor_config.json", "chat_template.json"}) {
    const fs::path src = fs::path(model.tokenizer_dir()) / f;
    if (!fs::exists(src)) continue;
    fs::copy_file(src, fs::path(out_dir) / f, fs::copy_options::overwrite_existing, ec);
    if (ec) return Status::Error(src.string() + ": cannot copy to " + out_dir + ": " + ec.message());
  }
  return text_path;
}

}  // namespace qvl
