// `qvl quantize --format gguf`: writes a model as llama.cpp's two Qwen3-VL GGUF files (model/gguf_checkpoint.h
// reads them back; other GGUF tools read them too): <name>-<type>.gguf, the text model (architecture
// "qwen3vl", gpt2-style tokenizer metadata, the chat template) and mmproj-<name>-<type>.gguf, the vision tower
// (architecture "clip", projector "qwen3vl_merger"), with the tensor names, the split patch embedding and the
// type rules of llama.cpp's converter: 1-D tensors, norms, biases and the position embedding F32; the patch
// embedding F32 (F16 for f16); the other matrices in the requested type (where a row is not whole blocks:
// BF16 from a BF16 checkpoint, else F16).
// Quantized matrices are the blocks qvl itself computes when it quantizes at load.
#pragma once

#include <string>

#include "model/convert.h"
#include "model/model.h"
#include "util/status.h"

namespace qvl {

// `model` must be loaded without conversion (its float weights as stored); `types` picks the text and vision
// matrices' types (f32, f16, bf16, q8_0, q4_0). The tokenizer and configs beside it are copied too, so that
// qvl loads the folder as it is. Returns the text model's path.
Result<std::string> write_gguf_model(const Model& model, const WeightTypes& types, const std::string& out_dir,
                                     const std::string& name);

}  // namespace qvl
