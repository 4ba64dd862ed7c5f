// A loaded model: configuration, tokenizer, processor settings and weights, immutable after load and
// shared read-only by every session.
#include "model/model.h"
#include "util/cpu_budget.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <optional>

#include <nlohmann/json.hpp>

#include "kernels/ops.h"
#include "model/bundled_files.h"
#include "model/gguf_checkpoint.h"
#include "model/tensor_specs.h"
#include "util/file.h"
#include "util/builtin_files.h"

namespace qvl {

Result<ChatTemplateKind> read_chat_template_kind(const std::string& dir) {
  namespace fs = std::filesystem;
  const fs::path d(dir);
  for (const char* name : {"chat_template.json", "tokenizer_config.json"}) {
    const fs::path p = d / name;
    if (!model_file_exists(p.string())) continue;
    QVL_ASSIGN_OR_RETURN(std::string text, read_model_file(p.string(), 64 << 20));
    auto j = nlohmann::json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object())
      return Status::Error(p.string() + ": expected a JSON object, got text that does not parse as one");
    if (auto t = j.find("chat_template"); t != j.end() && t->is_string()) return chat_template_kind(t->get<std::string>());
  }
  const fs::path jinja = d / "chat_template.jinja";
  if (model_file_exists(jinja.string())) {
    QVL_ASSIGN_OR_RETURN(std::string text, read_model_file(jinja.string(), 1 << 20));
    return chat_template_kind(text);
  }
  return ChatTemplateKind::kInstruct;
}

namespace {
// video_preprocessor_config.json when the directory has one, else Qwen3-VL's published one.
Result<VideoProcessorConfig> load_video_config(const std::string& dir) {
  if (model_file_exists((std::filesystem::path(dir) / "video_preprocessor_config.json").string()))
    return VideoProcessorConfig::load(dir);
  return VideoProcessorConfig::qwen3_vl();
}
}  // namespace

Status no_vision_error(const Model& model, size_t images, size_t videos) {
  const std::string what = images && videos ? "images and videos" : images ? (images == 1 ? "an image" : "images")
                                                                             : (videos == 1 ? "a video" : "videos");
  return Status::Error("this request has " + what + ", but the model (" + model.dir() + ") was loaded without its "
                       "vision file, so it answers text only; load it with its mmproj: --mmproj FILE (the "
                       "mmproj-*.gguf of the same model), or put that file beside the .gguf");
}

Result<std::unique_ptr<Model>> Model::load(const std::string& dir, const WeightTypes& types, int threads,
                                           const std::string& mmproj) {
  if (is_gguf_model(dir)) return load_gguf(dir, mmproj, types, threads);
  if (!mmproj.empty())
    return Status::Error("--mmproj " + mmproj + ": a vision file is for a GGUF model, but " + dir + " is a model "
                         "directory (its vision tower is in its safetensors); drop --mmproj");
  if (!std::filesystem::is_directory(dir))
    return Status::Error(dir + ": not a directory (expected a model directory with config.json, tokenizer.json "
                               "and model.safetensors, or a .gguf file)");
  std::unique_ptr<Model> m(new Model());
  m->dir_ = dir;
  m->files_dir_ = dir;
  QVL_ASSIGN_OR_RETURN(m->config_, ModelConfig::load(dir));
  QVL_ASSIGN_OR_RETURN(m->generation_, GenerationConfig::load(dir));
  QVL_ASSIGN_OR_RETURN(Tokenizer tok, Tokenizer::load(dir));
  m->tokenizer_ = std::make_unique<Tokenizer>(std::move(tok));
  QVL_ASSIGN_OR_RETURN(m->chat_template_, read_chat_template_kind(dir));
  QVL_ASSIGN_OR_RETURN(m->image_config_, ImageProcessorConfig::load(dir));
  QVL_ASSIGN_OR_RETURN(m->video_config_, load_video_config(dir));
  QVL_ASSIGN_OR_RETURN(m->weights_, SafetensorsModel::open(dir));
  m->kind_ = detect_model_kind_in_dir(dir);
  QVL_RETURN_IF_ERROR(m->bind(dir, types, threads));
  return m;
}

