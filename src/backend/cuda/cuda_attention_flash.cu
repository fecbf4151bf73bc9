// tessera cuda backend: flash-style attention on tensor cores for every attention call whose shape it
// supports (AttentionFlashSupported: a bf16 or split cache). One block serves a tile of query rows of
// one sequence times all G query heads of one KV head (the MMA's M dimension is (row, head) pairs), so
// each K/V tile is read from memory once per tile of rows instead of once per row (as the grouped
// kernels it replaced did: 32 times for a diffusion block, 4,096 for a prompt).
//
// Per block: key tiles of NK keys are copied (cp.async, as stored) into two shared-memory stages, the
// next tile's copy in flight while the current one is used. Each warp owns 16 query vectors and a
// slice of NKW keys of every tile: S = Q K^T on bf16 m16n8k16 MMAs, an online softmax in f32 on the
// accumulators (base 2: log2(e) is folded into the query scale), O += P V on MMAs. Precision: every
// f32 operand is split into hi + lo bf16 parts and a product is hi*hi + hi*lo + lo*hi (3 MMAs, ~16
// mantissa bits; a plain bf16 rounding costs ~1e-3 per layer). Q is split once into shared memory.
// With bf16 activations (`exact` false: the backend's activation precision) a product is hi*hi alone:
// Q, K, P and V as bf16, one MMA, as FlashAttention runs on bf16 models.
//
// Fragment layouts (lane = 4 g + q): S reads K rows with the MoE kernels' permutation of k
// (cuda_mma_util.cuh: lane q holds d 8q..8q+7 of a 32-wide chunk, the same for Q), so a lane's K
// fragment is one 16-byte read (and one more of the lo half on a split cache).
//
// A split f32 cache (the f32 layout of every row of whole 128-value chunks, cuda_kv_layout.h) is staged
// as stored, and a row's 128-dim chunks hold 128 bf16 hi then 128 bf16 lo: K's B fragments are 16-byte
// reads of each half and V comes through ldmatrix.trans from each, 3 MMAs a product, no split of K or V
// (a plain f32 cache that split K and V in the inner loops was removed: it lost to this layout).
//
// A bf16 cache (--kv-cache-dtype bf16; every K/V row the kernel reads is bf16: the cache, and
// KvStage's copy of the call's uncommitted rows) is staged as stored and fed to the MMAs directly:
// a lane's K fragment is one 16-byte read, V comes through ldmatrix.trans (keys are the rows of the
// 8x8 matrices, the plain n-tile order), and only Q and P are split (hi*K + lo*K: 2 MMAs a product).
//
// Masks per element (causal, or block-causal with blocks from position 0); a key tile past every row
// of the tile is never loaded. Keys split across blocks (decode, few sequences:
// AttentionFlashSplitPlan over tiles x KV heads) write (max, sum, unnormalised output) per (row,
// head, split) exactly like the other attention kernels, and AttentionMerge combines them.
//
// Shapes: head_dim 128 or 256, G = 4, 8 or 16. Two block shapes: many rows (4 query warps, M = 64:
// 64 / G rows a tile; head_dim 256 adds a second key warp per query warp to keep 8 warps an SM)
// and few rows (decode: 1 query warp, M = 16 = 16 / G rows, two key warps merged at the end).
//
// H200, one layer's AttentionBatch call (host-timed mean, CudaAttention.Timing), flash vs the grouped
// kernels it replaced (f32 caches, 2026-12-01):
// 32/4 heads of 128 at 1K context: decode b1 23 vs 24 us, b64 125 vs 206 us, denoise 1x32 50 vs
// 92 us, 8x32 190 vs 491 us, prefill 4096 2.09 vs 8.16 ms; 16/2 heads of 256: b1 25 vs 28 us, b64
// 161 vs 178 us, 1x32 59 vs 93 us, 8x32 195 vs 497 us, prefill 4096 2.09 vs 9.76 ms.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/cuda_device_util.cuh"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuda_launch.cuh"
#include "backend/cuda/cuda_mma_util.cuh"

