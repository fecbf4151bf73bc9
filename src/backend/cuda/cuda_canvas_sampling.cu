// tessera cuda backend: Backend::CanvasSampleRows on the device. A canvas step's rows (~256 a canvas,
// up to 262,144 logits each: 1 MB a row) stay on the GPU: each becomes z = logits / t in place, and
// only its pick (entropy, argmax, its probability, the inverse-CDF draw: 24 bytes) leaves, as
// CanvasRowReference (backend/sampling.cpp) defines it: the same argmax and draw, the double sums in
// another order (~1e-16 relative), so the draw differs only when uniform * total lies that close to
// a running-sum edge.
//
// One block of 512 threads per row, two passes over the row:
//  1. Read (not written): z = x / t (IEEE division, as the host's `row[i] /= t`), each thread's first
//     maximum, and e = exp(z - m) in double. The row is cut into tiles of 512 consecutive tokens
//     (more when the vocabulary exceeds 512 x kMaxTiles), warp w taking tiles w, w + 16, ...; a
//     warp's sums are taken against its running maximum m_w (the same in every lane), rescaled when
//     a sub-tile raises it, so e needs no earlier pass for the row's maximum. Each tile's sum goes to
//     shared memory with the m_w it was taken against; the lanes also sum e (z - m_w) for the entropy.
//  2. With the row's maximum m, the tiles' sums are scaled to m and scanned in token order: the tile
//     whose running sum first exceeds uniform * total holds the draw. The block walks that one tile
//     (a thread a token, a block scan of its e), then rewrites the whole row as z (bf16-rounded when
//     asked). The walk reads the tile before the rewrite, so it sees the unrounded z.
// Per row of V tokens: reads 2 V x 4 bytes (+ the draw's tile), writes V x 4; V + ~V / 256 + 530
// double exps (pass 1, its rescales and the tiles' scaling, the walk).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "backend/cuda/cuda_launch.cuh"
#include "backend/cuda/cuda_sampling.h"

namespace tessera::cuda {
namespace {

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int kUnroll = 4;                     // 16-byte loads a lane has in flight in pass 1
constexpr int kSub = 32 * 4 * kUnroll;         // tokens a warp reads at once (a sub-tile)
constexpr int kMaxTiles = 1024;                // tile sums kept in shared memory
constexpr int kTilesPerThread = kMaxTiles / kThreads;
constexpr unsigned kFull = 0xffffffffu;
static_assert(kSub == kThreads, "a tile's walk gives each thread one token of a sub-tile");
static_assert(kMaxTiles % kThreads == 0, "the tile scan gives each thread the same number of tiles");

struct Smem {
  double tile_sum[kMaxTiles];  // sum of exp(z - tile_ref[k]) over tile k
  float tile_ref[kMaxTiles];   // the maximum tile k's sum was taken against
  float warp_m[kWarps];        // pass 1's per-warp results
  double warp_t[kWarps], warp_w[kWarps];
  int64_t warp_arg[kWarps];
  double red_d[kWarps];
  int64_t red_l[kWarps];
  double weighted;
  double carry;  // the running sum before the crossing tile
};

__device__ __forceinline__ int Lane() { return threadIdx.x & 31; }
__device__ __forceinline__ int Warp() { return threadIdx.x >> 5; }

__device__ __forceinline__ double WarpSumD(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
  return v;
}
__device__ __forceinline__ float WarpMaxF(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFull, v, o));
  return v;
}
__device__ __forceinline__ int64_t WarpMinL(int64_t v) {
  for (int o = 16; o > 0; o >>= 1) {
    const int64_t u = __shfl_xor_sync(kFull, v, o);
    v = u < v ? u : v;
  }
  return v;
}

// The block's minimum (every thread gets it); begins with a barrier, so calls may follow one another.
__device__ int64_t BlockMinL(Smem& s, int64_t v) {
  v = WarpMinL(v);
  __syncthreads();
  if (Lane() == 0) s.red_l[Warp()] = v;
  __syncthreads();
  int64_t r = s.red_l[0];
  for (int w = 1; w < kWarps; ++w) r = s.red_l[w] < r ? s.red_l[w] : r;
  return r;
}

