// tessera cuda backend: quantized-weight products with many weight loads in flight (cuda_quant.h), for
// weights without an act-order permutation or W8A8 activations (the staged kernels of cuda_quant.cu
// take those). Written like the bf16 fused MoE kernels (cuda_moe_fused.cu):
//   - a warp owns R weight rows (gate and up rows of C columns, or C down / GEMV rows) and walks them
//     in segments of 32 16-byte chunks (a lane's chunk: 32 int4 or 16 int8 / fp8 codes inside one
//     scale group); every lane issues all R x U chunk loads of a step (and their scales) before using
//     any, the codes bypass L1 (read once), the f32 input rows come through L1 (shared by the warps);
//   - codes become exact floats with a byte permute into the mantissa of 2^23 and one subtraction
//     (int4 / int8), or the hardware e4m3x2 -> f16x2 conversion (fp8): no int-to-float conversions,
//     which run at a quarter of the FMA rate;
//   - one scale (and zero point) multiply per chunk: acc += s * (sum(code * x) - z * sum(x)).
// M input rows per warp: M = 1 keeps the row's chunk in registers and decodes each weight row once;
// (M > 1 decodes a chunk once and reads the rows' values through L1: GEMVs of 2..8 rows did so, and
// lost to the tensor-core kernels of cuda_quant_mma.cu at every measured batch, H100, 2026-12-06,
// Qwen3-30B-A3B: 4 sequences fp8 9.82 -> 7.36 ms a step, int4 12.36 -> 6.69; 8 sequences int4 19.65
// -> 9.14.) So these kernels take one input row: batch-1 decode's products and the routed experts
// per (row, expert) pair up to kQuantMoePerPairMaxSlots pairs.
// The GEMV takes up to three matrices a launch (q / k / v), splits k over a block's warps when the
// rows alone would leave the GPU part idle, and requests its first weights before the grid dependency
// wait (H100, int4 Qwen3-30B-A3B, ncu: q / k / v 19.7 -> 7.4 us a layer, o_proj 10.1 -> 6.3; a batch-1
// step 3.68 -> 3.16 ms).
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "backend/cuda/cuda_device_util.cuh"
#include "backend/cuda/cuda_launch.cuh"
#include "backend/cuda/cuda_mma_util.cuh"
#include "backend/cuda/cuda_quant.h"

namespace tessera::cuda {

namespace {

constexpr int kWarps = 4;
enum : int8_t { kFp8 = 1, kInt8 = 2, kInt4 = 3 };

template <int8_t KIND>
constexpr int kPer = KIND == kInt4 ? 32 : 16;  // codes in 16 bytes

// The codes of 16 bytes as exact floats, in column order (int4: low nibble first).
template <int8_t KIND>
__device__ __forceinline__ void Decode16(const uint4 raw, float (&v)[kPer<KIND>]) {
  const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    if constexpr (KIND == kInt4) {
      // A signed nibble n xor 8 is n + 8 in 0..15; 0x4B0000uu is 2^23 + u as a float.
      const uint32_t u = w[q] ^ 0x88888888u;
      const uint32_t lo = u & 0x0f0f0f0fu, hi = (u >> 4) & 0x0f0f0f0fu;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        v[q * 8 + 2 * j] = __int_as_float(__byte_perm(lo, 0x4B000000u, 0x7650 + j)) - 8388616.f;
        v[q * 8 + 2 * j + 1] = __int_as_float(__byte_perm(hi, 0x4B000000u, 0x7650 + j)) - 8388616.f;
      }
    } else if constexpr (KIND == kInt8) {
      const uint32_t u = w[q] ^ 0x80808080u;  // n + 128
#pragma unroll
      for (int j = 0; j < 4; ++j) v[q * 4 + j] = __int_as_float(__byte_perm(u, 0x4B000000u, 0x7650 + j)) - 8388736.f;
    } else {
      // e4m3 values are all exact in f16 (the low byte becomes the low half).
      const __half2_raw a = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(w[q] & 0xffffu), __NV_E4M3);
      const __half2_raw b = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(w[q] >> 16), __NV_E4M3);
      const float2 fa = __half22float2(__half2(a)), fb = __half22float2(__half2(b));
      v[q * 4] = fa.x;
      v[q * 4 + 1] = fa.y;
      v[q * 4 + 2] = fb.x;
      v[q * 4 + 3] = fb.y;
    }
  }
}

