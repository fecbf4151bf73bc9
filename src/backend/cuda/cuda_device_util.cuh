// tessera cuda backend: device helpers shared by the kernel files (warp reductions, SiLU, the paged
// K/V row of a key). Header-only __device__ inline functions: every .cu gets its own copy, no
// relocatable device code needed.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/cuda_kernels.h"

namespace tessera::cuda {

__device__ __forceinline__ float WarpSum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float WarpMax(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__device__ __forceinline__ float SiluF(float x) { return x / (1.0f + expf(-x)); }

// Key j's K (or V) row of KV head kvh in an attention step: positions from first_pos on are the
// step's fresh rows, earlier ones live in the paged cache.
__device__ __forceinline__ const float* KvRow(const AttentionParams& p, int64_t j, int64_t kvh, bool value) {
  const int64_t D = p.head_dim;
  if (j >= p.first_pos) return (value ? p.v : p.k) + (j - p.first_pos) * p.kv_stride + kvh * D;
  const int64_t row = static_cast<int64_t>(p.pages[j / p.page_size]) * p.page_size + j % p.page_size;
  return (value ? p.v_cache : p.k_cache) + row * p.num_kv_heads * D + kvh * D;
}

}  // namespace tessera::cuda
