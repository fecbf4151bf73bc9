// tessera cuda backend: the fused few-token MoE expert path (per (row, expert) pair, used for batch-1
// decode and other steps of <= 16 pairs): gate/up + SiLU, down per slot, and the slot sum. f32
// activations, bf16 weights, f32 accumulation. See cuda_kernels.h.
//
// A decode step streams 8 experts' matrices once (Qwen3-30B-A3B: 50 MB gate/up, 25 MB down a layer),
// so these kernels are HBM-bound. Gate/up is written like the tiled GEMV in cuda_kernels.cu: every
// lane issues all 16-byte weight loads of a step (16 per lane) before using any of them, the weights
// bypass L1 (read once), the f32 activations come through L1 (read by every warp of a pair), and the
// expert-id -> pointer chain is paid once per warp (ncu on the H200: 16.8 us a layer, was 20.0). Down
// is written the same way (8 columns a warp: ncu 10.5 -> 9.2 us a layer for Qwen3-30B-A3B, 8.6 -> 7.8
// for Qwen3.5-35B-A3B). The v1 kernels (a warp per column, one 16-byte load in flight) stay for
// the shapes the tiled ones do not take (unaligned rows or pointers, top-k > 32); a pipelined
// down that also summed the slots measured 19.3 us and was removed. MoeGateUpRouted is gate/up with
// the routing done by its own warps (no routing kernel before it).
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "backend/cuda/cuda_device_util.cuh"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuda_launch.cuh"
#include "backend/cuda/cuda_moe_route.cuh"

