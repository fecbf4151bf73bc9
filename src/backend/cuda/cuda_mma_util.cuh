// tessera cuda backend: tensor-core and cp.async device helpers shared by the MoE expert kernels
// (cuda_moe_grouped.cu) and the few-row dense GEMM (cuda_skinny_gemm.cu), and their launchers'
// residency query (KernelResidency). Header-only: every .cu gets its own copy of the __device__
// inline functions, no relocatable device code needed.
//
// The MMA scheme: m16n8k16 bf16 MMA with f32 accumulation; the f32 activations are split into hi +
// lo bf16 parts (two MMAs), which keeps ~16 mantissa bits (a single bf16 rounding of the activations
// costs ~1e-3 relative error per layer). With bf16 activations (CudaBackend's activation precision,
// `exact` false) only the hi part is multiplied: one MMA, as every bf16 engine does. Each lane loads 32 contiguous bytes of k per 32-wide chunk
// (8 activations, 8 weights); both operands use the same permutation of the chunk's k onto the MMA's
// logical k, so the products pair up and the sum over k is unchanged: lane q (= lane % 4) supplies
// physical k 8q..8q+7, as logical (2q, 2q+1, 2q+8, 2q+9) of the first k-step and of the second.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <utility>

namespace tessera::cuda {

__device__ __forceinline__ void Mma(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats as a bf16 pair (the first in the low half) and the pair of their rounding residues.
__device__ __forceinline__ void SplitPair(float x0, float x1, uint32_t& hi, uint32_t& lo) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(x0, x1);
  const float2 hf = __bfloat1622float2(h);
  const __nv_bfloat162 l = __floats2bfloat162_rn(x0 - hf.x, x1 - hf.y);
  hi = *reinterpret_cast<const uint32_t*>(&h);
  lo = *reinterpret_cast<const uint32_t*>(&l);
}

// A fragments (hi and lo) of both k-steps of a chunk from rows g and g + 8 (8 floats each at the
// lane's k; a, b: row g, c, d: row g + 8): a[step][reg] in the MMA's register order (row g, row g+8,
// row g +8k, row g+8 +8k). LoadA: the same, reading the floats from global memory.
__device__ __forceinline__ void SplitA(const float4 a, const float4 b, const float4 c, const float4 d,
                                       uint32_t (&hi)[2][4], uint32_t (&lo)[2][4]) {
  float v0[8], v1[8];
  v0[0] = a.x, v0[1] = a.y, v0[2] = a.z, v0[3] = a.w, v0[4] = b.x, v0[5] = b.y, v0[6] = b.z, v0[7] = b.w;
  v1[0] = c.x, v1[1] = c.y, v1[2] = c.z, v1[3] = c.w, v1[4] = d.x, v1[5] = d.y, v1[6] = d.z, v1[7] = d.w;
#pragma unroll
  for (int step = 0; step < 2; ++step) {
    SplitPair(v0[4 * step], v0[4 * step + 1], hi[step][0], lo[step][0]);
    SplitPair(v1[4 * step], v1[4 * step + 1], hi[step][1], lo[step][1]);
    SplitPair(v0[4 * step + 2], v0[4 * step + 3], hi[step][2], lo[step][2]);
    SplitPair(v1[4 * step + 2], v1[4 * step + 3], hi[step][3], lo[step][3]);
  }
}

__device__ __forceinline__ void LoadA(const float* r0, const float* r1, bool ok0, bool ok1, uint32_t (&hi)[2][4],
                                      uint32_t (&lo)[2][4]) {
  const float4 a = ok0 ? *reinterpret_cast<const float4*>(r0) : make_float4(0, 0, 0, 0);
  const float4 b = ok0 ? *reinterpret_cast<const float4*>(r0 + 4) : make_float4(0, 0, 0, 0);
  const float4 c = ok1 ? *reinterpret_cast<const float4*>(r1) : make_float4(0, 0, 0, 0);
  const float4 d = ok1 ? *reinterpret_cast<const float4*>(r1 + 4) : make_float4(0, 0, 0, 0);
  SplitA(a, b, c, d, hi, lo);
}

// One 32-wide k chunk of an n8 tile: w = the lane's 8 weights (physical k 8q..8q+7 of column g).
// exact: hi and lo (f32 activations); else hi only (bf16 activations). `exact` is uniform over the
// launch, so the branch costs no divergence.
__device__ __forceinline__ void MmaChunk(float* c, const uint32_t (&hi)[2][4], const uint32_t (&lo)[2][4],
                                         const uint4 w, bool exact) {
  Mma(c, hi[0], w.x, w.y);
  if (exact) Mma(c, lo[0], w.x, w.y);
  Mma(c, hi[1], w.z, w.w);
  if (exact) Mma(c, lo[1], w.z, w.w);
}

// Four 8x8 bf16 matrices from shared memory as stored (lanes 8i..8i+7 give matrix i's row
// addresses): lane (g, q) gets elements (g, 2q) and (g, 2q + 1) of each. With lane l addressing row
// (l & 15), column 8 (l >> 4) of a row-major [m][k] tile, the four are an m16k16 A fragment.
__device__ __forceinline__ void LdMatrixX4(uint32_t (&r)[4], const void* smem) {
  const auto a = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a)
               : "memory");
}

