// tessera cpu backend: wall time per op of the CPU backend, for the benches' "where the time goes"
// (bench/model_bench --profile). Off unless enabled: a scope then costs one branch. Only the outermost
// op of a thread counts (ops calling ops are not counted twice); time between ops is the model's own.
// Each op's serial part is its time less the global pool's loop time meanwhile (ThreadPool::Stats).
#pragma once

#include <cstdint>
#include <vector>

namespace tessera::cpu_profile {

struct Entry {
  const char* op;  // a string literal (compared by address)
  int64_t calls = 0, ns = 0;
  // Of ns, the time outside ThreadPool::Global()'s parallel loops: the op's work on the calling thread
  // alone (setup, packing, bookkeeping), what more threads do not shorten.
  int64_t serial_ns = 0;
};

void Enable(bool on);
void Reset();
// The ops seen since the last Reset, in the order first seen.
std::vector<Entry> Snapshot();

class Scope {
 public:
  explicit Scope(const char* op);
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  const char* op_;
  bool entered_ = false;   // counted in the thread's nesting depth (profiling was on)
  int64_t start_ns_ = -1;  // -1: not timed (off, or nested in another op)
  int64_t start_loop_ns_ = 0;  // the global pool's loop time at the start
};

}  // namespace tessera::cpu_profile

#define TESSERA_CPU_OP(name) ::tessera::cpu_profile::Scope tessera_cpu_op_scope_(name)
