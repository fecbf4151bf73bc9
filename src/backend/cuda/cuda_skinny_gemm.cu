// tessera cuda backend: the dense few-row GEMM y[m, n] (+)= x[m, k] w[n, k]^T for
// kGemvMaxRows < m <= the backend's row limit (decode batches of 9..64 sequences, diffusion blocks;
// small products of up to 256 rows, e.g. 8 blocks batched, in row tiles of 64) on tensor cores: f32
// x split hi + lo into two bf16 MMAs, bf16 weights read from memory once whatever m is (cuBLASLt's
// hi + lo GEMMs read them twice, and its tiles are sized for larger m). The MMA and cp.async helpers
// are shared with the MoE kernels (cuda_mma_util.cuh).
//
// Two kernels: v2 here, and v3 on Hopper's warpgroup MMA in cuda_skinny_wgmma.cu (the default above 32
// rows where the build has sm_90a code; SkinnyV3InUse).
// - v2 (the default up to 32 rows, and every row count without sm_90a code or a TMA tensor map):
//   weights and activations streamed through cp.async stages in shared memory (a block keeps 2-3
//   stages of 16-32 KiB of weights in flight), k split across the blocks of a thread-block cluster for
//   narrow outputs, the partial tiles summed in rank order through distributed shared memory in the
//   same kernel (no partial buffer, no second launch).
// Both are deterministic: every output element is summed in a fixed order, no atomics.
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuda_launch.cuh"
#include "backend/cuda/cuda_mma_util.cuh"
#include "backend/cuda/cuda_skinny_gemm.cuh"
#include "backend/cuda/cuda_switches.h"

