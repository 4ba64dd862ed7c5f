// Finds the model directory `qvl serve --model M` means: a directory, or a Hugging Face hub id looked up
// in the local hub cache ($HF_HUB_CACHE, $HF_HOME/hub, ~/.cache/huggingface/hub).
#include "model/resolve.h"

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <vector>

#include "util/file.h"

namespace qvl {

namespace fs = std::filesystem;

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : "";
}

bool is_model_dir(const fs::path& dir) {
  std::error_code ec;
  return fs::is_regular_file(dir / "config.json", ec);
}

// "org/name" with no empty part and nothing that could walk out of the cache.
bool looks_like_hub_id(const std::string& s) {
  const size_t slash = s.find('/');
  if (slash == std::string::npos || slash == 0 || slash + 1 == s.size()) return false;
  if (s.find('/', slash + 1) != std::string::npos) return false;
  for (char c : s) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' || c == '/')) return false;
  }
  return s.find("..") == std::string::npos;
}

std::string trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.erase(s.begin());
  return s;
}

}  // namespace

std::string hf_hub_cache_dir() {
  if (std::string v = env("HF_HUB_CACHE"); !v.empty()) return v;
  if (std::string v = env("HUGGINGFACE_HUB_CACHE"); !v.empty()) return v;
  if (std::string v = env("HF_HOME"); !v.empty()) return v + "/hub";
  if (std::string v = env("XDG_CACHE_HOME"); !v.empty()) return v + "/huggingface/hub";
  return env("HOME") + "/.cache/huggingface/hub";
}

Result<LocatedModel> locate_model(const std::string& spec, const std::string& hub_cache) {
  std::error_code ec;
  if (spec.empty()) return Status::Error("--model is empty; give a model directory or a hub id");
  if (fs::is_directory(spec, ec)) {
    if (!is_model_dir(spec)) {
      return Status::Error("--model " + spec + ": the directory has no config.json; expected a Qwen3-VL model "
                           "directory (config.json, tokenizer.json, *.safetensors)");
    }
    fs::path canonical = fs::canonical(spec, ec);
    std::string name = (ec ? fs::path(spec) : canonical).filename().string();
    return LocatedModel{spec, name.empty() ? spec : name};
  }
  const std::string hint = "; get it with: huggingface-cli download " +
                           (looks_like_hub_id(spec) ? spec : std::string("Qwen/Qwen3-VL-2B-Instruct")) +
                           " (or pass --model DIR, or --demo for a tiny test model)";
  if (!looks_like_hub_id(spec)) return Status::Error("model '" + spec + "' not found: no such directory" + hint);

  // models--Qwen--Qwen3-VL-2B-Instruct/snapshots/<revision>, the revision named by refs/main.
  const std::string repo = "models--" + spec.substr(0, spec.find('/')) + "--" + spec.substr(spec.find('/') + 1);
  const fs::path root = fs::path(hub_cache) / repo;
  const std::string where = "model '" + spec + "' not found: not a directory, and not in the Hugging Face cache (" +
                            root.string() + ")";
  if (!fs::is_directory(root, ec)) return Status::Error(where + hint);
  std::vector<fs::path> candidates;
  if (auto rev = read_file_text((root / "refs" / "main").string(), 4096); rev.ok()) {
    candidates.push_back(root / "snapshots" / trim(*rev));
  }
  // Without refs/main (a download of a pinned revision), a single snapshot is unambiguous.
  if (candidates.empty() || !is_model_dir(candidates.front())) {
    std::vector<fs::path> snaps;
    for (const auto& e : fs::directory_iterator(root / "snapshots", ec)) {
      if (is_model_dir(e.path())) snaps.push_back(e.path());
    }
    if (snaps.size() == 1) candidates.push_back(snaps.front());
  }
  for (const fs::path& c : candidates) {
    if (is_model_dir(c)) return LocatedModel{c.string(), spec};
  }
  return Status::Error(where + ": no complete snapshot (refs/main and a snapshot with config.json)" + hint);
}

}  // namespace qvl
