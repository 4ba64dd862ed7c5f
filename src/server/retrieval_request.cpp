// Retrieval request bodies (see retrieval_request.h).
#include "server/retrieval_request.h"

namespace qvl::server {

namespace {

using json = nlohmann::ordered_json;

std::string type_name(const json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "an array";
  return "an object";
}

// One value or a list of strings, into out.
Status read_strings(const json& v, const std::string& where, std::vector<std::string>& out) {
  if (v.is_null()) return Status::Ok();
  if (v.is_string()) {
    out.push_back(v.get<std::string>());
    return Status::Ok();
  }
  if (!v.is_array())
    return Status::Error(where + ": expected a string or a list of strings, got " + type_name(v));
  if (v.size() > kMaxItemParts)
    return Status::Error(where + ": " + std::to_string(v.size()) + " values; at most " + std::to_string(kMaxItemParts));
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_string())
      return Status::Error(where + "[" + std::to_string(i) + "]: expected a string, got " + type_name(v[i]));
    out.push_back(v[i].get<std::string>());
  }
  return Status::Ok();
}

// A string, or {"text", "image", "video", "instruction"} (also "image_url" for "image").
Status read_item(const json& v, const std::string& where, bool allow_instruction, RetrievalItem& out) {
  if (v.is_string()) {
    out.input.texts.push_back(v.get<std::string>());
    return Status::Ok();
  }
  if (!v.is_object())
    return Status::Error(where + ": expected a string or an object {\"text\", \"image\", \"video\", "
                                 "\"instruction\"}, got " + type_name(v));
  for (const auto& [key, value] : v.items()) {
    if (key != "text" && key != "image" && key != "image_url" && key != "video" && key != "instruction")
      return Status::Error(where + "." + key + ": unknown field; an input object has text, image, video and "
                                               "instruction");
  }
  QVL_RETURN_IF_ERROR(read_strings(v.value("text", json()), where + ".text", out.input.texts));
  std::vector<std::string> images, videos;
  QVL_RETURN_IF_ERROR(read_strings(v.value("image", json()), where + ".image", images));
  if (v.contains("image_url")) {
    const json& u = v["image_url"];
    if (u.is_object() && u.contains("url")) QVL_RETURN_IF_ERROR(read_strings(u["url"], where + ".image_url.url", images));
    else QVL_RETURN_IF_ERROR(read_strings(u, where + ".image_url", images));
  }
  QVL_RETURN_IF_ERROR(read_strings(v.value("video", json()), where + ".video", videos));
  if (images.size() + videos.size() > kMaxItemParts)
    return Status::Error(where + ": " + std::to_string(images.size() + videos.size()) + " images and videos; at most " +
                         std::to_string(kMaxItemParts));
  for (size_t i = 0; i < images.size(); ++i)
    out.images.emplace_back(std::move(images[i]), where + ".image[" + std::to_string(i) + "]");
  for (size_t i = 0; i < videos.size(); ++i) {
    VideoRef r;
    r.ref = std::move(videos[i]);
    r.where = where + ".video[" + std::to_string(i) + "]";
    r.options.fps = 1;         // the reference's FPS
    r.options.max_frames = 64;  // and MAX_FRAMES
    r.options.qwen_vl_utils = true;  // sampled and sized as the reference reads a video file
    out.videos.push_back(std::move(r));
  }
  out.input.images = out.images.size();
  out.input.videos = out.videos.size();
  if (v.contains("instruction") && !v["instruction"].is_null()) {
    if (!allow_instruction)
      return Status::Error(where + ".instruction: a rerank query or document has no instruction of its own; give "
                                   "\"instruction\" beside \"query\"");
    if (!v["instruction"].is_string())
      return Status::Error(where + ".instruction: expected a string, got " + type_name(v["instruction"]));
    out.input.instruction = v["instruction"].get<std::string>();
  }
  return Status::Ok();
}

Status read_optional_string(const json& body, const char* key, std::string& out) {
  if (!body.contains(key) || body[key].is_null()) return Status::Ok();
  if (!body[key].is_string()) return Status::Error(std::string(key) + ": expected a string, got " + type_name(body[key]));
  out = body[key].get<std::string>();
  return Status::Ok();
}

Status read_dimensions(const json& body, int64_t& out) {
  if (!body.contains("dimensions") || body["dimensions"].is_null()) return Status::Ok();
  const json& d = body["dimensions"];
  if (!d.is_number_integer() || d.get<int64_t>() < 1)
    return Status::Error("dimensions: expected a positive integer, got " +
                         (d.is_number() ? d.dump() : type_name(d)));
  out = d.get<int64_t>();
  return Status::Ok();
}

