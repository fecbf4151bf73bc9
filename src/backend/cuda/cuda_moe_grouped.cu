// tessera cuda backend: the device-grouped MoE expert path for batched decode, diffusion blocks and
// prompt chunks, on tensor cores (bf16 MMA, activations split hi + lo; helpers in cuda_mma_util.cuh)
// or on CUDA cores. (The dense few-row GEMM on the same MMA helpers is in cuda_skinny_gemm.cu.)
// The (row, slot) pairs are grouped by expert on the device (no host round trip), cut into work
// units of up to kMoeUnitRows pairs of one expert, and each unit streams its expert's weights once
// for all of its rows: gate/up (+ SiLU-mul) into a sorted activation buffer, then down scaled by the
// routing weight into the pair's slot. Every row's dot products run in the same lane order whatever
// unit it lands in, so the result does not depend on the (atomic) order of the grouping.
// Tensor cores: the pipelined kernels (cp.async stages in shared memory, a resident grid taking
// (unit, column tile) items in turn) for decode batches and diffusion blocks; prompt chunks go to
// the tiled kernels of cuda_moe_tiled.cu (units of 64 rows, MoeUnitRows).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "backend/cuda/cuda_device_util.cuh"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuda_launch.cuh"
#include "backend/cuda/cuda_mma_util.cuh"

namespace tessera::cuda {

namespace {

constexpr int kWarps = 4;          // per block
constexpr int kColsPerWarp = 4;    // output columns per warp: each activation load serves four columns
constexpr int kColsPerBlock = kWarps * kColsPerWarp;
constexpr int kRows = kMoeUnitRows;


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
// placed at their expert's cursor. The offsets and unit numbers are block-wide prefix sums over the
// experts (BlockInclusiveScan: a block of 1024 threads), 1,024 experts a round (a single thread
// walking 128 experts took ~12 us a layer at batch 64 under ncu). Shared memory: 2 * E ints. An
// out-of-range expert id is counted into no expert (the router writes ids in [0, E)); its pair is in
// no unit.
__global__ void GroupKernel(const int32_t* idx, int64_t slots, int64_t E, int rows_per_unit, int32_t* order,
                            int4* units, int32_t* num_units) {
  GridDependencyWait();
  extern __shared__ int32_t sm[];
  __shared__ int red[32];  // BlockInclusiveScan's
  int32_t* count = sm;
  int32_t* cursor = sm + E;
  for (int64_t e = threadIdx.x; e < E; e += blockDim.x) count[e] = 0;
  __syncthreads();
  for (int64_t i = threadIdx.x; i < slots; i += blockDim.x) {
    const int32_t e = idx[i];
    if (e >= 0 && e < E) atomicAdd(&count[e], 1);
  }
  __syncthreads();
  int off_carry = 0, unit_carry = 0;  // the pairs and units of the rounds before
  for (int64_t base = 0; base < E; base += blockDim.x) {
    const int64_t e = base + threadIdx.x;
    const int c = e < E ? count[e] : 0;
    const int u = (c + rows_per_unit - 1) / rows_per_unit;
    int offs = 0, units_n = 0;
    const int off_end = BlockInclusiveScan(c, red, &offs) + off_carry;
    const int unit_end = BlockInclusiveScan(u, red, &units_n) + unit_carry;
    if (e < E) {
      const int off = off_end - c;
      cursor[e] = off;
      for (int j = 0; j < u; ++j)
        units[unit_end - u + j] = make_int4(static_cast<int32_t>(e), off + j * rows_per_unit,
                                            min(rows_per_unit, c - j * rows_per_unit), 0);
    }
    off_carry += offs;
    unit_carry += units_n;
  }
  if (threadIdx.x == 0) *num_units = unit_carry;
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
                             float* act, bool gelu) {
  GridDependencyWait();
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
        if (lane == 0 && col0 + j < inter) act[(unit.y + r) * inter + col0 + j] = GatedActF(g, u, gelu);
      }
    }
  }
}