namespace {

// The tokenizer, config folder and chat template of a GGUF pair from its text file's metadata (`meta`) and
// `chat_template` (tokenizer.chat_template, "" when the file has none).
Result<GgufFrontEnd> gguf_front_end(const GgufPair& pair, const GgufFile& meta, const std::string& chat_template) {
  std::string files = std::filesystem::path(pair.text).parent_path().string();
  const bool tokenizer_beside = std::filesystem::exists(std::filesystem::path(files) / "tokenizer.json");
  if (!tokenizer_beside) files = bundled_model_files();
  auto tokens = meta.get_strings("tokenizer.ggml.tokens");
  std::optional<Tokenizer> tok;
  bool from_gguf = false;
  if (!tokenizer_beside && tokens.ok()) {
    // The file's own tokenizer (llama.cpp's gpt2-style vocabulary with the Qwen2 pre-tokenizer).
    auto kind_value = meta.get_string("tokenizer.ggml.model");
    auto pre_value = meta.get_string("tokenizer.ggml.pre");
    const std::string model_kind = kind_value.ok() ? *kind_value : std::string();
    const std::string pre = pre_value.ok() ? *pre_value : std::string();
    if (model_kind != "gpt2" || pre != "qwen2")
      return Status::Error(pair.text + ": its tokenizer is tokenizer.ggml.model '" + model_kind + "', pre '" + pre +
                           "'; qvl reads the byte-level BPE of Qwen2/Qwen3 ('gpt2', 'qwen2'); put the model's "
                           "tokenizer.json beside the .gguf file");
    QVL_ASSIGN_OR_RETURN(std::vector<int64_t> token_types, meta.get_ints("tokenizer.ggml.token_type"));
    QVL_ASSIGN_OR_RETURN(std::vector<std::string> merges, meta.get_strings("tokenizer.ggml.merges"));
    QVL_ASSIGN_OR_RETURN(Tokenizer t, Tokenizer::from_gguf(*tokens, token_types, merges, pair.text));
    tok.emplace(std::move(t));
    from_gguf = true;
  } else {
    QVL_ASSIGN_OR_RETURN(Tokenizer t, Tokenizer::load(files));
    tok.emplace(std::move(t));
    if (tokens.ok()) {
      // The file's own vocabulary must be the tokenizer's: the same count and the same strings where both have
      // them. (llama.cpp pads the list to the embedding's rows with [PADn] entries.)
      const int64_t n = tok->vocab_size();
      bool same = static_cast<int64_t>(tokens->size()) >= n;
      for (int64_t id = 0; same && id < n; id += std::max<int64_t>(1, n / 97))
        same = tok->vocab_token_id((*tokens)[static_cast<size_t>(id)]) == id;
      if (same) same = tok->vocab_token_id((*tokens)[static_cast<size_t>(n - 1)]) == n - 1;
      if (!same)
        return Status::Error(pair.text + ": its vocabulary (" + std::to_string(tokens->size()) + " tokens) is not the "
                             "Qwen3-VL tokenizer's in " + files + " (" + std::to_string(tok->vocab_size()) + "); put the "
                             "model's tokenizer.json beside the .gguf file");
    }
  }
  QVL_ASSIGN_OR_RETURN(ChatTemplateKind kind, chat_template.empty() ? read_chat_template_kind(files)
                                                                      : Result<ChatTemplateKind>(chat_template_kind(chat_template)));
  return GgufFrontEnd{files, std::move(*tok), from_gguf, kind};
}

}  // namespace

Result<GgufFrontEnd> load_gguf_front_end(const std::string& path, const std::string& mmproj) {
  QVL_ASSIGN_OR_RETURN(GgufPair pair, locate_gguf_pair(path, mmproj));
  QVL_ASSIGN_OR_RETURN(GgufFile meta, GgufFile::open(pair.text));
  auto chat_template = meta.get_string("tokenizer.chat_template");
  return gguf_front_end(pair, meta, chat_template.ok() ? *chat_template : std::string());
}

