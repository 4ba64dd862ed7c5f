// Shows a download's progress: one line redrawn in place on a terminal (file, bytes, speed, ETA), or a plain
// line every few seconds when stderr is a file or a pipe (logs, CI).
#include "cli/progress_bar.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>

namespace qvl::cli {

namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kTtyInterval = std::chrono::milliseconds(100);
constexpr auto kPlainInterval = std::chrono::seconds(5);

int terminal_width(std::FILE* f) {
  winsize ws{};
  if (::ioctl(::fileno(f), TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 40) return ws.ws_col;
  return 80;
}

double eta_seconds(const hub::Progress& p) {
  if (p.bytes_per_s <= 0 || p.all_total <= 0) return -1;
  return static_cast<double>(p.all_total - p.all_done) / p.bytes_per_s;
}

int percent(const hub::Progress& p) {
  return p.all_total > 0 ? static_cast<int>(100.0 * static_cast<double>(p.all_done) / static_cast<double>(p.all_total))
                         : 0;
}

}  // namespace

std::string format_bytes(int64_t n) {
  if (n < 1024) return std::to_string(std::max<int64_t>(n, 0)) + " B";
  const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = -1;
  while (v >= 1024 && u < 3) v /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
  return buf;
}

std::string format_duration(double s) {
  if (s < 0 || !std::isfinite(s) || s > 360000) return "?";
  const long t = std::lround(s);
  char buf[32];
  if (t >= 3600) {
    std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
  } else {
    std::snprintf(buf, sizeof buf, "%ld:%02ld", t / 60, t % 60);
  }
  return buf;
}

ProgressBar::ProgressBar(std::FILE* out, std::string label, int tty)
    : out_(out), label_(std::move(label)), tty_(tty < 0 ? ::isatty(::fileno(out)) != 0 : tty != 0),
      start_(Clock::now()), last_(start_) {}

std::string ProgressBar::bar_line(const hub::Progress& p, int width) const {
  // <file> [=====>     ]  45%  24.1 MiB/53.2 MiB  120.3 MiB/s  ETA 0:01
  const std::string tail = "  " + std::to_string(percent(p)) + "%  " + format_bytes(p.all_done) + "/" +
                           format_bytes(p.all_total) + "  " + format_bytes(static_cast<int64_t>(p.bytes_per_s)) +
                           "/s  ETA " + (p.finished ? std::string("0:00") : format_duration(eta_seconds(p)));
  std::string name = p.file;
  const int name_width = std::clamp(width / 4, 12, 36);
  if (static_cast<int>(name.size()) > name_width) name = "..." + name.substr(name.size() - (name_width - 3));
  name.resize(name_width, ' ');
  const int bar_width = std::max(10, width - name_width - 3 - static_cast<int>(tail.size()) - 1);
  const int filled = p.all_total > 0 ? static_cast<int>(static_cast<double>(bar_width) * static_cast<double>(p.all_done) /
                                                         static_cast<double>(p.all_total))
                                     : 0;
  std::string bar(bar_width, ' ');
  for (int i = 0; i < std::min(filled, bar_width); ++i) bar[i] = '=';
  if (filled < bar_width) bar[filled] = '>';
  return name + " [" + bar + "]" + tail;
}

std::string ProgressBar::plain_line(const hub::Progress& p) const {
  const double secs = std::chrono::duration<double>(Clock::now() - start_).count();
  if (p.finished) {
    return label_ + ": 100% " + format_bytes(p.all_total) + " in place after " + format_duration(secs);
  }
  return label_ + ": " + std::to_string(percent(p)) + "% " + format_bytes(p.all_done) + " of " +
         format_bytes(p.all_total) + ", " + p.file + ", " + format_bytes(static_cast<int64_t>(p.bytes_per_s)) +
         "/s, ETA " + format_duration(eta_seconds(p));
}

void ProgressBar::update(const hub::Progress& p) {
  std::lock_guard<std::mutex> l(mu_);
  const auto now = Clock::now();
  const bool first = !drawn_;
  if (!p.finished && !first && now - last_ < (tty_ ? kTtyInterval : kPlainInterval)) return;
  last_ = now;
  drawn_ = true;
  if (tty_) {
    std::fprintf(out_, "\r%s\x1b[K", bar_line(p, terminal_width(out_) - 1).c_str());
    if (p.finished) std::fputc('\n', out_), drawn_ = false;
  } else {
    std::fprintf(out_, "%s\n", plain_line(p).c_str());
  }
  std::fflush(out_);
}

void ProgressBar::finish() {
  std::lock_guard<std::mutex> l(mu_);
  if (tty_ && drawn_) std::fputc('\n', out_);
  drawn_ = false;
  std::fflush(out_);
}

}  // namespace qvl::cli
