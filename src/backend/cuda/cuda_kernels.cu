// tessera cuda backend: element-wise / row-wise kernels, the few-row bf16 GEMV, dummy-weight fill,
// softmax / argmax and the MoE kernels (routing, the fused few-token expert path, gather/scatter
// for the grouped path). f32 activations, bf16 weights, f32 accumulation. See cuda_kernels.h.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "backend/cuda/cuda_device_util.cuh"
#include "backend/cuda/cuda_kernels.h"

namespace tessera::cuda {

namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float Bf16(uint16_t v) { return __uint_as_float(static_cast<uint32_t>(v) << 16); }
__device__ __forceinline__ float SigmoidF(float x) { return 1.0f / (1.0f + expf(-x)); }


// Block-wide sum (all threads get the result); `red` holds 32 floats.
__device__ float BlockSum(float v, float* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = WarpSum(v);
  __syncthreads();
  if (lane == 0) red[warp] = v;
  __syncthreads();
  float t = 0;
  const int nw = (blockDim.x + 31) >> 5;
  for (int i = 0; i < nw; ++i) t += red[i];
  return t;
}
__device__ float BlockMax(float v, float* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = WarpMax(v);
  __syncthreads();
  if (lane == 0) red[warp] = v;
  __syncthreads();
  float t = -INFINITY;
  const int nw = (blockDim.x + 31) >> 5;
  for (int i = 0; i < nw; ++i) t = fmaxf(t, red[i]);
  return t;
}

unsigned Blocks(int64_t n, int threads = kThreads) { return static_cast<unsigned>((n + threads - 1) / threads); }

__global__ void EmbeddingKernel(const void* table, bool bf16, const int32_t* ids, int64_t dim, float* out) {
  const int64_t row = blockIdx.x;
  const int64_t off = static_cast<int64_t>(ids[row]) * dim;
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x)
    out[row * dim + j] = bf16 ? Bf16(static_cast<const uint16_t*>(table)[off + j])
                              : static_cast<const float*>(table)[off + j];
}

__global__ void RmsNormKernel(const float* x, int64_t dim, int64_t xs, const float* w, float eps, bool one_plus,
                              float* y, int64_t ys) {
  __shared__ float red[32];
  const float* xr = x + blockIdx.x * xs;
  float* yr = y + blockIdx.x * ys;
  float ss = 0;
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) ss += xr[j] * xr[j];
  ss = BlockSum(ss, red);
  const float inv = rsqrtf(ss / dim + eps);
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x)
    yr[j] = xr[j] * inv * (one_plus ? 1.0f + w[j] : w[j]);
}

__global__ void GatedRmsNormKernel(const float* x, const float* z, int64_t dim, const float* w, float eps,
                                   float* y) {
  __shared__ float red[32];
  const int64_t base = blockIdx.x * dim;
  float ss = 0;
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) ss += x[base + j] * x[base + j];
  ss = BlockSum(ss, red);
  const float inv = rsqrtf(ss / dim + eps);
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x)
    y[base + j] = w[j] * (x[base + j] * inv) * SiluF(z[base + j]);
}

__global__ void RopeKernel(float* x, int64_t rows, int64_t row_stride, int64_t heads, int64_t head_dim,
                           int64_t rotary_dim, const int64_t* positions, const float* inv_freqs) {
  const int64_t half = rotary_dim / 2;
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= rows * heads * half) return;
  const int64_t f = i % half, h = (i / half) % heads, r = i / (half * heads);
  const float angle = static_cast<float>(positions[r]) * inv_freqs[f];
  float sn, cs;
  sincosf(angle, &sn, &cs);
  float* v = x + r * row_stride + h * head_dim;
  const float a = v[f], b = v[f + half];
  v[f] = a * cs - b * sn;
  v[f + half] = b * cs + a * sn;
}