// A GGUF pair (llama.cpp's layout): config and weights from the files; the tokenizer from a tokenizer.json
// beside them (checked against the file's vocabulary), else from the file's own metadata; the processor and
// generation configs from beside them, else the ones qvl ships for the Qwen3-VL family; the chat template
// from the file's tokenizer.chat_template.
Result<std::unique_ptr<Model>> Model::load_gguf(const std::string& path, const std::string& mmproj,
                                                const WeightTypes& types, int threads) {
  QVL_ASSIGN_OR_RETURN(GgufPair pair, locate_gguf_pair(path, mmproj));
  QVL_ASSIGN_OR_RETURN(std::unique_ptr<GgufCheckpoint> ck, open_gguf_checkpoint(pair, threads));
  std::unique_ptr<Model> m(new Model());
  m->dir_ = path;
  m->facts_.vision = !pair.mmproj.empty();
  QVL_ASSIGN_OR_RETURN(m->config_, ModelConfig::parse(ck->config_json, pair.text + " (its metadata as config.json)"));
  QVL_ASSIGN_OR_RETURN(GgufFrontEnd front, gguf_front_end(pair, ck->files[0], ck->chat_template));
  const std::string& files = front.files;
  m->files_dir_ = files;
  QVL_ASSIGN_OR_RETURN(m->generation_, GenerationConfig::load(files));
  const GgufFile& meta = ck->files[0];
  // Every id the tokenizer can produce must have an embedding row.
  if (front.tokenizer_from_gguf && front.tokenizer.vocab_size() > m->config_.text.vocab_size)
    return Status::Error(pair.text + ": its tokenizer has " + std::to_string(front.tokenizer.vocab_size()) +
                         " tokens, the token embedding " + std::to_string(m->config_.text.vocab_size) + " rows");
  m->tokenizer_from_gguf_ = front.tokenizer_from_gguf;
  m->tokenizer_ = std::make_unique<Tokenizer>(std::move(front.tokenizer));
  m->chat_template_ = front.chat_template;
  QVL_ASSIGN_OR_RETURN(m->image_config_, ImageProcessorConfig::load(files));
  QVL_ASSIGN_OR_RETURN(m->video_config_, load_video_config(files));
  {
    // The file's name and its general.name / general.basename (llama.cpp writes the hub repository's).
    std::string names = std::filesystem::path(pair.text).filename().string();
    for (const char* key : {"general.name", "general.basename"})
      if (auto v = meta.get_string(key); v.ok()) names += " " + *v;
    m->kind_ = detect_model_kind(ck->config_json, "", names);
  }
  m->weights_ = std::move(ck->weights);
  m->gguf_ = std::move(ck);
  QVL_RETURN_IF_ERROR(m->bind(path, types, threads));
  return m;
}

ModelFacts Model::describe(const Model& m) {
  ModelFacts f;
  f.vision = m.facts_.vision;
  for (const TensorSpec& t : expected_tensors(m.config_)) {
    if (!f.vision && t.name.find(".visual.") != std::string::npos) continue;
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    f.parameters += n;
  }
  char size[32];
  const double p = static_cast<double>(f.parameters);
  std::snprintf(size, sizeof size, p >= 1e9 ? "%.1fB" : "%.1fM", p >= 1e9 ? p / 1e9 : p / 1e6);
  f.parameter_size = size;
  f.text_weights = m.text_weight_type();
  f.vision_weights = m.vision_weight_type();
  f.quantization_level = weight_type_name(f.text_weights);
  for (char& c : f.quantization_level) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  f.format = m.gguf_ ? "gguf" : "safetensors";
  f.file_bytes = m.mapped_bytes();
  return f;
}

