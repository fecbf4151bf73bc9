// tessera cuda backend: attention of decode steps (one query row a sequence, or two at G = 4) on
// tensor cores. The few-row shape of the flash kernel (cuda_attention_flash.cu) puts the query vectors
// in the MMA's M dimension (16), so a decode row of G = 8 heads leaves half of every MMA empty; it
// holds one block of two warps an SM at head_dim 256. On the H200 it issued ~1,350 instructions a warp
// per 16 keys at 1.5 warps a scheduler (ncu, 64 sequences at 1K context, 32 / 4 heads of 128: 94 us,
// 2.9 TB/s; 16 / 2 heads of 256: 137 us, 2.0 TB/s), latency-bound. Here:
//
// - Keys are the M dimension: S^T = K Q^T (16 keys x 8 query vectors, k = head dims) and
//   O^T += V^T P^T (16 dims x 8 vectors, k = 16 keys), so a row's 8 (row, head) vectors fill N
//   exactly (G = 16: two n-tiles). Precision as in the flash kernel: every f32 operand split into
//   bf16 hi + lo, a product hi*hi + hi*lo + lo*hi (3 MMAs).
// - Each warp owns its K/V stages (two of 16 keys x 128 dims), filled by cp.async (a 512-byte row an
//   instruction) and waited for with __syncwarp only. A tile of cached keys within one page gets its
//   row addresses from one page lookup; others shuffle a per-lane row address.
// - head_dim 256 splits the dims over two warps (DW = 2) that add their partial scores through shared
//   memory each tile, so a warp's stages stay 33 KiB and 6 warps fit an SM at either head_dim.
// - KW key warps of a block take interleaved 16-key tiles of the block's keys and merge at the end.
//
// Measured on a plain f32 cache (ncu, same calls): 84.7 us at 3.2 TB/s (head_dim 128), 102 us at
// 2.6 TB/s (256), ~1,050 instructions a warp per 16 keys, still latency-bound (5.6 warps an SM, 5.6
// cycles between a warp's instructions), about half of them splitting K and V into bf16 hi + lo: the
// split cache below removed those (and the plain f32 form of this kernel with it). Tried and dropped
// (docs/PERFORMANCE.md): per-lane cp.async.bulk copies (the compiler serialises them lane by lane, ~9
// instructions a row) and tf32 MMAs with a 2-instruction split (twice the MMAs; 97.5 against 84.7 us).
//
// Fragments (lane = 4 g + q): A of S^T = K rows g and g + 8, lane q holding dims 8q..8q+7 of each
// 32-dim chunk as the MoE kernels' permuted k, B = Q^T the same way (in registers); accumulator c0,
// c1 = key g, vectors 2q, 2q+1; c2, c3 = key g + 8. P goes through shared memory to the B layout
// (keys 2q, 2q+1, 2q+8, 2q+9 of vector g). Masks, key splits and the partial layout are the flash
// kernel's; AttentionMerge combines splits.
//
// A split f32 cache (the f32 layout of every row of whole 128-value chunks, cuda_kv_layout.h) is staged
// as 512-byte row slices, which hold 128 bf16 hi then 128 bf16 lo: K's A fragments are two 16-byte reads
// from each half, V^T's two ldmatrix.trans, the 3 MMAs a product as above but no split instruction for K
// or V (ncu, Qwen3-30B-A3B batch 64 at 1K: 83.5 -> 78.3 us a layer, 3.24 -> 3.45 TB/s; still short of
// the copy rate: 6 warps an SM, each waiting on its own two stages).
//
// A bf16 cache (--kv-cache-dtype bf16) is staged as stored (a 256-byte row slice: half a warp a row) and
// goes to the MMAs as it is: K's A fragment is two 16-byte reads, V^T's comes from ldmatrix.trans (m-tile
// m = dims 16 m.., keys as the 8x8 matrices' rows), and only Q and P are split (2 MMAs a product). The
// decode b64 call (64 x 1,025 keys, host-timed, 2026-12-03): 32 / 4 x 128: 75 us against 117 us on the
// plain f32 cache; 16 / 2 x 256: 71 against 132 us.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "backend/cuda/cuda_device_util.cuh"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuda_launch.cuh"
#include "backend/cuda/cuda_mma_util.cuh"

