// tessera cuda backend: the MoE experts of prompt chunks (tens of thousands of (row, expert) pairs)
// as a grouped GEMM on tensor cores. Why a kernel of its own: the pipelined kernels of
// cuda_moe_grouped.cu cut an expert's rows into units of 16, and each unit streams the expert's
// whole weights, so a 4K prompt (~256 rows an expert) reads every expert 16 times a layer. Here a
// unit is 64 rows and a block multiplies it by a tile of 128 weight rows through shared memory, a
// quarter of those weight reads, each weight fragment serving two 16-row MMA tiles a warp.
//
// Block: 4 warps (2 x 2), tile = the unit's 64 activation rows x 128 weight rows, k in stages of 64
// (kStages cp.async stages: activations as f32, weights as bf16, ~99 KiB, two blocks an SM). Warp
// (wr, wc): activation rows 32 wr .. + 31 (two m16 tiles) x weight rows 64 wc .. + 63 (eight n8
// tiles). Gate/up: the weight rows of warp wc are 32 gate rows then the 32 up rows of the same output
// columns, so a lane holds gate and up of its outputs and writes silu(g) * u. Down: 128 output columns.
// The MMA scheme and its k permutation are cuda_mma_util.cuh's (hi + lo or bf16 activations by
// `exact`). Weight rows in shared memory: 16-byte chunk c of row R at c ^ (R & 7), so the eight rows
// of a quarter-warp's fragment loads hit distinct banks; activation rows padded by 4 floats.
// Grid: (column tiles, units bound); blocks past the grouping's unit count return at once. Every
// row's sums run in the same order whatever unit holds it (deterministic, no atomics).
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/cuda_device_util.cuh"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuda_launch.cuh"
#include "backend/cuda/cuda_mma_util.cuh"

namespace tessera::cuda {

namespace {

constexpr int kRows = kMoeTiledUnitRows;  // activation rows of a unit
constexpr int kCols = 128;                // weight rows of a block tile
constexpr int kKt = 64;                   // k per stage
constexpr int kStages = 3;
constexpr int kThreads = 128;
constexpr int kAStride = kKt + 4;                  // floats per staged activation row
constexpr int kRowBytes = 2 * kKt;                 // bytes per staged weight row (8 chunks of 16)
constexpr int kAStage = kRows * kAStride * 4;      // bytes
constexpr int kBStage = kCols * kRowBytes;         // bytes
constexpr int kSmem = kStages * (kAStage + kBStage);
constexpr int kCopies = kRows * (kKt / 4) / kThreads;  // 16-byte copies a thread a stage, each operand
static_assert(kCopies == 8 && kCols * (kRowBytes / 16) / kThreads == kCopies, "equal copy shares");

// kDown = false: in = x [tokens, K = hidden] gathered through order / top_k; weight row r of the
// tile: warp wc = r / 64's 32 gate rows then 32 up rows of output columns col0 + 32 wc ..; out =
// act[pos, n = inter]. kDown = true: in = act [pos, K = inter]; weight row r = down row col0 + r;
// out = slot_out[slot, n = hidden] scaled by the slot's routing weight.
template <bool kDown>
__global__ void __launch_bounds__(kThreads, 2)
    MoeTiledKernel(const float* in, int K, int n, int top_k, const int32_t* order, const int4* units,
                   const int32_t* num_units, const float* weights, const uint16_t* const* ptrs, int64_t E, float* out,
                   bool exact, bool gelu) {
  GridDependencyWait();
  if (static_cast<int32_t>(blockIdx.y) >= *num_units) return;
  const int4 unit = units[blockIdx.y];  // (expert, first sorted position, rows)
  const int col0 = static_cast<int>(blockIdx.x) * (kDown ? kCols : kCols / 2);
  extern __shared__ __align__(16) unsigned char smem[];
  unsigned char* sb = smem;                                         // [kStages][kCols][kRowBytes]
  float* sa = reinterpret_cast<float*>(smem + kStages * kBStage);   // [kStages][kRows][kAStride]
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5, g = lane >> 2, q = lane & 3;
  const int wr = warp >> 1, wc = warp & 1;

  // This thread's copy rows: activation rows (t >> 4) + 8 i at float4 t & 15, weight rows
  // (t >> 3) + 16 i at chunk t & 7. Null: past the unit's rows or the weight's columns (zero-filled).
  const float* arow[kCopies];
  const uint16_t* brow[kCopies];
#pragma unroll
  for (int i = 0; i < kCopies; ++i) {
    const int r = (t >> 4) + 8 * i;
    arow[i] = nullptr;
    if (r < unit.z) {
      const int64_t src = kDown ? unit.y + r : order[unit.y + r] / top_k;
      arow[i] = in + src * K;
    }
    const int w = (t >> 3) + 16 * i;
    int col;
    const uint16_t* base;
    if (kDown) {
      col = col0 + w;
      base = ptrs[2 * E + unit.x];
    } else {
      const int within = w & 63;
      col = col0 + 32 * (w >> 6) + (within & 31);
      base = ptrs[(within >= 32 ? E : 0) + unit.x];
    }
    brow[i] = col < n ? base + static_cast<int64_t>(col) * K : nullptr;
  }
  const int stages = (K + kKt - 1) / kKt;
  auto issue = [&](int s) {
    const int k0 = s * kKt;
    unsigned char* b = sb + (s % kStages) * kBStage;
    float* a = sa + (s % kStages) * (kAStage / 4);
#pragma unroll
    for (int i = 0; i < kCopies; ++i) {
      const int ca = t & 15, ka = k0 + 4 * ca;
      const bool oka = arow[i] && ka < K;
      CpAsync16(a + ((t >> 4) + 8 * i) * kAStride + 4 * ca, oka ? arow[i] + ka : in, oka);
      const int w = (t >> 3) + 16 * i, cb = t & 7, kb = k0 + 8 * cb;
      const bool okb = brow[i] && kb < K;
      CpAsync16(b + w * kRowBytes + ((cb ^ (w & 7)) << 4), okb ? brow[i] + kb : ptrs[0], okb);
    }
  };

  float acc[2][8][4];
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[mt][j][0] = acc[mt][j][1] = acc[mt][j][2] = acc[mt][j][3] = 0.0f;

  for (int s = 0; s < kStages - 1; ++s) {
    if (s < stages) issue(s);
    CpAsyncCommit();
  }
  for (int s = 0; s < stages; ++s) {
    CpAsyncWait<kStages - 2>();  // this thread's copies of stage s have landed
    __syncthreads();             // everyone's have, and everyone is done with stage s - 1's buffer
    if (s + kStages - 1 < stages) issue(s + kStages - 1);
    CpAsyncCommit();
    const unsigned char* b = sb + (s % kStages) * kBStage + (64 * wc + g) * kRowBytes;
    const float* a = sa + (s % kStages) * (kAStage / 4) + (32 * wr + g) * kAStride + 8 * q;
#pragma unroll
    for (int kk = 0; kk < kKt / 32; ++kk) {
      if (s * kKt + 32 * kk >= K) break;  // block-uniform: K is a multiple of 32
      // Rows 64 wc + 8 j + g: the swizzle is g's (8 j + 64 wc is a multiple of 8).
      const int chunk = (4 * kk + q) ^ g;
      uint4 bw[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) bw[j] = *reinterpret_cast<const uint4*>(b + 8 * j * kRowBytes + (chunk << 4));
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
        const float* a0 = a + 16 * mt * kAStride + 32 * kk;
        const float* a1 = a0 + 8 * kAStride;
        uint32_t hi[2][4], lo[2][4];
        SplitA(*reinterpret_cast<const float4*>(a0), *reinterpret_cast<const float4*>(a0 + 4),
               *reinterpret_cast<const float4*>(a1), *reinterpret_cast<const float4*>(a1 + 4), hi, lo);
#pragma unroll
        for (int j = 0; j < 8; ++j) MmaChunk(acc[mt][j], hi, lo, bw[j], exact);
      }
    }
  }
  CpAsyncWait<0>();

