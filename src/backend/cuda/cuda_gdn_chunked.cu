// tessera cuda backend: the gated delta rule in chunked (WY / UT) form with its serial state pass on
// tensor cores, for prompts and other long runs (key_dim 128, value_dim a multiple of 32 up to 128:
// Qwen3.5 / Qwen3-Next). The algebra is the CPU backend's GatedDeltaHeadChunked (cpu_sequence_ops.cpp):
// for a chunk of C tokens with cum = prefix sums of the log decays g and last = cum[len - 1],
//   L[i][j] = beta_i (k_i . k_j) exp(cum_i - cum_j) (j < i),   A[i][j] = (q_i . k_j) exp(cum_i - cum_j) (j <= i),
//   (I + L) U = beta v,   (I + L) W = beta exp(cum) k,
//   v' = U - W S,   o = (exp(cum) q) S + A v',   S <- exp(last) S + (exp(last - cum) k)^T v'.
// Only the last three lines depend on the state. The prep kernel computes everything else for every
// chunk at once (a block per (chunk, value head), f32 on CUDA cores) into a record; the state kernel
// walks a run's chunks in order, a block per (value head, 32 value columns, run), its products on
// m16n8k16 bf16 MMAs with both operands split hi + lo (three MMAs a product: ~16 mantissa bits, the
// recurrent kernel's f32 to ~1e-5). The record holds the state kernel's operands in the form its
// ldmatrix loads want (bf16 hi / lo planes, exp(cum) q, the transposed exp(last - cum) k), so the
// serial chain only copies them in (cp.async, while the previous step's products run) and multiplies.
//
// The records of a pass are bounded (kGdnChunkSlots chunks of every value head): a long run takes
// several passes (prep, state, prep, state ...), the state carried in the run's state buffer.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuda_launch.cuh"
#include "backend/cuda/cuda_mma_util.cuh"

