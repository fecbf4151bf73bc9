// tessera cuda backend: an opt-in per-op timeline profile (TESSERA_CUDA_PROFILE=1). Each backend op
// records a CUDA event on the stream when it is queued; the GPU time between one op's event and the
// next is charged to the first op. That time includes any idle gap while the GPU waited for the
// host to queue the next op, so launch-bound code shows up as time in the ops, not hidden. The
// table (ms per op kind, calls, share) is printed to stderr when the backend is destroyed, or
// returned by Backend::ProfileReport (the CUDA benchmark prints one per row).
#pragma once

#include <cuda_runtime_api.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace tessera::cuda {

class OpProfiler {
 public:
  // Enabled when TESSERA_CUDA_PROFILE is set to a non-empty value other than "0".
  explicit OpProfiler(cudaStream_t stream);
  ~OpProfiler();
  OpProfiler(const OpProfiler&) = delete;
  OpProfiler& operator=(const OpProfiler&) = delete;

  bool enabled() const { return enabled_; }
  // Marks the start of an op (a string literal: kept by pointer).
  void Mark(const char* op) {
    if (enabled_) Record(op);
  }
  // After a stream synchronisation: folds the completed events into the totals.
  void Collect();
  // Drops the totals and the recorded events (call after a synchronisation).
  void Reset();
  // The table of totals (empty when disabled).
  std::string Report() const;

 private:
  void Record(const char* op);
  bool enabled_ = false;
  cudaStream_t stream_ = nullptr;
  std::vector<std::pair<const char*, cudaEvent_t>> pending_;
  std::vector<cudaEvent_t> free_;
  std::map<std::string, std::pair<double, long>> totals_;  // op -> (ms, calls)
};

}  // namespace tessera::cuda
