// tessera backend: collectives between the ranks of a tensor-parallel group, one rank per backend
// (one CPU backend per simulated rank, or one CUDA backend per GPU), and the factory that makes a
// group: its backends, its communicators, and how a rank's thread binds to its device.
// Every rank calls the same collectives in the same order from its own thread; a collective
// returns once its result is in the caller's buffer (CPU) or queued on the rank's stream (CUDA).
// Results are bit-identical on every rank, so replicated activations never drift apart (the MoE
// router must pick the same experts everywhere).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace tessera {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // buf[0, n) (f32, in this rank's backend memory) = the sum of every rank's buf, in place.
  virtual void AllReduceSum(float* buf, int64_t n) = 0;
  // out[r * n + i] = rank r's in[i]; out holds size() * n floats (this rank's backend memory).
  virtual void AllGather(const float* in, int64_t n, float* out) = 0;
  // Called when a rank failed mid-forward: every pending and later collective of the group throws
  // instead of waiting for the failed rank forever. The group is unusable afterwards.
  virtual void Abort() = 0;

  void AllReduceSum(DeviceBuffer& b) { AllReduceSum(b.f32(), static_cast<int64_t>(b.bytes() / 4)); }
};

// N in-process communicators over host memory (threads + a barrier): the CPU simulation of a
// group, used with CPU backends. Sums run in rank order, the same on every rank.
std::vector<std::unique_ptr<Communicator>> MakeLocalCommunicators(int n);

// The ranks of one tensor-parallel group.
struct RankGroup {
  std::vector<std::unique_ptr<Backend>> backends;   // [rank]
  std::vector<std::unique_ptr<Communicator>> comms;  // [rank]
  // Runs first on every thread that drives rank r's backend (cudaSetDevice(r) on CUDA).
  std::function<void(int rank)> bind_thread = [](int) {};
};

// device "cpu": n CPU backends and local communicators. "cuda": one CUDA backend per GPU 0..n-1
// and NCCL communicators (NVLink multicast off: NCCL_NVLS_ENABLE=0 is set before NCCL starts).
// Throws Error(kUnsupported / kInvalidArgument) when that is not possible here.
RankGroup MakeRankGroup(const std::string& device, int n);

// The CUDA half of MakeRankGroup (src/backend/cuda/nccl_communicator.cpp; a stub without NCCL).
RankGroup MakeNcclRankGroup(int n);

}  // namespace tessera
