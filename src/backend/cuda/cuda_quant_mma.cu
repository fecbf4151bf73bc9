// tessera cuda backend: products with quantized weights on tensor cores, for the row counts where the
// CUDA-core kernels of cuda_quant_tiled.cu are bound by arithmetic (prompt chunks, diffusion blocks
// and canvases, batched decode): dense products and the routed experts grouped by expert.
//
// The tiling is cuda_moe_tiled.cu's (a block multiplies 64 activation rows by 128 weight rows, k in
// cp.async stages of 64, warps 2 x 2, each warp 2 m16 x 8 n8 MMA tiles), with the weights staged as
// their codes: the bytes read from memory are the format's. Each lane turns its 8 codes of a 32-wide
// chunk into bf16 in registers, exactly (int8 through f32, e4m3 by moving its bits into a bf16 and
// multiplying by 2^120, int4 by setting the nibble into the mantissa of 128.0), and the MMA multiplies
// them by the activations (hi + lo split, or hi only: cuda_mma_util.cuh). The scales stay in f32: a
// chunk's products go to a temporary accumulator that is scaled into the result at the end of each
// scale group, acc += s * (sum(code * x) - z * sum(x)), the sum of x from one more MMA against ones
// (only with zero points). So the result carries no rounding of the dequantized weight to bf16.
// int4 codes decode in pairs (column c, c + 4): the activations are permuted the same way, which
// leaves every product paired with its weight (both operands share the chunk's k permutation).
//
// Shared memory a stage: activations f32 [64][68], codes [128][32 or 64 bytes] (16-byte units
// swizzled so that a warp's fragment loads hit distinct banks), and the stage's scales and zero points
// for the (at most two) groups its 64 columns touch. Three stages, ~83 KiB: two blocks an SM.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "backend/cuda/cuda_device_util.cuh"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuda_launch.cuh"
#include "backend/cuda/cuda_mma_util.cuh"
#include "backend/cuda/cuda_quant.h"
#include "backend/cuda/cuda_quant_decode.cuh"

