// Process memory figures from the kernel: resident set size now and at its peak.
#pragma once

#include <cstdint>

namespace qvl {

// Bytes; 0 where /proc is unavailable.
uint64_t current_rss_bytes();
uint64_t peak_rss_bytes();

}  // namespace qvl