namespace tessera::cuda {

namespace {

// Cache element type T (Bf16Bits or KvSplit), G query heads per KV head, head_dim D, QW query warps
// (16 query vectors each) x KW key warps (NKW keys each of a tile) per block, DV output dims a block
// (D, or D / 2 for head_dim 512: two blocks share a tile, each computes every score and half of O).
template <typename T, int G, int D, int QW, int KW, int NKW, int DV>
struct FlashShape {
  static constexpr bool kBf16 = kKvBf16<T>, kSplit = kKvSplit<T>;
  static_assert(kBf16 || kSplit, "K and V are read as the MMAs take them");
  static constexpr int kWarps = QW * KW, kThreads = 32 * kWarps;
  static constexpr int M = 16 * QW;    // query vectors (row, head) of a block
  static constexpr int TR = M / G;     // query rows of a tile
  static constexpr int NK = NKW * KW;  // keys of a shared-memory tile
  static constexpr int NC = D / 32;    // 32-wide d chunks (two k-steps of the score MMA)
  static constexpr int kParts = D / DV;  // blocks sharing a tile, each with DV dims of the output
  // Staged row strides in elements, chosen for conflict-free fragment reads: bf16 K rows D + 32 apart
  // (rows g and g + 1 16 banks apart for the lanes' 16-byte reads), V rows D + 8 (ldmatrix's 8 row
  // addresses in distinct 16-byte bank groups); split (4-byte elements, 128 hi then 128 lo bf16 a
  // 128-dim chunk) K rows D + 16 apart (16 banks again), V rows D + 4 (distinct 16-byte groups for
  // ldmatrix).
  static constexpr int SKK = kBf16 ? D + 32 : D + 16;
  static constexpr int SKV = kBf16 ? DV + 8 : DV + 4;
  static constexpr int CH = D * int{sizeof(T)} / 16;    // 16-byte pieces of a K row
  static constexpr int CHV = DV * int{sizeof(T)} / 16;  // ... and of the block's part of a V row
  static constexpr size_t kStageBytes = size_t{NK} * (SKK + SKV) * sizeof(T);  // a tile's K rows, then V rows
  static constexpr size_t kKvBytes = 2 * kStageBytes;
  static constexpr size_t kQBytes = size_t{QW} * NC * 4 * 32 * 16;   // Q fragments, hi and lo
  static constexpr size_t kStatBytes = 2 * size_t{kWarps} * 16 * 4;  // (max, sum) per warp row: merge
  static constexpr size_t kSmem = kKvBytes + kQBytes + kStatBytes;
  static constexpr int kRowsPerWarp = 2 * NK / kWarps;  // staged rows a warp copies
  static_assert(M % G == 0 && TR >= 1, "a warp's 16 vectors are whole rows of G heads");
  static_assert(NKW % 16 == 0, "P V takes the keys 16 at a time");
  static_assert(2 * NK % kWarps == 0 && kRowsPerWarp <= 32, "a lane holds the address of a row a warp copies");
  static_assert(kRowsPerWarp * CH % 32 == 0, "whole 16-byte pieces a lane");
  static_assert(kStageBytes % 16 == 0, "stages 16-byte aligned");
  static_assert(KW == 1 || size_t{KW - 1} * QW * DV * 64 <= kKvBytes, "the merge reuses the K/V stages");
  static_assert(D % DV == 0 && DV % 128 == 0, "a part of a V row is whole 128-dim chunks (split rows)");
  static_assert(kSmem <= 227 * 1024, "shared memory of one block");
};

template <typename T, int G, int D, int QW, int KW, int NKW, int DV>
__global__ void __launch_bounds__(FlashShape<T, G, D, QW, KW, NKW, DV>::kThreads)
    FlashKernel(const AttentionParams* descs, const int4* tiles, int splits, int64_t key_chunk, float* partial,
                bool exact) {
  GridDependencyWait();
  using S = FlashShape<T, G, D, QW, KW, NKW, DV>;
  constexpr int NK = S::NK, NC = S::NC, SKK = S::SKK, SKV = S::SKV, CH = S::CH, CHV = S::CHV;
  constexpr int kPiece = 16 / int{sizeof(T)};  // elements of a 16-byte piece
  extern __shared__ __align__(16) unsigned char smem[];
  unsigned char* kv = smem;                                  // [stage]: K [NK][SKK], then V [NK][SKV]
  uint4* qf = reinterpret_cast<uint4*>(smem + S::kKvBytes);  // [QW][NC][4][32]

  // tiles[x] = (sequence, first row t0, its index in the call's rows, rows in the tile).
  const int4 tile = tiles[blockIdx.x];
  const AttentionParams& p = descs[tile.x];
  // blockIdx.z = key split x kParts + output part (the part's dims start at d0).
  const int64_t t0 = tile.y, r0 = tile.z, kvh = blockIdx.y, z = blockIdx.z / S::kParts;
  const int part = static_cast<int>(blockIdx.z % S::kParts), d0 = part * DV;
  const int nr = tile.w;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int qw = warp / KW, kw = warp % KW, g = lane >> 2, q = lane & 3;
  // Keys [j_begin, j_end): the tile's rows' key ranges (both ends grow with t) within split z's keys
  // (splits == 1: every key, key_chunk is INT64_MAX, z = 0).
  const int64_t split_begin = splits == 1 ? 0 : z * key_chunk;
  const int64_t split_end = splits == 1 ? INT64_MAX : split_begin + key_chunk;
  const int64_t j_begin = max(AttentionKeys(p, t0).first, split_begin);
  const int64_t j_end = min(AttentionLastKey(p, t0 + nr - 1) + 1, split_end);
  const int ntiles = j_end > j_begin ? static_cast<int>((j_end - j_begin + NK - 1) / NK) : 0;

  // This lane's two accumulator rows: warp vectors g and g + 8 = (tile row, head) pairs.
  int rrow[2], head[2];
  // Keys j_begin + [row_begin[h], row_end[h]) are visible to the row (32 bits: registers are tight).
  int row_begin[2], row_end[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int m = 16 * qw + g + 8 * h;
    rrow[h] = m / G, head[h] = m % G;
    const KeyRange keys = AttentionKeys(p, t0 + (rrow[h] < nr ? rrow[h] : 0));
    row_begin[h] = static_cast<int>(max(int64_t{0}, keys.first - j_begin));
    row_end[h] = rrow[h] < nr ? static_cast<int>(max(int64_t{0}, min(keys.last + 1, j_end) - j_begin)) : 0;
  }

  // Copies: row rho of a stage (K rows of the tile's keys 0..NK-1, then their V rows: the block's
  // part, dims d0..d0+DV-1) is copied by warp rho % kWarps in 16-byte pieces spread over the lanes. Lane l of a warp finds the address of
  // the warp's row l of a tile (page table lookup) one tile ahead, and the copy loop takes it by
  // shuffle, so no memory access sits between the copies. Keys past j_end get nullptr: zero-filled,
  // never read from memory.
  constexpr int kRowsPerWarp = S::kRowsPerWarp;
  auto row_pointer = [&](int n) -> const T* {
    const int rho = warp + lane * S::kWarps;
    if (n >= ntiles || lane >= kRowsPerWarp) return nullptr;
    const int64_t j = j_begin + int64_t{n} * NK + rho % NK;
    return j < j_end ? KvRow<T>(p, j, kvh, rho >= NK) + (rho >= NK ? d0 : 0) : nullptr;
  };
  const void* const dummy = p.k;  // a valid address for the zero-filling copies (not read)
  // Tile n into stage n % 2 as one cp.async group (an empty group past the last tile, so that the
  // wait below counts the same every iteration); rows: this lane's row_pointer(n).
  auto issue = [&](int n, const T* rows) {
    if (n < ntiles) {
      T* kst = reinterpret_cast<T*>(kv + (n & 1) * S::kStageBytes);
      T* vst = kst + NK * SKK;
#pragma unroll
      for (int it = 0; it < kRowsPerWarp * CH / 32; ++it) {
        const int idx = lane + 32 * it, r = idx / CH, col = idx % CH;
        const auto bits = __shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(rows), r);
        const T* src = reinterpret_cast<const T*>(bits);
        const int rho = warp + r * S::kWarps;
        if constexpr (CHV < CH)
          if (rho >= NK && col >= CHV) continue;  // past the block's part of a V row
        T* dst = rho < NK ? kst + rho * SKK : vst + (rho - NK) * SKV;
        CpAsync16(dst + kPiece * col, src ? src + kPiece * col : dummy, src != nullptr);
      }
    }
    CpAsyncCommit();
  };

