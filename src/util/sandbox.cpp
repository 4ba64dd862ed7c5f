// run_sandboxed: fork, confine the child with system calls only (it is a copy of a many-threaded server:
// nothing that takes a lock runs between fork and exec), exec; the parent feeds nothing (the input is a
// sealed memfd on the child's stdin), reads stdout and stderr until they close, the deadline or the cap.
#include "util/sandbox.h"

#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/landlock.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <mutex>

namespace qvl {

namespace {

#if defined(__x86_64__)
constexpr uint32_t kAuditArch = AUDIT_ARCH_X86_64;
#elif defined(__aarch64__)
constexpr uint32_t kAuditArch = AUDIT_ARCH_AARCH64;
#else
#error "sandbox.cpp: no seccomp architecture for this target"
#endif

// The system calls a renderer has no use for and a compromised one would want: the network, other processes'
// memory, new namespaces, new processes, kernel keyrings and BPF. Each fails with EACCES.
constexpr int kDenied[] = {
    __NR_socket, __NR_socketpair, __NR_connect, __NR_bind, __NR_listen, __NR_accept4,
    __NR_ptrace, __NR_process_vm_readv, __NR_process_vm_writev, __NR_kill, __NR_tkill,
    __NR_unshare, __NR_setns, __NR_mount, __NR_bpf, __NR_perf_event_open, __NR_userfaultfd,
    __NR_keyctl, __NR_add_key, __NR_request_key, __NR_execveat,
#ifdef __NR_fork
    __NR_fork,
#endif
#ifdef __NR_vfork
    __NR_vfork,
#endif
#ifdef __NR_accept
    __NR_accept,
#endif
};

struct Filter {
  sock_filter code[64];
  unsigned short n = 0;
  void add(sock_filter f) { code[n++] = f; }
};

Filter make_filter() {
  Filter f;
  f.add(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)));
  f.add(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, kAuditArch, 1, 0));
  f.add(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS));  // another ABI's numbers: not ours to judge
  f.add(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)));
#if defined(__x86_64__)
  f.add(BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 0x40000000u, 0, 1));  // the x32 ABI
  f.add(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS));
#endif
  for (int nr : kDenied) {
    f.add(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, static_cast<uint32_t>(nr), 0, 1));
    f.add(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EACCES & SECCOMP_RET_DATA)));
  }
  f.add(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
  return f;
}

// Landlock's file-system rights of ABI 1 (every kernel with Landlock has them); handled = denied unless a rule
// grants them.
constexpr uint64_t kFsRightsV1 = (uint64_t{1} << 13) - 1;
constexpr uint64_t kReadRights = LANDLOCK_ACCESS_FS_EXECUTE | LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_READ_DIR;

int landlock_abi() {
  static const int abi = [] {
    const long v = syscall(__NR_landlock_create_ruleset, nullptr, 0, LANDLOCK_CREATE_RULESET_VERSION);
    return v > 0 ? static_cast<int>(v) : 0;
  }();
  return abi;
}

// A ruleset fd granting kReadRights beneath each existing path of `readable`; -1 without Landlock.
int make_ruleset(const std::vector<std::string>& readable) {
  if (landlock_abi() < 1) return -1;
  landlock_ruleset_attr attr{};
  attr.handled_access_fs = kFsRightsV1;
  const int fd = static_cast<int>(syscall(__NR_landlock_create_ruleset, &attr, sizeof(attr), 0));
  if (fd < 0) return -1;
  for (const std::string& path : readable) {
    const int pfd = open(path.c_str(), O_PATH | O_CLOEXEC);
    if (pfd < 0) continue;
    struct stat st{};
    landlock_path_beneath_attr rule{};
    rule.parent_fd = pfd;
    // A file (not a directory) takes only the rights that apply to files.
    rule.allowed_access = fstat(pfd, &st) == 0 && S_ISDIR(st.st_mode)
                              ? kReadRights
                              : (LANDLOCK_ACCESS_FS_EXECUTE | LANDLOCK_ACCESS_FS_READ_FILE);
    syscall(__NR_landlock_add_rule, fd, LANDLOCK_RULE_PATH_BENEATH, &rule, 0);
    close(pfd);
  }
  return fd;
}

