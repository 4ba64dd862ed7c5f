// llama-server's text utilities: POST /tokenize ({"content"} -> {"tokens"}, optionally with each token's piece),
// POST /detokenize ({"tokens"} -> {"content"}) and POST /apply-template (a conversation as sent to
// /v1/chat/completions -> the prompt the chat template makes of it). They agree with `qvl tokenize`.
#include "server/api.h"
#include "server/openai_request.h"

#include "chat/chat_format.h"
#include "tokenizer/unicode.h"

namespace qvl::server {

namespace {

// A piece as llama-server writes it: the text where its bytes are valid UTF-8, else the list of bytes.
json piece_json(std::string_view bytes) {
  if (unicode::is_valid_utf8(bytes)) return std::string(bytes);
  json list = json::array();
  for (unsigned char c : bytes) list.push_back(static_cast<int>(c));
  return list;
}

void tokenize(ApiContext& ctx, const http::Request& req, http::Response& res) {
  auto fail = [&](const ApiError& e) { send_error(res, ApiFamily::kPlain, e); };
  if (auto e = check_ready(ctx)) return fail(*e);
  auto body = parse_json_body(req);
  if (!body.ok()) return fail({400, body.status().message()});
  const auto c = body->find("content");
  if (c == body->end() || !c->is_string())
    return fail({400, std::string("content: expected the text to tokenize as a string, got ") +
                          (c == body->end() ? "nothing" : c->type_name()), "", "content"});
  bool add_special = false, parse_special = true, with_pieces = false;
  for (auto [key, out] : {std::pair{"add_special", &add_special}, {"parse_special", &parse_special}, {"with_pieces", &with_pieces}})
    if (Status s = read_bool(*body, key, *out); !s.ok()) return fail({400, s.message(), "", key});
  // add_special: Qwen's tokenizer adds no BOS or EOS, so there is nothing to add.
  const Tokenizer& tok = ctx.scheduler.model()->tokenizer();
  const std::vector<int32_t> ids = tok.encode(c->get<std::string>(), parse_special);
  json tokens = json::array();
  for (int32_t id : ids)
    tokens.push_back(with_pieces ? json{{"id", id}, {"piece", piece_json(tok.token_bytes(id))}} : json(id));
  send_json(res, 200, json{{"tokens", std::move(tokens)}});
}

void detokenize(ApiContext& ctx, const http::Request& req, http::Response& res) {
  auto fail = [&](const ApiError& e) { send_error(res, ApiFamily::kPlain, e); };
  if (auto e = check_ready(ctx)) return fail(*e);
  auto body = parse_json_body(req);
  if (!body.ok()) return fail({400, body.status().message()});
  const auto t = body->find("tokens");
  if (t == body->end() || !t->is_array()) return fail({400, "tokens: expected a list of token ids", "", "tokens"});
  const Tokenizer& tok = ctx.scheduler.model()->tokenizer();
  std::vector<int32_t> ids;
  for (size_t i = 0; i < t->size(); ++i) {
    const json& v = (*t)[i];
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= tok.vocab_size())
      return fail({400, "tokens[" + std::to_string(i) + "]: expected a token id in [0, " + std::to_string(tok.vocab_size()) +
                            "), got " + v.dump().substr(0, 40), "", "tokens"});
    ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
  }
  send_json(res, 200, json{{"content", tok.decode(ids)}});
}

void apply_template(ApiContext& ctx, const http::Request& req, http::Response& res) {
  auto fail = [&](const ApiError& e) { send_error(res, ApiFamily::kPlain, e); };
  if (auto e = check_ready(ctx)) return fail(*e);
  auto body = parse_json_body(req);
  if (!body.ok()) return fail({400, body.status().message()});
  // The body of a chat request: its messages, tools and tool_choice read as /v1/chat/completions reads them.
  auto parsed = parse_chat_completion(*body, ctx.defaults);
  if (!parsed.ok()) return fail({400, parsed.status().message()});
  if (!parsed->documents.empty())  // their pages are known only once a worker has read the file
    return fail({400, parsed->documents[0].where + ": /apply-template does not read documents; in a chat request each "
                      "selected page becomes \"Page n: \" and an image (docs/API.md, Documents)", "", "messages"});
  bool generation_prompt = true;
  if (Status s = read_bool(*body, "add_generation_prompt", generation_prompt); !s.ok()) return fail({400, s.message()});
  ChatOptions options = parsed->options.chat;
  options.kind = chat_template(ctx);
  options.add_generation_prompt = generation_prompt;
  send_json(res, 200, json{{"prompt", render_chat(parsed->messages, options)}});
}

}  // namespace

void add_tokenize_routes(http::Router& routes, ApiContext& ctx) {
  routes.post("/tokenize", [&ctx](const http::Request& req, http::Response& res) { tokenize(ctx, req, res); });
  routes.post("/detokenize", [&ctx](const http::Request& req, http::Response& res) { detokenize(ctx, req, res); });
  routes.post("/apply-template", [&ctx](const http::Request& req, http::Response& res) { apply_template(ctx, req, res); });
}

}  // namespace qvl::server
