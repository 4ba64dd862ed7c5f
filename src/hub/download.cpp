// Downloads a set of files a few at a time, each resumed from its partial file, checked against its published
// size and digest before it is moved into place, with progress reports and the error messages of a model hub.
#include "hub/download.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <thread>

#include "hub/cache.h"
#include "util/digest.h"

namespace qvl::hub {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

// A dropped connection is resumed this many times per file before the pull gives up.
constexpr int kMaxAttempts = 5;
// A 5xx answer is retried this many times, after 0.5 s and 1 s: long enough for a restarting server, short
// enough that a hub that is really down is reported in under two seconds.
constexpr int kMax5xxRetries = 2;
// Progress is reported at most this often (and at the end of each file).
constexpr auto kProgressInterval = std::chrono::milliseconds(100);

std::string human_bytes(int64_t n) {
  char buf[32];
  if (n < 1024) return std::to_string(n) + " B";
  const char* units[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(n);
  int u = -1;
  while (v >= 1024 && u < 4) v /= 1024, ++u;
  std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
  return buf;
}

// Shared progress of one download_files() call.
class Tracker {
 public:
  Tracker(const std::vector<FileJob>& jobs, const std::function<void(const Progress&)>& cb)
      : cb_(cb), sizes_(jobs.size()), done_(jobs.size(), 0), start_(Clock::now()) {
    for (size_t i = 0; i < jobs.size(); ++i) {
      sizes_[i] = std::max<int64_t>(jobs[i].size, 0);
      p_.all_total += sizes_[i];
    }
  }
  void set_size(size_t i, int64_t size) {
    std::lock_guard<std::mutex> l(mu_);
    if (size < 0) return;
    p_.all_total += size - sizes_[i];
    sizes_[i] = size;
  }
  // The file's bytes on disk are now `file_size`; `fresh` of them came over the network just now.
  void update(size_t i, const std::string& name, int64_t file_size, int64_t fresh, bool force) {
    std::lock_guard<std::mutex> l(mu_);
    p_.all_done += file_size - done_[i];
    done_[i] = file_size;
    fetched_ += fresh;
    p_.file = name;
    p_.file_done = file_size;
    p_.file_total = sizes_[i];
    const auto now = Clock::now();
    if (!cb_ || (!force && now - last_ < kProgressInterval)) return;
    last_ = now;
    const double secs = std::chrono::duration<double>(now - start_).count();
    p_.bytes_per_s = secs > 0 ? static_cast<double>(fetched_) / secs : 0;
    cb_(p_);
  }
  void finished() {
    std::lock_guard<std::mutex> l(mu_);
    if (!cb_) return;
    p_.finished = true;
    p_.all_done = p_.all_total;
    cb_(p_);
  }

 private:
  std::mutex mu_;
  const std::function<void(const Progress&)>& cb_;
  std::vector<int64_t> sizes_, done_;
  Progress p_;
  int64_t fetched_ = 0;
  Clock::time_point start_, last_;
};

int64_t file_size(const std::string& path) {
  std::error_code ec;
  const auto n = fs::file_size(path, ec);
  return ec ? -1 : static_cast<int64_t>(n);
}

// The published digest check; `what` names the file in the repository.
Status verify(const Transfer& t, const std::string& what) {
  const int64_t size = file_size(t.partial_path);
  if (t.size >= 0 && size != t.size) {
    return Status::Error(what + ": downloaded " + std::to_string(size) + " bytes, expected " + std::to_string(t.size));
  }
  std::string expected, got, kind;
  if (!t.sha256.empty()) {
    QVL_ASSIGN_OR_RETURN(got, sha256_file(t.partial_path));
    expected = t.sha256, kind = "sha256";
  } else if (!t.git_sha1.empty()) {
    QVL_ASSIGN_OR_RETURN(got, git_blob_sha1_file(t.partial_path));
    expected = t.git_sha1, kind = "git blob sha1";
  }
  if (got != expected) {
    return Status::Error(what + ": " + kind + " mismatch: expected " + expected + ", got " + got);
  }
  return Status::Ok();
}

// Holds an exclusive flock() on a lock file (the same files huggingface_hub's filelock uses) while alive.
class FileLock {
 public:
  explicit FileLock(const std::string& path) {
    std::error_code ec;
    fs::create_directories(fs::path(path).parent_path(), ec);
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ >= 0) {
      while (::flock(fd_, LOCK_EX) != 0 && errno == EINTR) {
      }
    }
  }
  ~FileLock() {
    if (fd_ >= 0) ::close(fd_);  // releases the lock
  }

 private:
  int fd_ = -1;
};

Status disk_full(const std::string& path, const HubContext& hub) {
  return Status::Error(path + ": the disk is full (ENOSPC) while downloading " + hub.repo_id +
                       "; free some space or point the cache elsewhere (--cache-dir, HF_HUB_CACHE or "
                       "MODELSCOPE_CACHE), then run the pull again: it resumes");
}

// Downloads one file whose Transfer is known. `stop` is set when another file failed.
Status fetch_one(size_t index, const FileJob& job, const Transfer& t, const HubContext& hub, Tracker& tracker,
                 const std::atomic<bool>& stop) {
  const std::string what = hub.repo_id + "/" + job.name;
  std::error_code ec;
  fs::create_directories(fs::path(t.partial_path).parent_path(), ec);
  fs::create_directories(fs::path(t.final_path).parent_path(), ec);
  if (t.size >= 0 && file_size(t.partial_path) > t.size) fs::remove(t.partial_path, ec);  // not this file's bytes
  tracker.update(index, job.name, std::max<int64_t>(file_size(t.partial_path), 0), 0, true);

  int attempts = 0, retries_5xx = 0;
  for (;;) {
    if (t.size >= 0 && file_size(t.partial_path) == t.size) break;  // a previous run got every byte
    DownloadRequest req;
    req.url = t.url;
    req.headers = t.headers;
    req.path = t.partial_path;
    req.on_data = [&](int64_t delta, int64_t size) {
      tracker.update(index, job.name, size, delta, false);
      return !stop.load();
    };
    DownloadOutcome out = http_download(req);
    if (out.write_errno == ENOSPC || out.write_errno == EDQUOT) return disk_full(t.partial_path, hub);
    if (out.write_errno) {
      return Status::Error(t.partial_path + ": cannot write: " + std::strerror(out.write_errno) +
                           "; check the cache folder's permissions");
    }
    if (out.aborted) return Status::Error(what + ": stopped because another file failed");
    if (!out.transfer.message.empty()) {
      if (out.transfer.unreachable) return Status::Error(describe_unreachable(out.transfer.message, hub));
      if (++attempts >= kMaxAttempts) {
        return Status::Error(what + ": the transfer broke off " + std::to_string(attempts) + " times (last: " +
                             out.transfer.message + "); run the pull again to resume from " +
                             std::to_string(std::max<int64_t>(file_size(t.partial_path), 0)) + " bytes");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(200 * attempts));
      continue;  // resume with a Range request from what is on disk
    }
    if (out.status == 416) break;  // nothing left to fetch: the partial file is whole (verified below)
    if (out.status >= 500 && retries_5xx < kMax5xxRetries) {
      std::this_thread::sleep_for(std::chrono::milliseconds(500 << retries_5xx++));
      continue;
    }
    if (out.status != 200 && out.status != 206) {
      auto it = out.headers.find("x-error-code");
      return Status::Error(describe_http_error(out.status, it == out.headers.end() ? "" : it->second, what, hub));
    }
    // A server that closes early without an error: resume as for a broken transfer.
    if (t.size >= 0 && file_size(t.partial_path) < t.size) {
      if (++attempts >= kMaxAttempts) {
        return Status::Error(what + ": the server sent " + std::to_string(file_size(t.partial_path)) + " of " +
                             std::to_string(t.size) + " bytes " + std::to_string(attempts) + " times; run the pull again");
      }
      continue;
    }
    break;
  }
  tracker.update(index, job.name, std::max<int64_t>(file_size(t.partial_path), 0), 0, true);
  if (Status v = verify(t, what); !v.ok()) {
    fs::remove(t.partial_path, ec);
    tracker.update(index, job.name, 0, 0, true);
    return Status::Error(v.message() + "; the corrupt download was deleted, run the pull again to fetch it anew (if "
                                       "it keeps failing, the server or a proxy alters the file)");
  }
  fs::rename(t.partial_path, t.final_path, ec);
  if (ec) return Status::Error(t.final_path + ": cannot move the download into place: " + ec.message());
  return Status::Ok();
}

// True when the file at final_path can be used as it is.
bool already_there(const Transfer& t) {
  const int64_t size = file_size(t.final_path);
  if (size < 0 || (t.size >= 0 && size != t.size)) return false;
  if (!t.verify_existing || t.sha256.empty()) return true;
  auto got = sha256_file(t.final_path);
  return got.ok() && *got == t.sha256;
}

Status run_job(size_t index, const FileJob& job, const HubContext& hub, Tracker& tracker,
               const std::atomic<bool>& stop) {
  QVL_ASSIGN_OR_RETURN(Transfer t, job.locate());
  tracker.set_size(index, t.size);
  if (!already_there(t)) {
    FileLock lock(t.lock_path);
    if (!already_there(t)) {  // another process may have finished it while this one waited for the lock
      std::error_code ec;
      if (t.verify_existing) fs::remove(t.final_path, ec);
      QVL_RETURN_IF_ERROR(fetch_one(index, job, t, hub, tracker, stop));
    }
  }
  tracker.update(index, job.name, std::max<int64_t>(file_size(t.final_path), 0), 0, true);
  return job.finish ? job.finish(t) : Status::Ok();
}

}  // namespace