namespace tessera::cuda {

namespace {

constexpr int kThreads = 256;

// --- v1 (unaligned shapes, top-k > 32) --------------------------------------------------------------

// Dot of an f32 row and a bf16 row of length k, summed over the warp (every lane gets it).
__device__ __forceinline__ float WarpDotBf16(const float* x, const uint16_t* w, int64_t k, bool vec) {
  const int lane = threadIdx.x & 31;
  float acc = 0;
  if (vec) {
    for (int64_t c = lane * 8; c < k; c += 256) {
      const uint4 raw = *reinterpret_cast<const uint4*>(w + c);
      const float4 a = *reinterpret_cast<const float4*>(x + c);
      const float4 b = *reinterpret_cast<const float4*>(x + c + 4);
      acc += __uint_as_float(raw.x << 16) * a.x + __uint_as_float(raw.x & 0xffff0000u) * a.y +
             __uint_as_float(raw.y << 16) * a.z + __uint_as_float(raw.y & 0xffff0000u) * a.w +
             __uint_as_float(raw.z << 16) * b.x + __uint_as_float(raw.z & 0xffff0000u) * b.y +
             __uint_as_float(raw.w << 16) * b.z + __uint_as_float(raw.w & 0xffff0000u) * b.w;
    }
  } else {
    for (int64_t c = lane; c < k; c += 32) acc += Bf16(w[c]) * x[c];
  }
  return WarpSum(acc);
}

__global__ void MoeGateUpKernel(const float* x, int64_t hidden, const int32_t* idx, int64_t k,
                                const uint16_t* const* ptrs, int64_t E, int64_t inter, float* act, bool vec,
                                bool gelu) {
  GridDependencyWait();
  const int64_t slot = blockIdx.y;
  const int64_t col = blockIdx.x * static_cast<int64_t>(blockDim.x >> 5) + (threadIdx.x >> 5);
  if (col >= inter) return;
  const int64_t e = idx[slot];
  const float* xr = x + (slot / k) * hidden;
  const float g = WarpDotBf16(xr, ptrs[e] + col * hidden, hidden, vec);
  const float u = WarpDotBf16(xr, ptrs[E + e] + col * hidden, hidden, vec);
  if ((threadIdx.x & 31) == 0) act[slot * inter + col] = GatedActF(g, u, gelu);
}

__global__ void MoeDownKernel(const float* act, int64_t inter, const int32_t* idx, const float* weights,
                              const uint16_t* const* ptrs, int64_t E, int64_t hidden, float* slot_out, bool vec) {
  GridDependencyWait();
  const int64_t slot = blockIdx.y;
  const int64_t col = blockIdx.x * static_cast<int64_t>(blockDim.x >> 5) + (threadIdx.x >> 5);
  if (col >= hidden) return;
  const int64_t e = idx[slot];
  const float d = WarpDotBf16(act + slot * inter, ptrs[2 * E + e] + col * inter, inter, vec);
  if ((threadIdx.x & 31) == 0) slot_out[slot * hidden + col] = d * weights[slot];
}

__global__ void MoeSumSlotsKernel(const float* slot_out, int64_t rows, int64_t k, int64_t hidden, float* out) {
  GridDependencyWait();
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= rows * hidden) return;
  const int64_t r = i / hidden, c = i % hidden;
  float s = 0;
#pragma unroll 8  // the k loads are independent: issue them together, sum in slot order
  for (int64_t j = 0; j < k; ++j) s += slot_out[(r * k + j) * hidden + c];
  out[i] = s;
}

// --- v2 (16-byte aligned weights and activations, row lengths % 8 == 0) ----------------------------

constexpr int kWarps = 4;   // small blocks: many of them per SM, so the last wave is short
constexpr int kLoads = 16;  // 16-byte weight loads in flight per lane per step (8 KiB a warp)
// Gate/up columns per warp: 4 columns = 8 weight rows x 2 segments a step.
constexpr int kGateUpCols = 4;
// Resident blocks an SM must hold (caps registers): 3 x 132 SMs = 396 >= the 384 gate/up blocks of
// 8 pairs x 768 columns, so batch-1 decode runs in one wave (no tail of a few SMs) with 12 warps x
// 8 KiB in flight per SM.
constexpr int kGateUpBlocksPerSm = 3;


// Gate/up: a warp owns C adjacent columns of one pair and computes both the gate and the up dot of
// each (2C weight rows sharing the pair's x). hidden is walked in segments of 256 (a lane's 8 bf16
// per row), U segments a step, so a lane has U * 2C = kLoads loads in flight; x is loaded once per
// segment for all 2C rows. Warps are numbered pair-major, so a block's warps share a pair (one idx
// / pointer fetch through L1) and its x row.
// kRouteV > 0 (MoeGateUpRouted): no routing kernel before; each warp routes its pair's row from the
// router logits itself (RouteRowWarp<kRouteV>, as the routing kernel does: every warp of a row picks
// the same experts) and the row's first warp writes idx and weights for the kernels after.
template <int C, int kRouteV>
__global__ void __launch_bounds__(kWarps * 32, kGateUpBlocksPerSm)
    MoeGateUpTiledKernel(const float* __restrict__ x, int hidden, int32_t* __restrict__ idx, int k,
                         const uint16_t* const* __restrict__ ptrs, int E, int inter, int pairs,
                         float* __restrict__ act, const float* __restrict__ logits, bool renormalize,
                         float* __restrict__ weights, bool gelu) {
  GridDependencyWait();
  constexpr int R = 2 * C, U = kLoads / R;
  const int lane = threadIdx.x & 31;
  const int groups = (inter + C - 1) / C;
  const int gw = blockIdx.x * kWarps + (threadIdx.x >> 5);
  const int pair = gw / groups;
  if (pair >= pairs) return;  // whole warps only: the shuffles below see 32 lanes
  const int col0 = (gw - pair * groups) * C;
  int e;
  if constexpr (kRouteV > 0) {
    const int row = pair / k, slot = pair - row * k;
    int expert;
    float weight;
    RouteRowWarp<kRouteV>(logits + static_cast<int64_t>(row) * E, E, k, renormalize, &expert, &weight);
    e = __shfl_sync(0xffffffffu, expert, slot);
    if (slot == 0 && col0 == 0 && lane < k) idx[row * k + lane] = expert, weights[row * k + lane] = weight;
  } else {
    e = __ldg(idx + pair);
  }
  const uint16_t* gate = ptrs[e];
  const uint16_t* up = ptrs[E + e];
  const uint16_t* wr[R];
  bool live[C];
#pragma unroll
  for (int c = 0; c < C; ++c) {
    live[c] = col0 + c < inter;
    const int64_t off = static_cast<int64_t>(live[c] ? col0 + c : 0) * hidden + lane * 8;
    wr[c] = gate + off;
    wr[C + c] = up + off;
  }
  const float* xl = x + static_cast<int64_t>(pair / k) * hidden + lane * 8;
  float acc[R];
#pragma unroll
  for (int i = 0; i < R; ++i) acc[i] = 0.0f;

  const int segs = (hidden + 255) / 256;
  for (int seg0 = 0; seg0 < segs; seg0 += U) {
    uint4 wv[U][R];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int seg = seg0 + u;
      const bool ok = seg < segs && seg * 256 + lane * 8 < hidden;
#pragma unroll
      for (int i = 0; i < R; ++i)
        wv[u][i] = ok && live[i % C] ? LoadStream16(wr[i] + seg * 256) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int seg = seg0 + u;
      if (seg >= segs || seg * 256 + lane * 8 >= hidden) continue;
      const float4* xp = reinterpret_cast<const float4*>(xl + seg * 256);
      const float4 a = __ldg(xp), b = __ldg(xp + 1);
#pragma unroll
      for (int i = 0; i < R; ++i) acc[i] = DotBf16x8(wv[u][i], a, b, acc[i]);
    }
  }
#pragma unroll
  for (int i = 0; i < R; ++i) acc[i] = WarpSum(acc[i]);
#pragma unroll
  for (int c = 0; c < C; ++c)  // lane c writes column c: C stores issued in parallel
    if (lane == c && live[c]) act[static_cast<int64_t>(pair) * inter + col0 + c] = GatedActF(acc[c], acc[C + c], gelu);
}

