// Which of a checkpoint repository's files qvl downloads, and whether a directory holds all that it needs.
#include "hub/files.h"

#include <algorithm>
#include <filesystem>
#include <regex>
#include <set>

#include <nlohmann/json.hpp>

#include "util/file.h"

namespace qvl::hub {

namespace fs = std::filesystem;

namespace {

// What the loader, tokenizer and chat format read; the weights are chosen separately.
const char* const kSmallFiles[] = {
    "config.json",           "generation_config.json", "preprocessor_config.json", "video_preprocessor_config.json",
    "chat_template.json",    "chat_template.jinja",    "tokenizer.json",           "tokenizer_config.json",
    "README.md",  // the model card: its title tells an embedding or reranker checkpoint (model/model_kind.h)
};
constexpr char kSingleWeights[] = "model.safetensors";
constexpr char kIndex[] = "model.safetensors.index.json";

bool is_shard_name(const std::string& name) {
  static const std::regex kShard(R"(model-\d+-of-\d+\.safetensors)");
  return std::regex_match(name, kShard);
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}
bool is_gguf(const std::string& name) { return name.size() > 5 && lower(name.substr(name.size() - 5)) == ".gguf"; }
bool is_mmproj(const std::string& name) { return lower(name).find("mmproj") != std::string::npos; }

// Whether `name` carries `tag` as a whole word: bounded by the start, '-', '_', '.' or the end.
bool carries(const std::string& name, const std::string& tag) {
  const std::string n = lower(fs::path(name).filename().string()), t = lower(tag);
  for (size_t at = n.find(t); at != std::string::npos; at = n.find(t, at + 1)) {
    const bool left = at == 0 || n[at - 1] == '-' || n[at - 1] == '_' || n[at - 1] == '.';
    const size_t end = at + t.size();
    const bool right = end == n.size() || n[end] == '-' || n[end] == '_' || n[end] == '.';
    if (left && right) return true;
  }
  return false;
}

}  // namespace

Result<std::string> gguf_file_for_tag(const std::vector<std::string>& files, const std::string& tag, const std::string& where) {
  std::vector<std::string> text, hits;
  for (const std::string& f : files)
    if (is_gguf(f) && !is_mmproj(f)) text.push_back(f);
  for (const std::string& f : text)
    if (carries(f, tag)) hits.push_back(f);
  if (hits.size() == 1) return hits[0];
  std::string list;
  for (const std::string& f : text) list += (list.empty() ? "" : ", ") + fs::path(f).filename().string();
  if (hits.empty())
    return Status::Error(where + ": no GGUF text model carries the tag '" + tag + "'; it has " + (list.empty() ? "none" : list));
  return Status::Error(where + ": several GGUF files carry the tag '" + tag + "' (" + list + "); use a longer tag");
}

Result<std::vector<std::string>> select_needed_files(const std::vector<std::string>& repo_files,
                                                     const std::string& where, const std::string& gguf_tag) {
  const std::set<std::string> have(repo_files.begin(), repo_files.end());
  std::vector<std::string> out;
  if (!gguf_tag.empty()) {
    QVL_ASSIGN_OR_RETURN(std::string text, gguf_file_for_tag(repo_files, gguf_tag, where));
    std::vector<std::string> mm;
    for (const std::string& f : repo_files)
      if (is_gguf(f) && is_mmproj(f)) mm.push_back(f);
    std::sort(mm.begin(), mm.end());
    if (mm.empty()) return Status::Error(where + ": the repository has no mmproj .gguf (the vision tower); qvl needs it");
    std::string pick = mm[0];
    for (const std::string& f : mm) if (carries(f, "f16")) { pick = f; break; }
    for (const std::string& f : mm) if (carries(f, gguf_tag)) { pick = f; break; }
    for (const char* f : kSmallFiles)
      if (have.count(f) && std::string(f) != "config.json") out.push_back(f);
    out.push_back(text);
    out.push_back(pick);
    return out;
  }
  for (const char* f : kSmallFiles) {
    if (have.count(f)) out.push_back(f);
  }
  if (!have.count("config.json")) {
    if (std::any_of(repo_files.begin(), repo_files.end(), is_gguf))
      return Status::Error(where + ": a GGUF repository; give the quantization to load after its id, as in ORG/NAME:Q4_K_M");
    return Status::Error(where + ": the repository has no config.json; expected a Hugging Face checkpoint of "
                         "Qwen3-VL (config.json, tokenizer.json, *.safetensors)");
  }
  // transformers prefers the single file when a repository has both.
  if (have.count(kSingleWeights)) {
    out.push_back(kSingleWeights);
  } else if (have.count(kIndex)) {
    out.push_back(kIndex);
    // The shards are taken from the listing so their sizes are known before the index is read; check_model_dir
    // then confirms that every shard the index names is present.
    for (const std::string& f : repo_files) {
      if (is_shard_name(f)) out.push_back(f);
    }
  } else {
    return Status::Error(where + ": the repository has neither model.safetensors nor model.safetensors.index.json; "
                         "qvl reads safetensors weights, or GGUF given its quantization tag (ORG/NAME:Q4_K_M); PyTorch .bin "
                         "repositories are not supported");
  }
  return out;
}

Status check_model_dir(const std::string& dir, const std::string& gguf_tag) {
  std::error_code ec;
  std::vector<std::string> missing;
  if (!gguf_tag.empty()) {
    std::vector<std::string> files;
    bool mmproj = false;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      files.push_back(e.path().filename().string());
      mmproj = mmproj || (is_gguf(files.back()) && is_mmproj(files.back()));
    }
    if (ec) return Status::Error(dir + ": cannot list: " + ec.message());
    auto text = gguf_file_for_tag(files, gguf_tag, dir);
    if (!text.ok()) return text.status();
    if (!mmproj) return Status::Error(dir + ": incomplete GGUF model, missing its mmproj .gguf");
    return Status::Ok();
  }
  for (const char* f : {"config.json", "tokenizer.json"}) {
    if (!fs::is_regular_file(fs::path(dir) / f, ec)) missing.push_back(f);
  }
  if (!fs::is_regular_file(fs::path(dir) / kSingleWeights, ec)) {
    const fs::path index = fs::path(dir) / kIndex;
    if (!fs::is_regular_file(index, ec)) {
      missing.push_back(std::string(kSingleWeights) + " (or " + kIndex + ")");
    } else {
      auto text = read_file_text(index.string(), 64 << 20);
      if (!text.ok()) return text.status();
      std::set<std::string> shards;
      try {
        const auto j = nlohmann::json::parse(*text);
        for (const auto& [name, file] : j.at("weight_map").items()) shards.insert(file.get<std::string>());
      } catch (const std::exception& e) {
        return Status::Error(index.string() + ": not a safetensors index (" + e.what() +
                             "); expected {\"weight_map\": {tensor: file}}");
      }
      for (const std::string& s : shards) {
        if (s.find("..") != std::string::npos || s.find('/') != std::string::npos) {
          return Status::Error(index.string() + ": shard name '" + s + "' leaves the model directory");
        }
        if (!fs::is_regular_file(fs::path(dir) / s, ec)) missing.push_back(s);
      }
    }
  }
  if (missing.empty()) return Status::Ok();
  std::string list;
  for (const std::string& m : missing) list += (list.empty() ? "" : ", ") + m;
  return Status::Error(dir + ": incomplete model directory, missing " + list);
}

}  // namespace qvl::hub
