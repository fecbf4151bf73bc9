// tessera cuda backend: dense products of many rows (prompt chunks, canvases) with quantized weights
// on Hopper's warpgroup MMA (sm_90a builds). Why: the mma.sync kernels of cuda_quant_mma.cu decode
// each lane's codes and split its activations before every MMA, two blocks of 4 warps an SM: ncu
// (H100, 4K x 4096 x 2048 fp8) 0.41 instructions a cycle a scheduler, the SM 40% busy, ~56 TFLOP/s.
//
// Here the roles are swapped: y^T = W x^T. A warpgroup's 64 weight rows are the wgmma's A operand,
// decoded from codes staged in shared memory straight into registers (LoadCodes: each warp's 16
// rows, a lane's rows g and g + 8), and 128 activation rows are the B
// operand, read by the wgmma itself from shared memory: QuantSplitActivations writes them once as bf16
// hi and lo, each 32-wide chunk permuted for the codes' fragment order (PermutedK), and TMA brings
// boxes of 64 k x 128 rows in the 128-byte swizzle. A stage is 64 of k: four k16 steps of one m64n128
// wgmma (two with f32 activations: hi and lo) into a group accumulator, scaled into the result in f32
// at the end of each scale group (group % 64 == 0, or one a row: at the end), as the mma.sync kernels
// do. Symmetric codes only (no zero points: those stay on cuda_quant_mma.cu). bf16 weights come as
// kind kBf16Rows (cuda_quant.h): staged as stored, no scales (a prompt's bf16 experts:
// cuda_backend_moe.cpp).
//
// W8A8 (fp8 / int8 weights whose inputs are rounded to codes per token): the input codes are exact
// in bf16, so they take the bf16 form above with one MMA (hi alone). Int8 ones where k is a multiple
// of 128 stay 8-bit instead (kXS8): the B tile is the codes as bytes (a TMA box of 128 k x 128 rows in
// the same swizzle), the weights' codes go into the A registers unconverted (mma.m16n8k32's 8-bit
// fragment), and each 128-k stage is four m64n128k32 s8 wgmmas with exact s32 sums: a 4K prompt of
// Qwen3-30B-A3B int8 W8A8 370 -> 258 ms (H100, 2026-12-07; 201 at two blocks an SM). The same with
// e4m3 codes (FP8 W8A8, 371 -> 257 ms) was dropped: the e4m3 wgmma's sums lost ~4e-4 of a product of
// 256 columns (the tensor core adds in reduced precision), and the experts, whose down inputs are coded from those sums, moved by
// 0.7-1.2% against the CPU (CudaQuant bound 0.4%); FP8 W8A8 takes the exact bf16 form (315 ms, 245 at
// two blocks an SM).
//
// Pipeline (as cuda_skinny_wgmma.cu's register-A form): kStages buffers, stage s + kStages - 2 loads
// while stage s is multiplied and stage s - 1's wgmmas may still run; the A registers alternate
// between two sets for that reason; a group's end waits for all wgmmas before scaling. One warpgroup
// cannot hide its own waits (barrier, mbarrier, the A fragments' loads, a group's end): the one-box
// forms run two blocks of one warpgroup an SM, the hi + lo form one block of two (GroupsOf).
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <type_traits>

#include "backend/cuda/cuda_device_util.cuh"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuda_launch.cuh"
#include "backend/cuda/cuda_mma_util.cuh"
#include "backend/cuda/cuda_quant.h"
#include "backend/cuda/cuda_quant_decode.cuh"
#include "backend/cuda/cuda_wgmma_util.cuh"