// Down: a warp owns C adjacent output columns of one pair (C weight rows of its expert sharing the
// pair's activation row); inter is walked in segments of 256, U = kLoads / C a step, so a lane keeps
// kLoads 16-byte loads in flight (the v1 kernel: one, three dependent round trips for inter 768).
// Lane c writes column c, scaled by the pair's routing weight. Same warp numbering as gate/up.
// 8 columns: batch-1's 8 pairs x 2048 columns are 512 blocks, one wave at 4 blocks an SM (ncu,
// Qwen3-30B-A3B's inter 768 in two steps: 9.2 us; 4 columns, 1,024 blocks in one step each: 10.0).
constexpr int kDownCols = 8;
constexpr int kDownBlocksPerSm = 4;

template <int C>
__global__ void __launch_bounds__(kWarps * 32, kDownBlocksPerSm)
    MoeDownTiledKernel(const float* __restrict__ act, int inter, const int32_t* __restrict__ idx,
                       const float* __restrict__ weights, const uint16_t* const* __restrict__ ptrs, int E, int hidden,
                       int pairs, float* __restrict__ slot_out) {
  GridDependencyWait();
  constexpr int U = kLoads / C;
  const int lane = threadIdx.x & 31;
  const int groups = (hidden + C - 1) / C;
  const int gw = blockIdx.x * kWarps + (threadIdx.x >> 5);
  const int pair = gw / groups;
  if (pair >= pairs) return;  // whole warps only: the shuffles below see 32 lanes
  const int col0 = (gw - pair * groups) * C;
  const uint16_t* down = ptrs[2 * E + __ldg(idx + pair)];
  const uint16_t* wr[C];
  bool live[C];
#pragma unroll
  for (int c = 0; c < C; ++c) {
    live[c] = col0 + c < hidden;
    wr[c] = down + static_cast<int64_t>(live[c] ? col0 + c : 0) * inter + lane * 8;
  }
  const float* al = act + static_cast<int64_t>(pair) * inter + lane * 8;
  float acc[C];
#pragma unroll
  for (int c = 0; c < C; ++c) acc[c] = 0.0f;
  const int segs = (inter + 255) / 256;
  for (int seg0 = 0; seg0 < segs; seg0 += U) {
    uint4 wv[U][C];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int seg = seg0 + u;
      const bool ok = seg < segs && seg * 256 + lane * 8 < inter;
#pragma unroll
      for (int c = 0; c < C; ++c)
        wv[u][c] = ok && live[c] ? LoadStream16(wr[c] + seg * 256) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int seg = seg0 + u;
      if (seg >= segs || seg * 256 + lane * 8 >= inter) continue;
      const float4* ap = reinterpret_cast<const float4*>(al + seg * 256);
      const float4 a = __ldg(ap), b = __ldg(ap + 1);
#pragma unroll
      for (int c = 0; c < C; ++c) acc[c] = DotBf16x8(wv[u][c], a, b, acc[c]);
    }
  }
#pragma unroll
  for (int c = 0; c < C; ++c) acc[c] = WarpSum(acc[c]);
  const float scale = __ldg(weights + pair);
#pragma unroll
  for (int c = 0; c < C; ++c)
    if (lane == c && live[c]) slot_out[static_cast<int64_t>(pair) * hidden + col0 + c] = acc[c] * scale;
}

// v2 needs 16-byte rows (length % 8) and pointers, k <= 32 (a lane per slot when routing) and
// int-sized offsets (the few-token path: <= 16 pairs here).
bool UseV2(bool aligned, int64_t len, const float* a, int64_t k, int64_t slots, int64_t width, int64_t other) {
  return aligned && len % 8 == 0 && Aligned16(a) && k >= 1 && k <= 32 && slots <= 1024 &&
         slots * width < (int64_t{1} << 31) && slots * other < (int64_t{1} << 31) && width * other < (int64_t{1} << 31);
}

}  // namespace

