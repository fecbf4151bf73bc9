// tessera cuda backend: element-wise / row-wise kernels, dummy-weight fill,
// softmax / argmax and the MoE routing and gather/scatter (grouped path) kernels; the fused
// few-token expert path is in cuda_moe_fused.cu. f32 activations, bf16 weights, f32 accumulation.
// See cuda_kernels.h.
// Batch-1 decode is a chain of small launches: the one-row kernels (RMSNorm, MoE routing) keep a row
// in registers of one warp or block. The few-row GEMV is in cuda_gemv.cu.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "backend/cuda/cuda_device_util.cuh"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuda_launch.cuh"
#include "backend/cuda/cuda_moe_route.cuh"
#include "backend/cuda/cuda_switches.h"

namespace tessera::cuda {

namespace {

constexpr int kThreads = 256;

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
  GridDependencyWait();
  const int64_t row = blockIdx.x;
  const int64_t off = static_cast<int64_t>(ids[row]) * dim;
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x)
    out[row * dim + j] = bf16 ? Bf16(static_cast<const uint16_t*>(table)[off + j])
                              : static_cast<const float*>(table)[off + j];
}

__global__ void RmsNormKernel(const float* x, int64_t dim, int64_t xs, const float* w, float eps, bool one_plus,
                              float* y, int64_t ys) {
  GridDependencyWait();
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

// RMSNorm with the row in registers: kTpr threads per row (32: a warp per row, several rows per
// block, no block barrier; else the whole block), each holding kV float4 of x and w. x and w are
// both loaded before the reduction, so a one-row call costs one memory round trip, not two. x may
// alias y: each element is read and written by the same thread. Same arithmetic as RmsNormKernel.
// With `delta` (AddRmsNorm), x is first updated in place: x += delta (rows of xs; delta has the
// same strides), the residual add of a layer fused with the norm that follows it. With `slots`
// (k MoE slot outputs a row, [rows * k, dim]) the added value is their sum in slot order, plus
// delta when given: the arithmetic of MoeSumSlots, then y + delta, then AddRmsNorm.
template <int kTpr, int kV>
__global__ void RmsNormVecKernel(const float* x, int64_t rows, int dim, int64_t xs, const float* w, float eps,
                                 bool one_plus, float* y, int64_t ys, const float* delta, const float* slots,
                                 int k) {
  GridDependencyWait();
  __shared__ float red[32];
  const int t = threadIdx.x % kTpr;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / kTpr) + threadIdx.x / kTpr;
  if (kTpr == 32 && row >= rows) return;  // whole warps only; the block path has one row per block
  const float* xr = x + row * xs;
  float4 xv[kV], wv[kV];
  float ss = 0;
#pragma unroll
  for (int v = 0; v < kV; ++v) {
    const int j = (v * kTpr + t) * 4;
    if (j < dim) {
      xv[v] = *reinterpret_cast<const float4*>(xr + j);
      if (delta || slots) {
        float4 d = delta && !slots ? *reinterpret_cast<const float4*>(delta + row * xs + j) : float4{0, 0, 0, 0};
        if (slots) {
#pragma unroll 8  // the k loads are independent: issue them together, sum in slot order
          for (int s = 0; s < k; ++s) {
            const float4 p = *reinterpret_cast<const float4*>(slots + (row * k + s) * dim + j);
            d.x += p.x, d.y += p.y, d.z += p.z, d.w += p.w;
          }
          if (delta) {
            const float4 e = *reinterpret_cast<const float4*>(delta + row * xs + j);
            d.x += e.x, d.y += e.y, d.z += e.z, d.w += e.w;
          }
        }
        xv[v].x += d.x, xv[v].y += d.y, xv[v].z += d.z, xv[v].w += d.w;
        *reinterpret_cast<float4*>(const_cast<float*>(xr) + j) = xv[v];
      }
      wv[v] = __ldg(reinterpret_cast<const float4*>(w + j));
      ss += xv[v].x * xv[v].x + xv[v].y * xv[v].y + xv[v].z * xv[v].z + xv[v].w * xv[v].w;
    }
  }
  ss = kTpr == 32 ? WarpSum(ss) : BlockSum(ss, red);
  const float inv = rsqrtf(ss / dim + eps);
  float* yr = y + row * ys;
#pragma unroll
  for (int v = 0; v < kV; ++v) {
    const int j = (v * kTpr + t) * 4;
    if (j < dim) {
      const float4 a = xv[v], b = wv[v];
      float4 o;
      o.x = a.x * inv * (one_plus ? 1.0f + b.x : b.x);
      o.y = a.y * inv * (one_plus ? 1.0f + b.y : b.y);
      o.z = a.z * inv * (one_plus ? 1.0f + b.z : b.z);
      o.w = a.w * inv * (one_plus ? 1.0f + b.w : b.w);
      *reinterpret_cast<float4*>(yr + j) = o;
    }
  }
}

