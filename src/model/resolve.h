// Finds the model directory `qvl serve --model M` means: a directory, or a Hugging Face hub id looked up
// in the local hub cache ($HF_HUB_CACHE, $HF_HOME/hub, ~/.cache/huggingface/hub).
#pragma once

#include <string>

#include "util/status.h"

namespace qvl {

struct LocatedModel {
  std::string dir;  // holds config.json
  std::string id;   // the name clients see: the hub id, or the directory's name
};

// The hub cache directory the Hugging Face tools use, from the environment.
std::string hf_hub_cache_dir();

// `spec` is a directory holding config.json, or an id such as "Qwen/Qwen3-VL-2B-Instruct" found at
// <cache>/models--Qwen--Qwen3-VL-2B-Instruct/snapshots/<refs/main>/. A model found in neither place gets one
// message saying where qvl looked and how to download it.
Result<LocatedModel> locate_model(const std::string& spec, const std::string& hub_cache = hf_hub_cache_dir());

}  // namespace qvl
