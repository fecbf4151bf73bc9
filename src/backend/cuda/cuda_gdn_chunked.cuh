// tessera cuda backend: the gated delta rule in chunked (WY / UT) form, the per-block code of its two
// kernels (cuda_gdn_chunked.cu launches them). The algebra is the CPU backend's GatedDeltaHeadChunked
// (cpu_sequence_ops.cpp), in f32: for a chunk of C tokens with cum = prefix sums of the log decays g,
//   L[i][j] = beta_i (k_i . k_j) exp(cum_i - cum_j) (j < i),   A[i][j] = (q_i . k_j) exp(cum_i - cum_j) (j <= i),
//   (I + L) U = beta v,   (I + L) W = beta k exp(cum),
//   v_new = U - W S,   o = exp(cum) (q S) + A v_new,   S <- exp(cum_last) S + sum_t exp(cum_last - cum_t) k_t v_new_t^T.
// Everything but the S terms is independent of the state, so the prep kernel does it for every chunk of
// every run at once (a block per (chunk, value head)); the state kernel walks a run's chunks in order (a
// block per (value head, 64 value columns, run)). The recurrent column kernel does a token at a time
// (cuda_sequence_kernels.cu); here the serial chain is a chunk long.
//
// Kept to threadIdx.x, __syncthreads, __shfl_xor_sync and expf so that the block code runs unchanged
// under a host emulation of a block (how it was first checked, without a GPU).
#pragma once

#include <cstdint>

// TESSERA_GDN_UNROLL for nvcc only (the host emulation's compiler warns on it).
#if defined(__CUDACC__)
#define TESSERA_GDN_UNROLL _Pragma("unroll")
#define TESSERA_GDN_UNROLL8 _Pragma("unroll 8")
#else
#define TESSERA_GDN_UNROLL
#define TESSERA_GDN_UNROLL8
#endif