  issue(0, row_pointer(0));
  issue(1, row_pointer(1));

  // Q (scaled by scale * log2 e) as A fragments, hi and lo, in the order the score loop reads them:
  // qf[qw][c][r][lane], r = hi of k-step 0, hi of 1, lo of 0, lo of 1. The KW warps of a query warp
  // share its chunks. Rows past the tile are zero (their scores are masked anyway).
  {
    const float qscale = p.scale * kLog2e;
    for (int c = kw; c < NC; c += KW) {
      float v[2][8];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const bool ok = rrow[h] < nr;
        const float* qr = p.q + (t0 + (ok ? rrow[h] : 0)) * p.q_stride + (kvh * G + head[h]) * D + 32 * c + 8 * q;
#pragma unroll
        for (int e = 0; e < 8; ++e) v[h][e] = ok ? qr[e] * qscale : 0.0f;
      }
      uint32_t hi[2][4], lo[2][4];
      SplitA(make_float4(v[0][0], v[0][1], v[0][2], v[0][3]), make_float4(v[0][4], v[0][5], v[0][6], v[0][7]),
             make_float4(v[1][0], v[1][1], v[1][2], v[1][3]), make_float4(v[1][4], v[1][5], v[1][6], v[1][7]), hi, lo);
      uint4* dst = qf + (qw * NC + c) * 4 * 32 + lane;
      dst[0] = make_uint4(hi[0][0], hi[0][1], hi[0][2], hi[0][3]);
      dst[32] = make_uint4(hi[1][0], hi[1][1], hi[1][2], hi[1][3]);
      dst[64] = make_uint4(lo[0][0], lo[0][1], lo[0][2], lo[0][3]);
      dst[96] = make_uint4(lo[1][0], lo[1][1], lo[1][2], lo[1][3]);
    }
  }

