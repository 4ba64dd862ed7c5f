// Fuzz target: the retrieval request bodies — bytes -> parse_json_text (the JSON limits, then the parser) ->
// parse_embeddings_request (/v1/embeddings), parse_ollama_embed_request (/api/embed) and parse_rerank_request
// (/v1/rerank); every accepted input is then made into the conversation the model reads (embedding_messages,
// rerank_messages) and rendered by the chat template. Nothing may throw out; a refusal says why; an accepted
// request keeps its bounds and its prompts show exactly the images and videos it references.
#include <cstdint>
#include <string_view>

#include "chat/chat_format.h"
#include "engine/retrieval.h"
#include "server/api.h"
#include "server/retrieval_request.h"
#include "util/status.h"
#include "fuzz_util.h"

namespace {

using qvl::fuzz::refused;

using qvl::server::RetrievalItem;

size_t count(const std::string& s, std::string_view what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + what.size())) ++n;
  return n;
}

// A rendered prompt shows one image pad per image and one video pad per video of the conversation. User text
// may spell the pad tokens too, so the rendered count is at least the parts'.
void check_item(const RetrievalItem& item) {
  QVL_CHECK(item.images.size() == item.input.images && item.videos.size() == item.input.videos);
  QVL_CHECK(item.input.texts.size() <= qvl::server::kMaxItemParts);
  QVL_CHECK(item.images.size() + item.videos.size() <= qvl::server::kMaxItemParts);
  for (const auto& [ref, where] : item.images) QVL_CHECK(!where.empty());
  for (const auto& v : item.videos) QVL_CHECK(!v.where.empty() && v.options.max_frames > 0);
  const std::string instruction = qvl::embedding_instruction(item.input.instruction);
  QVL_CHECK(!instruction.empty());
}

void check_rendered(const std::vector<qvl::ChatMessage>& messages, size_t images, size_t videos) {
  const std::string text = qvl::render_chat(messages);
  QVL_CHECK(count(text, "<|image_pad|>") >= images);
  QVL_CHECK(count(text, "<|video_pad|>") >= videos);
  QVL_CHECK(text.size() >= 22 && text.compare(text.size() - 22, 22, "<|im_start|>assistant\n") == 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace qvl::server;
  const auto body = parse_json_text(std::string_view(reinterpret_cast<const char*>(data), size));
  if (refused(body)) return 0;
  for (bool ollama : {false, true}) {
    auto r = ollama ? parse_ollama_embed_request(*body) : parse_embeddings_request(*body);
    if (refused(r)) continue;
    QVL_CHECK(!r->inputs.empty() && r->inputs.size() <= kMaxRetrievalInputs);
    QVL_CHECK(r->dimensions >= 0);
    for (const RetrievalItem& item : r->inputs) {
      check_item(item);
      check_rendered(qvl::embedding_messages(item.input), item.images.size(), item.videos.size());
    }
  }
  if (auto r = parse_rerank_request(*body); !refused(r)) {
    QVL_CHECK(!r->documents.empty() && r->documents.size() <= kMaxRetrievalInputs);
    QVL_CHECK(r->documents.size() == r->document_values.size());
    QVL_CHECK(r->top_n == -1 || r->top_n >= 1);
    check_item(r->query);
    QVL_CHECK(r->query.input.instruction.empty());
    for (const RetrievalItem& d : r->documents) {
      check_item(d);
      check_rendered(qvl::rerank_messages(r->query.input, d.input, r->instruction), r->query.images.size() + d.images.size(),
                     r->query.videos.size() + d.videos.size());
    }
  }
  return 0;
}
