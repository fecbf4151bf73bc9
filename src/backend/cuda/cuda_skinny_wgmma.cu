// tessera cuda backend: the few-row GEMM on Hopper's warpgroup MMA (v3, sm_90a builds; the default
// for 33..64 rows a row tile): y[m, n] (+)= x[m, k] w[n, k]^T in row tiles of 64 (decode batches of
// 33..64 sequences, small products of up to 256 rows such as 8 diffusion blocks). Why: with x split
// hi + lo, 64 rows are 128 bf16 rows of tensor work per weight byte, more than the mma.sync kernel
// (v2, cuda_skinny_gemm.cu) issues while the weights stream in (ncu: 0.3 instructions a cycle,
// tensor pipe ~30% busy, 0.6-0.9 TB/s at 64 rows); a wgmma reads its tiles from shared memory by
// itself. At 32 rows or fewer v2 stays (as fast or faster there: docs/PERFORMANCE.md).
//
// Two ways to feed x (f32) to the bf16 wgmmas as hi + lo (the mma.sync kernels' SplitPair rounding
// either way, so both give the same bits):
// - pre-split (kPreSplit, launches of >= PreSplitMinTiles() column tiles): F32ToBf16Split writes x
//   hi and lo once into the caller's scratch and both wgmma operands come from shared memory. Why:
//   splitting in registers in every block of a row tile (16 shared loads and 16 splits a warp a
//   stage) left the kernel issue-bound at ~360 instructions a warp a stage (ncu, thirteenth
//   session); q / k / v of Qwen3-30B-A3B at 64 rows 19.9 -> 11.9 us (CudaBench.MatMulRows).
// - in registers (fewer column tiles: the router, o / out_proj): the split pass would cost more
//   than the blocks' own splits (Qwen3-30B-A3B's 8x32 denoise step, whose router takes this kernel: +0.4 ms).
//
// Block = one warpgroup (4 warps), tile = 64 rows x 128 columns, k split over a thread-block cluster
// (at most 8 ranks) for narrow outputs and summed in rank order as v2 does (SkinnyClusterSumStore).
// A stage = 64 of k: the weight tile (128 columns x 128 bytes) brought by one TMA copy in the
// 128-byte-swizzled K-major layout wgmma reads (16-byte chunk c of row r at c ^ (r & 7)), and the
// tile's 64 rows of x by two TMA copies in the same layout (hi and lo boxes of 64 k, or two f32
// boxes of 32 k; 64 x 128 bytes each), all completing on the stage's mbarrier (one thread issues a
// stage). ST - 2 stages load while one is multiplied and the wgmmas of the one before may still
// run. Each k step of 16 issues two m64n128k16 wgmmas (hi, lo) into the same accumulators. The
// weights of the first stages are requested before the grid dependency wait (no kernel writes
// them): with PDL that latency hides behind the previous kernel's tail.
//
// Why TMA and not cp.async for the weights (measured in one binary, CudaBench.MatMulRows, q / k / v
// of 4096 + 512 + 512 x 2048 at 64 rows): per-thread cp.async copies plus the fence.proxy.async that
// wgmma (async proxy) needs after generic-proxy writes, 37.4 us; the same without the fence (wrong,
// timing only) 36.9 us; one TMA copy a stage, 26.6 us (v2: 32.6 us).
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <mutex>
#include <tuple>

#include "backend/cuda/cuda_launch.cuh"
#include "backend/cuda/cuda_mma_util.cuh"
#include "backend/cuda/cuda_skinny_gemm.cuh"
#include "backend/cuda/cuda_switches.h"
#include "backend/cuda/cuda_wgmma_util.cuh"