namespace tessera::cuda {

namespace {

constexpr int kC = static_cast<int>(kGdnChunkTokens);  // tokens a chunk
constexpr int kDk = 128;   // key dim
constexpr int kCols = 32;  // value columns a state block
constexpr int kStateThreads = 128;
constexpr int kPrepThreads = 256;  // a thread per solved column of [beta v | beta exp(cum) k]
// Prep's staged rows: k and q at a stride of 132 floats (16-byte rows for float4 reads; a thread's
// columns 16 apart put a quarter-warp's eight rows in distinct banks), L at 68.
constexpr int kKs = kDk + 4;
constexpr int kLs = kC + 4;

using Bf16 = __nv_bfloat16;

constexpr size_t kPrepSmemBytes = sizeof(float) * (2 * kC * kKs + kC * kLs + 4 * kC);

// The state block's shared memory, in bf16 elements; rows padded by 16 bytes so that ldmatrix's eight
// rows of a matrix fall in distinct banks.
constexpr int kRowDk = kDk + 8;   // W, exp(cum) q: [kC][kDk]
constexpr int kRowC = kC + 8;     // k^T: [kDk][kC], A: [kC][kC]
constexpr int kRowN = kCols + 8;  // S: [kDk][kCols], v': [kC][kCols]
constexpr int kRowU = kCols + 8;  // U: [kC][kCols] f32
constexpr int kSW = 0, kSQ = kSW + 2 * kC * kRowDk, kSK = kSQ + 2 * kC * kRowDk, kSA = kSK + 2 * kDk * kRowC,
              kSS = kSA + 2 * kC * kRowC, kSV = kSS + 2 * kDk * kRowN, kSU = kSV + 2 * kC * kRowN;
constexpr size_t kStateSmemBytes = size_t{kSU} * 2 + sizeof(float) * (kC * kRowU + 4);

// A record (one chunk, one value head) is laid out as the state block's shared memory, so that its
// copies are plain 16-byte runs: the planes (bf16 hi, then lo) of W and exp(cum) q ([kC][kRowDk]),
// (exp(last - cum) k)^T ([kDk][kRowC]) and A ([kC][kRowC]), as shared memory [kSW, kSS); then U as
// dv / 32 column tiles of [kC][kRowU] f32; then exp(last), padded so records stay 128-byte aligned.
// Pad elements are never written; the copies carry them along, and no product reads them.
constexpr int64_t kPlanesBytes = int64_t{kSS} * 2;
constexpr int64_t kUTileBytes = int64_t{kC} * kRowU * 4;
__host__ __device__ constexpr int64_t RecordBytes(int64_t dv) { return kPlanesBytes + dv / kCols * kUTileBytes + 128; }
static_assert(kPlanesBytes % 16 == 0 && kUTileBytes % 16 == 0 && kGdnChunkSlots == 8 &&
                  RecordBytes(128) <= 5 * 256 * (3 * kDk + kC + 128) / 4 + 128 &&
                  RecordBytes(32) <= 5 * 256 * (3 * kDk + kC + 32) / 4 + 128,
              "engine/memory_plan.cpp reserves 8 records of at most this size a value head");

// Which runs and chunks a pass covers: the chunked runs of group `group` (ranks group * runs_per_group
// .. + runs_per_group - 1), chunks piece * chunks_per_run .. + chunks_per_run - 1 of each; a run's
// chunk j of the pass has record slot (rank % runs_per_group) * chunks_per_run + j.
struct ChunkPass {
  int group, runs_per_group, chunks_per_run, piece;
};

__device__ __forceinline__ void StoreSplit(Bf16* hi, Bf16* lo, int64_t i, float x) {
  const Bf16 h = __float2bfloat16_rn(x);
  hi[i] = h;
  lo[i] = __float2bfloat16_rn(x - __bfloat162float(h));
}

__device__ __forceinline__ int ChunkLen(int64_t T, int64_t t0) { return static_cast<int>(T - t0 < kC ? T - t0 : kC); }

// The run's first chunk of this pass, or -1 when the block has nothing to do.
__device__ __forceinline__ int64_t PassFirstChunk(const GdnRunParams& r, const ChunkPass& pass) {
  if (r.chunk_rank < 0 || r.chunk_rank / pass.runs_per_group != pass.group) return -1;
  const int64_t first = int64_t{pass.piece} * pass.chunks_per_run;
  return first * kC < r.T ? first : -1;
}

__device__ __forceinline__ uint8_t* RecordOf(uint8_t* records, const GdnRunParams& r, const ChunkPass& pass, int j,
                                             int64_t hv, int64_t vh, int64_t dv) {
  const int64_t slot = int64_t{r.chunk_rank % pass.runs_per_group} * pass.chunks_per_run + j;
  return records + (slot * vh + hv) * RecordBytes(dv);
}

// Block (chunk of the pass, value head, run).
__global__ void __launch_bounds__(kPrepThreads) GdnChunkPrepKernel(const GdnRunParams* runs, ChunkPass pass,
                                                                   const float* qn, const float* kn, int64_t kh,
                                                                   int64_t vh, int64_t dv, uint8_t* records) {
  GridDependencyWait();
  const GdnRunParams& r = runs[blockIdx.z];
  const int64_t first = PassFirstChunk(r, pass);
  const int64_t t0 = (first + blockIdx.x) * kC;
  if (first < 0 || t0 >= r.T) return;
  const int len = ChunkLen(r.T, t0);
  const int64_t hv = blockIdx.y, hk = hv / (vh / kh);
  extern __shared__ __align__(16) float smem[];
  float* ks = smem;              // [kC][kKs]
  float* qs = ks + kC * kKs;     // [kC][kKs]
  float* L = qs + kC * kKs;      // [kC][kLs]
  float* cum = L + kC * kLs;     // [kC]
  float* bet = cum + kC;         // [kC]
  float* ecum = bet + kC;        // exp(cum) [kC]
  float* edecay = ecum + kC;     // exp(last - cum) [kC]
  const int tid = threadIdx.x;
  const float* q_rows = qn + r.compact_row0 * kh * kDk;
  const float* k_rows = kn + r.compact_row0 * kh * kDk;
#pragma unroll 8
  for (int e = tid; e < kC * kDk / 4; e += kPrepThreads) {  // 8 float4 loads of each in flight a thread
    const int i = e / (kDk / 4), d = 4 * (e % (kDk / 4));
    const int64_t row = ((t0 + i) * kh + hk) * kDk + d;
    const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    *reinterpret_cast<float4*>(ks + i * kKs + d) = i < len ? *reinterpret_cast<const float4*>(k_rows + row) : zero;
    *reinterpret_cast<float4*>(qs + i * kKs + d) = i < len ? *reinterpret_cast<const float4*>(q_rows + row) : zero;
  }
  if (tid < 32) {
    // The decays loaded by the warp at once (a load at a time behind a serial sum waited ~64 round
    // trips), then summed in order as the CPU does (lane 0), then their exponentials.
    for (int i = tid; i < kC; i += 32) cum[i] = i < len ? r.g[(t0 + i) * vh + hv] : 0.0f;
    __syncwarp();
    if (tid == 0) {
      float run = 0.0f;
#pragma unroll
      for (int i = 0; i < kC; ++i) {
        run += cum[i];
        cum[i] = run;
      }
    }
    __syncwarp();
    const float last = cum[len - 1];
    for (int i = tid; i < kC; i += 32) {
      ecum[i] = expf(cum[i]);
      edecay[i] = expf(last - cum[i]);
    }
  }
  for (int i = tid; i < kC; i += kPrepThreads) bet[i] = i < len ? r.beta[(t0 + i) * vh + hv] : 0.0f;
  __syncthreads();

  uint8_t* rec = RecordOf(records, r, pass, static_cast<int>(blockIdx.x), hv, vh, dv);
  Bf16* planes = reinterpret_cast<Bf16*>(rec);
  float* U = reinterpret_cast<float*>(rec + kPlanesBytes);  // column tile c of row i: U + c kC kRowU + i kRowU
  // K K^T and Q K^T: thread (ib, jb) owns rows ib + 16 a and columns jb + 16 c (a, c < 4), float4 along d.
  {
    const int ib = tid >> 4, jb = tid & 15;
    float kk[4][4] = {}, qk[4][4] = {};
#pragma unroll 2
    for (int d = 0; d < kDk; d += 4) {
      float4 kr[4], qr[4], kc[4];
#pragma unroll
      for (int a = 0; a < 4; ++a) {
        kr[a] = *reinterpret_cast<const float4*>(ks + (ib + 16 * a) * kKs + d);
        qr[a] = *reinterpret_cast<const float4*>(qs + (ib + 16 * a) * kKs + d);
        kc[a] = *reinterpret_cast<const float4*>(ks + (jb + 16 * a) * kKs + d);
      }
#pragma unroll
      for (int a = 0; a < 4; ++a)
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          kk[a][c] += kr[a].x * kc[c].x + kr[a].y * kc[c].y + kr[a].z * kc[c].z + kr[a].w * kc[c].w;
          qk[a][c] += qr[a].x * kc[c].x + qr[a].y * kc[c].y + qr[a].z * kc[c].z + qr[a].w * kc[c].w;
        }
    }
#pragma unroll
    for (int a = 0; a < 4; ++a)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int i = ib + 16 * a, j = jb + 16 * c;
        const float decay = j <= i ? expf(cum[i] - cum[j]) : 0.0f;
        L[i * kLs + j] = j < i ? bet[i] * kk[a][c] * decay : 0.0f;
        StoreSplit(planes + kSA, planes + kSA + kC * kRowC, i * kRowC + j, qk[a][c] * decay);
      }
  }
  // The state's operands: exp(cum) q ([kC][kDk]) and (exp(last - cum) k)^T ([kDk][kC]); rows past len are zero.
  for (int e = tid; e < kC * kDk; e += kPrepThreads) {
    const int i = e / kDk, d = e % kDk;
    StoreSplit(planes + kSQ, planes + kSQ + kC * kRowDk, i * kRowDk + d, i < len ? ecum[i] * qs[i * kKs + d] : 0.0f);
  }
  for (int e = tid; e < kC * kDk; e += kPrepThreads) {
    const int d = e / kC, i = e % kC;
    StoreSplit(planes + kSK, planes + kSK + kDk * kRowC, d * kRowC + i, i < len ? edecay[i] * ks[i * kKs + d] : 0.0f);
  }
  if (tid == 0) U[dv / kCols * kC * kRowU] = expf(cum[len - 1]);
  __syncthreads();

