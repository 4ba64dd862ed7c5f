// Process memory figures from the kernel: resident set size now and at its peak.
#include "util/memory.h"

#include <cstdio>
#include <cstring>

namespace qvl {

namespace {
uint64_t status_field_kb(const char* key) {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return 0;
  char line[256];
  uint64_t kb = 0;
  const size_t n = std::strlen(key);
  while (std::fgets(line, sizeof line, f)) {
    if (std::strncmp(line, key, n) == 0) {
      std::sscanf(line + n, " %lu", &kb);
      break;
    }
  }
  std::fclose(f);
  return kb;
}
}  // namespace

uint64_t current_rss_bytes() { return status_field_kb("VmRSS:") * 1024; }
uint64_t peak_rss_bytes() { return status_field_kb("VmHWM:") * 1024; }

}  // namespace qvl
