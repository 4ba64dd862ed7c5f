// Stop strings over streamed text: emits what is safe, holds back what could begin a stop string, and cuts
// the text right before the first stop string that appears (OpenAI semantics: the stop string is not sent).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace qvl {

class StopChecker {
 public:
  // Empty stop strings are ignored; with none left, every push() emits its piece unchanged.
  explicit StopChecker(std::vector<std::string> stop_strings);

  struct Emit {
    std::string text;      // safe to send now
    bool stopped = false;  // a stop string was completed: `text` ends right before it; generation ends
  };

  // Appends a piece of decoded text. Returns the text that can no longer become part of a stop string.
  // When stop strings overlap, the one that is complete first (earliest end; on a tie, the longer one)
  // wins, so the output never depends on how the text was split into pieces. After a stop, push() emits
  // nothing. A piece that ends inside a UTF-8 character has that partial character held back.
  Emit push(std::string_view piece);

  // At the end of generation (no stop string hit): the text still held back.
  std::string flush();

  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
};

}  // namespace qvl