  // Running state of the lane's two rows: max (base 2), this lane's part of the sum, and the output
  // accumulators acc[t] of n-tile t (c0, c1: row g; c2, c3: row g + 8).
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};
  float acc[DV / 8][4];
#pragma unroll
  for (int t = 0; t < DV / 8; ++t) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.0f;
  const int kb = kw * NKW;  // this warp's first key in a tile
  const uint4* qg = qf + qw * NC * 4 * 32 + lane;

  for (int n = 0; n < ntiles; ++n) {
    CpAsyncWait<1>();  // this thread's pieces of tile n have landed (tile n + 1 may be in flight)
    __syncthreads();   // ... and everyone's (and Q, the first time)
    const T* next_rows = row_pointer(n + 2);  // its page table load overlaps the compute below
    const T* Ks = reinterpret_cast<const T*>(kv + (n & 1) * S::kStageBytes);
    const T* Vs = Ks + NK * SKK;
    const int key0 = n * NK;  // from j_begin
    int from[2], lim[2];  // keys of this tile visible to the lane's rows: tile positions [from[h], lim[h])
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      from[h] = max(0, min(NK, row_begin[h] - key0));
      lim[h] = max(0, min(NK, row_end[h] - key0));
    }
    const bool sees = (lim[0] > kb && from[0] < kb + NKW && from[0] < lim[0]) ||
                      (lim[1] > kb && from[1] < kb + NKW && from[1] < lim[1]);
    if (__any_sync(0xffffffffu, sees)) {
      // S = Q K^T over the warp's NKW keys: n-tile j holds keys kb + 8 j .. + 7.
      // Even and odd chunks accumulate apart: twice the independent MMA chains (latency-bound else).
      float sa[2][NKW / 8][4];
#pragma unroll
      for (int j = 0; j < NKW / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) sa[0][j][e] = sa[1][j][e] = 0.0f;
#pragma unroll
      for (int c = 0; c < NC; ++c) {
        const uint4 h0 = qg[(c * 4 + 0) * 32], h1 = qg[(c * 4 + 1) * 32];
        const uint4 l0 = qg[(c * 4 + 2) * 32], l1 = qg[(c * 4 + 3) * 32];
        const uint32_t qh0[4] = {h0.x, h0.y, h0.z, h0.w}, qh1[4] = {h1.x, h1.y, h1.z, h1.w};
        const uint32_t ql0[4] = {l0.x, l0.y, l0.z, l0.w}, ql1[4] = {l1.x, l1.y, l1.z, l1.w};
#pragma unroll
        for (int j = 0; j < NKW / 8; ++j) {
          // B column g = key kb + 8 j + g; d 8q..8q+7 of the chunk, permuted like Q's.
          float* sj = sa[c & 1][j];
          // Words 0, 1: k-step 0's b0, b1; words 2, 3: k-step 1's. bf16 K is exact: hi*K + lo*K; a split
          // row adds its lo half's words (128 bf16 past the hi of the chunk): hi*hi + hi*lo + lo*hi.
          const auto* kh =
              reinterpret_cast<const uint16_t*>(Ks + (kb + 8 * j + g) * SKK) + KvBf16Index<T>(32 * c) + 8 * q;
          const uint4 h = *reinterpret_cast<const uint4*>(kh);
          // Not exact (bf16 activations): hi*hi alone, Q and K as bf16.
          Mma(sj, qh0, h.x, h.y);
          Mma(sj, qh1, h.z, h.w);
          if (exact) {
            uint4 l{};
            if constexpr (S::kSplit) l = *reinterpret_cast<const uint4*>(kh + kKvSplitChunk);
            if constexpr (S::kSplit) Mma(sj, qh0, l.x, l.y);
            Mma(sj, ql0, h.x, h.y);
            if constexpr (S::kSplit) Mma(sj, qh1, l.z, l.w);
            Mma(sj, ql1, h.z, h.w);
          }
        }
      }
      float s[NKW / 8][4];
#pragma unroll
      for (int j = 0; j < NKW / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[j][e] = sa[0][j][e] + sa[1][j][e];
      // Mask, then the online softmax per row: s[j][e] is row g + 8 (e / 2), key kb + 8 j + 2 q + e % 2.
      float corr[2];
      TileSoftmax<NKW / 2>(&s[0][0], kb, q, from, lim, m_run, l_run, corr);
#pragma unroll
      for (int t = 0; t < DV / 8; ++t) {
        acc[t][0] *= corr[0], acc[t][1] *= corr[0];
        acc[t][2] *= corr[1], acc[t][3] *= corr[1];
      }
      // O += P V, 16 keys a k-step: the A fragment of keys 16 kk .. + 15 is S n-tiles 2 kk (a0, a1)
      // and 2 kk + 1 (a2, a3); lane (g, q) needs V rows 16 kk + 2q, + 1, + 8, + 9.
#pragma unroll
      for (int kk = 0; kk < NKW / 16; ++kk) {
        uint32_t ph[4], pl[4];
        SplitPair(s[2 * kk][0], s[2 * kk][1], ph[0], pl[0]);
        SplitPair(s[2 * kk][2], s[2 * kk][3], ph[1], pl[1]);
        SplitPair(s[2 * kk + 1][0], s[2 * kk + 1][1], ph[2], pl[2]);
        SplitPair(s[2 * kk + 1][2], s[2 * kk + 1][3], ph[3], pl[3]);
        // B from ldmatrix.trans, the plain n-tile order (accumulator t: d = 8 t + 2 q, + 1): lanes
        // 0-7 address keys 0-7, lanes 8-15 keys 8-15 of d block 2 tp, lanes 16-31 the same of 2 tp + 1.
        // A split row: the same from its lo half too (128 bf16 past the hi of the chunk).
        const auto* vrow = reinterpret_cast<const uint16_t*>(Vs + (kb + 16 * kk + (lane & 15)) * SKV) + 8 * (lane >> 4);
#pragma unroll
        for (int tp = 0; tp < DV / 16; ++tp) {
          uint32_t h[4];
          const uint16_t* at = vrow + KvBf16Index<T>(16 * tp);
          LdMatrixX4Trans(h, at);
          Mma(acc[2 * tp], ph, h[0], h[1]);
          Mma(acc[2 * tp + 1], ph, h[2], h[3]);
          if (exact) {  // else P and V as bf16
            uint32_t l[4];
            if constexpr (S::kSplit) LdMatrixX4Trans(l, at + kKvSplitChunk);
            if constexpr (S::kSplit) Mma(acc[2 * tp], ph, l[0], l[1]);
            Mma(acc[2 * tp], pl, h[0], h[1]);
            if constexpr (S::kSplit) Mma(acc[2 * tp + 1], ph, l[2], l[3]);
            Mma(acc[2 * tp + 1], pl, h[2], h[3]);
          }
        }
      }
    }
    __syncthreads();  // everyone is done with stage n % 2
    issue(n + 2, next_rows);
  }

  // The rows' sums over their 4 lanes.
