// tessera core: ThreadPool implementation (see thread_pool.h for the hand-off protocol).
#include "core/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <memory>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace tessera {

namespace {
inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}
}  // namespace

ThreadPool::ThreadPool(int num_threads)
    : num_threads_(std::max(1, num_threads)),
      spin_(num_threads_ <= static_cast<int>(std::max(1u, std::thread::hardware_concurrency()))) {
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
  }
  work_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

template <typename Done>
bool ThreadPool::Spin(const Done& done) const {
  if (!spin_) return done();
  const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(kSpinMicros);
  for (int i = 0;; ++i) {
    if (done()) return true;
    // A few pauses first (the common case: the other side is a few hundred cycles away), then yields:
    // on a machine with more runnable threads than cores the thread being waited for gets the core.
    if (i < 256) {
      CpuRelax();
      continue;
    }
    std::this_thread::yield();
    if ((i & 15) == 15 && std::chrono::steady_clock::now() >= until) return done();
  }
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
  const auto start = std::chrono::steady_clock::now();
  job_ = &fn;
  job_n_ = n;
  job_chunk_ = chunk;
  pending_.store(num_threads_ - 1);
  generation_.fetch_add(1);  // publishes the job (seq_cst: ordered before the sleepers check)
  if (sleeping_workers_.load() > 0) {
    std::lock_guard<std::mutex> lock(mu_);  // a worker between its check and its wait holds mu_
    work_cv_.notify_all();
  }
  fn(0, std::min(n, chunk), 0);
  const auto own_done = std::chrono::steady_clock::now();
  auto all_done = [this] { return pending_.load() == 0; };
  if (!Spin(all_done)) {
    std::unique_lock<std::mutex> lock(mu_);
    caller_sleeping_.store(true);
    done_cv_.wait(lock, all_done);
    caller_sleeping_.store(false);
  }
  job_ = nullptr;
  const auto end = std::chrono::steady_clock::now();
  ++stats_.loops;
  stats_.loop_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(end - start).count();
  stats_.wait_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(end - own_done).count();
}

ThreadPool::Stats ThreadPool::stats() {
  std::lock_guard<std::mutex> call(call_mu_);
  return stats_;
}

void ThreadPool::ResetStats() {
  std::lock_guard<std::mutex> call(call_mu_);
  stats_ = Stats{};
}

void ThreadPool::WorkerLoop(int index) {
  uint64_t seen = 0;
  for (;;) {
    auto news = [&] { return generation_.load() != seen || stop_.load(); };
    if (!Spin(news)) {
      std::unique_lock<std::mutex> lock(mu_);
      sleeping_workers_.fetch_add(1);
      work_cv_.wait(lock, news);
      sleeping_workers_.fetch_sub(1);
    }
    if (stop_.load()) return;
    seen = generation_.load();
    const size_t begin = static_cast<size_t>(index) * job_chunk_;
    if (begin < job_n_) (*job_)(begin, std::min(job_n_, begin + job_chunk_), index);
    if (pending_.fetch_sub(1) == 1 && caller_sleeping_.load()) {
      std::lock_guard<std::mutex> lock(mu_);  // the caller between its check and its wait holds mu_
      done_cv_.notify_one();
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