// slot_out[slot, col] = weight[slot] * (act[pos] down_e[col]) for the rows of one unit.
__global__ void DownKernel(const float* act, int64_t inter, const int32_t* order, const int4* units,
                           const int32_t* num_units, const float* weights, const uint16_t* const* ptrs, int64_t E,
                           int64_t hidden, float* slot_out) {
  GridDependencyWait();
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

// --- Tensor-core kernels for units of 16 rows (decode batches, diffusion blocks; prompt chunks take
// the tiled kernels of cuda_moe_tiled.cu): bf16 MMA (cuda_mma_util.cuh), the weights streamed
// through a multi-stage cp.async pipeline in shared memory. A first variant that kept one 16-byte
// load per lane in flight reached ~0.5 of the bandwidth. Here:
// - work item = (unit, tile of kItemRows weight rows: half gate half up, or down), items dealt to a
//   grid of resident blocks in turn (item = blockIdx.x + i * gridDim.x; equal items, so the blocks
//   finish together), and the pipeline runs across item boundaries without draining;
// - a stage = kItemRows weight rows x kKt of k (16 KiB) plus the unit's 16 activation rows (f32,
//   zero-filled past the unit's rows) for that k; kStages - 1 stages are in flight while one is
//   multiplied (32-48 KiB of weights a block, two blocks an SM);
// - the kKt / 32 chunks of a stage go to different warps (split k inside the block: a warp splits
//   only its chunk's activations and keeps 8 n8 tiles of accumulators); the per-warp partial sums
//   are added in chunk order at the end of the item, so a row's result depends only on its data,
//   never on its unit, block or timing (deterministic, no atomics).
// Weight rows in shared memory: kKt bf16, 16-byte chunk c of row R stored at chunk c ^ 4 (R & 1), so
// a quarter-warp's fragment loads (rows R and R + 1, four chunks each) hit all 32 banks once.
// Activation rows are padded by 4 floats for the same reason.
constexpr int kV2Threads = 128;

// What the epilogue of an item needs, written when its first stage is issued. The producer runs at
// most kStages - 1 stages ahead, so item i + kStages starts after item i's epilogue (a later loop
// iteration, past a barrier) even with one stage an item: a ring of kStages + 1 has a slot to spare.
struct MoeItemMeta {
  int32_t pos0, rows, col0, pad;
  int32_t slot[16];  // down: the pair of each row
  float scale[16];   // down: its routing weight
};

template <int kKChunks, int kStages>
struct MoeV2Shape {
  static constexpr int kKt = 32 * kKChunks;              // k per stage
  static constexpr int kItemRows = 64 * (4 / kKChunks);  // weight rows per item: 8 n8 tiles a warp
  static constexpr int kRowBytes = 2 * kKt;
  static constexpr int kChunksPerRow = kKt / 8;           // 16-byte chunks per weight row
  static constexpr int kRowStep = kV2Threads / kChunksPerRow;  // rows one copy instruction covers
  static constexpr int kAStride = kKt + 4;                // floats per activation row
  static constexpr int kRedStride = kItemRows + 8;        // floats per row of a partial-sum tile
  static constexpr int kBStage = kItemRows * kRowBytes;   // bytes
  static constexpr int kAStage = 16 * kAStride * 4;       // bytes
  static constexpr int kRing = kStages + 1;
  static constexpr size_t kSmem = static_cast<size_t>(kStages) * (kBStage + kAStage) +
                                  static_cast<size_t>(kKChunks) * 16 * kRedStride * 4 + kRing * sizeof(MoeItemMeta);
  static_assert(kItemRows * kChunksPerRow == 8 * kV2Threads, "8 weight copies a thread a stage");
  static_assert(kItemRows / 2 == 4 * kRowStep, "copies 0-3 cover the first half of the rows, 4-7 the second");
};

// kDown = false (gate/up): in = x [tokens, K = hidden] gathered through order / top_k, weight rows
// = gate and up columns (item: kItemRows / 2 of each), out = act[pos, n = inter] = silu(g) * u.
// kDown = true: in = act [pos, K = inter], weight rows = down columns, out = slot_out[slot, n =
// hidden] = weight[slot] * d.
template <bool kDown, int kKChunks, int kStages>
__global__ void __launch_bounds__(kV2Threads) MoeMmaV2Kernel(const float* in, int K, int n, int top_k,
                                                             const int32_t* order, const int4* units,
                                                             const int32_t* num_units, const float* weights,
                                                             const uint16_t* const* ptrs, int64_t E, float* out,
                                                             bool exact, bool gelu) {
  GridDependencyWait();
  using S = MoeV2Shape<kKChunks, kStages>;
  constexpr int kCols = kDown ? S::kItemRows : S::kItemRows / 2;  // output columns per item
  constexpr int kHalf = S::kItemRows / 2;
  extern __shared__ __align__(16) unsigned char smem[];
  unsigned char* sb = smem;                                             // [kStages][kItemRows][kRowBytes]
  float* sa = reinterpret_cast<float*>(smem + kStages * S::kBStage);    // [kStages][16][kAStride]
  float* red = sa + kStages * 16 * S::kAStride;                         // [kKChunks][16][kRedStride]
  MoeItemMeta* ring = reinterpret_cast<MoeItemMeta*>(red + kKChunks * 16 * S::kRedStride);

  const int tiles = (n + kCols - 1) / kCols;
  const int total = *num_units * tiles;
  if (static_cast<int>(blockIdx.x) >= total) return;
  const int grid = static_cast<int>(gridDim.x);
  const int mine = (total - 1 - static_cast<int>(blockIdx.x)) / grid + 1;  // items of this block
  const int ks_per_item = (K + S::kKt - 1) / S::kKt;
  const int stages = mine * ks_per_item;

  const int t = threadIdx.x, lane = t & 31, warp = t >> 5, g = lane >> 2, q = lane & 3;
  const int kw = warp % kKChunks, nw = warp / kKChunks;  // this warp's k chunk and 64-row group
  // Copy roles: weight rows wr + kRowStep * i (i < 8), 16-byte chunk wc; activation row ar, chunks
  // (t & 7) + 8 m. ar is also the row this thread stores in the epilogue.
  const int wc = t % S::kChunksPerRow, wr = t / S::kChunksPerRow, ar = t >> 3;
  const int wswz = (wr & 1) << 2;

  // Producer state: the item being issued (its unit prefetched one item ahead).
  int p_item = blockIdx.x, p_ks = 0, p_local = 0;
  int4 p_unit = units[p_item / tiles];
  const uint16_t* w0 = nullptr;
  const uint16_t* w1 = nullptr;
  int col0 = 0, col1 = 0;
  const float* arow = in;
  bool a_ok = false;

  auto start_item = [&]() {
    const int4 unit = p_unit;
    const int c0 = (p_item % tiles) * kCols;
    if (p_item + grid < total) p_unit = units[(p_item + grid) / tiles];
    a_ok = ar < unit.z;
    const int pos = unit.y + (a_ok ? ar : 0);
    const int32_t pair = order[pos];
    if constexpr (kDown) {
      w0 = w1 = ptrs[2 * E + unit.x];
      col0 = c0 + wr;
      col1 = c0 + kHalf + wr;
      arow = in + static_cast<int64_t>(pos) * K;
    } else {
      w0 = ptrs[unit.x];
      w1 = ptrs[E + unit.x];
      col0 = col1 = c0 + wr;
      arow = in + static_cast<int64_t>(pair / top_k) * K;
    }
    MoeItemMeta& m = ring[p_local % S::kRing];
    if ((t & 7) == 0) {
      m.slot[ar] = pair;
      m.scale[ar] = kDown && a_ok ? weights[pair] : 0.0f;
    }
    if (t == 0) m.pos0 = unit.y, m.rows = unit.z, m.col0 = c0;
  };

  // Queues the copies of the producer's next stage into buffer `buf` (then steps the producer).
  auto issue = [&](int buf) {
    if (p_ks == 0) start_item();
    const int k0 = p_ks * S::kKt;
    unsigned char* b = sb + buf * S::kBStage;
    if (k0 + 32 * (wc >> 2) < K) {  // K % kKt != 0: the last stage's chunks past K are skipped
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const int row = wr + S::kRowStep * i;
        const int col = (i < 4 ? col0 : col1) + S::kRowStep * (i & 3);
        const bool ok = col < n;  // columns past the end: zeros (their outputs are not stored)
        const uint16_t* src = (i < 4 ? w0 : w1) + static_cast<int64_t>(ok ? col : 0) * K + k0 + 8 * wc;
        CpAsync16(b + row * S::kRowBytes + ((wc ^ wswz) << 4), src, ok);
      }
    }
    float* a = sa + buf * 16 * S::kAStride + ar * S::kAStride;
#pragma unroll
    for (int m = 0; m < kKChunks; ++m) {
      const int c = (t & 7) + 8 * m;
      if (k0 + 32 * m < K) CpAsync16(a + 4 * c, arow + k0 + 4 * c, a_ok);  // rows past the unit: zeros
    }
    if (++p_ks == ks_per_item) p_ks = 0, p_item += grid, ++p_local;
  };

  for (int s = 0; s < kStages - 1; ++s) {
    if (s < stages) issue(s);
    CpAsyncCommit();
  }
  float acc[8][4];
#pragma unroll
  for (int j = 0; j < 8; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
  int c_ks = 0, c_local = 0;
  for (int s = 0; s < stages; ++s) {
    CpAsyncWait<kStages - 2>();  // this thread's copies of stage s have landed
    __syncthreads();             // everyone's have, and everyone is done with stage s - 1's buffer
    if (s + kStages - 1 < stages) issue((s + kStages - 1) % kStages);
    CpAsyncCommit();

    const int buf = s % kStages;
    if (c_ks * S::kKt + 32 * kw < K) {  // warp-uniform
      const float* a0 = sa + buf * 16 * S::kAStride + g * S::kAStride + 32 * kw + 8 * q;
      const float* a1 = a0 + 8 * S::kAStride;
      uint32_t hi[2][4], lo[2][4];
      SplitA(*reinterpret_cast<const float4*>(a0), *reinterpret_cast<const float4*>(a0 + 4),
             *reinterpret_cast<const float4*>(a1), *reinterpret_cast<const float4*>(a1 + 4), hi, lo);
      const int chunk = (4 * kw + q) ^ ((g & 1) << 2);  // rows 8j + g: the swizzle bit is g's
      const unsigned char* b = sb + buf * S::kBStage + (nw * 64 + g) * S::kRowBytes + (chunk << 4);
#pragma unroll
      for (int j = 0; j < 8; ++j) MmaChunk(acc[j], hi, lo, *reinterpret_cast<const uint4*>(b + 8 * j * S::kRowBytes), exact);
    }

    if (++c_ks == ks_per_item) {
      // End of an item: partial sums through shared memory, added in chunk order.
      float* r = red + kw * 16 * S::kRedStride;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int col = nw * 64 + 8 * j + 2 * q;
        *reinterpret_cast<float2*>(r + g * S::kRedStride + col) = make_float2(acc[j][0], acc[j][1]);
        *reinterpret_cast<float2*>(r + (g + 8) * S::kRedStride + col) = make_float2(acc[j][2], acc[j][3]);
        acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
      }
      __syncthreads();
      const MoeItemMeta& m = ring[c_local % S::kRing];
      if (ar < m.rows) {
        float* dst = out + static_cast<int64_t>(kDown ? m.slot[ar] : m.pos0 + ar) * n + m.col0;
        const float scale = m.scale[ar];
#pragma unroll
        for (int jj = 0; jj < kCols / 32; ++jj) {
          const int col = 4 * (t & 7) + 32 * jj;
          if (m.col0 + col >= n) continue;
          auto sum = [&](int c) {
            float4 v = *reinterpret_cast<const float4*>(red + ar * S::kRedStride + c);
#pragma unroll
            for (int k = 1; k < kKChunks; ++k) {
              const float4 p = *reinterpret_cast<const float4*>(red + (k * 16 + ar) * S::kRedStride + c);
              v.x += p.x, v.y += p.y, v.z += p.z, v.w += p.w;
            }
            return v;
          };
          const float4 v = sum(col);
          float4 o;
          if constexpr (kDown) {
            o = make_float4(v.x * scale, v.y * scale, v.z * scale, v.w * scale);
          } else {
            const float4 u = sum(kHalf + col);
            o = make_float4(GatedActF(v.x, u.x, gelu), GatedActF(v.y, u.y, gelu), GatedActF(v.z, u.z, gelu),
                            GatedActF(v.w, u.w, gelu));
          }
          *reinterpret_cast<float4*>(dst + col) = o;
        }
      }
      c_ks = 0;
      ++c_local;
      // `red` is written again only at the next item's end, after the next iteration's barrier.
    }
  }
  CpAsyncWait<0>();  // nothing is left in flight (only empty groups), but leave no copy behind
}