// Four 8x8 bf16 matrices from shared memory, transposed (lanes 8i..8i+7 give matrix i's row
// addresses): lane (g, q) gets elements (2q, g) and (2q + 1, g) of each, i.e. an MMA fragment whose k
// runs along the stored rows (V of the attention kernels: keys are rows).
__device__ __forceinline__ void LdMatrixX4Trans(uint32_t (&r)[4], const void* smem) {
  const auto a = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a)
               : "memory");
}

__device__ __forceinline__ void CpAsync16(void* smem, const void* gmem, bool fill) {
  // src-size 0 zero-fills the 16 bytes without reading (gmem must still be a valid address).
  const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(fill ? 16 : 0) : "memory");
}
// 4 bytes (through L1: small tables such as per-group scales), zero-filled when !fill.
__device__ __forceinline__ void CpAsync4(void* smem, const void* gmem, bool fill) {
  const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(gmem), "r"(fill ? 4 : 0) : "memory");
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// The current device's SM count, read once (host code: launchers sizing grids and k splits).
inline int DeviceSmCount() {
  static const int sms = [] {
    int dev = 0, n = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev);
    return n > 0 ? n : 1;
  }();
  return sms;
}

struct Residency {
  int64_t sms = 1, blocks = 1;  // SMs, blocks resident at once
};

// Per device and kernel, cached (host code, for the launchers of the pipelined kernels): sets the
// kernel's dynamic shared memory limit and the whole carveout for shared memory (their weights
// bypass L1 through cp.async.cg), and counts the blocks resident at once, which sizes their grids.
// None of these calls is stream-ordered, so they are allowed while a step is captured into a graph.
// shared_carveout = false (kernels that read through L1, e.g. the GEMV's activations) leaves the
// carveout to the driver.
template <typename Kernel>
Residency KernelResidency(Kernel kernel, size_t smem, int threads, bool shared_carveout = true) {
  int dev = 0;
  cudaGetDevice(&dev);
  static std::mutex mu;
  static std::map<std::pair<int, const void*>, Residency> cache;
  const std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_pair(dev, reinterpret_cast<const void*>(kernel));
  if (const auto it = cache.find(key); it != cache.end()) return it->second;
  int sms = 0, per_sm = 0;
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  // The weights bypass L1 (cp.async.cg): give shared memory the whole carveout.
  if (shared_carveout)
    cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem);
  Residency r;
  r.sms = std::max(1, sms);
  r.blocks = std::max<int64_t>(1, static_cast<int64_t>(sms) * per_sm);
  cache.emplace(key, r);
  return r;
}

}  // namespace tessera::cuda