__global__ void SigmoidGateKernel(float* x, int64_t rows, int64_t dim, int64_t xs, const float* g, int64_t gs) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= rows * dim) return;
  const int64_t r = i / dim, j = i % dim;
  x[r * xs + j] *= SigmoidF(g[r * gs + j]);
}

__global__ void SigmoidScaleRowsKernel(float* x, int64_t rows, int64_t dim, const float* sc) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= rows * dim) return;
  x[i] *= SigmoidF(sc[i / dim]);
}

__global__ void SiluMulKernel(const float* g, const float* u, int64_t n, float* out) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = SiluF(g[i]) * u[i];
}

__global__ void AddKernel(const float* x, int64_t n, float* y) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) y[i] += x[i];
}

__global__ void KvWriteKernel(const float* k, const float* v, int64_t kv_stride, int64_t T, int64_t kv_dim,
                              int64_t first_pos, const int32_t* pages, int64_t page_size, float* kc, float* vc) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= T * kv_dim) return;
  const int64_t t = i / kv_dim, d = i % kv_dim, pos = first_pos + t;
  const int64_t row = static_cast<int64_t>(pages[pos / page_size]) * page_size + pos % page_size;
  kc[row * kv_dim + d] = k[t * kv_stride + d];
  vc[row * kv_dim + d] = v[t * kv_stride + d];
}

__global__ void F32ToBf16SplitKernel(const float* x, int64_t n, uint16_t* hi, uint16_t* lo) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const __nv_bfloat16 h = __float2bfloat16_rn(x[i]);
  hi[i] = __bfloat16_as_ushort(h);
  lo[i] = __bfloat16_as_ushort(__float2bfloat16_rn(x[i] - __bfloat162float(h)));
}

__global__ void F32ToBf16Kernel(const float* x, int64_t n, uint16_t* out) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = __bfloat16_as_ushort(__float2bfloat16_rn(x[i]));
}

// splitmix64: a counter-based generator, so every element is independent of the launch shape.
__device__ __forceinline__ uint64_t Mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

__global__ void FillRandomKernel(void* dst, bool bf16, int64_t n, float scale, float offset, uint64_t seed) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint64_t r = Mix(seed * 0x100000001b3ull + static_cast<uint64_t>(i));
    float u = static_cast<float>(r >> 40) * (2.0f / 16777216.0f) - 1.0f;  // [-1, 1)
    if (u > -1e-3f && u < 1e-3f) u = u < 0 ? -1e-3f : 1e-3f;            // never zero
    const float v = u * scale + offset;
    if (bf16)
      static_cast<uint16_t*>(dst)[i] = __bfloat16_as_ushort(__float2bfloat16_rn(v));
    else
      static_cast<float*>(dst)[i] = v;
  }
}

__global__ void GdnGatesKernel(float* a, float* b, int64_t T, int64_t heads, int64_t as, int64_t bs,
                               const float* a_log, const float* dt_bias) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= T * heads) return;
  const int64_t t = i / heads, h = i % heads;
  float& av = a[t * as + h];
  const float sv = av + dt_bias[h];
  const float sp = sv > 20.0f ? sv : log1pf(expf(sv));  // torch's softplus threshold
  av = -expf(a_log[h]) * sp;
  float& bv = b[t * bs + h];
  bv = SigmoidF(bv);
}

__global__ void SoftmaxKernel(float* x, int64_t n) {
  __shared__ float red[32];
  float* v = x + blockIdx.x * n;
  float mx = -INFINITY;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) mx = fmaxf(mx, v[i]);
  mx = BlockMax(mx, red);
  float sum = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) sum += expf(v[i] - mx);
  sum = BlockSum(sum, red);
  const float inv = 1.0f / sum;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) v[i] = expf(v[i] - mx) * inv;
}

