// tessera model: the rank threads of a tensor-parallel model (see rank_workers.h).
#include "model/rank_workers.h"

namespace tessera {

RankWorkers::RankWorkers(int n, std::function<void(int)> bind, std::function<void()> abort)
    : bind_(std::move(bind)), abort_(std::move(abort)) {
  for (int r = 0; r < n; ++r) threads_.emplace_back([this, r] { Loop(r); });
}

RankWorkers::~RankWorkers() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void RankWorkers::Run(const std::function<void(int)>& fn) {
  std::unique_lock<std::mutex> lock(mu_);
  job_ = &fn;
  pending_ = size();
  error_ = nullptr;
  ++generation_;
  work_cv_.notify_all();
  done_cv_.wait(lock, [this] { return pending_ == 0; });
  job_ = nullptr;
  if (error_) std::rethrow_exception(error_);
}

void RankWorkers::Loop(int rank) {
  bool bound = false;
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int)>* job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_;
    }
    std::exception_ptr err;
    try {
      if (!bound) {
        bind_(rank);
        bound = true;
      }
      (*job)(rank);
    } catch (...) {
      err = std::current_exception();
    }
    bool first_error = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (err && !error_) {
        error_ = err;
        first_error = true;
      }
    }
    // Wake the ranks that wait for this one in a collective (outside the lock: they may be
    // finishing their own job meanwhile).
    if (first_error && abort_) abort_();
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (--pending_ == 0) done_cv_.notify_one();
    }
  }
}

}  // namespace tessera
