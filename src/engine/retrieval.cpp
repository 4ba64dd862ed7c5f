// Qwen3-VL-Embedding and Qwen3-VL-Reranker prompts and outputs (see retrieval.h).
#include "engine/retrieval.h"

#include <algorithm>
#include <cmath>

#include "tokenizer/unicode.h"

namespace qvl {

namespace {

// Python's str.isspace: the White_Space property plus the separators U+001C..U+001F.
bool python_space(char32_t cp) { return unicode::is_whitespace(cp) || (cp >= 0x1C && cp <= 0x1F); }

ContentPart text_part(std::string text) {
  ContentPart p;
  p.kind = ContentPart::Kind::kText;
  p.text = std::move(text);
  return p;
}

// The reference's content order: videos, images, texts; "NULL" for an empty input.
void append_input(std::vector<ContentPart>& parts, const RetrievalInput& in) {
  if (in.empty()) {
    parts.push_back(text_part("NULL"));
    return;
  }
  for (size_t i = 0; i < in.videos; ++i) parts.push_back(ContentPart{ContentPart::Kind::kVideo, ""});
  for (size_t i = 0; i < in.images; ++i) parts.push_back(ContentPart{ContentPart::Kind::kImage, ""});
  for (const std::string& t : in.texts) parts.push_back(text_part(t));
}

ChatMessage parts_message(std::string role, std::vector<ContentPart> parts) {
  ChatMessage m;
  m.role = std::move(role);
  m.content_is_string = false;
  m.content_parts = std::move(parts);
  return m;
}

}  // namespace

GenerateOptions retrieval_options(const Model& model, int64_t max_pixels) {
  GenerateOptions o;
  o.pooled = true;
  o.max_tokens = 0;
  o.context = model.kind() == ModelKind::kReranker ? kRerankMaxTokens : kEmbedMaxTokens;
  o.context = std::min<int64_t>(o.context, model.config().text.max_position_embeddings);
  o.image.max_pixels = max_pixels > 0 ? std::min(max_pixels, kRetrievalMaxPixels) : kRetrievalMaxPixels;
  o.image.min_pixels = std::min(kRetrievalMinPixels, o.image.max_pixels);
  o.image.pil_resize = true;  // qwen-vl-utils resizes with Pillow
  o.chat.kind = model.chat_template();
  // The prompt's keys and values at full precision: the cache lives for one pass only, and f16 rounding would
  // move the pooled vector by ~1e-4.
  o.kv_type = KVType::kF32;
  return o;
}

std::string embedding_instruction(std::string_view instruction) {
  // Strip (by code points, as Python does).
  std::vector<std::pair<size_t, int>> cps;  // byte offset, length
  for (size_t i = 0; i < instruction.size();) {
    int len = 1;
    unicode::decode_utf8(instruction, i, &len);
    cps.emplace_back(i, len);
    i += static_cast<size_t>(len);
  }
  size_t b = 0, e = cps.size();
  auto cp_at = [&](size_t k) {
    int len = 1;
    return unicode::decode_utf8(instruction, cps[k].first, &len);
  };
  while (b < e && python_space(cp_at(b))) ++b;
  while (e > b && python_space(cp_at(e - 1))) --e;
  if (b == e) return kDefaultEmbedInstruction;
  std::string out(instruction.substr(cps[b].first, cps[e - 1].first + static_cast<size_t>(cps[e - 1].second) - cps[b].first));
  if (!unicode::is_punctuation(cp_at(e - 1))) out += '.';
  return out;
}

std::vector<ChatMessage> embedding_messages(const RetrievalInput& input) {
  std::vector<ContentPart> user;
  append_input(user, input);
  return {parts_message("system", {text_part(embedding_instruction(input.instruction))}),
          parts_message("user", std::move(user))};
}

std::vector<ChatMessage> rerank_messages(const RetrievalInput& query, const RetrievalInput& document,
                                         std::string_view instruction) {
  std::vector<ContentPart> user;
  user.push_back(text_part("<Instruct>: " + (instruction.empty() ? std::string(kDefaultRerankInstruction)
                                                                  : std::string(instruction))));
  user.push_back(text_part("<Query>:"));
  append_input(user, query);
  user.push_back(text_part("\n<Document>:"));
  append_input(user, document);
  return {parts_message("system", {text_part(kRerankSystem)}), parts_message("user", std::move(user))};
}

Result<std::vector<float>> embedding_vector(std::span<const float> hidden, int64_t dims) {
  const int64_t H = static_cast<int64_t>(hidden.size());
  if (dims == 0) dims = H;
  if (dims < 1 || dims > H)
    return Status::Error("dimensions " + std::to_string(dims) + " is outside the model's range: expected 1 to " +
                         std::to_string(H) + " (the first values of the embedding, renormalised)");
  double sum = 0;
  for (int64_t i = 0; i < dims; ++i) sum += static_cast<double>(hidden[static_cast<size_t>(i)]) * hidden[static_cast<size_t>(i)];
  // F.normalize: x / max(||x||, 1e-12).
  const double norm = std::max(std::sqrt(sum), 1e-12);
  std::vector<float> out(static_cast<size_t>(dims));
  for (int64_t i = 0; i < dims; ++i) out[static_cast<size_t>(i)] = static_cast<float>(hidden[static_cast<size_t>(i)] / norm);
  return out;
}

double rerank_score(const Model& model, std::span<const float> hidden) {
  const std::vector<float>& row = model.rerank_row();
  double dot = 0;
  for (size_t i = 0; i < row.size() && i < hidden.size(); ++i) dot += static_cast<double>(row[i]) * hidden[i];
  return 1.0 / (1.0 + std::exp(-dot));
}

}  // namespace qvl
