// Writing a loaded (converted) model as a new model directory whose weights are stored as converted, so a
// later start maps them and skips the conversion: quantized matrices as U8 rows of blocks with their type
// in the safetensors metadata, everything else copied from the checkpoint.
#pragma once

#include <string>

#include "model/model.h"

namespace qvl {

// Writes out_dir/model.safetensors and copies the model directory's other files (config, tokenizer,
// chat template, processor and generation configs) from model.dir().
Status write_converted_model(const Model& model, const std::string& out_dir);

}  // namespace qvl
