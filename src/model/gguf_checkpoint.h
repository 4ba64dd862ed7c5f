// A Qwen3-VL checkpoint in llama.cpp's GGUF layout: the text model (architecture "qwen3vl") and the vision
// tower in its "mmproj" file (architecture "clip", projector "qwen3vl_merger"), mapped back onto the
// transformers names and shapes the rest of qvl binds (model/weights.h):
//   - config.json is rebuilt from the metadata (qwen3vl.*, clip.vision.*) and the tensors' shapes;
//   - tensors are renamed (blk.N.attn_q -> model.language_model.layers.N.self_attn.q_proj, v.blk.N.ln1 ->
//     model.visual.blocks.N.norm1, mm.0 -> merger.linear_fc1, v.deepstack.<layer> -> deepstack_merger_list.K);
//   - the patch embedding, which llama.cpp's converter splits into its two time slices
//     (v.patch_embd.weight and v.patch_embd.weight.1), is stacked back into the Conv3d kernel;
//   - every tensor is bound as a view into the mapped file: F32, F16 and BF16; Q8_0 and Q4_0 rows (GGUF's
//     blocks are qvl's own); K-quant matrices (Q4_K, Q5_K, Q6_K), which qvl's K-quant GEMM tiles multiply
//     (the loader interleaves quantized matrices by 8 rows, keeping every block's bytes); a K-quant tensor
//     that is not a matrix (the vision position embedding) is dequantized to float exactly as ggml does.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "io/gguf.h"
#include "io/safetensors.h"
#include "model/convert.h"
#include "util/status.h"

namespace qvl {

struct GgufCheckpoint {
  std::vector<GgufFile> files;                      // the text model, then the mmproj
  std::vector<std::unique_ptr<uint8_t[]>> owned;    // tensors rebuilt or dequantized at load
  std::string config_json;                          // a transformers config.json
  std::string chat_template;                        // tokenizer.chat_template, if the file has one
  SafetensorsModel weights;                         // the tensors under transformers' names
};

// The text model and mmproj files for a --model PATH: a .gguf file (its mmproj: a file beside it whose name
// contains "mmproj"), or a directory holding both; `mmproj` given (llama.cpp's --mmproj FILE) wins over what
// is beside. No vision file at all: mmproj stays empty, and the model loads as text only. An error says
// what was found.
struct GgufPair {
  std::string text, mmproj;  // mmproj "": none (a text model)
};
Result<GgufPair> locate_gguf_pair(const std::string& path, const std::string& mmproj = "");

// True for a .gguf file, or a directory with .gguf files and no config.json.
bool is_gguf_model(const std::string& path);

// Tensors rebuilt at load (the patch embedding, a K-quant position embedding) on `threads` threads (0: one
// per core).
Result<std::unique_ptr<GgufCheckpoint>> open_gguf_checkpoint(const GgufPair& pair, int threads = 0);

// llama.cpp's name for a transformers tensor name ("" for the patch embedding, which is split, and for names
// outside the layout); `deepstack` is vision_config.deepstack_visual_indexes.
std::string gguf_tensor_name(const std::string& hf, const std::vector<int64_t>& deepstack);

}  // namespace qvl