namespace tessera::cuda {

namespace {

// Cache element type T (Bf16Bits or KvSplit), G query heads per KV head, head_dim D, KW key warps;
// DW = D / 128 warps share a tile's dims.
template <typename T, int G, int D, int KW>
struct DecodeShape {
  static constexpr bool kBf16 = kKvBf16<T>, kSplit = kKvSplit<T>;
  static_assert(kBf16 || kSplit, "K and V are read as the MMAs take them");
  static constexpr int DW = D / 128, kWarps = KW * DW, kThreads = 32 * kWarps;
  static constexpr int NT = G > 8 ? G / 8 : 1;  // n-tiles of 8 query vectors
  static constexpr int VEC = 8 * NT;            // query vectors (row, head) of a block
  // Staged row strides of a 128-dim slice, in elements: bf16 K 160 (rows g and g + 1 16 banks apart
  // for the lanes' 16-byte reads), V 136 (ldmatrix's 8 rows in distinct 16-byte bank groups); split
  // (4-byte elements: a row slice is 128 hi then 128 lo) K 144 (16 banks apart again), V 132 (528
  // bytes: distinct 16-byte groups).
  static constexpr int SKK = kBf16 ? 160 : 144;
  static constexpr int SKV = kBf16 ? 136 : 132;
  static constexpr int RK = SKK * int{sizeof(T)} / 2, RV = SKV * int{sizeof(T)} / 2;  // the strides in bf16 units
  static constexpr size_t kStageElems = 16 * size_t{SKK + SKV};      // 16 K rows, then 16 V rows
  static constexpr size_t kWarpBytes = 2 * kStageElems * sizeof(T);  // a warp's two stages
  static constexpr int PK = 20;                                      // P row stride (16 keys + 4)
  static constexpr size_t kStageBytes = kWarps * kWarpBytes;
  static constexpr size_t kPBytes = size_t{kWarps} * VEC * PK * 4;
  static constexpr size_t kXBytes = DW > 1 ? 2 * size_t{kWarps} * NT * 4 * 32 * 4 : 0;  // score halves
  static constexpr size_t kSmem = kStageBytes + kPBytes + kXBytes;
  static_assert(D % 128 == 0 && VEC % G == 0, "whole rows of G heads in 8 or 16 vectors");
  static_assert(size_t{NT} * 1152 * 4 <= kWarpBytes, "the merge fits a warp's stages");
  static_assert(kWarpBytes % 16 == 0 && kStageElems * sizeof(T) % 16 == 0, "16-byte aligned stages");
  static_assert(DW == 1 || KW == 1, "dim-split warps pair on barrier 1: one pair a block");
};

template <typename T, int G, int D, int KW>
__global__ void __launch_bounds__(DecodeShape<T, G, D, KW>::kThreads)
    DecodeKernel(const AttentionParams* descs, const int4* tiles, int splits, int64_t key_chunk, float* partial) {
  GridDependencyWait();
  using S = DecodeShape<T, G, D, KW>;
  constexpr int NT = S::NT, SKK = S::SKK, SKV = S::SKV, PK = S::PK, DW = S::DW;
  extern __shared__ __align__(16) unsigned char smem[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int dw = warp % DW, kw = warp / DW, g = lane >> 2, q = lane & 3;
  T* stages = reinterpret_cast<T*>(smem + warp * S::kWarpBytes);  // [2]: K [16][SKK], then V [16][SKV]
  float* pbuf = reinterpret_cast<float*>(smem + S::kStageBytes) + warp * S::VEC * PK;
  float* xbuf = reinterpret_cast<float*>(smem + S::kStageBytes + S::kPBytes);  // [2][warps][NT * 128]

  // tiles[x] = (sequence, first row t0, its index in the call's rows, rows in the tile).
  const int4 tile = tiles[blockIdx.x];
  const AttentionParams& p = descs[tile.x];
  const int64_t t0 = tile.y, r0 = tile.z, kvh = blockIdx.y, z = blockIdx.z;
  const int nr = tile.w;
  // The plan's chunk (key_chunk, AttentionDecodeSplitPlan) is sized for the largest key count of its range
  // (it changes only 4 times a doubling of the context, to keep the step's graph); a tile's splits take even
  // shares of its own keys instead (whole 16-key tiles of every key warp), within that chunk, so that the
  // blocks of a wave end together (the plan counts waves of equal blocks).
  const int64_t keys = AttentionLastKey(p, t0 + nr - 1) + 1;
  int64_t chunk = key_chunk;
  if (splits > 1) chunk = min(key_chunk, ((keys + splits - 1) / splits + 16 * KW - 1) / (16 * KW) * (16 * KW));
  const int64_t j_begin = splits == 1 ? 0 : z * chunk;
  const int64_t split_end = splits == 1 ? INT64_MAX : j_begin + chunk;
  const int64_t j_end = min(keys, split_end);
  const int ntiles = j_end > j_begin ? static_cast<int>((j_end - j_begin + 15) / 16) : 0;
  const int my_tiles = ntiles > kw ? (ntiles - kw + KW - 1) / KW : 0;  // this warp's: kw, kw + KW, ...

  // The lane's accumulator columns: vectors 8 nt + 2q + c (row v / G, head v % G) and the keys they see.
  int64_t col_end[NT][2];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      const int row = (8 * nt + 2 * q + c) / G;
      col_end[nt][c] = row < nr ? min(AttentionLastKey(p, t0 + row) + 1, split_end) : 0;
    }

  // A tile's rows: 16 K rows then 16 V rows of its keys (the warp's 128-dim slice). A tile of cached keys within one
  // page (the usual case: tiles start at multiples of 16) is two runs of rows at a fixed stride from two base
  // addresses; any other tile gets a row address per lane (lane l: K of key l, or V of key l - 16; nullptr past j_end),
  // shuffled to the copying lanes.
  struct TileSource {
    bool contiguous;
    const T* k;  // contiguous: K row of the first key; else this lane's row (or nullptr)
    const T* v;
  };
  auto tile_source = [&](int i) -> TileSource {
    const int64_t key0 = j_begin + int64_t{kw + i * KW} * 16;
    TileSource t;
    t.contiguous = key0 + 16 <= j_end && key0 + 16 <= CachedKeys<T>(p) && key0 % p.page_size + 16 <= p.page_size;
    if (t.contiguous) {
      t.k = KvRow<T>(p, key0, kvh, false) + 128 * dw;
      t.v = KvCache<T>(p, true) + (t.k - KvCache<T>(p, false));  // V pages sit at the same offsets as K's
      return t;
    }
    const int64_t j = key0 + (lane & 15);
    t.k = j < j_end ? KvRow<T>(p, j, kvh, lane >= 16) + 128 * dw : nullptr;
    t.v = nullptr;
    return t;
  };
  // Local tile i into stage i % 2 as one cp.async group (an empty group past the warp's last tile, so that the wait
  // below counts the same every iteration). A row slice is 512 bytes (split: lane l copies bytes 16 l.., a row an
  // instruction) or 256 (bf16: half-warp h copies the rows of parity h, lane l bytes 16 (l % 16)..). Rows past the keys
  // are zero-filled without reading memory.
  constexpr int kRowLanes = S::kBf16 ? 16 : 32, kPiece = 16 / int{sizeof(T)};
  const int piece = lane % kRowLanes, half = lane / kRowLanes;
  const void* const dummy = p.k;  // a valid address for the zero-filling copies (not read)
  auto issue = [&](int i, const TileSource& t) {
    if (i < my_tiles) {
      T* kst = stages + (i & 1) * S::kStageElems + kPiece * piece;
      T* vst = kst + 16 * SKK;
      if (t.contiguous) {
        const int64_t stride = p.num_kv_heads * D;
        const T* k = t.k + kPiece * piece + half * stride;
        const T* v = t.v + kPiece * piece + half * stride;
        constexpr int kStep = 32 / kRowLanes;  // rows copied at once
#pragma unroll
        for (int r = half; r < 16; r += kStep, k += stride * kStep, v += stride * kStep) {
          CpAsync16(kst + r * SKK, k, true);
          CpAsync16(vst + r * SKV, v, true);
        }
      } else {
#pragma unroll
        for (int rr = 0; rr < 32; rr += 32 / kRowLanes) {
          const int r = rr + half;  // lane r holds row r's address: K of key r, or V of key r - 16
          const auto bits = __shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(t.k), r);
          const T* src = reinterpret_cast<const T*>(bits);
          T* dst = r < 16 ? kst + r * SKK : vst + (r - 16) * SKV;
          CpAsync16(dst, src ? src + kPiece * piece : dummy, src != nullptr);
        }
      }
    }
    CpAsyncCommit();
  };

