// Finds the model's small files that ship with qvl (config, generation and processor configs, chat template,
// tokenizer of Qwen3-VL-2B-Instruct: models/qwen3-vl-2b-instruct in the repository), which `--demo` and
// `make-test-model` build their generated-weight models from.
#pragma once

#include <string>

#include "util/status.h"

namespace qvl {

// The folder's name in the repository (models/<name>) and in an installed tree (share/qvl/<name>).
inline constexpr const char* kBundledModelName = "qwen3-vl-2b-instruct";

// The directory holding the shipped files, looked up beside the running executable: <exe>/../models/<name>
// (a build folder inside the repository: build/qvl), <exe>/../share/qvl/<name> (an installed tree:
// bin/qvl). The error says where it looked and what to pass instead.
Result<std::string> bundled_model_files_dir();

}  // namespace qvl