Status Model::bind(const std::string& dir, const WeightTypes& types, int threads) {
  Model* m = this;
  if (m->facts_.vision) {
    auto vision = bind_vision_weights(m->weights_, m->config_.vision);
    if (!vision.ok()) return vision.status().with_context(dir);
    m->vision_ = std::move(vision).value();
  }
  auto text = bind_text_weights(m->weights_, m->config_.text);
  if (!text.ok()) return text.status().with_context(dir);
  m->text_ = std::move(text).value();
  {
    // With no type asked for, convert_weights still interleaves K-quant matrices (rows of them have no
    // integer path).
    ThreadPool pool(threads > 0 ? threads : default_threads());
    // A GGUF embedding expanded at load lives in memory the checkpoint owns, not in a file mapping.
    const void* keep = nullptr;
    if (m->gguf_)
      for (const auto& b : m->gguf_->owned)
        if (static_cast<const void*>(b.get()) == m->text_.embed.data) keep = m->text_.embed.data;
    Status s = convert_weights(m->text_, m->vision_, types, pool, m->converted_, &m->kept_, keep);
    if (!s.ok()) return s.with_context(dir);
  }
  m->facts_ = describe(*m);
  if (m->text_.lm_head.data == nullptr && m->kind_ != ModelKind::kEmbedding)
    return Status::Error(dir + ": no lm_head.weight, which a " + std::string(model_kind_name(m->kind_)) +
                         " model needs (config.json says the head is not tied to the token embedding); only an "
                         "embedding model may leave it out");
  if (m->kind_ == ModelKind::kReranker) {
    // score = sigmoid((lm_head[yes] - lm_head[no]) · h), the official Qwen3VLReranker's binary linear layer.
    const int32_t yes = m->tokenizer_->vocab_token_id("yes"), no = m->tokenizer_->vocab_token_id("no");
    if (yes < 0 || no < 0)
      return Status::Error(dir + ": a reranker scores with the tokens \"yes\" and \"no\", which its tokenizer lacks");
    const int64_t H = m->config_.text.hidden_size;
    std::vector<float> a(static_cast<size_t>(H)), b(static_cast<size_t>(H));
    row_to_f32(m->text_.lm_head, yes, a.data());
    row_to_f32(m->text_.lm_head, no, b.data());
    m->rerank_row_.resize(static_cast<size_t>(H));
    for (int64_t i = 0; i < H; ++i) m->rerank_row_[static_cast<size_t>(i)] = a[static_cast<size_t>(i)] - b[static_cast<size_t>(i)];
  }
  if (m->image_config_.patch_size != m->config_.vision.patch_size ||
      m->image_config_.merge_size != m->config_.vision.spatial_merge_size ||
      m->image_config_.temporal_patch_size != m->config_.vision.temporal_patch_size)
    return Status::Error(dir + ": preprocessor_config.json patch/merge/temporal sizes disagree with config.json");
  if (m->video_config_.patch_size != m->config_.vision.patch_size ||
      m->video_config_.merge_size != m->config_.vision.spatial_merge_size ||
      m->video_config_.temporal_patch_size != m->config_.vision.temporal_patch_size)
    return Status::Error(dir + ": video_preprocessor_config.json patch/merge/temporal sizes disagree with config.json");
  return Status::Ok();
}

std::vector<std::pair<std::string, const Mat*>> Model::convertible_matrices() const {
  std::vector<std::pair<std::string, const Mat*>> out;
  // The shared enumeration takes mutable references; nothing is modified here.
  for (auto& [name, m] : qvl::convertible_matrices(const_cast<TextW&>(text_), const_cast<VisionW&>(vision_), true, true))
    out.emplace_back(name, m);
  return out;
}

void Model::inject_outlier_channels(int count, float scale) {
  for (TextLayerW& l : text_.layers)
    for (std::vector<float>* w : {&l.input_norm, &l.post_norm})
      for (int c = 0; c < count && c < static_cast<int>(w->size()); ++c) (*w)[static_cast<size_t>(c * 97) % w->size()] *= scale;
}

}  // namespace qvl
