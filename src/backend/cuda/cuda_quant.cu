// tessera cuda backend: quantized-weight kernels (see cuda_quant.h).
//   QuantGemv: 8 warps a block, one output row a warp at a time; the m input rows are staged in shared
//     memory (gathered by the act-order permutation and rounded for W8A8 there), each lane reads 16
//     bytes of codes a step (16 fp8 / int8 codes or 32 int4 codes, all in one scale group), decodes them
//     in registers and keeps m partial sums; one scale (and zero point) multiply per 16 bytes.
//   QuantMoeGateUp / QuantMoeDown: the same warp dot for one (row, slot) pair's expert, the input row
//     in shared memory once per block.
//   QuantDequantF32 / QuantPrepareInput: the pieces of the large-product path (f32 weight scratch for
//     cuBLASLt, input rows rounded / permuted).
// Decoding: int8 as is; int4 nibbles sign-extended; e4m3 bits moved into an f16 (value / 2^8, exact
// for normal and subnormal codes) and scaled by 2^8. Rounding of W8A8 inputs as the CPU backend does it:
// scale max|x| / qmax per row (or the static one), int8 rintf + clamp 127, fp8 round-to-nearest-even
// saturating at 448 (cuda_fp8.h's __NV_SATFINITE conversion).
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "backend/cuda/cuda_device_util.cuh"
#include "backend/cuda/cuda_quant.h"

namespace tessera::cuda {

namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
enum : int8_t { kFp8 = 1, kInt8 = 2, kInt4 = 3 };

__device__ __forceinline__ float Fp8Value(uint32_t b) {
  const unsigned short h = static_cast<unsigned short>(((b & 0x80u) << 8) | ((b & 0x7fu) << 7));
  return __half2float(__ushort_as_half(h)) * 256.f;
}

__device__ __forceinline__ float CodeValue(const QuantMatrix& w, const uint8_t* row, int64_t c) {
  if (w.kind == kFp8) return Fp8Value(row[c]);
  if (w.kind == kInt8) return static_cast<float>(static_cast<int8_t>(row[c]));
  const int nib = (c & 1) ? (row[c >> 1] >> 4) : (row[c >> 1] & 0xf);
  return static_cast<float>(nib >= 8 ? nib - 16 : nib);
}

// max over the block (all threads call; result in every thread).
__device__ float BlockMax(float v) {
  __shared__ float part[32];
  v = WarpMax(v);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();
  if (lane == 0) part[warp] = v;
  __syncthreads();
  float m = lane < (blockDim.x + 31) / 32 ? part[lane] : 0.f;
  return WarpMax(m);
}

// The W8A8 code of input v at activation scale s: e4m3 or int8 (within +-127), 0 when s is 0.
__device__ __forceinline__ float ActCode(float v, float s, int8_t kind) {
  if (s <= 0.f) return 0.f;
  if (kind == kFp8) return Fp8Value(__nv_cvt_float_to_fp8(v / s, __NV_SATFINITE, __NV_E4M3));
  return fminf(fmaxf(rintf(v / s), -127.f), 127.f);
}

// One input row for matrix w gathered by w.perm into shared memory xs; returns its W8A8 activation
// scale (the static one, or the row's max |x| over the code range; unused when w.act is 0).
__device__ float GatherRow(const float* x, int64_t k, const QuantMatrix& w, float* xs) {
  for (int64_t c = threadIdx.x; c < k; c += blockDim.x) xs[c] = x[w.perm ? w.perm[c] : c];
  __syncthreads();
  if (w.act != 1) return w.act_scale;
  float m = 0.f;
  for (int64_t c = threadIdx.x; c < k; c += blockDim.x) m = fmaxf(m, fabsf(xs[c]));
  return BlockMax(m) / (w.kind == kFp8 ? 448.f : 127.f);
}

// Stages one input row for matrix w into shared memory: gathered by w.perm, rounded by w.act.
__device__ void StageRow(const float* x, int64_t k, const QuantMatrix& w, float* xs) {
  const float s = GatherRow(x, k, w, xs);
  if (w.act == 0) return;
  for (int64_t c = threadIdx.x; c < k; c += blockDim.x) xs[c] = ActCode(xs[c], s, w.kind) * s;
  __syncthreads();
}

// Decodes the 16 bytes of `raw` into PER codes (32 int4 or 16 int8 / fp8) and adds
// s * (codes - z) . xs[i, c0 .. c0 + PER) to acc[i].
template <int M, int PER, int8_t KIND>
__device__ __forceinline__ void DotChunk(const uint4 raw, const float* xs, int64_t k, int64_t c0, float s, float z,
                                         float* acc) {
  const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
  float v[PER];
#pragma unroll
  for (int q = 0; q < 4; ++q) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t byte = (words[q] >> (8 * j)) & 0xffu;
      if constexpr (KIND == kInt4) {
        const int lo = byte & 0xf, hi = byte >> 4;
        v[q * 8 + 2 * j] = static_cast<float>(lo >= 8 ? lo - 16 : lo);
        v[q * 8 + 2 * j + 1] = static_cast<float>(hi >= 8 ? hi - 16 : hi);
      } else if constexpr (KIND == kInt8) {
        v[q * 4 + j] = static_cast<float>(static_cast<int8_t>(byte));
      } else {
        v[q * 4 + j] = Fp8Value(byte);
      }
    }
  }
