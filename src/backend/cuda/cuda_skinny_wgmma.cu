// tessera cuda backend: the few-row GEMM on Hopper's warpgroup MMA (v3, sm_90a builds only;
// TESSERA_CUDA_SKINNY=v3): y[m, n] (+)= x[m, k] w[n, k]^T in row tiles of 64 (decode batches of 9..64 sequences,
// diffusion blocks, small products of up to 256 rows). Why: with x split hi + lo, 64 rows are 128
// bf16 rows of tensor work per weight byte, more than the mma.sync kernel (v2, cuda_skinny_gemm.cu)
// issues while the weights stream in (ncu: 0.3 instructions a cycle, tensor pipe ~30% busy, 0.6-0.9
// TB/s at 64 rows); a wgmma takes its weight tile straight from shared memory, so the loop issues
// little besides the activation split and the copies.
//
// Block = one warpgroup (4 warps), tile = 64 rows x 128 columns, k split over a thread-block cluster
// for narrow outputs and summed in rank order as v2 does (SkinnyClusterSumStore). A stage = 64 of k:
// the weight tile in wgmma's canonical no-swizzle K-major layout (core matrices of 8 columns x 16
// bytes of k; core (column block cb, k chunk kc) at (8 cb + kc) x 128 bytes, its row r at 16 r: a
// quarter-warp's cp.async writes fill 128 contiguous bytes) and the tile's 64 activation rows (f32,
// rows padded by 8 floats: the fragment reads of a half-warp hit distinct banks). ST - 2 stages load
// while one is multiplied and the wgmmas of the one before may still run. Warp w splits rows
// 16 w .. + 16 of each 16-wide k step into hi + lo A fragments in registers (mma.sync's m16k16 layout,
// k in its true order: the weights come in memory order), then issues two m64n128k16 wgmmas per k
// step (hi, lo) into the same accumulators. The weights of the first stages are requested before
// the grid dependency wait (they are never written by a kernel): with PDL, that latency hides behind
// the previous kernel's tail.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/cuda_launch.cuh"
#include "backend/cuda/cuda_mma_util.cuh"
#include "backend/cuda/cuda_skinny_gemm.cuh"

namespace tessera::cuda {

namespace {

constexpr int kWgRows = 64, kWgCols = 128, kWgThreads = 128;
constexpr int kWgKt = 64;                            // k per stage: four wgmma k steps
constexpr int kWgStages = 6;                         // 204 KiB of shared memory: one block an SM
constexpr int kWgAStride = kWgKt + 8;                // floats per activation row in shared memory
constexpr int kWgBStage = kWgCols * kWgKt * 2;       // bytes
constexpr int kWgAStage = kWgRows * kWgAStride * 4;  // bytes
constexpr int kWgRedStride = kWgCols + 8;            // floats per row of the partial tile
constexpr size_t kWgPipe = static_cast<size_t>(kWgStages) * (kWgBStage + kWgAStage);
constexpr size_t kWgRed = static_cast<size_t>(kWgRows) * kWgRedStride * 4;
constexpr size_t kWgSmem = kWgPipe > kWgRed ? kWgPipe : kWgRed;
constexpr int kWgAccs = kWgRows * kWgCols / kWgThreads;  // f32 accumulators a thread
static_assert(kWgStages >= 3, "one stage multiplied, one possibly still read, one or more loading");

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// Shared-memory matrix descriptor of a K-major no-swizzle operand: start address, the next core
// matrix along k 128 bytes on (leading byte offset), the next 8 columns 1024 bytes on (stride byte
// offset), base offset 0, no swizzle; the three fields in 16-byte units.
__device__ __forceinline__ uint64_t WgmmaDescriptor(uint32_t smem_addr) {
  return static_cast<uint64_t>((smem_addr & 0x3FFFF) >> 4) | (static_cast<uint64_t>(128 >> 4) << 16) |
         (static_cast<uint64_t>(1024 >> 4) << 32);
}

__device__ __forceinline__ void WgmmaFence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void WgmmaCommit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void WgmmaWait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// cp.async writes are generic-proxy writes; the wgmmas read shared memory through the async proxy.
__device__ __forceinline__ void FenceProxyAsync() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// d[64 x 128] += a[64 x 16] (registers, this warp's 16 rows) b[16 x 128] (shared memory, K-major).
__device__ __forceinline__ void Wgmma64x128(float (&d)[kWgAccs], const uint32_t (&a)[4], uint64_t b) {
  // scale-d is a predicate (true: D += A B); the A and B scales +1; B not transposed (K-major).
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, "
      "%22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, "
      "%42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, "
      "%62, %63 "
      "}, {%64, %65, %66, %67}, %68, p, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),
        "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
        "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]),
        "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]),
        "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),
        "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
}
#endif

__global__ void __launch_bounds__(kWgThreads, 1)
    SkinnyGemmWgmmaKernel(const float* x, int m, int k, const SkinnyJobs jobs, bool accumulate, int k_chunk,
                          int row_tiles) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(128) unsigned char smem[];
  unsigned char* sb = smem;                                            // [ST][16 cb][8 kc][8 r][16 B]
  float* sa = reinterpret_cast<float*>(smem + kWgStages * kWgBStage);  // [ST][64][kWgAStride]
  float* red = reinterpret_cast<float*>(smem);                         // [64][kWgRedStride], after the loop