void MoeGateUp(const float* x, int64_t hidden, const int32_t* idx, int64_t slots, int64_t k,
               const uint16_t* const* ptrs, int64_t num_experts, int64_t inter, bool ptrs_aligned, float* act,
               bool gelu, cudaStream_t s) {
  if (slots <= 0) return;
  if (UseV2(ptrs_aligned, hidden, x, k, slots, hidden, inter) && num_experts < (int64_t{1} << 30)) {
    constexpr int C = kGateUpCols;
    const int64_t warps = slots * ((inter + C - 1) / C);
    LaunchKernel(MoeGateUpTiledKernel<C, 0>, static_cast<unsigned>((warps + kWarps - 1) / kWarps), kWarps * 32, 0,
                 s)(x, static_cast<int>(hidden), const_cast<int32_t*>(idx), static_cast<int>(k), ptrs,
                    static_cast<int>(num_experts), static_cast<int>(inter), static_cast<int>(slots), act, nullptr,
                    false, nullptr, gelu);
    return;
  }
  const dim3 grid(static_cast<unsigned>((inter + 7) / 8), static_cast<unsigned>(slots));
  LaunchKernel(MoeGateUpKernel, grid, 256, 0, s)(x, hidden, idx, k, ptrs, num_experts, inter, act,
                                                 ptrs_aligned && hidden % 8 == 0 && Aligned16(x), gelu);
}

bool MoeGateUpRoutedFits(const float* x, int64_t hidden, int64_t rows, int64_t k, int64_t num_experts, int64_t inter,
                         bool ptrs_aligned) {
  return UseV2(ptrs_aligned, hidden, x, k, rows * k, hidden, inter) && k <= num_experts && num_experts <= 512;
}

void MoeGateUpRouted(const float* x, int64_t hidden, const float* logits, int64_t rows, int64_t k, bool renormalize,
                     int32_t* idx, float* weights, const uint16_t* const* ptrs, int64_t num_experts, int64_t inter,
                     float* act, cudaStream_t s) {
  if (rows <= 0) return;
  constexpr int C = kGateUpCols;
  const int64_t slots = rows * k, warps = slots * ((inter + C - 1) / C);
  const auto kernel = num_experts <= 64    ? MoeGateUpTiledKernel<C, 2>
                      : num_experts <= 128 ? MoeGateUpTiledKernel<C, 4>
                      : num_experts <= 256 ? MoeGateUpTiledKernel<C, 8>
                                           : MoeGateUpTiledKernel<C, 16>;
  LaunchKernel(kernel, static_cast<unsigned>((warps + kWarps - 1) / kWarps), kWarps * 32, 0, s)(
      x, static_cast<int>(hidden), idx, static_cast<int>(k), ptrs, static_cast<int>(num_experts),
      static_cast<int>(inter), static_cast<int>(slots), act, logits, renormalize, weights, /*gelu=*/false);
}

void MoeDown(const float* act, int64_t inter, const int32_t* idx, const float* weights, int64_t slots,
             const uint16_t* const* ptrs, int64_t num_experts, int64_t hidden, bool ptrs_aligned, float* slot_out,
             cudaStream_t s) {
  if (slots <= 0) return;
  if (UseV2(ptrs_aligned, inter, act, /*k=*/1, slots, inter, hidden) && num_experts < (int64_t{1} << 30)) {
    constexpr int C = kDownCols;
    const int64_t warps = slots * ((hidden + C - 1) / C);
    LaunchKernel(MoeDownTiledKernel<C>, static_cast<unsigned>((warps + kWarps - 1) / kWarps), kWarps * 32, 0, s)(
        act, static_cast<int>(inter), idx, weights, ptrs, static_cast<int>(num_experts), static_cast<int>(hidden),
        static_cast<int>(slots), slot_out);
    return;
  }
  // The one-load-a-lane kernel (unaligned shapes): a pipelined variant that
  // also summed the slots measured slower on the H200 (ncu: 19.3 us a layer against 11.2 + 2.9 us for
  // this kernel and MoeSumSlots).
  const dim3 grid(static_cast<unsigned>((hidden + 7) / 8), static_cast<unsigned>(slots));
  LaunchKernel(MoeDownKernel, grid, 256, 0, s)(act, inter, idx, weights, ptrs, num_experts, hidden, slot_out,
                                     ptrs_aligned && inter % 8 == 0 && Aligned16(act));
}

void MoeSumSlots(const float* slot_out, int64_t rows, int64_t k, int64_t hidden, float* out, cudaStream_t s) {
  if (rows * hidden > 0)
    LaunchKernel(MoeSumSlotsKernel, static_cast<unsigned>((rows * hidden + kThreads - 1) / kThreads), kThreads, 0, s)(
        slot_out, rows, k, hidden, out);
}

}  // namespace tessera::cuda