// Inclusive sum over the block in thread order, in a fixed order (*excl: the sum before this thread,
// exactly the previous thread's inclusive sum; *total: the block's sum, the last thread's).
__device__ double BlockScanD(Smem& s, double v, double* excl, double* total) {
  for (int o = 1; o < 32; o <<= 1) {
    const double u = __shfl_up_sync(kFull, v, o);
    if (Lane() >= o) v += u;
  }
  const double prev = __shfl_up_sync(kFull, v, 1);
  __syncthreads();
  if (Lane() == 31) s.red_d[Warp()] = v;
  __syncthreads();
  double before = 0, all = 0;
  for (int w = 0; w < kWarps; ++w) {
    if (w == Warp()) before = all;
    all += s.red_d[w];
  }
  *excl = Lane() > 0 ? before + prev : before;
  *total = all;
  return before + v;
}

// core/dtype.h's Bf16ToF32(F32ToBf16(f)): round to nearest even, NaN kept quiet.
__device__ __forceinline__ float RoundBf16(float f) {
  const uint32_t bits = __float_as_uint(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return __uint_as_float(((bits >> 16) | 0x40u) << 16);
  const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return __uint_as_float(((bits + rounding) >> 16) << 16);
}

// Tokens [i, i + 4) of a row (i a multiple of 4), -inf past n; vec: the row is 16-byte aligned.
__device__ __forceinline__ float4 Load4(const float* row, int64_t i, int64_t n, bool vec) {
  if (vec && i + 4 <= n) return *reinterpret_cast<const float4*>(row + i);
  float4 v = make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
  if (i < n) v.x = row[i];
  if (i + 1 < n) v.y = row[i + 1];
  if (i + 2 < n) v.z = row[i + 2];
  if (i + 3 < n) v.w = row[i + 3];
  return v;
}

// A lane's sums of e and e (z - m) (against the warp's running maximum m).
struct ExpSums {
  double e = 0, ed = 0;
};

// The sums plus 4 tokens' e = exp(z - m) in double. Not inlined: inlined, the 16 exps of a sub-tile
// were interleaved and spilled registers even at 128 a thread.
__device__ __noinline__ ExpSums AddExp4(float4 z, float m, ExpSums acc) {
  const float v[4] = {z.x, z.y, z.z, z.w};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const double d = static_cast<double>(v[j]) - static_cast<double>(m);
    const double e = exp(d);
    acc.e += e;
    if (e > 0) acc.ed += e * d;  // a -inf token adds nothing (0 * -inf would be NaN)
  }
  return acc;
}

// Pass 1 of one warp: z's maximum and first argmax over its tiles, their sums into s.tile_*, and
// the warp's sums of e and e (z - m_w) against its final maximum m_w into s.warp_*.
__device__ void WarpPass(Smem& s, const float* row, int64_t n, float t, bool vec, int64_t tile_len, int64_t tiles) {
  float mw = -INFINITY;        // the warp's running maximum of z (the same in every lane)
  double sum_e = 0, sum_ed = 0;  // this lane's e and e (z - mw) over finished tiles
  double tile_e = 0;           // this lane's e over the current tile
  float best = -INFINITY;      // this lane's largest z and its first index
  int64_t best_i = INT64_MAX;
  for (int64_t k = Warp(); k < tiles; k += kWarps) {
    const int64_t t0 = k * tile_len, t1 = t0 + tile_len < n ? t0 + tile_len : n;
    for (int64_t b = t0; b < t1; b += kSub) {
      float z[4 * kUnroll];
      float4 x[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) x[u] = Load4(row, b + 128 * u + 4 * Lane(), t1, vec);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        z[4 * u] = __fdiv_rn(x[u].x, t);
        z[4 * u + 1] = __fdiv_rn(x[u].y, t);
        z[4 * u + 2] = __fdiv_rn(x[u].z, t);
        z[4 * u + 3] = __fdiv_rn(x[u].w, t);
      }
      // A lane's tokens come in increasing order, so `>` keeps its first maximum (-inf padding
      // past the row never wins).
      float local = -INFINITY;
#pragma unroll
      for (int j = 0; j < 4 * kUnroll; ++j) {
        if (z[j] > best) best = z[j], best_i = b + 128 * (j / 4) + 4 * Lane() + (j % 4);
        local = fmaxf(local, z[j]);
      }
      local = WarpMaxF(local);
      if (local > mw) {  // the same in every lane
        if (mw != -INFINITY) {  // rescale the sums to the new maximum
          const double d = static_cast<double>(mw) - static_cast<double>(local), sc = exp(d);
          sum_ed = sc * (sum_ed + d * (sum_e + tile_e));  // every e so far, the tile's too
          sum_e *= sc;
          tile_e *= sc;
        }
        mw = local;
      }
      if (mw == -INFINITY) continue;  // only -inf so far: every e is 0
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const ExpSums r = AddExp4(make_float4(z[4 * u], z[4 * u + 1], z[4 * u + 2], z[4 * u + 3]), mw, {tile_e, sum_ed});
        tile_e = r.e, sum_ed = r.ed;
      }
    }
    const double ts = WarpSumD(tile_e);
    if (Lane() == 0) s.tile_sum[k] = ts, s.tile_ref[k] = mw;
    sum_e += tile_e;
    tile_e = 0;
  }
  sum_e = WarpSumD(sum_e);
  sum_ed = WarpSumD(sum_ed);
  const int64_t arg = WarpMinL(best == mw && mw != -INFINITY ? best_i : INT64_MAX);
  if (Lane() == 0) {
    s.warp_m[Warp()] = mw;
    s.warp_t[Warp()] = sum_e;
    s.warp_w[Warp()] = sum_ed;
    s.warp_arg[Warp()] = arg;
  }
}

