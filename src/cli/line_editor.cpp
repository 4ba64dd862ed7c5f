// The terminal side of `qvl chat`: libedit's readline interface, """ blocks, held input, the loading line.
#include "cli/line_editor.h"

#include <editline/readline.h>
#include <sys/stat.h>
#include <termios.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "util/memory.h"

namespace qvl::cli {

struct LineEditor::Saved {
  termios attrs{};
};

LineEditor::LineEditor(bool interactive, std::string history_file)
    : interactive_(interactive), history_file_(std::move(history_file)) {
  if (!interactive_) return;
  rl_readline_name = "qvl";
  using_history();
  stifle_history(1000);
  if (!history_file_.empty()) read_history(history_file_.c_str());  // none yet: nothing read
}

LineEditor::~LineEditor() {
  release_input();
  delete saved_;
  if (interactive_ && !history_file_.empty()) {
    write_history(history_file_.c_str());
    ::chmod(history_file_.c_str(), 0600);  // past messages: the user's own
  }
}

std::optional<std::string> LineEditor::read_line(const char* prompt, bool& interrupted) {
  interrupted = false;
  if (!interactive_) {
    std::string line;
    if (!std::getline(std::cin, line)) return std::nullopt;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    return line;
  }
  errno = 0;
  char* got = readline(prompt);
  if (!got) {
    interrupted = errno == EINTR;
    return std::nullopt;
  }
  std::string line(got);
  std::free(got);
  return line;
}

LineEditor::Got LineEditor::read(const std::string& prompt, std::string& out) {
  out.clear();
  bool interrupted = false;
  auto first = read_line(prompt.c_str(), interrupted);
  if (!first) return interrupted ? Got::kInterrupted : Got::kEnd;
  std::string line = *first;
  const size_t start = line.find_first_not_of(" \t");
  if (start == std::string::npos || line.compare(start, 3, "\"\"\"") != 0) {
    if (interactive_ && line.find_first_not_of(" \t") != std::string::npos) add_history(line.c_str());
    out = line;
    return Got::kLine;
  }
  // """ ... """: the text after the opening mark, then whole lines, up to a line that ends with the mark.
  std::string text = line.substr(start + 3), whole = line;
  auto closes = [](std::string& s) {
    const size_t end = s.find_last_not_of(" \t");
    if (end == std::string::npos || end < 2 || s.compare(end - 2, 3, "\"\"\"") != 0) return false;
    s.erase(end - 2);
    return true;
  };
  bool closed = text.size() >= 3 && closes(text);
  while (!closed) {
    auto next = read_line("... ", interrupted);
    if (!next) {
      ended_in_block_ = !interrupted;
      return interrupted ? Got::kInterrupted : Got::kEnd;
    }
    whole += "\n" + *next;
    std::string piece = *next;
    closed = closes(piece);
    text += "\n" + piece;
  }
  if (interactive_) add_history(whole.c_str());
  // The newline after the opening mark, as typed, is not part of the message.
  if (!text.empty() && text[0] == '\n') text.erase(0, 1);
  out = text;
  return Got::kLine;
}

void LineEditor::hold_input() {
  if (!interactive_ || held_) return;
  if (!saved_) saved_ = new Saved;
  if (tcgetattr(STDIN_FILENO, &saved_->attrs) != 0) return;
  termios quiet = saved_->attrs;
  quiet.c_lflag &= ~static_cast<tcflag_t>(ECHO | ECHONL);
  // TCSANOW, not TCSAFLUSH: what was typed stays in the input, for the next prompt.
  if (tcsetattr(STDIN_FILENO, TCSANOW, &quiet) == 0) held_ = true;
}

void LineEditor::release_input() {
  if (!held_) return;
  tcsetattr(STDIN_FILENO, TCSANOW, &saved_->attrs);
  held_ = false;
}

LoadingLine::LoadingLine(std::string what) : what_(std::move(what)) {
  if (!isatty(STDERR_FILENO)) {
    std::fprintf(stderr, "loading %s ...\n", what_.c_str());
    done_ = true;
    return;
  }
  thread_ = std::thread([this] {
    const auto t0 = std::chrono::steady_clock::now();
    while (!done_.load()) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::fprintf(stderr, "\r\033[Kloading %s: %.1f s, %llu MB", what_.c_str(), s,
                   static_cast<unsigned long long>(current_rss_bytes() >> 20));
      std::fflush(stderr);
      for (int i = 0; i < 20 && !done_.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    std::fputs("\r\033[K", stderr);
    std::fflush(stderr);
  });
}

void LoadingLine::stop() {
  done_ = true;
  if (thread_.joinable()) thread_.join();
}

std::string chat_history_path() {
  if (const char* p = std::getenv("QVL_HISTORY"); p && *p) return p;
  std::filesystem::path dir;
  if (const char* x = std::getenv("XDG_STATE_HOME"); x && *x) {
    dir = std::filesystem::path(x) / "qvl";
  } else if (const char* h = std::getenv("HOME"); h && *h) {
    dir = std::filesystem::path(h) / ".local" / "state" / "qvl";
  } else {
    return "";
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  return ec ? "" : (dir / "chat_history").string();
}

}  // namespace qvl::cli
