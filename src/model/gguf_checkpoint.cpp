// llama.cpp's Qwen3-VL GGUF layout mapped back onto transformers' names and shapes (gguf_checkpoint.h).
// The names and the two-slice patch embedding follow llama.cpp's converter (conversion/qwen3vl.py,
// gguf-py's tensor_mapping.py): tools/gguf_convert.py writes the same layout, and the tests load both.
#include "model/gguf_checkpoint.h"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <optional>
#include <regex>

#include <nlohmann/json.hpp>

#include "model/bundled_files.h"
#include "util/builtin_files.h"
#include "util/cpu_budget.h"
#include "util/thread_pool.h"

namespace qvl {

namespace fs = std::filesystem;

namespace {

bool is_mmproj_name(const fs::path& p) {
  std::string n = p.filename().string();
  std::transform(n.begin(), n.end(), n.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return n.find("mmproj") != std::string::npos;
}

std::vector<fs::path> gguf_files(const fs::path& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_regular_file() && e.path().filename().string().ends_with(".gguf")) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

// Per-layer parts, (llama.cpp's name, transformers' name): one table read both ways (hf_name, gguf_tensor_name).
using NamePairs = std::vector<std::pair<std::string, std::string>>;
const NamePairs& text_parts() {
  static const NamePairs p = {
      {"attn_norm", "input_layernorm"}, {"attn_q", "self_attn.q_proj"}, {"attn_k", "self_attn.k_proj"},
      {"attn_v", "self_attn.v_proj"}, {"attn_output", "self_attn.o_proj"}, {"attn_q_norm", "self_attn.q_norm"},
      {"attn_k_norm", "self_attn.k_norm"}, {"ffn_norm", "post_attention_layernorm"}, {"ffn_gate", "mlp.gate_proj"},
      {"ffn_up", "mlp.up_proj"}, {"ffn_down", "mlp.down_proj"}};
  return p;
}
const NamePairs& vision_parts() {
  static const NamePairs p = {{"attn_qkv", "attn.qkv"}, {"attn_out", "attn.proj"}, {"ln1", "norm1"}, {"ln2", "norm2"},
                              {"ffn_up", "mlp.linear_fc1"}, {"ffn_down", "mlp.linear_fc2"}};
  return p;
}
// The other side of `name` in `pairs` (from llama.cpp's side when `from_gguf`), or "".
std::string other_name(const NamePairs& pairs, const std::string& name, bool from_gguf) {
  for (const auto& [g, h] : pairs)
    if ((from_gguf ? g : h) == name) return from_gguf ? h : g;
  return "";
}

// transformers' name for a GGUF tensor name, and the deepstack layer it belongs to (-1: none).
std::string hf_name(const std::string& g, const std::vector<int64_t>& deepstack) {
  static const std::regex text_layer(R"(blk\.(\d+)\.(\w+)\.weight)");
  static const std::regex vision_layer(R"(v\.blk\.(\d+)\.(\w+)\.(weight|bias))");
  static const std::regex ds(R"(v\.deepstack\.(\d+)\.(norm|fc1|fc2)\.(weight|bias))");
  static const std::regex mm(R"(mm\.(0|2)\.(weight|bias))");
  std::smatch m;
  if (g == "token_embd.weight") return "model.language_model.embed_tokens.weight";
  if (g == "output_norm.weight") return "model.language_model.norm.weight";
  if (g == "output.weight") return "lm_head.weight";
  if (g == "v.patch_embd.bias") return "model.visual.patch_embed.proj.bias";
  if (g == "v.position_embd.weight") return "model.visual.pos_embed.weight";
  if (g == "v.post_ln.weight" || g == "v.post_ln.bias") return "model.visual.merger.norm." + g.substr(10);
  if (std::regex_match(g, m, text_layer)) {
    const std::string part = other_name(text_parts(), m[2], true);
    return part.empty() ? "" : "model.language_model.layers." + m[1].str() + "." + part + ".weight";
  }
  if (std::regex_match(g, m, vision_layer)) {
    const std::string part = other_name(vision_parts(), m[2], true);
    return part.empty() ? "" : "model.visual.blocks." + m[1].str() + "." + part + "." + m[3].str();
  }
  if (std::regex_match(g, m, mm)) return std::string("model.visual.merger.linear_fc") + (m[1] == "0" ? "1." : "2.") + m[2].str();
  if (std::regex_match(g, m, ds)) {
    int64_t layer = -1;
    const std::string digits = m[1].str();
    if (digits.size() > 6 || std::from_chars(digits.data(), digits.data() + digits.size(), layer).ec != std::errc()) return "";
    const auto it = std::find(deepstack.begin(), deepstack.end(), layer);
    if (it == deepstack.end()) return "";
    const std::string part = m[2] == "norm" ? "norm" : m[2] == "fc1" ? "linear_fc1" : "linear_fc2";
    return "model.visual.deepstack_merger_list." + std::to_string(it - deepstack.begin()) + "." + part + "." + m[3].str();
  }
  return "";
}

// Quantized blocks hold f16 scales, read in place: a tensor must start on a 2-byte boundary (llama.cpp
// writes 32-byte alignment; general.alignment may be as low as 1).
Status check_block_alignment(const GgufFile& f, const GgufTensor& t) {
  if (reinterpret_cast<uintptr_t>(t.data) % alignof(BlockQ4_0) == 0) return Status::Ok();
  return Status::Error(f.name() + ": tensor '" + t.name + "' starts at an odd offset (general.alignment " +
                       std::to_string(f.alignment()) + "); expected its blocks on a 2-byte boundary");
}

}  // namespace

std::string gguf_tensor_name(const std::string& hf, const std::vector<int64_t>& deepstack) {
  static const std::regex text_layer(R"(model\.language_model\.layers\.(\d+)\.(.+)\.weight)");
  static const std::regex block(R"(model\.visual\.blocks\.(\d+)\.(.+)\.(weight|bias))");
  static const std::regex ds(R"(model\.visual\.deepstack_merger_list\.(\d+)\.(norm|linear_fc1|linear_fc2)\.(weight|bias))");
  std::smatch m;
  if (hf == "model.language_model.embed_tokens.weight") return "token_embd.weight";
  if (hf == "model.language_model.norm.weight") return "output_norm.weight";
  if (hf == "lm_head.weight") return "output.weight";
  if (hf == "model.visual.patch_embed.proj.bias") return "v.patch_embd.bias";
  if (hf == "model.visual.pos_embed.weight") return "v.position_embd.weight";
  if (hf.rfind("model.visual.merger.", 0) == 0) {
    const std::string rest = hf.substr(20);
    if (rest == "norm.weight" || rest == "norm.bias") return "v.post_ln." + rest.substr(5);
    if (rest.rfind("linear_fc1.", 0) == 0) return "mm.0." + rest.substr(11);
    if (rest.rfind("linear_fc2.", 0) == 0) return "mm.2." + rest.substr(11);
    return "";
  }
  if (std::regex_match(hf, m, text_layer)) {
    const std::string part = other_name(text_parts(), m[2], false);
    return part.empty() ? "" : "blk." + m[1].str() + "." + part + ".weight";
  }
  if (std::regex_match(hf, m, block)) {
    const std::string part = other_name(vision_parts(), m[2], false);
    return part.empty() ? "" : "v.blk." + m[1].str() + "." + part + "." + m[3].str();
  }
  if (std::regex_match(hf, m, ds)) {
    const size_t k = std::stoul(m[1].str());
    if (k >= deepstack.size()) return "";
    const std::string part = m[2] == "norm" ? "norm" : m[2] == "linear_fc1" ? "fc1" : "fc2";
    return "v.deepstack." + std::to_string(deepstack[k]) + "." + part + "." + m[3].str();
  }
  return "";
}

bool is_gguf_model(const std::string& path) {
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) return path.ends_with(".gguf");
  return fs::is_directory(path, ec) && !fs::exists(fs::path(path) / "config.json", ec) && !gguf_files(path).empty();
}

Result<GgufPair> locate_gguf_pair(const std::string& path, const std::string& mmproj_file) {
  std::error_code ec;
  GgufPair pair;
  if (!mmproj_file.empty() && !fs::is_regular_file(mmproj_file, ec))
    return Status::Error("--mmproj " + mmproj_file + ": no such file (expected the model's vision file, mmproj-*.gguf)");
  const bool file = fs::is_regular_file(path, ec);
  const fs::path dir = file ? fs::path(path).parent_path() : fs::path(path);
  std::vector<fs::path> all = gguf_files(dir.empty() ? fs::path(".") : dir);
  std::vector<fs::path> text, mmproj;
  for (const fs::path& p : all) (is_mmproj_name(p) ? mmproj : text).push_back(p);
  if (file) {
    if (is_mmproj_name(path)) return Status::Error(path + ": this is a vision (mmproj) file; --model takes the text model's .gguf");
    pair.text = path;
  } else if (text.size() == 1) {
    pair.text = text[0].string();
  } else {
    return Status::Error(path + ": expected one text-model .gguf file (and one mmproj), found " + std::to_string(text.size()) +
                         "; pass the file itself: --model " + (text.empty() ? std::string("FILE.gguf") : text[0].string()));
  }
  if (!mmproj_file.empty()) {
    pair.mmproj = mmproj_file;
    return pair;
  }
  if (mmproj.empty()) return pair;  // a text model: images are refused (Model::has_vision)
  if (mmproj.size() == 1) {
    pair.mmproj = mmproj[0].string();
    return pair;
  }
  // Several (a hub snapshot pulled at two quantizations): the one of the text model's quantization (the last
  // '-'-separated part of its name, "Q8_0" in "...-Q8_0.gguf"), else an F16 one.
  auto lower = [](std::string s) {
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return s;
  };
  const std::string stem = lower(fs::path(pair.text).stem().string());
  const size_t dash = stem.rfind('-');
  const std::string quant = "-" + (dash == std::string::npos ? stem : stem.substr(dash + 1));
  for (const std::string& want : {quant, std::string("-f16")}) {
    for (const fs::path& p : mmproj) {
      const std::string m = lower(p.stem().string());
      if (m.size() >= want.size() && m.compare(m.size() - want.size(), want.size(), want) == 0) {
        pair.mmproj = p.string();
        return pair;
      }
    }
  }
  return Status::Error(path + ": " + std::to_string(mmproj.size()) + " vision (mmproj) files beside the model and none of "
                       "its quantization or F16; keep one");
}

Result<std::unique_ptr<GgufCheckpoint>> open_gguf_checkpoint(const GgufPair& pair, int threads) {
  auto ck = std::make_unique<GgufCheckpoint>();
  QVL_ASSIGN_OR_RETURN(GgufFile text, GgufFile::open(pair.text));
  QVL_ASSIGN_OR_RETURN(std::string arch, text.get_string("general.architecture"));
  if (arch != "qwen3vl")
    return Status::Error(pair.text + ": general.architecture is '" + arch + "', expected 'qwen3vl' (a Qwen3-VL text model)");
  const bool with_vision = !pair.mmproj.empty();
  std::optional<GgufFile> vis_file;
  if (with_vision) {
    QVL_ASSIGN_OR_RETURN(GgufFile v, GgufFile::open(pair.mmproj));
    vis_file.emplace(std::move(v));
    QVL_ASSIGN_OR_RETURN(std::string varch, vis_file->get_string("general.architecture"));
    QVL_ASSIGN_OR_RETURN(std::string projector, vis_file->get_string("clip.projector_type"));
    if (varch != "clip" || projector != "qwen3vl_merger")
      return Status::Error(pair.mmproj + ": architecture '" + varch + "' with projector '" + projector +
                           "', expected 'clip' with 'qwen3vl_merger' (a Qwen3-VL mmproj)");
  }
  if (auto t = text.get_string("tokenizer.chat_template"); t.ok()) ck->chat_template = *t;

  // config.json from the metadata and the shapes.
  const GgufTensor* embd = text.tensor("token_embd.weight");
  if (!embd || embd->ne.size() != 2)
    return Status::Error(pair.text + ": expected token_embd.weight as a matrix [vocab, hidden], found " +
                         (embd ? std::to_string(embd->ne.size()) + " dimension(s)" : std::string("none")));
  const GgufTensor* pos = with_vision ? vis_file->tensor("v.position_embd.weight") : nullptr;
  if (with_vision && (!pos || pos->ne.size() != 2))
    return Status::Error(pair.mmproj + ": expected v.position_embd.weight as a matrix [positions, hidden], found " +
                         (pos ? std::to_string(pos->ne.size()) + " dimension(s)" : std::string("none")));
  nlohmann::ordered_json tc, vc;
  QVL_ASSIGN_OR_RETURN(uint64_t layers, text.get_uint("qwen3vl.block_count"));
  QVL_ASSIGN_OR_RETURN(uint64_t hidden, text.get_uint("qwen3vl.embedding_length"));
  QVL_ASSIGN_OR_RETURN(uint64_t ffn, text.get_uint("qwen3vl.feed_forward_length"));
  QVL_ASSIGN_OR_RETURN(uint64_t heads, text.get_uint("qwen3vl.attention.head_count"));
  QVL_ASSIGN_OR_RETURN(uint64_t kv, text.get_uint("qwen3vl.attention.head_count_kv"));
  QVL_ASSIGN_OR_RETURN(double eps, text.get_float("qwen3vl.attention.layer_norm_rms_epsilon"));
  QVL_ASSIGN_OR_RETURN(double theta, text.get_float("qwen3vl.rope.freq_base"));
  QVL_ASSIGN_OR_RETURN(std::vector<int64_t> sections, text.get_ints("qwen3vl.rope.dimension_sections"));
  if (sections.size() < 3) return Status::Error(pair.text + ": qwen3vl.rope.dimension_sections has " + std::to_string(sections.size()) + " values, expected 3 or 4");
  // Every count the shapes are built from must be a sane positive number (a hostile file could say 0).
  for (const auto& [key, v] : std::initializer_list<std::pair<const char*, uint64_t>>{
           {"qwen3vl.block_count", layers}, {"qwen3vl.embedding_length", hidden}, {"qwen3vl.feed_forward_length", ffn},
           {"qwen3vl.attention.head_count", heads}, {"qwen3vl.attention.head_count_kv", kv}}) {
    if (v == 0 || v > (1u << 20))
      return Status::Error(pair.text + ": metadata " + key + " is " + std::to_string(v) + ", expected 1 to 1048576");
  }
  const bool tied = text.tensor("output.weight") == nullptr;
  tc["hidden_size"] = hidden;
  tc["intermediate_size"] = ffn;
  tc["num_hidden_layers"] = layers;
  tc["num_attention_heads"] = heads;
  tc["num_key_value_heads"] = kv;
  tc["head_dim"] = text.get_uint("qwen3vl.attention.key_length").ok() ? *text.get_uint("qwen3vl.attention.key_length") : hidden / heads;
  tc["vocab_size"] = embd->ne[1];
  tc["rms_norm_eps"] = eps;
  tc["rope_theta"] = theta;
  tc["max_position_embeddings"] = text.get_uint("qwen3vl.context_length").ok() ? *text.get_uint("qwen3vl.context_length") : 262144;
  tc["rope_scaling"] = {{"mrope_interleaved", true}, {"mrope_section", {sections[0], sections[1], sections[2]}}, {"rope_type", "default"}};
  tc["tie_word_embeddings"] = tied;
  tc["hidden_act"] = "silu";
  std::vector<int64_t> deepstack;
  if (with_vision) {
    const GgufFile& vis = *vis_file;
    QVL_ASSIGN_OR_RETURN(uint64_t vdepth, vis.get_uint("clip.vision.block_count"));
    QVL_ASSIGN_OR_RETURN(uint64_t vhidden, vis.get_uint("clip.vision.embedding_length"));
    QVL_ASSIGN_OR_RETURN(uint64_t vffn, vis.get_uint("clip.vision.feed_forward_length"));
    QVL_ASSIGN_OR_RETURN(uint64_t vheads, vis.get_uint("clip.vision.attention.head_count"));
    QVL_ASSIGN_OR_RETURN(uint64_t proj, vis.get_uint("clip.vision.projection_dim"));
    QVL_ASSIGN_OR_RETURN(uint64_t patch, vis.get_uint("clip.vision.patch_size"));
    QVL_ASSIGN_OR_RETURN(uint64_t merge, vis.get_uint("clip.vision.spatial_merge_size"));
    QVL_ASSIGN_OR_RETURN(std::vector<int64_t> is_ds, vis.get_ints("clip.vision.is_deepstack_layers"));
    for (size_t i = 0; i < is_ds.size(); ++i)
      if (is_ds[i]) deepstack.push_back(static_cast<int64_t>(i));
    vc = {{"depth", vdepth}, {"hidden_size", vhidden}, {"intermediate_size", vffn}, {"num_heads", vheads},
          {"out_hidden_size", proj}, {"patch_size", patch}, {"spatial_merge_size", merge}, {"temporal_patch_size", 2},
          {"in_channels", 3}, {"num_position_embeddings", pos->ne[1]}, {"deepstack_visual_indexes", deepstack},
          {"hidden_act", "gelu_pytorch_tanh"}};
  } else {
    // No vision file: the published vision tower's config (built in), so the processor settings and token
    // ids stay the family's; no vision weight is bound and images are refused.
    QVL_ASSIGN_OR_RETURN(std::string shipped, read_model_file(bundled_model_files() + "/config.json", 1 << 22));
    auto j = nlohmann::ordered_json::parse(shipped, nullptr, false);
    QVL_CHECK(j.is_object() && j.contains("vision_config"));
    vc = j["vision_config"];
    vc["out_hidden_size"] = hidden;
    for (const auto& d : vc["deepstack_visual_indexes"]) deepstack.push_back(d.get<int64_t>());
  }
  nlohmann::ordered_json config = {{"architectures", {"Qwen3VLForConditionalGeneration"}}, {"model_type", "qwen3_vl"},
                                   {"image_token_id", 151655}, {"video_token_id", 151656}, {"vision_start_token_id", 151652},
                                   {"vision_end_token_id", 151653}, {"tie_word_embeddings", tied},
                                   {"text_config", tc}, {"vision_config", vc}};
  ck->config_json = config.dump(2);

  // The tensors under transformers' names.
  std::vector<TensorView> views;
  std::map<std::string, std::string> meta;
  uint64_t bytes = 0;
  auto add_owned = [&](const std::string& name, std::vector<int64_t> shape, std::unique_ptr<uint8_t[]> data, size_t n) {
    views.push_back(TensorView{name, DType::kF32, std::move(shape), data.get(), n * 4});
    ck->owned.push_back(std::move(data));
  };
  ThreadPool pool(threads > 0 ? threads : default_threads());
  auto dequantized = [&](const GgufTensor& t) {  // [numel] floats
    const size_t n = static_cast<size_t>(t.numel());
    std::unique_ptr<uint8_t[]> out(new uint8_t[n * sizeof(float)]);  // every byte written below
    float* f = reinterpret_cast<float*>(out.get());
    const int64_t cols = t.ne[0], rows = t.numel() / cols;
    const uint64_t row_bytes = t.bytes / static_cast<uint64_t>(rows);
    pool.parallel_for(rows, 64, [&](int, int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) (void)gguf_dequantize_row(t.type, t.data + r * row_bytes, f + r * cols, cols);
    });
    return out;
  };
  std::vector<const GgufFile*> all_files = {&text};
  if (with_vision) all_files.push_back(&*vis_file);
  for (const GgufFile* f : all_files) {
    for (const GgufTensor& t : f->tensors()) {
      if (t.name == "v.patch_embd.weight" || t.name == "v.patch_embd.weight.1") continue;
      const std::string name = hf_name(t.name, deepstack);
      if (name.empty()) {
        return Status::Error(f->name() + ": tensor '" + t.name + "' is not part of Qwen3-VL's GGUF layout (llama.cpp's names: "
                             "blk.N.attn_q.weight, v.blk.N.attn_qkv.weight, mm.0.weight, v.deepstack.N.fc1.weight, ...)");
      }
      const std::vector<int64_t> shape = t.shape();
      WeightType wt = WeightType::kF32;
      QVL_CHECK(weight_type_from_ggml(t.type, &wt));  // the file's reader refuses types qvl does not read
      const WeightTypeTraits& traits = weight_type_traits(wt);
      const int64_t rows = t.numel() / t.ne[0];
      if (traits.dtype != DType::kU8) {
        views.push_back({name, traits.dtype, shape, t.data, t.bytes});
      } else if (is_block32_quant(wt)) {
        // GGUF's Q8_0/Q4_0 blocks are qvl's: bound as rows of blocks (U8), as a `qvl quantize` file stores them.
        if (shape.size() != 2) return Status::Error(f->name() + ": tensor '" + t.name + "' is quantized with " +
                                                   std::to_string(shape.size()) + " dimensions, expected a matrix");
        QVL_RETURN_IF_ERROR(check_block_alignment(*f, t));
        views.push_back({name, DType::kU8, {rows, static_cast<int64_t>(t.bytes) / rows}, t.data, t.bytes});
        meta["qvl.quantized." + name] = traits.name;
      } else if (shape.size() == 2 && t.name != "v.position_embd.weight") {
        // K-quants: matrices are bound as the file stores them (qvl's K-quant kernels dot them in integers,
        // and the token embedding's rows are dequantized as they are looked up); the rest (the vision
        // position embedding) is expanded to float once.
        QVL_RETURN_IF_ERROR(check_block_alignment(*f, t));
        views.push_back({name, DType::kU8, {rows, static_cast<int64_t>(t.bytes) / rows}, t.data, t.bytes});
        meta["qvl.quantized." + name] = traits.name;
      } else {
        add_owned(name, shape, dequantized(t), static_cast<size_t>(t.numel()));
        // Its file pages are not read again.
        SafetensorsModel::release(t.data, t.bytes);
      }
    }
  }
  // The Conv3d kernel [out, 3, 2, p, p] from its two time slices [out, 3, p, p].
  const GgufTensor* p0 = with_vision ? vis_file->tensor("v.patch_embd.weight") : nullptr;
  const GgufTensor* p1 = with_vision ? vis_file->tensor("v.patch_embd.weight.1") : nullptr;
  if (with_vision) {
    if (!p0 || !p1 || p0->ne != p1->ne || p0->ne.size() != 4)
      return Status::Error(pair.mmproj + ": expected the patch embedding as v.patch_embd.weight and v.patch_embd.weight.1, "
                           "two [out, 3, p, p] tensors (llama.cpp's split of the Conv3d kernel)");
    {
      const std::vector<int64_t> s = p0->shape();  // [out, 3, p, p]
      const int64_t out_c = s[0], plane = s[1] * s[2] * s[3];
      auto a_bytes = dequantized(*p0), b_bytes = dequantized(*p1);
      const float* a = reinterpret_cast<const float*>(a_bytes.get());
      const float* b = reinterpret_cast<const float*>(b_bytes.get());
      const size_t n = static_cast<size_t>(out_c * plane * 2);
      auto w_bytes = std::make_unique<uint8_t[]>(n * sizeof(float));  // [out, 3, 2, p, p]
      float* w = reinterpret_cast<float*>(w_bytes.get());
      const int64_t pp = s[2] * s[3];
      for (int64_t o = 0; o < out_c; ++o)
        for (int64_t c = 0; c < s[1]; ++c)
          for (int64_t t = 0; t < 2; ++t)
            std::memcpy(w + ((o * s[1] + c) * 2 + t) * pp, (t == 0 ? a : b) + (o * s[1] + c) * pp,
                        static_cast<size_t>(pp) * sizeof(float));
      add_owned("model.visual.patch_embed.proj.weight", {out_c, s[1], 2, s[2], s[3]}, std::move(w_bytes), n);
    }
  }
  bytes = 0;
  for (const GgufFile* f : all_files)
    for (const GgufTensor& t : f->tensors()) bytes += t.bytes;
  ck->files.push_back(std::move(text));
  if (with_vision) ck->files.push_back(std::move(*vis_file));
  ck->weights = SafetensorsModel::from_views(std::move(views), std::move(meta), bytes);
  return ck;
}

}  // namespace qvl
