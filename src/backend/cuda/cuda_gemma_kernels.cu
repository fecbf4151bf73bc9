// tessera cuda backend: the element-wise kernels the Gemma family (DiffusionGemma, docs/DIFFUSION_GEMMA.md)
// adds: gelu-tanh gating, scaling by a constant, the final logit soft-cap, the router's per-expert
// scales, and rotary embedding with a caller's frequency table and pair offset (Gemma's default and
// proportional RoPE). Each is the CPU backend's loop, one thread an element (or a rotated pair), the
// same f32 arithmetic in the same order. See cuda_kernels.h.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/cuda_device_util.cuh"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuda_launch.cuh"

namespace tessera::cuda {

namespace {

constexpr int kThreads = 256;

unsigned Blocks(int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

__global__ void GeluTanhMulKernel(const float* g, const float* u, int64_t n, float* out) {
  GridDependencyWait();
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = GatedActF(g[i], u[i], /*gelu=*/true);
}

__global__ void ScaleKernel(float* x, int64_t n, float s) {
  GridDependencyWait();
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) x[i] *= s;
}

// cap * tanh(x / cap): a true division, as the CPU's (x * (1 / cap) rounds differently).
__global__ void SoftCapKernel(float* x, int64_t n, float cap) {
  GridDependencyWait();
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) x[i] = cap * tanhf(x[i] / cap);
}

__global__ void ScaleByIndexKernel(float* x, const int32_t* idx, int64_t n, const float* table) {
  GridDependencyWait();
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) x[i] *= table[idx[i]];
}

// A thread per (row, head, rotated pair i): dims (i, i + pair_offset) turn by positions[r] * inv_freq[i].
// Pairs past rotated_pairs (proportional RoPE's zero frequencies) are left as they are, as the CPU does.
__global__ void RopePairsKernel(float* x, int64_t rows, int64_t row_stride, int64_t heads, int64_t head_dim,
                                int64_t pair_offset, int64_t rotated_pairs, const float* inv_freq,
                                const int64_t* positions) {
  GridDependencyWait();
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= rows * heads * rotated_pairs) return;
  const int64_t f = i % rotated_pairs, h = (i / rotated_pairs) % heads, r = i / (rotated_pairs * heads);
  const float angle = static_cast<float>(positions[r]) * inv_freq[f];
  float sn, cs;
  sincosf(angle, &sn, &cs);
  float* v = x + r * row_stride + h * head_dim;
  const float a = v[f], b = v[f + pair_offset];
  v[f] = a * cs - b * sn;
  v[f + pair_offset] = b * cs + a * sn;
}

}  // namespace

void GeluTanhMul(const float* gate, const float* up, int64_t n, float* out, cudaStream_t s) {
  if (n > 0) LaunchKernel(GeluTanhMulKernel, Blocks(n), kThreads, 0, s)(gate, up, n, out);
}

void Scale(float* x, int64_t n, float scale, cudaStream_t s) {
  if (n > 0) LaunchKernel(ScaleKernel, Blocks(n), kThreads, 0, s)(x, n, scale);
}

void SoftCap(float* x, int64_t n, float cap, cudaStream_t s) {
  if (n > 0) LaunchKernel(SoftCapKernel, Blocks(n), kThreads, 0, s)(x, n, cap);
}

void ScaleByIndex(float* x, const int32_t* idx, int64_t n, const float* table, cudaStream_t s) {
  if (n > 0) LaunchKernel(ScaleByIndexKernel, Blocks(n), kThreads, 0, s)(x, idx, n, table);
}

void RopePairs(float* x, int64_t rows, int64_t row_stride, int64_t heads, int64_t head_dim, int64_t pair_offset,
               int64_t rotated_pairs, const float* inv_freq, const int64_t* positions, cudaStream_t s) {
  const int64_t n = rows * heads * rotated_pairs;
  if (n > 0)
    LaunchKernel(RopePairsKernel, Blocks(n), kThreads, 0, s)(x, rows, row_stride, heads, head_dim, pair_offset,
                                                             rotated_pairs, inv_freq, positions);
}

}  // namespace tessera::cuda