namespace tessera::cuda {

namespace {

enum Mode : int { kDense, kGateUp, kDown };

constexpr int kCols = 128;  // weight rows of a block
constexpr int kKt = kQuantStageK;  // k per stage
constexpr int kThreads = 128;
constexpr int kAStride = kKt + 4;           // floats per staged activation row
constexpr int kSStage = kCols * 2 * 2 * 4;  // scales [kCols][2] then zero points [kCols][2], f32
static_assert(kThreads == kCols, "one thread stages one weight row's scales");

// The block's shape by its activation rows: 64 (kQuantMmaRows: warps 2 x 2, each 2 m16 tiles x 8 n8
// tiles, two blocks an SM) or 16 (kQuantMmaFewRows: warps 1 x 4, each one m16 tile x 4 n8 tiles, a
// quarter of the registers: four blocks an SM, so few-row units keep all 16 warps busy).
template <int ROWS>
struct Tile {
  static constexpr int kRows = ROWS;
  static constexpr int kWarpRows = ROWS == 64 ? 2 : 1;
  static constexpr int kWarpCols = 4 / kWarpRows;
  static constexpr int kMt = ROWS / (16 * kWarpRows);  // m16 tiles a warp
  static constexpr int kJ = kCols / (8 * kWarpCols);   // n8 tiles a warp
  static constexpr int kStages = ROWS == 64 ? 3 : 4;
  static constexpr int kBlocksPerSm = ROWS == 64 ? 2 : 4;
  static constexpr int kAStage = ROWS * kAStride * 4;  // bytes
  static constexpr int kACopies = ROWS * (kKt / 4) / kThreads;
};

template <int8_t KIND>
constexpr int kBStage = kCols * kBRowBytes<KIND>;
template <int8_t KIND, int ROWS>
constexpr int kSmem = Tile<ROWS>::kStages * (Tile<ROWS>::kAStage + kBStage<KIND> + kSStage);

struct Args {
  const float* in;
  int K, n, top_k;
  int64_t m;                  // kDense: rows of in
  const int32_t* order;       // MoE: sorted pair ids
  const int4* units;          // MoE: (expert, first sorted position, rows)
  const int32_t* num_units;
  const float* weights;       // kDown: routing weights by pair
  const QuantMatrix* table;   // MoE: [3 E] on the device
  int64_t E;
  QuantMatrix dense;          // kDense: the matrix
  int group;                  // columns a scale (every matrix of the launch)
  bool zeros, accumulate, exact, gelu;
  float* out;
  // kDense split over k: block z sums columns [z k_split, (z + 1) k_split) into partial[z] ([m, n]),
  // and SumPartialsKernel adds the splits in order (deterministic); k_split = K, partial null: one.
  int k_split;
  float* partial;
  // W8A8 inputs as codes: the factor of each input row (kDense: by row; kGateUp: by token, the row of
  // x; kDown: by sorted position, the row of in), null: none.
  const float* row_scale;
};

// A fragments of one chunk from staged rows r0 (row g) and r1 (row g + 8) at the lane's 8 floats;
// int4 pairs physical k (0,4) (1,5) (2,6) (3,7) as LoadCodes does.
template <int8_t KIND>
__device__ __forceinline__ void LoadA(const float* r0, const float* r1, uint32_t (&hi)[2][4], uint32_t (&lo)[2][4]) {
  float4 a = *reinterpret_cast<const float4*>(r0), b = *reinterpret_cast<const float4*>(r0 + 4);
  float4 c = *reinterpret_cast<const float4*>(r1), d = *reinterpret_cast<const float4*>(r1 + 4);
  if constexpr (KIND == kInt4) {
    const float4 a2 = make_float4(a.x, b.x, a.y, b.y), b2 = make_float4(a.z, b.z, a.w, b.w);
    const float4 c2 = make_float4(c.x, d.x, c.y, d.y), d2 = make_float4(c.z, d.z, c.w, d.w);
    a = a2, b = b2, c = c2, d = d2;
  }
  SplitA(a, b, c, d, hi, lo);
}

template <int8_t KIND, int MODE, int ROWS>
__global__ void __launch_bounds__(kThreads, Tile<ROWS>::kBlocksPerSm) QuantMmaKernel(const Args p) {
  using T = Tile<ROWS>;
  constexpr int kRows = T::kRows, kStages = T::kStages, kAStage = T::kAStage, kACopies = T::kACopies;
  constexpr int kMt = T::kMt, kJ = T::kJ, kWarpCols = T::kWarpCols;
  constexpr int kWarpW = 8 * kJ;  // weight rows a warp
  GridDependencyWait();
  int4 unit;
  if constexpr (MODE == kDense) {
    const int64_t first = static_cast<int64_t>(blockIdx.y) * kRows;
    unit = make_int4(0, static_cast<int>(first), static_cast<int>(min(static_cast<int64_t>(kRows), p.m - first)), 0);
  } else {
    if (static_cast<int32_t>(blockIdx.y) >= *p.num_units) return;
    unit = p.units[blockIdx.y];
  }
  const int K = p.K, n = p.n;
  const int col0 = static_cast<int>(blockIdx.x) * (MODE == kGateUp ? kCols / 2 : kCols);
  extern __shared__ __align__(16) unsigned char smem[];
  unsigned char* sb = smem;                                                      // [kStages][kBStage]
  float* sa = reinterpret_cast<float*>(smem + kStages * kBStage<KIND>);          // [kStages][kRows][kAStride]
  float* ss = reinterpret_cast<float*>(smem + kStages * (kBStage<KIND> + kAStage));  // [kStages][4 kCols]
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5, g = lane >> 2, q = lane & 3;
  const int wr = warp / kWarpCols, wc = warp % kWarpCols;

  // The matrix and column of weight row w of the tile (gate/up: warp wc's kWarpW / 2 gate rows then
  // the up rows of the same output columns); null past the weight's columns. (The dense matrix is read
  // from the parameters by field: its address would copy the parameters to local memory.)
  struct RowRef {
    const uint8_t* codes = nullptr;  // the row's codes
    const float* scales = nullptr;   // the row's scales [groups]
    const float* zeros = nullptr;
    int groups = 0;
  };
  auto weight_row = [&](int w) -> RowRef {
    RowRef r;
    int col;
    const QuantMatrix* mat = nullptr;
    if constexpr (MODE == kGateUp) {
      const int within = w % kWarpW;
      col = col0 + kWarpW / 2 * (w / kWarpW) + within % (kWarpW / 2);
      mat = &p.table[(within >= kWarpW / 2 ? p.E : 0) + unit.x];
    } else {
      col = col0 + w;
      if constexpr (MODE == kDown) mat = &p.table[2 * p.E + unit.x];
    }
    if (col >= n) return r;
    const uint8_t* codes = mat ? mat->codes : p.dense.codes;
    const float* scales = mat ? mat->scales : p.dense.scales;
    const float* zeros = mat ? mat->zeros : p.dense.zeros;
    const int64_t row_bytes = mat ? mat->row_bytes : p.dense.row_bytes;
    r.groups = mat ? mat->groups : p.dense.groups;
    r.codes = codes + static_cast<int64_t>(col) * row_bytes;
    r.scales = scales + static_cast<int64_t>(col) * r.groups;
    if (p.zeros) r.zeros = zeros + static_cast<int64_t>(col) * r.groups;
    return r;
  };

  // This thread's copies: activation rows (t >> 4) + 8 i at float4 t & 15; code units of weight rows
  // t / kUnits + (kThreads / kUnits) i at unit t % kUnits; the scales (and zero points) of weight row t.
  constexpr int kUnits = kBRowBytes<KIND> / 16;
  constexpr int kBCopies = kCols * kUnits / kThreads;
  const float* arow[kACopies];
#pragma unroll
  for (int i = 0; i < kACopies; ++i) {
    const int r = (t >> 4) + 8 * i;
    arow[i] = nullptr;
    if (r < unit.z) {
      int64_t src;
      if constexpr (MODE == kGateUp) src = p.order[unit.y + r] / p.top_k;
      else src = unit.y + r;
      arow[i] = p.in + src * K;
    }
  }
  const uint8_t* brow[kBCopies];
#pragma unroll
  for (int i = 0; i < kBCopies; ++i) brow[i] = weight_row(t / kUnits + (kThreads / kUnits) * i).codes;
  const RowRef own = weight_row(t);
  const float* srow = own.scales;
  const float* zrow = own.zeros;
  const int groups = own.groups;
  const float* fill_src = p.in;  // a valid address for the zero-filling copies
  // This block's k range: stages s0 .. s0 + stages - 1 (k_split is a multiple of kKt).
  const int k_end = min(K, (static_cast<int>(blockIdx.z) + 1) * p.k_split);
  const int s0 = static_cast<int>(blockIdx.z) * p.k_split / kKt;
  const int stages = (k_end + kKt - 1) / kKt - s0;
  auto issue = [&](int rel) {
    const int s = s0 + rel;
    const int k0 = s * kKt;
    unsigned char* b = sb + (s % kStages) * kBStage<KIND>;
    float* a = sa + (s % kStages) * (kAStage / 4);
    float* sc = ss + (s % kStages) * (kSStage / 4);
#pragma unroll
    for (int i = 0; i < kACopies; ++i) {
      const int ca = t & 15, ka = k0 + 4 * ca;
      const bool ok = arow[i] && ka < k_end;
      CpAsync16(a + ((t >> 4) + 8 * i) * kAStride + 4 * ca, ok ? arow[i] + ka : fill_src, ok);
    }
#pragma unroll
    for (int i = 0; i < kBCopies; ++i) {
      const int w = t / kUnits + (kThreads / kUnits) * i, u = t % kUnits;
      const int64_t byte = (KIND == kInt4 ? k0 / 2 : k0) + 16 * u;
      const bool ok = brow[i] && (KIND == kInt4 ? 2 * byte : byte) < k_end;
      CpAsync16(b + QuantUnitOffset<KIND>(w, u), ok ? brow[i] + byte : reinterpret_cast<const uint8_t*>(fill_src), ok);
    }
    const int g0 = k0 / p.group;
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const bool ok = srow && g0 + j < groups;
      CpAsync4(sc + 2 * t + j, ok ? srow + g0 + j : fill_src, ok);
      if (p.zeros) CpAsync4(sc + 2 * kCols + 2 * t + j, ok ? zrow + g0 + j : fill_src, ok);
    }
  };