// Which tensor-core kernels: the tiled ones (cuda_moe_tiled.cu, units of 64 rows) for prompt chunks
// (more than kMoePipelinedMaxUnits units of 16); the pipelined ones here for decode batches and
// diffusion blocks (b64 45 -> 33 ms a step against the first kernels), gate/up with 128
// of k a stage (64 weight rows an item, 3 stages), down with 64 of k a stage (128 rows an item, 4
// stages): down's k (the expert's 768 / 512) is only 6 / 4 stages of 128 an item, and twice the rows
// an item halves the item epilogues a weight byte (fourteenth session, same binary: Qwen3-30B-A3B f32
// b64 21.05, 21.07 -> 20.86, 20.92 ms, 8x32 27.00, 27.19 -> 25.94, 26.18; Qwen3.5-35B-A3B b64 20.96,
// 20.93 -> 20.85, 20.85, 8x32 29.54, 29.45 -> 29.13, 29.15). The other pairings (gate/up on 64 of k,
// down on 128) lost those measurements and were removed with their switches.
constexpr int64_t kMoePipelinedMaxUnits = 1024;  // above: prompt chunks, the tiled kernels

// The grid: as many blocks as are resident at once, fewer when there are fewer items even with
// every unit of the bound present (blocks with no item return at once).
template <bool kDown, int kKChunks, int kStages>
void LaunchMoeMmaV2(const float* in, int64_t K, int64_t n, int64_t top_k, const int32_t* order, const int4* units,
                    const int32_t* num_units, int64_t max_units, const float* weights, const uint16_t* const* ptrs,
                    int64_t E, float* out, bool exact, bool gelu, cudaStream_t s) {
  using S = MoeV2Shape<kKChunks, kStages>;
  constexpr int64_t kCols = kDown ? S::kItemRows : S::kItemRows / 2;
  const auto kernel = MoeMmaV2Kernel<kDown, kKChunks, kStages>;
  const int64_t items = max_units * ((n + kCols - 1) / kCols);
  const int64_t grid = std::min(items, KernelResidency(kernel, S::kSmem, kV2Threads).blocks);
  LaunchKernel(kernel, static_cast<unsigned>(grid), kV2Threads, S::kSmem, s)(
      in, static_cast<int>(K), static_cast<int>(n), static_cast<int>(top_k), order, units, num_units, weights, ptrs, E,
      out, exact, gelu);
}

}  // namespace