namespace tessera::cuda {

namespace {

constexpr int kTok = 128;  // activation rows of a block (the wgmma's N)
constexpr int kKt = kQuantStageK;
constexpr int kXBox = kTok * 128;  // bytes: a TMA box of 128 rows x 128 bytes (64 bf16, or 128 int8)
// The B operand's form: bf16 (hi), bf16 hi + lo (exact f32 activations), or int8 codes (int8 W8A8:
// the weights' codes go into the s8 wgmma as they are, a stage 128 of k, twice bf16's rate).
enum XForm : int { kXHi, kXHiLo, kXS8 };
template <int XF>
constexpr int kStageK = XF == kXS8 ? 128 : kKt;
// Activation bytes a stage: two boxes (hi, lo) for exact f32 activations, else one, so the one-box
// forms (bf16 activations, W8A8 codes) stage in ~80-100 KB and two blocks share an SM.
template <int XF>
constexpr int kXStage = XF == kXHiLo ? 2 * kXBox : kXBox;
// Warpgroups a block, each its own 64 weight rows (the wgmma's M) on the block's one B tile: two for
// the hi + lo form, whose two boxes a stage they then share (a 4K prompt with f32 activations, bf16
// experts moved off the tiled kernels: 293 -> 274 ms, fp8 294 -> 273, H100), one for the one-box forms,
// which lost with two (bf16 activations 236 -> 261 ms) and run two blocks an SM instead.
constexpr int GroupsOf(int xf) { return xf == kXHiLo ? 2 : 1; }
// Weight rows and threads of a block of form xf (the kernel's templates and the host's grids).
constexpr int WRowsOf(int xf) { return 64 * GroupsOf(xf); }
constexpr int ThreadsOf(int xf) { return 128 * GroupsOf(xf); }
template <int XF>
constexpr int kWRowsOf = WRowsOf(XF);
template <int XF>
constexpr int kThreadsOf = ThreadsOf(XF);
// Stages in flight (one-box forms ~81-100 KB: two blocks an SM; hi + lo 160-194 KB: one block of two
// warpgroups).
constexpr int kStages = 4;
template <int8_t KIND, int XF>
constexpr int kRowStage = XF == kXS8 ? 128 : kBRowBytes<KIND>;  // code bytes of a weight row a stage
template <int8_t KIND>
constexpr bool kScaled = KIND != kBf16Rows;  // bf16 weight rows have no scales
template <int8_t KIND, int XF>
constexpr int kCStage = kWRowsOf<XF> * kRowStage<KIND, XF>;  // code bytes a stage
template <int XF>
constexpr int kSStage = kWRowsOf<XF> * 4;  // the stage's scale of each weight row
template <int8_t KIND, int XF>
constexpr size_t kSmem = static_cast<size_t>(kStages) * (kXStage<XF> + kCStage<KIND, XF> + kSStage<XF>) +
                         8 * kStages + 1024;

// 16-byte unit u of weight row w's 128 staged int8 codes (kXS8), swizzled so the 8 rows a
// quarter warp's fragment loads touch land on distinct banks.
__device__ __forceinline__ int Int8UnitOffset(int w, int u) { return w * 128 + ((u ^ (w & 7)) << 4); }
static_assert(kWRowsOf<kXHiLo> * kTok / kThreadsOf<kXHiLo> == kWgmmaN128Accs &&
                  kWRowsOf<kXHi> * kTok / kThreadsOf<kXHi> == kWgmmaN128Accs,
              "an m64n128 tile a warpgroup");
static_assert(kTok == kQuantWgmmaUnitRows, "a MoE unit is one B tile");

// x [rows, k] f32 (k a multiple of 32) -> hi (and lo) bf16 [rows, k], each 32-wide chunk permuted for
// `kind`. With `order`, output row pos is x's row order[pos] / top_k: a prompt's routed experts, x
// gathered in sorted order so each unit's rows are contiguous for TMA.
__global__ void SplitKernel(const float* x, const int32_t* order, int top_k, int64_t rows, int64_t k, int8_t kind,
                            uint16_t* hi, uint16_t* lo) {
  GridDependencyWait();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < rows * k;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t at = (i & ~int64_t{31}) + PermutedK(kind, static_cast<int>(i & 31));
    int64_t from = i;
    if (order) {
      const int64_t pos = i / k;
      from = static_cast<int64_t>(order[pos] / top_k) * k + (i - pos * k);
    }
    const float v = x[from];
    const __nv_bfloat16 h = __float2bfloat16_rn(v);
    hi[at] = __bfloat16_as_ushort(h);
    if (lo) lo[at] = __bfloat16_as_ushort(__float2bfloat16_rn(v - __bfloat162float(h)));
  }
}

void LaunchSplit(const float* x, const int32_t* order, int64_t top_k, int64_t rows, int64_t k, int8_t kind,
                 uint16_t* hi, uint16_t* lo, cudaStream_t s) {
  const int64_t size = rows * k;
  if (size <= 0) return;
  const int blocks = static_cast<int>(std::min<int64_t>((size + 255) / 256, 8 * DeviceSmCount()));
  LaunchKernel(SplitKernel, blocks, 256, 0, s)(x, order, static_cast<int>(top_k), rows, k, kind, hi, lo);
}

// codes [rows, k] f32 (QuantPrepareInputCodes of an int8 W8A8 weight: integers in -127..127) -> out
// [rows, k] int8, four a thread (k % 4 == 0); with `order` as SplitKernel gathers.
__global__ void PackInt8Kernel(const float* codes, const int32_t* order, int top_k, int64_t rows, int64_t k,
                                 uint32_t* out) {
  GridDependencyWait();
  const int64_t quads = rows * k / 4, kq = k / 4;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < quads;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t pos = i / kq;
    const int64_t row = order ? order[pos] / top_k : pos;
    const float4 v = reinterpret_cast<const float4*>(codes + row * k)[i - pos * kq];
    out[i] = (static_cast<uint32_t>(static_cast<int>(v.x)) & 0xffu) |
             ((static_cast<uint32_t>(static_cast<int>(v.y)) & 0xffu) << 8) |
             ((static_cast<uint32_t>(static_cast<int>(v.z)) & 0xffu) << 16) |
             (static_cast<uint32_t>(static_cast<int>(v.w)) << 24);
  }
}