  // Rows of this warp with activations: m16 tiles 0 .. mts - 1 (warp-uniform).
  const int mts = min(kMt, max(0, (unit.z - 16 * kMt * wr + 15) / 16));
  float acc[kMt][kJ][4], part[kMt][kJ][4], xsum[kMt][4];
#pragma unroll
  for (int mt = 0; mt < kMt; ++mt) {
#pragma unroll
    for (int j = 0; j < kJ; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][j][e] = part[mt][j][e] = 0.0f;
#pragma unroll
    for (int e = 0; e < 4; ++e) xsum[mt][e] = 0.0f;
  }
  const uint32_t one = 0x3F803F80u;  // bf16 pair (1, 1)
  const uint4 ones = make_uint4(one, one, one, one);

  for (int rel = 0; rel < kStages - 1; ++rel) {
    if (rel < stages) issue(rel);
    CpAsyncCommit();
  }
  for (int rel = 0; rel < stages; ++rel) {
    CpAsyncWait<kStages - 2>();  // this thread's copies of this stage have landed
    __syncthreads();             // everyone's have, and everyone is done with the last stage's buffer
    if (rel + kStages - 1 < stages) issue(rel + kStages - 1);
    CpAsyncCommit();
    if (mts == 0) continue;
    const int s = s0 + rel;
    const unsigned char* b = sb + (s % kStages) * kBStage<KIND>;
    const float* a = sa + (s % kStages) * (kAStage / 4) + (16 * kMt * wr + g) * kAStride + 8 * q;
    const float* sc = ss + (s % kStages) * (kSStage / 4);
#pragma unroll
    for (int kk = 0; kk < kKt / 32; ++kk) {
      const int kc = s * kKt + 32 * kk;
      if (kc >= k_end) break;  // block-uniform: K is a multiple of 32
      uint32_t hi[kMt][2][4], lo[kMt][2][4];
#pragma unroll
      for (int mt = 0; mt < kMt; ++mt)
        if (mt < mts) {
          const float* a0 = a + 16 * mt * kAStride + 32 * kk;
          LoadA<KIND>(a0, a0 + 8 * kAStride, hi[mt], lo[mt]);
        }
#pragma unroll
      for (int j = 0; j < kJ; ++j) {
        const uint4 bw = LoadCodes<KIND>(b, kWarpW * wc + 8 * j + g, kk, q);
#pragma unroll
        for (int mt = 0; mt < kMt; ++mt)
          if (mt < mts) MmaChunk(part[mt][j], hi[mt], lo[mt], bw, p.exact);
      }
      if (p.zeros) {
        float ones_acc[kMt][4];
#pragma unroll
        for (int mt = 0; mt < kMt; ++mt) {
          ones_acc[mt][0] = ones_acc[mt][1] = ones_acc[mt][2] = ones_acc[mt][3] = 0.0f;
          if (mt < mts) MmaChunk(ones_acc[mt], hi[mt], lo[mt], ones, p.exact);
#pragma unroll
          for (int e = 0; e < 4; ++e) xsum[mt][e] += ones_acc[mt][e];
        }
      }
      // The end of a scale group (or of the block's k): scale this group's sums into the result.
      if ((kc + 32) % p.group == 0 || kc + 32 >= k_end) {
        const int gi = kc / p.group - (s * kKt) / p.group;  // 0 or 1: the stage's staged groups
#pragma unroll
        for (int j = 0; j < kJ; ++j)
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            const int w = kWarpW * wc + 8 * j + 2 * q + c;
            const float sv = sc[2 * w + gi];
            const float zv = p.zeros ? sc[2 * kCols + 2 * w + gi] : 0.0f;
#pragma unroll
            for (int mt = 0; mt < kMt; ++mt)
#pragma unroll
              for (int e = c; e < 4; e += 2) {
                acc[mt][j][e] += sv * (part[mt][j][e] - zv * xsum[mt][e]);
                part[mt][j][e] = 0.0f;
              }
          }
#pragma unroll
        for (int mt = 0; mt < kMt; ++mt)
#pragma unroll
          for (int e = 0; e < 4; ++e) xsum[mt][e] = 0.0f;
      }
    }
  }
  CpAsyncWait<0>();

