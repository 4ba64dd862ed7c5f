// Splitting a Thinking model's answer into reasoning and answer at "</think>" (reasoning.h).
#include "chat/reasoning.h"

namespace qvl {

namespace {

constexpr std::string_view kThinkClose = "</think>";

std::string_view trim_newlines(std::string_view s, bool left, bool right) {
  while (left && !s.empty() && s.front() == '\n') s.remove_prefix(1);
  while (right && !s.empty() && s.back() == '\n') s.remove_suffix(1);
  return s;
}

// The length of the longest suffix of `s` that is a proper prefix of "</think>".
size_t partial_tag(std::string_view s) {
  for (size_t n = std::min(s.size(), kThinkClose.size() - 1); n > 0; --n)
    if (kThinkClose.substr(0, n) == s.substr(s.size() - n)) return n;
  return 0;
}

}  // namespace

ReasoningSplit split_reasoning(std::string_view text) {
  ReasoningSplit out;
  const size_t at = text.find(kThinkClose);
  if (at == std::string_view::npos) {
    out.reasoning = trim_newlines(text, true, true);
    return out;
  }
  out.closed = true;
  out.reasoning = trim_newlines(text.substr(0, at), true, true);
  out.content = trim_newlines(text.substr(at + kThinkClose.size()), true, false);
  return out;
}

ReasoningStream::Delta ReasoningStream::push(std::string_view piece) {
  Delta d;
  if (closed_) {
    if (!content_started_) {
      piece = trim_newlines(piece, true, false);
      content_started_ = !piece.empty();
    }
    d.content = piece;
    return d;
  }
  held_ += piece;
  const size_t at = held_.find(kThinkClose);
  if (at != std::string::npos) {
    std::string_view before = trim_newlines(std::string_view(held_).substr(0, at), !reasoning_started_, true);
    d.reasoning = before;
    closed_ = true;
    const std::string rest = held_.substr(at + kThinkClose.size());
    held_.clear();
    d.content = push(rest).content;
    return d;
  }
  // Give out all but a possible tag start and the newlines before it (they may end the reasoning); the
  // newlines that lead the reasoning are dropped.
  if (!reasoning_started_) {
    size_t lead = 0;
    while (lead < held_.size() && held_[lead] == '\n') ++lead;
    held_.erase(0, lead);
  }
  size_t end = held_.size() - partial_tag(held_);
  while (end > 0 && held_[end - 1] == '\n') --end;
  d.reasoning = held_.substr(0, end);
  reasoning_started_ = reasoning_started_ || end > 0;
  held_.erase(0, end);
  return d;
}

ReasoningStream::Delta ReasoningStream::finish() {
  Delta d;
  if (!closed_) d.reasoning = trim_newlines(held_, !reasoning_started_, true);
  held_.clear();
  return d;
}

}  // namespace qvl