#pragma unroll
  for (int h = 0; h < 2; ++h) l_run[h] = QuadSum(l_run[h]);
  float m_fin[2] = {m_run[0], m_run[1]}, l_fin[2] = {l_run[0], l_run[1]};
  if constexpr (KW > 1) {
    // Merge the key warps of a query warp: common max, each warp scales its accumulators, warps
    // kw > 0 leave them in the (now idle) K/V stages, warp kw = 0 adds them in kw order.
    CpAsyncWait<0>();  // only empty groups can be pending: nothing writes the stages any more
    float* stat_m = reinterpret_cast<float*>(smem + S::kKvBytes + S::kQBytes);  // [warps][16]
    float* stat_l = stat_m + S::kWarps * 16;
    if (q == 0)
#pragma unroll
      for (int h = 0; h < 2; ++h) stat_m[warp * 16 + g + 8 * h] = m_run[h], stat_l[warp * 16 + g + 8 * h] = l_run[h];
    __syncthreads();
    float f[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = g + 8 * h;
      float gm = -INFINITY;
#pragma unroll
      for (int k = 0; k < KW; ++k)
        if (stat_l[(qw * KW + k) * 16 + row] > 0) gm = fmaxf(gm, stat_m[(qw * KW + k) * 16 + row]);
      float gl = 0.0f;
#pragma unroll
      for (int k = 0; k < KW; ++k) {
        const float lk = stat_l[(qw * KW + k) * 16 + row];
        if (lk > 0) gl += lk * exp2f(stat_m[(qw * KW + k) * 16 + row] - gm);
      }
      f[h] = l_run[h] > 0 ? exp2f(m_run[h] - gm) : 0.0f;
      m_fin[h] = gm, l_fin[h] = gl;
    }
#pragma unroll
    for (int t = 0; t < DV / 8; ++t) acc[t][0] *= f[0], acc[t][1] *= f[0], acc[t][2] *= f[1], acc[t][3] *= f[1];
    float4* red = reinterpret_cast<float4*>(kv);  // [QW][KW - 1][DV / 8][32]
    if (kw > 0) {
      float4* dst = red + ((qw * (KW - 1) + kw - 1) * (DV / 8)) * 32 + lane;
#pragma unroll
      for (int t = 0; t < DV / 8; ++t) dst[t * 32] = make_float4(acc[t][0], acc[t][1], acc[t][2], acc[t][3]);
    }
    __syncthreads();
    if (kw > 0) return;
#pragma unroll
    for (int k = 1; k < KW; ++k) {
      const float4* src = red + ((qw * (KW - 1) + k - 1) * (DV / 8)) * 32 + lane;
#pragma unroll
      for (int t = 0; t < DV / 8; ++t) {
        const float4 r = src[t * 32];
        acc[t][0] += r.x, acc[t][1] += r.y, acc[t][2] += r.z, acc[t][3] += r.w;
      }
    }
  }

  // Output: row half h of lane (g, q) holds d = 8 t + 2 q + e in acc[t][2 h + e].
  const int64_t heads = static_cast<int64_t>(gridDim.y) * G;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if (rrow[h] >= nr) continue;
    const int64_t hq = kvh * G + head[h];
    float* o;
    const int lane_d = d0 + 2 * q;
    if (splits == 1) {
      o = p.out + (t0 + rrow[h]) * p.out_stride + hq * D + lane_d;
    } else {
      // A split with no keys for this row writes sum 0: the merge gives it no weight. The parts of a
      // tile hold the same (max, sum): part 0 writes them.
      float* stats = partial + (((r0 + rrow[h]) * heads + hq) * splits + z) * (D + 2);
      if (q == 0 && part == 0) stats[0] = l_fin[h] > 0 ? m_fin[h] * kLn2 : -INFINITY, stats[1] = l_fin[h];
      o = stats + 2 + lane_d;
    }
    const float inv = splits == 1 ? 1.0f / l_fin[h] : 1.0f;  // partials stay unnormalised