  // Accumulator (mt, j) element e: activation row 16 kMt wr + 16 mt + g (+ 8 for e >= 2), weight
  // row kWarpW wc + 8 j + 2 q + (e & 1).
#pragma unroll
  for (int mt = 0; mt < kMt; ++mt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = 16 * kMt * wr + 16 * mt + g + (e >= 2 ? 8 : 0);
      if (r >= unit.z) continue;
      const int64_t pos = unit.y + r;
      if constexpr (MODE == kGateUp) {
        const float rs = p.row_scale ? p.row_scale[p.order[pos] / p.top_k] : 1.0f;
#pragma unroll
        for (int j = 0; j < kJ / 2; ++j) {
          const int col = col0 + kWarpW / 2 * wc + 8 * j + 2 * q + (e & 1);
          if (col < n) p.out[pos * n + col] = GatedActF(acc[mt][j][e] * rs, acc[mt][j + kJ / 2][e] * rs, p.gelu);
        }
      } else {
        // The row's factor first, then (kDown) the routing weight: the CPU's order of the two.
        const float rs = p.row_scale ? p.row_scale[pos] : 1.0f;
        float wgt = 1.0f;
        int64_t dst = pos;
        if constexpr (MODE == kDown) {
          dst = p.order[pos];
          wgt = p.weights[dst];
        }
#pragma unroll
        for (int j = 0; j < kJ; ++j) {
          const int col = col0 + kWarpW * wc + 8 * j + 2 * q + (e & 1);
          if (col >= n) continue;
          if (MODE == kDense && p.partial) {
            p.partial[(static_cast<int64_t>(blockIdx.z) * p.m + dst) * n + col] = acc[mt][j][e] * rs;
            continue;
          }
          float* y = p.out + dst * n + col;
          *y = (MODE == kDense && p.accumulate ? *y : 0.0f) + acc[mt][j][e] * rs * wgt;
        }
      }
    }
}

