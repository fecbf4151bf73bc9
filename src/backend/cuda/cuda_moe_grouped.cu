// tessera cuda backend: the device-grouped MoE expert path for batched decode, diffusion blocks and
// prompt chunks, on tensor cores (bf16 MMA, activations split hi + lo) or on CUDA cores, and the
// dense few-row GEMM built on the same MMA helpers.
// The (row, slot) pairs are grouped by expert on the device (no host round trip), cut into work
// units of up to kMoeUnitRows pairs of one expert, and each unit streams its expert's weights once
// for all of its rows: gate/up (+ SiLU-mul) into a sorted activation buffer, then down scaled by the
// routing weight into the pair's slot. Every row's dot products run in the same lane order whatever
// unit it lands in, so the result does not depend on the (atomic) order of the grouping.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "backend/cuda/cuda_device_util.cuh"
#include "backend/cuda/cuda_kernels.h"

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
// placed at their expert's cursor. Shared memory: 2 * E ints. An out-of-range expert id is counted
// into `bad` (the host checks it never happens: the router writes ids in [0, E)).
__global__ void GroupKernel(const int32_t* idx, int64_t slots, int64_t E, int rows_per_unit, int32_t* order,
                            int4* units, int32_t* num_units) {
  extern __shared__ int32_t sm[];
  int32_t* count = sm;
  int32_t* cursor = sm + E;
  for (int64_t e = threadIdx.x; e < E; e += blockDim.x) count[e] = 0;
  __syncthreads();
  for (int64_t i = threadIdx.x; i < slots; i += blockDim.x) {
    const int32_t e = idx[i];
    if (e >= 0 && e < E) atomicAdd(&count[e], 1);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int32_t off = 0, u = 0;
    for (int64_t e = 0; e < E; ++e) {
      const int32_t c = count[e];
      cursor[e] = off;
      for (int32_t r = 0; r < c; r += rows_per_unit)
        units[u++] = make_int4(static_cast<int32_t>(e), off + r, min(rows_per_unit, c - r), 0);
      off += c;
    }
    *num_units = u;
  }
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
                             float* act) {
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
        if (lane == 0 && col0 + j < inter) act[(unit.y + r) * inter + col0 + j] = SiluF(g) * u;
      }
    }
  }
}