__global__ void GatedRmsNormKernel(const float* x, const float* z, int64_t dim, const float* w, float eps,
                                   float* y) {
  GridDependencyWait();
  __shared__ float red[32];
  const int64_t base = blockIdx.x * dim;
  float ss = 0;
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) ss += x[base + j] * x[base + j];
  ss = BlockSum(ss, red);
  const float inv = rsqrtf(ss / dim + eps);
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x)
    y[base + j] = w[j] * (x[base + j] * inv) * SiluF(z[base + j]);
}

__global__ void SigmoidGateKernel(float* x, int64_t rows, int64_t dim, int64_t xs, const float* g, int64_t gs) {
  GridDependencyWait();
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= rows * dim) return;
  const int64_t r = i / dim, j = i % dim;
  x[r * xs + j] *= SigmoidF(g[r * gs + j]);
}

__global__ void SigmoidScaleRowsKernel(float* x, int64_t rows, int64_t dim, const float* sc) {
  GridDependencyWait();
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= rows * dim) return;
  x[i] *= SigmoidF(sc[i / dim]);
}

__global__ void DivideRowsKernel(float* x, int64_t rows, int64_t dim, const float* d) {
  GridDependencyWait();
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= rows * dim) return;
  x[i] /= d[i / dim];  // a true division, as the CPU backend's: bit-identical results
}

__global__ void SiluMulKernel(const float* g, const float* u, int64_t n, float* out) {
  GridDependencyWait();
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = SiluF(g[i]) * u[i];
}

// SiluMulKernel then SigmoidScaleRowsKernel, the same two products in the same order.
__global__ void SiluMulScaleRowsKernel(const float* g, const float* u, int64_t rows, int64_t dim, const float* sc,
                                       float* out) {
  GridDependencyWait();
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= rows * dim) return;
  const float v = SiluF(g[i]) * u[i];
  out[i] = v * SigmoidF(sc[i / dim]);
}

__global__ void AddKernel(const float* x, int64_t n, float* y) {
  GridDependencyWait();
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) y[i] += x[i];
}

template <typename T>
__global__ void KvWriteKernel(const float* k, const float* v, int64_t kv_stride, int64_t rows, int64_t kv_dim,
                              int64_t first_pos, const int32_t* pages, int64_t page_size, T* kc, T* vc) {
  GridDependencyWait();
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= rows * kv_dim) return;
  const int64_t t = i / kv_dim, d = i % kv_dim, pos = first_pos + t;
  const int64_t row = static_cast<int64_t>(pages[pos / page_size]) * page_size + pos % page_size;
  KvStoreAt(kc + row * kv_dim, d, k[t * kv_stride + d]);
  KvStoreAt(vc + row * kv_dim, d, v[t * kv_stride + d]);
}

__global__ void F32ToBf16SplitKernel(const float* x, int64_t n, uint16_t* hi, uint16_t* lo) {
  GridDependencyWait();
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const __nv_bfloat16 h = __float2bfloat16_rn(x[i]);
  hi[i] = __bfloat16_as_ushort(h);
  lo[i] = __bfloat16_as_ushort(__float2bfloat16_rn(x[i] - __bfloat162float(h)));
}

__global__ void F32ToBf16Kernel(const float* x, int64_t n, uint16_t* out) {
  GridDependencyWait();
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
  GridDependencyWait();
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

// g / beta may alias a / b (in place): each thread reads its element before writing it.
__global__ void GdnGatesKernel(const float* a, const float* b, int64_t T, int64_t heads, int64_t as, int64_t bs,
                               const float* a_log, const float* dt_bias, float* g, float* beta, int64_t os) {
  GridDependencyWait();
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= T * heads) return;
  const int64_t t = i / heads, h = i % heads;
  const float sv = a[t * as + h] + dt_bias[h];
  const float sp = sv > 20.0f ? sv : log1pf(expf(sv));  // torch's softplus threshold
  const float bv = b[t * bs + h];
  g[t * os + h] = -expf(a_log[h]) * sp;
  beta[t * os + h] = SigmoidF(bv);
}

