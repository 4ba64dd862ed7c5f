// The reasoning of a Thinking model's answer: its chat template ends the prompt with "<think>\n", so the
// generated text is reasoning up to "</think>" and the answer after it. This splits the two (whole, or
// streamed piece by piece), as the template reads them back: the reasoning without the newlines around it,
// the answer without the newlines that lead it. An answer cut off before "</think>" is all reasoning.
#pragma once

#include <string>
#include <string_view>

namespace qvl {

struct ReasoningSplit {
  std::string reasoning;
  std::string content;
  bool closed = false;  // "</think>" was seen
};

ReasoningSplit split_reasoning(std::string_view text);

// The streaming form: push() returns the pieces that are surely reasoning and surely answer (holding back
// what may be the start of "</think>", newlines that may end the reasoning, and newlines that lead the
// answer); finish() returns what was held back at the end.
class ReasoningStream {
 public:
  struct Delta {
    std::string reasoning;
    std::string content;
  };
  Delta push(std::string_view piece);
  Delta finish();

 private:
  std::string held_;        // reasoning text not given out yet: a possible tag start or trailing newlines
  bool closed_ = false;     // past "</think>"
  bool content_started_ = false;  // a non-newline character of the answer was given out
  bool reasoning_started_ = false;
};

}  // namespace qvl
