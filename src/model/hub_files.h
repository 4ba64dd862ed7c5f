// Which of a checkpoint repository's files qvl downloads, and whether a directory holds all that it needs.
#pragma once

#include <string>
#include <vector>

#include "util/status.h"

namespace qvl::hub {

// From the repository's file list, the files qvl uses: the configs, tokenizer, chat template and the weights
// (model.safetensors, or model.safetensors.index.json and its model-*-of-*.safetensors shards). `where` names the
// repository in the error when there are no weights.
Result<std::vector<std::string>> select_needed_files(const std::vector<std::string>& repo_files,
                                                     const std::string& where);

// OK when `dir` has config.json, tokenizer.json and the weights (every shard that the index names); else what is
// missing.
Status check_model_dir(const std::string& dir);

}  // namespace qvl::hub
