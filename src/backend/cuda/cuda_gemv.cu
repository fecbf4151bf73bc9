// tessera cuda backend: the few-row bf16 GEMV y[m, n] (+)= x[m, k] w[n, k]^T for m <= kGemvMaxRows
// (batch-1 and small-batch decode), alone or for several weights of one input in one launch
// (GemvBf16Multi). Batch-1 decode is a chain of small launches, so the kernel is written to keep HBM
// busy: many 16-byte weight loads in flight per warp, k split across the warps of a block for narrow
// outputs. f32 activations, bf16 weights, f32 accumulation. See cuda_kernels.h.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "backend/cuda/cuda_device_util.cuh"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuda_launch.cuh"
#include "backend/cuda/cuda_mma_util.cuh"

namespace tessera::cuda {

namespace {

// The fallback for unaligned x / w or k % 8 != 0: one warp per output column n, one bf16 weight a lane
// at a time (the tiled kernel below needs 16-byte loads).
__global__ void GemvBf16ScalarKernel(const float* x, int m, int64_t k, const uint16_t* w, int64_t n, float* y,
                                     bool accumulate) {
  GridDependencyWait();
  const int lane = threadIdx.x & 31;
  const int64_t col = blockIdx.x * static_cast<int64_t>(blockDim.x >> 5) + (threadIdx.x >> 5);
  if (col >= n) return;
  const uint16_t* wr = w + col * k;
  float acc[kGemvMaxRows];
#pragma unroll
  for (int r = 0; r < kGemvMaxRows; ++r) acc[r] = 0.0f;
  for (int64_t c = lane; c < k; c += 32) {
    const float wf = Bf16(wr[c]);
#pragma unroll
    for (int r = 0; r < kGemvMaxRows; ++r)
      if (r < m) acc[r] += wf * x[r * k + c];
  }
#pragma unroll
  for (int r = 0; r < kGemvMaxRows; ++r) {
    if (r < m) {
      const float v = WarpSum(acc[r]);
      if (lane == 0) y[r * n + col] = accumulate ? y[r * n + col] + v : v;
    }
  }
}

// The tiled GEMV (every aligned product of m <= kGemvMaxRows rows). A block is kGemvWarps warps. Each
// warp owns C adjacent output columns and one of `splits` slices of k; k is walked in segments of 256
// (a lane's 16-byte load per column), segment s + j * splits belonging to slice s. Each lane issues
// all of a step's U x C weight loads before using any, so a warp keeps kGemvLoads * 512 bytes in
// flight: with one load at a time (the first GEMV, removed) the loop waited on HBM latency and q /
// o_proj reached ~20% of the bandwidth. Launches of few columns (the router) split k so that they
// fill the GPU (LaunchGemvTiled); the slices' partials are summed in slice order through shared
// memory (deterministic, no atomics). x (f32, read by every warp) comes through L1; the weights,
// read once, bypass it.
// A warp requests its first step's weights before GridDependencyWait (weights are never written by
// a kernel): at batch 1 the kernel before is a small latency-bound one (a norm, the attention
// merge), and the resident warps' first ~12 MB stream in while it runs.
constexpr int kGemvWarps = 8;
constexpr int kGemvLoads = 8;  // 16-byte weight loads in flight per lane per step


// Up to kGemvMaxJobs products of the same x in one launch (q / k / v, router and shared expert):
// job j owns blocks [first_block[j], first_block[j + 1]) and its own k split.
struct GemvJobs {
  const uint16_t* w[kGemvMaxJobs];
  float* y[kGemvMaxJobs];
  int64_t n[kGemvMaxJobs];
  int splits[kGemvMaxJobs];
  unsigned first_block[kGemvMaxJobs + 1];
  int count;
};

// M rows of x, C columns per warp. Needs k % 8 == 0 and x, every w 16-byte aligned.
template <int M, int C>
__global__ void __launch_bounds__(kGemvWarps * 32, M == 1 ? 4 : 1)
    GemvBf16TiledKernel(const float* __restrict__ x, int64_t k, const GemvJobs jobs, bool accumulate) {
  int job = 0;
  while (job + 1 < jobs.count && blockIdx.x >= jobs.first_block[job + 1]) ++job;
  const uint16_t* __restrict__ w = jobs.w[job];
  float* y = jobs.y[job];
  const int64_t n = jobs.n[job], block = blockIdx.x - jobs.first_block[job];
  const int splits = jobs.splits[job];
  constexpr int U = kGemvLoads / C;  // segments per step
  __shared__ float part[kGemvWarps][M * C];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int slice = warp % splits, group = warp / splits, groups = kGemvWarps / splits;
  const int64_t col0 = (block * groups + group) * C;
  const int kk = static_cast<int>(k), segs = (kk + 255) / 256;  // k < 2^31 (a row of w)
  const uint16_t* wc[C];
  bool live[C];
#pragma unroll
  for (int c = 0; c < C; ++c) {
    live[c] = col0 + c < n;
    wc[c] = w + (live[c] ? col0 + c : 0) * k + lane * 8;
  }
  const float* xl = x + lane * 8;
  float acc[M][C];
#pragma unroll
  for (int r = 0; r < M; ++r)
#pragma unroll
    for (int c = 0; c < C; ++c) acc[r][c] = 0.0f;

  uint4 wv[U][C];
#pragma unroll
  for (int u = 0; u < U; ++u) {  // the first step, before the wait
    const int seg = slice + u * splits;
    const bool ok = seg < segs && seg * 256 + lane * 8 < kk;
#pragma unroll
    for (int c = 0; c < C; ++c)
      wv[u][c] = ok && live[c] ? LoadStream16Early(wc[c] + seg * 256) : make_uint4(0, 0, 0, 0);
  }
  GridDependencyWait();
  for (int seg0 = slice; seg0 < segs; seg0 += splits * U) {
    if (seg0 != slice) {
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int seg = seg0 + u * splits;
        const bool ok = seg < segs && seg * 256 + lane * 8 < kk;
#pragma unroll
        for (int c = 0; c < C; ++c)
          wv[u][c] = ok && live[c] ? LoadStream16(wc[c] + seg * 256) : make_uint4(0, 0, 0, 0);
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int seg = seg0 + u * splits;
      if (seg >= segs || seg * 256 + lane * 8 >= kk) continue;
#pragma unroll
      for (int r = 0; r < M; ++r) {
        const float4* xp = reinterpret_cast<const float4*>(xl + r * kk + seg * 256);
        const float4 a = __ldg(xp), b = __ldg(xp + 1);
#pragma unroll
        for (int c = 0; c < C; ++c) acc[r][c] = DotBf16x8(wv[u][c], a, b, acc[r][c]);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < M; ++r)
#pragma unroll
    for (int c = 0; c < C; ++c) acc[r][c] = WarpSum(acc[r][c]);

  if (splits == 1) {
    if (lane == 0)
#pragma unroll
      for (int r = 0; r < M; ++r)
#pragma unroll
        for (int c = 0; c < C; ++c)
          if (live[c]) {
            float& o = y[r * n + col0 + c];
            o = accumulate ? o + acc[r][c] : acc[r][c];
          }
    return;
  }
  if (lane == 0)
#pragma unroll
    for (int r = 0; r < M; ++r)
#pragma unroll
      for (int c = 0; c < C; ++c) part[warp][r * C + c] = acc[r][c];
  __syncthreads();
  for (int i = threadIdx.x; i < groups * M * C; i += blockDim.x) {
    const int g = i / (M * C), rc = i % (M * C), r = rc / C, c = rc % C;
    const int64_t col = (block * groups + g) * C + c;
    if (col >= n) continue;
    float v = 0.0f;
    for (int sl = 0; sl < splits; ++sl) v += part[g * splits + sl][rc];
    float& o = y[r * n + col];
    o = accumulate ? o + v : v;
  }
}

// Slices of k per column group, one count for all jobs of a launch: the most (a power of two, at
// most kGemvWarps and one segment a slice) that keep every warp resident at once. More warps than fit
// run in a second, partial wave whose ~2 us of latency no other warp hides (ncu, q / k / v at batch
// 1: 2.6 waves, 12.1 us for 21 MB). Depends on the shapes and the device only, so a graph replays the
// summation order it captured. A job of a multi-launch splits as the whole launch does, so its sums
// may differ in the last bits from the same product launched alone.
template <int M, int C>
void LaunchGemvTiled(const float* x, int64_t k, GemvJobs jobs, bool accumulate, cudaStream_t s) {
  const auto kernel = GemvBf16TiledKernel<M, C>;
  const int64_t resident_warps =
      KernelResidency(kernel, 0, kGemvWarps * 32, /*shared_carveout=*/false).blocks * kGemvWarps;
  const int64_t segs = (k + 255) / 256;
  int64_t groups = 0;
  for (int j = 0; j < jobs.count; ++j) groups += (jobs.n[j] + C - 1) / C;
  int splits = 1;
  while (splits < kGemvWarps && groups * splits * 2 <= resident_warps && splits * 2 <= segs) splits *= 2;
  const int64_t per_block = kGemvWarps / splits;
  jobs.first_block[0] = 0;
  for (int j = 0; j < jobs.count; ++j) {
    jobs.splits[j] = splits;
    const int64_t job_groups = (jobs.n[j] + C - 1) / C;
    jobs.first_block[j + 1] = jobs.first_block[j] + static_cast<unsigned>((job_groups + per_block - 1) / per_block);
  }
  LaunchKernel(kernel, jobs.first_block[jobs.count], kGemvWarps * 32, 0, s)(x, k, jobs, accumulate);
}

// The tiled kernel for m rows; false when m has no instantiation.
bool LaunchGemvTiledRows(const float* x, int64_t m, int64_t k, const GemvJobs& jobs, bool accumulate,
                         cudaStream_t s) {
  switch (m) {
    case 1: LaunchGemvTiled<1, 2>(x, k, jobs, accumulate, s); return true;
    case 2: LaunchGemvTiled<2, 4>(x, k, jobs, accumulate, s); return true;
    case 3: LaunchGemvTiled<3, 4>(x, k, jobs, accumulate, s); return true;
    case 4: LaunchGemvTiled<4, 4>(x, k, jobs, accumulate, s); return true;
    case 5: LaunchGemvTiled<5, 4>(x, k, jobs, accumulate, s); return true;
    case 6: LaunchGemvTiled<6, 4>(x, k, jobs, accumulate, s); return true;
    case 7: LaunchGemvTiled<7, 4>(x, k, jobs, accumulate, s); return true;
    case 8: LaunchGemvTiled<8, 4>(x, k, jobs, accumulate, s); return true;
    default: return false;
  }
}

}  // namespace

void GemvBf16(const float* x, int64_t m, int64_t k, const uint16_t* w, int64_t n, float* y, bool accumulate,
              cudaStream_t s) {
  if (m <= 0 || n <= 0) return;
  const bool vec = k % 8 == 0 && Aligned16(x) && Aligned16(w);
  if (vec) {
    GemvJobs jobs{};
    jobs.w[0] = w, jobs.y[0] = y, jobs.n[0] = n, jobs.count = 1;
    if (LaunchGemvTiledRows(x, m, k, jobs, accumulate, s)) return;
  }
  const unsigned blocks = static_cast<unsigned>((n + 7) / 8);
  LaunchKernel(GemvBf16ScalarKernel, blocks, 256, 0, s)(x, static_cast<int>(m), k, w, n, y, accumulate);
}

void GemvBf16Multi(const float* x, int64_t m, int64_t k, const uint16_t* w0, int64_t n0, float* y0,
                   const uint16_t* w1, int64_t n1, float* y1, const uint16_t* w2, int64_t n2, float* y2,
                   const uint16_t* w3, int64_t n3, float* y3, cudaStream_t s) {
  const uint16_t* w[kGemvMaxJobs] = {w0, w1, w2, w3};
  float* y[kGemvMaxJobs] = {y0, y1, y2, y3};
  const int64_t n[kGemvMaxJobs] = {n0, n1, n2, n3};
  GemvJobs jobs{};
  bool vec = k % 8 == 0 && Aligned16(x);
  for (int j = 0; j < kGemvMaxJobs; ++j) {
    if (!w[j] || n[j] <= 0) continue;
    vec = vec && Aligned16(w[j]);
    jobs.w[jobs.count] = w[j], jobs.y[jobs.count] = y[j], jobs.n[jobs.count] = n[j];
    ++jobs.count;
  }
  if (m <= 0 || jobs.count == 0) return;
  if (vec && LaunchGemvTiledRows(x, m, k, jobs, false, s)) return;
  for (int j = 0; j < jobs.count; ++j) GemvBf16(x, m, k, jobs.w[j], jobs.n[j], jobs.y[j], false, s);
}

}  // namespace tessera::cuda