// The rows a warp multiplies: R = NMAT x C weight rows, C consecutive rows (the first `live` of them
// real) from each of NMAT matrices sharing row_bytes, groups and group size (gate and up), by one
// input row x (f32, 16-byte aligned). Row pointers are rebuilt from the bases at each load
// (registers: a warp keeps 16 loads and up to 32 input values in flight).
template <int NMAT, int C>
struct WarpRows {
  const uint8_t* codes[NMAT];
  const float* scales[NMAT];
  const float* zeros[NMAT];
  int64_t row_bytes;
  int groups, group, live;
  const float* x;
};

// A warp's segments of a row are slice, slice + splits, ... (splits > 1: the GEMV's k split over the
// warps of a block); a step is U of them. LoadStep issues a step's R x U chunk loads (and their scales);
// kEarly: as volatile loads, so the first step can be requested before GridDependencyWait (weights are
// never written by a kernel).
template <int8_t KIND, bool kZero, int NMAT, int C, int U, bool kEarly>
__device__ __forceinline__ void LoadStep(const WarpRows<NMAT, C>& w, int slice, int splits, int step, int segs,
                                         uint4 (&wv)[U][NMAT * C], float (&sv)[U][NMAT * C],
                                         float (&zv)[U][NMAT * C]) {
  constexpr int PER = kPer<KIND>, R = NMAT * C;
  const int lane = threadIdx.x & 31;
  const int chunks = static_cast<int>(w.row_bytes / 16);
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int seg = slice + (step + u) * splits;
    const int ch = seg * 32 + lane;
    const bool ok = seg < segs && ch < chunks;
    const int g = ch * PER / w.group;
#pragma unroll
    for (int i = 0; i < R; ++i) {
      const int mat = i / C, j = i % C;
      const bool on = ok && j < w.live;
      const uint8_t* cp = w.codes[mat] + j * w.row_bytes + static_cast<int64_t>(ch) * 16;
      const float* sp = w.scales[mat] + j * w.groups + g;
      if constexpr (kEarly) {
        wv[u][i] = on ? LoadStream16Early(cp) : make_uint4(0, 0, 0, 0);
        sv[u][i] = on ? LoadF32Early(sp) : 0.f;
        if constexpr (kZero) zv[u][i] = on ? LoadF32Early(w.zeros[mat] + j * w.groups + g) : 0.f;
      } else {
        wv[u][i] = on ? LoadStream16(cp) : make_uint4(0, 0, 0, 0);
        sv[u][i] = on ? __ldg(sp) : 0.f;
        if constexpr (kZero) zv[u][i] = on ? __ldg(w.zeros[mat] + j * w.groups + g) : 0.f;
      }
    }
  }
}

// acc[i] += this lane's part of row i . x over the step's segments.
template <int8_t KIND, bool kZero, int NMAT, int C, int U>
__device__ __forceinline__ void DotStep(const WarpRows<NMAT, C>& w, int slice, int splits, int step, int segs,
                                        const uint4 (&wv)[U][NMAT * C], const float (&sv)[U][NMAT * C],
                                        const float (&zv)[U][NMAT * C], float (&acc)[NMAT * C]) {
  constexpr int PER = kPer<KIND>, R = NMAT * C;
  const int lane = threadIdx.x & 31;
  const int chunks = static_cast<int>(w.row_bytes / 16);
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int seg = slice + (step + u) * splits;
    const int ch = seg * 32 + lane;
    if (seg >= segs || ch >= chunks) continue;
    const int64_t c0 = static_cast<int64_t>(ch) * PER;
    float xv[PER];
    const float4* xp = reinterpret_cast<const float4*>(w.x + c0);
#pragma unroll
    for (int j = 0; j < PER / 4; ++j) {
      const float4 f = __ldg(xp + j);
      xv[4 * j] = f.x, xv[4 * j + 1] = f.y, xv[4 * j + 2] = f.z, xv[4 * j + 3] = f.w;
    }
    float sx = 0.f;
    if constexpr (kZero) {
#pragma unroll
      for (int j = 0; j < PER; ++j) sx += xv[j];
    }
#pragma unroll
    for (int i = 0; i < R; ++i) {
      float v[PER];
      Decode16<KIND>(wv[u][i], v);
      float part = 0.f;
#pragma unroll
      for (int j = 0; j < PER; ++j) part = fmaf(v[j], xv[j], part);
      if constexpr (kZero) part -= zv[u][i] * sx;
      acc[i] = fmaf(sv[u][i], part, acc[i]);
    }
  }
}