#pragma unroll
  for (int i = 0; i < M; ++i) {
    const float4* xr = reinterpret_cast<const float4*>(xs + i * k + c0);
    float part = 0.f, sx = 0.f;
#pragma unroll
    for (int j = 0; j < PER / 4; ++j) {
      const float4 xv = xr[j];
      part = fmaf(v[4 * j], xv.x, part);
      part = fmaf(v[4 * j + 1], xv.y, part);
      part = fmaf(v[4 * j + 2], xv.z, part);
      part = fmaf(v[4 * j + 3], xv.w, part);
      sx += (xv.x + xv.y) + (xv.z + xv.w);
    }
    acc[i] = fmaf(s, part - z * sx, acc[i]);
  }
}

template <int M, int PER, int8_t KIND>
__device__ __forceinline__ void VecRowDot(const QuantMatrix& w, const uint8_t* row, const float* sc, const float* zp,
                                          const float* xs, int64_t k, float* acc) {
  const int lane = threadIdx.x % 32;
  for (int64_t b = lane * 16; b < w.row_bytes; b += 32 * 16) {
    const uint4 raw = *reinterpret_cast<const uint4*>(row + b);
    const int64_t c0 = KIND == kInt4 ? 2 * b : b;
    const int64_t g = c0 / w.group;
    DotChunk<M, PER, KIND>(raw, xs, k, c0, sc[g], zp ? zp[g] : 0.f, acc);
  }
}

// acc[i] += w[r, :] . xs[i, :] over this warp's lanes (not yet reduced across the warp). The vector
// path needs QuantVecOk(w) and xs rows 16-byte aligned (k % 4 == 0).
template <int M, bool kVec>
__device__ __forceinline__ void WarpRowDot(const QuantMatrix& w, int64_t r, const float* xs, int64_t k, float* acc) {
  const int lane = threadIdx.x % 32;
  const uint8_t* row = w.codes + r * w.row_bytes;
  const float* sc = w.scales + r * w.groups;
  const float* zp = w.zeros ? w.zeros + r * w.groups : nullptr;
  if constexpr (kVec) {
    if (w.kind == kInt4)
      VecRowDot<M, 32, kInt4>(w, row, sc, zp, xs, k, acc);
    else if (w.kind == kInt8)
      VecRowDot<M, 16, kInt8>(w, row, sc, zp, xs, k, acc);
    else
      VecRowDot<M, 16, kFp8>(w, row, sc, zp, xs, k, acc);
  } else {
    for (int64_t c = lane; c < k; c += 32) {
      const int64_t g = c / w.group;
      const float wv = sc[g] * (CodeValue(w, row, c) - (zp ? zp[g] : 0.f));
#pragma unroll
      for (int i = 0; i < M; ++i) acc[i] = fmaf(wv, xs[i * k + c], acc[i]);
    }
  }
}

template <int M, bool kVec>
__global__ void QuantGemvKernel(const float* __restrict__ x, int64_t k, QuantMatrix w, int64_t n, float* y,
                                bool accumulate) {
  extern __shared__ float xs[];
  for (int i = 0; i < M; ++i) StageRow(x + i * k, k, w, xs + i * k);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * kWarps + warp; r < n; r += static_cast<int64_t>(gridDim.x) * kWarps) {
    float acc[M];
#pragma unroll
    for (int i = 0; i < M; ++i) acc[i] = 0.f;
    WarpRowDot<M, kVec>(w, r, xs, k, acc);
#pragma unroll
    for (int i = 0; i < M; ++i) {
      const float v = WarpSum(acc[i]);
      if (lane == 0) y[i * n + r] = accumulate ? y[i * n + r] + v : v;
    }
  }
}

}  // namespace

