// The token mask of json_constraint.h.
#include "engine/json_constraint.h"

#include <algorithm>
#include <cmath>
#include <string_view>

namespace qvl {

namespace {

// Code points of a token that is plain JSON string text (bytes >= 0x20 other than '"' and '\', whole and
// valid UTF-8 characters: fed to a string with nothing pending it only adds characters), else -1.
int32_t plain_code_points(std::string_view b) {
  int32_t n = 0;
  for (size_t i = 0; i < b.size();) {
    const uint8_t c = static_cast<uint8_t>(b[i]);
    if (c < 0x20 || c == '"' || c == '\\') return -1;
    size_t len = c < 0x80 ? 1 : (c >= 0xC2 && c <= 0xDF) ? 2 : (c >= 0xE0 && c <= 0xEF) ? 3 : (c >= 0xF0 && c <= 0xF4) ? 4 : 0;
    if (len == 0 || i + len > b.size()) return -1;
    for (size_t k = 1; k < len; ++k) {
      const uint8_t d = static_cast<uint8_t>(b[i + k]);
      uint8_t lo = 0x80, hi = 0xBF;
      if (k == 1) {
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
      }
      if (d < lo || d > hi) return -1;
    }
    i += len;
    ++n;
  }
  return n;
}

}  // namespace

JsonConstraint::JsonConstraint(std::shared_ptr<const JsonGrammar> grammar, const Tokenizer& tok,
                               std::vector<int32_t> end_ids, std::vector<int32_t> before, std::vector<int32_t> after)
    : tok_(tok), acc_(std::move(grammar)), end_ids_(std::move(end_ids)), before_(std::move(before)), after_(std::move(after)) {
  phase_ = before_.empty() ? kJson : kBefore;
  const auto& sorted = tok.sorted_tokens();
  plain_cp_.assign(static_cast<size_t>(tok.vocab_size()), -1);
  not_plain_.reserve(sorted.size() / 4);
  std::string_view prev;
  for (const Tokenizer::SortedToken& t : sorted) {
    const std::string_view b = tok.token_bytes(t.id);
    plain_cp_[static_cast<size_t>(t.id)] = plain_code_points(b);
    if (plain_cp_[static_cast<size_t>(t.id)] >= 0) continue;
    uint32_t l = 0;
    while (l < prev.size() && l < b.size() && prev[l] == b[l]) ++l;
    not_plain_.push_back(Tokenizer::SortedToken{t.id, l});
    prev = b;
  }
}

void JsonConstraint::walk(const std::vector<Tokenizer::SortedToken>& list) {
  acc_.set_logging(true);
  marks_.assign(1, acc_.mark());
  size_t fed = 0;        // bytes of the current path the acceptor has taken
  int64_t dead = -1;     // the path's byte at this index was refused: tokens sharing it are refused too
  for (const Tokenizer::SortedToken& t : list) {
    if (dead >= 0 && static_cast<int64_t>(t.lcp) > dead) continue;
    dead = -1;
    const size_t d = std::min<size_t>(t.lcp, fed);
    acc_.undo_to(marks_[d]);
    marks_.resize(d + 1);
    fed = d;
    const std::string_view b = tok_.token_bytes(t.id);
    bool ok = true;
    for (size_t j = d; j < b.size(); ++j) {
      if (!acc_.feed(static_cast<uint8_t>(b[j]))) {
        dead = static_cast<int64_t>(j);
        ok = false;
        break;
      }
      marks_.push_back(acc_.mark());
      ++fed;
    }
    if (ok) allowed_[static_cast<size_t>(t.id)] = 1;
  }
  acc_.undo_to(marks_[0]);
  acc_.set_logging(false);
}

void JsonConstraint::mask(float* logits, int vocab) {
  allowed_.assign(static_cast<size_t>(std::max(vocab, tok_.vocab_size())), 0);
  auto only = [&](int32_t id) {
    if (id >= 0 && id < vocab) allowed_[static_cast<size_t>(id)] = 1;
  };
  if (phase_ == kBefore || phase_ == kAfter || phase_ == kEnd) {
    if (phase_ == kBefore) only(before_[forced_]);
    else if (phase_ == kAfter) only(after_[forced_]);
    else
      for (int32_t e : end_ids_) only(e);
    for (int id = 0; id < vocab; ++id)
      if (!allowed_[static_cast<size_t>(id)]) logits[id] = -INFINITY;
    return;
  }
  if (!acc_.finished()) {
    int64_t room = -1;
    if (acc_.in_plain_string(room)) {
      for (size_t id = 0; id < plain_cp_.size(); ++id)
        if (plain_cp_[id] >= 0 && (room < 0 || plain_cp_[id] <= room)) allowed_[id] = 1;
      walk(not_plain_);
    } else {
      walk(tok_.sorted_tokens());
    }
  }
  bool any = false;
  for (int id = 0; id < vocab && !any; ++id) any = allowed_[static_cast<size_t>(id)];
  // The value may end here: then the forced text after it, or the end. (A dead end cannot happen with a
  // byte-level vocabulary; if it did, ending beats looping.)
  if (acc_.accepting() || !any) {
    if (!after_.empty()) only(after_[0]);
    else
      for (int32_t e : end_ids_) only(e);
  }
  for (int id = 0; id < vocab; ++id)
    if (!allowed_[static_cast<size_t>(id)]) logits[id] = -INFINITY;
}

bool JsonConstraint::accept(int32_t token) {
  auto forced = [&](const std::vector<int32_t>& ids, Phase next) {
    if (token != ids[forced_]) return false;
    if (++forced_ == ids.size()) {
      phase_ = next;
      forced_ = 0;
    }
    return true;
  };
  switch (phase_) {
    case kBefore: return forced(before_, kJson);
    case kAfter: return forced(after_, kEnd);
    case kEnd: break;
    case kJson:
      if (!after_.empty() && token == after_[0] && acc_.accepting()) {
        phase_ = kAfter;
        forced_ = 0;
        return forced(after_, kEnd);
      }
      if (after_.empty())
        for (int32_t e : end_ids_)
          if (token == e) return acc_.accepting();
      return acc_.feed(std::string(tok_.token_bytes(token)));
  }
  for (int32_t e : end_ids_)
    if (token == e) return true;
  return false;
}

}  // namespace qvl