// acc[i] += this lane's part of row i . x over this warp's segments (summed over the warp, and over
// the slices, by the caller). kEarly: the first step's loads go out before GridDependencyWait, which
// this function then calls (the caller must not have).
template <int8_t KIND, bool kZero, int NMAT, int C, int U, bool kEarly = false>
__device__ __forceinline__ void TiledDot(const WarpRows<NMAT, C>& w, float (&acc)[NMAT * C], int slice = 0,
                                         int splits = 1) {
  constexpr int R = NMAT * C;
  const int segs = static_cast<int>((w.row_bytes / 16 + 31) / 32);
  uint4 wv[U][R];
  float sv[U][R], zv[U][R];
  LoadStep<KIND, kZero, NMAT, C, U, kEarly>(w, slice, splits, 0, segs, wv, sv, zv);
  if constexpr (kEarly) GridDependencyWait();
  for (int step = 0; slice + step * splits < segs; step += U) {
    if (step != 0) LoadStep<KIND, kZero, NMAT, C, U, false>(w, slice, splits, step, segs, wv, sv, zv);
    DotStep<KIND, kZero, NMAT, C, U>(w, slice, splits, step, segs, wv, sv, zv, acc);
  }
}

// Matrix `mat` of w: rows r0 .. r0 + C of q, those below n live (every matrix of w has the same n).
template <int NMAT, int C>
__device__ __forceinline__ void SetMatrix(WarpRows<NMAT, C>& w, int mat, const QuantMatrix& q, int64_t r0,
                                          int64_t n) {
  w.codes[mat] = q.codes + r0 * q.row_bytes;
  w.scales[mat] = q.scales + r0 * q.groups;
  w.zeros[mat] = q.zeros ? q.zeros + r0 * q.groups : nullptr;
  w.row_bytes = q.row_bytes;
  w.groups = q.groups;
  w.group = q.group;
  w.live = static_cast<int>(n - r0 < C ? n - r0 : C);
}

// Up to kQuantGemvMaxJobs products of one input row in a launch (q / k / v): job j owns blocks
// [first_block[j], first_block[j + 1]); every job's matrices share kind, zero points and k.
struct GemvJobs {
  QuantMatrix w[kQuantGemvMaxJobs];
  float* y[kQuantGemvMaxJobs];
  int n[kQuantGemvMaxJobs];
  unsigned first_block[kQuantGemvMaxJobs + 1];
  int count, splits;
};

// y_j[r] (+)= x . w_j[r] for C rows a warp group of `splits` warps, each warp every splits-th segment
// of k (summed in slice order through shared memory: deterministic). The first step's weights are
// requested before GridDependencyWait: the kernel before (a norm, the attention merge) is small and
// latency-bound, and the resident warps' weights stream in while it runs.
template <int8_t KIND, bool kZero, int C, int U>
__global__ void __launch_bounds__(kWarps * 32) GemvTiledKernel(const float* __restrict__ x, const GemvJobs jobs,
                                                               bool accumulate) {
  int job = 0;
  while (job + 1 < jobs.count && blockIdx.x >= jobs.first_block[job + 1]) ++job;
  const int n = jobs.n[job], splits = jobs.splits;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int slice = warp % splits, group = warp / splits;
  const int r0 = ((blockIdx.x - jobs.first_block[job]) * (kWarps / splits) + group) * C;
  WarpRows<1, C> w;
  SetMatrix(w, 0, jobs.w[job], r0, n);  // live <= 0 past the last row: no loads
  w.x = x;
  float acc[C] = {};
  TiledDot<KIND, kZero, 1, C, U, true>(w, acc, slice, splits);
#pragma unroll
  for (int i = 0; i < C; ++i) acc[i] = WarpSum(acc[i]);
  float* y = jobs.y[job];
  if (splits == 1) {
    if (lane == 0)
#pragma unroll
      for (int i = 0; i < C; ++i)
        if (i < w.live) y[r0 + i] = accumulate ? y[r0 + i] + acc[i] : acc[i];
    return;
  }
  __shared__ float part[kWarps][C];
  if (lane == 0)
#pragma unroll
    for (int i = 0; i < C; ++i) part[warp][i] = acc[i];
  __syncthreads();
  if (slice == 0 && lane < C && lane < w.live) {
    float v = 0.f;
    for (int sl = 0; sl < splits; ++sl) v += part[warp + sl][lane];
    y[r0 + lane] = accumulate ? y[r0 + lane] + v : v;
  }
}

