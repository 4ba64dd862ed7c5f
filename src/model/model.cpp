// A loaded model: configuration, tokenizer, processor settings and weights, immutable after load and
// shared read-only by every session.
#include "model/model.h"
#include "util/cpu_budget.h"

#include <filesystem>

#include <nlohmann/json.hpp>

#include "util/file.h"

namespace qvl {

Result<ChatTemplateKind> read_chat_template_kind(const std::string& dir) {
  namespace fs = std::filesystem;
  const fs::path d(dir);
  for (const char* name : {"chat_template.json", "tokenizer_config.json"}) {
    const fs::path p = d / name;
    if (!fs::exists(p)) continue;
    QVL_ASSIGN_OR_RETURN(std::string text, read_file_text(p.string(), 64 << 20));
    auto j = nlohmann::json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object())
      return Status::Error(p.string() + ": expected a JSON object, got text that does not parse as one");
    if (auto t = j.find("chat_template"); t != j.end() && t->is_string()) return chat_template_kind(t->get<std::string>());
  }
  const fs::path jinja = d / "chat_template.jinja";
  if (fs::exists(jinja)) {
    QVL_ASSIGN_OR_RETURN(std::string text, read_file_text(jinja.string(), 1 << 20));
    return chat_template_kind(text);
  }
  return ChatTemplateKind::kInstruct;
}

Result<std::unique_ptr<Model>> Model::load(const std::string& dir, const WeightTypes& types, int threads) {
  if (!std::filesystem::is_directory(dir))
    return Status::Error(dir + ": not a directory (expected a model directory with config.json, tokenizer.json "
                               "and model.safetensors)");
  std::unique_ptr<Model> m(new Model());
  m->dir_ = dir;
  QVL_ASSIGN_OR_RETURN(m->config_, ModelConfig::load(dir));
  QVL_ASSIGN_OR_RETURN(m->generation_, GenerationConfig::load(dir));
  QVL_ASSIGN_OR_RETURN(Tokenizer tok, Tokenizer::load(dir));
  m->tokenizer_ = std::make_unique<Tokenizer>(std::move(tok));
  QVL_ASSIGN_OR_RETURN(m->chat_template_, read_chat_template_kind(dir));
  QVL_ASSIGN_OR_RETURN(m->image_config_, ImageProcessorConfig::load(dir));
  QVL_ASSIGN_OR_RETURN(m->weights_, SafetensorsModel::open(dir));
  auto vision = bind_vision_weights(m->weights_, m->config_.vision);
  if (!vision.ok()) return vision.status().with_context(dir);
  m->vision_ = std::move(vision).value();
  auto text = bind_text_weights(m->weights_, m->config_.text);
  if (!text.ok()) return text.status().with_context(dir);
  m->text_ = std::move(text).value();
  if (types.text || types.vision) {
    ThreadPool pool(threads > 0 ? threads : default_threads());
    Status s = convert_weights(m->text_, m->vision_, types, pool, m->converted_, &m->kept_);
    if (!s.ok()) return s.with_context(dir);
  }
  if (m->image_config_.patch_size != m->config_.vision.patch_size ||
      m->image_config_.merge_size != m->config_.vision.spatial_merge_size ||
      m->image_config_.temporal_patch_size != m->config_.vision.temporal_patch_size)
    return Status::Error(dir + ": preprocessor_config.json patch/merge/temporal sizes disagree with config.json");
  return m;
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