// "input": one item or a list of items.
Status read_inputs(const json& body, EmbeddingsRequest& r) {
  if (!body.contains("input") || body["input"].is_null())
    return Status::Error("input: missing; expected a string, a list of strings or input objects");
  const json& in = body["input"];
  if (!in.is_array()) {
    RetrievalItem item;
    QVL_RETURN_IF_ERROR(read_item(in, "input", true, item));
    r.inputs.push_back(std::move(item));
    return Status::Ok();
  }
  if (in.empty()) return Status::Error("input: an empty list; give at least one input");
  if (in.size() > kMaxRetrievalInputs)
    return Status::Error("input: " + std::to_string(in.size()) + " inputs; at most " +
                         std::to_string(kMaxRetrievalInputs) + " a request");
  if (in[0].is_number())
    return Status::Error("input: token ids are not taken (qvl embeds text, images and videos); send the text");
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i].is_array())
      return Status::Error("input[" + std::to_string(i) + "]: token ids are not taken; send the text");
    RetrievalItem item;
    QVL_RETURN_IF_ERROR(read_item(in[i], "input[" + std::to_string(i) + "]", true, item));
    r.inputs.push_back(std::move(item));
  }
  return Status::Ok();
}

}  // namespace

Result<EmbeddingsRequest> parse_embeddings_request(const json& body) {
  if (!body.is_object()) return Status::Error("the body: expected a JSON object");
  EmbeddingsRequest r;
  QVL_RETURN_IF_ERROR(read_optional_string(body, "model", r.model));
  QVL_RETURN_IF_ERROR(read_inputs(body, r));
  // Kept once (not copied into every input: 2,048 copies of a long instruction would multiply the body).
  QVL_RETURN_IF_ERROR(read_optional_string(body, "instruction", r.instruction));
  QVL_RETURN_IF_ERROR(read_dimensions(body, r.dimensions));
  std::string format = "float";
  QVL_RETURN_IF_ERROR(read_optional_string(body, "encoding_format", format));
  if (format != "float" && format != "base64")
    return Status::Error("encoding_format: expected \"float\" or \"base64\", got \"" + format + "\"");
  r.base64 = format == "base64";
  return r;
}

Result<EmbeddingsRequest> parse_ollama_embed_request(const json& body) {
  if (!body.is_object()) return Status::Error("the body: expected a JSON object");
  EmbeddingsRequest r;
  QVL_RETURN_IF_ERROR(read_optional_string(body, "model", r.model));
  QVL_RETURN_IF_ERROR(read_inputs(body, r));
  QVL_RETURN_IF_ERROR(read_dimensions(body, r.dimensions));
  if (body.contains("truncate") && !body["truncate"].is_null() && !body["truncate"].is_boolean())
    return Status::Error("truncate: expected a boolean, got " + type_name(body["truncate"]));
  return r;
}

Result<RerankRequest> parse_rerank_request(const json& body) {
  if (!body.is_object()) return Status::Error("the body: expected a JSON object");
  RerankRequest r;
  QVL_RETURN_IF_ERROR(read_optional_string(body, "model", r.model));
  QVL_RETURN_IF_ERROR(read_optional_string(body, "instruction", r.instruction));
  if (!body.contains("query") || body["query"].is_null())
    return Status::Error("query: missing; expected a string or an object {\"text\", \"image\", \"video\"}");
  QVL_RETURN_IF_ERROR(read_item(body["query"], "query", false, r.query));
  if (!body.contains("documents") || !body["documents"].is_array())
    return Status::Error("documents: expected a list of strings or objects, got " +
                         type_name(body.value("documents", json())));
  const json& docs = body["documents"];
  if (docs.empty()) return Status::Error("documents: an empty list; give at least one document");
  if (docs.size() > kMaxRetrievalInputs)
    return Status::Error("documents: " + std::to_string(docs.size()) + " documents; at most " +
                         std::to_string(kMaxRetrievalInputs) + " a request");
  for (size_t i = 0; i < docs.size(); ++i) {
    RetrievalItem item;
    QVL_RETURN_IF_ERROR(read_item(docs[i], "documents[" + std::to_string(i) + "]", false, item));
    r.documents.push_back(std::move(item));
    r.document_values.push_back(docs[i]);
  }
  if (body.contains("top_n") && !body["top_n"].is_null()) {
    const json& t = body["top_n"];
    if (!t.is_number_integer() || t.get<int64_t>() < 1)
      return Status::Error("top_n: expected a positive integer, got " + (t.is_number() ? t.dump() : type_name(t)));
    r.top_n = t.get<int64_t>();
  }
  if (body.contains("return_documents") && !body["return_documents"].is_null()) {
    if (!body["return_documents"].is_boolean())
      return Status::Error("return_documents: expected a boolean, got " + type_name(body["return_documents"]));
    r.return_documents = body["return_documents"].get<bool>();
  }
  return r;
}

}  // namespace qvl::server
