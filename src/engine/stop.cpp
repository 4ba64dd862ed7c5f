// Stop-string matching over streamed text pieces, holding back only what could still start a stop string.
#include "engine/stop.h"

#include <algorithm>

namespace qvl {

namespace {

bool is_continuation(unsigned char c) { return (c & 0xC0) == 0x80; }

// Where a UTF-8 character cut off by the end of `s` begins, or s.size() when the text ends on a boundary.
size_t incomplete_tail(std::string_view s) {
  const size_t n = s.size();
  for (size_t back = 1; back <= 4 && back <= n; ++back) {
    const unsigned char c = static_cast<unsigned char>(s[n - back]);
    if (is_continuation(c)) continue;
    const size_t need = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 1;
    return back < need ? n - back : n;
  }
  return n;  // only continuation bytes: not UTF-8 we can complete; let it through
}

}  // namespace

StopChecker::StopChecker(std::vector<std::string> stop_strings) {
  for (auto& s : stop_strings)
    if (!s.empty()) stops_.push_back(std::move(s));
}

StopChecker::Emit StopChecker::push(std::string_view piece) {
  if (stopped_) return {"", true};
  held_.append(piece);
  const std::string_view buf = held_;

  // The stop string completed first: earliest end, then earliest start. held_ never contains a whole stop
  // string, so any match ends inside the new piece.
  size_t best_start = std::string_view::npos, best_end = std::string_view::npos;
  for (const std::string& s : stops_) {
    const size_t pos = buf.find(s);
    if (pos == std::string_view::npos) continue;
    const size_t end = pos + s.size();
    if (end < best_end || (end == best_end && pos < best_start)) { best_start = pos; best_end = end; }
  }
  if (best_start != std::string_view::npos) {
    Emit out{std::string(buf.substr(0, best_start)), true};
    held_.clear();
    stopped_ = true;
    return out;
  }

  // Hold back the longest suffix that is a proper prefix of some stop string, and any cut-off character.
  size_t hold_from = buf.size();
  for (const std::string& s : stops_) {
    for (size_t len = std::min(s.size() - 1, buf.size()); len > 0; --len) {
      if (buf.compare(buf.size() - len, len, s, 0, len) == 0) {
        hold_from = std::min(hold_from, buf.size() - len);
        break;
      }
    }
  }
  hold_from = std::min(hold_from, incomplete_tail(buf));
  // A valid stop string starts on a character boundary, so this only moves for malformed input.
  for (int i = 0; i < 3 && hold_from > 0 && hold_from < buf.size() &&
                  is_continuation(static_cast<unsigned char>(buf[hold_from]));
       ++i)
    --hold_from;

  Emit out{std::string(buf.substr(0, hold_from)), false};
  held_.erase(0, hold_from);
  return out;
}

std::string StopChecker::flush() {
  if (stopped_) return "";
  std::string out = std::move(held_);
  held_.clear();
  return out;
}

}  // namespace qvl