bool QuantVecOk(const QuantMatrix& w) {
  const int per = w.kind == kInt4 ? 32 : 16;
  const int64_t k = w.kind == kInt4 ? 2 * w.row_bytes : w.row_bytes;
  return w.row_bytes % 16 == 0 && k % 4 == 0 && (reinterpret_cast<uintptr_t>(w.codes) & 15u) == 0 &&
         w.group % per == 0;
}

namespace {

template <int M>
void LaunchGemv(const float* x, int64_t k, const QuantMatrix& w, int64_t n, float* y, bool accumulate, cudaStream_t s) {
  const size_t smem = static_cast<size_t>(M * k) * 4;
  const int blocks = static_cast<int>((n + kWarps - 1) / kWarps < 65535 ? (n + kWarps - 1) / kWarps : 65535);
  if (QuantVecOk(w)) {
    cudaFuncSetAttribute(QuantGemvKernel<M, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, kQuantGemvMaxSmem);
    QuantGemvKernel<M, true><<<blocks, kThreads, smem, s>>>(x, k, w, n, y, accumulate);
  } else {
    cudaFuncSetAttribute(QuantGemvKernel<M, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, kQuantGemvMaxSmem);
    QuantGemvKernel<M, false><<<blocks, kThreads, smem, s>>>(x, k, w, n, y, accumulate);
  }
}

__global__ void DequantF32Kernel(QuantMatrix w, int64_t n, int64_t k, float* out) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n * k;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / k, c = i % k, g = r * w.groups + c / w.group;
    out[i] = w.scales[g] * (CodeValue(w, w.codes + r * w.row_bytes, c) - (w.zeros ? w.zeros[g] : 0.f));
  }
}

__global__ void PrepareInputKernel(const float* x, int64_t k, QuantMatrix w, float* out) {
  extern __shared__ float xs[];
  StageRow(x + blockIdx.x * k, k, w, xs);
  for (int64_t c = threadIdx.x; c < k; c += blockDim.x) out[blockIdx.x * k + c] = xs[c];
}

// W8A8 rows as their codes: out = the 8-bit code of each (permuted) input (exact in bf16: int8 up
// to 127, every e4m3 value), row_scale = the row's scale, so code x row scale is StageRow's value.
__global__ void PrepareInputCodesKernel(const float* x, int64_t k, QuantMatrix w, float* out, float* row_scale) {
  extern __shared__ float xs[];
  const float s = GatherRow(x + blockIdx.x * k, k, w, xs);
  for (int64_t c = threadIdx.x; c < k; c += blockDim.x) out[blockIdx.x * k + c] = ActCode(xs[c], s, w.kind);
  if (threadIdx.x == 0) row_scale[blockIdx.x] = s > 0.f ? s : 0.f;
}

template <bool kVec>
__global__ void MoeGateUpKernel(const float* x, int64_t hidden, const int32_t* idx, int64_t kslots,
                                const QuantMatrix* experts, int64_t E, int64_t inter, float* act) {
  extern __shared__ float xs[];  // [2, hidden]: for gate, for up
  const int64_t slot = blockIdx.y;
  const int32_t e = idx[slot];
  if (e < 0 || e >= E) return;
  const QuantMatrix gate = experts[e], up = experts[E + e];
  const float* xrow = x + (slot / kslots) * hidden;
  StageRow(xrow, hidden, gate, xs);
  StageRow(xrow, hidden, up, xs + hidden);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * kWarps + warp; r < inter; r += static_cast<int64_t>(gridDim.x) * kWarps) {
    float g = 0.f, u = 0.f;
    WarpRowDot<1, kVec>(gate, r, xs, hidden, &g);
    WarpRowDot<1, kVec>(up, r, xs + hidden, hidden, &u);
    g = WarpSum(g);
    u = WarpSum(u);
    if (lane == 0) act[slot * inter + r] = g / (1.f + expf(-g)) * u;
  }
}

