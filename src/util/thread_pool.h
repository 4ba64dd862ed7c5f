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
  void run_on_all(const std::function<void(int)>& fn);

  // Pins thread i of the pool (0: the calling thread) to one logical CPU of the i-th physical core among
  // the CPUs this process may run on (so `taskset` still decides which), wrapping around when there are
  // more threads than cores. Returns the CPUs chosen, or an error saying why nothing was pinned.
  Result<std::vector<int>> pin_to_cores();

 private:
  void worker(int index);

  int n_threads_;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable cv_;
  const std::function<void(int)>* job_ = nullptr;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  bool stop_ = false;
};

}  // namespace qvl