namespace tessera::cuda {

namespace {

namespace cg = cooperative_groups;

// --- v2. Block = W warps, output tile = kRows (32 RG) rows x kCols (32 W) columns, one k range
// (its rank's share when the cluster splits k). Warp (rw, cw): rows 32 rw .. + 32 (two m16 tiles,
// those wholly past m skipped) x columns 8 kTiles cw .. (kTiles = 4 RG n8 tiles), i.e. 32 x 32 for
// m <= 32 and 32 x 64 for m <= 64: near-square warp tiles keep the shared-memory reads per MMA low
// (at m = 64 the MMAs, not the bytes, are the limit). A stage = kKt of k: the block's kCols weight
// rows (bf16, 16-byte chunk c of row R stored at chunk c ^ 4 (R & 1) so a quarter-warp's fragment
// loads, rows R and R + 1, hit all 32 banks once) and its kRows activation rows (f32, rows padded by
// 4 floats for the same reason; rows past m zero-filled); ST - 1 stages are in flight while one is
// multiplied. The activations are split hi + lo as they are read (SplitA), as in the MoE kernels.
constexpr int kKt = 64;            // k per stage: two 32-wide MMA chunks
constexpr int kAStride = kKt + 4;  // floats per activation row in shared memory
constexpr int kRowBytes = 2 * kKt;

template <int RG, int W, int ST>
struct SkinnyShape {
  static constexpr int kThreads = 32 * W;
  static constexpr int kRows = 32 * RG;
  static constexpr int kCols = 32 * W;
  static constexpr int kTiles = 4 * RG;  // n8 tiles a warp
  static constexpr int kColGroups = W / RG;
  static constexpr int kRowStep = kThreads / (kKt / 8);      // weight rows one copy instruction covers
  static constexpr int kACopies = kRows * (kKt / 4) / kThreads;  // 16-byte activation copies a thread
  static constexpr int kBStage = kCols * kRowBytes;          // bytes
  static constexpr int kAStage = kRows * kAStride * 4;       // bytes
  static constexpr int kRedStride = kCols + 8;               // floats per row of the partial tile
  static constexpr size_t kPipe = static_cast<size_t>(ST) * (kBStage + kAStage);
  static constexpr size_t kRed = static_cast<size_t>(kRows) * kRedStride * 4;
  static constexpr size_t kSmem = kPipe > kRed ? kPipe : kRed;
  static_assert(kColGroups * 8 * kTiles == kCols, "the warps cover the tile's columns");
  static_assert(kCols == 8 * kRowStep, "8 weight copies a thread a stage");
  static_assert(kACopies * kThreads == kRows * (kKt / 4), "activation copies divide evenly");
};

// Grid: (column tile, row tile) cells x splits blocks, a cluster = the splits of one cell
// (SkinnyBlockOf); the jobs (SkinnyJobs) are several weights of the same x.
template <int RG, int W, int ST>
__global__ void __launch_bounds__(32 * W, W == 4 ? 2 : 1)
    SkinnyGemmV2Kernel(const float* x, int m, int k, const SkinnyJobs jobs, bool accumulate, int k_chunk,
                       int row_tiles) {
  GridDependencyWait();
  using S = SkinnyShape<RG, W, ST>;
  extern __shared__ __align__(16) unsigned char smem[];
  unsigned char* sb = smem;                                        // [ST][kCols][kRowBytes]
  float* sa = reinterpret_cast<float*>(smem + ST * S::kBStage);    // [ST][kRows][kAStride]
  float* red = reinterpret_cast<float*>(smem);                     // [kRows][kRedStride], after the loop

  cg::cluster_group cluster = cg::this_cluster();
  const SkinnyBlock blk = SkinnyBlockOf<S::kRows, S::kCols>(x, m, k, jobs, k_chunk, row_tiles,
                                                             static_cast<int>(cluster.num_blocks()),
                                                             static_cast<int>(cluster.block_rank()));
  x = blk.x;
  m = blk.m;
  const uint16_t* w = blk.w;
  const int n = blk.n, col0 = blk.col0, k_begin = blk.k_begin, k_end = blk.k_end;
  const int stages = k_end > k_begin ? (k_end - k_begin + kKt - 1) / kKt : 0;

  const int t = threadIdx.x, lane = t & 31, warp = t >> 5, g = lane >> 2, q = lane & 3;
  const int cw = warp % S::kColGroups, rw = warp / S::kColGroups;
  const int wc = t & 7, wr = t >> 3, wswz = (wr & 1) << 2;  // copy role: chunk wc of rows wr + kRowStep i

  // Queues the copies of stage s into buffer s % ST. k_end is a multiple of 32: a stage's second
  // 32-wide chunk may be past it (not copied, not multiplied).
  auto issue = [&](int s) {
    const int k0 = k_begin + s * kKt;
    unsigned char* b = sb + (s % ST) * S::kBStage;
    if (k0 + 32 * (wc >> 2) < k_end) {
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const int row = wr + S::kRowStep * i, col = col0 + row;
        const bool ok = col < n;  // columns past the end: zeros (their outputs are not stored)
        CpAsync16(b + row * kRowBytes + ((wc ^ wswz) << 4),
                  w + static_cast<int64_t>(ok ? col : 0) * k + k0 + 8 * wc, ok);
      }
    }
    float* a = sa + (s % ST) * S::kRows * kAStride;
#pragma unroll
    for (int i = 0; i < S::kACopies; ++i) {
      const int c = t + S::kThreads * i, row = c / (kKt / 4), ch = c % (kKt / 4);
      const bool ok = row < m;  // rows past m: zeros
      if (k0 + 4 * ch < k_end)
        CpAsync16(a + row * kAStride + 4 * ch, x + static_cast<int64_t>(ok ? row : 0) * k + k0 + 4 * ch, ok);
    }
  };

  float acc[2][S::kTiles][4];
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int j = 0; j < S::kTiles; ++j) acc[mt][j][0] = acc[mt][j][1] = acc[mt][j][2] = acc[mt][j][3] = 0.0f;

