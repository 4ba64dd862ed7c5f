// Finds the model directory a `--model M` argument means: a directory, or a hub id in the hub's cache or
// downloaded into it.
#include "hub/resolve.h"

#include "model/gguf_checkpoint.h"
#include "hub/files.h"

#include <filesystem>

namespace qvl {

namespace fs = std::filesystem;

namespace {

bool is_model_dir(const fs::path& dir) {
  std::error_code ec;
  return fs::is_regular_file(dir / "config.json", ec);
}

}  // namespace

Result<LocatedModel> resolve_model(const std::string& spec, const ResolveOptions& options) {
  std::error_code ec;
  if (spec.empty()) return Status::Error("--model is empty; give a model directory or a hub id");
  if (!options.revision.empty()) QVL_RETURN_IF_ERROR(hub::check_revision(options.revision).with_context("--revision"));
  // A revision names a hub commit: a local path has none, and a silent "ignored" would run other weights than
  // the ones pinned.
  auto local = [&](Result<LocatedModel> m) -> Result<LocatedModel> {
    if (m.ok() && !options.revision.empty())
      return Status::Error("--revision " + options.revision + " is for a hub id, but --model " + spec +
                           " is a local path; drop --revision, or give the hub id");
    return m;
  };
  if (is_gguf_model(spec)) {  // llama.cpp's files: a .gguf (its mmproj beside it) or a folder of both
    const fs::path p(spec);
    return local(LocatedModel{spec, fs::is_directory(p, ec) ? p.filename().string() : p.stem().string()});
  }
  if (fs::is_directory(spec, ec)) {
    if (!is_model_dir(spec)) {
      return Status::Error("--model " + spec + ": the directory has no config.json; expected a Qwen3-VL model "
                           "directory (config.json, tokenizer.json, *.safetensors)");
    }
    fs::path canonical = fs::canonical(spec, ec);
    std::string name = (ec ? fs::path(spec) : canonical).filename().string();
    return local(LocatedModel{spec, name.empty() ? spec : name});
  }
  // What can only be a local path is never looked up on a hub: an existing file that is not a .gguf, a path
  // written as one (/x, ./x, ../x, ~/x) and a missing .gguf file.
  if (fs::exists(spec, ec)) {
    return Status::Error("--model " + spec + ": is a file, not a model; expected a Qwen3-VL model directory "
                         "(config.json, tokenizer.json, *.safetensors), a .gguf file or a folder of .gguf files");
  }
  if (spec.starts_with("/") || spec.starts_with("./") || spec.starts_with("../") || spec.starts_with("~") ||
      spec == "." || spec == ".." || (spec.ends_with(".gguf") && spec.find(':') == std::string::npos)) {
    return Status::Error("--model " + spec + ": no such file or directory; give the path of a model directory or "
                         "a .gguf file, or a hub id such as Qwen/Qwen3-VL-2B-Instruct");
  }
  // A GGUF repository's quantization tag: ORG/NAME:Q4_K_M (after the id, so hf:/modelscope: prefixes stay).
  const std::pair<std::string, std::string> split = hub::split_gguf_tag(spec);
  const std::string id_spec = split.first, tag = split.second;  // named copies: lambdas below capture them
  auto parsed = hub::parse_model_spec(id_spec);
  if (!parsed.ok()) {
    return Status::Error("model '" + spec + "' not found: no such directory, and not a hub id (ORG/NAME such as "
                         "Qwen/Qwen3-VL-2B-Instruct, or modelscope:ORG/NAME); pass --model DIR (qvl serve --demo serves a tiny "
                         "test model)");
  }
  hub::PullOptions pull;
  pull.source = parsed->first;
  pull.repo_id = parsed->second;
  pull.revision = options.revision;
  pull.cache_dir = options.hub_cache;
  pull.on_progress = options.on_progress;
  pull.on_warning = options.on_warning;
  pull.gguf_tag = tag;
  const std::string id = parsed->second + (tag.empty() ? "" : ":" + tag);
  // With a tag, the model is the tagged .gguf in the snapshot (its mmproj beside it).
  auto located = [&](const std::string& dir) -> Result<LocatedModel> {
    if (tag.empty()) return LocatedModel{dir, id};
    std::vector<std::string> files;
    std::error_code e;
    for (const auto& f : fs::directory_iterator(dir, e)) files.push_back(f.path().filename().string());
    QVL_ASSIGN_OR_RETURN(std::string file, hub::gguf_file_for_tag(files, tag, dir));
    return LocatedModel{(fs::path(dir) / file).string(), id};
  };
  // A complete snapshot in the cache is used as it is, without the network (`qvl pull` updates it).
  auto cached = hub::find_cached(pull);
  if (cached.ok()) return located(*cached);
  if (!options.download) {
    return Status::Error("model '" + spec + "' not found: " + cached.status().message() + "; download it with: qvl pull " +
                         spec + (options.revision.empty() ? "" : " --revision " + options.revision));
  }
  auto dir = hub::pull(pull);
  if (!dir.ok()) return dir.status();
  return located(*dir);
}

}  // namespace qvl
