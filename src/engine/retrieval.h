// What Qwen3-VL-Embedding and Qwen3-VL-Reranker read, built as their official scripts build it
// (QwenLM/Qwen3-VL-Embedding: src/models/qwen3_vl_embedding.py, qwen3_vl_reranker.py), and what is made of the
// pooled hidden state (the last prompt token's, after the final norm: GenerateOptions::pooled): a normalised,
// optionally Matryoshka-truncated vector, or a relevance score.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "chat/chat_format.h"
#include "engine/generate.h"
#include "model/model.h"
#include "util/status.h"

namespace qvl {

// One embedding input, or one side (query or document) of a rerank pair. Its images and videos travel beside
// it (decoded, in order); the prompt shows the videos first, then the images, then the texts, as the
// reference does, or the text "NULL" when there is nothing.
struct RetrievalInput {
  std::vector<std::string> texts;
  size_t images = 0;
  size_t videos = 0;
  std::string instruction;  // an embedding input's own task instruction (empty: the default)
  bool empty() const { return texts.empty() && images == 0 && videos == 0; }
};

inline constexpr char kDefaultEmbedInstruction[] = "Represent the user's input.";
inline constexpr char kDefaultRerankInstruction[] =
    "Given a search query, retrieve relevant candidates that answer the query.";
inline constexpr char kRerankSystem[] =
    "Judge whether the Document meets the requirements based on the Query and the Instruct provided. Note that "
    "the answer can only be \"yes\" or \"no\".";

// The reference scripts' limits: prompts of at most 8,192 tokens (embedding; 10,240 for a reranker pair),
// images resized by qwen-vl-utils into [4·32², 1800·32²] pixels.
inline constexpr int64_t kEmbedMaxTokens = 8192, kRerankMaxTokens = 10240;
inline constexpr int64_t kRetrievalMinPixels = 4 * 32 * 32, kRetrievalMaxPixels = 1800 * 32 * 32;

// Options for a pooled pass of `model` (embedding or reranker): a float32 KV cache, the context the reference's
// maximum length,
// its images bounded as the reference bounds them (max_pixels: a lower cap where positive, a server's
// --max-pixels).
GenerateOptions retrieval_options(const Model& model, int64_t max_pixels = 0);

// The embedding model's instruction as the reference uses it: stripped of white space (Python's str.strip),
// a '.' appended unless it ends in punctuation (Unicode category P*); empty: kDefaultEmbedInstruction.
std::string embedding_instruction(std::string_view instruction);

// The embedding conversation: a system message holding the instruction, a user message holding the input.
// Rendered with add_generation_prompt (ChatOptions' default); the pooled token is the prompt's last.
std::vector<ChatMessage> embedding_messages(const RetrievalInput& input);

// The reranker conversation of one pair: the fixed system text; the user message "<Instruct>: " + instruction
// (empty: kDefaultRerankInstruction) + "<Query>:" + the query + "\n<Document>:" + the document.
std::vector<ChatMessage> rerank_messages(const RetrievalInput& query, const RetrievalInput& document,
                                         std::string_view instruction);

// The first `dims` values of a pooled hidden state, L2-normalised (dims 0: all of them). Fails when dims is
// outside [1, hidden size], saying the range.
Result<std::vector<float>> embedding_vector(std::span<const float> hidden, int64_t dims = 0);

// A reranker's relevance score in (0, 1): sigmoid(Model::rerank_row() · hidden), in double.
double rerank_score(const Model& model, std::span<const float> hidden);

}  // namespace qvl