__global__ void SoftmaxKernel(float* x, int64_t n) {
  GridDependencyWait();
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

// Softmax of long rows (vocabularies: DiffusionGemma's self-conditioning runs it over 256 x 262,144
// every canvas step, 1.3 ms on an H100 with SoftmaxKernel's three read passes of 256 threads a row):
// 1,024 threads a row, float4 loads, and one read pass that keeps a running (max, sum) per thread
// (the sum rescaled when the max grows), merged across the block; then the write pass. Rows of whole
// 16-byte pieces (n % 4 == 0, x aligned); others take SoftmaxKernel.
constexpr int kLongSoftmaxThreads = 1024;
constexpr int64_t kLongSoftmaxMin = 16384;

// (m, s) := the pair for the union of two sets of values, each summarised as (max, sum of exp(v - max)).
__device__ __forceinline__ void MergeMaxSum(float& m, float& s, float om, float os) {
  const float nm = fmaxf(m, om);
  if (nm == -INFINITY) return;  // both empty
  s = s * expf(m - nm) + os * expf(om - nm);
  m = nm;
}

__global__ void __launch_bounds__(kLongSoftmaxThreads) SoftmaxLongKernel(float* x, int64_t n) {
  GridDependencyWait();
  __shared__ float red_m[32], red_s[32];
  float4* v = reinterpret_cast<float4*>(x + blockIdx.x * n);
  const int64_t n4 = n / 4;
  float m = -INFINITY, s = 0.0f;
  for (int64_t i = threadIdx.x; i < n4; i += blockDim.x) {
    const float4 q = v[i];
    const float qm = fmaxf(fmaxf(q.x, q.y), fmaxf(q.z, q.w));
    if (qm > m) s *= expf(m - qm), m = qm;  // exp(-inf) = 0 on the first piece
    if (m == -INFINITY) continue;           // masked values only so far (exp(-inf - -inf) is NaN)
    s += expf(q.x - m) + expf(q.y - m) + expf(q.z - m) + expf(q.w - m);
  }
  for (int o = 16; o > 0; o >>= 1) MergeMaxSum(m, s, __shfl_xor_sync(0xffffffffu, m, o), __shfl_xor_sync(0xffffffffu, s, o));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) red_m[warp] = m, red_s[warp] = s;
  __syncthreads();
  m = -INFINITY, s = 0.0f;
  for (int w = 0; w < static_cast<int>(blockDim.x >> 5); ++w) MergeMaxSum(m, s, red_m[w], red_s[w]);
  const float inv = 1.0f / s;
  for (int64_t i = threadIdx.x; i < n4; i += blockDim.x) {
    float4 q = v[i];
    q.x = expf(q.x - m) * inv, q.y = expf(q.y - m) * inv, q.z = expf(q.z - m) * inv, q.w = expf(q.w - m) * inv;
    v[i] = q;
  }
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
  GridDependencyWait();
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

__global__ void CountIdsKernel(const int32_t* idx, int64_t n, int64_t num_experts, int32_t* counts) {
  GridDependencyWait();
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n && idx[i] >= 0 && idx[i] < num_experts) atomicAdd(counts + idx[i], 1);
}

__global__ void MoeRouteKernel(const float* logits, int64_t E, int64_t k, bool renormalize, int32_t* idx,
                               float* weights) {
  GridDependencyWait();
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

// Routing with a warp per row (E <= 32 * kV, k <= 32): RouteRowWarp (cuda_moe_route.cuh).
template <int kV>
__global__ void MoeRouteWarpKernel(const float* logits, int64_t rows, int E, int k, bool renormalize, int32_t* idx,
                                   float* weights) {
  GridDependencyWait();
  const int lane = threadIdx.x & 31;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (row >= rows) return;
  int expert;
  float weight;
  RouteRowWarp<kV>(logits + row * E, E, k, renormalize, &expert, &weight);
  if (lane < k) {
    idx[row * k + lane] = expert;
    weights[row * k + lane] = weight;
  }
}

__global__ void GatherRowsKernel(const float* src, int64_t cols, const int32_t* rows, int64_t n, int64_t div,
                                 float* dst) {
  GridDependencyWait();
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n * cols) return;
  const int64_t r = i / cols, c = i % cols;
  dst[i] = src[(rows[r] / div) * cols + c];
}