// y[i] (+)= the sum over z of partial[z][i], in z order.
__global__ void SumPartialsKernel(const float* partial, int splits, int64_t size, bool accumulate, float* y) {
  GridDependencyWait();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < size;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float v = accumulate ? y[i] : 0.0f;
    for (int z = 0; z < splits; ++z) v += partial[z * size + i];
    y[i] = v;
  }
}

// Columns of k a block of a dense product sums: all of k, unless the (row, column) tiles fill less
// than two blocks an SM; then k is split so that they do, each split at least 4 stages long.
int KSplit(int64_t m, int64_t n, int64_t k) {
  const int64_t tiles = ((n + kCols - 1) / kCols) * ((m + kQuantMmaRows - 1) / kQuantMmaRows);
  const int64_t splits = std::min<int64_t>(2 * DeviceSmCount() / tiles, k / (4 * kKt));
  if (splits <= 1) return static_cast<int>(k);
  return static_cast<int>(((k + splits - 1) / splits + kKt - 1) / kKt * kKt);
}

template <int MODE>
void Launch(int8_t kind, int rows, const Args& args, int64_t blocks_y, cudaStream_t s) {
  const int64_t out_cols = MODE == kGateUp ? kCols / 2 : kCols;
  const dim3 grid(static_cast<unsigned>((args.n + out_cols - 1) / out_cols), static_cast<unsigned>(blocks_y),
                  static_cast<unsigned>((args.K + args.k_split - 1) / args.k_split));
  auto go = [&](auto kernel, int smem) {
    KernelResidency(kernel, smem, kThreads);  // sets the dynamic shared memory limit (once per device)
    LaunchKernel(kernel, grid, kThreads, smem, s)(args);
  };
  constexpr int F = kQuantMmaFewRows, R = kQuantMmaRows;
  if (kind == kInt4)
    rows == F ? go(QuantMmaKernel<kInt4, MODE, F>, kSmem<kInt4, F>) : go(QuantMmaKernel<kInt4, MODE, R>, kSmem<kInt4, R>);
  else if (kind == kInt8)
    rows == F ? go(QuantMmaKernel<kInt8, MODE, F>, kSmem<kInt8, F>) : go(QuantMmaKernel<kInt8, MODE, R>, kSmem<kInt8, R>);
  else
    rows == F ? go(QuantMmaKernel<kFp8, MODE, F>, kSmem<kFp8, F>) : go(QuantMmaKernel<kFp8, MODE, R>, kSmem<kFp8, R>);
}

}  // namespace

