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

}  // namespace qvl::cli