__global__ void ScatterScaledRowsKernel(const float* src, int64_t cols, const int32_t* rows, int64_t n,
                                        const float* scale, float* dst) {
  GridDependencyWait();
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n * cols) return;
  const int64_t r = i / cols, c = i % cols;
  dst[static_cast<int64_t>(rows[r]) * cols + c] = src[i] * scale[rows[r]];
}

}  // namespace

// Declared in cuda_launch.cuh. Read once: a process launches every kernel the same way, so a
// captured step graph never mixes the two.
bool ProgrammaticLaunch() {
  static const bool on = SwitchValue("TESSERA_CUDA_PDL") != "0";
  return on;
}

// Declared in cuda_launch.cuh. The list is read once; names come from the runtime (cudaFuncGetName) at
// each launch, so a study run records its graphs without the kernels (replays launch nothing new).
bool SkipKernelForStudy(const void* kernel) {
  static const std::string all = SwitchValue("TESSERA_CUDA_SKIP_KERNELS");
  if (all.empty()) return false;
  const char* name = nullptr;
  if (cudaFuncGetName(&name, kernel) != cudaSuccess || name == nullptr) return false;
  const std::string n(name);
  size_t p = 0;
  while (p <= all.size()) {
    size_t q = all.find(',', p);
    if (q == std::string::npos) q = all.size();
    const std::string part = all.substr(p, q - p);
    if (!part.empty() && n.find(part) != std::string::npos) return true;
    p = q + 1;
  }
  return false;
}

void Embedding(const void* table, bool bf16, const int32_t* ids, int64_t n, int64_t dim, float* out,
               cudaStream_t s) {
  if (n > 0) LaunchKernel(EmbeddingKernel, static_cast<unsigned>(n), kThreads, 0, s)(table, bf16, ids, dim, out);
}

namespace {

// RmsNorm, AddRmsNorm and the MoE block's end (`slots`): the row-in-registers kernel for every width
// it holds (x, y, w, delta and slots 16-byte aligned), else (no delta, no slots) the plain kernel.
// Returns false when neither fits a delta or slots.
bool LaunchRmsNorm(const float* x, int64_t rows, int64_t dim, int64_t x_stride, const float* w, float eps,
                   bool one_plus, float* y, int64_t y_stride, const float* delta, cudaStream_t s,
                   const float* slots = nullptr, int k = 0) {
  const bool vec = dim % 4 == 0 && x_stride % 4 == 0 && y_stride % 4 == 0 && Aligned16(x) && Aligned16(y) &&
                   Aligned16(w) && (!delta || Aligned16(delta)) && (!slots || Aligned16(slots));
  const unsigned warp_blocks = static_cast<unsigned>((rows + 7) / 8), row_blocks = static_cast<unsigned>(rows);
  const int d = static_cast<int>(dim);
#define TESSERA_RMSNORM_VEC(TPR, V, BLOCKS) \
  LaunchKernel(RmsNormVecKernel<TPR, V>, BLOCKS, 256, 0, s)(x, rows, d, x_stride, w, eps, one_plus, y, y_stride, delta, \
                                                             slots, k)
  if (vec && dim <= 128)
    TESSERA_RMSNORM_VEC(32, 1, warp_blocks);
  else if (vec && dim <= 256)
    TESSERA_RMSNORM_VEC(32, 2, warp_blocks);
  else if (vec && dim <= 512)
    TESSERA_RMSNORM_VEC(32, 4, warp_blocks);
  else if (vec && dim <= 1024)
    TESSERA_RMSNORM_VEC(256, 1, row_blocks);
  else if (vec && dim <= 2048)
    TESSERA_RMSNORM_VEC(256, 2, row_blocks);
  else if (vec && dim <= 4096)
    TESSERA_RMSNORM_VEC(256, 4, row_blocks);
  else if (vec && dim <= 8192)
    TESSERA_RMSNORM_VEC(256, 8, row_blocks);
  else if (!delta && !slots)
    LaunchKernel(RmsNormKernel, row_blocks, dim >= 512 ? 256 : 128, 0, s)(x, dim, x_stride, w, eps, one_plus, y,
                                                                          y_stride);
  else
    return false;
#undef TESSERA_RMSNORM_VEC
  return true;
}

}  // namespace

void RmsNorm(const float* x, int64_t rows, int64_t dim, int64_t x_stride, const float* w, float eps,
             bool one_plus, float* y, int64_t y_stride, cudaStream_t s) {
  if (rows > 0) LaunchRmsNorm(x, rows, dim, x_stride, w, eps, one_plus, y, y_stride, nullptr, s);
}