  issue(0, tile_source(0));
  issue(1, tile_source(1));

  // Q^T as B fragments (scaled by scale * log2 e), hi and lo, per n-tile and 32-dim chunk of the warp's slice: [0], [1]
  // = b0, b1 of k-step 0 (dims 8q, 8q+1 / 8q+2, 8q+3), [2], [3] of k-step 1.
  uint32_t qh[NT][4][4], ql[NT][4][4];
  {
    const float qscale = p.scale * kLog2e;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const int v = 8 * nt + g, row = v / G;
      const bool ok = row < nr;
      const float* qr = p.q + (t0 + (ok ? row : 0)) * p.q_stride + (kvh * G + v % G) * D + 128 * dw + 8 * q;
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        float x[8];
#pragma unroll
        for (int e = 0; e < 8; ++e) x[e] = ok ? qr[32 * c + e] * qscale : 0.0f;
#pragma unroll
        for (int k = 0; k < 4; ++k) SplitPair(x[2 * k], x[2 * k + 1], qh[nt][c][k], ql[nt][c][k]);
      }
    }
  }

  float m_run[NT][2], l_run[NT][2], acc[NT][8][4];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    m_run[nt][0] = m_run[nt][1] = -INFINITY;
    l_run[nt][0] = l_run[nt][1] = 0.0f;
