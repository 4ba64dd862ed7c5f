// A persistent pool of worker threads with a low-overhead parallel_for: the calling thread takes part,
// workers spin briefly before sleeping so back-to-back calls (one per layer) do not pay a wake-up each.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "util/status.h"

namespace qvl {

class ThreadPool {
 public:
  // n_threads counts the calling thread: 1 means no workers, everything runs inline.
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Runs fn(thread_index, begin, end) over [0, n) split into one contiguous range per thread (ranges of
  // whole multiples of `grain` except the last). Returns when every range is done. Not reentrant.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int, int64_t, int64_t)>& fn);

  // Runs fn(thread_index, begin, end) over [0, n) in chunks of `chunk` indices handed out one at a time to
  // whichever thread is free: a thread that starts late (woken from sleep) or runs slow (a busy sibling)
  // takes fewer chunks instead of holding everyone up. Returns when every chunk is done. Not reentrant.
  void parallel_for_dynamic(int64_t n, int64_t chunk, const std::function<void(int, int64_t, int64_t)>& fn);

  // Runs fn(thread_index) once on each thread.
  void run_on_all(const std::function<void(int)>& fn) { run_on_first(n_threads_, fn); }

  // True when the pool has more threads than the CPUs this process may run on (its affinity mask): its
  // threads then wait without spinning, so that the ones with work get the CPUs.
  bool oversubscribed() const { return oversubscribed_; }

  // Pins thread i of the pool (0: the calling thread) to one logical CPU of the i-th physical core among
  // the CPUs this process may run on (so `taskset` still decides which), wrapping around when there are
  // more threads than cores. Returns the CPUs chosen, or an error saying why nothing was pinned.
  Result<std::vector<int>> pin_to_cores();

 private:
  void worker(int index);
  // Runs fn(thread_index) on threads 0 .. used-1; the others are not waited for (they may be asleep or, on
  // an oversubscribed machine, not scheduled).
  void run_on_first(int used, const std::function<void(int)>& fn);

  int n_threads_;
  bool oversubscribed_ = false;
  int spin_rounds_ = 0;  // how long a waiting thread spins before it sleeps (0 when oversubscribed)
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable cv_;
  const std::function<void(int)>* job_ = nullptr;
  int active_ = 0;  // threads 0 .. active_-1 run job_ (guarded by mu_, like job_)
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  bool stop_ = false;
};

}  // namespace qvl
