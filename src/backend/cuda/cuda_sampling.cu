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
//
// The kernel's building blocks (reductions, the row sweep, exact sums, fixed-point weights, keys and
// their order) are in cuda_sampling_internal.cuh.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "backend/cuda/cuda_launch.cuh"
#include "backend/cuda/cuda_mma_util.cuh"  // KernelResidency (dynamic shared memory limit)
#include "backend/cuda/cuda_sampling.h"
#include "backend/cuda/cuda_sampling_internal.cuh"

namespace tessera::cuda {

namespace sampling_internal {
namespace {

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
}  // namespace sampling_internal

namespace {
// A thread per 32 tokens (one mask word) of a masked row: blockIdx.y the row, x the words.
__global__ void MaskLogitsRowsKernel(float* logits, int64_t vocab, const int64_t* rows, const uint32_t* words) {
  GridDependencyWait();
  const int64_t W = (vocab + 31) / 32, w = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (w >= W) return;
  const uint32_t bits = words[blockIdx.y * W + w];
  if (bits == 0xffffffffu) return;
  float* row = logits + rows[blockIdx.y] * vocab;
  const int64_t end = min(vocab, 32 * (w + 1));
  for (int64_t t = 32 * w; t < end; ++t)
    if (!((bits >> (t % 32)) & 1u)) row[t] = -INFINITY;
}
}  // namespace

void MaskLogitsRows(float* logits, int64_t vocab, const int64_t* rows, int64_t n, const uint32_t* words,
                    cudaStream_t s) {
  if (n <= 0 || vocab <= 0) return;
  constexpr int kThreads = 256;
  const int64_t W = (vocab + 31) / 32;
  const dim3 grid(static_cast<unsigned>((W + kThreads - 1) / kThreads), static_cast<unsigned>(n));
  LaunchKernel(MaskLogitsRowsKernel, grid, kThreads, 0, s)(logits, vocab, rows, words);
}

void SampleRows(const float* logits, int64_t rows, int64_t vocab, const SampleRowParams* params, int32_t* tokens,
                float* probs, cudaStream_t s) {
  using sampling_internal::kThreads;
  using sampling_internal::SampleRowsKernel;
  using sampling_internal::Smem;
  if (rows <= 0 || vocab <= 0) return;
  KernelResidency(SampleRowsKernel, sizeof(Smem), kThreads);  // sets the dynamic shared memory limit
  LaunchKernel(SampleRowsKernel, static_cast<unsigned>(rows), kThreads, sizeof(Smem), s)(logits, vocab, params, tokens,
                                                                                         probs);
}

}  // namespace tessera::cuda
