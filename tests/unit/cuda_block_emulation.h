// tessera tests: a host emulation of one CUDA thread block, for device code written only with
// threadIdx.x, __syncthreads, __shfl_xor_sync (whole block in step) and expf (e.g.
// src/backend/cuda/cuda_gdn_chunked.cuh). Each CUDA thread is a std::thread; __syncthreads is a
// std::barrier; a shuffle exchanges through a per-block array between two barriers. It checks the
// block code's indexing and algebra on machines without a GPU (CI); it says nothing of the GPU's
// memory model, timing or warp scheduling. Include it before the device header, in one test file only.
#pragma once

#include <math.h>

#include <barrier>
#include <functional>
#include <thread>
#include <vector>

#define __device__
#define __host__
#define __forceinline__ inline

namespace tessera::cuda_emulation {
struct ThreadIndex {
  int x = 0, y = 0, z = 0;
};
inline thread_local ThreadIndex thread_index;
inline std::barrier<>* block_barrier = nullptr;
inline std::vector<float>* block_exchange = nullptr;

// Runs body() as one block of `threads` threads; returns when all have.
inline void RunBlock(int threads, const std::function<void()>& body) {
  std::barrier<> barrier(threads);
  std::vector<float> exchange(threads);
  block_barrier = &barrier;
  block_exchange = &exchange;
  std::vector<std::thread> pool;
  pool.reserve(threads);
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&body, t] {
      thread_index.x = t;
      body();
    });
  for (std::thread& th : pool) th.join();
}
}  // namespace tessera::cuda_emulation

#define threadIdx (::tessera::cuda_emulation::thread_index)
inline void __syncthreads() { ::tessera::cuda_emulation::block_barrier->arrive_and_wait(); }
inline float __shfl_xor_sync(unsigned /*mask*/, float v, int lane_mask) {
  namespace emu = ::tessera::cuda_emulation;
  (*emu::block_exchange)[threadIdx.x] = v;
  emu::block_barrier->arrive_and_wait();
  const float other = (*emu::block_exchange)[threadIdx.x ^ lane_mask];
  emu::block_barrier->arrive_and_wait();
  return other;
}
