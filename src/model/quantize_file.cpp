// Writing a loaded (converted) model as a new model directory whose weights are stored as converted, so a
// later start maps them and skips the conversion: quantized matrices as U8 rows of blocks with their type
// in the safetensors metadata, everything else copied from the checkpoint.
#include "model/quantize_file.h"

#include <filesystem>
#include <map>
#include <set>

namespace qvl {

Status write_converted_model(const Model& model, const std::string& out_dir) {
  namespace fs = std::filesystem;
  if (model.from_gguf())
    return Status::Error(model.dir() + ": a GGUF model; `qvl quantize --format qvl` writes a model directory from "
                         "safetensors weights (qvl loads the GGUF files as they are)");
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) return Status::Error(out_dir + ": cannot create: " + ec.message());
  if (fs::equivalent(out_dir, model.dir(), ec))
    return Status::Error(out_dir + ": is the model's own directory; choose another output directory");

  const SafetensorsModel& ckpt = model.checkpoint();
  std::map<std::string, const Mat*> converted;
  for (const auto& [name, m] : model.convertible_matrices()) {
    const TensorView* t = ckpt.find(name);
    // Converted: its storage differs from the checkpoint's (or it is the tied LM head's own copy).
    if (!t || m->data != static_cast<const void*>(t->data)) converted[name] = m;
  }
  std::vector<TensorToWrite> tensors;
  std::map<std::string, std::string> metadata{{"format", "pt"}, {"qvl.writer", "qvl quantize"}};
  for (const TensorView& t : ckpt.tensors()) {
    if (converted.count(t.name)) continue;
    tensors.push_back(tensor_from_memory(t.name, t.dtype, t.shape, t.data));
  }
  for (const auto& [name, m] : converted) {
    if (is_block32_quant(m->type)) {
      tensors.push_back(tensor_from_memory(name, DType::kU8,
                                           {m->rows, static_cast<int64_t>(row_bytes(m->type, m->cols))}, m->data));
      metadata[quantized_type_key(name)] =
          std::string(weight_type_name(m->type)) + (m->layout == Layout::kInterleaved8 ? "x8" : "");
    } else {
      const TensorView* t = ckpt.find(name);
      std::vector<int64_t> shape = t ? t->shape : std::vector<int64_t>{m->rows, m->cols};
      tensors.push_back(tensor_from_memory(name, weight_type_traits(m->type).dtype, shape, m->data));
    }
  }
  QVL_RETURN_IF_ERROR(write_safetensors((fs::path(out_dir) / "model.safetensors").string(), tensors, metadata));
  for (const char* f : {"config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.json",
                        "generation_config.json", "preprocessor_config.json", "video_preprocessor_config.json",
                        "README.md"}) {  // the model card: it names an embedding or reranker model (model_kind.h)
    const fs::path src = fs::path(model.dir()) / f;
    if (!fs::exists(src)) continue;
    fs::copy_file(src, fs::path(out_dir) / f, fs::copy_options::overwrite_existing, ec);
    if (ec) return Status::Error(src.string() + ": cannot copy to " + out_dir + ": " + ec.message());
  }
  return Status::Ok();
}

}  // namespace qvl