void AddRmsNorm(const float* delta, float* h, int64_t rows, int64_t dim, const float* w, float eps, bool one_plus,
                float* y, cudaStream_t s) {
  if (rows <= 0) return;
  if (LaunchRmsNorm(h, rows, dim, dim, w, eps, one_plus, y, dim, delta, s)) return;
  Add(delta, rows * dim, h, s);
  LaunchRmsNorm(h, rows, dim, dim, w, eps, one_plus, y, dim, nullptr, s);
}

void MoeSumSlotsAddRmsNorm(const float* slot_out, int64_t rows, int64_t k, int64_t dim, const float* extra, float* h,
                           const float* w, float eps, bool one_plus, float* y, float* scratch, cudaStream_t s) {
  if (rows <= 0) return;
  if (k > 0 && LaunchRmsNorm(h, rows, dim, dim, w, eps, one_plus, y, dim, extra, s, slot_out, static_cast<int>(k)))
    return;
  MoeSumSlots(slot_out, rows, k, dim, scratch, s);
  if (extra) Add(extra, rows * dim, scratch, s);
  AddRmsNorm(scratch, h, rows, dim, w, eps, one_plus, y, s);
}

void GatedRmsNorm(const float* x, const float* z, int64_t rows, int64_t dim, const float* w, float eps,
                  float* y, cudaStream_t s) {
  if (rows > 0) LaunchKernel(GatedRmsNormKernel, static_cast<unsigned>(rows), 128, 0, s)(x, z, dim, w, eps, y);
}

// NeoX RoPE is RopePairs (cuda_gemma_kernels.cu) with the rotary dims' two halves as the pairs.
void Rope(float* x, int64_t rows, int64_t row_stride, int64_t heads, int64_t head_dim, int64_t rotary_dim,
          const int64_t* positions, const float* inv_freq, cudaStream_t s) {
  RopePairs(x, rows, row_stride, heads, head_dim, rotary_dim / 2, rotary_dim / 2, inv_freq, positions, s);
}

void SigmoidGate(float* x, int64_t rows, int64_t dim, int64_t x_stride, const float* gate, int64_t gate_stride,
                 cudaStream_t s) {
  if (rows * dim > 0)
    LaunchKernel(SigmoidGateKernel, Blocks(rows * dim), kThreads, 0, s)(x, rows, dim, x_stride, gate, gate_stride);
}

void SigmoidScaleRows(float* x, int64_t rows, int64_t dim, const float* sc, cudaStream_t s) {
  if (rows * dim > 0) LaunchKernel(SigmoidScaleRowsKernel, Blocks(rows * dim), kThreads, 0, s)(x, rows, dim, sc);
}

void DivideRows(float* x, int64_t rows, int64_t dim, const float* d, cudaStream_t s) {
  if (rows * dim > 0) LaunchKernel(DivideRowsKernel, Blocks(rows * dim), kThreads, 0, s)(x, rows, dim, d);
}

void SiluMul(const float* gate, const float* up, int64_t n, float* out, cudaStream_t s) {
  if (n > 0) LaunchKernel(SiluMulKernel, Blocks(n), kThreads, 0, s)(gate, up, n, out);
}

void SiluMulScaleRows(const float* gate, const float* up, int64_t rows, int64_t dim, const float* sc, float* out,
                      cudaStream_t s) {
  if (rows * dim > 0)
    LaunchKernel(SiluMulScaleRowsKernel, Blocks(rows * dim), kThreads, 0, s)(gate, up, rows, dim, sc, out);
}

void Add(const float* x, int64_t n, float* y, cudaStream_t s) {
  if (n > 0) LaunchKernel(AddKernel, Blocks(n), kThreads, 0, s)(x, n, y);
}

void KvWrite(const float* k, const float* v, int64_t kv_stride, int64_t T, int64_t kv_dim, int64_t first_pos,
             const int32_t* pages, int64_t page_size, KvLayout layout, void* k_cache, void* v_cache, cudaStream_t s) {
  if (T * kv_dim <= 0) return;
  WithKvType(layout, [&](auto tag) {
    using E = decltype(tag);
    LaunchKernel(KvWriteKernel<E>, Blocks(T * kv_dim), kThreads, 0, s)(k, v, kv_stride, T, kv_dim, first_pos, pages,
                                                                       page_size, static_cast<E*>(k_cache),
                                                                       static_cast<E*>(v_cache));
  });
}

void F32ToBf16(const float* x, int64_t n, uint16_t* out, cudaStream_t s) {
  if (n > 0) LaunchKernel(F32ToBf16Kernel, Blocks(n), kThreads, 0, s)(x, n, out);
}