void LaunchPackInt8(const float* codes, const int32_t* order, int64_t top_k, int64_t rows, int64_t k, void* out,
                      cudaStream_t s) {
  const int64_t quads = rows * k / 4;
  if (quads <= 0) return;
  const int blocks = static_cast<int>(std::min<int64_t>((quads + 255) / 256, 8 * DeviceSmCount()));
  LaunchKernel(PackInt8Kernel, blocks, 256, 0, s)(codes, order, static_cast<int>(top_k), rows, k,
                                                   static_cast<uint32_t*>(out));
}

enum Mode : int { kDense, kGateUp, kDown };

// The routed experts' launches (kGateUp, kDown): units of up to kTok rows of one expert
// (MoeGroupByExpert), the B operand's rows at their sorted positions; table: [3 E] on the device.
struct MoeArgs {
  const int32_t* order = nullptr;
  const int4* units = nullptr;
  const int32_t* num_units = nullptr;
  const float* weights = nullptr;  // kDown: routing weights by pair
  const QuantMatrix* table = nullptr;
  int64_t E = 0;
  uint16_t* act_hi = nullptr;  // kGateUp: act [pairs, n] split for the down matrices (act_kind)
  uint16_t* act_lo = nullptr;
  int8_t act_kind = 0;
  bool gelu = false;
  // W8A8 (B holds x's codes): kGateUp scales the sums by their token's factor x_scale[order / top_k]
  // and writes act as f32 [pairs, n] in sorted order (act_f32), for the down's per-pair coding.
  const float* x_scale = nullptr;
  int top_k = 1;
  float* act_f32 = nullptr;
};