// Walks tile k (every thread takes part): *crossed = the first token whose running sum, from
// `carry`, exceeds `target` (-1: none), *last = the tile's last token with e > 0 (-1: none).
__device__ void WalkTile(Smem& s, const float* row, int64_t n, float t, float m, int64_t k, int64_t tile_len,
                         double carry, double target, int64_t* crossed, int64_t* last) {
  const int64_t t0 = k * tile_len, t1 = t0 + tile_len < n ? t0 + tile_len : n;
  *crossed = -1, *last = -1;
  for (int64_t b = t0; b < t1; b += kThreads) {
    const int64_t i = b + threadIdx.x;
    double e = 0;
    if (i < t1) e = exp(static_cast<double>(__fdiv_rn(row[i], t)) - static_cast<double>(m));
    double excl, all;
    const double incl = BlockScanD(s, e, &excl, &all);
    // e > 0: the scan's rounding may not grow at a zero term; the reference only crosses on one.
    const int64_t first = BlockMinL(s, e > 0 && carry + incl > target ? i : INT64_MAX);
    const int64_t lastp = -BlockMinL(s, e > 0 ? -i : 1);
    if (lastp >= 0) *last = lastp;
    if (first != INT64_MAX) {
      *crossed = first;
      return;
    }
    carry += all;
  }
}