#pragma unroll
    for (int t = 0; t < DV / 8; ++t) o[8 * t] = acc[t][2 * h] * inv, o[8 * t + 1] = acc[t][2 * h + 1] * inv;
  }
}

template <typename T, int G, int D, int QW, int KW, int NKW, int DV = D>
void LaunchFlash(const AttentionParams* descs, const int4* tiles, int64_t num_tiles, int64_t kv_heads, int splits,
                 int64_t key_chunk, float* partial, bool exact, cudaStream_t s) {
  using S = FlashShape<T, G, D, QW, KW, NKW, DV>;
  auto* kernel = FlashKernel<T, G, D, QW, KW, NKW, DV>;
  // Sets the kernel's dynamic shared memory limit once per device (not stream-ordered: allowed while
  // a step is captured).
  KernelResidency(kernel, S::kSmem, S::kThreads);
  const dim3 grid(static_cast<unsigned>(num_tiles), static_cast<unsigned>(kv_heads),
                  static_cast<unsigned>(splits * S::kParts));
  LaunchKernel(kernel, grid, S::kThreads, S::kSmem, s)(descs, tiles, splits, key_chunk, partial, exact);
}

// Block shapes (shared memory, blocks an SM; ptxas: 167-168 registers at head_dim 128, 247-253 at
// 256, no spills): many rows, head_dim 128: 4 query warps, 32-key tiles (98.5 KiB, 2); head_dim
// 256: 4 query warps x 2 key warps, 32-key tiles (195 KiB, 1). Few rows: one query warp x 2 key
// warps, 32-key tiles (head_dim 128: 74 KiB, 3; 256: 146 KiB, 1). A bf16 cache keeps the shapes
// (about half the staging bytes).
using Launcher = void (*)(const AttentionParams*, const int4*, int64_t, int64_t, int, int64_t, float*, bool,
                          cudaStream_t);