void write_all(int fd, const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    p += n;
    size -= static_cast<size_t>(n);
  }
}

// In the child, from fork to exec: system calls only. Reports a failed step as errno on `report` and exits.
[[noreturn]] void child(const char* path, char* const* argv, char* const* envp, int in_fd, int out_fd, int err_fd,
                        int report, int ruleset, const Filter& filter, const SandboxLimits& limits, pid_t parent) {
  auto fail = [&](int step) {
    const int e[2] = {step, errno};
    write_all(report, e, sizeof(e));
    _exit(127);
  };
  setpgid(0, 0);
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) fail(1);
  if (getppid() != parent) _exit(127);  // the server died before the line above
  // Signals: the server blocks some and ignores SIGPIPE; the child starts with the defaults.
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  signal(SIGPIPE, SIG_DFL);
  if (dup2(in_fd, 0) < 0 || dup2(out_fd, 1) < 0 || dup2(err_fd, 2) < 0) fail(2);
  const rlimit as{limits.address_space_bytes, limits.address_space_bytes};
  const rlimit cpu{static_cast<rlim_t>(limits.cpu_seconds), static_cast<rlim_t>(limits.cpu_seconds) + 1};
  const rlimit zero{0, 0};
  const rlimit files{64, 64};
  if (setrlimit(RLIMIT_AS, &as) != 0 || setrlimit(RLIMIT_CPU, &cpu) != 0 || setrlimit(RLIMIT_FSIZE, &zero) != 0 ||
      setrlimit(RLIMIT_CORE, &zero) != 0 || setrlimit(RLIMIT_NOFILE, &files) != 0)
    fail(3);
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) fail(4);
  if (ruleset >= 0 && syscall(__NR_landlock_restrict_self, ruleset, 0) != 0) fail(5);
  sock_fprog prog{filter.n, const_cast<sock_filter*>(filter.code)};
  if (syscall(__NR_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) != 0) fail(6);
  // Nothing of the server stays open: descriptors 3 and up are closed (the report pipe is close-on-exec, so
  // it is kept to the last moment and closes by itself at exec).
  if (report != 3) {
    if (dup3(report, 3, O_CLOEXEC) < 0) fail(2);
    report = 3;
  }
  if (syscall(__NR_close_range, 4u, ~0u, 0u) != 0)
    for (int fd = 4; fd < 65536; ++fd) close(fd);
  execve(path, argv, envp);
  fail(7);
  _exit(127);  // not reached: fail() exits
}

const char* step_name(int step) {
  switch (step) {
    case 1: return "setting its parent-death signal";
    case 2: return "connecting its stdin/stdout/stderr";
    case 3: return "setting its resource limits";
    case 4: return "setting no-new-privs";
    case 5: return "entering its Landlock domain";
    case 6: return "installing its seccomp filter";
    case 7: return "executing it";
    default: return "starting it";
  }
}

struct Fd {
  int fd = -1;
  Fd() = default;
  explicit Fd(int f) : fd(f) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  void reset() {
    if (fd >= 0) close(fd);
    fd = -1;
  }
};

}  // namespace

bool sandbox_has_landlock() { return landlock_abi() >= 1; }

std::string sandbox_isolation() {
  return std::string("rlimits, no-new-privs, seccomp") + (sandbox_has_landlock() ? ", landlock" : "");
}

