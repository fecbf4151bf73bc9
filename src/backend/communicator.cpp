// tessera backend: the in-process communicator of a simulated tensor-parallel group and the group
// factory (see communicator.h). Ranks meet at a generation-counting barrier that an abort breaks.
#include "backend/communicator.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <mutex>

#include "core/error.h"

namespace tessera {

namespace {

// What the ranks of one local group share: a barrier and the buffers of the collective in flight.
struct LocalShared {
  explicit LocalShared(int n) : size(n), in(n, nullptr) {}
  const int size;
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0;
  uint64_t generation = 0;
  bool aborted = false;
  std::vector<const float*> in;  // [rank] the published input of the current collective

  void Wait() {
    std::unique_lock<std::mutex> lock(mu);
    if (aborted) Fail(ErrorKind::kInternal, "tensor-parallel group aborted (another rank failed)");
    const uint64_t gen = generation;
    if (++arrived == size) {
      arrived = 0;
      ++generation;
      cv.notify_all();
      return;
    }
    cv.wait(lock, [&] { return generation != gen || aborted; });
    if (generation == gen) Fail(ErrorKind::kInternal, "tensor-parallel group aborted (another rank failed)");
  }
  void Abort() {
    std::lock_guard<std::mutex> lock(mu);
    aborted = true;
    cv.notify_all();
  }
};

class LocalCommunicator : public Communicator {
 public:
  LocalCommunicator(std::shared_ptr<LocalShared> shared, int rank) : s_(std::move(shared)), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return s_->size; }

  void AllReduceSum(float* buf, int64_t n) override {
    if (s_->size == 1) return;
    s_->in[rank_] = buf;
    s_->Wait();  // every input is published
    // Each rank sums all inputs in rank order into its own scratch: the same bits everywhere.
    scratch_.assign(static_cast<size_t>(n), 0.0f);
    for (int r = 0; r < s_->size; ++r) {
      const float* src = s_->in[r];
      for (int64_t i = 0; i < n; ++i) scratch_[i] += src[i];
    }
    s_->Wait();  // nobody reads the inputs any more
    if (n) std::memcpy(buf, scratch_.data(), static_cast<size_t>(n) * sizeof(float));
  }

  void AllGather(const float* in, int64_t n, float* out) override {
    s_->in[rank_] = in;
    s_->Wait();
    for (int r = 0; r < s_->size; ++r)
      if (n) std::memcpy(out + r * n, s_->in[r], static_cast<size_t>(n) * sizeof(float));
    s_->Wait();
  }

  void Abort() override { s_->Abort(); }

 private:
  std::shared_ptr<LocalShared> s_;
  int rank_;
  std::vector<float> scratch_;
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> MakeLocalCommunicators(int n) {
  if (n < 1) Fail(ErrorKind::kInvalidArgument, "a communicator group needs at least one rank (got {})", n);
  auto shared = std::make_shared<LocalShared>(n);
  std::vector<std::unique_ptr<Communicator>> out;
  for (int r = 0; r < n; ++r) out.push_back(std::make_unique<LocalCommunicator>(shared, r));
  return out;
}

RankGroup MakeRankGroup(const std::string& device, int n) {
  if (n < 1) Fail(ErrorKind::kInvalidArgument, "tensor_parallel_size must be at least 1 (got {})", n);
  if (device == "cuda") return MakeNcclRankGroup(n);
  if (device != "cpu") Fail(ErrorKind::kInvalidArgument, "unknown device \"{}\" (expected cpu or cuda)", device);
  RankGroup g;
  for (int r = 0; r < n; ++r) g.backends.push_back(MakeCpuBackend());
  g.comms = MakeLocalCommunicators(n);
  return g;
}

}  // namespace tessera