  namespace cg = cooperative_groups;
  const cg::cluster_group cluster = cg::this_cluster();
  const SkinnyBlock blk =
      SkinnyBlockOf<kWgRows, kWgCols>(x, m, k, jobs, k_chunk, row_tiles, static_cast<int>(cluster.num_blocks()),
                                      static_cast<int>(cluster.block_rank()));
  const int k_begin = blk.k_begin, k_end = blk.k_end;
  const int stages = k_end > k_begin ? (k_end - k_begin + kWgKt - 1) / kWgKt : 0;
  const int t = threadIdx.x, warp = t >> 5, g = (t & 31) >> 2, q = t & 3;

  // The copies of stage s into buffer s % ST; chunks of k past k_end (a multiple of 32) are neither
  // copied nor multiplied. Weights: chunk c = t + 128 i is row r = c & 7 of core (cb = c >> 6,
  // kc = (c >> 3) & 7); columns past n read column 0 as zeros (their outputs are not stored).
  auto issue_w = [&](int s) {
    const int k0 = k_begin + s * kWgKt;
    unsigned char* b = sb + (s % kWgStages) * kWgBStage;
#pragma unroll
    for (int i = 0; i < kWgCols * 8 / kWgThreads; ++i) {
      const int c = t + kWgThreads * i, r = c & 7, kc = (c >> 3) & 7, cb = c >> 6;
      const int col = blk.col0 + 8 * cb + r;
      const bool ok = col < blk.n;
      if (k0 + 8 * kc < k_end)
        CpAsync16(b + (8 * cb + kc) * 128 + 16 * r, blk.w + static_cast<int64_t>(ok ? col : 0) * k + k0 + 8 * kc, ok);
    }
  };
  // Activations: chunk c = 4 floats ch = c & 15 of row c >> 4; rows past m are zeros.
  auto issue_x = [&](int s) {
    const int k0 = k_begin + s * kWgKt;
    float* a = sa + (s % kWgStages) * kWgRows * kWgAStride;
#pragma unroll
    for (int i = 0; i < kWgRows * (kWgKt / 4) / kWgThreads; ++i) {
      const int c = t + kWgThreads * i, row = c >> 4, ch = c & 15;
      const bool ok = row < blk.m;
      if (k0 + 4 * ch < k_end)
        CpAsync16(a + row * kWgAStride + 4 * ch, blk.x + static_cast<int64_t>(ok ? row : 0) * k + k0 + 4 * ch, ok);
    }
  };

  float acc[kWgAccs];
#pragma unroll
  for (int i = 0; i < kWgAccs; ++i) acc[i] = 0.0f;

  for (int s = 0; s < kWgStages - 2 && s < stages; ++s) issue_w(s);
  GridDependencyWait();  // x (and y) may be the previous kernel's output; the weights are not
  for (int s = 0; s < kWgStages - 2; ++s) {
    if (s < stages) issue_x(s);
    CpAsyncCommit();
  }

  // Stage s, its A fragments in hi / lo (a register set the wgmmas of stage s - 2 read: complete,
  // as every warp waited for all but the last group at the end of stage s - 1).
  auto stage = [&](int s, uint32_t(&hi)[4][4], uint32_t(&lo)[4][4]) {
    CpAsyncWait<kWgStages - 3>();  // this thread's copies of stage s have landed
    FenceProxyAsync();
    __syncthreads();  // everyone's have; every warp is past stage s - 1's wait (stage s - 2 read)
    if (s + kWgStages - 2 < stages) {
      issue_w(s + kWgStages - 2);  // into stage s - 2's buffer
      issue_x(s + kWgStages - 2);
    }
    CpAsyncCommit();
    const int steps = min(kWgKt, k_end - (k_begin + s * kWgKt)) / 16;  // block-uniform
    const float* a = sa + (s % kWgStages) * kWgRows * kWgAStride + (16 * warp + g) * kWgAStride + 2 * q;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if (j >= steps) break;
      const float2 r0 = *reinterpret_cast<const float2*>(a + 16 * j);
      const float2 r0k = *reinterpret_cast<const float2*>(a + 16 * j + 8);
      const float2 r1 = *reinterpret_cast<const float2*>(a + 8 * kWgAStride + 16 * j);
      const float2 r1k = *reinterpret_cast<const float2*>(a + 8 * kWgAStride + 16 * j + 8);
      SplitPair(r0.x, r0.y, hi[j][0], lo[j][0]);
      SplitPair(r1.x, r1.y, hi[j][1], lo[j][1]);
      SplitPair(r0k.x, r0k.y, hi[j][2], lo[j][2]);
      SplitPair(r1k.x, r1k.y, hi[j][3], lo[j][3]);
    }
    WgmmaFence();  // the A registers (and, first, the zeroed accumulators) before the wgmmas read them
    const auto b = static_cast<uint32_t>(__cvta_generic_to_shared(sb + (s % kWgStages) * kWgBStage));
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if (j >= steps) break;
      const uint64_t desc = WgmmaDescriptor(b + 256 * j);  // k chunks 2j, 2j + 1
      Wgmma64x128(acc, hi[j], desc);
      Wgmma64x128(acc, lo[j], desc);
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
  WgmmaWait<0>();
#pragma unroll
  for (int i = 0; i < kWgAccs; ++i) asm volatile("" : "+f"(acc[i])::"memory");  // read only after the wait
  CpAsyncWait<0>();  // only empty groups can be left, but leave no copy behind
  __syncthreads();   // the stage buffers are free: the partial tile goes there

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

void LaunchSkinnyWgmma(const float* x, int64_t m, int64_t k, SkinnyJobs jobs, bool accumulate, cudaStream_t s) {
  LaunchSkinnyGrid(SkinnyGemmWgmmaKernel, kWgSmem, kWgThreads, kWgRows, kWgCols, kWgKt, /*programmatic=*/true, x, m, k,
                   jobs, accumulate, s);
}

}  // namespace tessera::cuda