namespace tessera::cuda {

namespace {

constexpr int kWgRows = 64, kWgCols = 128, kWgThreads = 128;
constexpr int kWgKt = 64;                            // k per stage: four wgmma k steps
// k split over up to 8 ranks (the portable cluster size). Clusters of 8 had made Qwen3.5-35B-A3B's
// b64 step 0.4 ms slower (thirteenth session): 16 column tiles x 8 did not all fit at once with one
// block an SM, a second wave; LaunchSkinnyGrid now sizes the split by the clusters that fit
// (SkinnyClusterCapacity), and 8 measured 0.1 ms faster than 4 (fourteenth session; the diary of
// those sessions: `git show 5cf9cf6:docs/PERFORMANCE.md`).
constexpr int kWgMaxSplits = kSkinnyMaxSplits;
constexpr int kWgStages = 6;                         // 193 KiB of shared memory: one block an SM
constexpr int kWgBStage = kWgCols * kWgKt * 2;       // bytes
constexpr int kWgXBox = kWgRows * 128;               // bytes: a TMA box of x, 64 rows x 128 B (64 k hi or lo; 32 k f32)
constexpr int kWgAStage = 2 * kWgXBox;               // bytes: x of the stage's 64 of k
constexpr int kWgRedStride = kWgCols + 8;            // floats per row of the partial tile
constexpr size_t kWgPipe = static_cast<size_t>(kWgStages) * (kWgBStage + kWgAStage);
constexpr size_t kWgRed = static_cast<size_t>(kWgRows) * kWgRedStride * 4;
constexpr size_t kWgSmem = (kWgPipe > kWgRed ? kWgPipe : kWgRed) + 8 * kWgStages + 1024;  // + mbarriers, alignment
constexpr int kWgAccs = kWgRows * kWgCols / kWgThreads;                                   // f32 accumulators a thread
static_assert(kWgAccs == kWgmmaN128Accs, "an m64n128 wgmma's accumulators");
static_assert(kWgStages >= 3, "one stage multiplied, one possibly still read, one or more loading");


struct SkinnyTensorMaps {
  CUtensorMap map[kSkinnyMaxJobs];
  // kPreSplit: x split [2][m][k] bf16 (hi, lo), boxes of 64 k x 64 rows x 1; else x [m][k] f32, boxes
  // of 32 k x 64 rows; 128-byte swizzle either way (128-byte box rows).
  CUtensorMap x;
};

// kPreSplit: both operands from shared memory, x split beforehand (x_split); else x's f32 rows are
// split into A fragments in registers by every block (few column tiles: LaunchSkinnyWgmma).
// kExact: x's hi and lo parts multiplied (f32 activations); else hi alone (bf16 activations, half
// the wgmmas). A template argument, not jobs.exact: a branch between the wgmmas serialises them.
template <bool kPreSplit, bool kExact>
__global__ void __launch_bounds__(kWgThreads, 1)
    SkinnyGemmWgmmaKernel(const float* x, int m, int k, const SkinnyJobs jobs, bool accumulate, int k_chunk,
                          int row_tiles, const __grid_constant__ SkinnyTensorMaps maps) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const auto raw = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  unsigned char* smem = smem_raw + ((1024 - (raw & 1023)) & 1023);     // TMA's swizzled tiles: 1024-aligned
  unsigned char* sb = smem;                                            // [ST][128 columns][128 B], swizzled
  unsigned char* sa = smem + kWgStages * kWgBStage;                     // [ST][2 boxes][64 rows][128 B], swizzled
  float* red = reinterpret_cast<float*>(smem);                         // [64][kWgRedStride], after the loop
  const auto bars =
      static_cast<uint32_t>(__cvta_generic_to_shared(smem + kWgStages * (kWgBStage + kWgAStage)));  // [ST] mbarriers

  namespace cg = cooperative_groups;
  const cg::cluster_group cluster = cg::this_cluster();
  const SkinnyBlock blk =
      SkinnyBlockOf<kWgRows, kWgCols>(x, m, k, jobs, k_chunk, row_tiles, static_cast<int>(cluster.num_blocks()),
                                      static_cast<int>(cluster.block_rank()));
  const int k_begin = blk.k_begin, k_end = blk.k_end;
  const int stages = k_end > k_begin ? (k_end - k_begin + kWgKt - 1) / kWgKt : 0;
  const int t = threadIdx.x, warp = t >> 5, g = (t & 31) >> 2, q = t & 3;