// Block-wide (value, index) max; ties -> lower index. Thread 0 gets the result.
__device__ void BlockArgmax(float& best, int& bi, float* rv, int* ri) {
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, best, o);
    const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
    if (ov > best || (ov == best && oi < bi)) best = ov, bi = oi;
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) rv[warp] = best, ri[warp] = bi;
  __syncthreads();
  if (threadIdx.x == 0) {
    const int nw = (blockDim.x + 31) >> 5;
    for (int w = 1; w < nw; ++w)
      if (rv[w] > best || (rv[w] == best && ri[w] < bi)) best = rv[w], bi = ri[w];
  }
}

__global__ void ArgmaxKernel(const float* x, int64_t n, int32_t* out) {
  __shared__ float rv[32];
  __shared__ int ri[32];
  const float* v = x + blockIdx.x * n;
  float best = -INFINITY;
  int bi = 0x7fffffff;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    if (v[i] > best) best = v[i], bi = static_cast<int>(i);
  BlockArgmax(best, bi, rv, ri);
  if (threadIdx.x == 0) out[blockIdx.x] = bi == 0x7fffffff ? 0 : bi;
}

// One warp per output column n; each lane reads 8 bf16 (16 bytes) of the weight row at a time.
template <bool kVec>
__global__ void GemvBf16Kernel(const float* x, int m, int64_t k, const uint16_t* w, int64_t n, float* y,
                               bool accumulate) {
  const int lane = threadIdx.x & 31;
  const int64_t col = blockIdx.x * static_cast<int64_t>(blockDim.x >> 5) + (threadIdx.x >> 5);
  if (col >= n) return;
  const uint16_t* wr = w + col * k;
  float acc[kGemvMaxRows];
#pragma unroll
  for (int r = 0; r < kGemvMaxRows; ++r) acc[r] = 0.0f;
  if (kVec) {
    for (int64_t c = lane * 8; c < k; c += 256) {
      const uint4 raw = *reinterpret_cast<const uint4*>(wr + c);
      float wf[8];
      const uint32_t parts[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        wf[2 * i] = __uint_as_float(parts[i] << 16);
        wf[2 * i + 1] = __uint_as_float(parts[i] & 0xffff0000u);
      }
#pragma unroll
      for (int r = 0; r < kGemvMaxRows; ++r) {
        if (r < m) {
          const float4 a = *reinterpret_cast<const float4*>(x + r * k + c);
          const float4 b = *reinterpret_cast<const float4*>(x + r * k + c + 4);
          acc[r] += wf[0] * a.x + wf[1] * a.y + wf[2] * a.z + wf[3] * a.w + wf[4] * b.x + wf[5] * b.y +
                    wf[6] * b.z + wf[7] * b.w;
        }
      }
    }
  } else {
    for (int64_t c = lane; c < k; c += 32) {
      const float wf = Bf16(wr[c]);
#pragma unroll
      for (int r = 0; r < kGemvMaxRows; ++r)
        if (r < m) acc[r] += wf * x[r * k + c];
    }
  }
#pragma unroll
  for (int r = 0; r < kGemvMaxRows; ++r) {
    if (r < m) {
      const float v = WarpSum(acc[r]);
      if (lane == 0) y[r * n + col] = accumulate ? y[r * n + col] + v : v;
    }
  }
}

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

