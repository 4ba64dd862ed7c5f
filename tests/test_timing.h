// How long the C++ tests wait: every client read timeout, wait-for loop, deadline and latency bound in tests/
// is written for Release speed on an idle machine and stretched here by one scale (see time_scale()).
#pragma once

#include <sys/time.h>

#include <chrono>
#include <cstdlib>

// The build's own slowdown, from cmake/test_timing.cmake: 1 Release, 4 ASan+UBSan, 8 TSan, 10 qemu-user.
#ifndef QVL_TEST_BUILD_SLOWDOWN
#define QVL_TEST_BUILD_SLOWDOWN 1
#endif

namespace qvl::test {

// The build's slowdown times QVL_TEST_TIME_SCALE from the environment (a float > 0, default 1; 2 or 3 on a
// slow or loaded machine). Only waits grow with it: a test that passes takes no longer.
inline double time_scale() {
  static const double scale = [] {
    const char* env = std::getenv("QVL_TEST_TIME_SCALE");
    char* end = nullptr;
    const double machine = env ? std::strtod(env, &end) : 1;
    return (machine > 0 && (!env || (end != env && *end == '\0')) ? machine : 1) * QVL_TEST_BUILD_SLOWDOWN;
  }();
  return scale;
}

// `seconds` at Release speed, as this build and machine need them.
inline double scaled(double seconds) { return seconds * time_scale(); }

// The same as a duration, for sleep_for, deadlines and comparisons with steady_clock differences.
inline std::chrono::milliseconds scaled_ms(double milliseconds) {
  return std::chrono::milliseconds(static_cast<long long>(milliseconds * time_scale()));
}

// A deadline `seconds` (at Release speed) from now.
inline std::chrono::steady_clock::time_point deadline_in(double seconds) {
  return std::chrono::steady_clock::now() + scaled_ms(seconds * 1000);
}

// The same as a timeval, for SO_RCVTIMEO and SO_SNDTIMEO.
inline timeval scaled_timeval(double seconds) {
  const long long ms = scaled_ms(seconds * 1000).count();
  return timeval{static_cast<time_t>(ms / 1000), static_cast<suseconds_t>(ms % 1000 * 1000)};
}

}  // namespace qvl::test
