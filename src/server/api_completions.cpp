// POST /v1/completions, OpenAI's legacy text completion: raw prompts (text or token ids, no chat format), up to
// kMaxCompletionPrompts per request answered as choices, streaming (one prompt), echo and the legacy logprobs
// columns, the prompt's included under echo (what evaluation harnesses score).
#include "server/api.h"
#include "server/completion_request.h"
#include "server/logprobs_json.h"
#include "server/openai_shapes.h"

namespace qvl::server {

namespace {

json completion_chunk(const std::string& id, int64_t created, const std::string& model, size_t index, std::string text,
                      json logprobs, json finish_reason) {
  json choice{{"text", std::move(text)}, {"index", index}, {"logprobs", std::move(logprobs)},
              {"finish_reason", std::move(finish_reason)}};
  return json{{"id", id}, {"object", "text_completion"}, {"created", created}, {"model", model},
              {"system_fingerprint", "qvl"}, {"choices", json::array({std::move(choice)})}};
}

std::vector<const TokenLogprob*> pointers(const std::vector<TokenLogprob>& v, bool leading_null = false) {
  std::vector<const TokenLogprob*> out;
  if (leading_null) out.push_back(nullptr);
  for (const TokenLogprob& lp : v) out.push_back(&lp);
  return out;
}

void completions(ApiContext& ctx, const http::Request& req, http::Response& res) {
  auto fail = [&](const ApiError& e) { send_error(res, ApiFamily::kOpenAI, e); };
  if (auto e = check_ready(ctx, ModelKind::kChat)) return fail(*e);
  auto body = parse_json_body(req);
  if (!body.ok()) return fail({400, body.status().message()});
  auto parsed = parse_completion(*body, ctx.defaults);
  if (!parsed.ok()) return fail({400, parsed.status().message()});
  CompletionRequest& r = *parsed;
  const Tokenizer* tok = &ctx.scheduler.model()->tokenizer();
  const std::string model = r.model.empty() ? ctx.options.model_id : r.model;
  const std::string id = random_id("cmpl-");
  const int64_t created = unix_now();
  const http::PeerWatch& watch = req.peer;

  // Each prompt's ids and text (the text echoed back).
  std::vector<std::vector<int32_t>> ids;
  std::vector<std::string> texts;
  for (size_t i = 0; i < r.prompts.size(); ++i) {
    if (const auto* s = std::get_if<std::string>(&r.prompts[i])) {
      ids.push_back(tok->encode(*s, /*allow_special=*/true));
      texts.push_back(*s);
    } else {
      ids.push_back(std::get<std::vector<int32_t>>(r.prompts[i]));
      for (int32_t t : ids.back())
        if (t >= tok->vocab_size())
          return fail({400, "prompt: token id " + std::to_string(t) + " is outside the vocabulary [0, " +
                                std::to_string(tok->vocab_size()) + ")", "", "prompt"});
      texts.push_back(tok->decode(ids.back()));
    }
  }
  // Every prompt admitted before any is waited for: they run side by side in the scheduler's slots.
  std::vector<Admitted> jobs;
  auto cancel_all = [&] {
    for (Admitted& a : jobs)
      if (a.job) a.job->cancel();
  };
  for (size_t i = 0; i < ids.size(); ++i) {
    InferenceRequest ir;
    ir.options = r.options;
    ir.options.raw_prompt = std::move(ids[i]);
    ir.timeout_s = ctx.options.timeout_s;
    Admitted a = submit_and_wait_start(ctx, std::move(ir), watch);
    if (a.error) {
      cancel_all();
      ApiError e = *a.error;
      if (r.prompts.size() > 1 && e.status == 400) e.message = "prompt[" + std::to_string(i) + "]: " + e.message;
      return fail(e);
    }
    jobs.push_back(std::move(a));
  }

  if (!r.stream) {
    json choices = json::array();
    GenerateTimings total;
    JobUpdate last;
    for (size_t i = 0; i < jobs.size(); ++i) {
      bool gone = false;
      JobUpdate end = wait_for_end(jobs[i], watch, gone);
      if (gone) {
        cancel_all();
        return fail({499, "the client went away", "cancelled"});
      }
      if (end.error != JobError::kNone) {
        cancel_all();
        return fail(job_error(end));
      }
      const GenerateResult& g = end.result;
      json logprobs = nullptr;
      if (r.logprobs >= 0) {
        size_t offset = 0;
        if (r.echo) append_legacy_logprobs(*tok, g.prompt_ids, pointers(g.prompt_logprobs, true), offset, logprobs);
        append_legacy_logprobs(*tok, g.tokens, pointers(g.logprobs), offset, logprobs);
      }
      choices.push_back(json{{"text", (r.echo ? texts[i] : std::string()) + g.text}, {"index", i},
                             {"logprobs", std::move(logprobs)}, {"finish_reason", finish_reason_name(g.finish)}});
      total.prompt_tokens += g.timings.prompt_tokens;
      total.generated_tokens += g.timings.generated_tokens;
      total.cached_tokens += g.timings.cached_tokens;
      last = std::move(end);
    }
    json out{{"id", id}, {"object", "text_completion"}, {"created", created}, {"model", model},
             {"system_fingerprint", "qvl"}, {"choices", std::move(choices)}, {"usage", usage_json(total)}};
    if (jobs.size() == 1) out["timings"] = timings_json(last);
    return send_json(res, 200, out);
  }

  const bool usage = r.include_usage, with_logprobs = r.logprobs >= 0;
  auto offset = std::make_shared<size_t>(r.echo ? texts[0].size() : 0);
  StreamFormat f;
  if (r.echo) f.start = sse(completion_chunk(id, created, model, 0, texts[0], nullptr, nullptr));
  f.text = [=](std::string_view text, const std::vector<TokenLogprob>& lps) {
    json logprobs = nullptr;
    if (with_logprobs && !lps.empty()) {
      std::vector<int32_t> tokens;
      for (const TokenLogprob& lp : lps) tokens.push_back(lp.token);
      append_legacy_logprobs(*tok, tokens, pointers(lps), *offset, logprobs);
    }
    return sse(completion_chunk(id, created, model, 0, std::string(text), std::move(logprobs), nullptr));
  };
  f.done = [=](const JobUpdate& end) {
    json last = completion_chunk(id, created, model, 0, "", nullptr, finish_reason_name(end.result.finish));
    last["timings"] = timings_json(end);
    std::string out = sse(last);
    if (usage) {
      json u{{"id", id}, {"object", "text_completion"}, {"created", created}, {"model", model},
             {"system_fingerprint", "qvl"}, {"choices", json::array()}, {"usage", usage_json(end.result.timings)}};
      out += sse(u);
    }
    return out + "data: [DONE]\n\n";
  };
  f.error = [](const ApiError& e) { return sse(openai_error_body(e)) + "data: [DONE]\n\n"; };
  stream_job(res, "text/event-stream", std::move(jobs[0]), watch, std::move(f));
}

}  // namespace

void add_completion_routes(http::Router& routes, ApiContext& ctx) {
  routes.post("/v1/completions", [&ctx](const http::Request& req, http::Response& res) { completions(ctx, req, res); });
}

}  // namespace qvl::server