bool QuantMmaOk(const QuantMatrix& w, int64_t k) {
  if (w.kind < kFp8 || w.kind > kInt4 || k % 32 != 0 || w.group <= 0) return false;
  if (w.group % 32 != 0 && w.group < k) return false;  // a scale group ends inside a 32-wide chunk
  return (reinterpret_cast<uintptr_t>(w.codes) & 15u) == 0 && w.row_bytes % 16 == 0;
}

int64_t QuantGemmMmaScratch(int64_t m, int64_t n, int64_t k) {
  const int64_t splits = (k + KSplit(m, n, k) - 1) / KSplit(m, n, k);
  return splits > 1 ? splits * m * n : 0;
}

void QuantGemmMma(const float* x, int64_t m, int64_t k, const QuantMatrix* w, int64_t n, float* y, bool accumulate,
                  bool exact, float* scratch, const float* row_scale, cudaStream_t s) {
  if (m <= 0 || n <= 0) return;
  Args a{};
  a.in = x, a.K = static_cast<int>(k), a.n = static_cast<int>(n), a.top_k = 1, a.m = m;
  a.dense = *w, a.group = w->group, a.zeros = w->zeros != nullptr;
  a.accumulate = accumulate, a.exact = exact, a.out = y, a.row_scale = row_scale;
  a.k_split = scratch ? KSplit(m, n, k) : static_cast<int>(k);
  const int splits = static_cast<int>((k + a.k_split - 1) / a.k_split);
  if (splits > 1) a.partial = scratch;
  const int rows = m <= kQuantMmaFewRows ? kQuantMmaFewRows : kQuantMmaRows;
  Launch<kDense>(w->kind, rows, a, (m + rows - 1) / rows, s);
  if (splits > 1) {
    const int64_t size = m * n;
    const int blocks = static_cast<int>(std::min<int64_t>((size + 255) / 256, 4 * DeviceSmCount()));
    LaunchKernel(SumPartialsKernel, blocks, 256, 0, s)(static_cast<const float*>(scratch), splits, size, accumulate,
                                                        y);
  }
}

int QuantMoeMmaUnitRows(int64_t slots, int64_t num_experts) {
  return slots <= kQuantMmaFewRows * num_experts ? kQuantMmaFewRows : kQuantMmaRows;
}

void QuantMoeMmaGateUp(int unit_rows, const float* x, int64_t hidden, int64_t k, const int32_t* order, const int4* units,
                       const int32_t* num_units, int64_t max_units, const QuantMatrix* experts,
                       const QuantMatrix* first, int64_t E, int64_t inter, float* act, bool exact, bool gelu,
                       const float* row_scale, cudaStream_t s) {
  if (max_units <= 0) return;
  Args a{};
  a.in = x, a.K = static_cast<int>(hidden), a.n = static_cast<int>(inter), a.top_k = static_cast<int>(k);
  a.order = order, a.units = units, a.num_units = num_units, a.table = experts, a.E = E;
  a.group = first->group, a.zeros = first->zeros != nullptr, a.exact = exact, a.gelu = gelu, a.out = act;
  a.row_scale = row_scale;
  a.k_split = a.K;
  Launch<kGateUp>(first->kind, unit_rows, a, max_units, s);
}

void QuantMoeMmaDown(int unit_rows, const float* act, int64_t inter, const int32_t* order, const int4* units,
                     const int32_t* num_units, int64_t max_units, const float* weights, const QuantMatrix* experts,
                     const QuantMatrix* first, int64_t E, int64_t hidden, float* slot_out, bool exact,
                     const float* row_scale, cudaStream_t s) {
  if (max_units <= 0) return;
  Args a{};
  a.in = act, a.K = static_cast<int>(inter), a.n = static_cast<int>(hidden), a.top_k = 1;
  a.order = order, a.units = units, a.num_units = num_units, a.weights = weights, a.table = experts, a.E = E;
  a.group = first->group, a.zeros = first->zeros != nullptr, a.exact = exact, a.out = slot_out;
  a.row_scale = row_scale;
  a.k_split = a.K;
  Launch<kDown>(first->kind, unit_rows, a, max_units, s);
}

}  // namespace tessera::cuda
