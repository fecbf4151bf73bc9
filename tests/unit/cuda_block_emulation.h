// tessera tests: a host emulation of one CUDA thread block, for device code written only with
// threadIdx.x, __syncthreads, __shfl_xor_sync (whole block in step) and expf (e.g.
// src/backend/cuda/cuda_gdn_chunked.cuh). Each CUDA thread is a fiber (ucontext) of one host
// thread; __syncthreads switches back to the block's scheduler, which runs every thread up to the
// barrier before any goes past it; a shuffle exchanges through a per-block array between two
// barriers. Between two barriers the threads run one after the other, in increasing order in one
// phase and decreasing in the next, so a read of another thread's write that lacks its barrier
// sees the stale value in one of the two directions, every run. A barrier that some threads reach
// and others exit past (a deadlock or undefined on the GPU) aborts with a message.
// It checks the block code's indexing and algebra on machines without a GPU (CI); it says nothing
// of the GPU's memory model, timing or warp scheduling. Include it before the device header, in
// one test file only.
// (Each CUDA thread was a std::thread with a std::barrier: 256 threads on CI's 2 cores made
// GdnChunkedEmulated.BlocksMatchCpuRecurrent one of CI's longest tests, ~35 s of context switches.)
#pragma once

#include <math.h>
#include <ucontext.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define TESSERA_EMULATION_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TESSERA_EMULATION_ASAN 1
#endif
#endif
#ifdef TESSERA_EMULATION_ASAN
#include <sanitizer/common_interface_defs.h>
#endif

#define __device__
#define __host__
#define __forceinline__ inline

namespace tessera::cuda_emulation {
struct ThreadIndex {
  int x = 0, y = 0, z = 0;
};
inline ThreadIndex thread_index;  // of the fiber running now
inline std::vector<float>* block_exchange = nullptr;

namespace detail {
constexpr size_t kStackBytes = 64 << 10;  // a fiber's stack (the block code keeps small locals)

struct Fiber {
  ucontext_t ctx{};
  char* stack = nullptr;
  bool finished = false;
};

// The fibers' stacks, kept from block to block (a test runs many blocks of the same size).
inline char* Stack(size_t i) {
  static std::vector<std::unique_ptr<char[]>> stacks;
  while (stacks.size() <= i) stacks.emplace_back(new char[kStackBytes]);
  return stacks[i].get();
}

struct Block {
  ucontext_t scheduler{};
  std::vector<Fiber> fibers;
  const std::function<void()>* body = nullptr;
  int current = 0;
#ifdef TESSERA_EMULATION_ASAN
  const void* scheduler_stack = nullptr;  // the scheduler's stack, as ASan was told at the first switch
  size_t scheduler_stack_size = 0;
#endif
};
inline Block* block = nullptr;

// Switches from the running fiber back to the scheduler (at a barrier, or for good when it ends).
inline void ToScheduler(bool finished) {
  Block& b = *block;
  Fiber& f = b.fibers[b.current];
  f.finished = finished;
#ifdef TESSERA_EMULATION_ASAN
  void* fake_stack = nullptr;
  // A finished fiber's fake stack is released (null save slot): it never runs again.
  __sanitizer_start_switch_fiber(finished ? nullptr : &fake_stack, b.scheduler_stack, b.scheduler_stack_size);
#endif
  swapcontext(&f.ctx, &b.scheduler);
#ifdef TESSERA_EMULATION_ASAN
  __sanitizer_finish_switch_fiber(fake_stack, nullptr, nullptr);
#endif
}

inline void FiberMain() {
#ifdef TESSERA_EMULATION_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &block->scheduler_stack, &block->scheduler_stack_size);
#endif
  (*block->body)();
  ToScheduler(true);
}

// Runs fiber i until its next barrier or its end.
inline void Resume(int i) {
  Block& b = *block;
  b.current = i;
  thread_index.x = i;
#ifdef TESSERA_EMULATION_ASAN
  void* fake_stack = nullptr;
  __sanitizer_start_switch_fiber(&fake_stack, b.fibers[i].stack, kStackBytes);
#endif
  swapcontext(&b.scheduler, &b.fibers[i].ctx);
#ifdef TESSERA_EMULATION_ASAN
  __sanitizer_finish_switch_fiber(fake_stack, nullptr, nullptr);
#endif
}
}  // namespace detail

// Runs body() as one block of `threads` threads; returns when all have.
inline void RunBlock(int threads, const std::function<void()>& body) {
  detail::Block b;
  std::vector<float> exchange(threads);
  b.body = &body;
  b.fibers.resize(threads);
  for (int i = 0; i < threads; ++i) {
    detail::Fiber& f = b.fibers[i];
    f.stack = detail::Stack(i);
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = f.stack;
    f.ctx.uc_stack.ss_size = detail::kStackBytes;
    f.ctx.uc_link = nullptr;  // a fiber never returns from FiberMain: it switches back
    makecontext(&f.ctx, &detail::FiberMain, 0);
  }
  detail::Block* outer = detail::block;
  std::vector<float>* outer_exchange = block_exchange;
  detail::block = &b;
  block_exchange = &exchange;
  for (int phase = 0;; ++phase) {
    int finished = 0;
    for (int k = 0; k < threads; ++k) {
      const int i = phase % 2 == 0 ? k : threads - 1 - k;
      if (!b.fibers[i].finished) detail::Resume(i);
      finished += b.fibers[i].finished ? 1 : 0;
    }
    if (finished == threads) break;
    if (finished != 0) {
      std::fprintf(stderr, "cuda_block_emulation: %d of %d threads ended while the others wait at a barrier\n",
                   finished, threads);
      std::abort();
    }
  }
  detail::block = outer;
  block_exchange = outer_exchange;
  thread_index = {};
}
}  // namespace tessera::cuda_emulation

#define threadIdx (::tessera::cuda_emulation::thread_index)
inline void __syncthreads() { ::tessera::cuda_emulation::detail::ToScheduler(false); }
inline float __shfl_xor_sync(unsigned /*mask*/, float v, int lane_mask) {
  namespace emu = ::tessera::cuda_emulation;
  (*emu::block_exchange)[threadIdx.x] = v;
  __syncthreads();
  const float other = (*emu::block_exchange)[threadIdx.x ^ lane_mask];
  __syncthreads();
  return other;
}