Result<SandboxResult> run_sandboxed(const std::vector<std::string>& argv, std::span<const uint8_t> input,
                                    const SandboxLimits& limits, const std::vector<std::string>& readable) {
  if (argv.empty() || argv[0].empty() || argv[0][0] != '/')
    return Status::Error("run_sandboxed: expected an absolute program path, got '" + (argv.empty() ? "" : argv[0]) + "'");
  // Everything the child needs is made here, before fork.
  Fd in(static_cast<int>(syscall(__NR_memfd_create, "qvl-sandbox-input", MFD_CLOEXEC | MFD_ALLOW_SEALING)));
  if (in.fd < 0) return Status::Error(std::string("run_sandboxed: memfd_create failed: ") + std::strerror(errno));
  write_all(in.fd, input.data(), input.size());
  if (lseek(in.fd, 0, SEEK_SET) != 0) return Status::Error("run_sandboxed: could not rewind its input");
  fcntl(in.fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL);
  int p_out[2], p_err[2], p_rep[2];
  if (pipe2(p_out, O_CLOEXEC) != 0) return Status::Error("run_sandboxed: pipe failed");
  Fd out_r(p_out[0]), out_w(p_out[1]);
  if (pipe2(p_err, O_CLOEXEC) != 0) return Status::Error("run_sandboxed: pipe failed");
  Fd err_r(p_err[0]), err_w(p_err[1]);
  if (pipe2(p_rep, O_CLOEXEC) != 0) return Status::Error("run_sandboxed: pipe failed");
  Fd rep_r(p_rep[0]), rep_w(p_rep[1]);
  Fd ruleset(make_ruleset(readable));
  const Filter filter = make_filter();
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  // fontconfig looks for a cache under $HOME or XDG_CACHE_HOME: it finds none it may write, and carries on.
  const char* env[] = {"PATH=/usr/bin:/bin", "LANG=C", "LC_ALL=C", "HOME=/nonexistent", "XDG_CACHE_HOME=/nonexistent",
                       nullptr};
  const pid_t parent = getpid();
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid < 0) return Status::Error(std::string("run_sandboxed: fork failed: ") + std::strerror(errno));
  if (pid == 0)
    child(args[0], args.data(), const_cast<char* const*>(env), in.fd, out_w.fd, err_w.fd, rep_w.fd, ruleset.fd,
          filter, limits, parent);
  setpgid(pid, pid);  // also from here, so the group exists before any kill below
  out_w.reset();
  err_w.reset();
  rep_w.reset();
  in.reset();
  ruleset.reset();

  SandboxResult r;
  const auto deadline = start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                    std::chrono::duration<double>(limits.wall_seconds));
  bool killed = false;
  auto kill_group = [&] {
    if (!killed) {
      ::kill(-pid, SIGKILL);
      ::kill(pid, SIGKILL);
      killed = true;
    }
  };
  char buf[65536];
  while (out_r.fd >= 0 || err_r.fd >= 0) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      r.timed_out = true;
      kill_group();
      break;
    }
    pollfd fds[2];
    int n = 0;
    if (out_r.fd >= 0) fds[n++] = {out_r.fd, POLLIN, 0};
    if (err_r.fd >= 0) fds[n++] = {err_r.fd, POLLIN, 0};
    const int ms = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count()) + 1;
    const int got = poll(fds, static_cast<nfds_t>(n), ms);
    if (got < 0 && errno != EINTR) break;
    for (int i = 0; i < n && got > 0; ++i) {
      if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      const bool is_out = fds[i].fd == out_r.fd;
      const ssize_t k = read(fds[i].fd, buf, sizeof(buf));
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) {
        (is_out ? out_r : err_r).reset();
        continue;
      }
      if (is_out) {
        if (r.out.size() + static_cast<size_t>(k) > limits.max_stdout_bytes) {
          r.output_too_large = true;
          kill_group();
          out_r.reset();
          err_r.reset();
          break;
        }
        r.out.insert(r.out.end(), buf, buf + k);
      } else if (r.err.size() < limits.max_stderr_bytes) {
        r.err.append(buf, std::min<size_t>(static_cast<size_t>(k), limits.max_stderr_bytes - r.err.size()));
      }
    }
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  int rep[2] = {0, 0};
  if (read(rep_r.fd, rep, sizeof(rep)) == static_cast<ssize_t>(sizeof(rep)))
    return Status::Error("run_sandboxed: " + argv[0] + " could not be started: " + step_name(rep[0]) + " failed: " +
                         std::strerror(rep[1]));
  return r;
}

}  // namespace qvl