// A block: weight rows (A) x kTok activation rows (B). kDense and kDown: weight rows row0 .. + 63 of
// one matrix. kGateUp: 32 output columns c0 ..: warp w's 16 rows are the gate rows of columns c0 + 8 w
// .. + 7 then the up rows of the same columns, so a lane holds gate (row g) and up (row g + 8) of one
// column and token and writes silu(g) * u (or gelu-tanh) itself.
template <int8_t KIND, int XF, int MODE>
__global__ void __launch_bounds__(kThreadsOf<XF>, 1)
    QuantWgmmaKernel(const __grid_constant__ CUtensorMap xmap, const QuantMatrix w, int m, int n, int K, int group,
                     float* y, bool accumulate, const float* row_scale, const MoeArgs moe) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int kWRows = kWRowsOf<XF>, kThreads = kThreadsOf<XF>;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const auto raw = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  unsigned char* smem = smem_raw + ((1024 - (raw & 1023)) & 1023);  // TMA's swizzled tiles: 1024-aligned
  unsigned char* sx = smem;                                         // [ST][hi, lo][128 rows][128 B]
  unsigned char* sc = sx + kStages * kXStage<XF>;                   // [ST][kWRows rows][kRowStage]
  float* ss = reinterpret_cast<float*>(sc + kStages * kCStage<KIND, XF>);  // [ST][kWRows]
  const auto bars = static_cast<uint32_t>(__cvta_generic_to_shared(ss + kStages * kWRows));  // [ST] mbarriers

  const int t = threadIdx.x, warp = t >> 5, g = (t & 31) >> 2, q = t & 3;
  int4 unit = make_int4(0, static_cast<int>(blockIdx.y) * kTok, 0, 0);  // (expert, first row of B, rows)
  if constexpr (MODE == kDense) {
    unit.z = min(kTok, m - unit.y);
  } else {
    if (static_cast<int32_t>(blockIdx.y) >= *moe.num_units) return;
    unit = moe.units[blockIdx.y];
  }
  const int tok0 = unit.y;
  const int row0 = static_cast<int>(blockIdx.x) * (MODE == kGateUp ? kWRows / 2 : kWRows);
  constexpr bool kExact = XF == kXHiLo;
  constexpr int KT = kStageK<XF>;
  const int stages = (K + KT - 1) / KT;

  // Staged weight row r: its matrix and output column (-1 past n).
  auto weight_row = [&](int r, int& col) -> const QuantMatrix* {
    if constexpr (MODE == kGateUp) {
      const int within = r & 15;
      col = row0 + 8 * (r >> 4) + (within & 7);
      if (col >= n) col = -1;
      return &moe.table[(within >= 8 ? moe.E : 0) + unit.x];
    } else {
      col = row0 + r < n ? row0 + r : -1;
      if constexpr (MODE == kDown) return &moe.table[2 * moe.E + unit.x];
      return nullptr;
    }
  };
  // This thread's code copies: 16-byte unit t % kUnits of rows t / kUnits + (kThreads / kUnits) i.
  constexpr int kUnits = kRowStage<KIND, XF> / 16;
  constexpr int kCopies = kWRows * kUnits / kThreads;
  const uint8_t* crow[kCopies];
#pragma unroll
  for (int i = 0; i < kCopies; ++i) {
    int col;
    const QuantMatrix* mat = weight_row(t / kUnits + (kThreads / kUnits) * i, col);
    const uint8_t* codes = mat ? mat->codes : w.codes;
    const int64_t row_bytes = mat ? mat->row_bytes : w.row_bytes;
    crow[i] = col >= 0 ? codes + static_cast<int64_t>(col) * row_bytes : nullptr;
  }
  const float* srow = nullptr;
  int groups = 0;
  if (kScaled<KIND> && t < kWRows) {
    int col;
    const QuantMatrix* mat = weight_row(t, col);
    groups = mat ? mat->groups : w.groups;
    if (col >= 0) srow = (mat ? mat->scales : w.scales) + static_cast<int64_t>(col) * groups;
  }

  // Stage s into buffer s % ST: the codes and scales by every thread (cp.async, one group), the
  // activations by thread 0 (TMA, completing on the stage's mbarrier; rows and k past x as zeros).
  auto issue = [&](int s) {
    const int k0 = s * KT;
    unsigned char* c = sc + (s % kStages) * kCStage<KIND, XF>;
#pragma unroll
    for (int i = 0; i < kCopies; ++i) {
      const int wr = t / kUnits + (kThreads / kUnits) * i, u = t % kUnits;
      // The unit's first k (k0 + 16 u k's per byte) and its byte in the row.
      const int64_t byte = static_cast<int64_t>(k0) * kRowStage<KIND, XF> / KT + 16 * u;
      const bool ok = crow[i] && k0 + 16 * u * KT / kRowStage<KIND, XF> < K;
      const int at = XF == kXS8 ? Int8UnitOffset(wr, u) : QuantUnitOffset<KIND>(wr, u);
      CpAsync16(c + at, ok ? crow[i] + byte : w.codes, ok);
    }
    if (kScaled<KIND> && t < kWRows) {
      const bool ok = srow != nullptr && k0 / group < groups;
      CpAsync4(ss + (s % kStages) * kWRows + t, ok ? srow + k0 / group : w.scales, ok);
    }
    if (t == 0) {
      const uint32_t bar = bars + 8 * (s % kStages);
      const auto a = static_cast<uint32_t>(__cvta_generic_to_shared(sx + (s % kStages) * kXStage<XF>));
      MbarExpectTx(bar, kXStage<XF>);
      TmaLoad3d(a, &xmap, k0, tok0, 0, bar);
      if constexpr (kExact) TmaLoad3d(a + kXBox, &xmap, k0, tok0, 1, bar);
    }
  };

  // A scale group's sums (s32 for int8 codes: exact), folded into acc in f32 at the group's end.
  using Part = std::conditional_t<XF == kXS8, int32_t, float>;
  Part part[kWgmmaN128Accs];
  float acc[kWgmmaN128Accs];
