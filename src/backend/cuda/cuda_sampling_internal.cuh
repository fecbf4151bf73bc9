// tessera cuda backend: the building blocks of the row-sampling kernel (cuda_sampling.cu): its block
// shape and shared memory, block reductions (the block scan is cuda_device_util.cuh's), the row
// sweep, exact sums and scales, weights in fixed point and the reference's crossing thresholds, the
// key of a token and the order over keys, and the histogram updates. Header-only __device__
// functions, included by cuda_sampling.cu alone (the project has no relocatable device code, so the
// kernel's helpers live in its translation unit); the namespace sampling_internal keeps their short
// names out of tessera::cuda.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "backend/cuda/cuda_device_util.cuh"  // BlockInclusiveScan

namespace tessera::cuda::sampling_internal {

using u64 = unsigned long long;

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr int kBins = 1024;                      // a 10-bit radix digit; keys (p <= 1) have 30 significant bits
constexpr int kSortCap = 8192;                   // shared-memory sort buffer (gathered candidates)
constexpr int kPerThread = 4;                    // candidates a thread scans
constexpr int kMaxTopK = kThreads * kPerThread;  // top_k up to this: K itself is the candidate set
constexpr int kCandidates = 2048;                // candidates when top_k is off (or above kMaxTopK)
constexpr unsigned kFull = 0xffffffffu;
static_assert(kBins == kThreads, "a bin scan gives each thread one bin");
static_assert(kMaxTopK <= kSortCap && kCandidates <= kMaxTopK, "candidates must fit the sort buffer");

enum WeightKind { kCount, kNorm, kFinal };

struct Smem {
  u64 sort[kSortCap];  // packed candidates (Pack), ascending = the order; selections gather above kMaxTopK
  uint32_t hist_c[kBins];
  uint32_t hist_lo[kBins], hist_hi[kBins];  // 64-bit weight sums as two halves (32-bit atomics)
  u64 red_u[kWarps];
  double red_d[kWarps];
  float red_f[kWarps];
  int red_i[kWarps];
  int64_t red_l[kWarps];
  uint32_t hist_all[kBins];  // counts of key >> 20 over the row (the probability pass)
  int fill;                  // gather slot counter
  u64 pick_w;                // PickBin's results
  uint32_t pick_c, pick_n;
  int64_t found;  // FirstWithKey's result
};

__device__ __forceinline__ int Lane() { return threadIdx.x & 31; }
__device__ __forceinline__ int Warp() { return threadIdx.x >> 5; }
__device__ __forceinline__ unsigned LanesBelow() { return (1u << Lane()) - 1u; }

struct Plus {
  template <class T>
  __device__ T operator()(T a, T b) const {
    return a + b;
  }
};
struct Max {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct Min {
  __device__ u64 operator()(u64 a, u64 b) const { return a < b ? a : b; }
  __device__ int64_t operator()(int64_t a, int64_t b) const { return a < b ? a : b; }
  __device__ int operator()(int a, int b) const { return a < b ? a : b; }
};

// Every thread gets op over the block, combined in a fixed order (deterministic sums).
template <class T, class Op>
__device__ T BlockReduce(T v, Op op, T* red) {
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(kFull, v, o));
  __syncthreads();  // red's previous readers are done
  if (Lane() == 0) red[Warp()] = v;
  __syncthreads();
  T r = red[0];
  for (int w = 1; w < kWarps; ++w) r = op(r, red[w]);
  return r;
}

__device__ __forceinline__ bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// f(i, in_range, row[i]) for i < n, with U 16-byte loads in flight a thread (coalesced); every
// thread makes the same number of calls, so f may use warp collectives. One block streams a whole
// 600 KB row: enough bytes must be in flight per SM.
template <int U, class F>
__device__ void Sweep(const float* a, int64_t n, F f) {
  if (Aligned16(a)) {
    const int64_t nq = n >> 2;
    const float4* q = reinterpret_cast<const float4*>(a);
    for (int64_t base = 0; base < nq; base += static_cast<int64_t>(U) * kThreads) {
      float4 v[U];
#pragma unroll
      for (int e = 0; e < U; ++e) {
        const int64_t j = base + e * kThreads + threadIdx.x;
        v[e] = j < nq ? q[j] : make_float4(0.f, 0.f, 0.f, 0.f);
      }
#pragma unroll
      for (int e = 0; e < U; ++e) {
        const int64_t j = base + e * kThreads + threadIdx.x;
        const bool ok = j < nq;
        f(4 * j, ok, v[e].x);
        f(4 * j + 1, ok, v[e].y);
        f(4 * j + 2, ok, v[e].z);
        f(4 * j + 3, ok, v[e].w);
      }
    }
    const int64_t i = 4 * nq + threadIdx.x;  // the last n % 4
    f(i, i < n, i < n ? a[i] : 0.f);
    return;
  }
  for (int64_t base = 0; base < n; base += static_cast<int64_t>(4 * U) * kThreads) {
    float v[4 * U];
#pragma unroll
    for (int e = 0; e < 4 * U; ++e) {
      const int64_t i = base + e * kThreads + threadIdx.x;
      v[e] = i < n ? a[i] : 0.f;
    }
#pragma unroll
    for (int e = 0; e < 4 * U; ++e) {
      const int64_t i = base + e * kThreads + threadIdx.x;
      f(i, i < n, v[e]);
    }
  }
}

// Sum of terms in [0, 1] kept exactly as s + c (Fast2Sum; s starts at 1 so |s| >= every term).
struct TwoFloatSum {
  float s = 1.0f, c = 0.0f;
  __device__ void Add(float x) {
    const float t = __fadd_rn(s, x);
    c = __fadd_rn(c, __fsub_rn(x, __fsub_rn(t, s)));
    s = t;
  }
  __device__ double Value() const { return (static_cast<double>(s) - 1.0) + static_cast<double>(c); }
};

// x -> (float)(x / S) for a double S, as the reference's (float)((double)x / S): x * (hi + lo),
// hi + lo = 1 / S to ~2^-48, the product's tail from an exact FMA. Differs from the reference only
// when x / S lies within ~2^-46 (relative) of a rounding boundary of float.
struct Scale {
  float hi = 0.f, lo = 0.f;
  __device__ float Apply(float x) const {
    const float h = __fmul_rn(x, hi);
    const float e = fmaf(x, hi, -h);
    return __fadd_rn(h, fmaf(x, lo, e));
  }
};
__device__ inline Scale MakeScale(double sum) {
  const double r = 1.0 / sum;
  Scale sc;
  sc.hi = __double2float_rn(r);
  sc.lo = __double2float_rn(r - static_cast<double>(sc.hi));
  return sc;
}

// Weights in fixed point: w * 2^62, exact for w >= 2^-39 (normalised weights are <= 1).
__device__ __forceinline__ u64 Fix(float w) { return w > 0.f ? __float2ull_rn(fminf(w, 2.f) * 0x1p62f) : 0ull; }
constexpr double kFixUnit = 0x1p-62;

// The weight of an element by its key: 1 (counting), its normalised probability (top_p), or its
// probability in the final distribution (the draw).
struct Weigher {
  WeightKind kind = kCount;
  Scale norm, fin;
  __device__ float Prob(uint32_t key) const {
    const float w = norm.Apply(__uint_as_float(key));
    return kind == kFinal ? fin.Apply(w) : w;
  }
  __device__ u64 operator()(uint32_t key) const { return kind == kCount ? 1ull : Fix(Prob(key)); }
};

// The crossing tests of the reference: cumulative > uniform (the draw), >= top_p / top_k.
__device__ __forceinline__ bool Crossed(u64 cum, int64_t x, bool strict) {
  const int64_t c = static_cast<int64_t>(cum);  // sums stay below 2^63
  return strict ? c > x : c >= x;
}
__device__ inline int64_t DrawThreshold(double u) {  // cum > u  <=>  fixed cum > floor(u * 2^62)
  const double v = floor(u * 0x1p62);
  if (!(v < 0x1p63)) return INT64_MAX;  // NaN or >= 2: never crossed (the last token)
  return v < 0 ? -1 : static_cast<int64_t>(v);
}
__device__ inline int64_t TopPThreshold(float top_p) {  // cum >= top_p  <=>  fixed cum >= ceil(top_p * 2^62)
  const double v = ceil(static_cast<double>(top_p) * 0x1p62);
  return v <= 0 ? 0 : static_cast<int64_t>(v);  // top_p < 1 here
}

// A candidate in shared memory: ascending packed values are the order (key desc, then id asc).
__device__ __forceinline__ u64 Pack(uint32_t key, int64_t id) {
  return (static_cast<u64>(~key) << 32) | static_cast<uint32_t>(id);
}
__device__ __forceinline__ uint32_t KeyOf(u64 v) { return ~static_cast<uint32_t>(v >> 32); }
__device__ __forceinline__ int64_t IdOf(u64 v) { return static_cast<uint32_t>(v); }

// A prefix of the order: the elements with key > t, and those with key == t and id <= id_max.
struct Prefix {
  int64_t t = -1, id_max = -1;  // {-1, -1}: every element
  __device__ bool Has(uint32_t key, int64_t id) const {
    return static_cast<int64_t>(key) > t || (static_cast<int64_t>(key) == t && id <= id_max);
  }
};

// A sampled row's keys, computed from its logits wherever a pass needs them (deterministically, so
// every pass sees the same keys): the rows of a step stay in L2 between passes (64 rows of 151,936
// are 39 MB), where keys kept in a buffer would double each pass's traffic and evict them.
struct Keys {
  const float* row;
  int64_t n, ex;
  float mx, inv_t;
  // p = exp((x - mx) / T) in float as the reference; NaN (non-finite logits) gets probability 0.
  __device__ uint32_t At(int64_t i, float v) const {
    const float p = expf(__fmul_rn(__fsub_rn(i == ex ? -INFINITY : v, mx), inv_t));
    return p == p ? __float_as_uint(p) : 0u;
  }
  __device__ uint32_t At(int64_t i) const { return At(i, row[i]); }
};
// f(i, in_range, key) over the row (see Sweep).
template <class F>
__device__ void SweepKeys(const Keys& kk, F f) {
  Sweep<2>(kk.row, kk.n, [&](int64_t i, bool ok, float v) { f(i, ok, ok ? kk.At(i, v) : 0u); });
}

// Histogram updates, by shared atomics (equal addresses in a warp are serialised by the hardware;
// increments by one are combined). A 64-bit weight goes in as two 32-bit halves with the carry: a
// 64-bit shared atomic is a compare-and-swap loop, and __reduce_add_sync over the lanes of one bin
// (masks differing within the warp) takes a slow divergent path.
__device__ __forceinline__ void HistWeighted(Smem& s, uint32_t bin, u64 w) {
  atomicAdd(&s.hist_c[bin], 1u);
  const uint32_t lo = static_cast<uint32_t>(w), old = atomicAdd(&s.hist_lo[bin], lo);
  const uint32_t hi = static_cast<uint32_t>(w >> 32) + (old + lo < old ? 1u : 0u);
  if (hi) atomicAdd(&s.hist_hi[bin], hi);
}

__device__ inline void ZeroHist(Smem& s) {
  __syncthreads();
  s.hist_c[threadIdx.x] = 0;
  s.hist_lo[threadIdx.x] = 0;
  s.hist_hi[threadIdx.x] = 0;
  __syncthreads();
}

}  // namespace tessera::cuda::sampling_internal
