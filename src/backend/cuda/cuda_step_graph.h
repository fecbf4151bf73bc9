// tessera cuda backend: CUDA graphs for repeated forward steps. Decode steps queue ~1,000 small
// kernels; queued one by one, the GPU waits on the host between them (docs/PERFORMANCE.md). While a
// step is recorded, the backend queues nothing: each stream operation becomes a command (a launcher
// and the values of its arguments), and every value feeds a 128-bit fingerprint. When the step ends,
// a step whose fingerprint has a graph is replayed with one cudaGraphLaunch; a fingerprint seen once
// before is captured into a graph and instantiated (then launched); a new one runs its commands one
// by one. Equal fingerprints mean the same launchers with the same pointers, sizes and scalars, so
// a replay does exactly what running the commands would; what changes from step to step (token ids,
// positions, page tables, descriptors) lives in device memory the kernels read, copied from the
// pinned scratch ring by copy commands that are part of the graph (they read the ring when they run).
// The backend cuts a long step into chunks (Flush, then Begin again: each chunk is fingerprinted,
// captured and replayed on its own), so the GPU runs the first chunks while the host records the
// rest instead of waiting for the whole step to be recorded.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <list>
#include <string>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace tessera::cuda {

class StepGraphs {
 public:
  struct Stats {
    int64_t replayed = 0;  // steps (chunks) run as one launch of a cached graph
    int64_t captured = 0;  // steps (chunks) captured into a new graph (their second sighting)
    int64_t eager = 0;     // steps (chunks) run command by command (first sighting, or not capturable)
    // Host time from Begin to Flush, summed over the steps (chunks): the GPU waits for a chunk's
    // recording before its replay, since nothing of it is queued until its fingerprint is known.
    double recording_seconds = 0;
  };

  // max_graphs: instantiated graphs kept (least recently used dropped first).
  StepGraphs(cudaStream_t stream, size_t max_graphs);
  ~StepGraphs();
  StepGraphs(const StepGraphs&) = delete;
  StepGraphs& operator=(const StepGraphs&) = delete;

  bool recording() const { return recording_; }
  size_t recorded() const { return commands_.size(); }  // commands since Begin
  // Starts recording (the caller has flushed any earlier step).
  void Begin();
  // Records fn(args...) (a launcher queueing on the stream; its result is ignored, errors are read
  // with cudaGetLastError). Every argument is a scalar or a pointer: its value is the fingerprint.
  template <class R, class... P, class... A>
  void Add(const char* what, R (*fn)(P...), A&&... args) {
    std::tuple<std::decay_t<P>...> values(std::forward<A>(args)...);
    Key command = kSeed;
    MixValue(command, fn);
    std::apply([&command](const auto&... v) { (MixValue(command, v), ...); }, values);
    Mix(key_, command.a);
    Mix(key_, command.b);
    commands_.push_back({what, [fn, values]() { std::apply(fn, values); }, command.a});
  }
  // Records fn(args...) to run before every command recorded so far (the step's one scratch copy,
  // known only when the step ends).
  template <class R, class... P, class... A>
  void AddFirst(const char* what, R (*fn)(P...), A&&... args) {
    Add(what, fn, std::forward<A>(args)...);
    std::rotate(commands_.begin(), commands_.end() - 1, commands_.end());
  }
  // Ends the recording and queues the step: replay, capture or one by one. Throws (after dropping
  // the recording) when a command fails to queue.
  void Flush();
  // Drops every graph: device memory they point into is about to be freed.
  void Clear();
  const Stats& stats() const { return stats_; }
  size_t graphs() const { return graphs_.size(); }

 private:
  struct Key {
    uint64_t a = 0, b = 0, n = 0;
    bool operator==(const Key& o) const { return a == o.a && b == o.b && n == o.n; }
  };
  struct KeyHash {
    size_t operator()(const Key& k) const { return static_cast<size_t>(k.a ^ (k.b * 0x9e3779b97f4a7c15ull) ^ k.n); }
  };
  struct Command {
    const char* what;
    std::function<void()> run;
    uint64_t hash;  // of this command alone (TESSERA_CUDA_GRAPHS_DEBUG compares steps with it)
  };
  struct Graph {
    cudaGraphExec_t exec = nullptr;
    std::list<Key>::iterator lru;
  };

  static constexpr Key kSeed{0x243f6a8885a308d3ull, 0x13198a2e03707344ull, 0};
  template <class T>
  static void MixValue(Key& key, const T& v) {
    static_assert(std::is_scalar_v<T>, "recorded launcher arguments must be scalars or pointers");
    uint64_t bits = 0;
    std::memcpy(&bits, &v, sizeof(T));
    Mix(key, bits);
  }
  static void Mix(Key& key, uint64_t v);
  void RunEager(const std::vector<Command>& commands);
  // TESSERA_CUDA_GRAPHS_DEBUG=1: why a chunk got a new fingerprint (first command that differs from
  // the chunk before), on stderr.
  void ExplainNewKey(const std::vector<Command>& commands);
  // Captures the commands into a graph; null when the capture failed (the step then runs eagerly).
  cudaGraphExec_t Capture(const std::vector<Command>& commands);

  cudaStream_t stream_;
  size_t max_graphs_;
  bool recording_ = false;
  std::chrono::steady_clock::time_point record_start_;
  std::vector<Command> commands_;
  Key key_;
  std::unordered_map<Key, Graph, KeyHash> graphs_;
  std::list<Key> lru_;  // most recently used first
  std::unordered_set<Key, KeyHash> seen_once_, not_capturable_;
  Stats stats_;
  bool debug_ = false;
  std::vector<std::pair<const char*, uint64_t>> last_step_;  // (what, hash) of the previous step (debug)
};

}  // namespace tessera::cuda
