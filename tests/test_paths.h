// Where the tests find golden data and the model directory's files (overridable by environment).
#pragma once

#include <cstdlib>
#include <string>

namespace qvl::test {

inline std::string data_dir() {
  const char* env = std::getenv("QVL_TEST_DATA_DIR");
  return env ? env : QVL_TEST_DATA_DIR;
}

// The checkpoint's files but the weights: config, tokenizer, chat template, processor configs.
inline std::string model_files_dir() {
  const char* env = std::getenv("QVL_MODEL_FILES_DIR");
  return env ? env : QVL_MODEL_FILES_DIR;
}

}  // namespace qvl::test
