// Argument-parsing helpers shared by the subcommands.
#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "cli/cli.h"

namespace qvl::cli {

int fail(const std::string& command, const std::string& message) {
  std::fprintf(stderr, "qvl %s: %s\n", command.c_str(), message.c_str());
  return 2;
}

Result<long long> parse_int(const std::string& option, const std::string& value, long long min, long long max) {
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || errno == ERANGE)
    return Status::Error(option + " expects an integer, got '" + value + "'");
  if (v < min || v > max)
    return Status::Error(option + " must be in [" + std::to_string(min) + ", " + std::to_string(max) + "], got " + value);
  return v;
}

}  // namespace qvl::cli