namespace tessera::cuda::gdn_chunked {

constexpr int kC = 64;                   // tokens a chunk
constexpr int kDk = 128;                 // key dim (both target models)
constexpr int kPrepThreads = 256;        // prep: a thread per solved column (dv + dk = 256)
constexpr int kCols = 64;                // state kernel: value columns a block
constexpr int kStateThreads = 2 * kCols; // two threads a column, 64 state rows each
constexpr int kHalf = kDk / 2;
constexpr int kKs = kDk + 1;             // prep's staged row stride (conflict-free column reads)

// Where a run's inputs are (as GdnRunParams, with q / k already L2-normalised into compact rows).
struct Run {
  const float* qn;  // [T, kh, kDk] (the run's first compact row)
  const float* kn;
  const float* v;  // row stride v_stride, value head h at h * dv
  int64_t v_stride;
  const float* g;     // [T, vh]
  const float* beta;  // [T, vh]
  int64_t T;
  float* state;  // [vh, kDk, dv]
  float* out;    // [T, vh * dv]
};

// Scratch of one (chunk, value head): U [kC][dv], W [kC][kDk], A [kC][kC], cum [kC].
__host__ __device__ inline int64_t RecordFloats(int64_t dv) { return int64_t{kC} * (dv + kDk + kC + 1); }

inline constexpr size_t kPrepSmemBytes = sizeof(float) * (2 * kC * kKs + kC * (kC + 1) + 2 * kC);
inline constexpr size_t kStateSmemBytes = sizeof(float) * (2 * kC * kDk + 2 * kC * kCols + kC);

// Chunk k of a run holds its rows [k kC, k kC + len), len = min(kC, T - k kC).
__host__ __device__ inline int ChunkLen(int64_t T, int64_t t0) { return static_cast<int>(T - t0 < kC ? T - t0 : kC); }

// Prep of the run's chunk at row t0 for value head hv (kPrepThreads threads, kPrepSmemBytes of shared
// memory at smem); writes the chunk's record.
__device__ inline void PrepBlock(const Run& r, int64_t t0, int64_t hv, int64_t kh, int64_t vh, int64_t dv,
                                 float* record, float* smem) {
  struct {
    int64_t t0;
    int len;
  } const c{t0, ChunkLen(r.T, t0)};
  float* ks = smem;                // [kC][kKs]
  float* qs = ks + kC * kKs;       // [kC][kKs]
  float* L = qs + kC * kKs;        // [kC][kC + 1]
  float* cum = L + kC * (kC + 1);  // [kC]
  float* bet = cum + kC;           // [kC]
  const int tid = threadIdx.x;
  const int64_t hk = hv / (vh / kh);
TESSERA_GDN_UNROLL8
  for (int e = tid; e < kC * kDk; e += kPrepThreads) {  // 8 loads of each in flight a thread
    const int i = e / kDk, d = e % kDk;
    const int64_t row = ((c.t0 + i) * kh + hk) * kDk + d;
    ks[i * kKs + d] = i < c.len ? r.kn[row] : 0.0f;
    qs[i * kKs + d] = i < c.len ? r.qn[row] : 0.0f;
  }
  if (tid == 0) {  // 64 additions in order, as the CPU does
    float run = 0.0f;
    for (int i = 0; i < kC; ++i) {
      run += i < c.len ? r.g[(c.t0 + i) * vh + hv] : 0.0f;
      cum[i] = run;
    }
  }
  for (int i = tid; i < kC; i += kPrepThreads) bet[i] = i < c.len ? r.beta[(c.t0 + i) * vh + hv] : 0.0f;
  __syncthreads();

  // K K^T and Q K^T: thread (i, quarter) owns columns j = 16 quarter .. + 15 of row i.
  float* U = record;
  float* W = U + kC * dv;
  float* A = W + kC * kDk;
  float* cum_out = A + kC * kC;
  {
    const int i = tid / 4, j0 = (tid % 4) * 16;
    float kk[16], qk[16];
TESSERA_GDN_UNROLL
    for (int jj = 0; jj < 16; ++jj) kk[jj] = qk[jj] = 0.0f;
    for (int d = 0; d < kDk; ++d) {
      const float a = ks[i * kKs + d], q = qs[i * kKs + d];
TESSERA_GDN_UNROLL
      for (int jj = 0; jj < 16; ++jj) {
        const float b = ks[(j0 + jj) * kKs + d];
        kk[jj] += a * b;
        qk[jj] += q * b;
      }
    }
TESSERA_GDN_UNROLL
    for (int jj = 0; jj < 16; ++jj) {
      const int j = j0 + jj;
      const float decay = j <= i ? expf(cum[i] - cum[j]) : 0.0f;
      L[i * (kC + 1) + j] = j < i ? bet[i] * kk[jj] * decay : 0.0f;
      A[i * kC + j] = qk[jj] * decay;
    }
  }
  if (tid < kC) cum_out[tid] = cum[tid];
  __syncthreads();

  // Forward substitution, a thread per column of [beta v | beta exp(cum) k]; rows past len are zero
  // (their L rows and right-hand sides are), so they solve to zero.
  const bool is_v = tid < dv;
  const int col = is_v ? tid : tid - static_cast<int>(dv);
  if (!is_v && col >= kDk) return;
  float x[kC];
TESSERA_GDN_UNROLL
  for (int i = 0; i < kC; ++i) {
    float b = 0.0f;
    if (i < c.len)
      b = is_v ? bet[i] * r.v[(c.t0 + i) * r.v_stride + hv * dv + col]
               : bet[i] * expf(cum[i]) * ks[i * kKs + col];
TESSERA_GDN_UNROLL
    for (int j = 0; j < i; ++j) b -= L[i * (kC + 1) + j] * x[j];
    x[i] = b;
  }
TESSERA_GDN_UNROLL
  for (int i = 0; i < kC; ++i) {
    if (is_v)
      U[i * dv + col] = x[i];
    else
      W[i * kDk + col] = x[i];
  }
}

// The state pass of one run for value head hv, columns [col0, col0 + kCols) (kStateThreads threads,
// kStateSmemBytes at smem): the run's chunk k has the record records + (k vh + hv) RecordFloats(dv).
__device__ inline void StateBlock(const Run& r, const float* records, int64_t hv, int64_t kh, int64_t vh, int64_t dv,
                                  int64_t col0, float* smem) {
  float* wq = smem;              // [kC][kDk]: W, then A ([kC][kC])
  float* qk = wq + kC * kDk;     // [kC][kDk]: exp(cum) q, then exp(cum_last - cum) k
  float* vnew = qk + kC * kDk;   // [kC][kCols]
  float* oint = vnew + kC * kCols;  // [kC][kCols]
  float* cum = oint + kC * kCols;   // [kC]
  const int tid = threadIdx.x, c = tid >> 1, half = tid & 1;
  const int64_t j = col0 + c, hk = hv / (vh / kh);
  const int64_t rec_floats = RecordFloats(dv);
  float* column = r.state + hv * kDk * dv + static_cast<int64_t>(half) * kHalf * dv + j;
  float s[kHalf];
TESSERA_GDN_UNROLL
  for (int i = 0; i < kHalf; ++i) s[i] = column[i * dv];

  for (int64_t k = 0; k * kC < r.T; ++k) {
    struct {
      int64_t t0;
      int len;
    } const ch{k * kC, ChunkLen(r.T, k * kC)};
    const float* rec = records + (k * vh + hv) * rec_floats;
    const float* U = rec;
    const float* W = U + kC * dv;
    const float* A = W + kC * kDk;
    const float* cum_in = A + kC * kC;
    __syncthreads();  // the previous chunk is done with the staged values
    for (int i = tid; i < kC; i += kStateThreads) cum[i] = cum_in[i];
    // The staging loops are unrolled so that each thread has 8 loads of each array in flight: with
    // one block an SM, a load at a time would make every chunk wait ~64 round trips.
    static_assert(kC * kDk % kStateThreads == 0 && kC * kC % kStateThreads == 0, "whole staging rounds");
TESSERA_GDN_UNROLL8
    for (int e = tid; e < kC * kDk; e += kStateThreads) {
      const int i = e / kDk, d = e % kDk;
      wq[e] = W[e];
      qk[e] = i < ch.len ? expf(cum_in[i]) * r.qn[((ch.t0 + i) * kh + hk) * kDk + d] : 0.0f;
    }
    __syncthreads();
    // v_new = U - W S and exp(cum) q S, each row's two halves summed across the thread pair. This
    // is the serial part of the form, run by one block of 4 warps an SM for a single prompt (64
    // blocks), so each warp needs its own independent work: 4 partial sums a product (a single sum
    // is a chain of dependent FMAs, 4 cycles each, with no other warp to fill the gaps).
    for (int i = 0; i < kC; ++i) {
      const float* wr = wq + i * kDk + half * kHalf;
      const float* qr = qk + i * kDk + half * kHalf;
      float pw4[4] = {0.0f, 0.0f, 0.0f, 0.0f}, pq4[4] = {0.0f, 0.0f, 0.0f, 0.0f};
TESSERA_GDN_UNROLL
      for (int d = 0; d < kHalf; d += 4) {
TESSERA_GDN_UNROLL
        for (int u = 0; u < 4; ++u) {
          pw4[u] += wr[d + u] * s[d + u];
          pq4[u] += qr[d + u] * s[d + u];
        }
      }
      float pw = (pw4[0] + pw4[1]) + (pw4[2] + pw4[3]), pq = (pq4[0] + pq4[1]) + (pq4[2] + pq4[3]);
      pw += __shfl_xor_sync(0xffffffffu, pw, 1);
      pq += __shfl_xor_sync(0xffffffffu, pq, 1);
      if (half == 0) {
        vnew[i * kCols + c] = U[i * dv + j] - pw;
        oint[i * kCols + c] = pq;
      }
    }
    __syncthreads();  // W and q are read; v_new is complete
    const float last = cum[ch.len - 1];
TESSERA_GDN_UNROLL8
    for (int e = tid; e < kC * kC; e += kStateThreads) wq[e] = A[e];
TESSERA_GDN_UNROLL8
    for (int e = tid; e < kC * kDk; e += kStateThreads) {
      const int i = e / kDk, d = e % kDk;
      qk[e] = i < ch.len ? expf(last - cum[i]) * r.kn[((ch.t0 + i) * kh + hk) * kDk + d] : 0.0f;
    }
    __syncthreads();
    // o = exp(cum) q S + A v_new: the pair splits the rows (even / odd).
    for (int i = half; i < ch.len; i += 2) {
      float o2[2] = {0.0f, 0.0f};  // two chains, as above
      int jj = 0;
      for (; jj + 1 <= i; jj += 2) {
        o2[0] += wq[i * kC + jj] * vnew[jj * kCols + c];
        o2[1] += wq[i * kC + jj + 1] * vnew[(jj + 1) * kCols + c];
      }
      if (jj == i) o2[0] += wq[i * kC + jj] * vnew[jj * kCols + c];
      r.out[(ch.t0 + i) * vh * dv + hv * dv + j] = oint[i * kCols + c] + (o2[0] + o2[1]);
    }
    // S <- exp(cum_last) S + sum_t (exp(cum_last - cum_t) k_t) v_new_t.
    const float el = expf(last);
TESSERA_GDN_UNROLL
    for (int d = 0; d < kHalf; ++d) s[d] *= el;
    for (int i = 0; i < ch.len; ++i) {
      const float vn = vnew[i * kCols + c];
      const float* kr = qk + i * kDk + half * kHalf;
TESSERA_GDN_UNROLL
      for (int d = 0; d < kHalf; ++d) s[d] += kr[d] * vn;
    }
  }
TESSERA_GDN_UNROLL
  for (int i = 0; i < kHalf; ++i) column[i * dv] = s[i];
}

}  // namespace tessera::cuda::gdn_chunked