  // Forward substitution in place, a thread per column of [beta v | beta exp(cum) k]: every right-hand
  // side loaded first (64 loads in flight, not one a row), then L's rows read as float4 (a quarter of
  // the shared-memory loads). Rows past len are zero (their L rows and right-hand sides are), so they
  // solve to zero.
  const bool is_v = tid < dv;
  const int col = is_v ? tid : tid - static_cast<int>(dv);
  if (!is_v && col >= kDk) return;
  float x[kC];
#pragma unroll
  for (int i = 0; i < kC; ++i)
    x[i] = i >= len ? 0.0f
           : is_v   ? bet[i] * r.v[(t0 + i) * r.v_stride + hv * dv + col]
                    : bet[i] * ecum[i] * ks[i * kKs + col];
#pragma unroll
  for (int i = 1; i < kC; ++i) {
    float b = x[i];
#pragma unroll
    for (int j = 0; j < i; j += 4) {
      const float4 l = *reinterpret_cast<const float4*>(L + i * kLs + j);
      b -= l.x * x[j];
      if (j + 1 < i) b -= l.y * x[j + 1];
      if (j + 2 < i) b -= l.z * x[j + 2];
      if (j + 3 < i) b -= l.w * x[j + 3];
    }
    x[i] = b;
  }
#pragma unroll
  for (int i = 0; i < kC; ++i) {
    if (is_v)
      U[(col / kCols) * kC * kRowU + i * kRowU + col % kCols] = x[i];
    else
      StoreSplit(planes + kSW, planes + kSW + kC * kRowDk, i * kRowDk + col, x[i]);
  }
}