#pragma unroll
    for (int m = 0; m < 8; ++m) acc[nt][m][0] = acc[nt][m][1] = acc[nt][m][2] = acc[nt][m][3] = 0.0f;
  }

  for (int i = 0; i < my_tiles; ++i) {
    const TileSource next = tile_source(i + 2);  // its page lookup overlaps this tile's work
    CpAsyncWait<1>();                            // this lane's copies of tile i have landed ...
    __syncwarp();                                // ... and every lane's
    const T* Ks = stages + (i & 1) * S::kStageElems;
    const T* Vs = Ks + 16 * SKK;
    const int64_t key0 = j_begin + int64_t{kw + i * KW} * 16;

    // S^T over the warp's 128 dims: one accumulator chain per 32-dim chunk (independent MMAs).
    float sc[4][NT][4];
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      uint32_t ah[2][4], al[2][4];
      // K rows g and g + 8 as they are (exact): the register order of LoadA's hi part; a split slice's lo
      // half (128 bf16 further) the same way.
      const auto* kr = reinterpret_cast<const uint16_t*>(Ks) + g * S::RK + 32 * c + 8 * q;
      auto load = [&](const uint16_t* r0, uint32_t(&r)[2][4]) {
        const uint4 x = *reinterpret_cast<const uint4*>(r0);
        const uint4 y = *reinterpret_cast<const uint4*>(r0 + 8 * S::RK);  // row g + 8
        r[0][0] = x.x, r[0][1] = y.x, r[0][2] = x.y, r[0][3] = y.y;
        r[1][0] = x.z, r[1][1] = y.z, r[1][2] = x.w, r[1][3] = y.w;
      };
      load(kr, ah);
      if constexpr (S::kSplit) load(kr + kKvSplitChunk, al);
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        float* a = sc[c][nt];
        a[0] = a[1] = a[2] = a[3] = 0.0f;
#pragma unroll
        for (int st = 0; st < 2; ++st) {
          Mma(a, ah[st], qh[nt][c][2 * st], qh[nt][c][2 * st + 1]);
          Mma(a, ah[st], ql[nt][c][2 * st], ql[nt][c][2 * st + 1]);
          if constexpr (!S::kBf16) Mma(a, al[st], qh[nt][c][2 * st], qh[nt][c][2 * st + 1]);
        }
      }
    }
    float s[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[nt][e] = (sc[0][nt][e] + sc[1][nt][e]) + (sc[2][nt][e] + sc[3][nt][e]);
    if constexpr (DW > 1) {
      // The two dim halves: each warp adds its partner's scores to its own (a + b == b + a exactly, so both hold the
      // same sums and run the same softmax). Double-buffered by tile parity: a partner is at most one tile behind at
      // the barrier.
      float* own = xbuf + ((i & 1) * S::kWarps + warp) * NT * 128;
      const float* other = xbuf + ((i & 1) * S::kWarps + (warp ^ 1)) * NT * 128;
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) own[(nt * 4 + e) * 32 + lane] = s[nt][e];
      asm volatile("bar.sync 1, 64;\n" ::: "memory");  // the pair's own barrier (KW = 1)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[nt][e] += other[(nt * 4 + e) * 32 + lane];
    }

    // Mask and online softmax per column (s[nt][e]: key g + 8 (e / 2), vector 8 nt + 2q + e % 2).
    float corr[NT][2], mbase[NT][2];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        if (key0 + g + 8 * (e >> 1) >= col_end[nt][e & 1]) s[nt][e] = -INFINITY;
        mx[e & 1] = fmaxf(mx[e & 1], s[nt][e]);
      }
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        mx[c] = fmaxf(mx[c], __shfl_xor_sync(0xffffffffu, mx[c], 4));
        mx[c] = fmaxf(mx[c], __shfl_xor_sync(0xffffffffu, mx[c], 8));
        mx[c] = fmaxf(mx[c], __shfl_xor_sync(0xffffffffu, mx[c], 16));
        corr[nt][c] = OnlineSoftmaxRescale(mx[c], m_run[nt][c], mbase[nt][c]);
        l_run[nt][c] *= corr[nt][c];
      }
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[nt][e] = exp2f(s[nt][e] - mbase[nt][e & 1]);
        l_run[nt][e & 1] += s[nt][e];
        pbuf[(8 * nt + 2 * q + (e & 1)) * PK + g + 8 * (e >> 1)] = s[nt][e];
      }
    }
    __syncwarp();
    // P^T as B fragments: keys 2q, 2q+1 (b0) and 2q+8, 2q+9 (b1) of vector g.
    uint32_t ph[NT][2], pl[NT][2];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const float* pr = pbuf + (8 * nt + g) * PK + 2 * q;
      const float2 lo = *reinterpret_cast<const float2*>(pr), hi = *reinterpret_cast<const float2*>(pr + 8);
      SplitPair(lo.x, lo.y, ph[nt][0], pl[nt][0]);
      SplitPair(hi.x, hi.y, ph[nt][1], pl[nt][1]);
