// What the HTTP API files share: the context routes run in, errors in each API's shape, typed JSON field
// reading, and running a Job to its end or streaming it while watching the client.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "server/http/request.h"
#include "server/http/router.h"
#include "server/document_input.h"
#include "server/image_input.h"
#include "server/metrics.h"
#include "server/options.h"
#include "server/response_store.h"
#include "engine/scheduler.h"

namespace qvl::server {

using json = nlohmann::ordered_json;

// Everything a route needs, owned by the Server and alive as long as it.
struct ApiContext {
  const ServerOptions& options;
  Scheduler& scheduler;
  Metrics& metrics;
  ImagePolicy images;
  int64_t started_unix = 0;  // the server's start, as the model's "created"
  // What every request starts from: sampling from generation_config.json, the context per slot, the image
  // size bounds. Written by the model loader before the scheduler reports kReady; read only after.
  GenerateOptions defaults;
  DecodeMemory* decode_memory = nullptr;  // the server's budget of image and video decode memory (null: none)
  ResponseStore* responses = nullptr;     // the Responses API's stored responses (null: none kept)
  DocumentOptions documents;              // PDF limits: DPI, pages a request, the renderer's limits
  PageCache* page_cache = nullptr;        // documents' page lists and rendered pages (null: none kept)
};

// A failure to answer, in terms every API family can shape.
struct ApiError {
  ApiError(int status_, std::string message_, std::string code_ = "", std::string param_ = "", int retry_after = 0)
      : status(status_), message(std::move(message_)), code(std::move(code_)), param(std::move(param_)),
        retry_after_s(retry_after) {}
  int status;
  std::string message;
  std::string code;       // OpenAI "code" (e.g. "invalid_api_key"); empty: null
  std::string param;      // OpenAI "param"; empty: null
  int retry_after_s;      // > 0: a Retry-After header
};

enum class ApiFamily { kOpenAI, kOllama, kLegacy, kPlain };
ApiFamily family_of(std::string_view path);

// The error body each family's clients parse: OpenAI {"error": {"message", "type", "param", "code"}}, the
// others {"error": "message"}.
void send_error(http::Response& res, ApiFamily family, const ApiError& error);
json openai_error_body(const ApiError& error);

// JSON text, with invalid UTF-8 (which a client may send and we may echo) replaced rather than thrown on.
std::string dump_json(const json& j);
void send_json(http::Response& res, int status, const json& body);

// The request body as JSON; the error says where the JSON breaks.
Result<json> parse_json_body(const http::Request& req);
// The same for body text: empty, over the JSON limits, not JSON or not an object is an error.
Result<json> parse_json_text(std::string_view text);

// Typed optional fields of a JSON object: absent or null leaves `out` as it is; a value of the wrong type
// is an error naming `where`.`key`. Numbers given as integers are accepted for floats.
Status read_bool(const json& obj, const char* key, bool& out, const std::string& where = "");
// tool_choice over options.chat.tools (OpenAI's field; accepted on Ollama's /api/chat too): "auto" (the
// default), "none" (the tools are left out of the prompt), "required" or {"type": "function", "function":
// {"name": ...}} (the answer is forced to be such a call: require_tool_call). parse_calls: answers are to be
// read for <tool_call> blocks (tools given, choice not none); required: a call is forced.
Status read_tool_choice(const json& body, GenerateOptions& options, bool& parse_calls, bool& required);
Status read_float(const json& obj, const char* key, float& out, const std::string& where = "");
Status read_int(const json& obj, const char* key, int64_t& out, const std::string& where = "");
Status read_string(const json& obj, const char* key, std::string& out, const std::string& where = "");
// "stop": a string or a list of strings.
Status read_stop(const json& obj, const char* key, std::vector<std::string>& out, const std::string& where = "");
// A token limit in [1, 2^20] (0 allowed when allow_zero).
Status read_max_tokens(const json& obj, const char* key, int& out, const std::string& where = "", bool allow_zero = false);

// OpenAI's pair: `flag_key` (true: the log-probabilities of the answer's tokens) and `top_key` (0 to 20
// alternatives per token; only with the flag), into GenerateOptions::logprobs (-1 when off).
Status read_logprobs(const json& obj, const char* flag_key, const char* top_key, int& out, const std::string& where = "");

// OpenAI's logit_bias: {"token id": bias, ...} with decimal ids and biases in [-100, 100], into `out`
// (ascending ids; empty when absent, null or {}). Ids past the vocabulary are refused by Session::prepare.
Status read_logit_bias(const json& obj, const char* key, std::vector<std::pair<int32_t, float>>& out,
                       const std::string& where = "");

// A seed for requests that do not give one, so that sampling differs between requests as clients expect.
uint64_t random_seed();

// The model is ready to take requests, or the error to answer (503 while loading).
std::optional<ApiError> check_ready(const ApiContext& ctx);

// The same, and the loaded model is of the kind the endpoint needs (model/model_kind.h): else a 400 that says
// which model is loaded and what it serves.
std::optional<ApiError> check_ready(const ApiContext& ctx, ModelKind wanted);
// Why a submit or a job failed, as an HTTP error.
ApiError submit_error(SubmitError e, const ApiContext& ctx);
ApiError job_error(const JobUpdate& u);

// A job that has started (its prompt was read) or failed before that. `first` holds the first update,
// which may already carry text or the end.
struct Admitted {
  std::shared_ptr<Job> job;
  JobUpdate first;
  std::optional<ApiError> error;
  bool client_gone = false;
};

// What the loaded model is, for /health, /v1/models and the page: its parameters (from config.json's shapes),
// layers and widths, chat template (instruct or thinking) and the storage types of its weights. Null before
// the model is loaded.
json model_description(const ApiContext& ctx);

// The loaded model's chat template (Instruct when no model is loaded yet).
ChatTemplateKind chat_template(const ApiContext& ctx);

// A request's thinking switch against the model: true with a model that does not think is a 400 (as
// Ollama answers it); returns whether the reasoning is to be returned (a Thinking model, not switched off).
Result<bool> show_reasoning(const ApiContext& ctx, std::optional<bool> think, const std::string& field);

// What a request's images may cost (tokens within its context, each image sized as the model's preprocessing
// will size it), checked from each image's header before it is decoded.
ImageBudget image_budget(const ApiContext& ctx, const GenerateOptions& options);

// Before a request's images or videos are decoded: the model is loaded and the queue has room (else the
// 503 the submission would get), so a request that would be refused decodes nothing.
std::optional<ApiError> check_queue_room(const ApiContext& ctx);
// The request's deadline for waiting on shared resources (decode memory, video decoders): its --timeout.
std::chrono::steady_clock::time_point request_deadline(const ApiContext& ctx);

// Image k of a request (a reference, or with raw_bytes the file's bytes), decoded within `budget` (its
// tokens and the server's decode memory) and resized at once to what the model sees, its decode memory
// given back (options.per_image[k] then asks for that exact size): a 400 naming `where`, or a 503 when the
// decode memory had no room in time.
std::optional<ApiError> load_image_for_request(const ApiContext& ctx, ImageBudget& budget, GenerateOptions& options,
                                               size_t k, std::string_view ref, const std::string& where, int page,
                                               bool raw_bytes, ImageRGB& out);
// The same for a document's page: admitted by its planned size, then taken from the page cache or rendered by
// a confined worker (at most two at once; waiting past `deadline` is a 503); a failed render is a 422.
std::optional<ApiError> load_page_for_request(const ApiContext& ctx, ImageBudget& budget, GenerateOptions& options,
                                              size_t k, const LoadedDocument& doc, const RequestImage& page,
                                              std::chrono::steady_clock::time_point deadline, ImageRGB& out);
// Image k, decoded or rendered, resized to the size the model sees (its options then ask for that size).
std::optional<ApiError> fit_to_model(const ApiContext& ctx, ImageBudget& budget, GenerateOptions& options, size_t k,
                                     Result<ImageRGB> img, const std::string& where, ImageRGB& out);

inline constexpr size_t kMaxUrlsPerRequest = 8;  // image and video URLs fetched for one request

// The engine request for one parsed chat request: its images ((reference, where) in prompt order) loaded
// under the server's image policy, and the server's timeout. A bad image is a 400 naming where it is.
// pages[k], where given: the page of a multi-page file (TIFF) image k is read from.
// videos: read, probed against the decode limits, sampled and preprocessed here (their tokens bounded by what
// the context has left after the images); a bad video is a 400 naming where it is.
// documents: the request's documents in prompt order (the kDocument parts of its user and tool messages),
// expanded into page images (server/document_input.h) and rendered here, each page admitted against the
// context before it is rendered.
std::optional<ApiError> make_inference_request(const ApiContext& ctx,
                                               const std::vector<std::pair<std::string, std::string>>& images,
                                               std::vector<ChatMessage> messages, GenerateOptions options,
                                               InferenceRequest& out, const std::vector<int>& pages = {},
                                               const std::vector<VideoRef>& videos = {},
                                               const std::vector<DocumentRef>& documents = {});

// Submits the request and waits, checking the client every 100 ms, until the model has read the prompt.
// So a request the engine refuses (a prompt over the context) gets a 4xx even when it asked to stream.
Admitted submit_and_wait_start(ApiContext& ctx, InferenceRequest request, const http::PeerWatch& watch);

// A request's n choices (OpenAI's n) of one prompt, appended to `out` (which may hold the request's jobs for
// earlier prompts): choice 0 is `request` (sharing its prompt through the prefix cache when n > 1), choice i the
// same with the seed + i, admitted only once choice 0 has read the prompt, so the prompt and its images are read
// once. Each is submitted when the one before it has started (the images held twice at most: the later choices'
// copy and the one queued); a queue full of other requests is waited out while the request's jobs run. The
// server's timeout is one budget for all of the request's jobs, counted from `started` (its first submission).
// On an error (a job of the request that failed, the client gone, the time up) every job in `out` is cancelled.
std::optional<ApiError> submit_choices(ApiContext& ctx, InferenceRequest request, int n, const http::PeerWatch& watch,
                                       std::vector<Admitted>& out, std::chrono::steady_clock::time_point started);

// Waits for the end of an admitted job; a client that goes away cancels it (client_gone is then set).
JobUpdate wait_for_end(Admitted& admitted, const http::PeerWatch& watch, bool& client_gone);

// How a family writes a stream: bytes to send first, for each text piece, at the end, and for an error
// that ends the stream (a timeout while streaming).
struct StreamFormat {
  std::string start;
  // A text piece and the log-probabilities of the tokens generated with it (empty unless asked for; a piece
  // may have tokens but no text yet, held back by a stop string or an incomplete character).
  std::function<std::string(std::string_view text, const std::vector<TokenLogprob>& logprobs)> text;
  std::function<std::string(const JobUpdate& end)> done;
  std::function<std::string(const ApiError& error)> error;
};

// Answers with a chunked response that streams the admitted job. A client that goes away (failed write,
// closed socket) or stops reading for the write timeout cancels the job at once.
void stream_job(http::Response& res, const char* content_type, Admitted admitted, http::PeerWatch watch,
                StreamFormat format);

// The same for several jobs streamed side by side (a request's choices): each piece as it comes, named by
// its choice (the job's index); `done` at each one's end and `all_done` after the last. A job that fails ends
// the stream with `error` and cancels the others.
struct ChoicesStreamFormat {
  std::string start;
  std::function<std::string(size_t choice, std::string_view text, const std::vector<TokenLogprob>& logprobs)> text;
  std::function<std::string(size_t choice, const JobUpdate& end)> done;
  std::function<std::string(const std::vector<JobUpdate>& ends)> all_done;
  std::function<std::string(const ApiError& error)> error;
};
void stream_jobs(http::Response& res, const char* content_type, std::vector<Admitted> admitted, http::PeerWatch watch,
                 ChoicesStreamFormat format);

// Route tables, one per API family.
void add_openai_routes(http::Router& routes, ApiContext& ctx);
void add_ollama_routes(http::Router& routes, ApiContext& ctx);
void add_legacy_routes(http::Router& routes, ApiContext& ctx);
void add_completion_routes(http::Router& routes, ApiContext& ctx);  // /v1/completions
void add_tokenize_routes(http::Router& routes, ApiContext& ctx);    // /tokenize, /detokenize, /apply-template
void add_responses_routes(http::Router& routes, ApiContext& ctx);   // /v1/responses, /v1/responses/{id}[/input_items]
void add_document_routes(http::Router& routes, ApiContext& ctx);    // /v1/documents/pages (PDF page previews)
void add_retrieval_routes(http::Router& routes, ApiContext& ctx);   // /v1/embeddings, /api/embed, /v1/rerank

}  // namespace qvl::server