#pragma unroll
  for (int i = 0; i < kWgmmaN128Accs; ++i) part[i] = 0, acc[i] = 0.0f;

  if (t == 0) {
    for (int i = 0; i < kStages; ++i) MbarInit(bars + 8 * i, 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    FenceProxyAsync();
  }
  __syncthreads();       // the mbarriers are initialised before any thread waits on them
  GridDependencyWait();  // x's split is the previous kernel's output
  for (int s = 0; s < kStages - 2; ++s) {
    if (s < stages) issue(s);
    CpAsyncCommit();
  }

  // Stage s with its A fragments in a (a register set the wgmmas of stage s - 2 read: complete, as
  // every stage ends waiting for all but its own group).
  auto stage = [&](int s, uint32_t(&a)[4][4]) {
    CpAsyncWait<kStages - 3>();  // this thread's codes and scales of stage s have landed
    __syncthreads();             // everyone's have; stage s - 2's buffers are free
    MbarWait(bars + 8 * (s % kStages), (s / kStages) & 1);
    if (s + kStages - 2 < stages) issue(s + kStages - 2);
    CpAsyncCommit();
    const unsigned char* c = sc + (s % kStages) * kCStage<KIND, XF>;
    if constexpr (XF == kXS8) {
      // k32 step j's A fragment (as mma.m16n8k32's): rows g and g + 8, codes 4q..4q+3 and 16+4q.. of
      // the step's 32, i.e. 16-byte units 2j and 2j + 1 of the 128-byte staged row.
      const int r0 = 16 * warp + g, r1 = r0 + 8;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        a[j][0] = *reinterpret_cast<const uint32_t*>(c + Int8UnitOffset(r0, 2 * j) + 4 * q);
        a[j][1] = *reinterpret_cast<const uint32_t*>(c + Int8UnitOffset(r1, 2 * j) + 4 * q);
        a[j][2] = *reinterpret_cast<const uint32_t*>(c + Int8UnitOffset(r0, 2 * j + 1) + 4 * q);
        a[j][3] = *reinterpret_cast<const uint32_t*>(c + Int8UnitOffset(r1, 2 * j + 1) + 4 * q);
      }
    } else {
#pragma unroll
      for (int kk = 0; kk < 2; ++kk) {
        const uint4 r0 = LoadCodes<KIND>(c, 16 * warp + g, kk, q), r1 = LoadCodes<KIND>(c, 16 * warp + 8 + g, kk, q);
        a[2 * kk][0] = r0.x, a[2 * kk][1] = r1.x, a[2 * kk][2] = r0.y, a[2 * kk][3] = r1.y;
        a[2 * kk + 1][0] = r0.z, a[2 * kk + 1][1] = r1.z, a[2 * kk + 1][2] = r0.w, a[2 * kk + 1][3] = r1.w;
      }
    }
    WgmmaFence();  // the A registers (and the zeroed or scaled accumulators) before the wgmmas read them
    const auto x = static_cast<uint32_t>(__cvta_generic_to_shared(sx + (s % kStages) * kXStage<XF>));
#pragma unroll
    for (int j = 0; j < 4; ++j) {  // k step j starts 32 j bytes into each 128-byte row
      if constexpr (XF == kXS8) {
        Wgmma64x128S8(part, a[j], WgmmaDescriptor(x + 32 * j));
      } else {
        Wgmma64x128(part, a[j], WgmmaDescriptor(x + 32 * j));
        if constexpr (kExact) Wgmma64x128(part, a[j], WgmmaDescriptor(x + kXBox + 32 * j));
      }
    }
    WgmmaCommit();
    const int k_end = (s + 1) * KT;
    if (k_end % group != 0 && k_end < K) {
      WgmmaWait<1>();
      return;
    }
    // The end of a scale group: every wgmma done, this group's sums scaled into the result. Element i
    // of the tile: weight row 16 warp + g (+ 8 for i % 4 >= 2), activation row 8 (i / 4) + 2 q (+ 1).
    WgmmaWait<0>();
#pragma unroll
    for (int i = 0; i < kWgmmaN128Accs; ++i) {  // read after the wait
      if constexpr (XF == kXS8)
        asm volatile("" : "+r"(part[i])::"memory");
      else
        asm volatile("" : "+f"(part[i])::"memory");
    }
    const float* scale = ss + (s % kStages) * kWRows + 16 * warp + g;
    const float s0 = kScaled<KIND> ? scale[0] : 1.0f, s8 = kScaled<KIND> ? scale[8] : 1.0f;
#pragma unroll
    for (int i = 0; i < kWgmmaN128Accs; ++i) {
      acc[i] += ((i & 2) ? s8 : s0) * static_cast<float>(part[i]);
      // kXS8 takes one scale a row: this is the last stage. (Zeroing s32 sums here, for a next group,
      // made ptxas serialize the wgmmas: C7511, "insufficient register resources".)
      if constexpr (XF != kXS8) part[i] = 0;
    }
  };
  uint32_t a0[4][4], a1[4][4];
  int s = 0;
  for (; s + 1 < stages; s += 2) {
    stage(s, a0);
    stage(s + 1, a1);
  }
  if (s < stages) stage(s, a0);
  WgmmaWait<0>();
  CpAsyncWait<0>();

  // Element i: weight row 16 warp + g (+ 8 for i % 4 >= 2), activation row 8 (i / 4) + 2 q (+ 1).
  if constexpr (MODE == kGateUp) {
    const int col = row0 + 8 * warp + g;
#pragma unroll
    for (int i = 0; i < kWgmmaN128Accs; ++i) {
      if (i & 2) continue;  // (gate, up) = elements i and i + 2
      const int tok = 8 * (i >> 2) + 2 * q + (i & 1);
      if (col >= n || tok >= unit.z) continue;
      if (moe.act_f32) {
        const float f = moe.x_scale[moe.order[tok0 + tok] / moe.top_k];
        moe.act_f32[static_cast<int64_t>(tok0 + tok) * n + col] = GatedActF(acc[i] * f, acc[i + 2] * f, moe.gelu);
        continue;
      }
      const int64_t at = static_cast<int64_t>(tok0 + tok) * n + (col & ~31) + PermutedK(moe.act_kind, col & 31);
      const float v = GatedActF(acc[i], acc[i + 2], moe.gelu);
      const __nv_bfloat16 h = __float2bfloat16_rn(v);
      moe.act_hi[at] = __bfloat16_as_ushort(h);
      if (moe.act_lo) moe.act_lo[at] = __bfloat16_as_ushort(__float2bfloat16_rn(v - __bfloat162float(h)));
    }
  } else {
#pragma unroll
    for (int i = 0; i < kWgmmaN128Accs; ++i) {
      const int r = row0 + 16 * warp + g + ((i & 2) ? 8 : 0);
      const int tok = 8 * (i >> 2) + 2 * q + (i & 1);
      if (r >= n || tok >= unit.z) continue;
      if constexpr (MODE == kDown) {
        const int32_t pair = moe.order[tok0 + tok];
        const float f = row_scale ? row_scale[tok0 + tok] : 1.0f;  // W8A8: the pair's factor
        y[static_cast<int64_t>(pair) * n + r] = acc[i] * f * moe.weights[pair];
      } else {
        float* out = y + static_cast<int64_t>(tok0 + tok) * n + r;
        *out = (accumulate ? *out : 0.0f) + (row_scale ? acc[i] * row_scale[tok0 + tok] : acc[i]);
      }
    }
  }
