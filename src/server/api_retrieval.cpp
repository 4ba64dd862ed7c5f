// The retrieval endpoints of an embedding or reranker model (engine/retrieval.h): OpenAI's POST /v1/embeddings,
// Ollama's POST /api/embed (and its earlier /api/embeddings) and the Jina/Cohere-shaped POST /v1/rerank (llama-server's and vLLM's shape). Each
// input (or query/document pair) is one pooled pass through the scheduler: as many are queued at once as the
// server has slots, so a request's inputs share the batched forward passes and the image cache (a rerank
// query's image is encoded once for all its documents).
#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <functional>

#include "engine/retrieval.h"
#include "server/api.h"
#include "server/retrieval_request.h"

namespace qvl::server {

namespace {

size_t count_urls(const RetrievalItem& item) {
  size_t n = 0;
  for (const auto& [ref, where] : item.images) n += is_media_url(ref);
  for (const VideoRef& v : item.videos) n += is_media_url(v.ref);
  return n;
}

std::optional<ApiError> check_urls(size_t urls) {
  if (urls <= kMaxUrlsPerRequest) return std::nullopt;
  return ApiError{400, "the request names " + std::to_string(urls) + " image and video URLs; at most " +
                           std::to_string(kMaxUrlsPerRequest) + " are fetched per request (send the others inline)",
                  "too_many_urls"};
}

// The tokens of an input's texts (a lower bound of what they add to a prompt: BPE across the template's
// boundaries may merge a token or two), one token per image and video.
int64_t item_tokens(const Tokenizer& tok, const RetrievalInput& in) {
  int64_t n = static_cast<int64_t>(in.images + in.videos);
  for (const std::string& t : in.texts) n += static_cast<int64_t>(tok.encode(t).size());
  return n;
}

std::optional<ApiError> over_context(const std::string& where, int64_t n, int64_t context) {
  if (n <= context) return std::nullopt;
  return ApiError{400, where + ": " + std::to_string(n) + " tokens of text, over the model's context of " +
                           std::to_string(context) + " tokens (inputs are refused, not truncated); shorten it or split "
                           "it into several inputs",
                  "context_length_exceeded", where};
}

struct PassResults {
  std::vector<std::vector<float>> hidden;  // [passes][hidden]
  int64_t prompt_tokens = 0;
  double ms = 0;
};

// Runs n pooled passes, each built by `build` only when it is queued (its images decoded then), at most
// min(slots + 1, slots + queue) of them queued at a time; a full queue (other clients) waits for this request's
// oldest pass and tries again. A client that goes away, or the request's deadline, cancels the rest.
std::optional<ApiError> run_passes(ApiContext& ctx, const http::Request& req, size_t n,
                                   const std::function<std::optional<ApiError>(size_t, InferenceRequest&)>& build,
                                   std::chrono::steady_clock::time_point deadline, PassResults& out) {
  const auto t0 = std::chrono::steady_clock::now();
  out.hidden.assign(n, {});
  std::deque<std::pair<size_t, std::shared_ptr<Job>>> inflight;
  auto cancel_all = [&] {
    for (auto& [i, job] : inflight) job->cancel();
  };
  auto past_deadline = [&]() -> std::optional<ApiError> {
    if (ctx.options.timeout_s <= 0 || std::chrono::steady_clock::now() < deadline) return std::nullopt;
    return ApiError{504, "the request took longer than the server's --timeout of " +
                             std::to_string(static_cast<int>(ctx.options.timeout_s)) + " s (" + std::to_string(n) +
                             " inputs); send fewer inputs a request", "timeout"};
  };
  // Waits for the oldest pass in flight.
  auto finish_one = [&]() -> std::optional<ApiError> {
    auto [i, job] = inflight.front();
    inflight.pop_front();
    for (;;) {
      JobUpdate u = job->wait(std::chrono::milliseconds(100));
      if (u.finished) {
        if (u.error != JobError::kNone) return job_error(u);
        out.hidden[i] = std::move(u.result.hidden);
        out.prompt_tokens += u.result.timings.prompt_tokens;
        return std::nullopt;
      }
      if (!req.peer.alive()) {
        job->cancel();
        return ApiError{499, "the client went away", "cancelled"};
      }
      if (auto e = past_deadline()) {
        job->cancel();
        return e;
      }
    }
  };
  const int slots = std::max(1, ctx.scheduler.slots());
  const size_t window = static_cast<size_t>(std::max(1, std::min(slots + 1, slots + ctx.options.queue)));
  for (size_t next = 0; next < n || !inflight.empty();) {
    std::optional<ApiError> e = past_deadline();
    if (!e && next < n && inflight.size() < window) {
      InferenceRequest ir;
      e = build(next, ir);
      if (!e) {
        Scheduler::Submitted s = ctx.scheduler.submit(std::move(ir));
        if (s.error == SubmitError::kNone) {
          inflight.emplace_back(next++, std::move(s.job));
          continue;
        }
        // Other clients filled the queue: wait for one of ours, then build this pass again.
        if (s.error != SubmitError::kQueueFull || inflight.empty()) e = submit_error(s.error, ctx);
      }
      // A full queue seen before the images decode (check_queue_room) is the same case.
      if (e && e->status == 503 && e->code == "queue_full" && !inflight.empty()) e.reset();
    }
    if (!e && !inflight.empty()) e = finish_one();
    if (e) {
      cancel_all();
      return e;
    }
  }
  out.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return std::nullopt;
}

// The vectors of an embeddings request (Matryoshka-truncated where asked).
std::optional<ApiError> embed(ApiContext& ctx, const http::Request& req, EmbeddingsRequest& r,
                              std::chrono::steady_clock::time_point deadline, std::vector<std::vector<float>>& vectors,
                              PassResults& results) {
  const Model& model = *ctx.scheduler.model();
  if (r.dimensions > model.config().text.hidden_size)
    return ApiError{400, "dimensions: " + std::to_string(r.dimensions) + " is more than the model's " +
                             std::to_string(model.config().text.hidden_size) + "; give 1 to " +
                             std::to_string(model.config().text.hidden_size),
                    "invalid_value", "dimensions"};
  const GenerateOptions options = retrieval_options(model, ctx.defaults.image.max_pixels);
  // Before any image is decoded: URLs across the request, and each input's text within the context.
  size_t urls = 0;
  for (const RetrievalItem& item : r.inputs) urls += count_urls(item);
  if (auto e = check_urls(urls)) return e;
  // The template's own tokens: the prompt of an empty input less its default instruction and its "NULL".
  const Tokenizer& tok = model.tokenizer();
  auto tokens = [&](const std::string& t) { return static_cast<int64_t>(tok.encode(t).size()); };
  const int64_t fixed = static_cast<int64_t>(tok.encode_prompt(render_chat(embedding_messages({}), options.chat), {}).size()) -
                        tokens(kDefaultEmbedInstruction) - tokens("NULL");
  const int64_t request_instruction = tokens(embedding_instruction(r.instruction));  // counted once
  if (auto e = over_context("instruction", fixed + request_instruction, options.context)) return e;
  for (size_t i = 0; i < r.inputs.size(); ++i) {
    const RetrievalInput& in = r.inputs[i].input;
    const int64_t instruction = in.instruction.empty() ? request_instruction : tokens(embedding_instruction(in.instruction));
    const int64_t content = in.empty() ? tokens("NULL") : item_tokens(tok, in);
    if (auto e = over_context("input[" + std::to_string(i) + "]", fixed + instruction + content, options.context)) return e;
  }
  auto build = [&](size_t i, InferenceRequest& ir) -> std::optional<ApiError> {
    RetrievalItem& item = r.inputs[i];
    RetrievalInput in = item.input;
    if (in.instruction.empty()) in.instruction = r.instruction;
    return make_inference_request(ctx, item.images, embedding_messages(in), options, ir, {}, item.videos);
  };
  if (auto e = run_passes(ctx, req, r.inputs.size(), build, deadline, results)) return e;
  for (const auto& h : results.hidden) {
    auto v = embedding_vector(h, r.dimensions);
    if (!v.ok()) return ApiError{400, v.status().message(), "invalid_value", "dimensions"};
    vectors.push_back(std::move(*v));
  }
  return std::nullopt;
}

std::string base64_floats(const std::vector<float>& v) {
  std::vector<uint8_t> bytes(v.size() * 4);
  for (size_t i = 0; i < v.size(); ++i) {
    uint32_t u;
    std::memcpy(&u, &v[i], 4);
    for (int b = 0; b < 4; ++b) bytes[i * 4 + static_cast<size_t>(b)] = static_cast<uint8_t>(u >> (8 * b));
  }
  return base64_encode(bytes.data(), bytes.size());
}

void openai_embeddings(ApiContext& ctx, const http::Request& req, http::Response& res) {
  const auto deadline = request_deadline(ctx);  // --timeout counts from the request's arrival
  auto fail = [&](const ApiError& e) { send_error(res, ApiFamily::kOpenAI, e); };
  if (auto e = check_ready(ctx, ModelKind::kEmbedding)) return fail(*e);
  auto body = parse_json_body(req);
  if (!body.ok()) return fail({400, body.status().message()});
  auto parsed = parse_embeddings_request(*body);
  if (!parsed.ok()) return fail({400, parsed.status().message(), "invalid_request"});
  std::vector<std::vector<float>> vectors;
  PassResults results;
  if (auto e = embed(ctx, req, *parsed, deadline, vectors, results)) return fail(*e);
  json data = json::array();
  for (size_t i = 0; i < vectors.size(); ++i) {
    json item = {{"object", "embedding"}, {"index", i}};
    item["embedding"] = parsed->base64 ? json(base64_floats(vectors[i])) : json(vectors[i]);
    data.push_back(std::move(item));
  }
  send_json(res, 200, json{{"object", "list"}, {"data", std::move(data)}, {"model", ctx.options.model_id},
                           {"usage", {{"prompt_tokens", results.prompt_tokens}, {"total_tokens", results.prompt_tokens}}}});
}

void ollama_embed(ApiContext& ctx, const http::Request& req, http::Response& res) {
  const auto deadline = request_deadline(ctx);
  auto fail = [&](const ApiError& e) { send_error(res, ApiFamily::kOllama, e); };
  if (auto e = check_ready(ctx, ModelKind::kEmbedding)) return fail(*e);
  auto body = parse_json_body(req);
  if (!body.ok()) return fail({400, body.status().message()});
  const auto ns = [](double ms) { return static_cast<int64_t>(ms * 1e6); };
  // Nothing to embed ([] or ""): Ollama answers with no vectors rather than an error; the other fields are
  // checked as for any input.
  if (const auto in = body->find("input"); body->is_object() && in != body->end() &&
                                           ((in->is_array() && in->empty()) || (in->is_string() && in->get<std::string>().empty()))) {
    json checked = *body;
    checked["input"] = "x";
    auto parsed = parse_ollama_embed_request(checked);
    if (!parsed.ok()) return fail({400, parsed.status().message()});
    return send_json(res, 200, json{{"model", parsed->model.empty() ? ctx.options.model_id : parsed->model},
                                    {"embeddings", json::array()}, {"total_duration", 0}, {"load_duration", 0},
                                    {"prompt_eval_count", 0}});
  }
  auto parsed = parse_ollama_embed_request(*body);
  if (!parsed.ok()) return fail({400, parsed.status().message()});
  std::vector<std::vector<float>> vectors;
  PassResults results;
  if (auto e = embed(ctx, req, *parsed, deadline, vectors, results)) return fail(*e);
  send_json(res, 200, json{{"model", parsed->model.empty() ? ctx.options.model_id : parsed->model},
                           {"embeddings", vectors},
                           {"total_duration", ns(results.ms)},
                           {"load_duration", 0},
                           {"prompt_eval_count", results.prompt_tokens}});
}

// Ollama's earlier endpoint, still in its client: {"model", "prompt"} -> {"embedding": [...]}, one text.
void ollama_embeddings(ApiContext& ctx, const http::Request& req, http::Response& res) {
  const auto deadline = request_deadline(ctx);
  auto fail = [&](const ApiError& e) { send_error(res, ApiFamily::kOllama, e); };
  if (auto e = check_ready(ctx, ModelKind::kEmbedding)) return fail(*e);
  auto body = parse_json_body(req);
  if (!body.ok()) return fail({400, body.status().message()});
  if (!body->is_object()) return fail({400, "expected a JSON object such as {\"model\": \"m\", \"prompt\": \"text\"}"});
  const auto prompt = body->find("prompt");
  if (prompt == body->end() || !prompt->is_string())
    return fail({400, "prompt: expected the text to embed, a string (/api/embed takes lists and images)"});
  if (prompt->get<std::string>().empty()) return send_json(res, 200, json{{"embedding", json::array()}});
  json as_embed{{"input", *prompt}};
  for (const char* key : {"model", "truncate"})
    if (auto it = body->find(key); it != body->end()) as_embed[key] = *it;
  auto parsed = parse_ollama_embed_request(as_embed);
  if (!parsed.ok()) return fail({400, parsed.status().message()});
  std::vector<std::vector<float>> vectors;
  PassResults results;
  if (auto e = embed(ctx, req, *parsed, deadline, vectors, results)) return fail(*e);
  send_json(res, 200, json{{"embedding", vectors.at(0)}});
}

void rerank(ApiContext& ctx, const http::Request& req, http::Response& res) {
  const auto deadline = request_deadline(ctx);
  auto fail = [&](const ApiError& e) { send_error(res, ApiFamily::kOpenAI, e); };
  if (auto e = check_ready(ctx, ModelKind::kReranker)) return fail(*e);
  auto body = parse_json_body(req);
  if (!body.ok()) return fail({400, body.status().message()});
  auto parsed = parse_rerank_request(*body);
  if (!parsed.ok()) return fail({400, parsed.status().message(), "invalid_request"});
  RerankRequest& r = *parsed;
  const Model& model = *ctx.scheduler.model();
  const GenerateOptions options = retrieval_options(model, ctx.defaults.image.max_pixels);
  // Before any image is decoded: URLs (the query's fetched once), the query with the instruction, then each
  // document beside it, within the context.
  size_t urls = count_urls(r.query);
  for (const RetrievalItem& d : r.documents) urls += count_urls(d);
  if (auto e = check_urls(urls)) return fail(*e);
  const Tokenizer& tok = model.tokenizer();
  const RetrievalInput nothing;
  // The pair's prompt with an empty document, less that document's "NULL".
  const int64_t query = static_cast<int64_t>(
      tok.encode_prompt(render_chat(rerank_messages(r.query.input, nothing, r.instruction), options.chat), {}).size()) -
      static_cast<int64_t>(tok.encode("NULL").size());
  if (auto e = over_context("query", query, options.context)) return fail(*e);
  for (size_t i = 0; i < r.documents.size(); ++i)
    if (auto e = over_context("documents[" + std::to_string(i) + "]",
                              query + (r.documents[i].input.empty() ? 1 : item_tokens(tok, r.documents[i].input)),
                              options.context))
      return fail(*e);
  // The query's images and videos, read once for every pair (their tokens are the same in each).
  InferenceRequest q;
  if (!r.query.images.empty() || !r.query.videos.empty())
    if (auto e = make_inference_request(ctx, r.query.images, {}, options, q, {}, r.query.videos)) return fail(*e);
  auto build = [&](size_t i, InferenceRequest& ir) -> std::optional<ApiError> {
    const RetrievalItem& d = r.documents[i];
    if (auto e = make_inference_request(ctx, d.images, rerank_messages(r.query.input, d.input, r.instruction), options,
                                        ir, {}, d.videos)) {
      e->message = "documents[" + std::to_string(i) + "]: " + e->message;
      return e;
    }
    // In prompt order: the query's videos and images, then the document's (and each image's size options).
    std::vector<PreprocessOptions> per = q.options.per_image;
    per.resize(q.images.size());
    per.insert(per.end(), ir.options.per_image.begin(), ir.options.per_image.end());
    ir.options.per_image = std::move(per);
    ir.images.insert(ir.images.begin(), q.images.begin(), q.images.end());
    ir.videos.insert(ir.videos.begin(), q.videos.begin(), q.videos.end());
    return std::nullopt;
  };
  PassResults results;
  if (auto e = run_passes(ctx, req, r.documents.size(), build, deadline, results)) return fail(*e);
  std::vector<std::pair<double, size_t>> scored;
  for (size_t i = 0; i < results.hidden.size(); ++i) scored.emplace_back(rerank_score(model, results.hidden[i]), i);
  std::stable_sort(scored.begin(), scored.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  if (r.top_n > 0 && static_cast<size_t>(r.top_n) < scored.size()) scored.resize(static_cast<size_t>(r.top_n));
  json list = json::array();
  for (const auto& [score, i] : scored) {
    json item = {{"index", i}, {"relevance_score", score}};
    if (r.return_documents) {
      const json& d = r.document_values[i];
      item["document"] = d.is_string() ? json{{"text", d}} : d;
    }
    list.push_back(std::move(item));
  }
  send_json(res, 200, json{{"object", "list"}, {"model", ctx.options.model_id}, {"results", std::move(list)},
                           {"usage", {{"prompt_tokens", results.prompt_tokens}, {"total_tokens", results.prompt_tokens}}}});
}

}  // namespace

void add_retrieval_routes(http::Router& routes, ApiContext& ctx) {
  for (const char* path : {"/v1/embeddings", "/embeddings"})
    routes.post(path, [&ctx](const http::Request& req, http::Response& res) { openai_embeddings(ctx, req, res); });
  routes.post("/api/embed", [&ctx](const http::Request& req, http::Response& res) { ollama_embed(ctx, req, res); });
  routes.post("/api/embeddings", [&ctx](const http::Request& req, http::Response& res) { ollama_embeddings(ctx, req, res); });
  for (const char* path : {"/v1/rerank", "/rerank", "/v1/reranking", "/reranking"})
    routes.post(path, [&ctx](const http::Request& req, http::Response& res) { rerank(ctx, req, res); });
}

}  // namespace qvl::server
