// The endpoints of the deployments qvl replaces, kept byte-compatible for their clients:
// POST /v1/vision/completion (multipart image + prompt -> {"result"}) and POST /chat (JSON image + question ->
// an SSE stream of {"delta"} events ending with [DONE]).
#include <algorithm>

#include "server/api.h"
#include "server/http/multipart.h"
#include "server/legacy_request.h"

namespace qvl::server {

namespace {

constexpr const char* kDefaultPrompt = "请描述这张图片";  // "Describe this picture"

InferenceRequest one_turn(const ApiContext& ctx, std::string prompt, std::vector<ImageRGB> images) {
  InferenceRequest ir;
  ir.messages.push_back(user_message(images.size(), std::move(prompt)));
  ir.images = std::move(images);
  ir.options = ctx.defaults;
  ir.options.max_tokens = std::min(ir.options.max_tokens, kLegacyDefaultMaxTokens);
  ir.options.sampling.seed = random_seed();
  ir.timeout_s = ctx.options.timeout_s;
  return ir;
}

// POST /v1/vision/completion: multipart/form-data with an "image" file and an optional "prompt".
void vision_completion(ApiContext& ctx, const http::Request& req, http::Response& res) {
  auto fail = [&](const ApiError& e) { send_error(res, ApiFamily::kLegacy, e); };
  if (auto e = check_ready(ctx, ModelKind::kChat)) return fail(*e);
  if (!http::is_multipart_form(req.header("Content-Type"))) {
    return fail({400, "expected multipart/form-data with an 'image' file field and an optional 'prompt' field, e.g. "
                      "curl -F image=@photo.jpg -F prompt=..."});
  }
  auto form = http::parse_multipart_form(req.header("Content-Type"), req.body);
  if (!form.ok()) return fail({400, form.status().message()});
  const http::FormField* image = http::find_field(*form, "image");
  if (!image) return fail({400, "the form has no 'image' field; attach the picture as image=@FILE"});
  const std::string& bytes = image->content;
  if (bytes.empty()) return fail({400, "the 'image' field is empty"});
  const http::FormField* prompt_field = http::find_field(*form, "prompt");
  std::string prompt = prompt_field ? prompt_field->content : "";
  if (prompt.empty()) prompt = kDefaultPrompt;
  if (auto e = check_queue_room(ctx)) return fail(*e);
  ImageBudget budget = image_budget(ctx, ctx.defaults);
  budget.use_memory(ctx.decode_memory, request_deadline(ctx));
  std::vector<ImageRGB> images(1);
  GenerateOptions image_opts = ctx.defaults;
  if (auto e = load_image_for_request(ctx, budget, image_opts, 0, bytes, "image", 0, true, images[0])) return fail(*e);
  InferenceRequest ir = one_turn(ctx, std::move(prompt), std::move(images));
  ir.options.per_image = image_opts.per_image;
  if (const http::FormField* max_tokens = http::find_field(*form, "max_tokens")) {
    if (Status s = parse_form_max_tokens(max_tokens->content, ir.options.max_tokens); !s.ok()) {
      return fail({400, s.message()});
    }
  }
  const http::PeerWatch& watch = req.peer;
  Admitted a = submit_and_wait_start(ctx, std::move(ir), watch);
  if (a.error) return fail(*a.error);
  bool gone = false;
  JobUpdate end = wait_for_end(a, watch, gone);
  if (gone) return fail({499, "the client went away"});
  if (end.error != JobError::kNone) return fail(job_error(end));
  send_json(res, 200, json{{"result", end.result.text}});
}

// POST /chat: {"image": base64 or data URI (optional), "question": "..."}, answered as text/event-stream.
void chat(ApiContext& ctx, const http::Request& req, http::Response& res) {
  auto fail = [&](const ApiError& e) { send_error(res, ApiFamily::kLegacy, e); };
  if (auto e = check_ready(ctx, ModelKind::kChat)) return fail(*e);
  auto body = parse_json_body(req);
  if (!body.ok()) return fail({400, body.status().message()});
  auto parsed = parse_legacy_chat(*body, ctx.defaults);
  if (!parsed.ok()) return fail({400, parsed.status().message()});
  LegacyChatRequest& r = *parsed;
  std::vector<ImageRGB> images;
  GenerateOptions image_opts = ctx.defaults;
  if (!r.image.empty()) {
    if (auto e = check_queue_room(ctx)) return fail(*e);
    ImageBudget budget = image_budget(ctx, ctx.defaults);
    budget.use_memory(ctx.decode_memory, request_deadline(ctx));
    images.resize(1);
    if (auto e = load_image_for_request(ctx, budget, image_opts, 0, r.image, "image", 0, false, images[0]))
      return fail(*e);
  }
  InferenceRequest ir = one_turn(ctx, std::move(r.question), std::move(images));
  ir.options.per_image = image_opts.per_image;
  ir.options.max_tokens = r.max_tokens;
  const http::PeerWatch& watch = req.peer;
  Admitted a = submit_and_wait_start(ctx, std::move(ir), watch);
  if (a.error) return fail(*a.error);
  StreamFormat f;
  f.text = [](std::string_view text, const std::vector<TokenLogprob>&) { return "data: " + dump_json(json{{"delta", std::string(text)}}) + "\n\n"; };
  f.done = [](const JobUpdate&) { return std::string("data: [DONE]\n\n"); };
  f.error = [](const ApiError& e) { return "data: " + dump_json(json{{"error", e.message}}) + "\n\ndata: [DONE]\n\n"; };
  stream_job(res, "text/event-stream; charset=utf-8", std::move(a), watch, std::move(f));
}

}  // namespace

void add_legacy_routes(http::Router& routes, ApiContext& ctx) {
  routes.post("/v1/vision/completion",
            [&ctx](const http::Request& req, http::Response& res) { vision_completion(ctx, req, res); });
  routes.post("/chat", [&ctx](const http::Request& req, http::Response& res) { chat(ctx, req, res); });
}

}  // namespace qvl::server
