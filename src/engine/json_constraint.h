// Constrained decoding for structured output: before each token is sampled, every token that cannot
// continue the answer as JSON the schema accepts gets -inf (json_grammar.h decides byte by byte); the end
// tokens are allowed only when the answer is a whole value. The vocabulary is walked as a trie (the
// tokenizer's sorted tokens, each sharing a prefix with the one before), so a refused prefix refuses all
// the tokens under it at once, and inside a string the tokens of plain text (no quote, backslash or control
// byte, whole UTF-8 characters) are judged by their length alone.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/json_grammar.h"
#include "tokenizer/tokenizer.h"

namespace qvl {

class JsonConstraint {
 public:
  // end_ids: the tokens that end the answer (<|im_end|>, <|endoftext|>); before and after: tokens forced
  // before and after the JSON (a tool call's tags), none by default.
  JsonConstraint(std::shared_ptr<const JsonGrammar> grammar, const Tokenizer& tok, std::vector<int32_t> end_ids,
                 std::vector<int32_t> before = {}, std::vector<int32_t> after = {});

  // Sets logits[id] = -inf for every id < vocab that may not come next.
  void mask(float* logits, int vocab);
  // Moves past a sampled token; false when it was not allowed (the state is then unusable).
  bool accept(int32_t token);
  // The answer is a whole value (it may end here).
  bool complete() const { return phase_ == kEnd || (phase_ == kJson && after_.empty() && acc_.accepting()); }
  // The ids allowed by the last mask() (for tests).
  const std::vector<uint8_t>& allowed() const { return allowed_; }

 private:
  // Marks the tokens of `list` (sorted, with their shared-prefix lengths) the acceptor takes whole.
  void walk(const std::vector<Tokenizer::SortedToken>& list);

  const Tokenizer& tok_;
  JsonAcceptor acc_;
  std::vector<int32_t> end_ids_, before_, after_;
  enum Phase { kBefore, kJson, kAfter, kEnd } phase_ = kJson;
  size_t forced_ = 0;  // tokens of before_ / after_ given so far
  std::vector<uint8_t> allowed_;   // per id, by the last mask()
  std::vector<int32_t> plain_cp_;  // per id: code points when plain string text, else -1
  std::vector<Tokenizer::SortedToken> not_plain_;  // the sorted tokens that are not plain, shared prefixes recomputed
  std::vector<size_t> marks_;      // the acceptor's log mark after each byte of the current trie path
};

}  // namespace qvl