// cp.async of `bytes` (a multiple of 16) from a record into shared memory, 16 bytes a thread a step.
__device__ __forceinline__ void CopyRun(void* dst, const void* src, int bytes) {
  auto* d = static_cast<uint8_t*>(dst);
  const auto* g = static_cast<const uint8_t*>(src);
  for (int o = 16 * threadIdx.x; o < bytes; o += 16 * kStateThreads) CpAsync16(d + o, g + o, true);
}

// The m32 x n32 product of 32 rows of A ([m][k] planes at a, row stride kLda) with B ([k][n] planes at
// b, row stride kRowN) over k-steps k0 .. k1 - 1, hi * hi + hi * lo + lo * hi, into acc[2 m-tiles][4
// n-tiles][4]. The three parts go one after the other over all eight tiles, so that the MMAs into one
// accumulator are eight apart.
template <int kLda>
__device__ __forceinline__ void MmaRows32(float (&acc)[2][4][4], const Bf16* a, int64_t a_lo, const Bf16* b,
                                          int64_t b_lo, int k0, int k1) {
  const int lane = threadIdx.x & 31, lr = lane & 15, lc = (lane >> 4) * 8;
  for (int ks = k0; ks < k1; ++ks) {
    uint32_t ah[2][4], al[2][4], bh[2][4], bl[2][4];
#pragma unroll
    for (int m = 0; m < 2; ++m) {
      LdMatrixX4(ah[m], a + (16 * m + lr) * kLda + 16 * ks + lc);
      LdMatrixX4(al[m], a + a_lo + (16 * m + lr) * kLda + 16 * ks + lc);
    }
#pragma unroll
    for (int np = 0; np < 2; ++np) {
      LdMatrixX4Trans(bh[np], b + (16 * ks + lr) * kRowN + 16 * np + lc);
      LdMatrixX4Trans(bl[np], b + b_lo + (16 * ks + lr) * kRowN + 16 * np + lc);
    }
#pragma unroll
    for (int part = 0; part < 3; ++part)
#pragma unroll
      for (int m = 0; m < 2; ++m)
#pragma unroll
        for (int n = 0; n < 4; ++n) {
          const uint32_t* fa = part == 2 ? al[m] : ah[m];
          const uint32_t* fb = part == 1 ? &bl[n >> 1][2 * (n & 1)] : &bh[n >> 1][2 * (n & 1)];
          Mma(acc[m][n], fa, fb[0], fb[1]);
        }
  }
}

// f(pair, row, col) for each pair of adjacent values of a 32 x 32 accumulator acc[2][4][4] as the
// lane holds them: pair = &acc[m][n][2 h], at row 16 m + g + 8 h and column 8 n + 2 t of the tile.
template <class F>
__device__ __forceinline__ void ForEachAccPair(float (&acc)[2][4][4], F f) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int m = 0; m < 2; ++m)
#pragma unroll
    for (int n = 0; n < 4; ++n)
#pragma unroll
      for (int h = 0; h < 2; ++h) f(&acc[m][n][2 * h], 16 * m + g + 8 * h, 8 * n + 2 * t);
}

