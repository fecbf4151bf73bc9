// tessera cuda backend: what the few-row GEMM kernels share (cuda_skinny_gemm.cu: the mma.sync
// kernel v2; cuda_skinny_wgmma.cu: the wgmma kernel v3): the jobs of one launch (several
// weights of one x), a block's (job, column tile, row tile) from its cluster, and the epilogue that
// sums a cluster's k-split partial tiles in rank order through distributed shared memory.
#pragma once

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <tuple>

#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuda_launch.cuh"
#include "backend/cuda/cuda_mma_util.cuh"

namespace tessera::cuda {

// Up to kSkinnyMaxJobs products of the same x in one launch: job j owns the column tiles
// [first_tile[j], first_tile[j + 1]).
struct SkinnyJobs {
  const uint16_t* w[kSkinnyMaxJobs];
  float* y[kSkinnyMaxJobs];
  int n[kSkinnyMaxJobs];
  int first_tile[kSkinnyMaxJobs + 1];
  int count;
  bool exact;  // x split hi + lo (f32 activations) or rounded to bf16 (the hi part alone)
};

// A block's share of a launch whose grid is (column tile, row tile) cells x splits blocks, a cluster
// being the splits of one cell: rank r takes k from r k_chunk. The row tiles of a column tile are
// neighbours in the grid, so they run together and read its weights from L2 after the first.
struct SkinnyBlock {
  const float* x;  // the cell's first row
  int m;           // its rows (at most the tile's)
  const uint16_t* w;
  int n;     // the job's columns
  float* y;  // the job's output at the cell's first row
  int job;   // its index in the launch
  int col0;  // the cell's first column within the job
  int row0;  // the cell's first row
  int k_begin, k_end;
};

template <int kRows, int kCols>
__device__ __forceinline__ SkinnyBlock SkinnyBlockOf(const float* x, int m, int k, const SkinnyJobs& jobs, int k_chunk,
                                                     int row_tiles, int splits, int rank) {
  const int cell = static_cast<int>(blockIdx.x) / splits;
  const int tile = cell / row_tiles, row0 = (cell % row_tiles) * kRows;
  int job = 0;
  while (job + 1 < jobs.count && tile >= jobs.first_tile[job + 1]) ++job;
  SkinnyBlock b;
  b.x = x + static_cast<int64_t>(row0) * k;
  b.m = min(m - row0, kRows);
  b.w = jobs.w[job];
  b.n = jobs.n[job];
  b.y = jobs.y[job] + static_cast<int64_t>(row0) * b.n;
  b.col0 = (tile - jobs.first_tile[job]) * kCols;
  b.row0 = row0;
  b.job = job;
  b.k_begin = rank * k_chunk;
  b.k_end = min(k, b.k_begin + k_chunk);
  return b;
}

// Every rank has written its partial tile red[kRows][kRedStride] (kCols columns used) and none has
// synchronised the cluster yet: rank r sums every splits-th group of 4 outputs over the ranks in rank
// order (deterministic), adds y when accumulating and stores it. Every block must call it (both
// cluster barriers): a block's shared memory must stay alive until the other ranks have read it.
template <int kCols, int kRedStride, int kThreads>
__device__ __forceinline__ void SkinnyClusterSumStore(float* red, const SkinnyBlock& b, bool accumulate) {
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  const int splits = static_cast<int>(cluster.num_blocks()), rank = static_cast<int>(cluster.block_rank());
  cluster.sync();  // every rank's partial tile is written (release / acquire across the cluster)
  const bool vec = (b.n & 3) == 0 && (reinterpret_cast<uintptr_t>(b.y) & 15) == 0;
  constexpr int kGroups = kCols / 4;  // per row
  for (int i = rank * kThreads + static_cast<int>(threadIdx.x); i < b.m * kGroups; i += splits * kThreads) {
    const int row = i / kGroups, c = 4 * (i % kGroups);
    if (b.col0 + c >= b.n) continue;
    const int off = row * kRedStride + c;
    float4 v = *reinterpret_cast<const float4*>(cluster.map_shared_rank(red, 0) + off);
    for (int r = 1; r < splits; ++r) {
      const float4 p = *reinterpret_cast<const float4*>(cluster.map_shared_rank(red, r) + off);
      v.x += p.x, v.y += p.y, v.z += p.z, v.w += p.w;
    }
    float* dst = b.y + static_cast<int64_t>(row) * b.n + b.col0 + c;
    if (vec && b.col0 + c + 4 <= b.n) {
      if (accumulate) {
        const float4 o = *reinterpret_cast<const float4*>(dst);
        v.x += o.x, v.y += o.y, v.z += o.z, v.w += o.w;
      }
      *reinterpret_cast<float4*>(dst) = v;
    } else {
      const float e[4] = {v.x, v.y, v.z, v.w};
      for (int u = 0; u < 4 && b.col0 + c + u < b.n; ++u) dst[u] = accumulate ? dst[u] + e[u] : e[u];
    }
  }
  cluster.sync();  // no block leaves while another may still read its partial tile
}

constexpr int kSkinnyMaxSplits = 8;  // the portable cluster size

// How many clusters of `size` blocks of the kernel can be resident at once (per device, kernel and
// size, cached; not stream-ordered, so allowed while a step is captured). With one block an SM a
// cluster must find `size` free SMs in one GPC, so this can be fewer than the SMs / size.
template <typename Kernel>
int64_t SkinnyClusterCapacity(Kernel kernel, size_t smem, int threads, int size) {
  int dev = 0;
  cudaGetDevice(&dev);
  static std::mutex mu;
  static std::map<std::tuple<int, const void*, int>, int64_t> cache;
  const std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_tuple(dev, reinterpret_cast<const void*>(kernel), size);
  if (const auto it = cache.find(key); it != cache.end()) return it->second;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(size));
  cfg.blockDim = dim3(threads);
  cfg.dynamicSmemBytes = smem;
  cudaLaunchAttribute attr = {};
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = static_cast<unsigned>(size);
  attr.val.clusterDim.y = 1;
  attr.val.clusterDim.z = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  int clusters = 0;
  if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg) != cudaSuccess) {
    cudaGetLastError();  // not sticky: an unanswered query counts as "no limit known"
    clusters = 0;
  }
  cache.emplace(key, clusters);
  return clusters;
}