#pragma unroll
      for (int m = 0; m < 8; ++m) {
        acc[nt][m][0] *= corr[nt][0], acc[nt][m][1] *= corr[nt][1];
        acc[nt][m][2] *= corr[nt][0], acc[nt][m][3] *= corr[nt][1];
      }
    }
    // O^T += V^T P^T. V^T's A fragment of m-tile m (dims 16 m..) from ldmatrix.trans: lanes 0-7 address
    // keys 0-7 at dim 16 m, lanes 8-15 keys 0-7 at 16 m + 8, lanes 16-23 keys 8-15 at 16 m, lanes 24-31 keys
    // 8-15 at 16 m + 8; a split slice's lo half (128 bf16 further) adds the third product.
    const auto* vrow =
        reinterpret_cast<const uint16_t*>(Vs) + ((lane & 7) + 8 * (lane >> 4)) * S::RV + 8 * ((lane >> 3) & 1);
#pragma unroll
    for (int m = 0; m < 8; ++m) {
      uint32_t vh[4], vl[4];
      LdMatrixX4Trans(vh, vrow + 16 * m);
      if constexpr (S::kSplit) LdMatrixX4Trans(vl, vrow + kKvSplitChunk + 16 * m);
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        Mma(acc[nt][m], vh, ph[nt][0], ph[nt][1]);
        Mma(acc[nt][m], vh, pl[nt][0], pl[nt][1]);
        if constexpr (S::kSplit) Mma(acc[nt][m], vl, ph[nt][0], ph[nt][1]);
      }
    }
    __syncwarp();  // every lane is done with stage i % 2 and with pbuf
    issue(i + 2, next);
  }

  // Column sums over the 8 lanes g of a column (a fixed butterfly: every lane gets the same value).
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      l_run[nt][c] += __shfl_xor_sync(0xffffffffu, l_run[nt][c], 4);
      l_run[nt][c] += __shfl_xor_sync(0xffffffffu, l_run[nt][c], 8);
      l_run[nt][c] += __shfl_xor_sync(0xffffffffu, l_run[nt][c], 16);
    }
  if constexpr (KW > 1) {
    // Key warps kw > 0 leave (max, sum, accumulators) in their own stages (only empty copy groups can be pending); warp
    // kw = 0 of the same dims adds them in kw order at a common max.
    // [NT][8][4][32] accumulators, then [NT][2][32] maxima and [NT][2][32] sums.
    float* mine = reinterpret_cast<float*>(smem + warp * S::kWarpBytes);
    if (kw > 0) {
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
        for (int m = 0; m < 8; ++m)
#pragma unroll
          for (int e = 0; e < 4; ++e) mine[((nt * 8 + m) * 4 + e) * 32 + lane] = acc[nt][m][e];
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          mine[NT * 1024 + (nt * 2 + c) * 32 + lane] = m_run[nt][c];
          mine[NT * 1088 + (nt * 2 + c) * 32 + lane] = l_run[nt][c];
        }
      }
    }
    __syncthreads();
    if (kw > 0) return;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        float gm = l_run[nt][c] > 0 ? m_run[nt][c] : -INFINITY;
        for (int k = 1; k < KW; ++k) {
          const float* o = reinterpret_cast<const float*>(smem + (k * DW + dw) * S::kWarpBytes);
          if (o[NT * 1088 + (nt * 2 + c) * 32 + lane] > 0) gm = fmaxf(gm, o[NT * 1024 + (nt * 2 + c) * 32 + lane]);
        }
        const float f0 = l_run[nt][c] > 0 ? exp2f(m_run[nt][c] - gm) : 0.0f;
        float gl = l_run[nt][c] * f0;
