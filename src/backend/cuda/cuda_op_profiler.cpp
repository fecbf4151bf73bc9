// tessera cuda backend: the per-op timeline profile (see cuda_op_profiler.h).
#include "backend/cuda/cuda_op_profiler.h"
#include "backend/cuda/cuda_switches.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace tessera::cuda {

OpProfiler::OpProfiler(cudaStream_t stream) : stream_(stream) {
  const std::string v = SwitchValue("TESSERA_CUDA_PROFILE");
  enabled_ = !v.empty() && v != "0";
}

OpProfiler::~OpProfiler() {
  if (!enabled_) return;
  cudaStreamSynchronize(stream_);
  Collect();
  std::fprintf(stderr, "%s", Report().c_str());
  for (auto& [op, ev] : pending_) cudaEventDestroy(ev);
  for (cudaEvent_t ev : free_) cudaEventDestroy(ev);
}

void OpProfiler::Record(const char* op) {
  cudaEvent_t ev = nullptr;
  if (!free_.empty()) {
    ev = free_.back();
    free_.pop_back();
  } else if (cudaEventCreate(&ev) != cudaSuccess) {
    return;
  }
  cudaEventRecord(ev, stream_);
  pending_.emplace_back(op, ev);
}

void OpProfiler::Collect() {
  if (!enabled_ || pending_.size() < 2) return;
  // Every event but the last has a successor; the last stays as the start of the next interval.
  size_t done = 0;
  for (size_t i = 0; i + 1 < pending_.size(); ++i) {
    if (cudaEventQuery(pending_[i + 1].second) != cudaSuccess) break;
    float ms = 0;
    cudaEventElapsedTime(&ms, pending_[i].second, pending_[i + 1].second);
    auto& t = totals_[pending_[i].first];
    t.first += ms;
    t.second += 1;
    free_.push_back(pending_[i].second);
    done = i + 1;
  }
  cudaGetLastError();
  pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(done));
}

void OpProfiler::Reset() {
  if (!enabled_) return;
  for (auto& [op, ev] : pending_) free_.push_back(ev);
  pending_.clear();
  totals_.clear();
}

std::string OpProfiler::Report() const {
  if (!enabled_) return {};
  std::vector<std::pair<std::string, std::pair<double, long>>> rows(totals_.begin(), totals_.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.first > b.second.first; });
  double total = 0;
  for (const auto& r : rows) total += r.second.first;
  std::string out = "cuda op profile (GPU timeline from one op's start to the next's, incl. idle gaps):\n";
  char line[160];
  std::snprintf(line, sizeof(line), "  %-28s %12s %10s %8s %10s\n", "op", "ms", "calls", "share", "us/call");
  out += line;
  for (const auto& [op, t] : rows) {
    std::snprintf(line, sizeof(line), "  %-28s %12.2f %10ld %7.1f%% %10.2f\n", op.c_str(), t.first, t.second,
                  total > 0 ? 100.0 * t.first / total : 0.0, 1e3 * t.first / std::max(1L, t.second));
    out += line;
  }
  std::snprintf(line, sizeof(line), "  %-28s %12.2f\n", "total", total);
  out += line;
  return out;
}

}  // namespace tessera::cuda