// slot_out[slot, col] = weight[slot] * (act[pos] down_e[col]) for the rows of one unit.
__global__ void DownKernel(const float* act, int64_t inter, const int32_t* order, const int4* units,
                           const int32_t* num_units, const float* weights, const uint16_t* const* ptrs, int64_t E,
                           int64_t hidden, float* slot_out) {
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

// --- Tensor-core variant: one m16n8k16 bf16 MMA tile of 16 rows per unit. The f32 activations are
// split into hi + lo bf16 parts (two MMAs), which keeps ~16 mantissa bits: a single bf16 rounding
// of the activations costs ~1e-3 relative error per layer. Each lane loads 32 contiguous bytes of
// k per 32-wide chunk (8 activations, 8 weights); both operands use the same permutation of the
// chunk's k onto the MMA's logical k, so the products pair up and the sum over k is unchanged:
// lane q (= lane % 4) supplies physical k 8q..8q+7, as logical (2q, 2q+1, 2q+8, 2q+9) of the first
// k-step and of the second.
constexpr int kMmaWarps = 4;
constexpr int kMmaTiles = 4;  // n8 tiles per warp: 32 output columns
constexpr int kMmaColsPerBlock = kMmaWarps * kMmaTiles * 8;

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
// lane's k): a[step][reg] in the MMA's register order (row g, row g+8, row g +8k, row g+8 +8k).
__device__ __forceinline__ void LoadA(const float* r0, const float* r1, bool ok0, bool ok1, uint32_t (&hi)[2][4],
                                      uint32_t (&lo)[2][4]) {
  float v0[8], v1[8];
  const float4 a = ok0 ? *reinterpret_cast<const float4*>(r0) : make_float4(0, 0, 0, 0);
  const float4 b = ok0 ? *reinterpret_cast<const float4*>(r0 + 4) : make_float4(0, 0, 0, 0);
  const float4 c = ok1 ? *reinterpret_cast<const float4*>(r1) : make_float4(0, 0, 0, 0);
  const float4 d = ok1 ? *reinterpret_cast<const float4*>(r1 + 4) : make_float4(0, 0, 0, 0);
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

__device__ __forceinline__ void MmaChunk(float* c, const uint32_t (&hi)[2][4], const uint32_t (&lo)[2][4],
                                         const uint4 w) {
  Mma(c, hi[0], w.x, w.y);
  Mma(c, lo[0], w.x, w.y);
  Mma(c, hi[1], w.z, w.w);
  Mma(c, lo[1], w.z, w.w);
}

__global__ void GateUpMmaKernel(const float* x, int64_t hidden, int64_t k, const int32_t* order, const int4* units,
                                const int32_t* num_units, const uint16_t* const* ptrs, int64_t E, int64_t inter,
                                float* act) {
  if (static_cast<int32_t>(blockIdx.y) >= *num_units) return;
  const int4 unit = units[blockIdx.y];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, q = lane & 3;
  const int64_t n_base = static_cast<int64_t>(blockIdx.x) * kMmaColsPerBlock + warp * kMmaTiles * 8;
  if (n_base >= inter) return;
  const bool ok0 = g < unit.z, ok1 = g + 8 < unit.z;
  const float* x0 = x + (ok0 ? order[unit.y + g] / k : 0) * hidden + 8 * q;
  const float* x1 = x + (ok1 ? order[unit.y + g + 8] / k : 0) * hidden + 8 * q;
  const uint16_t* wg[kMmaTiles];
  const uint16_t* wu[kMmaTiles];
#pragma unroll
  for (int j = 0; j < kMmaTiles; ++j) {
    const int64_t n = min(n_base + 8 * j + g, inter - 1);  // columns past the end repeat the last (not stored)
    wg[j] = ptrs[unit.x] + n * hidden + 8 * q;
    wu[j] = ptrs[E + unit.x] + n * hidden + 8 * q;
  }
  float cg[kMmaTiles][4] = {}, cu[kMmaTiles][4] = {};
  for (int64_t k0 = 0; k0 < hidden; k0 += 32) {
    uint4 bg[kMmaTiles], bu[kMmaTiles];
#pragma unroll
    for (int j = 0; j < kMmaTiles; ++j) {
      bg[j] = *reinterpret_cast<const uint4*>(wg[j] + k0);
      bu[j] = *reinterpret_cast<const uint4*>(wu[j] + k0);
    }
    uint32_t hi[2][4], lo[2][4];
    LoadA(x0 + k0, x1 + k0, ok0, ok1, hi, lo);
#pragma unroll
    for (int j = 0; j < kMmaTiles; ++j) {
      MmaChunk(cg[j], hi, lo, bg[j]);
      MmaChunk(cu[j], hi, lo, bu[j]);
    }
  }
#pragma unroll
  for (int j = 0; j < kMmaTiles; ++j) {
    const int64_t col = n_base + 8 * j + 2 * q;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int row = g + (e >= 2 ? 8 : 0);
      const int64_t cc = col + (e & 1);
      if (row < unit.z && cc < inter) act[(unit.y + row) * inter + cc] = SiluF(cg[j][e]) * cu[j][e];
    }
  }
}

__global__ void DownMmaKernel(const float* act, int64_t inter, const int32_t* order, const int4* units,
                              const int32_t* num_units, const float* weights, const uint16_t* const* ptrs, int64_t E,
                              int64_t hidden, float* slot_out) {
  if (static_cast<int32_t>(blockIdx.y) >= *num_units) return;
  const int4 unit = units[blockIdx.y];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, q = lane & 3;
  const int64_t n_base = static_cast<int64_t>(blockIdx.x) * kMmaColsPerBlock + warp * kMmaTiles * 8;
  if (n_base >= hidden) return;
  const bool ok0 = g < unit.z, ok1 = g + 8 < unit.z;
  const float* a0 = act + (unit.y + (ok0 ? g : 0)) * inter + 8 * q;
  const float* a1 = act + (unit.y + (ok1 ? g + 8 : 0)) * inter + 8 * q;
  const uint16_t* wd[kMmaTiles];
#pragma unroll
  for (int j = 0; j < kMmaTiles; ++j) wd[j] = ptrs[2 * E + unit.x] + min(n_base + 8 * j + g, hidden - 1) * inter + 8 * q;
  float c[kMmaTiles][4] = {};
  for (int64_t k0 = 0; k0 < inter; k0 += 32) {
    uint4 b[kMmaTiles];
#pragma unroll
    for (int j = 0; j < kMmaTiles; ++j) b[j] = *reinterpret_cast<const uint4*>(wd[j] + k0);
    uint32_t hi[2][4], lo[2][4];
    LoadA(a0 + k0, a1 + k0, ok0, ok1, hi, lo);
#pragma unroll
    for (int j = 0; j < kMmaTiles; ++j) MmaChunk(c[j], hi, lo, b[j]);
  }
  const int32_t slot0 = ok0 ? order[unit.y + g] : 0, slot1 = ok1 ? order[unit.y + g + 8] : 0;
  const float s0 = ok0 ? weights[slot0] : 0.0f, s1 = ok1 ? weights[slot1] : 0.0f;
#pragma unroll
  for (int j = 0; j < kMmaTiles; ++j) {
    const int64_t col = n_base + 8 * j + 2 * q;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const bool upper = e >= 2;
      const int64_t cc = col + (e & 1);
      if ((upper ? ok1 : ok0) && cc < hidden)
        slot_out[static_cast<int64_t>(upper ? slot1 : slot0) * hidden + cc] = c[j][e] * (upper ? s1 : s0);
    }
  }
}

