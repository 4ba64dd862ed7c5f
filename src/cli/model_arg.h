// What every command does with its --model argument: a directory as it is, a hub id from the hub's cache or
// downloaded into it with a progress bar on stderr.
#pragma once

#include <string>

#include "util/status.h"

namespace qvl::cli {

// The model directory `spec` names, a hub id at `revision` (empty: the hub's default branch). `download` false: a
// hub id must already be in the cache (commands that read only the tokenizer and configs do not fetch gigabytes
// of weights).
Result<std::string> find_model_dir(const std::string& command, const std::string& spec, bool download = true,
                                   const std::string& revision = "");

}  // namespace qvl::cli