__global__ void MoeRouteKernel(const float* logits, int64_t E, int64_t k, bool renormalize, int32_t* idx,
                               float* weights) {
  extern __shared__ float p[];  // [E]
  __shared__ float red[32];
  __shared__ int redi[32];
  __shared__ float top_sum;
  const float* l = logits + blockIdx.x * E;
  float mx = -INFINITY;
  for (int64_t e = threadIdx.x; e < E; e += blockDim.x) mx = fmaxf(mx, l[e]);
  mx = BlockMax(mx, red);
  float sum = 0;
  for (int64_t e = threadIdx.x; e < E; e += blockDim.x) sum += (p[e] = expf(l[e] - mx));
  sum = BlockSum(sum, red);
  for (int64_t e = threadIdx.x; e < E; e += blockDim.x) p[e] /= sum;
  if (threadIdx.x == 0) top_sum = 0;
  __syncthreads();
  for (int64_t j = 0; j < k; ++j) {
    float best = -INFINITY;
    int bi = 0x7fffffff;
    for (int64_t e = threadIdx.x; e < E; e += blockDim.x)
      if (p[e] > best) best = p[e], bi = static_cast<int>(e);
    BlockArgmax(best, bi, red, redi);
    if (threadIdx.x == 0) {
      idx[blockIdx.x * k + j] = bi;
      weights[blockIdx.x * k + j] = best;
      top_sum += best;
      p[bi] = -1.0f;  // taken
    }
    __syncthreads();
  }
  if (renormalize)
    for (int64_t j = threadIdx.x; j < k; j += blockDim.x) weights[blockIdx.x * k + j] /= top_sum;
}

__global__ void MoeGateUpKernel(const float* x, int64_t hidden, const int32_t* idx, int64_t k,
                                const uint16_t* const* ptrs, int64_t E, int64_t inter, float* act, bool vec) {
  const int64_t slot = blockIdx.y;
  const int64_t col = blockIdx.x * static_cast<int64_t>(blockDim.x >> 5) + (threadIdx.x >> 5);
  if (col >= inter) return;
  const int64_t e = idx[slot];
  const float* xr = x + (slot / k) * hidden;
  const float g = WarpDotBf16(xr, ptrs[e] + col * hidden, hidden, vec);
  const float u = WarpDotBf16(xr, ptrs[E + e] + col * hidden, hidden, vec);
  if ((threadIdx.x & 31) == 0) act[slot * inter + col] = SiluF(g) * u;
}

__global__ void MoeDownKernel(const float* act, int64_t inter, const int32_t* idx, const float* weights,
                              const uint16_t* const* ptrs, int64_t E, int64_t hidden, float* slot_out, bool vec) {
  const int64_t slot = blockIdx.y;
  const int64_t col = blockIdx.x * static_cast<int64_t>(blockDim.x >> 5) + (threadIdx.x >> 5);
  if (col >= hidden) return;
  const int64_t e = idx[slot];
  const float d = WarpDotBf16(act + slot * inter, ptrs[2 * E + e] + col * inter, inter, vec);
  if ((threadIdx.x & 31) == 0) slot_out[slot * hidden + col] = d * weights[slot];
}

__global__ void MoeSumSlotsKernel(const float* slot_out, int64_t rows, int64_t k, int64_t hidden, float* out) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= rows * hidden) return;
  const int64_t r = i / hidden, c = i % hidden;
  float s = 0;
  for (int64_t j = 0; j < k; ++j) s += slot_out[(r * k + j) * hidden + c];
  out[i] = s;
}

__global__ void GatherRowsKernel(const float* src, int64_t cols, const int32_t* rows, int64_t n, int64_t div,
                                 float* dst) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n * cols) return;
  const int64_t r = i / cols, c = i % cols;
  dst[i] = src[(rows[r] / div) * cols + c];
}

__global__ void ScatterScaledRowsKernel(const float* src, int64_t cols, const int32_t* rows, int64_t n,
                                        const float* scale, float* dst) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n * cols) return;
  const int64_t r = i / cols, c = i % cols;
  dst[static_cast<int64_t>(rows[r]) * cols + c] = src[i] * scale[rows[r]];
}

bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

}  // namespace

void Embedding(const void* table, bool bf16, const int32_t* ids, int64_t n, int64_t dim, float* out,
               cudaStream_t s) {
  if (n > 0) EmbeddingKernel<<<static_cast<unsigned>(n), kThreads, 0, s>>>(table, bf16, ids, dim, out);
}