// Rows row0 .. row0 + 15 of an accumulator, split hi + lo into a [rows][kRowN] plane pair.
__device__ __forceinline__ void StoreRows16(const float (&acc)[4][4], Bf16* dst, int64_t lo, int row0) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int n = 0; n < 4; ++n)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      uint32_t hi, lo_bits;
      SplitPair(acc[n][2 * h], acc[n][2 * h + 1], hi, lo_bits);
      const int at = (row0 + g + 8 * h) * kRowN + 8 * n + 2 * t;
      *reinterpret_cast<uint32_t*>(dst + at) = hi;
      *reinterpret_cast<uint32_t*>(dst + lo + at) = lo_bits;
    }
}

// Block (value head, 32 value columns, run): the pass's chunks of the run in order. Warp w keeps
// state rows 32 w .. 32 w + 31 (of this block's columns) in its accumulators; per chunk warps 0-1 make
// v' = U - W S, warps 2-3 (exp(cum) q) S then + A v' (the chunk's output), and every warp its rows of
// the new state. A chunk's W / q / U are copied in while the previous chunk's A v' and state update
// run, its k^T / A while its own W S runs (two cp.async groups a chunk).
__global__ void __launch_bounds__(kStateThreads, 1) GdnChunkStateKernel(const GdnRunParams* runs, ChunkPass pass,
                                                                     int64_t vh, int64_t dv, uint8_t* records) {
  GridDependencyWait();
  const GdnRunParams& r = runs[blockIdx.z];
  const int64_t first = PassFirstChunk(r, pass);
  if (first < 0) return;
  const int64_t total = (r.T + kC - 1) / kC;
  const int n_chunks = static_cast<int>(total - first < pass.chunks_per_run ? total - first : pass.chunks_per_run);
  const int64_t hv = blockIdx.x, col0 = int64_t{blockIdx.y} * kCols;
  extern __shared__ __align__(16) Bf16 sm[];
  Bf16 *sW = sm + kSW, *sQ = sm + kSQ, *sK = sm + kSK, *sA = sm + kSA, *sS = sm + kSS, *sV = sm + kSV;
  float* sU = reinterpret_cast<float*>(sm + kSU);
  float* sEl = sU + kC * kRowU;
  const int tid = threadIdx.x, warp = tid >> 5;

  // A chunk's W and exp(cum) q planes with this block's U tile; its k^T and A planes with exp(last).
  auto copy_wqu = [&](int j) {
    const uint8_t* rec = RecordOf(records, r, pass, j, hv, vh, dv);
    CopyRun(sW, rec + kSW * 2, (kSK - kSW) * 2);
    CopyRun(sU, rec + kPlanesBytes + blockIdx.y * kUTileBytes, static_cast<int>(kUTileBytes));
  };
  auto copy_ka = [&](int j) {
    const uint8_t* rec = RecordOf(records, r, pass, j, hv, vh, dv);
    CopyRun(sK, rec + kSK * 2, (kSS - kSK) * 2);
    if (tid == 0) CpAsync16(sEl, rec + kPlanesBytes + dv / kCols * kUTileBytes, true);
  };

  // The state's rows of this warp: rows 32 warp + 16 m + g (+ 8), columns 8 n + 2 t (+ 1).
  float* state = r.state + hv * kDk * dv + col0;
  float s[2][4][4];
  ForEachAccPair(s, [&](float* p, int row, int col) {
    const float2 v = *reinterpret_cast<const float2*>(state + (32 * warp + row) * dv + col);
    p[0] = v.x, p[1] = v.y;
  });
#pragma unroll
  for (int m = 0; m < 2; ++m) StoreRows16(s[m], sS, kDk * kRowN, 32 * warp + 16 * m);
  copy_wqu(0);
  CpAsyncCommit();
  copy_ka(0);
  CpAsyncCommit();
  CpAsyncWait<1>();
  __syncthreads();

  const int64_t out_stride = vh * dv;
  for (int j = 0; j < n_chunks; ++j) {
    const int64_t t0 = (first + j) * kC;
    const int len = ChunkLen(r.T, t0);
    // Warps 0-1: W S (rows of v'); warps 2-3: (exp(cum) q) S (rows of the output).
    const int own0 = 32 * (warp & 1);  // this warp's chunk rows own0 .. own0 + 31
    float acc[2][4][4] = {};
    const Bf16* a = (warp < 2 ? sW : sQ) + own0 * kRowDk;
    MmaRows32<kRowDk>(acc, a, kC * kRowDk, sS, kDk * kRowN, 0, kDk / 16);
    if (warp < 2) {
      ForEachAccPair(acc, [&](float* p, int row, int col) {
        const float2 u = *reinterpret_cast<const float2*>(sU + (own0 + row) * kRowU + col);
        p[0] = u.x - p[0], p[1] = u.y - p[1];
      });
#pragma unroll
      for (int m = 0; m < 2; ++m) StoreRows16(acc[m], sV, kC * kRowN, own0 + 16 * m);
    }
    CpAsyncWait<0>();  // this chunk's k^T / A
    __syncthreads();   // v' is whole; W, q and U are read
    if (j + 1 < n_chunks) copy_wqu(j + 1);
    CpAsyncCommit();
    if (warp >= 2) {
      // o = (exp(cum) q) S + A v' (A is lower triangular: k-steps up to the second m-tile's diagonal
      // block; the first m-tile's share of that block is A's stored zeros).
      MmaRows32<kRowC>(acc, sA + own0 * kRowC, kC * kRowC, sV, kC * kRowN, 0, own0 / 16 + 2);
      ForEachAccPair(acc, [&](float* p, int row, int col) {
        if (own0 + row < len)
          *reinterpret_cast<float2*>(r.out + (t0 + own0 + row) * out_stride + hv * dv + col0 + col) =
              make_float2(p[0], p[1]);
      });
    }
    // S <- exp(last) S + (exp(last - cum) k)^T v'.
    const float el = *sEl;
#pragma unroll
    for (int m = 0; m < 2; ++m)
#pragma unroll
      for (int n = 0; n < 4; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[m][n][e] *= el;
    MmaRows32<kRowC>(s, sK + 32 * warp * kRowC, kDk * kRowC, sV, kC * kRowN, 0, kC / 16);
    __syncthreads();  // k^T, A and v' are read; the old S planes too
#pragma unroll
    for (int m = 0; m < 2; ++m) StoreRows16(s[m], sS, kDk * kRowN, 32 * warp + 16 * m);
    if (j + 1 < n_chunks) copy_ka(j + 1);
    CpAsyncCommit();
    CpAsyncWait<1>();  // the next chunk's W / q / U
    __syncthreads();
  }
  ForEachAccPair(s, [&](float* p, int row, int col) {
    *reinterpret_cast<float2*>(state + (32 * warp + row) * dv + col) = make_float2(p[0], p[1]);
  });
}

}  // namespace