// Dense y[m, n] (+)= x[m, k] w[n, k]^T for a few rows (m <= 16 * RT): the MoE kernels' MMA scheme
// with every row tile in the same warp, so each weight is read once whatever m is (cuBLASLt's
// hi + lo GEMMs read it twice, and its tiles are sized for larger m).
// Block (column tile, k split): with splits, each writes its partial product to partial[split]
// and SkinnyReduceKernel sums them in split order (deterministic, unlike atomics).
template <int RT>
__global__ void SkinnyGemmKernel(const float* x, int64_t m, int64_t k, const uint16_t* w, int64_t n, float* y,
                                 bool accumulate, int64_t k_chunk, float* partial) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, q = lane & 3;
  const int64_t n_base = static_cast<int64_t>(blockIdx.x) * kMmaColsPerBlock + warp * kMmaTiles * 8;
  if (n_base >= n) return;
  const uint16_t* wr[kMmaTiles];
#pragma unroll
  for (int j = 0; j < kMmaTiles; ++j) wr[j] = w + min(n_base + 8 * j + g, n - 1) * k + 8 * q;
  const float* xr[RT][2];
  bool ok[RT][2];
#pragma unroll
  for (int t = 0; t < RT; ++t)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t row = 16 * t + 8 * h + g;
      ok[t][h] = row < m;
      xr[t][h] = x + (ok[t][h] ? row : 0) * k + 8 * q;
    }
  float c[RT][kMmaTiles][4] = {};
  const int64_t k_begin = blockIdx.y * k_chunk, k_end = min(k, k_begin + k_chunk);
  for (int64_t k0 = k_begin; k0 < k_end; k0 += 32) {
    uint4 b[kMmaTiles];
#pragma unroll
    for (int j = 0; j < kMmaTiles; ++j) b[j] = *reinterpret_cast<const uint4*>(wr[j] + k0);
#pragma unroll
    for (int t = 0; t < RT; ++t) {
      uint32_t hi[2][4], lo[2][4];
      LoadA(xr[t][0] + k0, xr[t][1] + k0, ok[t][0], ok[t][1], hi, lo);
#pragma unroll
      for (int j = 0; j < kMmaTiles; ++j) MmaChunk(c[t][j], hi, lo, b[j]);
    }
  }
#pragma unroll
  for (int t = 0; t < RT; ++t)
#pragma unroll
    for (int j = 0; j < kMmaTiles; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t row = 16 * t + g + (e >= 2 ? 8 : 0), col = n_base + 8 * j + 2 * q + (e & 1);
        if (row < m && col < n) {
          if (partial) {
            partial[(blockIdx.y * m + row) * n + col] = c[t][j][e];
          } else {
            float* out = y + row * n + col;
            *out = accumulate ? *out + c[t][j][e] : c[t][j][e];
          }
        }
      }
}

__global__ void SkinnyReduceKernel(const float* partial, int64_t splits, int64_t count, float* y, bool accumulate) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= count) return;
  float v = accumulate ? y[i] : 0.0f;
  for (int64_t s = 0; s < splits; ++s) v += partial[s * count + i];
  y[i] = v;
}

}  // namespace

int SkinnyGemmSplits(int64_t m, int64_t k, int64_t n, int sm_count) {
  if (m <= 0 || m > kSkinnyGemmMaxRows || k % 32 != 0) return 0;
  // Few column tiles (narrow outputs) would leave most SMs idle: split k across blocks.
  const int64_t cols = (n + kMmaColsPerBlock - 1) / kMmaColsPerBlock, chunks = k / 32;
  return static_cast<int>(std::min<int64_t>({16, chunks, std::max<int64_t>(1, (2 * sm_count + cols - 1) / cols)}));
}