void F32ToBf16Split(const float* x, int64_t n, uint16_t* hi, uint16_t* lo, cudaStream_t s) {
  if (n > 0) LaunchKernel(F32ToBf16SplitKernel, Blocks(n), kThreads, 0, s)(x, n, hi, lo);
}

void FillRandom(void* dst, bool bf16, int64_t n, float scale, float offset, uint64_t seed, cudaStream_t s) {
  if (n <= 0) return;
  const int64_t blocks = std::min<int64_t>((n + kThreads - 1) / kThreads, 65536);
  LaunchKernel(FillRandomKernel, static_cast<unsigned>(blocks), kThreads, 0, s)(dst, bf16, n, scale, offset, seed);
}

void GdnGates(const float* a, const float* b, int64_t T, int64_t heads, int64_t a_stride, int64_t b_stride,
              const float* a_log, const float* dt_bias, float* g, float* beta, int64_t out_stride, cudaStream_t s) {
  if (T * heads > 0)
    LaunchKernel(GdnGatesKernel, Blocks(T * heads), kThreads, 0, s)(a, b, T, heads, a_stride, b_stride, a_log,
                                                                    dt_bias, g, beta, out_stride);
}

void Softmax(float* x, int64_t rows, int64_t n, cudaStream_t s) {
  if (rows <= 0) return;
  if (n >= kLongSoftmaxMin && n % 4 == 0 && Aligned16(x))
    LaunchKernel(SoftmaxLongKernel, static_cast<unsigned>(rows), kLongSoftmaxThreads, 0, s)(x, n);
  else
    LaunchKernel(SoftmaxKernel, static_cast<unsigned>(rows), kThreads, 0, s)(x, n);
}

void Argmax(const float* x, int64_t rows, int64_t n, int32_t* out, cudaStream_t s) {
  if (rows > 0) LaunchKernel(ArgmaxKernel, static_cast<unsigned>(rows), kThreads, 0, s)(x, n, out);
}

void CountIds(const int32_t* idx, int64_t n, int64_t num_experts, int32_t* counts, cudaStream_t s) {
  if (n > 0)
    LaunchKernel(CountIdsKernel, static_cast<unsigned>((n + 255) / 256), 256, 0, s)(idx, n, num_experts, counts);
}

void MoeRoute(const float* logits, int64_t rows, int64_t num_experts, int64_t k, bool renormalize, int32_t* idx,
              float* weights, cudaStream_t s) {
  if (rows <= 0) return;
  const unsigned warp_blocks = static_cast<unsigned>((rows + 3) / 4);
  const int E = static_cast<int>(num_experts), kk = static_cast<int>(k);
  if (k <= 32 && k <= num_experts && num_experts <= 512) {
    if (num_experts <= 64)
      LaunchKernel(MoeRouteWarpKernel<2>, warp_blocks, 128, 0, s)(logits, rows, E, kk, renormalize, idx, weights);
    else if (num_experts <= 128)
      LaunchKernel(MoeRouteWarpKernel<4>, warp_blocks, 128, 0, s)(logits, rows, E, kk, renormalize, idx, weights);
    else if (num_experts <= 256)
      LaunchKernel(MoeRouteWarpKernel<8>, warp_blocks, 128, 0, s)(logits, rows, E, kk, renormalize, idx, weights);
    else
      LaunchKernel(MoeRouteWarpKernel<16>, warp_blocks, 128, 0, s)(logits, rows, E, kk, renormalize, idx, weights);
    return;
  }
  LaunchKernel(MoeRouteKernel, static_cast<unsigned>(rows), kThreads, num_experts * sizeof(float), s)(
      logits, num_experts, k, renormalize, idx, weights);
}

void GatherRows(const float* src, int64_t cols, const int32_t* rows, int64_t n, int64_t row_div, float* dst,
                cudaStream_t s) {
  if (n * cols > 0) LaunchKernel(GatherRowsKernel, Blocks(n * cols), kThreads, 0, s)(src, cols, rows, n, row_div, dst);
}

void ScatterScaledRows(const float* src, int64_t cols, const int32_t* rows, int64_t n, const float* scale,
                       float* dst, cudaStream_t s) {
  if (n * cols > 0)
    LaunchKernel(ScatterScaledRowsKernel, Blocks(n * cols), kThreads, 0, s)(src, cols, rows, n, scale, dst);
}

}  // namespace tessera::cuda