void RmsNorm(const float* x, int64_t rows, int64_t dim, int64_t x_stride, const float* w, float eps,
             bool one_plus, float* y, int64_t y_stride, cudaStream_t s) {
  if (rows > 0)
    RmsNormKernel<<<static_cast<unsigned>(rows), dim >= 512 ? 256 : 128, 0, s>>>(x, dim, x_stride, w, eps,
                                                                                 one_plus, y, y_stride);
}

void GatedRmsNorm(const float* x, const float* z, int64_t rows, int64_t dim, const float* w, float eps,
                  float* y, cudaStream_t s) {
  if (rows > 0) GatedRmsNormKernel<<<static_cast<unsigned>(rows), 128, 0, s>>>(x, z, dim, w, eps, y);
}

void Rope(float* x, int64_t rows, int64_t row_stride, int64_t heads, int64_t head_dim, int64_t rotary_dim,
          const int64_t* positions, const float* inv_freq, cudaStream_t s) {
  const int64_t n = rows * heads * (rotary_dim / 2);
  if (n > 0)
    RopeKernel<<<Blocks(n), kThreads, 0, s>>>(x, rows, row_stride, heads, head_dim, rotary_dim, positions, inv_freq);
}

void SigmoidGate(float* x, int64_t rows, int64_t dim, int64_t x_stride, const float* gate, int64_t gate_stride,
                 cudaStream_t s) {
  if (rows * dim > 0) SigmoidGateKernel<<<Blocks(rows * dim), kThreads, 0, s>>>(x, rows, dim, x_stride, gate, gate_stride);
}

void SigmoidScaleRows(float* x, int64_t rows, int64_t dim, const float* sc, cudaStream_t s) {
  if (rows * dim > 0) SigmoidScaleRowsKernel<<<Blocks(rows * dim), kThreads, 0, s>>>(x, rows, dim, sc);
}

void SiluMul(const float* gate, const float* up, int64_t n, float* out, cudaStream_t s) {
  if (n > 0) SiluMulKernel<<<Blocks(n), kThreads, 0, s>>>(gate, up, n, out);
}

void Add(const float* x, int64_t n, float* y, cudaStream_t s) {
  if (n > 0) AddKernel<<<Blocks(n), kThreads, 0, s>>>(x, n, y);
}

void KvWrite(const float* k, const float* v, int64_t kv_stride, int64_t T, int64_t kv_dim, int64_t first_pos,
             const int32_t* pages, int64_t page_size, float* k_cache, float* v_cache, cudaStream_t s) {
  if (T * kv_dim > 0)
    KvWriteKernel<<<Blocks(T * kv_dim), kThreads, 0, s>>>(k, v, kv_stride, T, kv_dim, first_pos, pages, page_size,
                                                          k_cache, v_cache);
}

void F32ToBf16(const float* x, int64_t n, uint16_t* out, cudaStream_t s) {
  if (n > 0) F32ToBf16Kernel<<<Blocks(n), kThreads, 0, s>>>(x, n, out);
}

void F32ToBf16Split(const float* x, int64_t n, uint16_t* hi, uint16_t* lo, cudaStream_t s) {
  if (n > 0) F32ToBf16SplitKernel<<<Blocks(n), kThreads, 0, s>>>(x, n, hi, lo);
}

void FillRandom(void* dst, bool bf16, int64_t n, float scale, float offset, uint64_t seed, cudaStream_t s) {
  if (n <= 0) return;
  const int64_t blocks = std::min<int64_t>((n + kThreads - 1) / kThreads, 65536);
  FillRandomKernel<<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(dst, bf16, n, scale, offset, seed);
}

void GdnGates(float* a_to_g, float* b_to_beta, int64_t T, int64_t heads, int64_t a_stride, int64_t b_stride,
              const float* a_log, const float* dt_bias, cudaStream_t s) {
  if (T * heads > 0)
    GdnGatesKernel<<<Blocks(T * heads), kThreads, 0, s>>>(a_to_g, b_to_beta, T, heads, a_stride, b_stride, a_log,
                                                          dt_bias);
}

