// tessera cuda backend: device helpers shared by the kernel files (bf16 to f32, streamed 16-byte weight loads and
// their bf16 dot products, warp reductions, a block scan, SiLU, the paged K/V row of a key). Header-only __device__
// inline functions: every .cu gets its own copy, no relocatable device code needed.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "backend/cuda/cuda_attention_mask.h"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuda_kv_layout.h"

namespace tessera::cuda {

// One bf16 value (its bits) as f32.
__device__ __forceinline__ float Bf16(uint16_t v) { return __uint_as_float(static_cast<uint32_t>(v) << 16); }

// A 16-byte load of weights read once: through the non-coherent path, not kept in L1.
__device__ __forceinline__ uint4 LoadStream16(const void* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

// LoadStream16 as a volatile asm: issued where written, so a kernel can request its weights before
// GridDependencyWait (the compiler may not sink it past the wait's volatile asm).
__device__ __forceinline__ uint4 LoadStream16Early(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// A read-only f32 load issued where written (a quantized weight's scale before GridDependencyWait).
__device__ __forceinline__ float LoadF32Early(const float* p) {
  float v;
  asm volatile("ld.global.nc.f32 %0, [%1];" : "=f"(v) : "l"(p));
  return v;
}

// acc += the 8 bf16 of w . a (4 floats) b (4 floats), fma in element order.
__device__ __forceinline__ float DotBf16x8(const uint4 w, const float4 a, const float4 b, float acc) {
  acc = fmaf(__uint_as_float(w.x << 16), a.x, acc);
  acc = fmaf(__uint_as_float(w.x & 0xffff0000u), a.y, acc);
  acc = fmaf(__uint_as_float(w.y << 16), a.z, acc);
  acc = fmaf(__uint_as_float(w.y & 0xffff0000u), a.w, acc);
  acc = fmaf(__uint_as_float(w.z << 16), b.x, acc);
  acc = fmaf(__uint_as_float(w.z & 0xffff0000u), b.y, acc);
  acc = fmaf(__uint_as_float(w.w << 16), b.z, acc);
  acc = fmaf(__uint_as_float(w.w & 0xffff0000u), b.w, acc);
  return acc;
}

__device__ __forceinline__ float WarpSum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float WarpMax(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Inclusive prefix sum over a block of 1024 threads, in thread order (*total: the block's sum); red:
// 32 values of shared memory. It begins with a barrier (red's previous readers are done), so calls
// may follow one another. T (the sums' type) is red's; v converts to it.
template <typename T, typename V>
__device__ inline T BlockInclusiveScan(V value, T* red, T* total = nullptr) {
  T v = value;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int o = 1; o < 32; o <<= 1) {
    const T n = __shfl_up_sync(0xffffffffu, v, o);
    if (lane >= o) v += n;
  }
  __syncthreads();
  if (lane == 31) red[warp] = v;
  __syncthreads();
  if (warp == 0) {
    T w = red[lane];
    for (int o = 1; o < 32; o <<= 1) {
      const T n = __shfl_up_sync(0xffffffffu, w, o);
      if (lane >= o) w += n;
    }
    red[lane] = w;
  }
  __syncthreads();
  if (total) *total = red[31];
  return warp > 0 ? v + red[warp - 1] : v;
}

__device__ __forceinline__ float SiluF(float x) { return x / (1.0f + expf(-x)); }
// GELU, tanh approximation (Gemma's gelu_pytorch_tanh), written as the CPU backend's.
__device__ __forceinline__ float GeluTanhF(float x) {
  constexpr float kC = 0.7978845608028654f;  // sqrt(2 / pi)
  return 0.5f * x * (1.0f + tanhf(kC * (x + 0.044715f * x * x * x)));
}
// A gated MLP's activation: act(g) * u, act SiLU (Qwen) or gelu-tanh (Gemma; a uniform branch per launch).
__device__ __forceinline__ float GatedActF(float g, float u, bool gelu) { return (gelu ? GeluTanhF(g) : SiluF(g)) * u; }

// The attention kernels' softmax runs in base 2 (log2 e folded into the query scale); their partial
// maxima are written back in natural-log units.
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// One tile's step of a row's online softmax (base 2): the running maximum m_run takes the tile's
// maximum mx; returns the factor the row's running sum and output are rescaled by, and sets base to
// the exponent base of the tile's scores. No visible key yet (maximum -inf): nothing to rescale,
// every exponential is 0 (no -inf - -inf).
__device__ __forceinline__ float OnlineSoftmaxRescale(float mx, float& m_run, float& base) {
  const float m_new = fmaxf(m_run, mx);
  const float corr = m_new == -INFINITY ? 1.0f : exp2f(m_run - m_new);
  base = m_new == -INFINITY ? 0.0f : m_new;
  m_run = m_new;
  return corr;
}
// The maximum / sum of x over the 4 lanes of a quad (the lanes holding one row of an MMA accumulator),
// a fixed butterfly: all 4 end with the same value.
__device__ __forceinline__ float QuadMax(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float QuadSum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// The masked online softmax of one tile of scores held as an m16n8 MMA accumulator (n8 tiles in a
// row: s[4 j + e] is row half e / 2 (rows g, g + 8), key key0 + 8 j + 2 q + e % 2 of the tile, a row's
// keys over the 4 lanes of a quad): keys outside [from[h], lim[h]) masked, the running max / sum of
// both row halves updated, s replaced by its exponentials; corr: the factors the rows' outputs are
// rescaled by.
template <int N>
__device__ __forceinline__ void TileSoftmax(float* s, int key0, int q, const int (&from)[2], const int (&lim)[2],
                                            float (&m_run)[2], float (&l_run)[2], float (&corr)[2]) {
  float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const int h = (i >> 1) & 1, key = key0 + 8 * (i >> 2) + 2 * q + (i & 1);
    if (key < from[h] || key >= lim[h]) s[i] = -INFINITY;
    mx[h] = fmaxf(mx[h], s[i]);
  }
  float base[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    corr[h] = OnlineSoftmaxRescale(QuadMax(mx[h]), m_run[h], base[h]);
    l_run[h] *= corr[h];
  }
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const int h = (i >> 1) & 1;
    s[i] = exp2f(s[i] - base[h]);  // masked: exp2(-inf) = 0
    l_run[h] += s[i];
  }
}

// The keys row t of an attention step sees (cuda_attention_mask.h): from 0, or from its sliding window's
// start; up to itself (causal), the end of its diffusion block (block-causal, blocks of block_size from
// position 0, never past the step's rows), or the step's last row (a DiffusionGemma canvas row). The
// decode kernel takes only calls without a window or canvas (it assumes the first key is 0).
__device__ __forceinline__ KeyRange AttentionKeys(const AttentionParams& p, int64_t t) {
  return AttentionKeyRange(p.first_pos, p.T, p.block_size, p.sliding_window, p.canvas_begin, t);
}
__device__ __forceinline__ int64_t AttentionLastKey(const AttentionParams& p, int64_t t) {
  return AttentionKeys(p, t).last;
}

// The attention kernels' K/V element type: float (an f32 cache), Bf16Bits (a bf16 cache, its bits) or
// KvSplit (an f32 cache stored as bf16 hi + lo chunks, cuda_kv_layout.h: 4 bytes an element, so row and
// head offsets are f32's; a head of 128 or 256 dims is whole chunks).
using Bf16Bits = uint16_t;
struct KvSplit {
  uint32_t bits;
};
template <typename T>
constexpr bool kKvBf16 = sizeof(T) == 2;
template <typename T>
constexpr bool kKvSplit = std::is_same_v<T, KvSplit>;
__device__ __forceinline__ float KvValue(float x) { return x; }
__device__ __forceinline__ float KvValue(Bf16Bits x) { return Bf16(x); }
__device__ __forceinline__ void KvStore(float* dst, float x) { *dst = x; }
__device__ __forceinline__ void KvStore(Bf16Bits* dst, float x) { *dst = __bfloat16_as_ushort(__float2bfloat16_rn(x)); }

// Host side of a tensor-core attention launcher, whose kernels read K and V only as the MMAs take them
// (a bf16 or split cache): f(T{}) with T the element type of `layout`, nothing for kF32
// (AttentionFlashSupported refuses it).
template <typename F>
void WithPackedKvType(KvLayout layout, F&& f) {
  if (layout == KvLayout::kBf16)
    f(Bf16Bits{});
  else if (layout == KvLayout::kSplit)
    f(KvSplit{});
}

// Host side of a launcher for every layout: f(T{}) with T the element type of `layout`.
template <typename F>
void WithKvType(KvLayout layout, F&& f) {
  if (layout == KvLayout::kF32)
    f(float{});
  else
    WithPackedKvType(layout, f);
}

// Index (bf16 units from a row's start) of value x's bf16 in a bf16 row, or of its hi part in a split row
// (the lo part is kKvSplitChunk further). The packed kernels pass a chunk-aligned x (the lane's offset inside
// the chunk added after), so it folds to a constant when unrolled.
template <typename T>
__device__ __forceinline__ int KvBf16Index(int x) {
  if constexpr (kKvSplit<T>)
    return static_cast<int>(KvSplitHiIndex(x));
  else
    return x;
}

// Value x (0-based within the row) of a cache row (or of a row of k_new / v_new), any element type.
template <typename T>
__device__ __forceinline__ void KvStoreAt(T* row, int64_t x, float value) {
  if constexpr (kKvSplit<T>) {
    auto* h = reinterpret_cast<uint16_t*>(row) + KvSplitHiIndex(x);
    const __nv_bfloat16 hi = __float2bfloat16_rn(value);
    h[0] = __bfloat16_as_ushort(hi);
    h[kKvSplitChunk] = __bfloat16_as_ushort(__float2bfloat16_rn(value - __bfloat162float(hi)));
  } else {
    KvStore(row + x, value);
  }
}
template <typename T>
__device__ __forceinline__ float KvValueAt(const T* row, int64_t x) {
  if constexpr (kKvSplit<T>) {
    const auto* h = reinterpret_cast<const uint16_t*>(row) + KvSplitHiIndex(x);
    return Bf16(h[0]) + Bf16(h[kKvSplitChunk]);
  } else {
    return KvValue(row[x]);
  }
}

// Keys of an attention step read from the paged cache: [0, first_pos) for a plain f32 cache; a bf16 or
// split cache also holds the rows committed by this step (written before the call), so that every row
// a kernel reads is in the cache's layout.
template <typename T>
__device__ __forceinline__ int64_t CachedKeys(const AttentionParams& p) {
  if constexpr (!std::is_same_v<T, float>)
    return p.first_pos + p.commit_len;
  else
    return p.first_pos;
}

template <typename T>
__device__ __forceinline__ const T* KvCache(const AttentionParams& p, bool value) {
  return static_cast<const T*>(value ? p.v_cache : p.k_cache);
}

// Key j's K (or V) row of KV head kvh in an attention step: keys from CachedKeys on are the step's
// fresh rows (f32 k / v, or KvStage's copies k_new / v_new in the cache's layout), earlier ones live in
// the paged cache.
template <typename T = float>
__device__ __forceinline__ const T* KvRow(const AttentionParams& p, int64_t j, int64_t kvh, bool value) {
  const int64_t D = p.head_dim, kv_dim = p.num_kv_heads * D, cached = CachedKeys<T>(p);
  if (j >= cached) {
    if constexpr (!std::is_same_v<T, float>)
      return static_cast<const T*>(value ? p.v_new : p.k_new) + (j - cached) * kv_dim + kvh * D;
    else
      return (value ? p.v : p.k) + (j - cached) * p.kv_stride + kvh * D;
  }
  const int64_t row = static_cast<int64_t>(p.pages[j / p.page_size]) * p.page_size + j % p.page_size;
  return KvCache<T>(p, value) + row * kv_dim + kvh * D;
}

}  // namespace tessera::cuda
