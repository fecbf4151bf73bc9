// tessera cuda backend: the MoE router's top-k of one row computed by one warp, shared by the routing
// kernel (cuda_kernels.cu) and the few-token gate/up kernel that routes its own pair
// (cuda_moe_fused.cu), so both pick the same experts with the same weights, bit for bit.
// Header-only __device__ inline functions.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/cuda_device_util.cuh"

namespace tessera::cuda {

__device__ __forceinline__ double WarpSumD(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Routing of one row of E logits (E <= 32 * kV, k <= 32) by a whole warp: lane l holds experts l,
// l + 32, ... in registers; each of the k rounds is a lane-local scan of kV values and two warp
// reductions (redux.sync). Same selection as MoeRouteKernel (largest p, ties -> lower index); the
// softmax sum and the renormalisation are in double, in the CPU backend's order for the latter, so
// the weights follow the reference closely. Lane j < k gets the j-th expert and its weight.
template <int kV>
__device__ __forceinline__ void RouteRowWarp(const float* l, int E, int k, bool renormalize, int* expert,
                                             float* weight) {
  const int lane = threadIdx.x & 31;
  float v[kV];
  float mx = -INFINITY;
#pragma unroll
  for (int i = 0; i < kV; ++i) {
    v[i] = lane + 32 * i < E ? l[lane + 32 * i] : -INFINITY;
    mx = fmaxf(mx, v[i]);
  }
  mx = WarpMax(mx);
  double sum = 0;
#pragma unroll
  for (int i = 0; i < kV; ++i) {
    v[i] = lane + 32 * i < E ? expf(v[i] - mx) : 0.0f;
    sum += v[i];
  }
  sum = WarpSumD(sum);
  // p >= 0, so its bits order like the values as ints; -1 marks taken experts and padding.
  int key[kV];
#pragma unroll
  for (int i = 0; i < kV; ++i) key[i] = lane + 32 * i < E ? __float_as_int(static_cast<float>(v[i] / sum)) : -1;
  double top = 0;
  int my_idx = 0;
  float my_w = 0;
  for (int j = 0; j < k; ++j) {
    int best = -1, bi = 0x7fffffff;  // this lane's largest, lowest index among equals
#pragma unroll
    for (int i = 0; i < kV; ++i)
      if (key[i] > best) best = key[i], bi = lane + 32 * i;
    const int gbest = __reduce_max_sync(0xffffffffu, best);
    const int gi = static_cast<int>(__reduce_min_sync(0xffffffffu, best == gbest ? static_cast<unsigned>(bi) : ~0u));
    const float pv = __int_as_float(gbest);
    top += pv;
    if (lane == j) my_idx = gi, my_w = pv;
    if ((gi & 31) == lane)
#pragma unroll
      for (int i = 0; i < kV; ++i)
        if (i == (gi >> 5)) key[i] = -1;
  }
  *expert = my_idx;
  *weight = renormalize ? static_cast<float>(my_w / top) : my_w;
}

}  // namespace tessera::cuda
