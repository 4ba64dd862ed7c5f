// What the HTTP API files share: the context routes run in, errors in each API's shape, typed JSON field
// reading, and running a Job to its end or streaming it while watching the client.
#include "server/api.h"
#include "tensor/quant.h"
#include "model/tensor_specs.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <semaphore>
#include <cstdio>
#include <thread>
#include <random>

#include "engine/image_cache.h"
#include "server/json_limits.h"

namespace qvl::server {

namespace {

std::string field(const std::string& where, const char* key) { return where.empty() ? key : where + "." + key; }

const json* find(const json& obj, const char* key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

Status wrong_type(const std::string& name, const char* expected, const json& got) {
  return Status::Error(name + ": expected " + expected + ", got " + std::string(got.type_name()) +
                       (got.is_primitive() ? " " + dump_json(got).substr(0, 40) : ""));
}

const char* openai_type(int status) {
  if (status == 401) return "authentication_error";
  if (status == 403) return "permission_error";
  if (status < 500) return "invalid_request_error";
  return "server_error";
}

}  // namespace

ApiFamily family_of(std::string_view path) {
  if (path == "/v1/vision/completion" || path == "/chat") return ApiFamily::kLegacy;
  if (path.substr(0, 4) == "/v1/" || path == "/v1") return ApiFamily::kOpenAI;
  if (path.substr(0, 5) == "/api/") return ApiFamily::kOllama;
  return ApiFamily::kPlain;
}

std::string dump_json(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

void send_json(http::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(dump_json(body), "application/json");
}

json openai_error_body(const ApiError& e) {
  json err;
  err["message"] = e.message;
  err["type"] = openai_type(e.status);
  err["param"] = e.param.empty() ? json(nullptr) : json(e.param);
  err["code"] = e.code.empty() ? json(nullptr) : json(e.code);
  return json{{"error", err}};
}

void send_error(http::Response& res, ApiFamily family, const ApiError& e) {
  if (e.retry_after_s > 0) res.set_header("Retry-After", std::to_string(e.retry_after_s));
  if (e.status == 401) res.set_header("WWW-Authenticate", "Bearer");
  if (family == ApiFamily::kOpenAI) return send_json(res, e.status, openai_error_body(e));
  send_json(res, e.status, json{{"error", e.message}});
}

Result<json> parse_json_body(const http::Request& req) { return parse_json_text(req.body); }

Result<json> parse_json_text(std::string_view text) {
  if (text.empty()) return Status::Error("the request body is empty; expected a JSON object");
  // Depth, value count and string length bounded before the parser (and later copies) see the document.
  QVL_RETURN_IF_ERROR(check_json_limits(text).with_context("the request body"));
  try {
    json j = json::parse(text);
    if (!j.is_object()) return Status::Error(std::string("the request body must be a JSON object, got ") + j.type_name());
    return j;
  } catch (const json::parse_error& e) {
    // e.what(): "[json.exception.parse_error.101] parse error at line 1, column 2: syntax error ..."
    std::string what = e.what();
    const size_t at = what.find("parse error");
    return Status::Error("the request body is not valid JSON: " + (at == std::string::npos ? what : what.substr(at)));
  } catch (const json::exception& e) {
    // out_of_range.406: a number too large for a double (1e400).
    std::string what = e.what();
    const size_t at = what.find("] ");
    return Status::Error("the request body has a value JSON cannot hold: " +
                         (at == std::string::npos ? what : what.substr(at + 2)) + "; numbers must fit a double");
  }
}

Status read_bool(const json& obj, const char* key, bool& out, const std::string& where) {
  const json* v = find(obj, key);
  if (!v) return Status::Ok();
  if (!v->is_boolean()) return wrong_type(field(where, key), "true or false", *v);
  out = v->get<bool>();
  return Status::Ok();
}

Status read_tool_choice(const json& body, GenerateOptions& options, bool& parse_calls, bool& required) {
  parse_calls = !options.chat.tools.empty();
  required = false;
  std::string name;
  if (auto tc = body.find("tool_choice"); tc != body.end() && !tc->is_null()) {
    if (tc->is_string() && (*tc == "none" || *tc == "auto" || *tc == "required")) {
      if (*tc == "none") {  // the model is not told about the tools, and its answer is text
        options.chat.tools.clear();
        parse_calls = false;
      }
      required = *tc == "required";
    } else if (tc->is_object() && tc->contains("function") && (*tc)["function"].is_object() &&
               (*tc)["function"].contains("name") && (*tc)["function"]["name"].is_string()) {
      name = (*tc)["function"]["name"].get<std::string>();
      required = true;
    } else {
      return Status::Error("tool_choice: expected \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
                           "\"function\": {\"name\": ...}}, got " + tc->dump());
    }
  }
  if (required) {
    if (Status s = require_tool_call(options, name); !s.ok()) return Status::Error("tool_choice: " + s.message());
  }
  return Status::Ok();
}

Status read_float(const json& obj, const char* key, float& out, const std::string& where) {
  const json* v = find(obj, key);
  if (!v) return Status::Ok();
  if (!v->is_number()) return wrong_type(field(where, key), "a number", *v);
  out = v->get<float>();
  return Status::Ok();
}

Status read_int(const json& obj, const char* key, int64_t& out, const std::string& where) {
  const json* v = find(obj, key);
  if (!v) return Status::Ok();
  if (v->is_number_float()) {
    const double d = v->get<double>();
    if (!(std::fabs(d) < 9.2e18) || d != std::trunc(d)) return wrong_type(field(where, key), "an integer", *v);
    out = static_cast<int64_t>(d);
    return Status::Ok();
  }
  if (v->is_number_unsigned()) {
    out = static_cast<int64_t>(v->get<uint64_t>());  // seeds may use the full 64 bits
    return Status::Ok();
  }
  if (!v->is_number_integer()) return wrong_type(field(where, key), "an integer", *v);
  out = v->get<int64_t>();
  return Status::Ok();
}

Status read_string(const json& obj, const char* key, std::string& out, const std::string& where) {
  const json* v = find(obj, key);
  if (!v) return Status::Ok();
  if (!v->is_string()) return wrong_type(field(where, key), "a string", *v);
  out = v->get<std::string>();
  return Status::Ok();
}

Status read_stop(const json& obj, const char* key, std::vector<std::string>& out, const std::string& where) {
  const json* v = find(obj, key);
  if (!v) return Status::Ok();
  out.clear();
  if (v->is_string()) {
    out.push_back(v->get<std::string>());
    return Status::Ok();
  }
  if (!v->is_array()) return wrong_type(field(where, key), "a string or a list of strings", *v);
  if (v->size() > 16) return Status::Error(field(where, key) + ": at most 16 stop strings, got " + std::to_string(v->size()));
  for (size_t i = 0; i < v->size(); ++i) {
    if (!(*v)[i].is_string()) return wrong_type(field(where, key) + "[" + std::to_string(i) + "]", "a string", (*v)[i]);
    out.push_back((*v)[i].get<std::string>());
  }
  return Status::Ok();
}

Status read_max_tokens(const json& obj, const char* key, int& out, const std::string& where, bool allow_zero) {
  int64_t n = out;
  QVL_RETURN_IF_ERROR(read_int(obj, key, n, where));
  const int64_t lo = allow_zero ? 0 : 1;
  if (n < lo || n > (1 << 20)) {
    return Status::Error(field(where, key) + ": must be in [" + std::to_string(lo) + ", 1048576], got " + std::to_string(n));
  }
  out = static_cast<int>(n);
  return Status::Ok();
}

Status read_logprobs(const json& obj, const char* flag_key, const char* top_key, int& out, const std::string& where) {
  bool on = false;
  QVL_RETURN_IF_ERROR(read_bool(obj, flag_key, on, where));
  constexpr int64_t kUnset = std::numeric_limits<int64_t>::min();  // not -1: a client's -1 is refused
  int64_t top = kUnset;
  QVL_RETURN_IF_ERROR(read_int(obj, top_key, top, where));
  if (top != kUnset && (top < 0 || top > kMaxTopLogprobs))
    return Status::Error(field(where, top_key) + ": expected 0 to " + std::to_string(kMaxTopLogprobs) + ", got " + std::to_string(top));
  if (top >= 0 && !on)
    return Status::Error(field(where, top_key) + ": needs " + field(where, flag_key) + " set to true");
  out = on ? static_cast<int>(std::max<int64_t>(top, 0)) : -1;
  return Status::Ok();
}

Status read_logit_bias(const json& obj, const char* key, std::vector<std::pair<int32_t, float>>& out,
                       const std::string& where) {
  out.clear();
  const json* v = find(obj, key);
  if (!v) return Status::Ok();
  const std::string name = field(where, key);
  if (!v->is_object()) return wrong_type(name, "an object of token ids to biases, such as {\"151645\": -100}", *v);
  std::map<int32_t, float> bias;
  for (const auto& [k, b] : v->items()) {
    const bool digits = !k.empty() && std::all_of(k.begin(), k.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (!digits) return Status::Error(name + ": the key '" + k.substr(0, 40) + "' is not a token id; expected a decimal id such as \"151645\"");
    const size_t first = std::min(k.find_first_not_of('0'), k.size() - 1);  // "007" is 7
    if (k.size() - first > 9)
      return Status::Error(name + ": token id " + k.substr(0, 40) + " is outside the vocabulary; expected an id such as \"151645\"");
    const int64_t id = std::stoll(k.substr(first));
    if (!b.is_number()) return wrong_type(name + "." + k, "a number in [-100, 100]", b);
    const double d = b.get<double>();
    if (!(d >= -SamplingParams::kMaxLogitBias && d <= SamplingParams::kMaxLogitBias))
      return Status::Error(name + "." + k + ": expected a bias in [-100, 100], got " + b.dump());
    if (!bias.emplace(static_cast<int32_t>(id), static_cast<float>(d)).second)
      return Status::Error(name + ": token " + std::to_string(id) + " is given twice (as '" + k + "' and another spelling)");
  }
  out.assign(bias.begin(), bias.end());
  return Status::Ok();
}

uint64_t random_seed() {
  static thread_local std::mt19937_64 gen{std::random_device{}()};
  return gen();
}

std::optional<ApiError> check_ready(const ApiContext& ctx) {
  switch (ctx.scheduler.state()) {
    case LoadState::kReady: return std::nullopt;
    case LoadState::kLoading: return submit_error(SubmitError::kLoading, ctx);
    case LoadState::kFailed: return submit_error(SubmitError::kLoadFailed, ctx);
  }
  return std::nullopt;
}

std::optional<ApiError> check_ready(const ApiContext& ctx, ModelKind wanted) {
  if (auto e = check_ready(ctx)) return e;
  const ModelKind kind = ctx.scheduler.model()->kind();
  if (kind == wanted) return std::nullopt;
  const char* article = kind == ModelKind::kChat ? "a" : "a Qwen3-VL";
  return ApiError{400, "the loaded model '" + ctx.options.model_id + "' is " + article + " " + model_kind_name(kind) +
                           " model: it serves " + model_kind_serves(kind) + ", not " + model_kind_serves(wanted) +
                           "; start qvl serve with " + (wanted == ModelKind::kChat ? "a chat" : wanted == ModelKind::kEmbedding ? "an embedding" : "a reranker") +
                           " model for this endpoint",
                  "model_not_supported"};
}

ApiError submit_error(SubmitError e, const ApiContext& ctx) {
  switch (e) {
    case SubmitError::kLoading:
      return {503, "the model is still loading; retry in a few seconds (GET /health says when it is ready)", "loading", "", 5};
    case SubmitError::kLoadFailed:
      return {500, "the model failed to load: " + ctx.scheduler.load_error(), "model_load_failed"};
    case SubmitError::kQueueFull:
      return {503,
              "the server is busy: " + std::to_string(ctx.scheduler.busy_slots()) + " requests running and " +
                  std::to_string(ctx.scheduler.queue_depth()) + " waiting (--parallel " +
                  std::to_string(ctx.options.parallel) + ", --queue " + std::to_string(ctx.options.queue) +
                  "); retry later",
              "overloaded", "", 2};
    case SubmitError::kShuttingDown:
      return {503, "the server is shutting down; retry on another instance or after it restarts", "shutting_down", "", 5};
    case SubmitError::kNone: break;
  }
  return {500, "internal error: no submit error"};
}

ApiError job_error(const JobUpdate& u) {
  switch (u.error) {
    case JobError::kInvalidRequest: return {400, u.error_message};
    case JobError::kContextLength: return {400, u.error_message, "context_length_exceeded"};
    case JobError::kTimeout: return {504, u.error_message, "timeout"};
    case JobError::kShutdown: return {503, u.error_message, "shutting_down", "", 5};
    case JobError::kCancelled: return {499, u.error_message, "cancelled"};
    case JobError::kInternal: return {500, u.error_message, "internal_error"};
    case JobError::kNone: break;
  }
  return {500, "internal error: no job error"};
}

json model_description(const ApiContext& ctx) {
  const Model* m = ctx.scheduler.model();
  if (!m) return nullptr;
  const ModelFacts& f = m->facts();
  const ModelConfig& c = m->config();
  return json{{"architecture", "Qwen3-VL"},
              {"kind", model_kind_name(m->kind())},
              {"parameters", f.parameters},
              {"size", f.parameter_size},
              {"format", f.format},
              {"chat_template", chat_template_kind_name(m->chat_template())},
              {"text_layers", c.text.num_hidden_layers},
              {"hidden_size", c.text.hidden_size},
              {"vision", f.vision},
              {"vision_depth", f.vision ? c.vision.depth : 0},
              {"tied_embeddings", c.text.tie_word_embeddings},
              {"text_weights", weight_type_name(f.text_weights)},
              {"vision_weights", f.vision ? json(weight_type_name(f.vision_weights)) : json(nullptr)}};
}

ChatTemplateKind chat_template(const ApiContext& ctx) {
  const Model* model = ctx.scheduler.model();
  return model ? model->chat_template() : ChatTemplateKind::kInstruct;
}

Result<bool> show_reasoning(const ApiContext& ctx, std::optional<bool> think, const std::string& field) {
  const bool thinking = chat_template(ctx) == ChatTemplateKind::kThinking;
  if (think.value_or(false) && !thinking)
    return Status::Error(field + ": the model '" + ctx.options.model_id + "' does not support thinking (its chat "
                         "template has no reasoning; load a Qwen3-VL Thinking model)");
  return thinking && think.value_or(true);
}

// Video decodes running at once in this process (each holds a core and its sampled frames).
std::counting_semaphore<>& video_decoders() {
  static std::counting_semaphore<> gate(2);
  return gate;
}

ImageBudget image_budget(const ApiContext& ctx, const GenerateOptions& options) {
  const Model* model = ctx.scheduler.model();
  const ImageProcessorConfig pc = model ? model->image_config() : ImageProcessorConfig{};
  return ImageBudget(options.context, options.image.min_pixels > 0 ? options.image.min_pixels : pc.min_pixels,
                     options.image.max_pixels > 0 ? options.image.max_pixels : pc.max_pixels, pc.factor());
}

std::optional<ApiError> check_queue_room(const ApiContext& ctx) {
  if (!ctx.scheduler.model()) return submit_error(SubmitError::kLoading, ctx);
  const int room = ctx.options.queue + std::max(0, ctx.scheduler.slots() - ctx.scheduler.busy_slots()) -
                   ctx.scheduler.queue_depth();
  if (room <= 0) return submit_error(SubmitError::kQueueFull, ctx);
  return std::nullopt;
}

std::chrono::steady_clock::time_point request_deadline(const ApiContext& ctx) {
  return std::chrono::steady_clock::now() +
         std::chrono::duration_cast<std::chrono::steady_clock::duration>(
             std::chrono::duration<double>(ctx.options.timeout_s > 0 ? ctx.options.timeout_s : 3600.0));
}

std::optional<ApiError> load_image_for_request(const ApiContext& ctx, ImageBudget& budget, GenerateOptions& options,
                                               size_t k, std::string_view ref, const std::string& where, int page,
                                               bool raw_bytes, ImageRGB& out) {
  const Model* model = ctx.scheduler.model();
  const ImageProcessorConfig pc = model ? model->image_config() : ImageProcessorConfig{};
  // The image's own bounds, as the session will preprocess it (image_options).
  const PreprocessOptions o = image_options(options, k, pc);
  budget.set_bounds(o.min_pixels, o.max_pixels, o.resized_height, o.resized_width);
  budget.set_page(page);
  auto img = raw_bytes ? decode_request_image(ref, ctx.images, where, &budget)
                       : load_request_image(ref, ctx.images, where, &budget);
  if (!img.ok()) {
    if (budget.busy()) return ApiError{503, img.status().message(), "busy", where, 2};
    return ApiError{400, img.status().message(), budget.over_context() ? "context_length_exceeded" : "invalid_image", where};
  }
  return fit_to_model(ctx, budget, options, k, std::move(img), where, out);
}

std::optional<ApiError> load_page_for_request(const ApiContext& ctx, ImageBudget& budget, GenerateOptions& options,
                                              size_t k, const LoadedDocument& doc, const RequestImage& page,
                                              std::chrono::steady_clock::time_point deadline, ImageRGB& out) {
  const Model* model = ctx.scheduler.model();
  const ImageProcessorConfig pc = model ? model->image_config() : ImageProcessorConfig{};
  const PreprocessOptions o = image_options(options, k, pc);
  budget.set_bounds(o.min_pixels, o.max_pixels, o.resized_height, o.resized_width);
  const std::string where = page.where + " (page " + std::to_string(page.plan.number) + ")";
  // Counted against the context (with the request's other images) and given its memory before it is rendered.
  auto admitted = budget.admit_size(page.plan.width, page.plan.height);
  if (!admitted.ok()) {
    if (budget.busy()) return ApiError{503, admitted.status().message(), "busy", page.where, 2};
    return ApiError{400, where + ": " + admitted.status().message(),
                    budget.over_context() ? "context_length_exceeded" : "invalid_pages", page.where};
  }
  std::shared_ptr<const ImageRGB> pixels;
  if (ctx.page_cache) pixels = ctx.page_cache->find_page(doc.key, page.plan);
  if (!pixels) {
    // Within the request's time: its pages are not rendered past its deadline, each at most the time left.
    const double left = std::chrono::duration<double>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0.5)
      return ApiError{503, "the request's time limit (--timeout) ran out while its pages were rendered", "timeout", page.where};
    DocumentWorkerTurn turn(deadline);
    if (!turn.ok())
      return ApiError{503, "the server is busy rendering other documents' pages; retry in a few seconds", "busy", page.where, 2};
    DocumentOptions limits = ctx.documents;
    limits.pdf.render_timeout_s = std::min(limits.pdf.render_timeout_s, left);
    PdfFailure why = PdfFailure::kDocument;
    auto rendered = render_document_page(doc.bytes, doc.key, *doc.info, page.plan, ctx.page_cache, limits, nullptr, &why);
    if (!rendered.ok())
      return ApiError{document_status(why), page.where + ": " + rendered.status().message(),
                      why == PdfFailure::kServer ? "busy" : "invalid_document", page.where};
    pixels = *rendered;
  }
  return fit_to_model(ctx, budget, options, k, Result<ImageRGB>(ImageRGB(*pixels)), where, out);
}

std::optional<ApiError> fit_to_model(const ApiContext& ctx, ImageBudget& budget, GenerateOptions& options, size_t k,
                                     Result<ImageRGB> img, const std::string& where, ImageRGB& out) {
  const Model* model = ctx.scheduler.model();
  const ImageProcessorConfig pc = model ? model->image_config() : ImageProcessorConfig{};
  const PreprocessOptions o = image_options(options, k, pc);
  // Resized now to the size the model sees (preprocess_size and the resize the session runs), so the
  // full-size pixels go before the next image decodes. The image's options then ask for that exact size, so
  // the session's preprocessing finds it at its size (the identity); where that would not give the same size
  // again (a size under the exact path's floor of 4 tokens: a tiny image), it stays as decoded.
  auto size = preprocess_size(*img, pc, o);
  if (!size.ok()) return ApiError{400, where + ": " + size.status().message(), "invalid_image", where};
  if (size->width != img->width || size->height != img->height) {
    if (options.per_image.size() <= k) options.per_image.resize(k + 1);
    const PreprocessOptions before = options.per_image[k];
    options.per_image[k].resized_height = size->height;
    options.per_image[k].resized_width = size->width;
    const ImageRGB probe{size->width, size->height, {}};
    auto again = preprocess_size(probe, pc, image_options(options, k, pc));
    if (again.ok() && again->width == size->width && again->height == size->height) {
      ImageRGB resized = resize_bicubic_antialias(*img, size->width, size->height, o.pil_resize);
      img = Result<ImageRGB>(ImageRGB{});  // the full-size pixels, freed here
      out = std::move(resized);
    } else {
      options.per_image[k] = before;
      out = std::move(img).value();
    }
  } else {
    out = std::move(img).value();
  }
  budget.release_decode();
  return std::nullopt;
}

// One video of a request: one of the video decoders taken (the probe may decode a frame or two), its metadata
// read and its sampling planned, its decode's memory reserved from the server's budget (ctx.decode_memory;
// waited for until the deadline, else 503), then decoded, sampled and made patches; the decoder and the
// memory go back as soon as the patches exist, on every path.
std::optional<ApiError> load_video_for_request(const ApiContext& ctx, const VideoRef& v, const VideoOptions& vo,
                                               std::chrono::steady_clock::time_point deadline, PreprocessedVideo& out) {
  const auto invalid = [&](const std::string& why) { return ApiError{400, why, "invalid_video", v.where}; };
  if (!video_supported()) return invalid(v.where + ": this server was built without video support (FFmpeg)");
  auto bytes = load_request_video_bytes(v.ref, ctx.images, v.where);
  if (!bytes.ok()) return invalid(bytes.status().message());
  const Model* model = ctx.scheduler.model();
  VideoDecodeLimits limits = ctx.images.video_limits;
  limits.keep_going = [deadline] { return std::chrono::steady_clock::now() < deadline; };

  if (!video_decoders().try_acquire_until(deadline))
    return ApiError{503, "the server is busy decoding other videos; retry in a few seconds", "busy", "", 2};
  struct Held {  // what this video holds, given back on every path out
    DecodeMemory* memory = nullptr;
    uint64_t bytes = 0;
    ~Held() {
      if (memory) memory->release(bytes);
      video_decoders().release();
    }
  } held;

  auto info = probe_video(*bytes, limits);
  if (!info.ok()) return invalid(v.where + ": " + info.status().message());
  auto plan = plan_video(*info, model->video_config(), vo);
  if (!plan.ok()) return invalid(v.where + ": " + plan.status().message());
  const uint64_t charge = DecodeMemory::video_bytes(int64_t{info->stored_width} * info->stored_height,
                                                    static_cast<int64_t>(plan->indices.size()),
                                                    int64_t{plan->resized.width} * plan->resized.height);
  if (ctx.decode_memory) {
    const auto mib = [](uint64_t b) { return std::to_string((b + (1u << 20) - 1) >> 20); };  // rounded up
    switch (ctx.decode_memory->acquire(charge, deadline)) {
      case DecodeMemory::Got::kOk:
        held.memory = ctx.decode_memory;
        held.bytes = charge;
        break;
      case DecodeMemory::Got::kTooLarge:
        return invalid(v.where + ": decoding this " + std::to_string(info->stored_width) + "x" +
                       std::to_string(info->stored_height) + " video (" + std::to_string(plan->indices.size()) +
                       " frames kept) takes " + mib(charge) + " MiB (" + std::to_string(charge) + " bytes), over the "
                       "server's decode memory of " + mib(ctx.decode_memory->capacity()) + " MiB (--decode-memory-mb); "
                       "send a smaller video or fewer frames (fps, max_frames)");
      case DecodeMemory::Got::kBusy:
        return ApiError{503, "the server is decoding other images or videos and has no room for " + v.where +
                             " before the request's deadline; retry in a moment", "busy", v.where, 2};
    }
  }
  auto pre = preprocess_video_file(*bytes, model->video_config(), vo, limits);
  if (!pre.ok()) return invalid(v.where + ": " + pre.status().message());
  // The groups' cache keys, hashed here rather than on the inference thread.
  for (const PreprocessedImage& g : pre->groups) pre->group_keys.push_back(frame_group_key(g));
  out = std::move(pre).value();
  return std::nullopt;
}

std::optional<ApiError> make_inference_request(const ApiContext& ctx,
                                               const std::vector<std::pair<std::string, std::string>>& images,
                                               std::vector<ChatMessage> messages, GenerateOptions options,
                                               InferenceRequest& out, const std::vector<int>& pages,
                                               const std::vector<VideoRef>& videos,
                                               const std::vector<DocumentRef>& documents) {
  ImageBudget budget = image_budget(ctx, options);
  const Model* model = ctx.scheduler.model();
  {  // URLs cost a fetch each (up to --media-url-timeout): a request names a few at most
    size_t urls = 0;
    for (const auto& [ref, where] : images) urls += is_media_url(ref);
    for (const VideoRef& v : videos) urls += is_media_url(v.ref);
    for (const DocumentRef& d : documents) urls += is_media_url(d.ref);
    if (urls > kMaxUrlsPerRequest)
      return ApiError{400, "the request names " + std::to_string(urls) + " image and video URLs; at most " +
                               std::to_string(kMaxUrlsPerRequest) + " are fetched per request (send the others inline)",
                      "too_many_urls"};
  }
  // A text model (a GGUF served without its vision file) refuses images before any is decoded.
  if (model && !model->has_vision() && (!images.empty() || !videos.empty() || !documents.empty()))
    return ApiError{400, no_vision_error(*model, images.size() + documents.size(), videos.size()).message(),
                    "model_has_no_vision",
                    !images.empty() ? images[0].second : !documents.empty() ? documents[0].where : videos[0].where};
  // Images and videos are decoded here, in the HTTP worker, before the request is queued: only when the model
  // is loaded and the queue has room (a request the queue would refuse decodes nothing).
  if (!images.empty() || !videos.empty() || !documents.empty()) {
    if (auto e = check_queue_room(ctx)) return e;
  }
  const auto deadline = request_deadline(ctx);
  budget.use_memory(ctx.decode_memory, deadline);
  std::vector<RequestImage> all(images.size());
  for (size_t k = 0; k < images.size(); ++k) {
    all[k].ref = images[k].first;
    all[k].where = images[k].second;
    all[k].page = k < pages.size() ? pages[k] : 0;
  }
  std::vector<LoadedDocument> docs;
  if (auto e = expand_documents(ctx, documents, messages, options, all, docs, deadline)) return e;
  for (size_t k = 0; k < all.size(); ++k) {
    const RequestImage& ri = all[k];
    ImageRGB img;
    if (ri.document >= 0) {
      if (auto e = load_page_for_request(ctx, budget, options, k, docs[static_cast<size_t>(ri.document)], ri, deadline, img))
        return e;
    } else if (auto e = load_image_for_request(ctx, budget, options, k, ri.ref, ri.where, ri.page, false, img)) {
      return e;
    }
    out.images.push_back(std::move(img));
  }
  int64_t video_tokens = 0;
  for (const VideoRef& v : videos) {
    VideoOptions vo = v.options;
    vo.max_tokens = std::max<int64_t>(0, options.context - budget.tokens() - video_tokens);
    PreprocessedVideo pre;
    if (auto e = load_video_for_request(ctx, v, vo, deadline, pre)) return e;
    video_tokens += static_cast<int64_t>(pre.grid_t) * pre.tokens_per_group();
    out.videos.push_back(std::make_shared<const PreprocessedVideo>(std::move(pre)));
  }
  out.messages = std::move(messages);
  out.options = std::move(options);
  out.timeout_s = ctx.options.timeout_s;
  return std::nullopt;
}

namespace {
// Waits, checking the client every 100 ms, until the submitted job has read its prompt's start or failed; also
// stops (cancelling the job) when `stop` gives an error.
void wait_start(Admitted& a, const http::PeerWatch& watch, const std::function<std::optional<ApiError>()>& stop = {}) {
  for (;;) {
    JobUpdate u = a.job->wait(std::chrono::milliseconds(100));
    if (u.finished && u.error != JobError::kNone) {
      a.error = job_error(u);
      return;
    }
    if (u.started || u.finished) {
      a.first = std::move(u);
      return;
    }
    if (!watch.alive()) {
      a.job->cancel();
      a.client_gone = true;
      a.error = ApiError{499, "the client went away", "cancelled"};
      return;
    }
    if (stop) {
      if (auto e = stop()) {
        a.job->cancel();
        a.error = std::move(e);
        return;
      }
    }
  }
}
}  // namespace

Admitted submit_and_wait_start(ApiContext& ctx, InferenceRequest request, const http::PeerWatch& watch) {
  Admitted a;
  Scheduler::Submitted s = ctx.scheduler.submit(std::move(request));
  if (s.error != SubmitError::kNone) {
    a.error = submit_error(s.error, ctx);
    return a;
  }
  a.job = std::move(s.job);
  wait_start(a, watch);
  return a;
}

std::optional<ApiError> submit_choices(ApiContext& ctx, InferenceRequest request, int n, const http::PeerWatch& watch,
                                       std::vector<Admitted>& out, std::chrono::steady_clock::time_point started) {
  QVL_CHECK(n >= 1);
  auto fail = [&](ApiError e) {
    for (Admitted& a : out)
      if (a.job) a.job->cancel();
    return std::optional<ApiError>(std::move(e));
  };
  // A job of the request that failed (a timeout, an image that would not encode) fails it: no more start.
  auto failed = [&]() -> std::optional<ApiError> {
    for (Admitted& a : out)
      if (a.job->failed()) return job_error(a.job->wait(std::chrono::milliseconds(0)));
    return std::nullopt;
  };
  // The server's timeout is one budget for the whole request, counted from `started`.
  const double timeout_s = request.timeout_s;
  auto out_of_time = [&]() -> std::optional<ApiError> {
    if (timeout_s <= 0 || std::chrono::steady_clock::now() - started < std::chrono::duration<double>(timeout_s))
      return std::nullopt;
    char t[32];
    std::snprintf(t, sizeof t, "%g", timeout_s);
    return ApiError{504, std::string("the request's answers ran past the server's timeout of ") + t +
                             " s; ask for fewer (n) or shorter (max_tokens) answers, or raise --timeout",
                    "timeout"};
  };
  // Choice 0 keeps its prompt in the prefix cache for the others (a prompt read with its log-probabilities is
  // read again by each: nothing is restored for it).
  request.options.share_prompt = n > 1 && request.options.prompt_logprobs < 0;
  request.timeout_from = started;
  std::optional<InferenceRequest> next;  // the later choices' request (one copy of the images, until the last)
  if (n > 1) {
    next = request;
    next->options.share_prompt = false;
  }
  const uint64_t seed = request.options.sampling.seed;
  const size_t first = out.size();  // this prompt's choice 0
  for (int i = 0; i < n; ++i) {
    InferenceRequest r;
    if (i == 0) {
      r = std::move(request);
    } else if (i + 1 < n) {
      r = *next;
    } else {
      r = std::move(*next);
      next.reset();
    }
    r.options.sampling.seed = seed + static_cast<uint64_t>(i);
    if (i > 0) r.same_prompt_as = out[first].job;
    for (;;) {
      if (!watch.alive()) return fail(ApiError{499, "the client went away", "cancelled"});
      if (auto e = failed()) return fail(*e);
      if (auto e = out.empty() ? std::nullopt : out_of_time()) return fail(*e);
      Scheduler::Submitted s = ctx.scheduler.submit_or_keep(r);
      if (s.error == SubmitError::kNone) {
        Admitted a;
        a.job = std::move(s.job);
        wait_start(a, watch, failed);
        if (a.error) return fail(*a.error);
        out.push_back(std::move(a));
        break;
      }
      // The queue is full of other requests: wait while this one's jobs run (a slot frees as one ends), within the
      // request's timeout.
      if (s.error != SubmitError::kQueueFull || out.empty()) return fail(submit_error(s.error, ctx));
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  return std::nullopt;
}

JobUpdate wait_for_end(Admitted& admitted, const http::PeerWatch& watch, bool& client_gone) {
  client_gone = false;
  JobUpdate u = std::move(admitted.first);
  while (!u.finished) {
    u = admitted.job->wait(std::chrono::milliseconds(200));
    if (!u.finished && !watch.alive()) {
      admitted.job->cancel();
      client_gone = true;
      return u;
    }
  }
  return u;
}

namespace {
// What a stream holds; a stream that never ran to its end (its header could not be sent, the server
// stopped) cancels its jobs when it is let go.
struct StreamState {
  std::vector<std::shared_ptr<Job>> jobs;
  std::vector<JobUpdate> first;
  std::shared_ptr<JobNotifier> notifier = std::make_shared<JobNotifier>();
  http::PeerWatch watch;
  ChoicesStreamFormat format;
  bool ended = false;
  ~StreamState() {
    if (ended) return;
    for (auto& job : jobs)
      if (job) job->cancel();
  }
};
}  // namespace

void stream_jobs(http::Response& res, const char* content_type, std::vector<Admitted> admitted, http::PeerWatch watch,
                 ChoicesStreamFormat format) {
  auto st = std::make_shared<StreamState>();
  for (Admitted& a : admitted) {
    a.job->notify_also(st->notifier);
    st->jobs.push_back(std::move(a.job));
    st->first.push_back(std::move(a.first));
  }
  st->watch = std::move(watch);
  st->format = std::move(format);
  res.status = 200;
  res.content_type = content_type;
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");  // proxies: do not hold the stream back
  // On a worker: each write waits until the client has taken the bytes, so a client that does not read
  // holds the stream (and, for the write timeout, the jobs) back instead of growing a buffer.
  res.stream = [st](http::ChunkSink& sink) {
    auto write = [&](const std::string& bytes) { return bytes.empty() || sink.write(bytes); };
    const size_t n = st->jobs.size();
    std::vector<JobUpdate> ends(n);
    std::vector<bool> ended(n, false);
    size_t left = n;
    if (!write(st->format.start)) return;  // ~StreamState cancels
    for (bool first = true;; first = false) {
      const uint64_t seen = st->notifier->count();
      bool news = false;
      for (size_t i = 0; i < n; ++i) {
        if (ended[i]) continue;
        JobUpdate u = first ? std::move(st->first[i]) : st->jobs[i]->wait(std::chrono::milliseconds(0));
        if (!u.text.empty() || !u.logprobs.empty()) {
          news = true;
          if (!write(st->format.text(i, u.text, u.logprobs))) return;
        }
        if (!u.finished) continue;
        news = true;
        if (u.error != JobError::kNone) {
          st->ended = true;
          for (auto& job : st->jobs) job->cancel();
          if (u.error != JobError::kCancelled) write(st->format.error(job_error(u)));
          return;
        }
        ended[i] = true;
        --left;
        if (!write(st->format.done(i, u))) return;
        ends[i] = std::move(u);
      }
      if (left == 0) {
        st->ended = true;
        write(st->format.all_done(ends));
        return;
      }
      if (!st->watch.alive()) return;
      // (The first pass took the updates the jobs had when they started; what came since is polled at once.)
      if (!news && !first) st->notifier->wait_past(seen, std::chrono::milliseconds(100));
    }
  };
}

void stream_job(http::Response& res, const char* content_type, Admitted admitted, http::PeerWatch watch,
                StreamFormat format) {
  ChoicesStreamFormat f;
  f.start = std::move(format.start);
  f.text = [text = std::move(format.text)](size_t, std::string_view t, const std::vector<TokenLogprob>& lps) {
    return text(t, lps);
  };
  f.done = [done = std::move(format.done)](size_t, const JobUpdate& end) { return done(end); };
  f.all_done = [](const std::vector<JobUpdate>&) { return std::string(); };
  f.error = std::move(format.error);
  std::vector<Admitted> one;
  one.push_back(std::move(admitted));
  stream_jobs(res, content_type, std::move(one), std::move(watch), std::move(f));
}

}  // namespace qvl::server
