// Writes a complete model directory with deterministic pseudo-random weights, for tests and benchmarks.
#include "model/test_model.h"

#include <bit>
#include <cstdio>
#include <filesystem>
#include <map>
#include <vector>
#include <string_view>

#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "model/config.h"
#include "model/tensor_specs.h"
#include "tensor/dtype.h"
#include "util/file.h"
#include "util/builtin_files.h"
#include "util/thread_pool.h"
#include "util/cpu_budget.h"

namespace qvl {

namespace {

namespace fs = std::filesystem;

// The checkpoint files besides config.json and the weights, copied as they are.
constexpr const char* kCopiedFiles[] = {"tokenizer.json", "chat_template.json", "generation_config.json",
                                        "preprocessor_config.json", "video_preprocessor_config.json"};

uint64_t fnv1a64(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

// The output function of splitmix64 (Steele, Lea, Flood 2014).
uint64_t splitmix64_mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
constexpr uint64_t kGamma = 0x9e3779b97f4a7c15ull;

// 2^e as a float, built from its bits (e in the normal range).
float pow2(int e) { return std::bit_cast<float>(static_cast<uint32_t>(127 + e) << 23); }

// Each tensor is center + uniform(-2^-k, 2^-k): small enough that activations stay O(1) through the layers.
struct WeightInit {
  float center;
  int k;
};

WeightInit init_for(const TensorSpec& spec) {
  const std::string& n = spec.name;
  auto ends_with = [&](std::string_view s) { return n.size() >= s.size() && n.compare(n.size() - s.size(), s.size(), s) == 0; };
  if (ends_with("embed_tokens.weight") || ends_with("pos_embed.weight")) return {0.0f, 3};  // ±1/8
  const bool is_bias = ends_with(".bias");
  // The module name: the component before ".weight" / ".bias", e.g. "norm1", "q_norm", "input_layernorm".
  const size_t end = n.rfind('.');
  const size_t begin = n.rfind('.', end - 1) + 1;
  if (n.substr(begin, end - begin).find("norm") != std::string::npos)
    return is_bias ? WeightInit{0.0f, 5} : WeightInit{1.0f, 4};  // LayerNorm bias ±1/32, norm weight 1 ± 1/16
  if (is_bias) return {0.0f, 6};  // ±1/64
  // A linear (or the patch-embedding convolution, a linear over its flattened patch): the largest k with
  // 4^k <= fan_in, so 2^k <= sqrt(fan_in) < 2^(k+1) and the output's spread stays near the input's.
  const int64_t fan_in = spec.numel() / spec.shape[0];
  int k = 0;
  while ((int64_t{4} << (2 * k)) <= fan_in) ++k;
  return {0.0f, k};
}

// Writes elements [first, first + count) of a tensor as BF16. Element i is the (i + 1)-th output of a
// splitmix64 stream keyed by the seed and the tensor's name, so tensors do not depend on each other or on
// the order they are written in. Only integer ops and exactly rounded float multiply/add: the same bytes
// on every machine.
void fill_bf16(const TensorSpec& spec, uint64_t seed, int64_t first, int64_t count, uint16_t* dst) {
  const WeightInit init = init_for(spec);
  const uint64_t key = splitmix64_mix(seed + kGamma) ^ fnv1a64(spec.name);
  const float unit = pow2(-23 - init.k);  // maps the 24-bit integer u in [-2^23, 2^23) to [-2^-k, 2^-k)
  for (int64_t j = 0; j < count; ++j) {
    const uint64_t i = static_cast<uint64_t>(first + j);
    const uint64_t bits = splitmix64_mix(key + (i + 1) * kGamma);
    const int32_t u = static_cast<int32_t>(bits >> 40) - (1 << 23);
    dst[j] = f32_to_bf16(init.center + static_cast<float>(u) * unit);
  }
}

Status check_source_files(const std::string& dir) {
  for (const char* name : {"config.json", kCopiedFiles[0], kCopiedFiles[1], kCopiedFiles[2], kCopiedFiles[3], kCopiedFiles[4]}) {
    const fs::path p = fs::path(dir) / name;
    if (!model_file_exists(p.string()))
      return Status::Error(p.string() + ": missing; make-test-model copies the tokenizer and configs from the real "
                           "model's files (pass --model-files DIR, a directory with config.json, tokenizer.json, "
                           "chat_template.json, generation_config.json and the two preprocessor configs)");
  }
  return Status::Ok();
}

}  // namespace

namespace {

// The shapes of a preset, written over the 2B checkpoint's config.json (the family shares its tokenizer,
// processor configs, M-RoPE sections and special tokens). The 4B and 8B values are those of
// Qwen/Qwen3-VL-4B-Instruct and Qwen/Qwen3-VL-8B-Instruct's config.json; the tiny variants keep what sets
// each apart at small widths: the 2B's tied head and q width = hidden; the 4B's q width (heads x head_dim)
// wider than its hidden size and a 4:1 GQA; the 8B's untied lm_head and 72-wide vision heads.
struct Shapes {
  int v_depth, v_hidden, v_inter, v_heads, v_out;
  std::vector<int> deepstack;
  int t_hidden, t_inter, t_layers, t_heads, t_kv;
  bool tied;
};
const std::map<std::string, Shapes>& presets() {
  static const std::map<std::string, Shapes> p = {
      {"4b", {24, 1024, 4096, 16, 2560, {5, 11, 17}, 2560, 9728, 36, 32, 8, true}},
      {"8b", {27, 1152, 4304, 16, 4096, {8, 16, 24}, 4096, 12288, 36, 32, 8, false}},
      {"tiny", {5, 64, 128, 2, 128, {1, 2, 3}, 128, 256, 4, 2, 1, true}},
      {"tiny-4b", {5, 64, 128, 2, 96, {1, 2, 3}, 96, 192, 4, 4, 1, true}},
      {"tiny-8b", {5, 288, 200, 4, 128, {1, 2, 4}, 128, 256, 4, 2, 1, false}},
  };
  return p;
}

}  // namespace

namespace {

// "tiny-embedding" -> {"tiny", "Embedding"}: a retrieval preset is its base preset's weights (the same seed
// gives the same tensors) with the model card title that makes qvl load it as that kind (model/model_kind.h),
// as the hub's Qwen3-VL-Embedding / -Reranker checkpoints are the chat model's structure.
std::pair<std::string, std::string> split_retrieval_preset(const std::string& name) {
  for (const char* kind : {"embedding", "reranker"}) {
    const std::string suffix = std::string("-") + kind;
    if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
      std::string title = kind;
      title[0] = static_cast<char>(title[0] - 'a' + 'A');
      return {name.substr(0, name.size() - suffix.size()), title};
    }
  }
  return {name, ""};
}

bool is_base_preset(const std::string& name) { return name == "2b" || presets().count(name) > 0; }

}  // namespace

std::string test_model_presets() {
  return "tiny, tiny-4b, tiny-8b, 2b, 4b or 8b; any of them + -embedding or -reranker (tiny-embedding, "
         "2b-reranker: the same weights as a Qwen3-VL-Embedding / -Reranker checkpoint)";
}
bool is_test_model_preset(const std::string& name) { return is_base_preset(split_retrieval_preset(name).first); }

Result<std::string> test_model_config_json(const std::string& preset_name, const std::string& model_files_dir) {
  const std::string preset = split_retrieval_preset(preset_name).first;
  const std::string src = (fs::path(model_files_dir) / "config.json").string();
  QVL_ASSIGN_OR_RETURN(std::string text, read_model_file(src, 1 << 22));
  if (preset == "2b") return text;
  auto it = presets().find(preset);
  if (it == presets().end()) return Status::Error("unknown preset '" + preset + "', expected " + test_model_presets());
  const Shapes& sh = it->second;

  auto j = nlohmann::ordered_json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("vision_config") || !j.contains("text_config") ||
      !j["vision_config"].is_object() || !j["text_config"].is_object())
    return Status::Error(src + ": expected a Qwen3-VL config.json with vision_config and text_config objects");
  auto& v = j["vision_config"];
  v["depth"] = sh.v_depth;
  v["hidden_size"] = sh.v_hidden;
  v["intermediate_size"] = sh.v_inter;
  v["num_heads"] = sh.v_heads;
  v["deepstack_visual_indexes"] = sh.deepstack;
  v["num_position_embeddings"] = 2304;  // the real 48×48 grid, so position interpolation is exercised as is
  v["patch_size"] = 16;
  v["temporal_patch_size"] = 2;
  v["spatial_merge_size"] = 2;
  v["out_hidden_size"] = sh.v_out;
  auto& t = j["text_config"];
  t["hidden_size"] = sh.t_hidden;
  t["intermediate_size"] = sh.t_inter;
  t["num_hidden_layers"] = sh.t_layers;
  t["num_attention_heads"] = sh.t_heads;
  t["num_key_value_heads"] = sh.t_kv;
  t["head_dim"] = 128;  // every size: keeps mrope_section [24, 20, 20]
  t["vocab_size"] = 151936;
  t["tie_word_embeddings"] = sh.tied;
  j["tie_word_embeddings"] = sh.tied;
  return j.dump(2) + "\n";
}

