// Child processes for the tests that drive the qvl binary itself (test_cli.cpp, test_entry_points.cpp): a
// program run with its stdout and stderr in files, waited for, signalled, or killed when the test ends.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

extern char** environ;

namespace qvl::test {

// A whole file's bytes ("" when it cannot be read).
inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// A process of `binary args...` with stdout and stderr in files under `logs`, run in `cwd` (default: the
// test's own). Killed when destroyed while still running.
class Proc {
 public:
  Proc(const std::string& binary, const std::vector<std::string>& args, const std::filesystem::path& logs,
       const std::filesystem::path& cwd = {}) {
    static int counter = 0;
    out_ = logs / ("out" + std::to_string(counter));
    err_ = logs / ("err" + std::to_string(counter++));
    std::vector<std::string> argv_s = {binary};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, out_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&actions, 2, err_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (!cwd.empty()) posix_spawn_file_actions_addchdir_np(&actions, cwd.c_str());
    if (posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), environ) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&actions);
  }
  Proc(const Proc&) = delete;
  Proc& operator=(const Proc&) = delete;
  ~Proc() {
    if (pid_ > 0 && !done_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  // The exit code (128 + the signal when killed by one); -1 when it could not start.
  int wait() {
    if (pid_ <= 0) return -1;
    if (!done_) {
      int status = 0;
      waitpid(pid_, &status, 0);
      code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      done_ = true;
    }
    return code_;
  }
  void signal(int sig) { kill(pid_, sig); }
  bool running() {
    if (pid_ <= 0 || done_) return false;
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) != pid_) return true;
    code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    done_ = true;
    return false;
  }
  std::string out() const { return slurp(out_); }
  std::string err() const { return slurp(err_); }
  const std::filesystem::path& out_path() const { return out_; }
  const std::filesystem::path& err_path() const { return err_; }

 private:
  pid_t pid_ = -1;
  bool done_ = false;
  int code_ = -1;
  std::filesystem::path out_, err_;
};

struct Ran {
  int code = -1;
  std::string out, err;
};

// Runs `binary args...` to its end: its exit code and both outputs.
inline Ran run(const std::string& binary, const std::vector<std::string>& args, const std::filesystem::path& logs,
               const std::filesystem::path& cwd = {}) {
  Proc p(binary, args, logs, cwd);
  const int code = p.wait();
  return {code, p.out(), p.err()};
}

inline bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace qvl::test
