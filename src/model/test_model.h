// Writes a complete model directory with deterministic pseudo-random weights, for tests and benchmarks.
#pragma once

#include <cstdint>
#include <string>

#include "util/status.h"

namespace qvl {

struct TestModelOptions {
  // "2b", "4b", "8b": the real shapes of Qwen3-VL-2B/4B/8B; "tiny", "tiny-4b", "tiny-8b": small widths
  // (real vocabulary) that keep what sets each size apart (tied head, q width, vision head width).
  std::string preset = "tiny";
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

// The config.json text of a preset: for "2b" the source file as it is, for the others the same JSON with
// the preset's widths (head_dim 128 everywhere, so the real M-RoPE sections stay).
Result<std::string> test_model_config_json(const std::string& preset, const std::string& model_files_dir);

// The preset names, for messages and --help.
std::string test_model_presets();
bool is_test_model_preset(const std::string& name);

}  // namespace qvl
