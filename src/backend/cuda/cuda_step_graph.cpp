// tessera cuda backend: recording, fingerprinting, capturing and replaying forward steps (see
// cuda_step_graph.h).
#include "backend/cuda/cuda_step_graph.h"

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "backend/cuda/cuda_switches.h"
#include "core/error.h"

namespace tessera::cuda {

namespace {

// Fingerprints remembered without a graph (seen once, or not capturable): beyond this many they are
// all forgotten, which bounds memory when every step differs (e.g. a server's prompt chunks).
constexpr size_t kMaxSeenOnce = 4096;

uint64_t Rotl(uint64_t v, int r) { return (v << r) | (v >> (64 - r)); }

}  // namespace

StepGraphs::StepGraphs(cudaStream_t stream, size_t max_graphs) : stream_(stream), max_graphs_(max_graphs) {
  const std::string v = SwitchValue("TESSERA_CUDA_GRAPHS_DEBUG");
  debug_ = !v.empty() && v != "0";
}

StepGraphs::~StepGraphs() { Clear(); }

void StepGraphs::Begin() {
  commands_.clear();
  key_ = kSeed;
  recording_ = true;
  record_start_ = std::chrono::steady_clock::now();
}

// Two independent multiply-rotate lanes: a 128-bit fingerprint, so unequal steps colliding is out of
// reach in practice (and the count of mixed values must match too). Each command is hashed on its
// own, then its hash is mixed into the step's.
void StepGraphs::Mix(Key& key, uint64_t v) {
  key.a = Rotl((key.a ^ v) * 0x9e3779b97f4a7c15ull, 29);
  key.b = Rotl(key.b + v * 0xc2b2ae3d27d4eb4full, 31) * 0x165667b19e3779f9ull;
  ++key.n;
}

void StepGraphs::Clear() {
  for (auto& [key, g] : graphs_)
    if (g.exec) cudaGraphExecDestroy(g.exec);
  graphs_.clear();
  lru_.clear();
  seen_once_.clear();
}

void StepGraphs::ExplainNewKey(const std::vector<Command>& commands) {
  size_t i = 0;
  while (i < commands.size() && i < last_step_.size() && commands[i].hash == last_step_[i].second) ++i;
  if (i == commands.size() && i == last_step_.size()) {
    std::fprintf(stderr, "step graphs: new chunk of %zu commands, the same as the previous one\n", commands.size());
  } else {
    std::fprintf(stderr, "step graphs: new chunk of %zu commands (previous %zu); first difference at command %zu: %s\n",
                 commands.size(), last_step_.size(), i, i < commands.size() ? commands[i].what : "(end)");
  }
  last_step_.clear();
  for (const Command& c : commands) last_step_.emplace_back(c.what, c.hash);
}

void StepGraphs::RunEager(const std::vector<Command>& commands) {
  for (const Command& c : commands) {
    c.run();
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) Fail(ErrorKind::kInternal, "CUDA error in {}: {}", c.what, cudaGetErrorString(e));
  }
}

cudaGraphExec_t StepGraphs::Capture(const std::vector<Command>& commands) {
  // Relaxed: launchers may make calls that are not stream work (attributes, cudaGetLastError).
  if (cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  bool ok = true;
  try {
    for (const Command& c : commands) c.run();
  } catch (...) {
    ok = false;  // a launcher that throws runs again eagerly, where its error is reported
  }
  cudaGraph_t graph = nullptr;
  const cudaError_t end = cudaStreamEndCapture(stream_, &graph);
  ok = ok && end == cudaSuccess && graph != nullptr && cudaGetLastError() == cudaSuccess;
  cudaGraphExec_t exec = nullptr;
  if (ok && cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess) exec = nullptr;
  if (graph) cudaGraphDestroy(graph);
  cudaGetLastError();  // a failed capture leaves its error behind; the eager run reports real ones
  return exec;
}

void StepGraphs::Flush() {
  if (!recording_) return;
  recording_ = false;
  stats_.recording_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - record_start_).count();
  std::vector<Command> commands;
  commands.swap(commands_);
  if (commands.empty()) return;
  const Key key = key_;
  if (debug_ && !graphs_.count(key)) ExplainNewKey(commands);

  if (auto it = graphs_.find(key); it != graphs_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second.lru);
    const cudaError_t e = cudaGraphLaunch(it->second.exec, stream_);
    if (e != cudaSuccess) Fail(ErrorKind::kInternal, "CUDA error in cudaGraphLaunch: {}", cudaGetErrorString(e));
    ++stats_.replayed;
    return;
  }
  if (seen_once_.count(key) && !not_capturable_.count(key)) {
    seen_once_.erase(key);
    if (cudaGraphExec_t exec = Capture(commands)) {
      if (graphs_.size() >= max_graphs_) {
        auto old = graphs_.find(lru_.back());
        cudaGraphExecDestroy(old->second.exec);
        graphs_.erase(old);
        lru_.pop_back();
      }
      lru_.push_front(key);
      graphs_[key] = Graph{exec, lru_.begin()};
      const cudaError_t e = cudaGraphLaunch(exec, stream_);
      if (e != cudaSuccess) Fail(ErrorKind::kInternal, "CUDA error in cudaGraphLaunch: {}", cudaGetErrorString(e));
      ++stats_.captured;
      return;
    }
    if (not_capturable_.size() >= kMaxSeenOnce) not_capturable_.clear();
    not_capturable_.insert(key);
  } else if (!not_capturable_.count(key)) {
    if (seen_once_.size() >= kMaxSeenOnce) seen_once_.clear();
    seen_once_.insert(key);
  }
  ++stats_.eager;
  RunEager(commands);
}

}  // namespace tessera::cuda
