// Which of a checkpoint repository's files qvl downloads, and whether a directory holds all that it needs.
#include "model/hub_files.h"

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
};
constexpr char kSingleWeights[] = "model.safetensors";
constexpr char kIndex[] = "model.safetensors.index.json";

bool is_shard_name(const std::string& name) {
  static const std::regex kShard(R"(model-\d+-of-\d+\.safetensors)");
  return std::regex_match(name, kShard);
}

}  // namespace

Result<std::vector<std::string>> select_needed_files(const std::vector<std::string>& repo_files,
                                                     const std::string& where) {
  const std::set<std::string> have(repo_files.begin(), repo_files.end());
  std::vector<std::string> out;
  for (const char* f : kSmallFiles) {
    if (have.count(f)) out.push_back(f);
  }
  if (!have.count("config.json")) {
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
                         "qvl reads safetensors weights (GGUF or PyTorch .bin repositories are not supported)");
  }
  return out;
}

Status check_model_dir(const std::string& dir) {
  std::error_code ec;
  std::vector<std::string> missing;
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
