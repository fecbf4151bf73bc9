// tessera model: one thread per tensor-parallel rank. Run(fn) runs fn(rank) on every rank's
// thread at once (they meet in the collectives) and returns when all are done; the first error of
// any rank is rethrown after the group's communicators were aborted, so no rank waits forever for
// a failed one. Each thread binds to its rank's device once, before its first job.
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tessera {

class RankWorkers {
 public:
  // bind(rank) runs first on each thread; abort() is called once when a rank throws.
  RankWorkers(int n, std::function<void(int)> bind, std::function<void()> abort);
  ~RankWorkers();
  RankWorkers(const RankWorkers&) = delete;
  RankWorkers& operator=(const RankWorkers&) = delete;

  int size() const { return static_cast<int>(threads_.size()); }
  void Run(const std::function<void(int)>& fn);

 private:
  void Loop(int rank);
  std::function<void(int)> bind_;
  std::function<void()> abort_;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  const std::function<void(int)>* job_ = nullptr;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
};

}  // namespace tessera
