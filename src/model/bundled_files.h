// The model's small files that ship with qvl (config, generation and processor configs, chat template,
// tokenizer of Qwen3-VL-2B-Instruct: models/qwen3-vl-2b-instruct in the repository), built into the
// executable (util/builtin_files.h): `--demo` and `make-test-model` build their generated-weight models from
// them, and a GGUF file with no tokenizer or processor configs beside it reads them.
#pragma once

#include <string>

namespace qvl {

// The folder's name in the repository (models/<name>).
inline constexpr const char* kBundledModelName = "qwen3-vl-2b-instruct";

// The pseudo-directory the model-file loaders read them from: "builtin:qwen3-vl-2b-instruct".
std::string bundled_model_files();

}  // namespace qvl
