// The terminal side of `qvl chat`: lines read with line editing and history (libedit, when standard input is a
// terminal; plain lines from a pipe), Ollama's multi-line input between """ marks, input typed while an answer
// streams held back (not echoed into the answer, read at the next prompt), and a progress line while the
// model loads.
#pragma once

#include <atomic>
#include <chrono>
#include <optional>
#include <string>
#include <thread>

namespace qvl::cli {

class LineEditor {
 public:
  // interactive: standard input is a terminal (line editing, history in `history_file` when not empty).
  LineEditor(bool interactive, std::string history_file);
  ~LineEditor();  // writes the history
  LineEditor(const LineEditor&) = delete;
  LineEditor& operator=(const LineEditor&) = delete;

  enum class Got { kLine, kInterrupted, kEnd };
  // One message: a line, or the lines between """ and """ (joined with newlines, the marks removed).
  // kInterrupted: Ctrl-C at the prompt; kEnd: Ctrl-D or the end of the input.
  Got read(const std::string& prompt, std::string& out);
  // Whether the input ended inside a """ block (its text was not returned).
  bool ended_in_block() const { return ended_in_block_; }

  // While an answer streams: what the user types is not echoed (it stays in the terminal's input and is read
  // at the next prompt); Ctrl-C still reaches the program. No-op unless interactive.
  void hold_input();
  void release_input();

 private:
  std::optional<std::string> read_line(const char* prompt, bool& interrupted);

  bool interactive_;
  std::string history_file_;
  bool held_ = false;
  bool ended_in_block_ = false;
  struct Saved;
  Saved* saved_ = nullptr;  // the terminal's settings while input is held
};

// "loading NAME: 3.2 s, 812 MB" rewritten on stderr every 200 ms while alive (only when stderr is a terminal),
// erased when done.
class LoadingLine {
 public:
  explicit LoadingLine(std::string what);
  ~LoadingLine() { stop(); }
  void stop();

 private:
  std::string what_;
  std::atomic<bool> done_{false};
  std::thread thread_;
};

// Where `qvl chat` keeps its history: $QVL_HISTORY, else $XDG_STATE_HOME/qvl/chat_history, else
// ~/.local/state/qvl/chat_history (the folder is made when missing); empty when none can be named.
std::string chat_history_path();

}  // namespace qvl::cli
