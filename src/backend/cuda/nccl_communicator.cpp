// tessera cuda backend: the NCCL communicator of a tensor-parallel group over the GPUs of one host:
// one CUDA backend per GPU (rank r on device r), collectives queued on the rank backend's stream so
// they order with its kernels. NVLink multicast (NVLS) stays off: NCCL_NVLS_ENABLE=0 is put in the
// environment before NCCL starts, and no multicast object is ever made.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdlib>

#include "backend/communicator.h"
#include "backend/cuda/cuda_backend.h"
#include "core/error.h"

namespace tessera {

namespace {

void CheckNccl(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) Fail(ErrorKind::kInternal, "NCCL error in {}: {}", what, ncclGetErrorString(r));
}

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, int rank, int size, CudaBackend* be) : comm_(comm), rank_(rank), size_(size), be_(be) {}
  ~NcclCommunicator() override {
    if (comm_) ncclCommDestroy(comm_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void AllReduceSum(float* buf, int64_t n) override {
    if (n == 0 || size_ == 1) return;
    Live();
    CheckNccl(ncclAllReduce(buf, buf, static_cast<size_t>(n), ncclFloat32, ncclSum, comm_, be_->stream()),
              "ncclAllReduce");
  }
  void AllGather(const float* in, int64_t n, float* out) override {
    if (n == 0) return;
    Live();
    CheckNccl(ncclAllGather(in, out, static_cast<size_t>(n), ncclFloat32, comm_, be_->stream()), "ncclAllGather");
  }
  void Abort() override {
    if (comm_) ncclCommAbort(comm_);
    comm_ = nullptr;
  }

 private:
  void Live() const {
    if (!comm_) Fail(ErrorKind::kInternal, "tensor-parallel group aborted (another rank failed)");
  }
  ncclComm_t comm_;
  int rank_, size_;
  CudaBackend* be_;
};

}  // namespace

RankGroup MakeNcclRankGroup(int n) {
  const int devices = CudaDeviceCount();
  if (devices < n)
    Fail(ErrorKind::kInvalidArgument, "tensor_parallel_size {} needs {} CUDA devices, {} visible", n, n, devices);
  // Multicast can take a host's GPUs out of service: never let NCCL use it (overwrites any value).
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  RankGroup g;
  std::vector<int> devs(n);
  for (int r = 0; r < n; ++r) {
    devs[r] = r;
    if (cudaSetDevice(r) != cudaSuccess) Fail(ErrorKind::kInternal, "cudaSetDevice({}) failed", r);
    g.backends.push_back(std::make_unique<CudaBackend>(r));
  }
  std::vector<ncclComm_t> comms(n, nullptr);
  CheckNccl(ncclCommInitAll(comms.data(), n, devs.data()), "ncclCommInitAll");
  for (int r = 0; r < n; ++r)
    g.comms.push_back(
        std::make_unique<NcclCommunicator>(comms[r], r, n, static_cast<CudaBackend*>(g.backends[r].get())));
  g.bind_thread = [](int rank) {
    if (cudaSetDevice(rank) != cudaSuccess) Fail(ErrorKind::kInternal, "cudaSetDevice({}) failed", rank);
  };
  cudaSetDevice(0);
  return g;
}

}  // namespace tessera
