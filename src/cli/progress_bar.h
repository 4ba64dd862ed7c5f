// Shows a download's progress: one line redrawn in place on a terminal (file, bytes, speed, ETA), or a plain
// line every few seconds when stderr is a file or a pipe (logs, CI).
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>

#include "hub/hub.h"

namespace qvl::cli {

class ProgressBar {
 public:
  // `label` starts each plain line ("pull: 45% ..."); `tty` -1: ask isatty() of `out`.
  explicit ProgressBar(std::FILE* out = stderr, std::string label = "pull", int tty = -1);
  // Safe to call from several threads; draws at most ten times a second (plain lines: every 5 s).
  void update(const hub::Progress& p);
  // Ends the bar's line on a terminal.
  void finish();

 private:
  std::string bar_line(const hub::Progress& p, int width) const;
  std::string plain_line(const hub::Progress& p) const;

  std::FILE* out_;
  std::string label_;
  bool tty_;
  bool drawn_ = false;
  std::mutex mu_;
  std::chrono::steady_clock::time_point start_, last_;
};

// "53.2 MiB", "812 B".
std::string format_bytes(int64_t n);
// "0:07", "1:02:03", "?" when unknown.
std::string format_duration(double seconds);

}  // namespace qvl::cli