  // Stage s into buffer s % ST, by thread 0, completing on the stage's mbarrier: the weights (one
  // TMA copy of the (k0, col0) box) and the tile's 64 rows of x (hi and lo boxes, or two f32 boxes
  // of 32 k). The weights of the first stages are requested before the grid dependency wait, x after
  // it (expect_tx counts both from the start: the phase cannot complete early). Columns and rows past
  // the tensors and k past it come as zeros (only the last rank's last stage can be partial: the
  // other ranks' k ranges are whole stages), so every stage runs all four k steps: a branch between
  // the wgmmas makes ptxas fence each one (C7519, serialising them).
  auto issue_w = [&](int s) {
    if (t != 0) return;
    const uint32_t bar = bars + 8 * (s % kWgStages);
    MbarExpectTx(bar, kWgBStage + kWgAStage);
    TmaLoad2d(static_cast<uint32_t>(__cvta_generic_to_shared(sb + (s % kWgStages) * kWgBStage)), &maps.map[blk.job],
              k_begin + s * kWgKt, blk.col0, bar);
  };
  auto issue_x = [&](int s) {
    if (t != 0) return;
    const uint32_t bar = bars + 8 * (s % kWgStages);
    const auto a = static_cast<uint32_t>(__cvta_generic_to_shared(sa + (s % kWgStages) * kWgAStage));
    if constexpr (kPreSplit) {
      TmaLoad3d(a, &maps.x, k_begin + s * kWgKt, blk.row0, 0, bar);
      TmaLoad3d(a + kWgXBox, &maps.x, k_begin + s * kWgKt, blk.row0, 1, bar);
    } else {
      TmaLoad2d(a, &maps.x, k_begin + s * kWgKt, blk.row0, bar);
      TmaLoad2d(a + kWgXBox, &maps.x, k_begin + s * kWgKt + 32, blk.row0, bar);
    }
  };

  float acc[kWgAccs];
#pragma unroll
  for (int i = 0; i < kWgAccs; ++i) acc[i] = 0.0f;