#pragma unroll
        for (int m = 0; m < 8; ++m) acc[nt][m][c] *= f0, acc[nt][m][2 + c] *= f0;
        for (int k = 1; k < KW; ++k) {
          const float* o = reinterpret_cast<const float*>(smem + (k * DW + dw) * S::kWarpBytes);
          const float lk = o[NT * 1088 + (nt * 2 + c) * 32 + lane];
          const float fk = lk > 0 ? exp2f(o[NT * 1024 + (nt * 2 + c) * 32 + lane] - gm) : 0.0f;
          gl += lk * fk;
#pragma unroll
          for (int m = 0; m < 8; ++m) {
            acc[nt][m][c] += o[((nt * 8 + m) * 4 + c) * 32 + lane] * fk;
            acc[nt][m][2 + c] += o[((nt * 8 + m) * 4 + 2 + c) * 32 + lane] * fk;
          }
        }
        m_run[nt][c] = gm, l_run[nt][c] = gl;
      }
  }

  // Output: column c of n-tile nt is vector 8 nt + 2q + c; m-tile m holds dims 16 m + g (c) and 16 m + 8 + g
  // (2 + c) of the warp's slice.
  const int64_t heads = static_cast<int64_t>(gridDim.y) * G;
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      const int v = 8 * nt + 2 * q + c, row = v / G;
      if (row >= nr) continue;
      const int64_t hq = kvh * G + v % G;
      const float l = l_run[nt][c];
      float* o;
      float inv = 1.0f;
      if (splits == 1) {
        o = p.out + (t0 + row) * p.out_stride + hq * D + 128 * dw;
        inv = 1.0f / l;
      } else {
        // A split with no keys for this row writes sum 0: the merge gives it no weight.
        float* part = partial + (((r0 + row) * heads + hq) * splits + z) * (D + 2);
        if (g == 0 && dw == 0) part[0] = l > 0 ? m_run[nt][c] * kLn2 : -INFINITY, part[1] = l;
        o = part + 2 + 128 * dw;
      }