#else
  __trap();  // not built for sm_90a: QuantWgmmaOk is false and nothing launches this
#endif
}

}  // namespace

void QuantSplitActivations(const float* x, int64_t rows, int64_t k, int8_t kind, uint16_t* hi, uint16_t* lo,
                           cudaStream_t s) {
  LaunchSplit(x, nullptr, 1, rows, k, kind, hi, lo, s);
}

bool Bf16WgmmaOk(int64_t k) {
#if defined(TESSERA_CUDA_SM90A)
  return k % kKt == 0 && TensorMapEncoderAvailable();
#else
  (void)k;
  return false;
#endif
}

bool QuantWgmmaOk(const QuantMatrix& w, int64_t m, int64_t k) {
#if defined(TESSERA_CUDA_SM90A)
  return m >= kQuantWgmmaMinRows && QuantMmaOk(w, k) && w.zeros == nullptr && k % kKt == 0 &&
         (w.group % kKt == 0 || w.group >= k) && TensorMapEncoderAvailable();
#else
  (void)w, (void)m, (void)k;
  return false;
#endif
}

namespace {

// The tensor map of an activation split [parts][rows][k] bf16 in boxes of 64 k x kTok rows x 1, or
// (int8) of int8 codes [rows][k] in boxes of 128 k x kTok rows.
bool SplitMap(const void* split, int64_t rows, int64_t k, int parts, bool int8, CUtensorMap* map) {
  const cuuint64_t elem = int8 ? 1 : 2;
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(k), static_cast<cuuint64_t>(rows),
                              static_cast<cuuint64_t>(parts)};
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(k) * elem, static_cast<cuuint64_t>(rows * k) * elem};
  const cuuint32_t box[3] = {static_cast<cuuint32_t>(128 / elem), kTok, 1};
  return EncodeSwizzled128(map, int8 ? CU_TENSOR_MAP_DATA_TYPE_UINT8 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, split,
                           dims, strides, box);
}