void Softmax(float* x, int64_t rows, int64_t n, cudaStream_t s) {
  if (rows > 0) SoftmaxKernel<<<static_cast<unsigned>(rows), kThreads, 0, s>>>(x, n);
}

void Argmax(const float* x, int64_t rows, int64_t n, int32_t* out, cudaStream_t s) {
  if (rows > 0) ArgmaxKernel<<<static_cast<unsigned>(rows), kThreads, 0, s>>>(x, n, out);
}

void GemvBf16(const float* x, int64_t m, int64_t k, const uint16_t* w, int64_t n, float* y, bool accumulate,
              cudaStream_t s) {
  if (m <= 0 || n <= 0) return;
  const unsigned blocks = static_cast<unsigned>((n + 7) / 8);
  if (k % 8 == 0 && Aligned16(x) && Aligned16(w))
    GemvBf16Kernel<true><<<blocks, 256, 0, s>>>(x, static_cast<int>(m), k, w, n, y, accumulate);
  else
    GemvBf16Kernel<false><<<blocks, 256, 0, s>>>(x, static_cast<int>(m), k, w, n, y, accumulate);
}

void MoeRoute(const float* logits, int64_t rows, int64_t num_experts, int64_t k, bool renormalize, int32_t* idx,
              float* weights, cudaStream_t s) {
  if (rows > 0)
    MoeRouteKernel<<<static_cast<unsigned>(rows), kThreads, num_experts * sizeof(float), s>>>(
        logits, num_experts, k, renormalize, idx, weights);
}

void MoeGateUp(const float* x, int64_t hidden, const int32_t* idx, int64_t slots, int64_t k,
               const uint16_t* const* ptrs, int64_t num_experts, int64_t inter, bool ptrs_aligned, float* act,
               cudaStream_t s) {
  if (slots <= 0) return;
  const dim3 grid(static_cast<unsigned>((inter + 7) / 8), static_cast<unsigned>(slots));
  MoeGateUpKernel<<<grid, 256, 0, s>>>(x, hidden, idx, k, ptrs, num_experts, inter, act,
                                       ptrs_aligned && hidden % 8 == 0 && Aligned16(x));
}

void MoeDown(const float* act, int64_t inter, const int32_t* idx, const float* weights, int64_t slots,
             const uint16_t* const* ptrs, int64_t num_experts, int64_t hidden, bool ptrs_aligned, float* slot_out,
             cudaStream_t s) {
  if (slots <= 0) return;
  const dim3 grid(static_cast<unsigned>((hidden + 7) / 8), static_cast<unsigned>(slots));
  MoeDownKernel<<<grid, 256, 0, s>>>(act, inter, idx, weights, ptrs, num_experts, hidden, slot_out,
                                     ptrs_aligned && inter % 8 == 0 && Aligned16(act));
}

void MoeSumSlots(const float* slot_out, int64_t rows, int64_t k, int64_t hidden, float* out, cudaStream_t s) {
  if (rows * hidden > 0) MoeSumSlotsKernel<<<Blocks(rows * hidden), kThreads, 0, s>>>(slot_out, rows, k, hidden, out);
}

void GatherRows(const float* src, int64_t cols, const int32_t* rows, int64_t n, int64_t row_div, float* dst,
                cudaStream_t s) {
  if (n * cols > 0) GatherRowsKernel<<<Blocks(n * cols), kThreads, 0, s>>>(src, cols, rows, n, row_div, dst);
}

void ScatterScaledRows(const float* src, int64_t cols, const int32_t* rows, int64_t n, const float* scale,
                       float* dst, cudaStream_t s) {
  if (n * cols > 0) ScatterScaledRowsKernel<<<Blocks(n * cols), kThreads, 0, s>>>(src, cols, rows, n, scale, dst);
}

}  // namespace tessera::cuda
