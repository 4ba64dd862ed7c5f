// Log-probabilities in each API's JSON shape.
#include "server/logprobs_json.h"

#include <cmath>

namespace qvl::server {

namespace {

using json = nlohmann::ordered_json;

double finite(float v) { return std::isfinite(v) ? static_cast<double>(v) : -9999.0; }

json bytes_of(std::string_view s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

}  // namespace

json logprob_entry(const Tokenizer& tok, const TokenLogprob& lp) {
  const std::string_view piece = tok.token_bytes(lp.token);
  json top = json::array();
  for (const auto& [id, v] : lp.top) {
    const std::string_view p = tok.token_bytes(id);
    top.push_back(json{{"token", std::string(p)}, {"logprob", finite(v)}, {"bytes", bytes_of(p)}});
  }
  return json{{"token", std::string(piece)}, {"logprob", finite(lp.logprob)}, {"bytes", bytes_of(piece)},
              {"top_logprobs", std::move(top)}};
}

json logprob_entries(const Tokenizer& tok, const std::vector<TokenLogprob>& lps) {
  json out = json::array();
  for (const TokenLogprob& lp : lps) out.push_back(logprob_entry(tok, lp));
  return out;
}

void append_legacy_logprobs(const Tokenizer& tok, const std::vector<int32_t>& tokens,
                            const std::vector<const TokenLogprob*>& values, size_t& offset, json& out) {
  if (out.is_null())
    out = json{{"tokens", json::array()}, {"token_logprobs", json::array()}, {"top_logprobs", json::array()},
               {"text_offset", json::array()}};
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::string piece(tok.token_bytes(tokens[i]));
    out["tokens"].push_back(piece);
    out["text_offset"].push_back(offset);
    offset += piece.size();
    const TokenLogprob* lp = i < values.size() ? values[i] : nullptr;
    if (!lp) {
      out["token_logprobs"].push_back(nullptr);
      out["top_logprobs"].push_back(nullptr);
      continue;
    }
    out["token_logprobs"].push_back(finite(lp->logprob));
    json top = json::object();
    for (const auto& [id, v] : lp->top) {
      const std::string p(tok.token_bytes(id));
      if (!top.contains(p)) top[p] = finite(v);  // two ids with the same text: the likelier one
    }
    out["top_logprobs"].push_back(std::move(top));
  }
}

}  // namespace qvl::server