std::string describe_http_error(long status, const std::string& error_code, const std::string& what,
                                const HubContext& hub) {
  const std::string head = what + ": " + hub.name + " (" + hub.endpoint + ") answered HTTP " + std::to_string(status);
  if (status == 401 || status == 403) {
    std::string s = head + (status == 401 ? " Unauthorized" : " Forbidden") +
                    ": the repository is gated or private, or the token is not valid for it";
    if (error_code == "GatedRepo") s += " (gated: accept the model's terms on its page first)";
    return s + "; " + hub.token_hint;
  }
  if (status == 404) {
    if (error_code == "RevisionNotFound") return head + " Not Found: no such revision of " + hub.repo_id;
    if (error_code == "EntryNotFound") return head + " Not Found: the repository has no such file";
    return head + " Not Found: no such model or file; check the id's spelling and case (e.g. "
                  "Qwen/Qwen3-VL-2B-Instruct), the revision, and the source (--source hf|modelscope)";
  }
  if (status == 429) return head + " Too Many Requests: wait a minute and run the pull again (it resumes)";
  if (status >= 500) {
    return head + ": the server failed (after retries); try again later (the pull resumes), or set " +
           hub.endpoint_env + " to a mirror";
  }
  return head + ": unexpected; expected 200, 206 or a redirect";
}