#pragma unroll
      for (int m = 0; m < 8; ++m) o[16 * m + g] = acc[nt][m][c] * inv, o[16 * m + 8 + g] = acc[nt][m][2 + c] * inv;
    }
}

template <typename T, int G, int D, int KW>
void LaunchDecode(const AttentionParams* descs, const int4* tiles, int64_t num_tiles, int64_t kv_heads, int splits,
                  int64_t key_chunk, float* partial, cudaStream_t s) {
  using S = DecodeShape<T, G, D, KW>;
  auto* kernel = DecodeKernel<T, G, D, KW>;
  KernelResidency(kernel, S::kSmem, S::kThreads);  // the dynamic shared memory limit, once per device
  const dim3 grid(static_cast<unsigned>(num_tiles), static_cast<unsigned>(kv_heads), static_cast<unsigned>(splits));
  LaunchKernel(kernel, grid, S::kThreads, S::kSmem, s)(descs, tiles, splits, key_chunk, partial);
}

using Launcher = void (*)(const AttentionParams*, const int4*, int64_t, int64_t, int, int64_t, float*, cudaStream_t);

// Block shapes: head_dim 128: two key warps; head_dim 256: one key warp x two dim warps. On a split
// cache 70 KiB, 3 blocks an SM; on a bf16 cache 38 KiB, 5 blocks an SM.
template <typename T, int G>
Launcher PickLauncher(int64_t head_dim) {
  return head_dim == 128 ? LaunchDecode<T, G, 128, 2> : LaunchDecode<T, G, 256, 1>;
}

template <typename T>
Launcher PickLauncher(int64_t group, int64_t head_dim) {
  return group == 4   ? PickLauncher<T, 4>(head_dim)
         : group == 8 ? PickLauncher<T, 8>(head_dim)
                      : PickLauncher<T, 16>(head_dim);
}

// Blocks of the kernel PickLauncher picks that are resident at once on the device.
template <typename T, int G, int D, int KW>
int64_t ResidentBlocks() {
  using S = DecodeShape<T, G, D, KW>;
  return KernelResidency(DecodeKernel<T, G, D, KW>, S::kSmem, S::kThreads).blocks;
}

template <typename T, int G>
int64_t ResidentBlocks(int64_t head_dim) {
  return head_dim == 128 ? ResidentBlocks<T, G, 128, 2>() : ResidentBlocks<T, G, 256, 1>();
}

}  // namespace

int64_t AttentionDecodeTileRows(int64_t group) { return group >= 8 ? 1 : 8 / group; }

bool AttentionDecodeSupported(int64_t heads, int64_t kv_heads, int64_t head_dim) {
  if (kv_heads <= 0 || heads % kv_heads != 0) return false;
  const int64_t G = heads / kv_heads;
  return (head_dim == 128 || head_dim == 256) && (G == 4 || G == 8 || G == 16);
}

int64_t AttentionDecodeResidentBlocks(int64_t heads, int64_t kv_heads, int64_t head_dim, KvLayout layout) {
  const int64_t G = heads / kv_heads;
  int64_t blocks = 1;
  WithPackedKvType(layout, [&](auto tag) {
    using T = decltype(tag);
    blocks = G == 4 ? ResidentBlocks<T, 4>(head_dim) : G == 8 ? ResidentBlocks<T, 8>(head_dim) : ResidentBlocks<T, 16>(head_dim);
  });
  return blocks;
}

void AttentionDecode(const AttentionParams* descs, const int4* tiles, int64_t num_tiles, int64_t heads,
                     int64_t kv_heads, int64_t head_dim, KvLayout layout, int splits, int64_t key_chunk,
                     float* partial, cudaStream_t s) {
  if (num_tiles <= 0) return;
  const int64_t G = heads / kv_heads, chunk = splits == 1 ? INT64_MAX : key_chunk;
  WithPackedKvType(layout, [&](auto tag) {
    PickLauncher<decltype(tag)>(G, head_dim)(descs, tiles, num_tiles, kv_heads, splits, chunk, partial, s);
  });
}

}  // namespace tessera::cuda