// Launches kernel(x, m, k, jobs, accumulate, k_chunk, row_tiles, extra...) over (column tile of
// kCols, row tile of kRows) cells, splitting k (cluster size, up to max_splits)
// so that cells x splits fills the resident blocks once without exceeding them (a second, partial
// wave would cost more than a smaller split gains; clusters count as SkinnyClusterCapacity says);
// the k ranges are whole stages (kt) except the last. programmatic: also a PDL launch
// (cuda_launch.cuh) when launches use it.
template <typename Kernel, typename... Extra>
void LaunchSkinnyGrid(Kernel kernel, size_t smem, int threads, int rows, int cols, int kt, int max_splits,
                      bool programmatic, const float* x, int64_t m, int64_t k, SkinnyJobs jobs, bool accumulate,
                      cudaStream_t s, const Extra&... extra) {
  const Residency res = KernelResidency(kernel, smem, threads);
  jobs.first_tile[0] = 0;
  for (int j = 0; j < jobs.count; ++j) jobs.first_tile[j + 1] = jobs.first_tile[j] + (jobs.n[j] + cols - 1) / cols;
  const int64_t row_tiles = (m + rows - 1) / rows;
  const int64_t tiles = jobs.first_tile[jobs.count] * row_tiles;
  int64_t want = std::clamp<int64_t>(res.blocks / tiles, 1, max_splits);
  while (want > 1) {  // a split whose clusters do not all fit at once would run a second, partial wave
    const int64_t capacity = SkinnyClusterCapacity(kernel, smem, threads, static_cast<int>(want));
    if (capacity <= 0 || tiles <= capacity) break;
    --want;
  }
  const int64_t k_chunk = (k + kt * want - 1) / (kt * want) * kt;
  const int64_t splits = (k + k_chunk - 1) / k_chunk;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(tiles * splits));
  cfg.blockDim = dim3(threads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cudaLaunchAttribute attr[2] = {};
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = static_cast<unsigned>(splits);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  attr[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[1].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = programmatic && ProgrammaticLaunch() ? 2 : 1;
  // A failed launch is left in cudaGetLastError for the backend's check, like a <<<>>> launch.
  cudaLaunchKernelEx(&cfg, kernel, x, static_cast<int>(m), static_cast<int>(k), jobs, accumulate,
                     static_cast<int>(k_chunk), static_cast<int>(row_tiles), extra...);
}

// The wgmma kernel (cuda_skinny_wgmma.cu): whether this build has it (sm_90a code); whether a launch
// of outputs n[0..count) splits x once beforehand (SkinnyWgmmaPreSplits: enough column tiles), and
// its launcher (row tiles of 64; the caller has checked SkinnyGemmFits for every job). Pre-splitting
// launches put x into x_split (SkinnySplitBytes: hi [m][k] then lo [m][k], bf16) first; without
// x_split they split x in their blocks. False, nothing queued, when a TMA tensor map (a weight's, x's
// or the split's) cannot be made (the driver lacks cuTensorMapEncodeTiled, or the layout is
// refused): the caller takes v2.
bool SkinnyWgmmaBuilt();
bool SkinnyWgmmaPreSplits(const int64_t* n, int count);
bool LaunchSkinnyWgmma(const float* x, int64_t m, int64_t k, SkinnyJobs jobs, bool accumulate, uint16_t* x_split,
                       cudaStream_t s);

}  // namespace tessera::cuda