// Two blocks an SM (64 registers: ptxas spills ~50 bytes a thread, around AddExp4's calls); one block
// (90 registers, no spills) halves the warps that hide pass 2's memory latency. Not yet measured.
__global__ void __launch_bounds__(kThreads, 2)
    CanvasRowsKernel(float* logits, int64_t n, const CanvasRowParams* __restrict__ params, bool round_bf16,
                     CanvasPick* picks) {
  GridDependencyWait();
  __shared__ Smem s;
  const int64_t r = blockIdx.x;
  const CanvasRowParams p = params[r];
  const float t = p.temperature;
  float* row = logits + r * n;
  const bool vec = (reinterpret_cast<uintptr_t>(row) & 15u) == 0;
  // Tiles: multiples of kSub tokens, at most kMaxTiles of them.
  const int64_t per_tile_max = static_cast<int64_t>(kSub) * kMaxTiles;
  const int64_t tile_len = static_cast<int64_t>(kSub) * ((n + per_tile_max - 1) / per_tile_max);
  const int64_t tiles = (n + tile_len - 1) / tile_len;

  // --- Pass 1.
  WarpPass(s, row, n, t, vec, tile_len, tiles);
  __syncthreads();
  float m = -INFINITY;
  int64_t argmax = INT64_MAX;
  for (int w = 0; w < kWarps; ++w) m = fmaxf(m, s.warp_m[w]);
  for (int w = 0; w < kWarps; ++w)
    if (s.warp_m[w] == m && s.warp_arg[w] < argmax) argmax = s.warp_arg[w];
  // The warps' sums of e (z - m_w), moved to m: e (z - m) = sc e' (z - m_w + d), sc = exp(d), d = m_w - m.
  if (Warp() == 0) {
    double w_part = 0;
    if (Lane() < kWarps && s.warp_m[Lane()] != -INFINITY) {
      const double d = static_cast<double>(s.warp_m[Lane()]) - static_cast<double>(m), sc = exp(d);
      w_part = sc * (s.warp_w[Lane()] + d * s.warp_t[Lane()]);
    }
    w_part = WarpSumD(w_part);
    if (Lane() == 0) s.weighted = w_part;
  }

  // --- The tiles' sums against m, scanned in token order: the tile that holds the draw.
  double v[kTilesPerThread], mine = 0;
#pragma unroll
  for (int j = 0; j < kTilesPerThread; ++j) {
    const int64_t k = static_cast<int64_t>(threadIdx.x) * kTilesPerThread + j;
    v[j] = 0;
    if (k < tiles && s.tile_ref[k] != -INFINITY)
      v[j] = s.tile_sum[k] * exp(static_cast<double>(s.tile_ref[k]) - static_cast<double>(m));
    mine += v[j];
  }
  double excl, total;
  const double incl = BlockScanD(s, mine, &excl, &total);
  const double target = p.uniform * total;
  // A thread's running sum starts at the previous thread's end and ends at its own inclusive sum, so
  // no draw below the total falls between two threads' tiles.
  double run = excl;
  int64_t hit = INT64_MAX;
  double before_hit = 0;
#pragma unroll
  for (int j = 0; j < kTilesPerThread; ++j) {
    const double before = run;
    run = j == kTilesPerThread - 1 ? incl : run + v[j];
    if (hit == INT64_MAX && v[j] > 0 && run > target)
      hit = static_cast<int64_t>(threadIdx.x) * kTilesPerThread + j, before_hit = before;
  }
  const int64_t k_draw = BlockMinL(s, hit);
  if (hit == k_draw && hit != INT64_MAX) s.carry = before_hit;
  __syncthreads();

  int64_t sampled = -1;
  if (m != -INFINITY) {
    int64_t crossed = -1, last = -1, back = tiles - 1;
    if (k_draw != INT64_MAX) {
      WalkTile(s, row, n, t, m, k_draw, tile_len, s.carry, target, &crossed, &last);
      // No token of the tile crossed (the walk's sums round the other way than the tiles'): the draw
      // sits on the tile's edge, within rounding; its last token with e > 0 is as good as the next
      // tile's first.
      sampled = crossed >= 0 ? crossed : last;
      back = k_draw - 1;
    }
    // No crossing at all (uniform * total at or above the total's rounding): the last token with
    // e > 0, as the reference; tiles with a zero sum hold none.
    for (int64_t k = back; sampled < 0 && k >= 0; --k) {
      if (s.tile_sum[k] == 0) continue;  // shared memory: the same branch in every thread
      WalkTile(s, row, n, t, m, k, tile_len, 0.0, INFINITY, &crossed, &last);
      sampled = last;
    }
  }
  __syncthreads();  // the walks' reads of x come before the rewrite

  // --- Pass 2: the row becomes z (bf16-rounded when asked).
  auto out = [&](float x) {
    const float z = __fdiv_rn(x, t);
    return round_bf16 ? RoundBf16(z) : z;
  };
  if (vec) {
    float4* q = reinterpret_cast<float4*>(row);
    const int64_t nq = n >> 2;
    for (int64_t base = 0; base < nq; base += static_cast<int64_t>(kUnroll) * kThreads) {
      float4 x[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t j = base + u * kThreads + threadIdx.x;
        x[u] = j < nq ? q[j] : make_float4(0.f, 0.f, 0.f, 0.f);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t j = base + u * kThreads + threadIdx.x;
        if (j < nq) q[j] = make_float4(out(x[u].x), out(x[u].y), out(x[u].z), out(x[u].w));
      }
    }
    for (int64_t i = 4 * nq + threadIdx.x; i < n; i += kThreads) row[i] = out(row[i]);
  } else {
    for (int64_t i = threadIdx.x; i < n; i += kThreads) row[i] = out(row[i]);
  }

  if (threadIdx.x == 0) {
    CanvasPick pick;
    if (m == -INFINITY) {  // every z is -inf: the reference's NaN sums, first index, last-positive default
      pick.entropy = NAN;
      pick.argmax = 0;
      pick.sampled = 0;
      pick.argmax_prob = NAN;
    } else {
      pick.entropy = log(total) - s.weighted / total;
      pick.argmax = static_cast<int32_t>(argmax);
      pick.sampled = static_cast<int32_t>(sampled < 0 ? 0 : sampled);
      pick.argmax_prob = __double2float_rn(1.0 / total);
    }
    pick.reserved = 0;
    picks[r] = pick;
  }
}

}  // namespace

void CanvasSampleRows(float* logits, int64_t rows, int64_t vocab, const CanvasRowParams* params,
                      bool round_z_to_bf16, CanvasPick* picks, cudaStream_t s) {
  if (rows <= 0 || vocab <= 0) return;
  LaunchKernel(CanvasRowsKernel, static_cast<unsigned>(rows), kThreads, 0, s)(logits, vocab, params, round_z_to_bf16,
                                                                               picks);
}

}  // namespace tessera::cuda
