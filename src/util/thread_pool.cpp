// A persistent pool of worker threads with a low-overhead parallel_for: the calling thread takes part,
// workers spin briefly before sleeping so back-to-back calls (one per layer) do not pay a wake-up each.
#include "util/thread_pool.h"

#include "util/cpu_budget.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace qvl {

namespace {
inline void cpu_relax() {
#if defined(__x86_64__)
  _mm_pause();
#endif
}
// Spin this many rounds (tens of microseconds to a millisecond, by the CPU's pause) before sleeping on the
// condition variable: not at all when the pool has more threads than CPUs, where a spinning thread takes the
// time slice of one that has work (64 threads on 2 CPUs: every call waited for dozens of spinners).
constexpr int kSpinRounds = 20000;

}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
  int cpus = 0;  // logical CPUs in this process's affinity mask (0: unreadable)
  allowed_core_cpus(&cpus);
  oversubscribed_ = cpus > 0 && n_threads_ > cpus;
  spin_rounds_ = oversubscribed_ ? 0 : kSpinRounds;
  for (int i = 1; i < n_threads_; ++i) threads_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    generation_.fetch_add(1, std::memory_order_release);
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadPool::worker(int index) {
  uint64_t seen = 0;
  for (;;) {
    // Wait for a new generation: spin first, then sleep.
    uint64_t gen = generation_.load(std::memory_order_acquire);
    for (int spin = 0; gen == seen && spin < spin_rounds_; ++spin) {
      cpu_relax();
      gen = generation_.load(std::memory_order_acquire);
    }
    if (gen == seen) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
      gen = generation_.load(std::memory_order_acquire);
    }
    const std::function<void(int)>* job;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
      // The generation read again under the lock, with the job it belongs to: a thread that a call left out
      // is not waited for, so it may see a generation only after the next call has replaced job_.
      seen = generation_.load(std::memory_order_acquire);
      if (index >= active_) continue;  // this call does not need this thread, nor waits for it
      job = job_;
    }
    (*job)(index);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::run_on_first(int used, const std::function<void(int)>& fn) {
  used = std::clamp(used, 1, n_threads_);
  if (used == 1) {
    fn(0);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &fn;
    active_ = used;
    pending_.store(used - 1, std::memory_order_release);
    generation_.fetch_add(1, std::memory_order_release);
  }
  cv_.notify_all();
  fn(0);
  if (oversubscribed_) {
    while (pending_.load(std::memory_order_acquire) != 0) std::this_thread::yield();
  } else {
    while (pending_.load(std::memory_order_acquire) != 0) cpu_relax();
  }
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, const std::function<void(int, int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int64_t chunks = (n + grain - 1) / grain;
  const int used = static_cast<int>(std::min<int64_t>(n_threads_, chunks));
  if (used == 1) {
    fn(0, 0, n);
    return;
  }
  // Thread t gets chunks [t*chunks/used, (t+1)*chunks/used).
  run_on_first(used, [&](int t) {
    const int64_t c0 = t * chunks / used, c1 = (t + 1) * chunks / used;
    const int64_t b = c0 * grain, e = std::min(n, c1 * grain);
    if (b < e) fn(t, b, e);
  });
}

void ThreadPool::parallel_for_dynamic(int64_t n, int64_t chunk, const std::function<void(int, int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  chunk = std::max<int64_t>(1, chunk);
  if (n_threads_ == 1 || chunk >= n) {
    fn(0, 0, n);
    return;
  }
  std::atomic<int64_t> next{0};
  // No more threads than chunks: a thread that would find nothing left is not woken for it.
  run_on_first(static_cast<int>(std::min<int64_t>(n_threads_, (n + chunk - 1) / chunk)), [&](int t) {
    for (;;) {
      const int64_t b = next.fetch_add(chunk, std::memory_order_relaxed);
      if (b >= n) return;
      fn(t, b, std::min(n, b + chunk));
    }
  });
}

Result<std::vector<int>> ThreadPool::pin_to_cores() {
  const std::vector<int> cpus = allowed_core_cpus();
  if (cpus.empty()) return Status::Error("--pin: this process may run on no CPU (or its affinity cannot be read)");
  std::vector<int> chosen(static_cast<size_t>(n_threads_));
  for (int i = 0; i < n_threads_; ++i) chosen[static_cast<size_t>(i)] = cpus[static_cast<size_t>(i) % cpus.size()];
  std::vector<int> errors(static_cast<size_t>(n_threads_), 0);
  run_on_all([&](int i) {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(chosen[static_cast<size_t>(i)], &one);
    errors[static_cast<size_t>(i)] = pthread_setaffinity_np(pthread_self(), sizeof(one), &one);
  });
  for (int i = 0; i < n_threads_; ++i)
    if (errors[static_cast<size_t>(i)] != 0)
      return Status::Error("--pin: cannot pin thread " + std::to_string(i) + " to CPU " +
                           std::to_string(chosen[static_cast<size_t>(i)]) + ": " + std::strerror(errors[static_cast<size_t>(i)]));
  return chosen;
}

}  // namespace qvl