  // Accumulator (mt, j) element e: activation row 32 wr + 16 mt + g (+ 8 for e >= 2), weight row
  // 64 wc + 8 j + 2 q + (e & 1).
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = 32 * wr + 16 * mt + g + (e >= 2 ? 8 : 0);
      if (r >= unit.z) continue;
      const int64_t pos = unit.y + r;
      if (kDown) {
        const int32_t slot = order[pos];
        const float scale = weights[slot];
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const int col = col0 + 64 * wc + 8 * j + 2 * q + (e & 1);
          if (col < n) out[static_cast<int64_t>(slot) * n + col] = acc[mt][j][e] * scale;
        }
      } else {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int col = col0 + 32 * wc + 8 * j + 2 * q + (e & 1);
          if (col < n) out[pos * n + col] = GatedActF(acc[mt][j][e], acc[mt][j + 4][e], gelu);
        }
      }
    }
}

template <bool kDown>
void LaunchMoeTiled(const float* in, int64_t K, int64_t n, int64_t top_k, const int32_t* order, const int4* units,
                    const int32_t* num_units, int64_t max_units, const float* weights, const uint16_t* const* ptrs,
                    int64_t E, float* out, bool exact, bool gelu, cudaStream_t s) {
  const auto kernel = MoeTiledKernel<kDown>;
  KernelResidency(kernel, kSmem, kThreads);  // sets the dynamic shared memory limit (once per device)
  constexpr int64_t kOutCols = kDown ? kCols : kCols / 2;
  const dim3 grid(static_cast<unsigned>((n + kOutCols - 1) / kOutCols), static_cast<unsigned>(max_units));
  LaunchKernel(kernel, grid, kThreads, kSmem, s)(in, static_cast<int>(K), static_cast<int>(n),
                                                 static_cast<int>(top_k), order, units, num_units, weights, ptrs, E,
                                                 out, exact, gelu);
}

}  // namespace

void MoeTiledGateUp(const float* x, int64_t hidden, int64_t k, const int32_t* order, const int4* units,
                    const int32_t* num_units, int64_t max_units, const uint16_t* const* ptrs, int64_t num_experts,
                    int64_t inter, float* act, bool exact, bool gelu, cudaStream_t s) {
  if (max_units <= 0) return;
  LaunchMoeTiled<false>(x, hidden, inter, k, order, units, num_units, max_units, nullptr, ptrs, num_experts, act, exact,
                        gelu, s);
}

void MoeTiledDown(const float* act, int64_t inter, const int32_t* order, const int4* units, const int32_t* num_units,
                  int64_t max_units, const float* weights, const uint16_t* const* ptrs, int64_t num_experts,
                  int64_t hidden, float* slot_out, bool exact, cudaStream_t s) {
  if (max_units <= 0) return;
  LaunchMoeTiled<true>(act, inter, hidden, 1, order, units, num_units, max_units, weights, ptrs, num_experts, slot_out,
                       exact, /*gelu=*/false, s);
}

}  // namespace tessera::cuda