// act[pair, col] = silu(gate . x) * (up . x) for C columns of one (row, expert) pair a warp; a pair
// whose expert id is out of range writes nothing.
template <int8_t KIND, bool kZero, int C, int U>
__global__ void __launch_bounds__(kWarps * 32) MoeGateUpTiledKernel(const float* __restrict__ x, int hidden, int k,
                                                                    const int32_t* __restrict__ idx,
                                                                    const QuantMatrix* __restrict__ experts, int E,
                                                                    int inter, int pairs, float* __restrict__ act) {
  GridDependencyWait();
  const int groups = (inter + C - 1) / C;
  const int gw = blockIdx.x * kWarps + (threadIdx.x >> 5);
  const int u = gw / groups;
  if (u >= pairs) return;
  const int expert = __ldg(idx + u);
  if (expert < 0 || expert >= E) return;
  const int col0 = (gw - u * groups) * C;
  WarpRows<2, C> w;
  SetMatrix(w, 0, experts[expert], col0, inter);
  SetMatrix(w, 1, experts[E + expert], col0, inter);
  w.x = x + static_cast<int64_t>(u / k) * hidden;
  float acc[2 * C] = {};
  TiledDot<KIND, kZero, 2, C, U>(w, acc);
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int c = 0; c < C; ++c) {
    const float g = WarpSum(acc[c]), v = WarpSum(acc[C + c]);
    if (lane == 0 && c < w.live) act[static_cast<int64_t>(u) * inter + col0 + c] = SiluF(g) * v;
  }
}

// slot_out[pair, col] = weight[pair] * (act[pair] . down[col]) for C columns of one pair a warp. A
// pair without an expert adds nothing (zeros).
template <int8_t KIND, bool kZero, int C, int U>
__global__ void __launch_bounds__(kWarps * 32) MoeDownTiledKernel(const float* __restrict__ act, int inter,
                                                                  const int32_t* __restrict__ idx,
                                                                  const float* __restrict__ weights,
                                                                  const QuantMatrix* __restrict__ experts, int E,
                                                                  int hidden, int pairs, float* __restrict__ slot_out) {
  GridDependencyWait();
  const int groups = (hidden + C - 1) / C;
  const int gw = blockIdx.x * kWarps + (threadIdx.x >> 5);
  const int u = gw / groups;
  if (u >= pairs) return;
  const int col0 = (gw - u * groups) * C;
  const int lane = threadIdx.x & 31;
  const int expert = __ldg(idx + u);
  if (expert < 0 || expert >= E) {
    if (lane < C && col0 + lane < hidden) slot_out[static_cast<int64_t>(u) * hidden + col0 + lane] = 0.f;
    return;
  }
  WarpRows<1, C> w;
  SetMatrix(w, 0, experts[2 * E + expert], col0, hidden);
  w.x = act + static_cast<int64_t>(u) * inter;
  float acc[C] = {};
  TiledDot<KIND, kZero, 1, C, U>(w, acc);
  const float wgt = __ldg(weights + u);
#pragma unroll
  for (int c = 0; c < C; ++c) {
    const float d = WarpSum(acc[c]);
    if (lane == 0 && c < w.live) slot_out[static_cast<int64_t>(u) * hidden + col0 + c] = d * wgt;
  }
}

// Op::Run<KIND, kZero>(args...) for the matrix's kind and zero points.
template <class Op, class... A>
void ByKind(const QuantMatrix& q, A&&... a) {
  const bool z = q.zeros != nullptr;
  switch (q.kind) {
    case kInt4: z ? Op::template Run<kInt4, true>(a...) : Op::template Run<kInt4, false>(a...); break;
    case kInt8: z ? Op::template Run<kInt8, true>(a...) : Op::template Run<kInt8, false>(a...); break;
    default: z ? Op::template Run<kFp8, true>(a...) : Op::template Run<kFp8, false>(a...); break;
  }
}

unsigned Blocks(int64_t warps) { return static_cast<unsigned>((warps + kWarps - 1) / kWarps); }