  if (t == 0) {  // the other threads wait on the barriers only after stage 0's __syncthreads
    for (int i = 0; i < kWgStages; ++i) MbarInit(bars + 8 * i, 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    FenceProxyAsync();
  }
  for (int s = 0; s < kWgStages - 2 && s < stages; ++s) issue_w(s);
  GridDependencyWait();  // x or its split (and y) may be the previous kernel's output; the weights are not
  for (int s = 0; s < kWgStages - 2 && s < stages; ++s) issue_x(s);

  // Stage s's start: every warp is past stage s - 1's wait (stage s - 2's wgmmas are done, its
  // buffer free), stage s has landed; stage s + ST - 2 goes into stage s - 2's buffer.
  auto begin_stage = [&](int s) {
    __syncthreads();
    MbarWait(bars + 8 * (s % kWgStages), (s / kWgStages) & 1);
    if (s + kWgStages - 2 < stages) {
      issue_w(s + kWgStages - 2);
      issue_x(s + kWgStages - 2);
    }
  };
  if constexpr (kPreSplit) {
    for (int s = 0; s < stages; ++s) {
      begin_stage(s);
      WgmmaFence();  // the accumulators (zeroed, first) before the wgmmas read them
      const auto b = static_cast<uint32_t>(__cvta_generic_to_shared(sb + (s % kWgStages) * kWgBStage));
      const auto a = static_cast<uint32_t>(__cvta_generic_to_shared(sa + (s % kWgStages) * kWgAStage));
#pragma unroll
      for (int j = 0; j < 4; ++j) {  // k step j starts 32 j bytes into each 128-byte row
        const uint64_t bd = WgmmaDescriptor(b + 32 * j);
        Wgmma64x128(acc, WgmmaDescriptor(a + 32 * j), bd);
        if constexpr (kExact) Wgmma64x128(acc, WgmmaDescriptor(a + kWgXBox + 32 * j), bd);
      }
      WgmmaCommit();
      WgmmaWait<1>();
    }
  } else {
    // Stage s, its A fragments in hi / lo (a register set the wgmmas of stage s - 2 read: complete,
    // as every warp waited for all but the last group at the end of stage s - 1).
    auto stage = [&](int s, uint32_t(&hi)[4][4], uint32_t(&lo)[4][4]) {
      begin_stage(s);
      // Rows 16 warp + g and + 8 (both g mod 8: the same swizzle), floats 2q, 2q + 1 of k step j's
      // first and second 8: box j / 2, 16-byte chunk c = 4 (j % 2) + q / 2 (+ 2) stored at c ^ g.
      const unsigned char* a = sa + (s % kWgStages) * kWgAStage + (16 * warp + g) * 128 + 8 * (q & 1);
      auto pair = [&](int j, int row8, int half) {
        const int c = 4 * (j & 1) + (q >> 1) + 2 * half;
        return *reinterpret_cast<const float2*>(a + (j >> 1) * kWgXBox + row8 * 8 * 128 + ((c ^ g) << 4));
      };
#pragma unroll
      for (int j = 0; j < 4; ++j) {  // all four k steps (zeros past k_end: see issue_w)
        const float2 r0 = pair(j, 0, 0), r0k = pair(j, 0, 1), r1 = pair(j, 1, 0), r1k = pair(j, 1, 1);
        SplitPair(r0.x, r0.y, hi[j][0], lo[j][0]);
        SplitPair(r1.x, r1.y, hi[j][1], lo[j][1]);
        SplitPair(r0k.x, r0k.y, hi[j][2], lo[j][2]);
        SplitPair(r1k.x, r1k.y, hi[j][3], lo[j][3]);
      }
      WgmmaFence();  // the A registers (and, first, the zeroed accumulators) before the wgmmas read them
      const auto b = static_cast<uint32_t>(__cvta_generic_to_shared(sb + (s % kWgStages) * kWgBStage));
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const uint64_t desc = WgmmaDescriptor(b + 32 * j);
        Wgmma64x128(acc, hi[j], desc);
        if constexpr (kExact) Wgmma64x128(acc, lo[j], desc);
      }
      WgmmaCommit();
      WgmmaWait<1>();
    };
    uint32_t hi0[4][4], lo0[4][4], hi1[4][4], lo1[4][4];
    int s = 0;
    for (; s + 1 < stages; s += 2) {
      stage(s, hi0, lo0);
      stage(s + 1, hi1, lo1);
    }
    if (s < stages) stage(s, hi0, lo0);
  }
  WgmmaWait<0>();
#pragma unroll
  for (int i = 0; i < kWgAccs; ++i) asm volatile("" : "+f"(acc[i])::"memory");  // read only after the wait
  __syncthreads();  // the stage buffers are free (every copy waited for): the partial tile goes there

  // Accumulator i of n8 tile j = i / 4: row 16 warp + g (+ 8 for i % 4 >= 2), column 8 j + 2 q (+ 1).
#pragma unroll
  for (int j = 0; j < kWgCols / 8; ++j) {
    const int row = 16 * warp + g, col = 8 * j + 2 * q;
    *reinterpret_cast<float2*>(red + row * kWgRedStride + col) = make_float2(acc[4 * j], acc[4 * j + 1]);
    *reinterpret_cast<float2*>(red + (row + 8) * kWgRedStride + col) = make_float2(acc[4 * j + 2], acc[4 * j + 3]);
  }
  SkinnyClusterSumStore<kWgCols, kWgRedStride, kWgThreads>(red, blk, accumulate);
#else
  __trap();  // not built for sm_90a: SkinnyWgmmaBuilt() is false and nothing launches this
#endif
}

}  // namespace

bool SkinnyWgmmaBuilt() {
#if defined(TESSERA_CUDA_SM90A)
  return true;
#else
  return false;
#endif
}

namespace {

// The tensor map of a bf16 weight [n][k] in boxes of 128 columns x 64 k (cached: weights live as
// long as the model).
bool WeightTensorMap(const uint16_t* w, int n, int64_t k, CUtensorMap* out) {
  static std::mutex mu;
  static std::map<std::tuple<const void*, int, int64_t>, CUtensorMap> cache;
  const std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_tuple(static_cast<const void*>(w), n, k);
  if (auto it = cache.find(key); it != cache.end()) {
    *out = it->second;
    return true;
  }
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(k), static_cast<cuuint64_t>(n)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(k) * 2};
  const cuuint32_t box[2] = {kWgKt, kWgCols};
  CUtensorMap map;
  if (!EncodeSwizzled128(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, w, dims, strides, box)) return false;
  cache.emplace(key, map);
  *out = map;
  return true;
}

