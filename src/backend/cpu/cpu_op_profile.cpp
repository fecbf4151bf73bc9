// tessera cpu backend: the per-op timer of cpu_op_profile.h.
#include "backend/cpu/cpu_op_profile.h"

#include <atomic>
#include <chrono>
#include <mutex>

#include "core/thread_pool.h"

namespace tessera::cpu_profile {

namespace {
std::atomic<bool> g_on{false};
std::mutex g_mu;
std::vector<Entry> g_entries;  // guarded by g_mu
thread_local int t_depth = 0;

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

void Enable(bool on) { g_on.store(on); }

void Reset() {
  std::lock_guard<std::mutex> lock(g_mu);
  g_entries.clear();
}

std::vector<Entry> Snapshot() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_entries;
}

Scope::Scope(const char* op) : op_(op) {
  if (!g_on.load(std::memory_order_relaxed)) return;
  entered_ = true;
  if (t_depth++ == 0) {
    start_loop_ns_ = ThreadPool::Global().stats().loop_ns;
    start_ns_ = NowNs();
  }
}

Scope::~Scope() {
  if (!entered_) return;
  --t_depth;
  if (start_ns_ < 0) return;
  const int64_t ns = NowNs() - start_ns_;
  const int64_t serial = ns - (ThreadPool::Global().stats().loop_ns - start_loop_ns_);
  std::lock_guard<std::mutex> lock(g_mu);
  for (Entry& e : g_entries)
    if (e.op == op_) {
      ++e.calls, e.ns += ns, e.serial_ns += serial;
      return;
    }
  g_entries.push_back({op_, 1, ns, serial});
}

}  // namespace tessera::cpu_profile