bool SkinnyGemm(const float* x, int64_t m, int64_t k, const uint16_t* w, int64_t n, float* y, bool accumulate,
                int splits, float* partial, cudaStream_t s) {
  const auto aligned = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; };
  if (m <= 0 || m > kSkinnyGemmMaxRows || k % 32 != 0 || !aligned(x) || !aligned(w) || splits < 1) return false;
  const int64_t chunks = k / 32, k_chunk = (chunks + splits - 1) / splits * 32;
  const int64_t used = (k + k_chunk - 1) / k_chunk;  // splits that get at least one chunk
  float* part = used > 1 ? partial : nullptr;
  const dim3 grid(static_cast<unsigned>((n + kMmaColsPerBlock - 1) / kMmaColsPerBlock), static_cast<unsigned>(used));
  const int tiles = static_cast<int>((m + 15) / 16);
  if (tiles == 1) SkinnyGemmKernel<1><<<grid, kMmaWarps * 32, 0, s>>>(x, m, k, w, n, y, accumulate, k_chunk, part);
  if (tiles == 2) SkinnyGemmKernel<2><<<grid, kMmaWarps * 32, 0, s>>>(x, m, k, w, n, y, accumulate, k_chunk, part);
  if (tiles == 3) SkinnyGemmKernel<3><<<grid, kMmaWarps * 32, 0, s>>>(x, m, k, w, n, y, accumulate, k_chunk, part);
  if (tiles == 4) SkinnyGemmKernel<4><<<grid, kMmaWarps * 32, 0, s>>>(x, m, k, w, n, y, accumulate, k_chunk, part);
  if (part)
    SkinnyReduceKernel<<<static_cast<unsigned>((m * n + 255) / 256), 256, 0, s>>>(part, used, m * n, y, accumulate);
  return true;
}

int64_t MoeMaxUnits(int64_t slots, int64_t num_experts, int rows_per_unit) {
  return (slots + rows_per_unit - 1) / rows_per_unit + (slots < num_experts ? slots : num_experts);
}

int MoeUnitRows(bool tensor_cores) { return tensor_cores ? 16 : kRows; }

void MoeGroupByExpert(const int32_t* idx, int64_t slots, int64_t num_experts, int rows_per_unit, int32_t* order,
                      int4* units, int32_t* num_units, cudaStream_t s) {
  GroupKernel<<<1, 1024, 2 * num_experts * sizeof(int32_t), s>>>(idx, slots, num_experts, rows_per_unit, order,
                                                                  units, num_units);
}

void MoeGroupedGateUp(bool tensor_cores, const float* x, int64_t hidden, int64_t k, const int32_t* order,
                      const int4* units, const int32_t* num_units, int64_t max_units, const uint16_t* const* ptrs,
                      int64_t num_experts, int64_t inter, float* act, cudaStream_t s) {
  if (max_units <= 0) return;
  if (tensor_cores) {
    const dim3 grid(static_cast<unsigned>((inter + kMmaColsPerBlock - 1) / kMmaColsPerBlock),
                    static_cast<unsigned>(max_units));
    GateUpMmaKernel<<<grid, kMmaWarps * 32, 0, s>>>(x, hidden, k, order, units, num_units, ptrs, num_experts, inter,
                                                    act);
    return;
  }
  const dim3 grid(static_cast<unsigned>((inter + kColsPerBlock - 1) / kColsPerBlock), static_cast<unsigned>(max_units));
  GateUpKernel<<<grid, kWarps * 32, 0, s>>>(x, hidden, k, order, units, num_units, ptrs, num_experts, inter, act);
}

void MoeGroupedDown(bool tensor_cores, const float* act, int64_t inter, const int32_t* order, const int4* units,
                    const int32_t* num_units, int64_t max_units, const float* weights, const uint16_t* const* ptrs,
                    int64_t num_experts, int64_t hidden, float* slot_out, cudaStream_t s) {
  if (max_units <= 0) return;
  if (tensor_cores) {
    const dim3 grid(static_cast<unsigned>((hidden + kMmaColsPerBlock - 1) / kMmaColsPerBlock),
                    static_cast<unsigned>(max_units));
    DownMmaKernel<<<grid, kMmaWarps * 32, 0, s>>>(act, inter, order, units, num_units, weights, ptrs, num_experts,
                                                  hidden, slot_out);
    return;
  }
  const dim3 grid(static_cast<unsigned>((hidden + kColsPerBlock - 1) / kColsPerBlock), static_cast<unsigned>(max_units));
  DownKernel<<<grid, kWarps * 32, 0, s>>>(act, inter, order, units, num_units, weights, ptrs, num_experts, hidden,
                                          slot_out);
}

}  // namespace tessera::cuda