// The tensor map of the activations x [m][k] f32 in boxes of 64 rows x 32 k (128 bytes, the
// 128-byte swizzle's widest), made for every launch (x is a workspace buffer; the encoding is host
// work, no device call; a captured graph keeps the launch's copy).
bool ActivationTensorMap(const float* x, int64_t m, int64_t k, CUtensorMap* out) {
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(k), static_cast<cuuint64_t>(m)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(k) * 4};
  const cuuint32_t box[2] = {32, kWgRows};
  return EncodeSwizzled128(out, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, x, dims, strides, box);
}

// The same for x split into bf16 hi and lo ([2][m][k], hi first), boxes of 64 k x 64 rows x 1.
bool SplitTensorMap(const uint16_t* split, int64_t m, int64_t k, CUtensorMap* out) {
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(k), static_cast<cuuint64_t>(m), 2};
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(k) * 2, static_cast<cuuint64_t>(m * k) * 2};
  const cuuint32_t box[3] = {kWgKt, kWgRows, 1};
  return EncodeSwizzled128(out, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, split, dims, strides, box);
}

// From how many column tiles (all jobs) x is split once before the launch instead of by every block
// (TESSERA_CUDA_WGMMA_PRESPLIT_TILES, read once; 1: always, a large number: never). Measured at 64
// rows: 40 tiles 19.9 -> 11.9 us, 64 tiles 13.1 -> 12.7, 16 tiles (o) equal, 8-16 tiles of small
// products slower by the pass; pre-splitting everything made the steps slower than from 24 on.
int PreSplitMinTiles() {
  static const int tiles = [] {
    const std::string e = SwitchValue("TESSERA_CUDA_WGMMA_PRESPLIT_TILES");
    return e.empty() ? 24 : std::max(1, std::atoi(e.c_str()));
  }();
  return tiles;
}
}  // namespace

bool SkinnyWgmmaPreSplits(const int64_t* n, int count) {
  int64_t tiles = 0;
  for (int j = 0; j < count; ++j) tiles += (n[j] + kWgCols - 1) / kWgCols;
  return tiles >= PreSplitMinTiles();
}

bool LaunchSkinnyWgmma(const float* x, int64_t m, int64_t k, SkinnyJobs jobs, bool accumulate, uint16_t* x_split,
                       cudaStream_t s) {
  SkinnyTensorMaps maps{};
  int64_t n[kSkinnyMaxJobs] = {};
  for (int j = 0; j < jobs.count; ++j) {
    if (!WeightTensorMap(jobs.w[j], jobs.n[j], k, &maps.map[j])) return false;
    n[j] = jobs.n[j];
  }
  if (x_split && SkinnyWgmmaPreSplits(n, jobs.count) && SplitTensorMap(x_split, m, k, &maps.x)) {
    // bf16 activations still fill the lo box (its TMA copy is counted in every stage), unread.
    F32ToBf16Split(x, m * k, x_split, x_split + m * k, s);
    LaunchSkinnyGrid(jobs.exact ? SkinnyGemmWgmmaKernel<true, true> : SkinnyGemmWgmmaKernel<true, false>, kWgSmem,
                     kWgThreads, kWgRows, kWgCols, kWgKt, kWgMaxSplits, /*programmatic=*/true, x, m, k, jobs,
                     accumulate, s, maps);
    return true;
  }
  if (!ActivationTensorMap(x, m, k, &maps.x)) return false;
  LaunchSkinnyGrid(jobs.exact ? SkinnyGemmWgmmaKernel<false, true> : SkinnyGemmWgmmaKernel<false, false>, kWgSmem,
                   kWgThreads, kWgRows, kWgCols, kWgKt, kWgMaxSplits, /*programmatic=*/true, x, m, k, jobs, accumulate,
                   s, maps);
  return true;
}

}  // namespace tessera::cuda
