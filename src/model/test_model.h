// Writes a complete model directory with deterministic pseudo-random weights, for tests and benchmarks.
#pragma once

#include <cstdint>
#include <string>

#include "util/status.h"

namespace qvl {

struct TestModelOptions {
  std::string preset = "tiny";   // "tiny": small widths, real vocabulary; "2b": the real 2B shapes
  uint64_t seed = 0;
  std::string out_dir;           // created if missing; files in it are overwritten
  std::string model_files_dir;   // the real checkpoint's config.json, tokenizer.json and processor configs
  int threads = 0;               // 0: one per physical core
  bool progress = false;         // report progress on stderr
};

// Writes config.json, model.safetensors (BF16, every tensor of expected_tensors(config)) and copies of the
// tokenizer, chat template, generation and processor configs. The same preset and seed give the same
// bytes on every machine: weights come from integer hashing and exact float arithmetic only.
Status make_test_model(const TestModelOptions& options);

// The config.json text of a preset: for "2b" the source file as it is, for "tiny" the same JSON with small
// widths (vision depth 5, width 64; text 4 layers, width 128, head_dim 128 so the real M-RoPE sections stay).
Result<std::string> test_model_config_json(const std::string& preset, const std::string& model_files_dir);

}  // namespace qvl
