// run_sandboxed: posix_spawn this executable as a one-shot helper (no page table of the server is copied, no
// code of the server's runs in a forked copy of it), which confines itself and execs the program; the parent
// feeds nothing (the input is a sealed memfd on the worker's stdin), reads stdout and stderr until they close,
// the deadline or the cap, and reaps it.
#include "util/sandbox.h"

#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/landlock.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <spawn.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdlib>
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

// The system calls a renderer has no use for and a compromised one would want, each failing with EACCES: the
// network (io_uring too: it opens sockets without socket()), other processes (signals, ptrace, their memory,
// their file descriptors), leaving the process group, namespaces, mounts, keyrings, BPF, and any change to the
// file system (Landlock says the same where the kernel has it; this holds where it has not).
constexpr int kDenied[] = {
    __NR_socket, __NR_socketpair, __NR_connect, __NR_bind, __NR_listen, __NR_accept4,
    __NR_io_uring_setup, __NR_io_uring_enter, __NR_io_uring_register,
    __NR_ptrace, __NR_process_vm_readv, __NR_process_vm_writev, __NR_kill, __NR_tkill, __NR_rt_sigqueueinfo,
    __NR_rt_tgsigqueueinfo, __NR_pidfd_open, __NR_pidfd_getfd, __NR_pidfd_send_signal, __NR_setsid, __NR_setpgid,
    __NR_unshare, __NR_setns, __NR_mount, __NR_umount2, __NR_pivot_root, __NR_chroot, __NR_bpf, __NR_perf_event_open,
    __NR_userfaultfd, __NR_keyctl, __NR_add_key, __NR_request_key, __NR_execveat, __NR_open_by_handle_at,
    __NR_name_to_handle_at, __NR_truncate, __NR_unlinkat, __NR_renameat, __NR_renameat2, __NR_mkdirat, __NR_symlinkat,
    __NR_linkat, __NR_mknodat, __NR_fchmodat, __NR_fchownat, __NR_fchmod, __NR_fchown,
#if defined(__x86_64__)
    __NR_fork, __NR_vfork, __NR_accept, __NR_unlink, __NR_rename, __NR_mkdir, __NR_rmdir, __NR_symlink, __NR_link,
    __NR_mknod, __NR_chmod, __NR_chown, __NR_lchown, __NR_creat,
#endif
};

// Flags of clone() that make a new namespace: refused even for a thread.
constexpr uint32_t kNewNamespaces = CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER |
                                    CLONE_NEWPID | CLONE_NEWNET | 0x00000080u /* CLONE_NEWTIME */;
// open()/openat() flags that would write: refused (reading stays allowed).
constexpr uint32_t kWriteFlags = O_WRONLY | O_RDWR | O_CREAT | O_TRUNC | O_APPEND;

struct Filter {
  sock_filter code[160];
  unsigned short n = 0;
  void add(sock_filter f) {
    if (n < sizeof(code) / sizeof(code[0])) code[n++] = f;
  }
  bool full() const { return n >= sizeof(code) / sizeof(code[0]); }
};

constexpr uint32_t arg_low(int i) { return static_cast<uint32_t>(offsetof(seccomp_data, args) + 8 * i); }  // little-endian

// Built in the child (stack writes only): `self` is its pid, the one tgkill() may signal (abort() and raise()).
void make_filter(Filter& f, pid_t self) {
  const sock_filter allow = BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
  const sock_filter deny = BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EACCES & SECCOMP_RET_DATA));
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
    f.add(deny);
  }
  // clone3: its flags are in memory a filter cannot read; ENOSYS makes glibc fall back to clone().
  f.add(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_clone3, 0, 1));
  f.add(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA)));
  // clone: threads only (CLONE_THREAD), never a new namespace. Every path returns; A still holds nr otherwise.
  f.add(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_clone, 0, 5));
  f.add(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, arg_low(0)));
  f.add(BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, kNewNamespaces, 2, 0));
  f.add(BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, CLONE_THREAD, 0, 1));
  f.add(allow);
  f.add(deny);
  // tgkill: only to itself.
  f.add(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_tgkill, 0, 4));
  f.add(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, arg_low(0)));
  f.add(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, static_cast<uint32_t>(self), 0, 1));
  f.add(allow);
  f.add(deny);
  // openat (and open): reading only. openat2's flags are in memory: ENOSYS (glibc's open() uses openat).
  f.add(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_openat2, 0, 1));
  f.add(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA)));
  f.add(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_openat, 0, 4));
  f.add(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, arg_low(2)));
  f.add(BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, kWriteFlags, 0, 1));
  f.add(deny);
  f.add(allow);
