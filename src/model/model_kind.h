// What a Qwen3-VL checkpoint is for: a chat model (generation), Qwen3-VL-Embedding (a vector per input, the
// last token's normed hidden state) or Qwen3-VL-Reranker (a relevance score per query/document pair from the
// "yes" and "no" rows of the LM head). All three share config.json's architecture, so the kind is read from
// what sets them apart on the hub.
#pragma once

#include <string>

#include "util/status.h"

namespace qvl {

enum class ModelKind { kChat, kEmbedding, kReranker };

// "chat", "embedding", "reranker".
const char* model_kind_name(ModelKind kind);
// What a kind of model answers, for errors: "chat and completions", "embeddings", "reranking".
const char* model_kind_serves(ModelKind kind);

// The kind of a checkpoint, from the first of these that names one: config.json's "architectures" (a class
// name containing "Embedding", or "Reranker" / "SequenceClassification"), the model card's title (README.md's
// first "# " heading, as the hub's "# Qwen3-VL-Embedding-2B"), then `name` (the directory, GGUF file or GGUF
// general.name: "Qwen3-VL-Reranker-2B-Q8_0.gguf"). Otherwise a chat model.
ModelKind detect_model_kind(const std::string& config_json, const std::string& readme, const std::string& name);

// The same for a model directory (config.json, README.md and the directory's name).
ModelKind detect_model_kind_in_dir(const std::string& dir);

}  // namespace qvl
