// generation_config.json as plain values: what `model.generate()` would use when a request says nothing.
#pragma once

#include <string>

#include "util/status.h"

namespace qvl {

// The keys transformers' GenerationConfig reads for sampling, with its defaults for keys the file lacks
// (do_sample false, temperature 1, top_k 50, top_p 1, no min_p, repetition_penalty 1); null turns a warper
// off (top_k 0, top_p 1, min_p 0, temperature and repetition_penalty 1). No file: Qwen3-VL-2B-Instruct's
// published values, which the file normally holds.
struct GenerationConfig {
  bool do_sample = true;
  double temperature = 0.7;
  double top_k = 20;
  double top_p = 0.8;
  double min_p = 0.0;
  double repetition_penalty = 1.0;

  // Reads `model_dir`/generation_config.json; a key of the wrong type is an error naming the file and key.
  static Result<GenerationConfig> load(const std::string& model_dir);
};

}  // namespace qvl
