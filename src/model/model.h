// A loaded model: configuration, tokenizer, processor settings and weights, immutable after load and
// shared read-only by every session.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "kernels/attention.h"
#include "model/convert.h"
#include "model/config.h"
#include "model/generation_config.h"
#include "model/gguf_checkpoint.h"
#include "model/model_kind.h"
#include "chat/chat_format.h"
#include "model/image_processor.h"
#include "model/video_processor.h"
#include "model/weights.h"
#include "tokenizer/tokenizer.h"

namespace qvl {

// Receives named intermediates (Hugging Face module paths, e.g. "model.visual.blocks.3") for debugging.
using DumpFn = std::function<void(const std::string& name, const float* data, const std::vector<int64_t>& shape)>;

// The checkpoint's chat template, where transformers looks for it: chat_template.json's "chat_template",
// tokenizer_config.json's, chat_template.jinja. None: the Instruct template.
Result<ChatTemplateKind> read_chat_template_kind(const std::string& dir);

// A GGUF model's small parts, read as Model::load reads them but without its weights (qvl tokenize, qvl
// preprocess): the folder its config files come from (beside the .gguf when a tokenizer.json is there, else the
// files qvl ships), its tokenizer (that tokenizer.json, checked against the file's vocabulary, else the file's
// own metadata) and its chat template kind (the file's tokenizer.chat_template, else the folder's).
struct GgufFrontEnd {
  std::string files;
  Tokenizer tokenizer;
  bool tokenizer_from_gguf = false;
  ChatTemplateKind chat_template = ChatTemplateKind::kInstruct;
};
Result<GgufFrontEnd> load_gguf_front_end(const std::string& path, const std::string& mmproj = "");

// What the loaded model is, computed once at load: every endpoint that describes the model (/health,
// /v1/models, /api/tags, /api/show, /metrics) and `qvl bench` read these, so they cannot disagree.
struct ModelFacts {
  int64_t parameters = 0;          // the weights of config.json's shapes (the vision tower's only when loaded)
  std::string parameter_size;      // "2.13B", "21.0M" (Ollama's parameter_size)
  WeightType text_weights = WeightType::kF32;    // the storage type of the text decoder's matrices
  WeightType vision_weights = WeightType::kF32;  // of the vision tower's (kF32 with no vision tower)
  std::string quantization_level;  // the text weights' type as Ollama names it: "Q8_0", "Q4_K", "BF16"
  std::string format;              // "safetensors" or "gguf"
  uint64_t file_bytes = 0;         // the model's weight files (Ollama's size)
  bool vision = true;              // false: a text model without its vision file (images are refused)
};

class Model;
// The refusal of images or videos by a model without its vision tower, saying what to load instead.
Status no_vision_error(const Model& model, size_t images, size_t videos);

class Model {
 public:
  // Loads a model directory: config.json, generation_config.json, tokenizer.json, preprocessor_config.json
  // and the safetensors
  // weights (single file or sharded), mapped read-only; matrices are converted to `types` where given
  // (quantized at load, using `threads` threads; 0 = one per physical core).
  // `dir` may also be a GGUF model (a .gguf file with its mmproj beside it, or a directory of both:
  // model/gguf_checkpoint.h).
  // `mmproj`: a GGUF model's vision file, where it is not beside the text file (llama.cpp's --mmproj; Ollama's
  // store names files by digest). A GGUF with no vision file loads as a text model (has_vision() false).
  static Result<std::unique_ptr<Model>> load(const std::string& dir, const WeightTypes& types = {}, int threads = 0,
                                             const std::string& mmproj = "");

