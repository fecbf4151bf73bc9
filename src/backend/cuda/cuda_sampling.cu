// tessera cuda backend: Backend::SampleRows on the device. One block of 1,024 threads per logits row
// reproduces SampleRowReference (backend/sampling.cpp): the same token and, up to float rounding,
// the same probability, without sorting the vocabulary. Only tokens and probabilities then leave the
// GPU (a 151,936-float row is 600 KB; a decode batch of 64 rows would otherwise copy 39 MB a step).
//
// Greedy rows: one pass for the argmax (the reference's scan order: ties -> lowest id, NaN never
// wins), one for the softmax denominator.
//
// Sampled rows work on a key per token, the bit pattern of p = expf((logit - max) / T) (non-negative
// floats order like their bits; the excluded token has p = 0), in the order "key descending, id
// ascending", which is the reference's sort. Keys are recomputed from the logits by every pass (no
// scratch; the rows stay in L2). Every cut of the reference is a prefix of that order:
//  - a probability pass sums p and counts keys by their top 10 bits;
//  - the candidates, the first top_k (or 2,048 when top_k is off) elements of the order, are found
//    by radix selection on those counts (more rounds only when a 10-bit bin is too full), gathered
//    into shared memory and sorted there (bitonic; ties by id because the id is in the sort key);
//  - top_p, min_p and the draw are running sums over the sorted candidates;
//  - when a cut reaches past the candidates (top_k > 4,096, or top_p / the draw deep in a flat
//    distribution), RangeSelect finds the crossing element: count histograms over a narrowing key
//    range, each bin's weight bounded by the weights of its edge keys, the exact weight of the
//    elements above the range summed in registers, until the range fits in shared memory (then
//    gathered, sorted and scanned; more than 4,096 equal keys: their rank by id).
// Running sums are exact fixed-point sums (weights x 2^62 in 64 bits: exact for weights >= 2^-39),
// so they do not depend on summation order; the reference's sequential double sums differ from
// them by its own rounding (~1e-16 relative). The other source of disagreement is expf's last bit:
// CUDA's expf (within 2 ulp) and glibc's (within 1) differ on ~30% of values, which moves running
// sums by ~1e-8 of a token's probability; a draw that lands that close to a boundary between two
// tokens (in practice: uniform near 1 over a long tail) may pick the neighbour.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "backend/cuda/cuda_launch.cuh"
#include "backend/cuda/cuda_mma_util.cuh"  // KernelResidency (dynamic shared memory limit)
#include "backend/cuda/cuda_sampling.h"