// Whether an int8 W8A8 matrix of k columns multiplies on the s8 wgmma, its inputs as int8 codes:
// stages of 128 k, one scale a row (the published int8 W8A8 schemes' per-channel weights).
bool S8WgmmaOk(const QuantMatrix& w, int64_t k) { return w.kind == kInt8 && w.act != 0 && k % 128 == 0 && w.group >= k; }

template <int MODE>
void LaunchWgmma(const CUtensorMap& map, const QuantMatrix& w, int64_t m, int64_t n, int64_t k, float* y,
                 bool accumulate, const float* row_scale, const MoeArgs& moe, int xf, dim3 grid, cudaStream_t s) {
  const int threads = ThreadsOf(xf);
  auto go = [&](auto kernel, size_t smem) {
    KernelResidency(kernel, smem, threads);  // sets the dynamic shared memory limit (once per device)
    LaunchKernel(kernel, grid, threads, smem, s)(map, w, static_cast<int>(m), static_cast<int>(n),
                                                  static_cast<int>(k),
                                                  static_cast<int>(std::min<int64_t>(w.group, k)), y,
                                                  accumulate, row_scale, moe);
  };
  const bool lo = xf == kXHiLo;
  if (xf == kXS8)
    go(QuantWgmmaKernel<kInt8, kXS8, MODE>, kSmem<kInt8, kXS8>);
  else if (w.kind == kInt4)
    lo ? go(QuantWgmmaKernel<kInt4, kXHiLo, MODE>, kSmem<kInt4, kXHiLo>)
       : go(QuantWgmmaKernel<kInt4, kXHi, MODE>, kSmem<kInt4, kXHi>);
  else if (w.kind == kInt8)
    lo ? go(QuantWgmmaKernel<kInt8, kXHiLo, MODE>, kSmem<kInt8, kXHiLo>)
       : go(QuantWgmmaKernel<kInt8, kXHi, MODE>, kSmem<kInt8, kXHi>);
  else if (w.kind == kBf16Rows) {
    // Experts only: as dense products these lost to cuBLASLt (not built).
    if constexpr (MODE != kDense)
      lo ? go(QuantWgmmaKernel<kBf16Rows, kXHiLo, MODE>, kSmem<kBf16Rows, kXHiLo>)
         : go(QuantWgmmaKernel<kBf16Rows, kXHi, MODE>, kSmem<kBf16Rows, kXHi>);
  } else
    lo ? go(QuantWgmmaKernel<kFp8, kXHiLo, MODE>, kSmem<kFp8, kXHiLo>)
       : go(QuantWgmmaKernel<kFp8, kXHi, MODE>, kSmem<kFp8, kXHi>);
}

}  // namespace

