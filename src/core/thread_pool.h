// tessera core: a fixed pool of worker threads for data-parallel loops in CPU kernels.
// ParallelFor splits [0, n) into contiguous chunks, one per thread, and blocks until all finish;
// the calling thread takes a chunk itself, so a pool of 1 runs inline with no synchronisation.
// Calls from several threads at once (the ranks of a CPU-simulated tensor-parallel group) take
// turns; a call from inside a running job is not allowed (it would wait for itself).
#pragma once

#include <condition_variable>
#include <cstddef>
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

 private:
  void WorkerLoop(int index);

  int num_threads_;
  std::vector<std::thread> workers_;
  std::mutex call_mu_;  // one ParallelFor at a time
  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  const std::function<void(size_t, size_t, int)>* job_ = nullptr;
  size_t job_n_ = 0, job_chunk_ = 0;
  int pending_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
};

}  // namespace tessera