struct GemvOp {
  // Slices of k per row group: the most (a power of two, at most kWarps, a segment a slice at least)
  // that keep every warp of the launch resident at once; a second, partial wave would wait out its own
  // load latency with nothing to hide it. Depends on the shapes and the device only, so a captured graph
  // replays the same summation order.
  template <int8_t KIND, bool kZero>
  static void Run(const float* x, GemvJobs jobs, bool accumulate, cudaStream_t s) {
    constexpr int C = 8;
    const auto kernel = GemvTiledKernel<KIND, kZero, C, 2>;
    const int64_t resident_warps = KernelResidency(kernel, 0, kWarps * 32, /*shared_carveout=*/false).blocks * kWarps;
    const int64_t segs = (jobs.w[0].row_bytes / 16 + 31) / 32;
    int64_t groups = 0;
    for (int j = 0; j < jobs.count; ++j) groups += (jobs.n[j] + C - 1) / C;
    int splits = 1;
    while (splits < kWarps && groups * splits * 2 <= resident_warps && splits * 2 <= segs) splits *= 2;
    jobs.splits = splits;
    const int per_block = kWarps / splits;
    jobs.first_block[0] = 0;
    for (int j = 0; j < jobs.count; ++j) {
      const int job_groups = (jobs.n[j] + C - 1) / C;
      jobs.first_block[j + 1] = jobs.first_block[j] + static_cast<unsigned>((job_groups + per_block - 1) / per_block);
    }
    LaunchKernel(kernel, jobs.first_block[jobs.count], kWarps * 32, 0, s)(x, jobs, accumulate);
  }
};

struct GateUpOp {
  template <int8_t KIND, bool kZero>
  static void Run(const float* x, int hidden, int k, const int32_t* idx, int pairs, const QuantMatrix* experts, int E,
                  int inter, float* act, cudaStream_t s) {
    LaunchKernel(MoeGateUpTiledKernel<KIND, kZero, 4, 2>, Blocks(int64_t{pairs} * ((inter + 3) / 4)), kWarps * 32, 0,
                 s)(x, hidden, k, idx, experts, E, inter, pairs, act);
  }
};

struct DownOp {
  template <int8_t KIND, bool kZero>
  static void Run(const float* act, int inter, const int32_t* idx, int pairs, const float* weights,
                  const QuantMatrix* experts, int E, int hidden, bool one_segment, float* slot_out, cudaStream_t s) {
    const int64_t mu = pairs;
    if (one_segment)
      LaunchKernel(MoeDownTiledKernel<KIND, kZero, 16, 1>, Blocks(mu * ((hidden + 15) / 16)), kWarps * 32, 0, s)(
          act, inter, idx, weights, experts, E, hidden, pairs, slot_out);
    else
      LaunchKernel(MoeDownTiledKernel<KIND, kZero, 8, 2>, Blocks(mu * ((hidden + 7) / 8)), kWarps * 32, 0, s)(
          act, inter, idx, weights, experts, E, hidden, pairs, slot_out);
  }
};

}  // namespace

bool QuantTiledOk(const QuantMatrix& w) { return w.perm == nullptr && w.act == 0 && QuantVecOk(w); }

void QuantGemvTiled(const float* x, const QuantMatrix* w0, int64_t n0, float* y0, const QuantMatrix* w1, int64_t n1,
                    float* y1, const QuantMatrix* w2, int64_t n2, float* y2, bool accumulate, cudaStream_t s) {
  GemvJobs jobs{};
  const QuantMatrix* w[kQuantGemvMaxJobs] = {w0, w1, w2};
  float* y[kQuantGemvMaxJobs] = {y0, y1, y2};
  const int64_t n[kQuantGemvMaxJobs] = {n0, n1, n2};
  for (int j = 0; j < kQuantGemvMaxJobs; ++j) {
    if (!w[j] || n[j] <= 0) continue;
    jobs.w[jobs.count] = *w[j], jobs.y[jobs.count] = y[j], jobs.n[jobs.count] = static_cast<int>(n[j]);
    ++jobs.count;
  }
  if (jobs.count == 0) return;
  ByKind<GemvOp>(jobs.w[0], x, jobs, accumulate, s);
}

void QuantMoeGateUpTiled(const float* x, int64_t hidden, int64_t k, const int32_t* idx, int64_t pairs,
                         const QuantMatrix* experts, const QuantMatrix* first, int64_t E, int64_t inter, float* act,
                         cudaStream_t s) {
  if (pairs <= 0) return;
  ByKind<GateUpOp>(*first, x, static_cast<int>(hidden), static_cast<int>(k), idx, static_cast<int>(pairs), experts,
                   static_cast<int>(E), static_cast<int>(inter), act, s);
}

void QuantMoeDownTiled(const float* act, int64_t inter, const int32_t* idx, int64_t pairs, const float* weights,
                       const QuantMatrix* experts, const QuantMatrix* first, int64_t E, int64_t hidden,
                       float* slot_out, cudaStream_t s) {
  if (pairs <= 0) return;
  ByKind<DownOp>(*first, act, static_cast<int>(inter), idx, static_cast<int>(pairs), weights, experts,
                 static_cast<int>(E), static_cast<int>(hidden), first->row_bytes <= 32 * 16, slot_out, s);
}

}  // namespace tessera::cuda