std::string describe_unreachable(const std::string& detail, const HubContext& hub) {
  return "cannot reach " + hub.name + " at " + hub.endpoint + ": " + detail +
         "; check the network and proxy (https_proxy), or set " + hub.endpoint_env +
         " to a mirror; with HF_HUB_OFFLINE=1 qvl never connects and uses only the files already in the cache";
}

Status check_free_space(const std::string& dir, int64_t needed, const HubContext& hub) {
  const int64_t avail = free_bytes(dir);
  if (avail < 0 || needed <= avail) return Status::Ok();
  return Status::Error(hub.repo_id + ": not enough disk space in " + dir + ": the download needs " +
                       human_bytes(needed) + " more, " + human_bytes(avail) +
                       " are free (ENOSPC); free some space or point the cache at a larger disk (--cache-dir, "
                       "HF_HUB_CACHE or MODELSCOPE_CACHE)");
}

Result<HttpResponse> request_retrying(const HttpRequest& request, const HubContext& hub) {
  for (int attempt = 0;; ++attempt) {
    TransferError err;
    auto r = http_request(request, &err);
    const bool transient = !r.ok() ? !err.unreachable && !err.message.empty() : r->status >= 500;
    if (transient && attempt < kMax5xxRetries) {
      std::this_thread::sleep_for(std::chrono::milliseconds(500 << attempt));
      continue;
    }
    if (!r.ok() && err.unreachable) return Status::Error(describe_unreachable(err.message, hub));
    return r;
  }
}

Status download_files(const std::vector<FileJob>& jobs, int parallel, const HubContext& hub,
                      const std::function<void(const Progress&)>& on_progress) {
  Tracker tracker(jobs, on_progress);
  std::atomic<size_t> next{0};
  std::atomic<bool> stop{false};
  std::mutex mu;
  Status first;
  auto worker = [&] {
    for (size_t i; !stop.load() && (i = next++) < jobs.size();) {
      Status s = run_job(i, jobs[i], hub, tracker, stop);
      if (!s.ok()) {
        std::lock_guard<std::mutex> l(mu);
        if (first.ok()) first = s;
        stop = true;
      }
    }
  };
  const int n = std::clamp<int>(parallel, 1, std::max<int>(1, static_cast<int>(jobs.size())));
  std::vector<std::thread> threads;
  for (int t = 1; t < n; ++t) threads.emplace_back(worker);
  worker();
  for (auto& t : threads) t.join();
  if (first.ok()) tracker.finished();
  return first;
}

}  // namespace qvl::hub
