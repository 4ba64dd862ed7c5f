// The OpenAI-compatible API, POST /v1/chat/completions (streaming or not, images as image_url parts) and
// GET /v1/models: request JSON becomes an InferenceRequest here and responses follow OpenAI's shapes.
#include <chrono>
#include <cstdio>

#include <memory>

#include "server/api.h"
#include "engine/retrieval.h"
#include "server/logprobs_json.h"
#include "server/openai_request.h"
#include "server/openai_shapes.h"
#include "chat/reasoning.h"
#include "chat/tool_calls.h"

namespace qvl::server {

namespace {

// How many of a Thinking model's answer tokens were reasoning: its <think> part encoded again, as the Responses
// API counts them (usage.completion_tokens_details.reasoning_tokens).
int reasoning_tokens(const Tokenizer& tok, const std::string& text) {
  const ReasoningSplit sp = split_reasoning(text);
  return sp.reasoning.empty() ? 0 : static_cast<int>(tok.encode(sp.reasoning).size());
}

json chunk(const std::string& id, int64_t created, const std::string& model, json delta, json finish_reason,
           bool with_usage, size_t index = 0) {
  json choice{{"index", index}, {"delta", std::move(delta)}, {"logprobs", nullptr}, {"finish_reason", std::move(finish_reason)}};
  json c{{"id", id}, {"object", "chat.completion.chunk"}, {"created", created}, {"model", model},
         {"system_fingerprint", "qvl"}, {"choices", json::array({choice})}};
  if (with_usage) c["usage"] = nullptr;
  return c;
}


// A parsed call as OpenAI writes it: an id, and the arguments as a JSON string.
json openai_tool_call(const ParsedToolCall& c, size_t index, bool with_index) {
  json j{{"id", random_id("call_")}, {"type", "function"}, {"function", json{{"name", c.name}, {"arguments", c.arguments.dump()}}}};
  if (with_index) j = json{{"index", index}, {"id", j["id"]}, {"type", "function"}, {"function", j["function"]}};
  return j;
}

// "tool_calls" when the answer ended by itself with calls in it.
json finish_reason_json(FinishReason f, bool called) {
  return called && f == FinishReason::kStop ? std::string("tool_calls") : std::string(finish_reason_name(f));
}

void chat_completions(ApiContext& ctx, const http::Request& req, http::Response& res) {
  auto fail = [&](const ApiError& e) { send_error(res, ApiFamily::kOpenAI, e); };
  if (auto e = check_ready(ctx, ModelKind::kChat)) return fail(*e);
  auto body = parse_json_body(req);
  if (!body.ok()) return fail({400, body.status().message()});
  auto parsed = parse_chat_completion(*body, ctx.defaults);
  if (!parsed.ok()) return fail({400, parsed.status().message()});
  ChatCompletionRequest& r = *parsed;
  auto reasoning = show_reasoning(ctx, r.think, "chat_template_kwargs.enable_thinking");
  if (!reasoning.ok()) return fail({400, reasoning.status().message()});
  // A Thinking model's answer: reasoning up to </think>, returned as reasoning_content (unless switched off).
  const bool thinking = chat_template(ctx) == ChatTemplateKind::kThinking, show = *reasoning;

  InferenceRequest ir;
  if (auto e = make_inference_request(ctx, r.images, std::move(r.messages), std::move(r.options), ir, r.pages, r.videos, r.documents)) return fail(*e);

  const std::string model = r.model.empty() ? ctx.options.model_id : r.model;
  const std::string id = random_id("chatcmpl-");
  const int64_t created = unix_now();
  const http::PeerWatch& watch = req.peer;
  std::vector<Admitted> jobs;
  if (auto e = submit_choices(ctx, std::move(ir), r.n, watch, jobs, std::chrono::steady_clock::now())) return fail(*e);
  const Tokenizer* tok = &ctx.scheduler.model()->tokenizer();  // loaded: the job was admitted
  // The usage of all choices: the prompt (read once, by choice 0) and every choice's answer.
  auto usage_of = [tok, thinking](const std::vector<const JobUpdate*>& ends) {
    GenerateTimings t = ends[0]->result.timings;
    int reasoning = thinking ? 0 : -1;
    t.generated_tokens = 0;
    for (const JobUpdate* e : ends) {
      t.generated_tokens += e->result.timings.generated_tokens;
      if (thinking) reasoning += std::min(reasoning_tokens(*tok, e->result.text), e->result.timings.generated_tokens);
    }
    return usage_json(t, reasoning);
  };

  if (!r.stream) {
    json choices = json::array();
    std::vector<JobUpdate> ends;
    for (Admitted& a : jobs) {
      bool gone = false;
      JobUpdate end = wait_for_end(a, watch, gone);
      if (gone || end.error != JobError::kNone) {
        for (Admitted& o : jobs) o.job->cancel();
        return fail(gone ? ApiError{499, "the client went away", "cancelled"} : job_error(end));
      }
      ends.push_back(std::move(end));
    }
    std::vector<const JobUpdate*> end_ptrs;
    for (size_t c = 0; c < ends.size(); ++c) {
      const JobUpdate& end = ends[c];
      end_ptrs.push_back(&end);
      std::string text = end.result.text;
      json message{{"role", "assistant"}, {"content", text}};
      if (thinking) {
        ReasoningSplit sp = split_reasoning(text);
        text = std::move(sp.content);
        message["content"] = text;
        if (show) message["reasoning_content"] = std::move(sp.reasoning);
      }
      bool called = false;
      if (r.tool_calls) {
        const ParsedAnswer p = parse_tool_calls(text);
        if (!p.calls.empty()) {
          called = true;
          message["content"] = p.content.empty() ? json(nullptr) : json(p.content);
          json calls = json::array();
          for (size_t i = 0; i < p.calls.size(); ++i) calls.push_back(openai_tool_call(p.calls[i], i, false));
          message["tool_calls"] = std::move(calls);
        }
      }
      json logprobs = nullptr;
      if (r.logprobs) logprobs = json{{"content", logprob_entries(*tok, end.result.logprobs)}, {"refusal", nullptr}};
      choices.push_back(json{{"index", c}, {"message", message}, {"logprobs", std::move(logprobs)},
                             {"finish_reason", finish_reason_json(end.result.finish, called)}});
    }
    json out{{"id", id}, {"object", "chat.completion"}, {"created", created}, {"model", model},
             {"system_fingerprint", "qvl"}, {"choices", std::move(choices)}, {"usage", usage_of(end_ptrs)},
             {"timings", timings_json(ends[0])}};
    if (!r.warnings.empty()) out["warnings"] = r.warnings;
    return send_json(res, 200, out);
  }

  const bool usage = r.include_usage;
  const std::vector<std::string> warnings = r.warnings;
  ChoicesStreamFormat f;
  for (size_t c = 0; c < jobs.size(); ++c)
    f.start += sse(chunk(id, created, model, json{{"role", "assistant"}, {"content", ""}}, nullptr, usage, c));
  // Each choice's own readers. With tools: prose streams as content, each call as one tool_calls delta once its
  // block is complete.
  struct ChoiceState {
    std::unique_ptr<ToolCallStream> calls;
    std::unique_ptr<ReasoningStream> thoughts;
    size_t n_calls = 0;
  };
  auto states = std::make_shared<std::vector<ChoiceState>>(jobs.size());
  for (ChoiceState& cs : *states) {
    if (r.tool_calls) cs.calls = std::make_unique<ToolCallStream>();
    if (thinking) cs.thoughts = std::make_unique<ReasoningStream>();
  }
  // The tokens' log-probabilities ride on the first chunk written for them (or an empty delta of their own).
  auto deltas = [=](size_t c, const std::string& content, const std::vector<TokenLogprob>& lps = {}) {
    ChoiceState& cs = (*states)[c];
    std::string out;
    json lp = lps.empty() ? json(nullptr) : json{{"content", logprob_entries(*tok, lps)}, {"refusal", nullptr}};
    auto with_lp = [&](json ch) {
      if (!lp.is_null()) {
        ch["choices"][0]["logprobs"] = std::move(lp);
        lp = nullptr;
      }
      return sse(ch);
    };
    if (!content.empty()) out += with_lp(chunk(id, created, model, json{{"content", content}}, nullptr, usage, c));
    if (cs.calls)
      for (const ParsedToolCall& call : cs.calls->take_calls())
        out += with_lp(chunk(id, created, model,
                             json{{"tool_calls", json::array({openai_tool_call(call, cs.n_calls++, true)})}}, nullptr,
                             usage, c));
    if (!lp.is_null()) out += with_lp(chunk(id, created, model, json::object(), nullptr, usage, c));
    return out;
  };
  auto reasoning_delta = [=](size_t c, const std::string& text) {
    return show && !text.empty() ? sse(chunk(id, created, model, json{{"reasoning_content", text}}, nullptr, usage, c))
                                 : std::string();
  };
  auto answer = [=](size_t c, std::string_view text, const std::vector<TokenLogprob>& lps = {}) {
    ChoiceState& cs = (*states)[c];
    return deltas(c, cs.calls ? cs.calls->push(text) : std::string(text), lps);
  };
  f.text = [=](size_t c, std::string_view text, const std::vector<TokenLogprob>& lps) {
    ChoiceState& cs = (*states)[c];
    if (!cs.thoughts) return answer(c, text, lps);
    ReasoningStream::Delta d = cs.thoughts->push(text);
    return reasoning_delta(c, d.reasoning) + answer(c, d.content, lps);
  };
  f.done = [=](size_t c, const JobUpdate& end) {
    ChoiceState& cs = (*states)[c];
    std::string head;
    if (cs.thoughts) {
      ReasoningStream::Delta d = cs.thoughts->finish();
      head = reasoning_delta(c, d.reasoning) + answer(c, d.content);
    }
    head += cs.calls ? deltas(c, cs.calls->finish()) : std::string();
    json last = chunk(id, created, model, json::object(), finish_reason_json(end.result.finish, cs.n_calls > 0), usage, c);
    last["timings"] = timings_json(end);
    if (!warnings.empty()) last["warnings"] = warnings;
    return head + sse(last);
  };
  f.all_done = [=](const std::vector<JobUpdate>& ends) {
    std::string out;
    if (usage) {
      std::vector<const JobUpdate*> end_ptrs;
      for (const JobUpdate& e : ends) end_ptrs.push_back(&e);
      json u{{"id", id}, {"object", "chat.completion.chunk"}, {"created", created}, {"model", model},
             {"system_fingerprint", "qvl"}, {"choices", json::array()}, {"usage", usage_of(end_ptrs)}};
      out += sse(u);
    }
    return out + "data: [DONE]\n\n";
  };
  f.error = [](const ApiError& e) { return sse(openai_error_body(e)) + "data: [DONE]\n\n"; };
  stream_jobs(res, "text/event-stream", std::move(jobs), watch, std::move(f));
}

// What a request gives back: text, or an embedding model's vectors and a reranker's scores.
const char* retrieval_output(const ApiContext& ctx) {
  const Model* m = ctx.scheduler.model();
  if (!m || m->kind() == ModelKind::kChat) return "text";
  return m->kind() == ModelKind::kEmbedding ? "embedding" : "score";
}

// The tokens a request may hold: --ctx for a chat model, the reference's maximum length for a retrieval one.
int64_t retrieval_context(const ApiContext& ctx) {
  const Model* m = ctx.scheduler.model();
  if (!m || m->kind() == ModelKind::kChat) return ctx.options.context;
  return retrieval_options(*m).context;
}

json model_object(const ApiContext& ctx) {
  // Images only where the vision tower is loaded (a GGUF served without its mmproj is text only); while loading, as
  // Ollama's capabilities say, the model is taken to have it.
  const Model* m = ctx.scheduler.model();
  const json inputs = !m || m->has_vision() ? json::array({"text", "image"}) : json::array({"text"});
  return json{{"id", ctx.options.model_id},
              {"object", "model"},
              {"created", ctx.started_unix},
              {"owned_by", "qvl"},
              {"input_modalities", inputs},
              {"output_modalities", json::array({retrieval_output(ctx)})},
              {"context_length", retrieval_context(ctx)},
              {"qvl", model_description(ctx)}};
}

}  // namespace

void add_openai_routes(http::Router& routes, ApiContext& ctx) {
  routes.post("/v1/chat/completions",
            [&ctx](const http::Request& req, http::Response& res) { chat_completions(ctx, req, res); });
  routes.get("/v1/models", [&ctx](const http::Request&, http::Response& res) {
    send_json(res, 200, json{{"object", "list"}, {"data", json::array({model_object(ctx)})}});
  });
  routes.get_prefix("/v1/models/", [&ctx](const http::Request& req, http::Response& res) {
    if (req.path_param != ctx.options.model_id) {
      return send_error(res, ApiFamily::kOpenAI,
                        {404, "the model '" + req.path_param + "' does not exist; this server serves '" +
                                  ctx.options.model_id + "'",
                         "model_not_found", "model"});
    }
    send_json(res, 200, model_object(ctx));
  });
}

}  // namespace qvl::server