  const std::string& dir() const { return dir_; }
  // Where the tokenizer, chat template and processor configs were read (dir() for a model directory; beside
  // a GGUF file, or the shipped files).
  const std::string& tokenizer_dir() const { return files_dir_; }
  const ModelConfig& config() const { return config_; }
  const GenerationConfig& generation() const { return generation_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  // True when the tokenizer was built from a GGUF's metadata (no tokenizer.json beside the file).
  bool tokenizer_from_gguf() const { return tokenizer_from_gguf_; }
  bool from_gguf() const { return gguf_ != nullptr; }
  // Which chat template the checkpoint ships (chat_template.json, chat_template.jinja or tokenizer_config.json):
  // Instruct, or Thinking (reasoning in a <think> block the generation prompt opens).
  ChatTemplateKind chat_template() const { return chat_template_; }
  const ImageProcessorConfig& image_config() const { return image_config_; }
  const VideoProcessorConfig& video_config() const { return video_config_; }
  const ModelFacts& facts() const { return facts_; }
  // Chat, embedding or reranker (model/model_kind.h), read at load.
  ModelKind kind() const { return kind_; }
  // A reranker's scoring row: lm_head["yes"] - lm_head["no"] ([hidden], float32); empty for other kinds. The
  // score of a pair is sigmoid(row · the last token's normed hidden state).
  const std::vector<float>& rerank_row() const { return rerank_row_; }
  // False for a text GGUF loaded without a vision (mmproj) file: requests with images or videos are refused.
  bool has_vision() const { return facts_.vision; }
  const VisionW& vision() const { return vision_; }
  // The vision tower's attention arithmetic (--vision-attention; kernels/attention.h): f32 unless set, before
  // the model is shared.
  AttentionPrecision vision_attention() const { return vision_attention_; }
  void set_vision_attention(AttentionPrecision p) { vision_attention_ = p; }
  const TextW& text() const { return text_; }
  // The storage types in use (of a representative matrix).
  WeightType text_weight_type() const { return text_.layers.empty() ? WeightType::kF32 : text_.layers[0].q.type; }
  WeightType vision_weight_type() const { return vision_.blocks.empty() ? WeightType::kF32 : vision_.blocks[0].qkv.w.type; }
  uint64_t mapped_bytes() const { return weights_.mapped_bytes(); }
  const SafetensorsModel& checkpoint() const { return weights_; }
  // The matrices a quantized type was asked for but that kept their stored type (their width is not a
  // multiple of the 32-value block), by tensor name.
  const std::vector<std::string>& kept_matrices() const { return kept_; }
  // The matrices that may differ from the checkpoint (converted at load), by tensor name.
  std::vector<std::pair<std::string, const Mat*>> convertible_matrices() const;

  // Diagnostics for the accuracy stress test only: multiplies `count` channels of every RMSNorm weight of
  // the text decoder by `scale`, creating the large-magnitude activation channels of trained checkpoints.
  void inject_outlier_channels(int count, float scale);

 private:
  AttentionPrecision vision_attention_ = AttentionPrecision::kF32;
  Model() = default;
  static Result<std::unique_ptr<Model>> load_gguf(const std::string& path, const std::string& mmproj,
                                                  const WeightTypes& types, int threads);
  // Binds the weights to the config and converts them to `types` (both load paths).
  Status bind(const std::string& where, const WeightTypes& types, int threads);
  static ModelFacts describe(const Model& m);
  std::string dir_;
  std::string files_dir_;
  ModelConfig config_;
  GenerationConfig generation_;
  std::unique_ptr<Tokenizer> tokenizer_;
  ChatTemplateKind chat_template_ = ChatTemplateKind::kInstruct;
  ImageProcessorConfig image_config_;
  bool tokenizer_from_gguf_ = false;
  VideoProcessorConfig video_config_;
  SafetensorsModel weights_;
  VisionW vision_;
  TextW text_;
  WeightArena converted_;  // matrices converted at load
  std::vector<std::string> kept_;  // matrices left in their stored type (width not a multiple of 32)
  std::unique_ptr<GgufCheckpoint> gguf_;  // a GGUF model's files and rebuilt tensors (weights_ views them)
  ModelFacts facts_;
  ModelKind kind_ = ModelKind::kChat;
  std::vector<float> rerank_row_;  // [hidden]
};

}  // namespace qvl