bool GdnChunkedFits(int64_t dk, int64_t dv) { return dk == kDk && dv > 0 && dv % kCols == 0 && dv + dk <= kPrepThreads; }

GdnChunkPassShape GdnChunkPasses(int64_t chunked_runs) {
  const int per_group = static_cast<int>(std::clamp<int64_t>(chunked_runs, 1, kGdnChunkSlots));
  return {per_group, static_cast<int>(kGdnChunkSlots / per_group)};
}

int64_t GdnChunkRecordsBytes(int64_t chunked_runs, int64_t value_heads, int64_t dv) {
  if (chunked_runs <= 0) return 0;
  const GdnChunkPassShape shape = GdnChunkPasses(chunked_runs);
  return int64_t{shape.runs_per_group} * shape.chunks_per_run * value_heads * RecordBytes(dv);
}

void GatedDeltaChunkedPass(const GdnRunParams* runs, int64_t n, int group, int runs_per_group, int chunks_per_run,
                           int piece, const float* qn, const float* kn, int64_t key_heads, int64_t value_heads,
                           int64_t dv, void* records, cudaStream_t s) {
  if (n <= 0) return;
  KernelResidency(GdnChunkPrepKernel, kPrepSmemBytes, kPrepThreads);
  const ChunkPass pass{group, runs_per_group, chunks_per_run, piece};
  auto* rec = static_cast<uint8_t*>(records);
  LaunchKernel(GdnChunkPrepKernel,
               dim3(static_cast<unsigned>(chunks_per_run), static_cast<unsigned>(value_heads), static_cast<unsigned>(n)),
               kPrepThreads, kPrepSmemBytes, s)(runs, pass, qn, kn, key_heads, value_heads, dv, rec);
  KernelResidency(GdnChunkStateKernel, kStateSmemBytes, kStateThreads);
  LaunchKernel(GdnChunkStateKernel,
               dim3(static_cast<unsigned>(value_heads), static_cast<unsigned>(dv / kCols), static_cast<unsigned>(n)),
               kStateThreads, kStateSmemBytes, s)(runs, pass, value_heads, dv, rec);
}

}  // namespace tessera::cuda
