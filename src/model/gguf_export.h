// `qvl quantize --format gguf`: writes a model as llama.cpp's two Qwen3-VL GGUF files (model/gguf_checkpoint.h
// reads them back; other GGUF tools read them too): <name>-<type>.gguf, the text model (architecture
// "qwen3vl", gpt2-style tokenizer metadata, the chat template) and mmproj-<name>-<type>.gguf, the vision tower
// (architecture "clip", projector "qwen3vl_merger"), with the tensor names, the split patch embedding and the
// type rules of llama.cpp's converter: 1-D tensors, norms, biases and the position embedding F32; the patch
// embedding F32 (F16 for f16); the other matrices in the requested type (GgufWriteTypes).
// Q8_0/Q4_0 matrices are the blocks qvl itself computes when it quantizes at load; K-quants are tensor/kquant.h's.
#pragma once

#include <string>

#include "model/convert.h"
#include "model/model.h"
#include "util/status.h"

namespace qvl {

// The matrices' types in a written GGUF, per tower: f32, f16, bf16, q8_0, q4_0, the K-quants q4_k, q5_k, q6_k
// (every matrix), or llama.cpp's mixes q4_k_m / q5_k_m (Q4_K / Q5_K, with Q6_K for the LM head (a tied model's
// token embedding) and for the
// attn_v and ffn_down matrices of the first and last eighth of the layers and every third one between, as
// llama-quantize chooses them). A matrix whose rows are not whole blocks of its type falls back to Q8_0 (rows
// of whole 32-value blocks) or F16 (BF16 from a BF16 checkpoint).
struct GgufWriteTypes {
  std::string text = "q8_0", vision = "q8_0";
};
bool is_gguf_write_type(const std::string& name);
const char* gguf_write_type_list();  // "f32, f16, bf16, q8_0, q4_0, q4_k, q5_k, q6_k, q4_k_m, q5_k_m"

// `model` must be loaded without conversion (its float weights as stored). The tokenizer and configs beside it
// are copied too, so that qvl loads the folder as it is. Returns the text model's path.
Result<std::string> write_gguf_model(const Model& model, const GgufWriteTypes& types, const std::string& out_dir,
                                     const std::string& name);
// The same with qvl's own storage types (nullopt: q8_0).
Result<std::string> write_gguf_model(const Model& model, const WeightTypes& types, const std::string& out_dir,
                                     const std::string& name);

}  // namespace qvl