  for (int s = 0; s < ST - 1; ++s) {
    if (s < stages) issue(s);
    CpAsyncCommit();
  }
  for (int s = 0; s < stages; ++s) {
    CpAsyncWait<ST - 2>();  // this thread's copies of stage s have landed
    __syncthreads();        // everyone's have, and everyone is done with stage s - 1's buffer
    if (s + ST - 1 < stages) issue(s + ST - 1);
    CpAsyncCommit();

    const int k0 = k_begin + s * kKt;
    const unsigned char* b = sb + (s % ST) * S::kBStage + (cw * 8 * S::kTiles + g) * kRowBytes;
    const float* a = sa + (s % ST) * S::kRows * kAStride + (32 * rw + g) * kAStride + 8 * q;
#pragma unroll
    for (int kk = 0; kk < kKt / 32; ++kk) {
      if (k0 + 32 * kk >= k_end) break;  // block-uniform
      const int chunk = (4 * kk + q) ^ ((g & 1) << 2);  // rows 8j + g: the swizzle bit is g's
      uint4 bw[S::kTiles];
#pragma unroll
      for (int j = 0; j < S::kTiles; ++j)
        bw[j] = *reinterpret_cast<const uint4*>(b + 8 * j * kRowBytes + (chunk << 4));
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
        if (32 * rw + 16 * mt >= m) continue;  // warp-uniform: the m16 tile is wholly past m
        const float* a0 = a + 16 * mt * kAStride + 32 * kk;
        const float* a1 = a0 + 8 * kAStride;
        uint32_t hi[2][4], lo[2][4];
        SplitA(*reinterpret_cast<const float4*>(a0), *reinterpret_cast<const float4*>(a0 + 4),
               *reinterpret_cast<const float4*>(a1), *reinterpret_cast<const float4*>(a1 + 4), hi, lo);
#pragma unroll
        for (int j = 0; j < S::kTiles; ++j) MmaChunk(acc[mt][j], hi, lo, bw[j], jobs.exact);
      }
    }
  }
  CpAsyncWait<0>();  // only empty groups can be left, but leave no copy behind
  __syncthreads();   // the stage buffers are free: the partial tile goes there

#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int j = 0; j < S::kTiles; ++j) {
      const int row = 32 * rw + 16 * mt + g, col = cw * 8 * S::kTiles + 8 * j + 2 * q;
      *reinterpret_cast<float2*>(red + row * S::kRedStride + col) = make_float2(acc[mt][j][0], acc[mt][j][1]);
      *reinterpret_cast<float2*>(red + (row + 8) * S::kRedStride + col) = make_float2(acc[mt][j][2], acc[mt][j][3]);
    }
  SkinnyClusterSumStore<S::kCols, S::kRedStride, S::kThreads>(red, blk, accumulate);
}

// The kernels in use: TESSERA_CUDA_SKINNY=v2 (read once) keeps every row count on v2 (it is what
// builds without sm_90a code run, and the fallback where v3 cannot make a TMA tensor map: the GPU check
// runs the dense-product tests under it); by default v3 takes row tiles of more than 32 rows where
// this build has sm_90a code, and v2 the rest.
bool SkinnyV3InUse() {
  static const bool v3 = SkinnyWgmmaBuilt() && SwitchValue("TESSERA_CUDA_SKINNY") != "v2";
  return v3;
}

template <int RG, int W, int ST>
void LaunchSkinnyV2(const float* x, int64_t m, int64_t k, SkinnyJobs jobs, bool accumulate, cudaStream_t s) {
  using S = SkinnyShape<RG, W, ST>;
  LaunchSkinnyGrid(SkinnyGemmV2Kernel<RG, W, ST>, S::kSmem, S::kThreads, S::kRows, S::kCols, kKt, kSkinnyMaxSplits,
                   /*programmatic=*/false, x, m, k, jobs, accumulate, s);
}