#if defined(__x86_64__)
  f.add(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_open, 0, 4));
  f.add(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, arg_low(1)));
  f.add(BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, kWriteFlags, 0, 1));
  f.add(deny);
  f.add(allow);
#endif
  f.add(allow);
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
  // ABI 2 adds REFER (linking or renaming across directories), ABI 3 TRUNCATE: handled, so denied, too.
  attr.handled_access_fs = kFsRightsV1 | (landlock_abi() >= 2 ? uint64_t{1} << 13 : 0) |
                           (landlock_abi() >= 3 ? uint64_t{1} << 14 : 0);
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

constexpr const char* kHelperTag = "__qvl_sandbox_v1";

// The helper: this very executable started by posix_spawn (which copies no page table, unlike fork() of a
// server holding gigabytes) with argv = [exe, kHelperTag, parent pid, address-space bytes, CPU seconds, N,
// N readable paths, "--", program, args...], its stdin/stdout/stderr already the worker's and fd 3 the report
// pipe. A fresh single-threaded process: it confines itself, then execs the program. A failed step is
// reported on fd 3 as {step, errno}.
[[noreturn]] void helper_main(int argc, char** argv) {
  const int report = 3;
  auto fail = [&](int step) {
    const int e[2] = {step, errno};
    write_all(report, e, sizeof(e));
    _exit(127);
  };
  if (argc < 8) fail(8);
  const pid_t parent = static_cast<pid_t>(std::strtol(argv[2], nullptr, 10));
  const uint64_t address_space = std::strtoull(argv[3], nullptr, 10);
  const rlim_t cpu_seconds = static_cast<rlim_t>(std::strtoull(argv[4], nullptr, 10));
  const int n_readable = static_cast<int>(std::strtol(argv[5], nullptr, 10));
  if (n_readable < 0 || 6 + n_readable + 1 >= argc || std::strcmp(argv[6 + n_readable], "--") != 0) fail(8);
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) fail(1);
  if (getppid() != parent) _exit(127);  // the server died before the line above
  if (fcntl(report, F_SETFD, FD_CLOEXEC) != 0) fail(2);
  // Under memory pressure the kernel kills the worker before the server.
  if (const int oom = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC); oom >= 0) {
    write_all(oom, "1000", 4);
    close(oom);
  }
  const rlimit as{address_space, address_space};
  const rlimit cpu{cpu_seconds, cpu_seconds + 1};
  const rlimit zero{0, 0};
  const rlimit files{64, 64};
  if (setrlimit(RLIMIT_AS, &as) != 0 || setrlimit(RLIMIT_CPU, &cpu) != 0 || setrlimit(RLIMIT_FSIZE, &zero) != 0 ||
      setrlimit(RLIMIT_CORE, &zero) != 0 || setrlimit(RLIMIT_NOFILE, &files) != 0)
    fail(3);
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) fail(4);
  const std::vector<std::string> readable(argv + 6, argv + 6 + n_readable);
  if (const int ruleset = make_ruleset(readable); ruleset >= 0) {
    if (syscall(__NR_landlock_restrict_self, ruleset, 0) != 0) fail(5);
    close(ruleset);
  }
  Filter filter;
  make_filter(filter, getpid());
  if (filter.full()) fail(6);
  sock_fprog prog{filter.n, filter.code};
  if (syscall(__NR_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) != 0) fail(6);
  // Nothing of the server stays open: 4 and up are closed; the report pipe closes by itself at exec.
  if (syscall(__NR_close_range, 4u, ~0u, 0u) != 0)
    for (int fd = 4; fd < 65536; ++fd) close(fd);
  char** program = argv + 6 + n_readable + 1;
  execve(program[0], program, environ);
  fail(7);
  _exit(127);  // not reached: fail() exits
}

// Runs before main() in every executable that links this file (qvl, the tests, the fuzz targets): glibc hands
// .init_array functions argc, argv and the environment. Anything but the helper's tag returns at once.
__attribute__((constructor)) void sandbox_helper_entry(int argc, char** argv, char** /*envp*/) {
  if (argc > 1 && argv && argv[1] && std::strcmp(argv[1], kHelperTag) == 0) helper_main(argc, argv);
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
    case 8: return "reading its helper's arguments";
    default: return "starting it";
  }
}

