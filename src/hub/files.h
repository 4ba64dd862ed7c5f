// Which of a checkpoint repository's files qvl downloads, and whether a directory holds all that it needs.
#pragma once

#include <string>
#include <vector>

#include "util/status.h"

namespace qvl::hub {

// From the repository's file list, the files qvl uses: the configs, tokenizer, chat template and the weights
// (model.safetensors, or model.safetensors.index.json and its model-*-of-*.safetensors shards). `where` names the
// repository in the error when there are no weights.
// With a GGUF quantization tag ("Q4_K_M"): the text model's .gguf whose name carries the tag, one mmproj .gguf
// (the one carrying the tag, else an F16 one, else the first) and the small files present but config.json.
Result<std::vector<std::string>> select_needed_files(const std::vector<std::string>& repo_files,
                                                     const std::string& where, const std::string& gguf_tag = "");

// OK when `dir` has config.json, tokenizer.json and the weights (every shard that the index names), or with a
// GGUF tag the tagged .gguf and an mmproj; else what is missing.
Status check_model_dir(const std::string& dir, const std::string& gguf_tag = "");

// The file of a GGUF repository's text model that carries `tag` ("Q4_K_M" matches "Qwen3VL-2B-Instruct-Q4_K_M.gguf",
// case-insensitively, bounded by '-', '_' or '.'), among `files`; an error lists the tags there are.
Result<std::string> gguf_file_for_tag(const std::vector<std::string>& files, const std::string& tag, const std::string& where);

}  // namespace qvl::hub