void QuantGemmWgmma(const float* x, int64_t m, int64_t k, const QuantMatrix* w, int64_t n, float* y, bool accumulate,
                    uint16_t* split, bool exact, const float* row_scale, cudaStream_t s) {
  if (m <= 0 || n <= 0) return;
  const bool int8_mma = row_scale != nullptr && S8WgmmaOk(*w, k);  // x holds W8A8 codes
  CUtensorMap map;
  if (!SplitMap(split, m, k, exact ? 2 : 1, int8_mma, &map)) {
    // A driver without cuTensorMapEncodeTiled: the mma.sync kernel (k not split: no scratch here).
    QuantGemmMma(x, m, k, w, n, y, accumulate, exact, nullptr, row_scale, s);
    return;
  }
  if (int8_mma)
    LaunchPackInt8(x, nullptr, 1, m, k, split, s);
  else
    QuantSplitActivations(x, m, k, w->kind, split, exact ? split + m * k : nullptr, s);
  const int xf = int8_mma ? kXS8 : exact ? kXHiLo : kXHi;
  const int64_t wrows = WRowsOf(xf);
  const dim3 grid(static_cast<unsigned>((n + wrows - 1) / wrows), static_cast<unsigned>((m + kTok - 1) / kTok));
  LaunchWgmma<kDense>(map, *w, m, n, k, y, accumulate, row_scale, MoeArgs{}, xf, grid, s);
}

void QuantMoeWgmma(const float* x, int64_t hidden, int64_t top_k, int64_t pairs, const int32_t* order,
                   const int4* units, const int32_t* num_units, int64_t max_units, const QuantMatrix* experts,
                   const QuantMatrix* gate0, const QuantMatrix* down0, int64_t E, int64_t inter, bool gelu,
                   const float* weights, uint16_t* x_split, uint16_t* act_split, bool exact, const float* x_scale,
                   float* act_f32, float* act_codes, float* act_scale, float* slot_out, cudaStream_t s) {
  if (max_units <= 0 || pairs <= 0) return;
  const bool w8a8 = x_scale != nullptr;
  exact = exact && !w8a8;  // codes are exact in bf16: one MMA
  // gate / up and down share their kind (QuantExperts' mma condition).
  const bool int8_mma = w8a8 && S8WgmmaOk(*gate0, hidden) && S8WgmmaOk(*down0, inter);
  const int parts = exact ? 2 : 1;
  const int xf = int8_mma ? kXS8 : exact ? kXHiLo : kXHi;
  CUtensorMap xmap, amap;
  if (!SplitMap(x_split, pairs, hidden, parts, int8_mma, &xmap) ||
      !SplitMap(act_split, pairs, inter, parts, int8_mma, &amap)) {
    std::fprintf(stderr, "tessera: cuTensorMapEncodeTiled refused an activation split's layout\n");
    std::abort();  // QuantWgmmaOk checked the encoder; a layout it refuses is a bug here
  }
  if (int8_mma)
    LaunchPackInt8(x, order, top_k, pairs, hidden, x_split, s);
  else
    LaunchSplit(x, order, top_k, pairs, hidden, gate0->kind, x_split, exact ? x_split + pairs * hidden : nullptr, s);
  MoeArgs moe;
  moe.order = order, moe.units = units, moe.num_units = num_units, moe.weights = weights, moe.table = experts;
  moe.E = E, moe.act_hi = act_split, moe.act_lo = exact ? act_split + pairs * inter : nullptr;
  moe.act_kind = down0->kind, moe.gelu = gelu;
  if (w8a8) moe.x_scale = x_scale, moe.top_k = static_cast<int>(top_k), moe.act_f32 = act_f32;
  const int64_t wrows = WRowsOf(xf);
  const dim3 up_grid(static_cast<unsigned>((inter + wrows / 2 - 1) / (wrows / 2)), static_cast<unsigned>(max_units));
  LaunchWgmma<kGateUp>(xmap, *gate0, pairs, inter, hidden, nullptr, false, nullptr, moe, xf, up_grid, s);
  if (w8a8) {
    // Each pair's activations as codes (rows in sorted order, so act_scale is by sorted position).
    QuantPrepareInputCodes(act_f32, pairs, inter, down0, act_codes, act_scale, s);
    if (int8_mma)
      LaunchPackInt8(act_codes, nullptr, 1, pairs, inter, act_split, s);
    else
      LaunchSplit(act_codes, nullptr, 1, pairs, inter, down0->kind, act_split, nullptr, s);
  }
  const dim3 down_grid(static_cast<unsigned>((hidden + wrows - 1) / wrows), static_cast<unsigned>(max_units));
  LaunchWgmma<kDown>(amap, *down0, pairs, hidden, inter, slot_out, false, w8a8 ? act_scale : nullptr, moe, xf,
                     down_grid, s);
}

}  // namespace tessera::cuda
