// The retrieval request bodies read into plain structs: OpenAI's POST /v1/embeddings, Ollama's POST /api/embed
// and the Jina/Cohere-shaped POST /v1/rerank (as llama-server and vLLM take it). An input is a string, or a
// multimodal object {"text", "image", "video", "instruction"} whose text, image and video may each be one value
// or a list; images and videos are references (data URIs, bare base64, files under --media-dir, allowed URLs),
// loaded later under the server's image policy.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/retrieval.h"
#include "server/image_input.h"
#include "util/status.h"

namespace qvl::server {

// One parsed input: what the prompt shows (counts and texts) and the references of its images and videos, in
// order, each with where it was in the body ("input[2].image[0]").
struct RetrievalItem {
  RetrievalInput input;
  std::vector<std::pair<std::string, std::string>> images;  // (reference, where)
  std::vector<VideoRef> videos;
};

inline constexpr size_t kMaxRetrievalInputs = 2048;  // OpenAI's limit of inputs per embeddings request
inline constexpr size_t kMaxItemParts = 64;          // texts, images or videos in one input

struct EmbeddingsRequest {
  std::string model;
  std::vector<RetrievalItem> inputs;
  std::string instruction;  // the request's "instruction": inputs without their own take it
  int64_t dimensions = 0;  // 0: all (else Matryoshka truncation to this many, renormalised)
  bool base64 = false;     // encoding_format "base64": little-endian float32 bytes, base64
};

// POST /v1/embeddings: "input" a string, a list of strings, an object or a list of objects (mixed lists are
// fine); "instruction" (qvl) the default instruction of inputs without their own; "dimensions";
// "encoding_format" "float" or "base64"; "user" ignored. Token arrays are refused (say the text instead). An
// error names the field, what it expected and what it got.
Result<EmbeddingsRequest> parse_embeddings_request(const nlohmann::ordered_json& body);

// POST /api/embed (Ollama): "input" a string or a list of strings (or qvl's objects); "dimensions";
// "truncate", "options", "keep_alive" accepted and ignored (over the context is refused, not truncated).
Result<EmbeddingsRequest> parse_ollama_embed_request(const nlohmann::ordered_json& body);

struct RerankRequest {
  std::string model;
  RetrievalItem query;
  std::vector<RetrievalItem> documents;
  std::vector<nlohmann::ordered_json> document_values;  // the documents as sent, for return_documents
  std::string instruction;                                // empty: the reranker's default
  int64_t top_n = -1;                                     // -1: all
  bool return_documents = false;
};

// POST /v1/rerank (also /rerank, /v1/reranking): "query" and "documents" (strings or objects; also Cohere's
// {"text": ...} documents), "top_n", "return_documents", "instruction" (qvl).
Result<RerankRequest> parse_rerank_request(const nlohmann::ordered_json& body);

}  // namespace qvl::server
