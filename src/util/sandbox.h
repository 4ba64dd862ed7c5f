// A helper program run confined, for work on untrusted bytes that qvl hands to a tool it does not own (the PDF
// renderer): its input comes as a sealed in-memory file on stdin and its answer on stdout, nothing else of the
// server is open in it, and it runs under memory, CPU-time, wall-clock and output limits, with no network
// (seccomp: socket() fails) and, where the kernel has Landlock, no file writes and reads only beneath the
// directories it is given. A crash, a timeout or an overflow is a result, never a fault of the caller.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "util/status.h"

namespace qvl {

struct SandboxLimits {
  uint64_t address_space_bytes = uint64_t{1} << 30;  // RLIMIT_AS
  int cpu_seconds = 30;                               // RLIMIT_CPU (SIGXCPU, then SIGKILL a second later)
  double wall_seconds = 30;                           // killed (the whole process group) past this
  uint64_t max_stdout_bytes = uint64_t{256} << 20;    // killed when it writes more
  uint64_t max_stderr_bytes = 64 << 10;               // kept; the rest is read and dropped
};

struct SandboxResult {
  int exit_code = -1;  // its exit status when it exited; -1 when a signal ended it
  int signal = 0;      // the signal that ended it (SIGKILL after a timeout or overflow), else 0
  bool timed_out = false;
  bool output_too_large = false;
  double seconds = 0;  // wall-clock time it ran
  std::vector<uint8_t> out;
  std::string err;  // the start of its standard error
  bool ok() const { return exit_code == 0 && !timed_out && !output_too_large; }
};

// Which confinements this kernel grants a child: "rlimits, no-new-privs, seccomp, landlock" or a shorter list
// (Landlock is missing from kernels before 5.13 or where it is not enabled). Checked once.
std::string sandbox_isolation();
bool sandbox_has_landlock();

// Runs argv[0] (an absolute path) with `argv`, `input` as its stdin, a minimal environment, in its own process
// group, confined as above, with read access only beneath `readable` (paths that do not exist are skipped).
// Returns once it has ended (or been killed); an error only when it could not be started at all.
Result<SandboxResult> run_sandboxed(const std::vector<std::string>& argv, std::span<const uint8_t> input,
                                    const SandboxLimits& limits, const std::vector<std::string>& readable);

}  // namespace qvl
