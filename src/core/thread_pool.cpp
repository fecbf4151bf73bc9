// tessera core: ThreadPool implementation (see thread_pool.h).
#include "core/thread_pool.h"

#include <algorithm>
#include <memory>

namespace tessera {

ThreadPool::ThreadPool(int num_threads) : num_threads_(std::max(1, num_threads)) {
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::ParallelFor(size_t n, const std::function<void(size_t, size_t, int)>& fn,
                             size_t grain) {
  if (n == 0) return;
  size_t chunks = std::min<size_t>(num_threads_, (n + grain - 1) / std::max<size_t>(grain, 1));
  if (chunks <= 1) {
    fn(0, n, 0);
    return;
  }
  size_t chunk = (n + chunks - 1) / chunks;
  std::lock_guard<std::mutex> call(call_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &fn;
    job_n_ = n;
    job_chunk_ = chunk;
    pending_ = num_threads_ - 1;
    ++generation_;
  }
  work_cv_.notify_all();
  fn(0, std::min(n, chunk), 0);
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [this] { return pending_ == 0; });
  job_ = nullptr;
}

void ThreadPool::WorkerLoop(int index) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(size_t, size_t, int)>* job;
    size_t n, chunk;
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_;
      n = job_n_;
      chunk = job_chunk_;
    }
    size_t begin = static_cast<size_t>(index) * chunk;
    if (begin < n) (*job)(begin, std::min(n, begin + chunk), index);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (--pending_ == 0) done_cv_.notify_one();
    }
  }
}

namespace {
std::unique_ptr<ThreadPool>& GlobalSlot() {
  static std::unique_ptr<ThreadPool> pool;
  return pool;
}
}  // namespace

ThreadPool& ThreadPool::Global() {
  auto& slot = GlobalSlot();
  if (!slot) slot = std::make_unique<ThreadPool>(static_cast<int>(std::thread::hardware_concurrency()));
  return *slot;
}

void ThreadPool::SetGlobalThreads(int n) { GlobalSlot() = std::make_unique<ThreadPool>(n); }

}  // namespace tessera
