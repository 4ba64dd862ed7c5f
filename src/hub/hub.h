// Downloads a model's files from the Hugging Face hub or ModelScope into that hub's own cache layout, and finds
// a complete download there without the network: the API `qvl pull` and the model loaders use.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>

#include "util/status.h"

namespace qvl::hub {

enum class Source { kHuggingFace, kModelScope };

// Reported while files download. Called from the download threads, one call at a time.
struct Progress {
  std::string file;         // the file that last received bytes
  int64_t file_done = 0;    // its bytes on disk
  int64_t file_total = 0;   // its size
  int64_t all_done = 0;     // bytes of every needed file on disk (already cached ones included)
  int64_t all_total = 0;    // the needed files' sizes
  double bytes_per_s = 0;   // this pull's download rate
  bool finished = false;    // the last call: every file is in place
};

struct PullOptions {
  std::string repo_id;                      // "Qwen/Qwen3-VL-2B-Instruct"
  std::string revision;                     // branch, tag or commit; empty: "main" (HF), "master" (ModelScope)
  Source source = Source::kHuggingFace;
  std::string endpoint;                     // empty: $HF_ENDPOINT / $MODELSCOPE_ENDPOINT, else the public hub
  std::string token;                        // empty: $HF_TOKEN (or huggingface-cli's token file) / $MODELSCOPE_API_TOKEN
  std::string cache_dir;                    // empty: $HF_HUB_CACHE, $HF_HOME/hub, ... / $MODELSCOPE_CACHE
  std::string gguf_tag;                     // a GGUF repository's quantization ("Q4_K_M"): that file + an mmproj
  int parallel = 4;                         // files downloaded at once
  int offline = -1;                         // -1: from $HF_HUB_OFFLINE; 1: never connect, use the cache only
  std::function<void(const Progress&)> on_progress;
  std::function<void(const std::string&)> on_warning;  // e.g. "hub unreachable, using the cached snapshot"
};

// Downloads what qvl needs of the model (configs, tokenizer, chat template, safetensors weights) into the cache,
// verifying each file's size and digest, and returns the local model directory: for Hugging Face
// <cache>/models--ORG--NAME/snapshots/<commit>, for ModelScope <cache>/models/ORG/NAME. Files already cached
// are not downloaded again; partial files are resumed.
Result<std::string> pull(const PullOptions& options);

// The model directory if a complete download is in the cache; never uses the network. A ModelScope model at a
// revision other than master is never "in the cache": its layout keeps one set of files per model and no record
// of their revision, so pull() checks them against that revision's listing instead.
Result<std::string> find_cached(const PullOptions& options);

// A revision a hub and the cache can take: a branch, tag or commit hash of at most 255 characters, with no "..",
// no leading '/', no backslash, space or control character (it names files under the cache's refs/).
Status check_revision(const std::string& revision);

// A GGUF repository's quantization tag after the id: "Org/Name-GGUF:Q4_K_M" -> ("Org/Name-GGUF", "Q4_K_M"); a
// source prefix stays ("hf:Org/Name:Q8_0" -> ("hf:Org/Name", "Q8_0")); no tag: (spec, "").
std::pair<std::string, std::string> split_gguf_tag(const std::string& spec);

// "modelscope:Org/Name" (or "ms:"), "hf:Org/Name" (or "huggingface:"), "Org/Name" (Hugging Face).
Result<std::pair<Source, std::string>> parse_model_spec(const std::string& spec);

// The options with every empty field filled from the environment (what pull() and find_cached() use).
PullOptions resolve_options(const PullOptions& options);

const char* source_name(Source source);  // "Hugging Face" / "ModelScope"

}  // namespace qvl::hub
