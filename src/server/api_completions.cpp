// POST /v1/completions, OpenAI's legacy text completion: raw prompts (text or token ids, no chat format), up to
// kMaxCompletionPrompts per request with n choices each (kMaxChoices answers in all), streamed or not, echo
// and the legacy logprobs columns, the prompt's included under echo (what evaluation harnesses score).
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
  // Every prompt's choices admitted before any is waited for: they run side by side in the scheduler's slots.
  // Prompt i's choice j is choice i * n + j.
  std::vector<Admitted> jobs;
  const auto started = std::chrono::steady_clock::now();
  for (size_t i = 0; i < ids.size(); ++i) {
    InferenceRequest ir;
    ir.options = r.options;
    ir.options.raw_prompt = std::move(ids[i]);
    ir.timeout_s = ctx.options.timeout_s;
    if (std::optional<ApiError> e = submit_choices(ctx, std::move(ir), r.n, watch, jobs, started)) {
      if (r.prompts.size() > 1 && e->status == 400) e->message = "prompt[" + std::to_string(i) + "]: " + e->message;
      return fail(*e);
    }
  }
  const size_t n = static_cast<size_t>(r.n);
  // The usage of all answers: each prompt once (read by its first choice), every answer's tokens.
  auto usage_of = [n](const std::vector<const JobUpdate*>& ends) {
    GenerateTimings total;
    for (size_t c = 0; c < ends.size(); ++c) {
      const GenerateTimings& t = ends[c]->result.timings;
      if (c % n == 0) {
        total.prompt_tokens += t.prompt_tokens;
        total.cached_tokens += t.cached_tokens;
      }
      total.generated_tokens += t.generated_tokens;
    }
    return usage_json(total);
  };

  if (!r.stream) {
    json choices = json::array();
    std::vector<JobUpdate> ends;
    for (size_t c = 0; c < jobs.size(); ++c) {
      bool gone = false;
      JobUpdate end = wait_for_end(jobs[c], watch, gone);
      if (gone || end.error != JobError::kNone) {
        for (Admitted& a : jobs) a.job->cancel();
        return fail(gone ? ApiError{499, "the client went away", "cancelled"} : job_error(end));
      }
      const GenerateResult& g = end.result;
      json logprobs = nullptr;
      if (r.logprobs >= 0) {
        size_t offset = 0;
        if (r.echo) append_legacy_logprobs(*tok, g.prompt_ids, pointers(g.prompt_logprobs, true), offset, logprobs);
        append_legacy_logprobs(*tok, g.tokens, pointers(g.logprobs), offset, logprobs);
      }
      choices.push_back(json{{"text", (r.echo ? texts[c / n] : std::string()) + g.text}, {"index", c},
                             {"logprobs", std::move(logprobs)}, {"finish_reason", finish_reason_name(g.finish)}});
      ends.push_back(std::move(end));
    }
    std::vector<const JobUpdate*> end_ptrs;
    for (const JobUpdate& e : ends) end_ptrs.push_back(&e);
    json out{{"id", id}, {"object", "text_completion"}, {"created", created}, {"model", model},
             {"system_fingerprint", "qvl"}, {"choices", std::move(choices)}, {"usage", usage_of(end_ptrs)}};
    if (jobs.size() == 1) out["timings"] = timings_json(ends[0]);
    return send_json(res, 200, out);
  }

  const bool usage = r.include_usage, with_logprobs = r.logprobs >= 0;
  // Each answer's text offset so far (the legacy logprobs' text_offset), after its echoed prompt.
  auto offsets = std::make_shared<std::vector<size_t>>(jobs.size(), 0);
  ChoicesStreamFormat f;
  if (r.echo) {
    for (size_t c = 0; c < jobs.size(); ++c) {
      (*offsets)[c] = texts[c / n].size();
      f.start += sse(completion_chunk(id, created, model, c, texts[c / n], nullptr, nullptr));
    }
  }
  f.text = [=](size_t c, std::string_view text, const std::vector<TokenLogprob>& lps) {
    json logprobs = nullptr;
    if (with_logprobs && !lps.empty()) {
      std::vector<int32_t> tokens;
      for (const TokenLogprob& lp : lps) tokens.push_back(lp.token);
      append_legacy_logprobs(*tok, tokens, pointers(lps), (*offsets)[c], logprobs);
    }
    return sse(completion_chunk(id, created, model, c, std::string(text), std::move(logprobs), nullptr));
  };
  f.done = [=](size_t c, const JobUpdate& end) {
    json last = completion_chunk(id, created, model, c, "", nullptr, finish_reason_name(end.result.finish));
    last["timings"] = timings_json(end);
    return sse(last);
  };
  f.all_done = [=](const std::vector<JobUpdate>& ends) {
    std::string out;
    if (usage) {
      std::vector<const JobUpdate*> end_ptrs;
      for (const JobUpdate& e : ends) end_ptrs.push_back(&e);
      json u{{"id", id}, {"object", "text_completion"}, {"created", created}, {"model", model},
             {"system_fingerprint", "qvl"}, {"choices", json::array()}, {"usage", usage_of(end_ptrs)}};
      out += sse(u);
    }
    return out + "data: [DONE]\n\n";
  };
  f.error = [](const ApiError& e) { return sse(openai_error_body(e)) + "data: [DONE]\n\n"; };
  stream_jobs(res, "text/event-stream", std::move(jobs), watch, std::move(f));
}

}  // namespace

void add_completion_routes(http::Router& routes, ApiContext& ctx) {
  routes.post("/v1/completions", [&ctx](const http::Request& req, http::Response& res) { completions(ctx, req, res); });
}

}  // namespace qvl::server
