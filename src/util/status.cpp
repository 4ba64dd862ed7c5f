// QVL_CHECK's failure path.
#include "util/status.h"

#include <cstdio>
#include <cstdlib>

namespace qvl {

void check_failed(const char* expr, const char* file, int line, const char* msg) {
  std::fprintf(stderr, "qvl: internal error at %s:%d: check failed: %s%s%s\n", file, line, expr, msg[0] ? ": " : "", msg);
  std::abort();
}

}  // namespace qvl