// `fd` moved to descriptor 10 or above (close-on-exec); -1 stays -1.
int high_fd(int fd) {
  if (fd < 0 || fd >= 10) return fd;
  const int moved = fcntl(fd, F_DUPFD_CLOEXEC, 10);
  close(fd);
  return moved;
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
  // What the helper needs, on descriptors 10 and up (so that its dup2() onto 0, 1, 2 and 3 never lands on one
  // of them, even in a server started with 0-2 closed).
  Fd in(high_fd(static_cast<int>(syscall(__NR_memfd_create, "qvl-sandbox-input", MFD_CLOEXEC | MFD_ALLOW_SEALING))));
  if (in.fd < 0) return Status::Error(std::string("run_sandboxed: memfd_create failed: ") + std::strerror(errno));
  write_all(in.fd, input.data(), input.size());
  if (lseek(in.fd, 0, SEEK_SET) != 0) return Status::Error("run_sandboxed: could not rewind its input");
  fcntl(in.fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL);
  int p_out[2], p_err[2], p_rep[2];
  if (pipe2(p_out, O_CLOEXEC) != 0) return Status::Error("run_sandboxed: pipe failed");
  Fd out_r(high_fd(p_out[0])), out_w(high_fd(p_out[1]));
  if (pipe2(p_err, O_CLOEXEC) != 0) return Status::Error("run_sandboxed: pipe failed");
  Fd err_r(high_fd(p_err[0])), err_w(high_fd(p_err[1]));
  if (pipe2(p_rep, O_CLOEXEC) != 0) return Status::Error("run_sandboxed: pipe failed");
  Fd rep_r(high_fd(p_rep[0])), rep_w(high_fd(p_rep[1]));
  if (in.fd < 0 || out_r.fd < 0 || out_w.fd < 0 || err_r.fd < 0 || err_w.fd < 0 || rep_r.fd < 0 || rep_w.fd < 0)
    return Status::Error("run_sandboxed: no file descriptor left");
  // The helper's arguments (see helper_main) and a minimal environment: fontconfig looks for a cache under
  // $HOME or XDG_CACHE_HOME, finds none it may write, and carries on.
  std::vector<std::string> strings = {"/proc/self/exe", kHelperTag, std::to_string(getpid()),
                                      std::to_string(limits.address_space_bytes), std::to_string(limits.cpu_seconds),
                                      std::to_string(readable.size())};
  strings.insert(strings.end(), readable.begin(), readable.end());
  strings.push_back("--");
  strings.insert(strings.end(), argv.begin(), argv.end());
  std::vector<char*> args;
  for (const std::string& a : strings) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const char* env[] = {"PATH=/usr/bin:/bin", "LANG=C", "LC_ALL=C", "HOME=/nonexistent", "XDG_CACHE_HOME=/nonexistent",
                       nullptr};
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&actions);
  posix_spawnattr_init(&attr);
  posix_spawn_file_actions_adddup2(&actions, in.fd, 0);
  posix_spawn_file_actions_adddup2(&actions, out_w.fd, 1);
  posix_spawn_file_actions_adddup2(&actions, err_w.fd, 2);
  posix_spawn_file_actions_adddup2(&actions, rep_w.fd, 3);
  // Its own process group (killed whole), every signal unblocked and at its default (the server blocks SIGINT
  // and SIGTERM and ignores SIGPIPE).
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
  const auto start = std::chrono::steady_clock::now();
  pid_t pid = -1;
  const int spawned = posix_spawn(&pid, "/proc/self/exe", &actions, &attr, args.data(), const_cast<char* const*>(env));
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (spawned != 0) return Status::Error(std::string("run_sandboxed: could not start its helper: ") + std::strerror(spawned));
  out_w.reset();
  err_w.reset();
  rep_w.reset();
  in.reset();

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
    if (got < 0 && errno != EINTR) {
      kill_group();
      break;
    }
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
  // Its output closed: it has ended or is about to, or it closed its output and lingers. Waited for (not
  // reaped) until the deadline; then its whole group is killed, stragglers it left included (the unreaped
  // process keeps its pid and group id, so the kill reaches no one else), and it is reaped.
  for (;;) {
    siginfo_t info{};
    const int w = waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT);
    if (w == 0 && info.si_pid == pid) break;
    if (w < 0 && errno != EINTR) break;
    if (std::chrono::steady_clock::now() >= deadline) {
      if (!killed) r.timed_out = true;
      kill_group();
      break;
    }
    usleep(2000);
  }
  ::kill(-pid, SIGKILL);
  int status = 0;
  pid_t reaped;
  while ((reaped = waitpid(pid, &status, 0)) < 0 && errno == EINTR) {
  }
  if (reaped != pid) return Status::Error(std::string("run_sandboxed: lost its worker: ") + std::strerror(errno));
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