namespace tessera::cuda {

namespace {

using u64 = unsigned long long;

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr int kBins = 1024;          // a 10-bit radix digit; keys (p <= 1) have 30 significant bits
constexpr int kSortCap = 8192;       // shared-memory sort buffer (gathered candidates)
constexpr int kPerThread = 4;        // candidates a thread scans
constexpr int kMaxTopK = kThreads * kPerThread;  // top_k up to this: K itself is the candidate set
constexpr int kCandidates = 2048;    // candidates when top_k is off (or above kMaxTopK)
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
  int fill;               // gather slot counter
  u64 pick_w;             // PickBin's results
  uint32_t pick_c, pick_n;
  int64_t found;          // FirstWithKey's result
};

__device__ __forceinline__ int Lane() { return threadIdx.x & 31; }
__device__ __forceinline__ int Warp() { return threadIdx.x >> 5; }
__device__ __forceinline__ unsigned LanesBelow() { return (1u << Lane()) - 1u; }

struct Plus {
  template <class T>
  __device__ T operator()(T a, T b) const { return a + b; }
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

// Inclusive prefix sum over the threads in thread order (*total: the block's sum).
__device__ u64 BlockInclusiveScan(u64 v, u64* red, u64* total = nullptr) {
  const int lane = Lane(), warp = Warp();
  for (int o = 1; o < 32; o <<= 1) {
    const u64 n = __shfl_up_sync(kFull, v, o);
    if (lane >= o) v += n;
  }
  __syncthreads();
  if (lane == 31) red[warp] = v;
  __syncthreads();
  if (warp == 0) {
    u64 w = red[lane];
    for (int o = 1; o < 32; o <<= 1) {
      const u64 n = __shfl_up_sync(kFull, w, o);
      if (lane >= o) w += n;
    }
    red[lane] = w;
  }
  __syncthreads();
  if (total) *total = red[kWarps - 1];
  return warp > 0 ? v + red[warp - 1] : v;
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
__device__ Scale MakeScale(double sum) {
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
__device__ int64_t DrawThreshold(double u) {  // cum > u  <=>  fixed cum > floor(u * 2^62)
  const double v = floor(u * 0x1p62);
  if (!(v < 0x1p63)) return INT64_MAX;  // NaN or >= 2: never crossed (the last token)
  return v < 0 ? -1 : static_cast<int64_t>(v);
}
__device__ int64_t TopPThreshold(float top_p) {  // cum >= top_p  <=>  fixed cum >= ceil(top_p * 2^62)
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

__device__ void ZeroHist(Smem& s) {
  __syncthreads();
  s.hist_c[threadIdx.x] = 0;
  s.hist_lo[threadIdx.x] = 0;
  s.hist_hi[threadIdx.x] = 0;
  __syncthreads();
}

// After a histogram of the elements still in play: the first bin in the order (highest digit)
// holding an element whose running weight (carry + weights before it) crosses x. `by_count`: the
// weight is the count. Returns the bin (-1: none) and the weight / count before it.
struct BinPick {
  int bin;
  u64 w_before;
  uint32_t c_before, count;
};
__device__ BinPick PickBin(Smem& s, u64 carry, int64_t x, bool strict, bool by_count) {
  const int b = kBins - 1 - static_cast<int>(threadIdx.x);  // thread order = descending digits
  const uint32_t c = s.hist_c[b];
  const u64 w = by_count ? c : (static_cast<u64>(s.hist_hi[b]) << 32) | s.hist_lo[b];
  const u64 incl_w = BlockInclusiveScan(w, s.red_u);
  const u64 incl_c = BlockInclusiveScan(c, s.red_u);
  const bool hit = c > 0 && Crossed(carry + incl_w, x, strict);
  const int first = BlockReduce(hit ? static_cast<int>(threadIdx.x) : kThreads, Min(), s.red_i);
  if (static_cast<int>(threadIdx.x) == first) {
    s.pick_w = carry + incl_w - w;
    s.pick_c = static_cast<uint32_t>(incl_c - c);
    s.pick_n = c;
  }
  __syncthreads();
  BinPick r;
  r.bin = first < kThreads ? kBins - 1 - first : -1;
  r.w_before = s.pick_w;
  r.c_before = s.pick_c;
  r.count = s.pick_n;
  return r;
}

// The id of the need-th (1-based) element with key t in id order; out != null: the first `need` of
// them are written there (packed). Tiles of 4,096 consecutive ids (4 a thread), ranked by a scan.
__device__ __noinline__ int64_t FirstWithKey(Smem& s, const Keys& kk, uint32_t t, int64_t need, u64* out) {
  if (threadIdx.x == 0) s.found = -1;
  u64 seen = 0;  // the same in every thread
  for (int64_t base = 0; base < kk.n && seen < static_cast<u64>(need); base += kPerThread * kThreads) {
    const int64_t i0 = base + kPerThread * static_cast<int64_t>(threadIdx.x);
    bool hit[kPerThread];
    u64 c = 0;
#pragma unroll
    for (int e = 0; e < kPerThread; ++e) {
      hit[e] = i0 + e < kk.n && kk.At(i0 + e) == t;
      c += hit[e];
    }
    u64 total = 0;
    u64 rank = seen + BlockInclusiveScan(c, s.red_u, &total) - c;
#pragma unroll
    for (int e = 0; e < kPerThread; ++e) {
      if (!hit[e]) continue;
      if (rank < static_cast<u64>(need)) {
        if (out) out[rank] = Pack(t, i0 + e);
        if (rank == static_cast<u64>(need) - 1) s.found = i0 + e;
      }
      ++rank;
    }
    seen += total;
  }
  __syncthreads();
  return s.found;
}

// Gathers the elements i with take(key, i) into dst (any order, at most the caller's count);
// fuse != null: also returns the sum of fuse's weights over the whole row (the same pass).
template <class Take>
__device__ u64 Gather(Smem& s, const Keys& kk, u64* dst, Take take, const Weigher* fuse) {
  __syncthreads();
  if (threadIdx.x == 0) s.fill = 0;
  __syncthreads();
  u64 acc = 0;
  SweepKeys(kk, [&](int64_t i, bool ok, uint32_t key) {
    if (fuse && ok) acc += (*fuse)(key);
    const bool in = ok && take(key, i);
    const unsigned m = __ballot_sync(kFull, in);
    if (m) {
      int slot = 0;
      if (Lane() == 0) slot = atomicAdd(&s.fill, __popc(m));
      slot = __shfl_sync(kFull, slot, 0);
      if (in) dst[slot + __popc(m & LanesBelow())] = Pack(key, i);
    }
  });
  return fuse ? BlockReduce(acc, Plus(), s.red_u) : (__syncthreads(), 0ull);
}

// Sorts a[0, count) ascending (bitonic over the next power of two, padded with the largest value).
__device__ void SortGathered(u64* a, int count) {
  int m = 1;
  while (m < count) m <<= 1;
  for (int i = count + static_cast<int>(threadIdx.x); i < m; i += kThreads) a[i] = ~0ull;
  __syncthreads();
  for (int k = 2; k <= m; k <<= 1) {
    for (int j = k >> 1; j > 0; j >>= 1) {
      for (int q = threadIdx.x; q < m / 2; q += kThreads) {  // pair q: (i, i + j)
        const int i = (q / j) * 2 * j + q % j, l = i + j;
        const u64 x = a[i], y = a[l];
        if ((x > y) == ((i & k) == 0)) a[i] = y, a[l] = x;
      }
      __syncthreads();
    }
  }
}

// Over sorted elements [0, len) (len <= kMaxTopK): the index of the first whose running weight
// carry + w(0) + ... + w(i) crosses x (len: none). Thread t scans elements [4t, 4t + 4).
template <class W>
__device__ int CrossIndex(Smem& s, int len, W w, u64 carry, int64_t x, bool strict) {
  u64 local[kPerThread], run = 0;
#pragma unroll
  for (int e = 0; e < kPerThread; ++e) {
    const int i = static_cast<int>(threadIdx.x) * kPerThread + e;
    run += i < len ? w(i) : 0ull;
    local[e] = run;
  }
  const u64 before = carry + BlockInclusiveScan(run, s.red_u) - run;
  int below = 0;
#pragma unroll
  for (int e = 0; e < kPerThread; ++e) {
    const int i = static_cast<int>(threadIdx.x) * kPerThread + e;
    below += i < len && !Crossed(before + local[e], x, strict);
  }
  return BlockReduce(below, Plus(), s.red_i);
}
template <class F>
__device__ u64 CandSum(Smem& s, int len, F f) {
  u64 run = 0;
  for (int i = threadIdx.x; i < len; i += kThreads) run += f(i);
  return BlockReduce(run, Plus(), s.red_u);
}

// The crossing element of the prefix `in` for weights wf: the first (in the order) at which the
// running weight crosses x. Rounds of 10-bit digits narrow the keys until the elements left fit in
// shared memory (after the first round, mostly), which are then gathered, sorted and scanned; only
// more than kGatherCap equal keys need the rank among them by id (an ordered pass).
struct Pick {
  bool found;
  uint32_t key;
  int64_t id;
};
constexpr int kGatherCap = kSortCap - kMaxTopK;  // s.sort above the candidates
static_assert(kGatherCap <= kMaxTopK, "CrossIndex scans at most kMaxTopK elements");
__device__ __noinline__ Pick RadixSelect(Smem& s, const Keys& kk, Prefix in, const Weigher& wf, int64_t x,
                            bool strict) {
  uint32_t prefix = 0, count = 0;
  u64 carry = 0;
  for (int shift = 20; shift >= 0; shift -= 10) {
    ZeroHist(s);
    SweepKeys(kk, [&](int64_t i, bool ok, uint32_t key) {
      const bool on = ok && (key >> (shift + 10)) == prefix && in.Has(key, i);  // keys < 2^30
      const uint32_t bin = (key >> shift) & (kBins - 1);
      if (!on) return;
      if (wf.kind == kCount)
        atomicAdd(&s.hist_c[bin], 1u);
      else
        HistWeighted(s, bin, wf(key));
    });
    __syncthreads();
    const BinPick r = PickBin(s, carry, x, strict, wf.kind == kCount);
    if (r.bin < 0) return {false, 0, -1};
    carry = r.w_before;
    prefix = (prefix << 10) | static_cast<uint32_t>(r.bin);
    count = r.count;
    if (count <= static_cast<uint32_t>(kGatherCap)) {
      u64* g = s.sort + kMaxTopK;
      const int sh = shift;
      const uint32_t pf = prefix;
      Gather(s, kk, g, [&](uint32_t key, int64_t i) { return (key >> sh) == pf && in.Has(key, i); }, nullptr);
      SortGathered(g, static_cast<int>(count));
      const int pos = CrossIndex(s, static_cast<int>(count), [&](int i) { return wf(KeyOf(g[i])); }, carry, x, strict);
      const u64 v = g[pos < static_cast<int>(count) ? pos : static_cast<int>(count) - 1];  // the bin crossed
      return {true, KeyOf(v), IdOf(v)};
    }
  }
  // More than kGatherCap elements of `in` have the key `prefix`, each of weight w: the j-th crosses.
  const u64 w = wf(prefix);
  u64 j = 1;
  if (!Crossed(carry + w, x, strict)) {
    const u64 need = static_cast<u64>(x - static_cast<int64_t>(carry));  // > 0, and w > 0 (the bin crossed)
    j = w == 0 ? count : (strict ? need / w + 1 : (need + w - 1) / w);
  }
  if (j > count) j = count;
  return {true, prefix, FirstWithKey(s, kk, prefix, static_cast<int64_t>(j), nullptr)};
}

// RadixSelect's result by count histograms only (the weighted histograms' atomics dominate a pass):
// the key range known to hold the crossing element is narrowed with bounds on each bin's weight,
// count x the weight of its lowest / highest key (weights grow with the key), while the exact weight
// of the members above the range is summed in registers. Once the range holds <= kGatherCap members
// they are gathered, sorted and scanned from that exact carry. The first round's counts are the
// probability pass's when `in` is the whole row. Should the bounds stop narrowing the range (a draw
// deep in a tail of weights near 2^-62, whose fixed-point values are coarse), RadixSelect takes over.
__device__ __noinline__ Pick RangeSelect(Smem& s, const Keys& kk, Prefix in, const Weigher& wf_in, int64_t x,
                                         bool strict) {
  // A threshold met before any weight (x <= 0) is crossed by the first member: its first count.
  const Weigher first;
  const bool at_first = Crossed(0, x, strict);
  const Weigher& wf = at_first ? first : wf_in;
  if (at_first) x = 1, strict = false;
  uint32_t lo = 0, hi = (1u << 30) - 1;  // the crossing's key is in [lo, hi]; keys are below 2^30
  int shift = 20;                         // bin = (key - lo) >> shift
  u64 carry = 0;                          // exact weight of the members with key > hi
  if (in.t < 0) {
    s.hist_c[threadIdx.x] = s.hist_all[threadIdx.x];
    __syncthreads();
  } else {
    ZeroHist(s);
    SweepKeys(kk, [&](int64_t i, bool ok, uint32_t key) {
      if (ok && in.Has(key, i)) atomicAdd(&s.hist_c[key >> 20], 1u);
    });
    __syncthreads();
  }
  const double xd = static_cast<double>(x), widen = 1e-12;  // bounds in double, widened past rounding
  for (int round = 0; round < 6; ++round) {
    const int t = threadIdx.x, b = kBins - 1 - t;  // thread order = descending keys
    const u64 first_key = static_cast<u64>(lo) + (static_cast<u64>(b) << shift);
    const uint32_t c = first_key <= hi ? s.hist_c[b] : 0u;
    const uint32_t b_lo = static_cast<uint32_t>(first_key <= hi ? first_key : hi);
    const uint32_t b_hi = static_cast<uint32_t>(min(first_key + (1ull << shift) - 1, static_cast<u64>(hi)));
    const double w_lo = c ? static_cast<double>(c) * static_cast<double>(wf(b_lo)) : 0.0;
    const double w_hi = c ? static_cast<double>(c) * static_cast<double>(wf(b_hi)) : 0.0;
    // Inclusive / exclusive sums over the bins in descending order (thread order) by a shared scan.
    double* sc = reinterpret_cast<double*>(s.sort + kMaxTopK);  // free here: 2 x kBins doubles
    __syncthreads();
    sc[t] = w_lo, sc[kBins + t] = w_hi;
    __syncthreads();
    for (int o = 1; o < kBins; o <<= 1) {
      const double a = t >= o ? sc[t - o] : 0.0, h = t >= o ? sc[kBins + t - o] : 0.0;
      __syncthreads();
      sc[t] += a, sc[kBins + t] += h;
      __syncthreads();
    }
    const double cd = static_cast<double>(carry);
    const double ub = (cd + sc[kBins + t]) * (1 + widen), lb = (cd + sc[t] - w_lo) * (1 - widen);
    const bool may = c > 0 && (strict ? ub > xd : ub >= xd) && !(strict ? lb > xd : lb >= xd);
    const int t0 = BlockReduce(may ? t : kThreads, Min(), s.red_i);
    if (t0 == kThreads) return {false, 0, -1};  // even the upper bounds never cross
    const int t1 = -BlockReduce(may ? -t : 1, Min(), s.red_i);
    const u64 count = BlockReduce(t >= t0 && t <= t1 ? static_cast<u64>(c) : 0ull, Plus(), s.red_u);
    const uint32_t nhi = static_cast<uint32_t>(min(static_cast<u64>(lo) + (static_cast<u64>(kBins - t0) << shift) - 1,
                                                   static_cast<u64>(hi)));
    const uint32_t nlo = lo + (static_cast<uint32_t>(kBins - 1 - t1) << shift);
    const bool gather = count <= static_cast<u64>(kGatherCap);
    if (!gather && nlo == lo && nhi == hi && nlo != nhi) break;  // no progress: RadixSelect
    int nshift = 0;
    while (((nhi - nlo) >> nshift) >= static_cast<uint32_t>(kBins)) ++nshift;
    // One pass: the exact weight of the members in (nhi, hi], and the members in [nlo, nhi] gathered
    // (or counted by the next bins).
    u64* g = s.sort + kMaxTopK;
    if (gather) {
      __syncthreads();
      if (threadIdx.x == 0) s.fill = 0;
    } else {
      ZeroHist(s);
    }
    __syncthreads();
    u64 acc = 0;
    SweepKeys(kk, [&](int64_t i, bool ok, uint32_t key) {
      const bool mem = ok && key >= nlo && key <= hi && in.Has(key, i);
      if (mem && key > nhi) acc += wf(key);
      const bool inr = mem && key <= nhi;
      if (gather) {
        const unsigned m = __ballot_sync(kFull, inr);
        if (m) {
          int slot = 0;
          if (Lane() == 0) slot = atomicAdd(&s.fill, __popc(m));
          slot = __shfl_sync(kFull, slot, 0);
          if (inr) g[slot + __popc(m & LanesBelow())] = Pack(key, i);
        }
      } else if (inr) {
        atomicAdd(&s.hist_c[(key - nlo) >> nshift], 1u);
      }
    });
    carry += BlockReduce(acc, Plus(), s.red_u);
    lo = nlo, hi = nhi, shift = nshift;
    if (gather) {
      SortGathered(g, static_cast<int>(count));
      const int pos = CrossIndex(s, static_cast<int>(count), [&](int i) { return wf(KeyOf(g[i])); }, carry, x, strict);
      if (pos >= static_cast<int>(count)) return {false, 0, -1};
      const u64 v = g[pos];
      return {true, KeyOf(v), IdOf(v)};
    }
    if (lo == hi) {  // more than kGatherCap members share one key: the j-th of them crosses
      const u64 w = wf(lo);
      u64 j = 1;
      if (!Crossed(carry + w, x, strict)) {
        if (w == 0) return {false, 0, -1};
        const u64 need = static_cast<u64>(x - static_cast<int64_t>(carry));
        j = strict ? need / w + 1 : (need + w - 1) / w;
      }
      if (j > count) return {false, 0, -1};
      return {true, lo, FirstWithKey(s, kk, lo, static_cast<int64_t>(j), nullptr)};
    }
  }
  return RadixSelect(s, kk, in, wf, x, strict);
}

// Sums over the prefix `in` of the row: p (double) and a normalised weight (fixed point).
__device__ __noinline__ double SumP(Smem& s, const Keys& kk, Prefix in) {
  TwoFloatSum acc;
  SweepKeys(kk, [&](int64_t i, bool ok, uint32_t key) {
    if (ok && in.Has(key, i)) acc.Add(__uint_as_float(key));
  });
  return BlockReduce(acc.Value(), Plus(), s.red_d);
}
__device__ __noinline__ u64 SumWeights(Smem& s, const Keys& kk, Prefix in, const Weigher& wf) {
  u64 acc = 0;
  SweepKeys(kk, [&](int64_t i, bool ok, uint32_t key) {
    if (ok && in.Has(key, i)) acc += wf(key);
  });
  return BlockReduce(acc, Plus(), s.red_u);
}

// The last element of the prefix `in` (smallest key, then largest id) whose probability under `wf`
// is positive, packed as key << 32 | ~id.
__device__ __noinline__ u64 LastOf(Smem& s, const Keys& kk, Prefix in, const Weigher& wf) {
  u64 best = ~0ull;
  SweepKeys(kk, [&](int64_t i, bool ok, uint32_t key) {
    if (ok && in.Has(key, i) && wf.Prob(key) > 0.f)
      best = Min()(best, (static_cast<u64>(key) << 32) | (0xffffffffu - static_cast<uint32_t>(i)));
  });
  return BlockReduce(best, Min(), s.red_u);
}

// The first `want` (<= kMaxTopK, <= n) elements of the order, sorted, into s.sort[0, want), from the
// counts of key >> 20 in hist_all. Returns the fused sum (see Gather).
__device__ __noinline__ u64 SelectCandidates(Smem& s, const Keys& kk, int want, const Weigher* fuse) {
  s.hist_c[threadIdx.x] = s.hist_all[threadIdx.x];
  __syncthreads();
  uint32_t prefix = 0;
  u64 above = 0;  // elements whose key is above the digits chosen so far
  for (int shift = 20;; shift -= 10) {
    const BinPick r = PickBin(s, above, want, false, true);  // always found: want <= n
    prefix = (prefix << 10) | static_cast<uint32_t>(r.bin);
    above = r.w_before;
    if (above + r.count <= static_cast<u64>(kSortCap)) {  // the bin fits: gather it with everything above
      const uint32_t lo = prefix << shift;
      const u64 fused = Gather(s, kk, s.sort, [&](uint32_t key, int64_t) { return key >= lo; }, fuse);
      SortGathered(s.sort, static_cast<int>(above + r.count));
      return fused;
    }
    if (shift == 0) break;
    ZeroHist(s);  // the next digit within the bin
    SweepKeys(kk, [&](int64_t, bool ok, uint32_t key) {
      if (ok && (key >> shift) == prefix) atomicAdd(&s.hist_c[(key >> (shift - 10)) & (kBins - 1)], 1u);
    });
    __syncthreads();
  }
  // More than kSortCap elements share the key `prefix`: those above it, then the first ones by id.
  const uint32_t lo = prefix + 1;
  const u64 fused = Gather(s, kk, s.sort, [&](uint32_t key, int64_t) { return key >= lo; }, fuse);
  SortGathered(s.sort, static_cast<int>(above));
  FirstWithKey(s, kk, prefix, want - static_cast<int64_t>(above), s.sort + above);
  return fused;
}

__device__ __forceinline__ float CandP(const Smem& s, int i) { return __uint_as_float(KeyOf(s.sort[i])); }

// Counts the keys' top 10 bits into hist_all and returns the sum of p (exactly, in two floats per
// thread: terms are <= 1).
__device__ __noinline__ double ProbabilityPass(Smem& s, const Keys& kk) {
  s.hist_all[threadIdx.x] = 0;
  __syncthreads();
  TwoFloatSum acc;
  SweepKeys(kk, [&](int64_t, bool ok, uint32_t key) {
    if (!ok) return;
    acc.Add(__uint_as_float(key));
    atomicAdd(&s.hist_all[key >> 20], 1u);
  });
  return BlockReduce(acc.Value(), Plus(), s.red_d);  // (its barrier completes the counts)
}

// The reference's greedy pick: the first largest logit other than `exclude` from id `start` on (NaN
// never wins, but a NaN at `start` is never replaced), and softmax(row) there over the whole row.
__device__ __noinline__ void GreedyRow(Smem& s, const float* row, int64_t n, int64_t ex, int32_t* token, float* prob) {
  const int64_t start = ex == 0 ? 1 : 0;
  if (n <= start) {
    *token = -1, *prob = 0.f;
    return;
  }
  // A thread visits its ids in increasing order, so `>` keeps its first maximum (NaN never wins).
  float bv = -INFINITY;
  int64_t bi = -1;
  Sweep<4>(row, n, [&](int64_t i, bool ok, float v) {
    if (ok && i != ex && (v > bv || (bi < 0 && v == -INFINITY))) bv = v, bi = i;
  });
  // Across threads: the largest value, then the lowest id (ids of -1: none).
  const float top = BlockReduce(bv, Max(), s.red_f);
  const int64_t pick = BlockReduce(bi >= 0 && bv == top ? bi : INT64_MAX, Min(), s.red_l);
  const float first = row[start];
  const int64_t best = (first != first || pick == INT64_MAX) ? start : pick;
  const float lb = row[best];
  // sum_i exp(row[i] - row[best]) in double in the reference; here expf of the same float difference,
  // summed exactly in two floats (terms <= 1), a term above 1 (only the excluded id) in double.
  TwoFloatSum acc;
  double big = 0;
  Sweep<4>(row, n, [&](int64_t, bool ok, float v) {
    if (!ok) return;
    const float d = __fsub_rn(v, lb);
    if (d > 0.f)
      big += exp(static_cast<double>(d));
    else
      acc.Add(expf(d));
  });
  const double sum = BlockReduce(acc.Value() + big, Plus(), s.red_d);
  *token = static_cast<int32_t>(best);
  *prob = __double2float_rn(1.0 / sum);
}

__device__ void SampledRow(Smem& s, const float* row, int64_t n, const SampleRowParams& P, int32_t* token,
                           float* prob) {
  const int64_t ex = P.exclude;
  if (n == 1 && ex == 0) {
    *token = -1, *prob = 0.f;
    return;
  }
  // Pass 1: the largest logit other than `exclude` (std::max / fmaxf both skip NaN).
  float mx = -INFINITY;
  Sweep<4>(row, n, [&](int64_t i, bool ok, float v) {
    if (ok && i != ex) mx = fmaxf(mx, v);
  });
  mx = BlockReduce(mx, Max(), s.red_f);
  // Pass 2: the sum of p, and the counts of the keys' top 10 bits.
  const Keys kk{row, n, ex, mx, __fdiv_rn(1.0f, P.temperature)};
  const double sum_all = ProbabilityPass(s, kk);

  const bool k_on = P.top_k > 0 && P.top_k < n, p_on = P.top_p < 1.0f, m_on = P.min_p > 0.0f;
  const bool k_small = k_on && P.top_k <= kMaxTopK;
  const int n_cand = k_small ? P.top_k : static_cast<int>(n < kCandidates ? n : kCandidates);
  const bool k_in_cand = k_small || n_cand == n;  // the candidates are all of K
  // Without any cut the final distribution is the whole row: its sum is taken while gathering.
  const bool f_all = !k_on && !p_on && !m_on && n_cand < n;
  Weigher norm;
  norm.kind = kNorm;
  if (!k_on) norm.norm = MakeScale(sum_all);
  const u64 fused = SelectCandidates(s, kk, n_cand, f_all ? &norm : nullptr);

  // K: the candidates, the whole row, or (top_k > kMaxTopK) a prefix found by counting.
  Prefix kb;
  if (k_small) {
    double part = 0;
    for (int i = threadIdx.x; i < n_cand; i += kThreads) part += CandP(s, i);
    norm.norm = MakeScale(BlockReduce(part, Plus(), s.red_d));
  } else if (k_on) {
    Weigher count;
    const Pick pk = RangeSelect(s, kk, Prefix{}, count, P.top_k, false);
    kb = Prefix{pk.key, pk.id};
    norm.norm = MakeScale(SumP(s, kk, kb));
  }
  auto norm_of = [&](int i) { return norm.norm.Apply(CandP(s, i)); };
  auto norm_fix = [&](int i) { return Fix(norm_of(i)); };

  // T: the shortest prefix of K whose normalised probabilities reach top_p.
  bool t_in = k_in_cand;  // T lies within the candidates (then it is [0, t_len))
  int t_len = n_cand;
  Prefix tb = kb;
  if (p_on) {
    const int64_t x = TopPThreshold(P.top_p);
    const int pos = CrossIndex(s, n_cand, norm_fix, 0, x, false);
    if (pos < n_cand) {
      t_in = true, t_len = pos + 1;
    } else if (!k_in_cand) {
      const Pick pt = RangeSelect(s, kk, kb, norm, x, false);
      if (pt.found) tb = Prefix{pt.key, pt.id};
    }
  }
  // F: the tokens of T with a normalised probability of at least min_p times the first one's.
  bool f_in = t_in;
  int f_len = t_len;
  Prefix fb = tb;
  if (m_on) {
    const float cut = __fmul_rn(norm_of(0), P.min_p);
    const int len = t_in ? t_len : n_cand;
    int c = 0;
    for (int i = threadIdx.x; i < len; i += kThreads) c += norm_of(i) >= cut;
    c = BlockReduce(c, Plus(), s.red_i);
    if (t_in || c < n_cand) {
      f_in = true, f_len = c > 1 ? c : 1;
    } else {
      // Every candidate passes: F is T cut at the smallest key whose normalised probability passes
      // (the same binary search in every thread).
      uint32_t lo = 0, hi = KeyOf(s.sort[0]);
      while (lo < hi) {
        const uint32_t mid = lo + (hi - lo) / 2;
        if (norm.norm.Apply(__uint_as_float(mid)) >= cut) hi = mid; else lo = mid + 1;
      }
      if (tb.t < static_cast<int64_t>(hi)) fb = Prefix{static_cast<int64_t>(hi) - 1, -1};
    }
  }
  // The final distribution: F renormalised.
  u64 sum_f;
  if (f_in)
    sum_f = CandSum(s, f_len, norm_fix);
  else if (f_all)
    sum_f = fused;
  else
    sum_f = SumWeights(s, kk, fb, norm);
  Weigher fin = norm;
  fin.kind = kFinal;
  fin.fin = MakeScale(static_cast<double>(sum_f) * kFixUnit);
  // The draw: the first token whose running final probability exceeds `uniform`, else (uniform at or
  // above the total's rounding) F's last token with a positive probability.
  const int64_t x = DrawThreshold(P.uniform);
  const int len = f_in ? f_len : n_cand;
  const int pos = CrossIndex(s, len, [&](int i) { return fin(KeyOf(s.sort[i])); }, 0, x, true);
  uint32_t key;
  int64_t id;
  if (pos < len || f_in) {
    int j = pos < len ? pos : len - 1;
    if (pos >= len)
      while (j > 0 && !(fin.Prob(KeyOf(s.sort[j])) > 0.f)) --j;
    const u64 v = s.sort[j];
    key = KeyOf(v), id = IdOf(v);
  } else {
    const Pick pd = RangeSelect(s, kk, fb, fin, x, true);
    if (pd.found) {
      key = pd.key, id = pd.id;
    } else {
      const u64 last = LastOf(s, kk, fb, fin);
      key = static_cast<uint32_t>(last >> 32), id = 0xffffffffu - static_cast<uint32_t>(last);
    }
  }
  *token = static_cast<int32_t>(id);
  *prob = fin.Prob(key);
}

__global__ void __launch_bounds__(kThreads, 1)
    SampleRowsKernel(const float* __restrict__ logits, int64_t vocab, const SampleRowParams* __restrict__ params,
                     int32_t* tokens, float* probs) {
  GridDependencyWait();
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Smem& s = *reinterpret_cast<Smem*>(smem_raw);
  const int64_t r = blockIdx.x;
  const SampleRowParams p = params[r];
  const float* row = logits + r * vocab;
  int32_t token = -1;
  float prob = 0.f;
  if (p.temperature <= 0.f)
    GreedyRow(s, row, vocab, p.exclude, &token, &prob);
  else
    SampledRow(s, row, vocab, p, &token, &prob);
  if (threadIdx.x == 0) tokens[r] = token, probs[r] = prob;
}

}  // namespace

void SampleRows(const float* logits, int64_t rows, int64_t vocab, const SampleRowParams* params, int32_t* tokens,
                float* probs, cudaStream_t s) {
  if (rows <= 0 || vocab <= 0) return;
  KernelResidency(SampleRowsKernel, sizeof(Smem), kThreads);  // sets the dynamic shared memory limit
  LaunchKernel(SampleRowsKernel, static_cast<unsigned>(rows), kThreads, sizeof(Smem), s)(logits, vocab, params, tokens,
                                                                                         probs);
}

}  // namespace tessera::cuda