// v3 from kSkinnyWgmmaMinRows rows where it is in use (v3's tile is 64 rows whatever m is: at 9..32 rows v2 is faster
// for most of the models' products; tenth session, `git show 5cf9cf6:docs/PERFORMANCE.md`). v2: m <= 32: 32 x 128
// tiles, 2 blocks an SM. More rows: 64 x 128 tiles, or 64 x 256 (1 block an SM, half the activation reads from L2 per
// weight byte) when the tiles alone fill the SMs (lm_head, or many row tiles).
constexpr int64_t kSkinnyWgmmaMinRows = 33;
bool WgmmaTakes(int64_t m) { return SkinnyV3InUse() && m >= kSkinnyWgmmaMinRows; }
void LaunchSkinnyRows(const float* x, int64_t m, int64_t k, const SkinnyJobs& jobs, bool accumulate,
                      uint16_t* x_split, cudaStream_t s) {
  if (WgmmaTakes(m) && LaunchSkinnyWgmma(x, m, k, jobs, accumulate, x_split, s)) return;
  if (m <= 32) {
    LaunchSkinnyV2<1, 4, 4>(x, m, k, jobs, accumulate, s);
    return;
  }
  const auto wide = SkinnyGemmV2Kernel<2, 8, 4>;
  const Residency res = KernelResidency(wide, SkinnyShape<2, 8, 4>::kSmem, SkinnyShape<2, 8, 4>::kThreads);
  int64_t wide_tiles = 0;
  for (int j = 0; j < jobs.count; ++j) wide_tiles += (jobs.n[j] + 255) / 256;
  if (wide_tiles * ((m + 63) / 64) >= res.sms)
    LaunchSkinnyV2<2, 8, 4>(x, m, k, jobs, accumulate, s);
  else
    LaunchSkinnyV2<2, 4, 3>(x, m, k, jobs, accumulate, s);
}

}  // namespace

int64_t SkinnySplitBytes(int64_t m, int64_t k, const int64_t* n, int count) {
  return WgmmaTakes(m) && m <= kSkinnyGemmRowLimit && SkinnyWgmmaPreSplits(n, count) ? 4 * m * k : 0;
}

bool SkinnyGemm(const float* x, int64_t m, int64_t k, const uint16_t* w, int64_t n, float* y, bool accumulate,
                uint16_t* x_split, bool exact, cudaStream_t s) {
  if (!SkinnyGemmFits(x, m, k, w)) return false;
  SkinnyJobs jobs{};
  jobs.w[0] = w, jobs.y[0] = y, jobs.n[0] = static_cast<int>(n), jobs.count = 1;
  jobs.exact = exact;
  LaunchSkinnyRows(x, m, k, jobs, accumulate, x_split, s);
  return true;
}

bool SkinnyGemmMulti(const float* x, int64_t m, int64_t k, const uint16_t* w0, int64_t n0, float* y0,
                     const uint16_t* w1, int64_t n1, float* y1, const uint16_t* w2, int64_t n2, float* y2,
                     const uint16_t* w3, int64_t n3, float* y3, uint16_t* x_split, bool exact, cudaStream_t s) {
  const uint16_t* w[kSkinnyMaxJobs] = {w0, w1, w2, w3};
  float* y[kSkinnyMaxJobs] = {y0, y1, y2, y3};
  const int64_t n[kSkinnyMaxJobs] = {n0, n1, n2, n3};
  SkinnyJobs jobs{};
  jobs.exact = exact;
  for (int j = 0; j < kSkinnyMaxJobs; ++j) {
    if (!w[j] || n[j] <= 0) continue;
    if (!SkinnyGemmFits(x, m, k, w[j])) return false;
    jobs.w[jobs.count] = w[j], jobs.y[jobs.count] = y[j], jobs.n[jobs.count] = static_cast<int>(n[j]);
    ++jobs.count;
  }
  if (jobs.count > 0) LaunchSkinnyRows(x, m, k, jobs, false, x_split, s);
  return true;
}

}  // namespace tessera::cuda