Status make_test_model(const TestModelOptions& options) {
  if (options.out_dir.empty()) return Status::Error("no output directory given");
  QVL_RETURN_IF_ERROR(check_source_files(options.model_files_dir));
  QVL_ASSIGN_OR_RETURN(std::string config_text, test_model_config_json(options.preset, options.model_files_dir));
  QVL_ASSIGN_OR_RETURN(ModelConfig config, ModelConfig::parse(config_text, options.preset + " config.json"));

  std::error_code ec;
  fs::create_directories(options.out_dir, ec);
  if (ec) return Status::Error(options.out_dir + ": cannot create the output directory: " + ec.message());
  const fs::path out(options.out_dir);
  QVL_RETURN_IF_ERROR(write_file_bytes((out / "config.json").string(), config_text.data(), config_text.size()));
  if (const auto [base, kind] = split_retrieval_preset(options.preset); !kind.empty()) {
    const std::string card = "# Qwen3-VL-" + kind + " (qvl test model: the " + base + " preset's shapes, seed " +
                             std::to_string(options.seed) + ", generated weights)\n";
    QVL_RETURN_IF_ERROR(write_file_bytes((out / "README.md").string(), card.data(), card.size()));
  }
  for (const char* name : kCopiedFiles) {
    QVL_ASSIGN_OR_RETURN(std::string bytes, read_model_file((fs::path(options.model_files_dir) / name).string()));
    QVL_RETURN_IF_ERROR(write_file_bytes((out / name).string(), bytes.data(), bytes.size()));
  }

  ThreadPool pool(options.threads > 0 ? options.threads : default_threads());
  const std::vector<TensorSpec> specs = expected_tensors(config);
  std::vector<TensorToWrite> tensors;
  tensors.reserve(specs.size());
  for (const TensorSpec& spec : specs) {
    const uint64_t seed = options.seed;
    tensors.push_back({spec.name, DType::kBF16, spec.shape, [&pool, &spec, seed](int64_t first, int64_t count, uint8_t* dst) {
                         uint16_t* out16 = reinterpret_cast<uint16_t*>(dst);
                         pool.parallel_for(count, 1 << 16, [&](int, int64_t b, int64_t e) {
                           fill_bf16(spec, seed, first + b, e - b, out16 + b);
                         });
                       }});
  }

  int last_tenth = -1;
  WriteProgress progress;
  if (options.progress)
    progress = [&](uint64_t done, uint64_t total) {
      const int tenth = total ? static_cast<int>(done * 10 / total) : 10;
      if (tenth == last_tenth) return;
      last_tenth = tenth;
      std::fprintf(stderr, "make-test-model: %llu / %llu MB of weights written\n",
                   static_cast<unsigned long long>(done >> 20), static_cast<unsigned long long>(total >> 20));
    };
  return write_safetensors((out / "model.safetensors").string(), tensors, {{"format", "pt"}}, progress);
}

}  // namespace qvl
