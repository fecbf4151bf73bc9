// tessera core: a fixed pool of worker threads for data-parallel loops in CPU kernels.
// ParallelFor splits [0, n) into contiguous chunks, one per thread, and blocks until all finish;
// the calling thread takes a chunk itself, so a pool of 1 runs inline with no synchronisation.
// Calls from several threads at once (the ranks of a CPU-simulated tensor-parallel group) take
// turns; a call from inside a running job is not allowed (it would wait for itself).
//
// Hand-off: a decode step is hundreds of short loops back to back, so waking sleeping threads
// through a condition variable for each (a futex call per thread, tens of microseconds on 16
// threads) cost more than many of the loops themselves. Workers and the caller therefore spin on
// atomics for a short while (kSpinMicros) before they sleep; a job is published by bumping a
// generation counter and finished when a pending counter reaches zero. Sleepers are woken only
// when someone is asleep (Dekker-style: each side writes its flag, then reads the other's, all
// sequentially consistent, so one of them always sees the other). A pool larger than the machine's
// hardware threads does not spin (spinning would steal the time of the threads it waits for).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tessera {

class ThreadPool {
 public:
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return num_threads_; }

  // fn(begin, end, thread_index) over a partition of [0, n); chunks are at least `grain` long.
  void ParallelFor(size_t n, const std::function<void(size_t, size_t, int)>& fn, size_t grain = 1);

  // The process-wide pool used by CPU kernels; sized by SetGlobalThreads (default: hardware).
  static ThreadPool& Global();
  static void SetGlobalThreads(int n);

  // How long a waiting thread polls before it sleeps.
  static constexpr int kSpinMicros = 50;

  // Counters of the loops that ran on several threads (the benches' "where the time goes"):
  // how many, the caller's wall time inside them, and of that the time it waited for the last
  // worker after finishing its own chunk (hand-off latency plus imbalance).
  struct Stats {
    uint64_t loops = 0;
    int64_t loop_ns = 0, wait_ns = 0;
  };
  Stats stats();
  void ResetStats();

 private:
  void WorkerLoop(int index);
  // Polls `done` for up to kSpinMicros (when spinning is allowed); true once it holds.
  template <typename Done>
  bool Spin(const Done& done) const;

  int num_threads_;
  bool spin_;  // the pool fits the machine's hardware threads
  std::vector<std::thread> workers_;
  std::mutex call_mu_;  // one ParallelFor at a time
  Stats stats_;         // guarded by call_mu_
  // The job of the current generation (written before generation_ is bumped, read after it is seen).
  const std::function<void(size_t, size_t, int)>* job_ = nullptr;
  size_t job_n_ = 0, job_chunk_ = 0;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};          // workers still running the current job
  std::atomic<int> sleeping_workers_{0};
  std::atomic<bool> caller_sleeping_{false};
  std::atomic<bool> stop_{false};
  std::mutex mu_;  // guards the sleeps only
  std::condition_variable work_cv_, done_cv_;
};

}  // namespace tessera