template <bool kVec>
__global__ void MoeDownKernel(const float* act, int64_t inter, const int32_t* idx, const float* weights,
                              const QuantMatrix* experts, int64_t E, int64_t hidden, float* slot_out) {
  extern __shared__ float hs[];
  const int64_t slot = blockIdx.y;
  const int32_t e = idx[slot];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (e < 0 || e >= E) {  // no expert: the slot adds nothing
    for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < hidden; j += gridDim.x * blockDim.x)
      slot_out[slot * hidden + j] = 0.f;
    return;
  }
  const QuantMatrix down = experts[2 * E + e];
  StageRow(act + slot * inter, inter, down, hs);
  const float wgt = weights[slot];
  for (int64_t j = static_cast<int64_t>(blockIdx.x) * kWarps + warp; j < hidden; j += static_cast<int64_t>(gridDim.x) * kWarps) {
    float d = 0.f;
    WarpRowDot<1, kVec>(down, j, hs, inter, &d);
    d = WarpSum(d);
    if (lane == 0) slot_out[slot * hidden + j] = d * wgt;
  }
}

}  // namespace

void QuantGemv(const float* x, int64_t m, int64_t k, const QuantMatrix* w, int64_t n, float* y, bool accumulate,
               cudaStream_t s) {
  switch (m) {
    case 1: LaunchGemv<1>(x, k, *w, n, y, accumulate, s); break;
    case 2: LaunchGemv<2>(x, k, *w, n, y, accumulate, s); break;
    case 3: LaunchGemv<3>(x, k, *w, n, y, accumulate, s); break;
    case 4: LaunchGemv<4>(x, k, *w, n, y, accumulate, s); break;
    case 5: LaunchGemv<5>(x, k, *w, n, y, accumulate, s); break;
    case 6: LaunchGemv<6>(x, k, *w, n, y, accumulate, s); break;
    case 7: LaunchGemv<7>(x, k, *w, n, y, accumulate, s); break;
    default: LaunchGemv<8>(x, k, *w, n, y, accumulate, s); break;
  }
}

void QuantDequantF32(const QuantMatrix* w, int64_t n, int64_t k, float* out, cudaStream_t s) {
  const int64_t total = n * k;
  const int blocks = static_cast<int>((total + 255) / 256 < 8192 ? (total + 255) / 256 : 8192);
  DequantF32Kernel<<<blocks, 256, 0, s>>>(*w, n, k, out);
}

void QuantPrepareInput(const float* x, int64_t m, int64_t k, const QuantMatrix* w, float* out, cudaStream_t s) {
  const size_t smem = static_cast<size_t>(k) * 4;
  cudaFuncSetAttribute(PrepareInputKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 << 10);
  PrepareInputKernel<<<static_cast<unsigned>(m), 256, smem, s>>>(x, k, *w, out);
}

void QuantPrepareInputCodes(const float* x, int64_t m, int64_t k, const QuantMatrix* w, float* out, float* row_scale,
                            cudaStream_t s) {
  const size_t smem = static_cast<size_t>(k) * 4;
  cudaFuncSetAttribute(PrepareInputCodesKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 << 10);
  PrepareInputCodesKernel<<<static_cast<unsigned>(m), 256, smem, s>>>(x, k, *w, out, row_scale);
}

void QuantMoeGateUp(const float* x, int64_t hidden, const int32_t* idx, int64_t slots, int64_t k,
                    const QuantMatrix* experts, int64_t E, int64_t inter, bool vec, float* act, cudaStream_t s) {
  if (slots == 0) return;
  const dim3 grid(static_cast<unsigned>((inter + kWarps - 1) / kWarps), static_cast<unsigned>(slots));
  const size_t smem = static_cast<size_t>(2 * hidden) * 4;
  auto kernel = vec ? MoeGateUpKernel<true> : MoeGateUpKernel<false>;
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 << 10);
  kernel<<<grid, kThreads, smem, s>>>(x, hidden, idx, k, experts, E, inter, act);
}

void QuantMoeDown(const float* act, int64_t inter, const int32_t* idx, const float* weights, int64_t slots,
                  const QuantMatrix* experts, int64_t E, int64_t hidden, bool vec, float* slot_out, cudaStream_t s) {
  if (slots == 0) return;
  const dim3 grid(static_cast<unsigned>((hidden + kWarps - 1) / kWarps), static_cast<unsigned>(slots));
  const size_t smem = static_cast<size_t>(inter) * 4;
  auto kernel = vec ? MoeDownKernel<true> : MoeDownKernel<false>;
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 << 10);
  kernel<<<grid, kThreads, smem, s>>>(act, inter, idx, weights, experts, E, hidden, slot_out);
}

}  // namespace tessera::cuda