int64_t MoeMaxUnits(int64_t slots, int64_t num_experts, int rows_per_unit) {
  return (slots + rows_per_unit - 1) / rows_per_unit + (slots < num_experts ? slots : num_experts);
}

int MoeUnitRows(bool tensor_cores, int64_t slots, int64_t num_experts) {
  if (!tensor_cores) return kRows;
  return MoeMaxUnits(slots, num_experts, kMoePipelinedUnitRows) > kMoePipelinedMaxUnits ? kMoeTiledUnitRows
                                                                                         : kMoePipelinedUnitRows;
}

void MoeGroupByExpert(const int32_t* idx, int64_t slots, int64_t num_experts, int rows_per_unit, int32_t* order,
                      int4* units, int32_t* num_units, cudaStream_t s) {
  LaunchKernel(GroupKernel, 1, 1024, 2 * num_experts * sizeof(int32_t), s)(idx, slots, num_experts, rows_per_unit,
                                                                           order, units, num_units);
}

void MoeGroupedGateUp(int unit_rows, const float* x, int64_t hidden, int64_t k, const int32_t* order,
                      const int4* units, const int32_t* num_units, int64_t max_units, const uint16_t* const* ptrs,
                      int64_t num_experts, int64_t inter, float* act, bool exact, bool gelu, cudaStream_t s) {
  if (max_units <= 0) return;
  if (unit_rows == kMoeTiledUnitRows) {
    MoeTiledGateUp(x, hidden, k, order, units, num_units, max_units, ptrs, num_experts, inter, act, exact, gelu, s);
    return;
  }
  if (unit_rows == kMoePipelinedUnitRows) {
    LaunchMoeMmaV2</*kDown=*/false, 4, 3>(x, hidden, inter, k, order, units, num_units, max_units, nullptr, ptrs,
                                          num_experts, act, exact, gelu, s);
    return;
  }
  const dim3 grid(static_cast<unsigned>((inter + kColsPerBlock - 1) / kColsPerBlock), static_cast<unsigned>(max_units));
  LaunchKernel(GateUpKernel, grid, kWarps * 32, 0, s)(x, hidden, k, order, units, num_units, ptrs, num_experts, inter,
                                                      act, gelu);
}

void MoeGroupedDown(int unit_rows, const float* act, int64_t inter, const int32_t* order, const int4* units,
                    const int32_t* num_units, int64_t max_units, const float* weights, const uint16_t* const* ptrs,
                    int64_t num_experts, int64_t hidden, float* slot_out, bool exact, cudaStream_t s) {
  if (max_units <= 0) return;
  if (unit_rows == kMoeTiledUnitRows) {
    MoeTiledDown(act, inter, order, units, num_units, max_units, weights, ptrs, num_experts, hidden, slot_out, exact,
                 s);
    return;
  }
  if (unit_rows == kMoePipelinedUnitRows) {
    LaunchMoeMmaV2</*kDown=*/true, 2, 4>(act, inter, hidden, 1, order, units, num_units, max_units, weights, ptrs,
                                         num_experts, slot_out, exact, /*gelu=*/false, s);
    return;
  }
  const dim3 grid(static_cast<unsigned>((hidden + kColsPerBlock - 1) / kColsPerBlock),
                  static_cast<unsigned>(max_units));
  LaunchKernel(DownKernel, grid, kWarps * 32, 0, s)(act, inter, order, units, num_units, weights, ptrs, num_experts,
                                                    hidden, slot_out);
}

}  // namespace tessera::cuda
