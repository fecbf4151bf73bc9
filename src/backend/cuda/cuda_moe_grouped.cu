// tessera cuda backend: the device-grouped MoE expert path for batched decode and diffusion blocks.
// The (row, slot) pairs are grouped by expert on the device (no host round trip), cut into work
// units of up to kMoeUnitRows pairs of one expert, and each unit streams its expert's weights once
// for all of its rows: gate/up (+ SiLU-mul) into a sorted activation buffer, then down scaled by the
// routing weight into the pair's slot. Every row's dot products run in the same lane order whatever
// unit it lands in, so the result does not depend on the (atomic) order of the grouping.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/cuda_kernels.h"

namespace tessera::cuda {

namespace {

constexpr int kWarps = 4;          // per block
constexpr int kColsPerWarp = 4;    // output columns per warp: each activation load serves four columns
constexpr int kColsPerBlock = kWarps * kColsPerWarp;
constexpr int kRows = kMoeUnitRows;

__device__ __forceinline__ float WarpSum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float SiluF(float x) { return x / (1.0f + expf(-x)); }

// 8 bf16 (one 16-byte load) to f32.
__device__ __forceinline__ void Unpack8(const uint4 raw, float* w) {
  const uint32_t parts[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    w[2 * i] = __uint_as_float(parts[i] << 16);
    w[2 * i + 1] = __uint_as_float(parts[i] & 0xffff0000u);
  }
}

__device__ __forceinline__ float Dot8(const float* w, const float4 a, const float4 b) {
  return w[0] * a.x + w[1] * a.y + w[2] * a.z + w[3] * a.w + w[4] * b.x + w[5] * b.y + w[6] * b.z + w[7] * b.w;
}

// One block. counts -> offsets -> units (expert, first sorted position, rows), then the pairs are
// placed at their expert's cursor. Shared memory: 2 * E ints. An out-of-range expert id is counted
// into `bad` (the host checks it never happens: the router writes ids in [0, E)).
__global__ void GroupKernel(const int32_t* idx, int64_t slots, int64_t E, int32_t* order, int4* units,
                            int32_t* num_units) {
  extern __shared__ int32_t sm[];
  int32_t* count = sm;
  int32_t* cursor = sm + E;
  for (int64_t e = threadIdx.x; e < E; e += blockDim.x) count[e] = 0;
  __syncthreads();
  for (int64_t i = threadIdx.x; i < slots; i += blockDim.x) {
    const int32_t e = idx[i];
    if (e >= 0 && e < E) atomicAdd(&count[e], 1);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int32_t off = 0, u = 0;
    for (int64_t e = 0; e < E; ++e) {
      const int32_t c = count[e];
      cursor[e] = off;
      for (int32_t r = 0; r < c; r += kRows)
        units[u++] = make_int4(static_cast<int32_t>(e), off + r, min(kRows, c - r), 0);
      off += c;
    }
    *num_units = u;
  }
  __syncthreads();
  for (int64_t i = threadIdx.x; i < slots; i += blockDim.x) {
    const int32_t e = idx[i];
    if (e >= 0 && e < E) order[atomicAdd(&cursor[e], 1)] = static_cast<int32_t>(i);
  }
}

// act[pos, col] = silu(x_row gate_e[col]) * (x_row up_e[col]) for the rows of one unit; pos is the
// sorted position. Block: kWarps warps, each kColsPerWarp consecutive columns; grid (column tiles,
// unit bound); blocks past the actual number of units return at once.
__global__ void GateUpKernel(const float* x, int64_t hidden, int64_t k, const int32_t* order, const int4* units,
                             const int32_t* num_units, const uint16_t* const* ptrs, int64_t E, int64_t inter,
                             float* act) {
  if (static_cast<int32_t>(blockIdx.y) >= *num_units) return;
  const int4 unit = units[blockIdx.y];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t col0 = (static_cast<int64_t>(blockIdx.x) * kWarps + warp) * kColsPerWarp;
  if (col0 >= inter) return;
  const int nr = unit.z;
  const float* xr[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) xr[r] = x + (r < nr ? order[unit.y + r] / k : 0) * hidden;
  const uint16_t* gate = ptrs[unit.x];
  const uint16_t* up = ptrs[E + unit.x];
  float ag[kColsPerWarp][kRows], au[kColsPerWarp][kRows];
#pragma unroll
  for (int j = 0; j < kColsPerWarp; ++j)
#pragma unroll
    for (int r = 0; r < kRows; ++r) ag[j][r] = au[j][r] = 0.0f;
  for (int64_t c = lane * 8; c < hidden; c += 256) {
    float wg[kColsPerWarp][8], wu[kColsPerWarp][8];
#pragma unroll
    for (int j = 0; j < kColsPerWarp; ++j) {
      const int64_t col = min(col0 + j, inter - 1);  // columns past the end repeat the last (not written)
      Unpack8(*reinterpret_cast<const uint4*>(gate + col * hidden + c), wg[j]);
      Unpack8(*reinterpret_cast<const uint4*>(up + col * hidden + c), wu[j]);
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      if (r < nr) {
        const float4 a = *reinterpret_cast<const float4*>(xr[r] + c);
        const float4 b = *reinterpret_cast<const float4*>(xr[r] + c + 4);
#pragma unroll
        for (int j = 0; j < kColsPerWarp; ++j) {
          ag[j][r] += Dot8(wg[j], a, b);
          au[j][r] += Dot8(wu[j], a, b);
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    if (r < nr) {
#pragma unroll
      for (int j = 0; j < kColsPerWarp; ++j) {
        const float g = WarpSum(ag[j][r]), u = WarpSum(au[j][r]);
        if (lane == 0 && col0 + j < inter) act[(unit.y + r) * inter + col0 + j] = SiluF(g) * u;
      }
    }
  }
}

// slot_out[slot, col] = weight[slot] * (act[pos] down_e[col]) for the rows of one unit.
__global__ void DownKernel(const float* act, int64_t inter, const int32_t* order, const int4* units,
                           const int32_t* num_units, const float* weights, const uint16_t* const* ptrs, int64_t E,
                           int64_t hidden, float* slot_out) {
  if (static_cast<int32_t>(blockIdx.y) >= *num_units) return;
  const int4 unit = units[blockIdx.y];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t col0 = (static_cast<int64_t>(blockIdx.x) * kWarps + warp) * kColsPerWarp;
  if (col0 >= hidden) return;
  const int nr = unit.z;
  const uint16_t* down = ptrs[2 * E + unit.x];
  float acc[kColsPerWarp][kRows];
#pragma unroll
  for (int j = 0; j < kColsPerWarp; ++j)
#pragma unroll
    for (int r = 0; r < kRows; ++r) acc[j][r] = 0.0f;
  for (int64_t c = lane * 8; c < inter; c += 256) {
    float w[kColsPerWarp][8];
#pragma unroll
    for (int j = 0; j < kColsPerWarp; ++j) {
      const int64_t col = min(col0 + j, hidden - 1);
      Unpack8(*reinterpret_cast<const uint4*>(down + col * inter + c), w[j]);
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      if (r < nr) {
        const float* ar = act + (unit.y + r) * inter + c;
        const float4 a = *reinterpret_cast<const float4*>(ar);
        const float4 b = *reinterpret_cast<const float4*>(ar + 4);
#pragma unroll
        for (int j = 0; j < kColsPerWarp; ++j) acc[j][r] += Dot8(w[j], a, b);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    if (r < nr) {
      const int32_t slot = order[unit.y + r];
      const float scale = weights[slot];
#pragma unroll
      for (int j = 0; j < kColsPerWarp; ++j) {
        const float d = WarpSum(acc[j][r]);
        if (lane == 0 && col0 + j < hidden) slot_out[static_cast<int64_t>(slot) * hidden + col0 + j] = d * scale;
      }
    }
  }
}

}  // namespace

int64_t MoeMaxUnits(int64_t slots, int64_t num_experts) {
  return (slots + kRows - 1) / kRows + (slots < num_experts ? slots : num_experts);
}

void MoeGroupByExpert(const int32_t* idx, int64_t slots, int64_t num_experts, int32_t* order, int4* units,
                      int32_t* num_units, cudaStream_t s) {
  GroupKernel<<<1, 1024, 2 * num_experts * sizeof(int32_t), s>>>(idx, slots, num_experts, order, units, num_units);
}

void MoeGroupedGateUp(const float* x, int64_t hidden, int64_t k, const int32_t* order, const int4* units,
                      const int32_t* num_units, int64_t max_units, const uint16_t* const* ptrs, int64_t num_experts,
                      int64_t inter, float* act, cudaStream_t s) {
  if (max_units <= 0) return;
  const dim3 grid(static_cast<unsigned>((inter + kColsPerBlock - 1) / kColsPerBlock), static_cast<unsigned>(max_units));
  GateUpKernel<<<grid, kWarps * 32, 0, s>>>(x, hidden, k, order, units, num_units, ptrs, num_experts, inter, act);
}

void MoeGroupedDown(const float* act, int64_t inter, const int32_t* order, const int4* units,
                    const int32_t* num_units, int64_t max_units, const float* weights, const uint16_t* const* ptrs,
                    int64_t num_experts, int64_t hidden, float* slot_out, cudaStream_t s) {
  if (max_units <= 0) return;
  const dim3 grid(static_cast<unsigned>((hidden + kColsPerBlock - 1) / kColsPerBlock), static_cast<unsigned>(max_units));
  DownKernel<<<grid, kWarps * 32, 0, s>>>(act, inter, order, units, num_units, weights, ptrs, num_experts, hidden,
                                          slot_out);
}

}  // namespace tessera::cuda
