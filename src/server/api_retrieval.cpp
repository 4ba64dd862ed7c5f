// The retrieval endpoints of an embedding or reranker model (engine/retrieval.h): OpenAI's POST /v1/embeddings,
// Ollama's POST /api/embed and the Jina/Cohere-shaped POST /v1/rerank (llama-server's and vLLM's shape). Each
// input (or query/document pair) is one pooled pass through the scheduler: as many are queued at once as the
// server has slots, so a request's inputs share the batched forward passes and the image cache (a rerank
// query's image is encoded once for all its documents).
#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>

#include "engine/retrieval.h"
#include "server/api.h"
#include "server/retrieval_request.h"

namespace qvl::server {

namespace {

// One pooled pass: its conversation and its images and videos in prompt order.
struct Pass {
  std::vector<ChatMessage> messages;
  std::vector<std::pair<std::string, std::string>> images;
  std::vector<VideoRef> videos;
  std::string where;  // "input[3]", "documents[2]"
};

struct PassResults {
  std::vector<std::vector<float>> hidden;  // [passes][hidden]
  int64_t prompt_tokens = 0;
  double ms = 0;
};

// Every pass's text within the context before any image is decoded: the rendered prompt's tokens (each image
// and video one token here) are a lower bound of its length.
std::optional<ApiError> check_text_lengths(const ApiContext& ctx, const std::vector<Pass>& passes,
                                           const GenerateOptions& options) {
  const Tokenizer& tok = ctx.scheduler.model()->tokenizer();
  for (const Pass& p : passes) {
    const RenderedChat chat = render_chat_with_spans(p.messages, options.chat);
    const int64_t n = static_cast<int64_t>(tok.encode_prompt(chat.text, chat.user_spans).size());
    if (n > options.context)
      return ApiError{400, p.where + ": " + std::to_string(n) + " tokens of text, over the model's context of " +
                               std::to_string(options.context) + " tokens (inputs are refused, not truncated); "
                               "shorten it or split it into several inputs",
                      "context_length_exceeded", p.where};
  }
  return std::nullopt;
}

// Runs the passes, at most slots + 1 of them queued at a time; a client that goes away cancels the rest.
std::optional<ApiError> run_passes(ApiContext& ctx, const http::Request& req, std::vector<Pass>& passes,
                                   const GenerateOptions& options, PassResults& out) {
  const auto t0 = std::chrono::steady_clock::now();
  if (auto e = check_text_lengths(ctx, passes, options)) return e;
  out.hidden.assign(passes.size(), {});
  std::deque<std::pair<size_t, std::shared_ptr<Job>>> inflight;
  auto cancel_all = [&] {
    for (auto& [i, job] : inflight) job->cancel();
  };
  // --timeout bounds the whole request (every pass), from its arrival.
  const auto deadline = request_deadline(ctx);
  auto past_deadline = [&]() -> std::optional<ApiError> {
    if (ctx.options.timeout_s <= 0 || std::chrono::steady_clock::now() < deadline) return std::nullopt;
    return ApiError{504, "the request took longer than the server's --timeout of " +
                             std::to_string(static_cast<int>(ctx.options.timeout_s)) + " s (" + std::to_string(passes.size()) +
                             " inputs); send fewer inputs a request", "timeout"};
  };
  // Waits for the oldest pass in flight.
  auto finish_one = [&]() -> std::optional<ApiError> {
    auto [i, job] = inflight.front();
    inflight.pop_front();
    for (;;) {
      JobUpdate u = job->wait(std::chrono::milliseconds(100));
      if (u.finished) {
        if (u.error != JobError::kNone) {
          ApiError e = job_error(u);
          e.message = passes[i].where + ": " + e.message;
          return e;
        }
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
  const size_t window = static_cast<size_t>(std::max(1, ctx.scheduler.slots())) + 1;
  for (size_t next = 0; next < passes.size() || !inflight.empty();) {
    if (auto e = past_deadline()) {
      cancel_all();
      return e;
    }
    if (next < passes.size() && inflight.size() < window) {
      Pass& p = passes[next];
      InferenceRequest ir;
      if (auto e = make_inference_request(ctx, p.images, std::move(p.messages), options, ir, {}, p.videos)) {
        cancel_all();
        return e;
      }
      Scheduler::Submitted s = ctx.scheduler.submit(std::move(ir));
      if (s.error != SubmitError::kNone) {
        cancel_all();
        return submit_error(s.error, ctx);
      }
      inflight.emplace_back(next++, std::move(s.job));
      continue;
    }
    if (auto e = finish_one()) {
      cancel_all();
      return e;
    }
  }
  out.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return std::nullopt;
}

std::vector<Pass> embedding_passes(std::vector<RetrievalItem>& items) {
  std::vector<Pass> passes;
  for (size_t i = 0; i < items.size(); ++i) {
    Pass p;
    p.messages = embedding_messages(items[i].input);
    p.images = std::move(items[i].images);
    p.videos = std::move(items[i].videos);
    p.where = "input[" + std::to_string(i) + "]";
    passes.push_back(std::move(p));
  }
  return passes;
}

// The vectors of an embeddings request (Matryoshka-truncated where asked).
std::optional<ApiError> embed(ApiContext& ctx, const http::Request& req, EmbeddingsRequest& r,
                              std::vector<std::vector<float>>& vectors, PassResults& results) {
  const Model& model = *ctx.scheduler.model();
  if (r.dimensions > model.config().text.hidden_size)
    return ApiError{400, "dimensions: " + std::to_string(r.dimensions) + " is more than the model's " +
                             std::to_string(model.config().text.hidden_size) + "; give 1 to " +
                             std::to_string(model.config().text.hidden_size),
                    "invalid_value", "dimensions"};
  std::vector<Pass> passes = embedding_passes(r.inputs);
  const GenerateOptions options = retrieval_options(model, ctx.defaults.image.max_pixels);
  if (auto e = run_passes(ctx, req, passes, options, results)) return e;
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
  auto fail = [&](const ApiError& e) { send_error(res, ApiFamily::kOpenAI, e); };
  if (auto e = check_ready(ctx, ModelKind::kEmbedding)) return fail(*e);
  auto body = parse_json_body(req);
  if (!body.ok()) return fail({400, body.status().message()});
  auto parsed = parse_embeddings_request(*body);
  if (!parsed.ok()) return fail({400, parsed.status().message(), "invalid_request"});
  std::vector<std::vector<float>> vectors;
  PassResults results;
  if (auto e = embed(ctx, req, *parsed, vectors, results)) return fail(*e);
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
  auto fail = [&](const ApiError& e) { send_error(res, ApiFamily::kOllama, e); };
  if (auto e = check_ready(ctx, ModelKind::kEmbedding)) return fail(*e);
  auto body = parse_json_body(req);
  if (!body.ok()) return fail({400, body.status().message()});
  auto parsed = parse_ollama_embed_request(*body);
  if (!parsed.ok()) return fail({400, parsed.status().message()});
  std::vector<std::vector<float>> vectors;
  PassResults results;
  if (auto e = embed(ctx, req, *parsed, vectors, results)) return fail(*e);
  const auto ns = [](double ms) { return static_cast<int64_t>(ms * 1e6); };
  send_json(res, 200, json{{"model", parsed->model.empty() ? ctx.options.model_id : parsed->model},
                           {"embeddings", vectors},
                           {"total_duration", ns(results.ms)},
                           {"load_duration", 0},
                           {"prompt_eval_count", results.prompt_tokens}});
}

void rerank(ApiContext& ctx, const http::Request& req, http::Response& res) {
  auto fail = [&](const ApiError& e) { send_error(res, ApiFamily::kOpenAI, e); };
  if (auto e = check_ready(ctx, ModelKind::kReranker)) return fail(*e);
  auto body = parse_json_body(req);
  if (!body.ok()) return fail({400, body.status().message()});
  auto parsed = parse_rerank_request(*body);
  if (!parsed.ok()) return fail({400, parsed.status().message(), "invalid_request"});
  RerankRequest& r = *parsed;
  const Model& model = *ctx.scheduler.model();
  std::vector<Pass> passes;
  for (size_t i = 0; i < r.documents.size(); ++i) {
    Pass p;
    p.messages = rerank_messages(r.query.input, r.documents[i].input, r.instruction);
    // In prompt order: the query's videos and images, then the document's.
    p.images = r.query.images;
    p.images.insert(p.images.end(), r.documents[i].images.begin(), r.documents[i].images.end());
    p.videos = r.query.videos;
    p.videos.insert(p.videos.end(), r.documents[i].videos.begin(), r.documents[i].videos.end());
    p.where = "documents[" + std::to_string(i) + "]";
    passes.push_back(std::move(p));
  }
  const GenerateOptions options = retrieval_options(model, ctx.defaults.image.max_pixels);
  PassResults results;
  if (auto e = run_passes(ctx, req, passes, options, results)) return fail(*e);
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
  for (const char* path : {"/v1/rerank", "/rerank", "/v1/reranking", "/reranking"})
    routes.post(path, [&ctx](const http::Request& req, http::Response& res) { rerank(ctx, req, res); });
}

}  // namespace qvl::server