template <typename T, int G>
Launcher PickLauncher(bool few_rows, int64_t head_dim) {
  if (head_dim == 128) return few_rows ? LaunchFlash<T, G, 128, 1, 2, 16> : LaunchFlash<T, G, 128, 4, 1, 32>;
  if (head_dim == 256) return few_rows ? LaunchFlash<T, G, 256, 1, 2, 16> : LaunchFlash<T, G, 256, 4, 2, 16>;
  if constexpr (kKvSplit<T>)
    return few_rows ? LaunchFlash<T, G, 512, 1, 1, 16, 256> : LaunchFlash<T, G, 512, 2, 1, 16, 256>;
  else
    return few_rows ? LaunchFlash<T, G, 512, 1, 2, 16, 256> : LaunchFlash<T, G, 512, 2, 2, 16, 256>;
}

template <typename T>
Launcher PickLauncher(int64_t group, bool few_rows, int64_t head_dim) {
  return group == 2   ? PickLauncher<T, 2>(few_rows, head_dim)
         : group == 4 ? PickLauncher<T, 4>(few_rows, head_dim)
         : group == 8 ? PickLauncher<T, 8>(few_rows, head_dim)
                      : PickLauncher<T, 16>(few_rows, head_dim);
}

}  // namespace

bool AttentionFlashSupported(int64_t heads, int64_t kv_heads, int64_t head_dim, KvLayout layout) {
  if (layout == KvLayout::kF32 || kv_heads <= 0 || heads % kv_heads != 0) return false;
  const int64_t G = heads / kv_heads;
  return (head_dim == 128 || head_dim == 256 || head_dim == 512) && (G == 2 || G == 4 || G == 8 || G == 16);
}

int64_t AttentionFlashTileRows(int64_t group, int64_t head_dim, bool few_rows) {
  return (few_rows ? 16 : head_dim == 512 ? 32 : 64) / group;
}

int64_t AttentionFlashOutputParts(int64_t head_dim) { return head_dim == 512 ? 2 : 1; }

void AttentionFlash(const AttentionParams* descs, const int4* tiles, int64_t num_tiles, int64_t heads, int64_t kv_heads,
                    int64_t head_dim, bool few_rows, KvLayout layout, int splits, int64_t key_chunk, float* partial,
                    bool exact, cudaStream_t s) {
  if (num_tiles <= 0) return;
  const int64_t G = heads / kv_heads, chunk = splits == 1 ? INT64_MAX : key_chunk;
  WithPackedKvType(layout, [&](auto tag) {
    PickLauncher<decltype(tag)>(G, few_rows, head_dim)(descs, tiles, num_tiles, kv_heads, splits, chunk, partial, exact,
                                                       s);
  });
}

}  // namespace tessera::cuda
