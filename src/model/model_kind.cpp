// What a Qwen3-VL checkpoint is for (see model_kind.h).
#include "model/model_kind.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace qvl {

namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

// The kind a name says, if it says one ("qwen3-vl-embedding-2b", "Qwen3VLForSequenceClassification").
bool kind_in_name(const std::string& text, ModelKind& out) {
  const std::string t = lower(text);
  if (t.find("reranker") != std::string::npos || t.find("sequenceclassification") != std::string::npos) {
    out = ModelKind::kReranker;
    return true;
  }
  if (t.find("embedding") != std::string::npos) {
    out = ModelKind::kEmbedding;
    return true;
  }
  return false;
}

// The first line starting with "# " (the model card's title), skipping a YAML front matter block.
std::string card_title(const std::string& readme) {
  std::istringstream in(readme);
  std::string line;
  bool front = false;
  for (int n = 0; std::getline(in, line) && n < 400; ++n) {
    if (n == 0 && line.rfind("---", 0) == 0) {
      front = true;
      continue;
    }
    if (front) {
      if (line.rfind("---", 0) == 0) front = false;
      continue;
    }
    if (line.rfind("# ", 0) == 0) return line.substr(2);
  }
  return "";
}

std::string read_head(const std::filesystem::path& p, size_t limit) {
  std::ifstream f(p, std::ios::binary);
  if (!f) return "";
  std::string s(limit, '\0');
  f.read(s.data(), static_cast<std::streamsize>(limit));
  s.resize(static_cast<size_t>(f.gcount()));
  return s;
}

}  // namespace

const char* model_kind_name(ModelKind kind) {
  switch (kind) {
    case ModelKind::kEmbedding: return "embedding";
    case ModelKind::kReranker: return "reranker";
    default: return "chat";
  }
}

const char* model_kind_serves(ModelKind kind) {
  switch (kind) {
    case ModelKind::kEmbedding: return "embeddings (/v1/embeddings, /api/embed)";
    case ModelKind::kReranker: return "reranking (/v1/rerank)";
    default: return "chat and completions";
  }
}

ModelKind detect_model_kind(const std::string& config_json, const std::string& readme, const std::string& name) {
  ModelKind kind = ModelKind::kChat;
  auto j = nlohmann::json::parse(config_json, nullptr, false);
  if (!j.is_discarded() && j.is_object() && j.contains("architectures") && j["architectures"].is_array())
    for (const auto& a : j["architectures"])
      if (a.is_string() && kind_in_name(a.get<std::string>(), kind)) return kind;
  const std::string title = card_title(readme);
  if (!title.empty() && kind_in_name(title, kind)) return kind;
  if (kind_in_name(name, kind)) return kind;
  return ModelKind::kChat;
}

ModelKind detect_model_kind_in_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  const fs::path d(dir);
  std::string name = fs::path(dir).filename().string();
  if (name.empty()) name = fs::path(dir).parent_path().filename().string();
  return detect_model_kind(read_head(d / "config.json", 1 << 20), read_head(d / "README.md", 1 << 16), name);
}

}  // namespace qvl
