// tessera cuda backend: the per-sequence kernels: paged attention (every mask: causal / block-causal /
// sliding window / DiffusionGemma canvas rows, head_dim up to 512; one pass with an online softmax, the
// rows of several sequences in one launch, keys split across blocks for decode), the KV row scatter, the causal depthwise conv1d of Gated DeltaNet and the gated delta rule
// in recurrent form (state in registers, one token after the other; a state column per thread for
// key_dim <= 128). See cuda_kernels.h.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "backend/cuda/cuda_device_util.cuh"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuda_launch.cuh"

namespace tessera::cuda {

namespace {

constexpr int kAttnWarps = 8;
// Dims a lane holds: 8 (head_dim <= 256, every Qwen shape) or 16 (Gemma 4's 512-dim global layers; a
// second instantiation, so the common one keeps its registers and shared memory).
constexpr int kLanesNarrow = 8, kLanesWide = static_cast<int>(kAttentionMaxHeadDim / 32);


// One block per (query row, head[, key split]); each warp walks a strided subset of the block's keys
// with its own online softmax (running max, sum, output accumulator: lane holds dims lane + 32 i);
// the warps' partial results are merged at the end. Rows of several sequences share one launch:
// rows[blockIdx.x] = (sequence, row within it) picks the sequence's parameters. With splits > 1
// (decode: few rows, long context) block z takes keys [z * key_chunk, (z + 1) * key_chunk) and
// writes (max, sum, unnormalised output) for AttentionMergeKernel. T: the cache's element type. A row's
// keys are one range (AttentionKeys: a sliding window or a canvas row may start past key 0); a split
// outside it has no keys and writes sum 0.
template <typename T, int kPerLane>
__global__ void AttentionKernel(const AttentionParams* descs, const int2* rows, int splits, int64_t key_chunk,
                                float* partial) {
  constexpr int kMaxHeadDim = kPerLane * 32;
  GridDependencyWait();
  const int2 rr = rows[blockIdx.x];
  const AttentionParams& p = descs[rr.x];
  const int64_t t = rr.y, h = blockIdx.y, z = blockIdx.z;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t D = p.head_dim, group = p.num_heads / p.num_kv_heads, kvh = h / group;
  const KeyRange keys = AttentionKeys(p, t);
  const int64_t j_begin = max(z * key_chunk, keys.first), j_end = min(keys.last + 1, z * key_chunk + key_chunk);
  const int per = static_cast<int>((D + 31) / 32);

  float q[kPerLane], acc[kPerLane];
  const float* qr = p.q + t * p.q_stride + h * D;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int64_t d = lane + 32 * i;
    q[i] = (i < per && d < D) ? qr[d] * p.scale : 0.0f;
    acc[i] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  // Rows from their start (KvRow of KV head 0) and values at kvh * D + d: a split cache's chunks are
  // the row's, and a head narrower than a chunk starts inside one.
  const int64_t x0 = kvh * D;
  for (int64_t j = j_begin + warp; j < j_end; j += kAttnWarps) {
    const T* kr = KvRow<T>(p, j, 0, false);
    const T* vr = KvRow<T>(p, j, 0, true);
    float s = 0;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int64_t d = lane + 32 * i;
      if (i < per && d < D) s += q[i] * KvValueAt(kr, x0 + d);
    }
    s = WarpSum(s);
    const float m_new = fmaxf(m, s);
    const float corr = expf(m - m_new);  // 0 on the first key (m = -inf)
    const float e = expf(s - m_new);
    l = l * corr + e;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int64_t d = lane + 32 * i;
      if (i < per && d < D) acc[i] = acc[i] * corr + e * KvValueAt(vr, x0 + d);
    }
    m = m_new;
  }
  __shared__ float sm_m[kAttnWarps], sm_l[kAttnWarps];
  __shared__ float sm_acc[kAttnWarps][kMaxHeadDim];
  if (lane == 0) sm_m[warp] = m, sm_l[warp] = l;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int64_t d = lane + 32 * i;
    if (i < per && d < D) sm_acc[warp][d] = acc[i];
  }
  __syncthreads();
  float gm = -INFINITY;
  for (int w = 0; w < kAttnWarps; ++w) gm = fmaxf(gm, sm_m[w]);
  float gl = 0;
  float f[kAttnWarps];
  for (int w = 0; w < kAttnWarps; ++w) {
    f[w] = sm_l[w] > 0 ? expf(sm_m[w] - gm) : 0.0f;
    gl += sm_l[w] * f[w];
  }
  if (splits == 1) {
    float* o = p.out + t * p.out_stride + h * D;
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
      float v = 0;
      for (int w = 0; w < kAttnWarps; ++w) v += sm_acc[w][d] * f[w];
      o[d] = v / gl;
    }
    return;
  }
  // A split with no keys (past this row's last key) writes sum 0: the merge gives it no weight.
  float* part = partial + ((static_cast<int64_t>(blockIdx.x) * gridDim.y + h) * splits + z) * (D + 2);
  if (threadIdx.x == 0) part[0] = gm, part[1] = gl;
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
    float v = 0;
    for (int w = 0; w < kAttnWarps; ++w) v += sm_acc[w][d] * f[w];
    part[2 + d] = v;
  }
}

// Block per (row, head): combines the splits' (max, sum, output). The splits are spread over the
// warps (warp w takes z = w, w + 8, ...) so that a long split list is read with many loads in flight
// instead of three serial passes; every reduction has a fixed order (max is exact in any order).
constexpr int kMergeWarps = 8;
constexpr int kMergeMaxSplits = 256;  // weights kept in shared memory; more are recomputed

template <int kPerLane>
__global__ void __launch_bounds__(kMergeWarps * 32) AttentionMergeKernel(const AttentionParams* descs,
                                                                         const int2* rows, int splits,
                                                                         const float* partial) {
  GridDependencyWait();
  constexpr int kMaxHeadDim = kPerLane * 32;
  const int2 rr = rows[blockIdx.x];
  const AttentionParams& p = descs[rr.x];
  const int64_t t = rr.y, h = blockIdx.y, D = p.head_dim;
  const float* part = partial + (static_cast<int64_t>(blockIdx.x) * gridDim.y + h) * splits * (D + 2);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  __shared__ float sw[kMergeMaxSplits];
  __shared__ float sred[kMergeWarps];
  __shared__ float sgl;
  __shared__ float sacc[kMergeWarps][kMaxHeadDim];
  // The largest max of a non-empty split (an empty one has sum 0 and no weight).
  float mx = -INFINITY;
  for (int z = tid; z < splits; z += kMergeWarps * 32)
    if (part[z * (D + 2) + 1] > 0) mx = fmaxf(mx, part[z * (D + 2)]);
  mx = WarpMax(mx);
  if (lane == 0) sred[warp] = mx;
  __syncthreads();
  float gm = -INFINITY;
  for (int w = 0; w < kMergeWarps; ++w) gm = fmaxf(gm, sred[w]);
  auto weight = [&](int z) {
    const float l = part[z * (D + 2) + 1];
    return l > 0 ? expf(part[z * (D + 2)] - gm) : 0.0f;
  };
  for (int z = tid; z < splits && z < kMergeMaxSplits; z += kMergeWarps * 32) sw[z] = weight(z);
  __syncthreads();
  auto w_of = [&](int z) { return z < kMergeMaxSplits ? sw[z] : weight(z); };
  if (warp == 0) {
    float gl = 0;  // lane-strided in split order, then a fixed butterfly
    for (int z = lane; z < splits; z += 32) gl += part[z * (D + 2) + 1] * w_of(z);
    gl = WarpSum(gl);
    if (lane == 0) sgl = gl;
  }
  const int per = static_cast<int>((D + 31) / 32);
  float acc[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) acc[i] = 0.0f;
#pragma unroll 2
  for (int z = warp; z < splits; z += kMergeWarps) {
    const float w = w_of(z);
    if (w == 0.0f) continue;  // empty split (or a weight that underflowed: adds nothing)
    const float* v = part + z * (D + 2) + 2;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int64_t d = lane + 32 * i;
      if (i < per && d < D) acc[i] += v[d] * w;
    }
  }
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int64_t d = lane + 32 * i;
    if (i < per && d < D) sacc[warp][d] = acc[i];
  }
  __syncthreads();
  float* o = p.out + t * p.out_stride + h * D;
  for (int64_t d = tid; d < D; d += kMergeWarps * 32) {
    float v = 0;
    for (int w = 0; w < kMergeWarps; ++w) v += sacc[w][d];
    o[d] = v / sgl;
  }
}

// The merge for head_dim 128 / 256 and <= 64 splits (the flash and decode kernels' plans split at
// most 64 ways): a block of D threads per (row, head), thread d owns output dim d. Every
// split's max and sum go to shared memory while each thread loads its dim of every split, all in one
// round of loads (the kernel above chains rows ->
// descriptor -> max -> weights -> values: ncu 5.6 us at batch 1, 10.5 us at batch 64); the
// descriptor is read alongside. Sums run in split order (deterministic). kMergeBatch: the most
// splits an instantiation takes (8 for batched decode's few splits keeps registers, and so resident
// blocks, high).
template <int D, int kMergeBatch>
__global__ void __launch_bounds__(D) AttentionMergeDimKernel(const AttentionParams* descs, const int2* rows,
                                                             int splits, const float* partial) {
  GridDependencyWait();
  const int d = threadIdx.x;
  const int64_t h = blockIdx.y;
  const float* part = partial + (static_cast<int64_t>(blockIdx.x) * gridDim.y + h) * splits * (D + 2);
  __shared__ float sm_m[kMergeBatch], sm_l[kMergeBatch], sm_w[kMergeBatch];
  for (int z = d; z < splits; z += D) sm_m[z] = part[z * (D + 2)], sm_l[z] = part[z * (D + 2) + 1];
  float v[kMergeBatch];
#pragma unroll
  for (int i = 0; i < kMergeBatch; ++i) v[i] = i < splits ? part[i * (D + 2) + 2 + d] : 0.0f;
  const int2 rr = rows[blockIdx.x];
  const AttentionParams& p = descs[rr.x];
  float* o = p.out + rr.y * p.out_stride + h * D;
  __syncthreads();
  float gm = -INFINITY;  // the largest max of a non-empty split (an empty one has sum 0, no weight)
  for (int z = 0; z < splits; ++z)
    if (sm_l[z] > 0) gm = fmaxf(gm, sm_m[z]);
  for (int z = d; z < splits; z += D) sm_w[z] = sm_l[z] > 0 ? expf(sm_m[z] - gm) : 0.0f;
  __syncthreads();
  float acc = 0.0f, gl = 0.0f;
#pragma unroll
  for (int z = 0; z < kMergeBatch; ++z) {
    if (z < splits) {
      const float w = sm_w[z];
      acc += v[z] * w;
      gl += sm_l[z] * w;
    }
  }
  o[d] = acc / gl;
}

__global__ void ConvSiluKernel(const float* x, int64_t T, int64_t xs, int64_t C, const float* w, int64_t K,
                               const float* state, float* y) {
  GridDependencyWait();
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= T * C) return;
  const int64_t t = i / C, c = i % C;
  float s = 0;
  for (int64_t j = 0; j < K; ++j) {
    const int64_t src = t - (K - 1) + j;  // negative: from the state
    const float in = src >= 0 ? x[src * xs + c] : state[c * (K - 1) + (K - 1) + src];
    s += w[c * K + j] * in;
  }
  y[i] = s / (1.0f + expf(-s));
}

__device__ void ConvUpdateColumn(const float* x, int64_t T, int64_t xs, int64_t K, int64_t c, float* state) {
  const int64_t S = K - 1;
  float* sc = state + c * S;
  // New state = the last S entries of [old state, x rows]; read before writing (S <= 8).
  float nw[8];
  for (int64_t i = 0; i < S && i < 8; ++i) {
    const int64_t src = T + i;  // index into the window of length S + T
    nw[i] = src < S ? sc[src] : x[(src - S) * xs + c];
  }
  for (int64_t i = 0; i < S && i < 8; ++i) sc[i] = nw[i];
}

__global__ void ConvUpdateKernel(const float* x, int64_t T, int64_t xs, int64_t C, int64_t K, float* state) {
  GridDependencyWait();
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (c < C) ConvUpdateColumn(x, T, xs, K, c, state);
}

// Batched forms: block row y = segment (update) / per-row (sequence, row in it) map (conv).
__global__ void ConvUpdateBatchKernel(const float* x, int64_t xs, int64_t C, int64_t K, const ConvSegmentParams* segs) {
  GridDependencyWait();
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const ConvSegmentParams& sg = segs[blockIdx.y];
  if (c < C) ConvUpdateColumn(x + sg.row0 * xs, sg.T, xs, K, c, sg.state);
}

__global__ void ConvSiluBatchKernel(const float* x, int64_t R, int64_t xs, int64_t C, const float* w, int64_t K,
                                    const int2* rows, const ConvSegmentParams* segs, float* y) {
  GridDependencyWait();
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= R * C) return;
  const int64_t r = i / C, c = i % C;
  const int2 rr = rows[r];
  const float* state = segs[rr.x].state;
  const int64_t t = rr.y;
  float s = 0;
  for (int64_t j = 0; j < K; ++j) {
    const int64_t src = t - (K - 1) + j;  // negative: from the sequence's state
    const float in = src >= 0 ? x[(r - t + src) * xs + c] : state[c * (K - 1) + (K - 1) + src];
    s += w[c * K + j] * in;
  }
  y[i] = s / (1.0f + expf(-s));
}

// Conv + SiLU and the state shift of one-row segments: ConvSiluBatchKernel's sum (same order) and
// ConvUpdateColumn's shift for T = 1, the window [state, x] held in registers.
__global__ void ConvSiluUpdateRowsKernel(const float* x, int64_t xs, int C, const float* w, int K,
                                         const ConvSegmentParams* segs, float* y) {
  GridDependencyWait();
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const ConvSegmentParams& sg = segs[blockIdx.y];
  const int S = K - 1;
  float* st = sg.state + static_cast<int64_t>(c) * S;
  float win[kConvMaxK];
#pragma unroll
  for (int j = 0; j < kConvMaxK - 1; ++j)
    if (j < S) win[j] = st[j];
#pragma unroll
  for (int j = 0; j < kConvMaxK; ++j)
    if (j == S) win[j] = x[sg.row0 * xs + c];
  float s = 0;
#pragma unroll
  for (int j = 0; j < kConvMaxK; ++j)
    if (j < K) s += w[static_cast<int64_t>(c) * K + j] * win[j];
  y[sg.row0 * C + c] = s / (1.0f + expf(-s));
#pragma unroll
  for (int j = 0; j < kConvMaxK - 1; ++j)
    if (j < S) st[j] = win[j + 1];
}

// One warp L2-normalises one (token, key head) of q and k (q also scaled by 1/sqrt(dk)).
__device__ void NormalizeQkHead(const float* qs, const float* ks, int64_t dk, float* qo, float* ko) {
  const int lane = threadIdx.x & 31;
  float sq = 0, sk = 0;
  for (int64_t d = lane; d < dk; d += 32) sq += qs[d] * qs[d], sk += ks[d] * ks[d];
  sq = WarpSum(sq);
  sk = WarpSum(sk);
  const float iq = rsqrtf(sq + 1e-6f) * rsqrtf(static_cast<float>(dk));
  const float ik = rsqrtf(sk + 1e-6f);
  for (int64_t d = lane; d < dk; d += 32) {
    qo[d] = qs[d] * iq;
    ko[d] = ks[d] * ik;
  }
}

__global__ void NormalizeQkKernel(const float* q, const float* k, int64_t stride, int64_t T, int64_t kh,
                                  int64_t dk, float* qn, float* kn) {
  GridDependencyWait();
  const int64_t w = blockIdx.x * static_cast<int64_t>(blockDim.x >> 5) + (threadIdx.x >> 5);
  if (w >= T * kh) return;
  const int64_t t = w / kh, h = w % kh;
  NormalizeQkHead(q + t * stride + h * dk, k + t * stride + h * dk, dk, qn + w * dk, kn + w * dk);
}

// Compact row r of the batch = row t of run rows[r].x; writes qn/kn row r.
__global__ void NormalizeQkBatchKernel(const GdnRunParams* runs, const int2* rows, int64_t R, int64_t kh, int64_t dk,
                                       float* qn, float* kn) {
  GridDependencyWait();
  const int64_t w = blockIdx.x * static_cast<int64_t>(blockDim.x >> 5) + (threadIdx.x >> 5);
  if (w >= R * kh) return;
  const int64_t r = w / kh, h = w % kh;
  const GdnRunParams& run = runs[rows[r].x];
  const int64_t t = rows[r].y;
  NormalizeQkHead(run.q + t * run.qk_stride + h * dk, run.k + t * run.qk_stride + h * dk, dk, qn + w * dk,
                  kn + w * dk);
}

constexpr int kGdnCols = 32;   // value columns per block (one per lane)
constexpr int kGdnWarps = 8;   // warps split the key rows
constexpr int kGdnRowsPerWarp = static_cast<int>(kGdnMaxKeyDim) / kGdnWarps;

// Block (value head hv, column tile): thread (warp w, lane j) keeps S[i][j] for its rows i in registers.
__device__ void GdnRecurrentBlock(const float* qn, const float* kn, int64_t kh, const float* v, int64_t v_stride,
                                  const float* g, const float* beta, int64_t T, int64_t vh, int64_t dk, int64_t dv,
                                  float* state, float* out, int64_t hv, int64_t col_tile) {
  const int64_t hk = hv / (vh / kh);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t j = col_tile * kGdnCols + lane;
  const bool col_ok = j < dv;
  const int rows = static_cast<int>((dk + kGdnWarps - 1) / kGdnWarps);
  const int64_t row0 = warp * rows;
  float* S = state + hv * dk * dv;
  float s[kGdnRowsPerWarp];
#pragma unroll
  for (int i = 0; i < kGdnRowsPerWarp; ++i) {
    const int64_t r = row0 + i;
    s[i] = (i < rows && r < dk && col_ok) ? S[r * dv + j] : 0.0f;
  }
  __shared__ float qs[kGdnMaxKeyDim], ks[kGdnMaxKeyDim];
  __shared__ float red1[kGdnWarps][kGdnCols], red2[kGdnWarps][kGdnCols];
  const int64_t out_stride = vh * dv;
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t d = threadIdx.x; d < dk; d += blockDim.x) {
      qs[d] = qn[(t * kh + hk) * dk + d];
      ks[d] = kn[(t * kh + hk) * dk + d];
    }
    __syncthreads();
    const float decay = expf(g[t * vh + hv]);
    const float b = beta[t * vh + hv];
    float part = 0;
#pragma unroll
    for (int i = 0; i < kGdnRowsPerWarp; ++i) {
      const int64_t r = row0 + i;
      if (i < rows && r < dk) {
        s[i] *= decay;
        part += s[i] * ks[r];
      }
    }
    red1[warp][lane] = part;
    __syncthreads();
    float kv = 0;
    for (int w = 0; w < kGdnWarps; ++w) kv += red1[w][lane];
    const float vj = col_ok ? v[t * v_stride + hv * dv + j] : 0.0f;
    const float delta = (vj - kv) * b;
    float o = 0;
#pragma unroll
    for (int i = 0; i < kGdnRowsPerWarp; ++i) {
      const int64_t r = row0 + i;
      if (i < rows && r < dk) {
        s[i] += ks[r] * delta;
        o += s[i] * qs[r];
      }
    }
    red2[warp][lane] = o;
    __syncthreads();
    if (warp == 0 && col_ok) {
      float tot = 0;
      for (int w = 0; w < kGdnWarps; ++w) tot += red2[w][lane];
      out[t * out_stride + hv * dv + j] = tot;
    }
    // The next token overwrites qs / ks / red*: everyone must be done reading them.
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < kGdnRowsPerWarp; ++i) {
    const int64_t r = row0 + i;
    if (i < rows && r < dk && col_ok) S[r * dv + j] = s[i];
  }
}

__global__ void GdnRecurrentKernel(const float* qn, const float* kn, int64_t kh, const float* v, int64_t v_stride,
                                   const float* g, const float* beta, int64_t T, int64_t vh, int64_t dk,
                                   int64_t dv, float* state, float* out) {
  GridDependencyWait();
  GdnRecurrentBlock(qn, kn, kh, v, v_stride, g, beta, T, vh, dk, dv, state, out, blockIdx.x, blockIdx.y);
}

// Block z runs run z (its own state and rows; its q/k normalised at compact row compact_row0).
__global__ void GdnRecurrentBatchKernel(const GdnRunParams* runs, const float* qn, const float* kn, int64_t kh,
                                        int64_t vh, int64_t dk, int64_t dv) {
  GridDependencyWait();
  const GdnRunParams& r = runs[blockIdx.z];
  if (r.chunk_rank >= 0) return;  // the chunked form's (cuda_gdn_chunked.cu)
  GdnRecurrentBlock(qn + r.compact_row0 * kh * dk, kn + r.compact_row0 * kh * dk, kh, r.v, r.v_stride, r.g, r.beta,
                    r.T, vh, dk, dv, r.state, r.out, blockIdx.x, blockIdx.y);
}

// Column-per-thread-pair recurrence for key_dim <= kGdnColKeyDim (Qwen3.5 / Qwen3-Next: 128), the
// default: the two lanes 2c, 2c + 1 of block (value head, column tile[, run]) keep column c of the
// state, S[:, c], in registers (64 rows each), so a token needs no barrier (kv_c = S[:, c] . k over
// both halves with one shuffle, then S[:, c] += k * delta_c, o_c = S[:, c] . q the same way), where
// the kernel above needs three. (One thread per column needs 128 state registers and spills.) The
// tokens' q / k / decay / beta are staged in shared memory kGdnColTokens at a time: a 32-token
// diffusion block is one pass. The step is latency-bound, not bandwidth-bound: runs of
// kGdnChunkedMinTokens or more take the chunked form (cuda_gdn_chunked.cu).
constexpr int kGdnColKeyDim = 128;
constexpr int kGdnColHalf = kGdnColKeyDim / 2;  // state rows per thread
constexpr int kGdnColTokens = 32;
constexpr int kGdnColColumns = 64;                   // value columns per block
constexpr int kGdnColThreads = 2 * kGdnColColumns;  // two threads per column

__device__ void GdnColumnBlock(const float* qn, const float* kn, int64_t kh, const float* v, int64_t v_stride,
                               const float* g, const float* beta, int64_t T, int64_t vh, int64_t dk, int64_t dv,
                               float* state, float* out, int64_t hv, int64_t col_tile) {
  const int64_t hk = hv / (vh / kh);
  const int half = threadIdx.x & 1, row0 = half * kGdnColHalf;
  const int64_t j = col_tile * kGdnColColumns + (threadIdx.x >> 1);
  const bool col_ok = j < dv;
  // This thread's rows of its column; rows past dk hold zero state and zero q / k, so they never
  // contribute: no branch in the loops.
  const int rows =
      col_ok ? static_cast<int>(dk - row0 < kGdnColHalf ? (dk - row0 > 0 ? dk - row0 : 0) : kGdnColHalf) : 0;
  float* column = state + hv * dk * dv + row0 * dv + j;
  float s[kGdnColHalf];
#pragma unroll
  for (int i = 0; i < kGdnColHalf; ++i) s[i] = i < rows ? column[i * dv] : 0.0f;
  __shared__ __align__(16) float qs[kGdnColTokens][kGdnColKeyDim];
  __shared__ __align__(16) float ks[kGdnColTokens][kGdnColKeyDim];
  __shared__ float decay_s[kGdnColTokens], beta_s[kGdnColTokens];
  const int64_t out_stride = vh * dv;
  for (int64_t t0 = 0; t0 < T; t0 += kGdnColTokens) {
    const int n = static_cast<int>(T - t0 < kGdnColTokens ? T - t0 : kGdnColTokens);
    __syncthreads();  // the previous pass is done reading the staged tokens
    for (int e = threadIdx.x; e < n * kGdnColKeyDim; e += blockDim.x) {
      const int tt = e / kGdnColKeyDim, d = e % kGdnColKeyDim;
      const int64_t src = ((t0 + tt) * kh + hk) * dk + d;
      qs[tt][d] = d < dk ? qn[src] : 0.0f;
      ks[tt][d] = d < dk ? kn[src] : 0.0f;
    }
    for (int tt = threadIdx.x; tt < n; tt += blockDim.x) {
      decay_s[tt] = expf(g[(t0 + tt) * vh + hv]);
      beta_s[tt] = beta[(t0 + tt) * vh + hv];
    }
    __syncthreads();
    for (int tt = 0; tt < n; ++tt) {
      const float decay = decay_s[tt], b = beta_s[tt];
      const float4* k4 = reinterpret_cast<const float4*>(ks[tt] + row0);
      const float4* q4 = reinterpret_cast<const float4*>(qs[tt] + row0);
      float kv[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
      for (int i = 0; i < kGdnColHalf / 4; ++i) {
        const float4 kk = k4[i];
        s[4 * i] *= decay, s[4 * i + 1] *= decay, s[4 * i + 2] *= decay, s[4 * i + 3] *= decay;
        kv[0] += s[4 * i] * kk.x, kv[1] += s[4 * i + 1] * kk.y, kv[2] += s[4 * i + 2] * kk.z,
            kv[3] += s[4 * i + 3] * kk.w;
      }
      float kv_half = (kv[0] + kv[1]) + (kv[2] + kv[3]);
      const float kv_sum = half == 0 ? kv_half + __shfl_xor_sync(0xffffffffu, kv_half, 1)
                                     : __shfl_xor_sync(0xffffffffu, kv_half, 1) + kv_half;
      const float vj = col_ok ? v[(t0 + tt) * v_stride + hv * dv + j] : 0.0f;
      const float delta = (vj - kv_sum) * b;
      float o[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
      for (int i = 0; i < kGdnColHalf / 4; ++i) {
        const float4 kk = k4[i], qq = q4[i];
        s[4 * i] += kk.x * delta, s[4 * i + 1] += kk.y * delta, s[4 * i + 2] += kk.z * delta,
            s[4 * i + 3] += kk.w * delta;
        o[0] += s[4 * i] * qq.x, o[1] += s[4 * i + 1] * qq.y, o[2] += s[4 * i + 2] * qq.z, o[3] += s[4 * i + 3] * qq.w;
      }
      const float o_half = (o[0] + o[1]) + (o[2] + o[3]);
      const float o_other = __shfl_xor_sync(0xffffffffu, o_half, 1);
      if (col_ok && half == 0) out[(t0 + tt) * out_stride + hv * dv + j] = o_half + o_other;
    }
  }
  // A fresh pointer: the prologue's addresses are not kept live across the token loop.
  asm volatile("" : "+l"(column));
#pragma unroll
  for (int i = 0; i < kGdnColHalf; ++i)
    if (i < rows) column[i * dv] = s[i];
}

__global__ void __launch_bounds__(kGdnColThreads) GdnColumnKernel(const float* qn, const float* kn, int64_t kh,
                                                                  const float* v, int64_t v_stride, const float* g,
                                                                  const float* beta, int64_t T, int64_t vh,
                                                                  int64_t dk, int64_t dv, float* state, float* out) {
  GridDependencyWait();
  GdnColumnBlock(qn, kn, kh, v, v_stride, g, beta, T, vh, dk, dv, state, out, blockIdx.x, blockIdx.y);
}

__global__ void __launch_bounds__(kGdnColThreads) GdnColumnBatchKernel(const GdnRunParams* runs, const float* qn,
                                                                       const float* kn, int64_t kh, int64_t vh,
                                                                       int64_t dk, int64_t dv) {
  GridDependencyWait();
  const GdnRunParams& r = runs[blockIdx.z];
  if (r.chunk_rank >= 0) return;  // the chunked form's (cuda_gdn_chunked.cu)
  GdnColumnBlock(qn + r.compact_row0 * kh * dk, kn + r.compact_row0 * kh * dk, kh, r.v, r.v_stride, r.g, r.beta, r.T,
                 vh, dk, dv, r.state, r.out, blockIdx.x, blockIdx.y);
}

// The column kernel for key_dim <= 128 (both target models); the block kernel above for wider keys.
bool UseGdnColumnKernel(int64_t dk) { return dk <= kGdnColKeyDim; }

// The attention layer's q / k preparation in one kernel: per-head RmsNorm, then RoPE (rotate-half
// over the first rotary_dim dims) at the row's position. One warp per (row, head), q heads first;
// the head stays in registers for the norm (as RmsNormVecKernel<32, V> holds it: 4 V floats a
// lane), and goes through shared memory for the rotation, whose pairs are half a rotary span apart.
// With kc (the cache's element type T): a k head's warp also stores the head, as written back to k,
// and v's head of the row into the cache row row_dst[r] (the attention layer's KvWriteRows, same
// rounding), unless row_dst[r] < 0 (a row not committed).
constexpr int kQkWarps = 8;
template <int V, typename T>
__global__ void __launch_bounds__(kQkWarps * 32)
    QkNormRopeKernel(float* q, int64_t q_stride, int qh, float* k, int64_t k_stride, int kh, int64_t rows,
                     const float* q_norm, const float* k_norm, float eps, bool one_plus, int rotary_dim,
                     const int64_t* positions, const float* inv_freqs, const float* v, const int64_t* row_dst, T* kc,
                     T* vc) {
  GridDependencyWait();
  constexpr int D = 128 * V;
  __shared__ float normed[kQkWarps][D];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * kQkWarps + warp;
  if (item >= rows * (qh + kh)) return;
  const int64_t r = item / (qh + kh);
  const int h = static_cast<int>(item % (qh + kh));
  const bool is_q = h < qh;
  float* x = is_q ? q + r * q_stride + static_cast<int64_t>(h) * D : k + r * k_stride + static_cast<int64_t>(h - qh) * D;
  const float* w = is_q ? q_norm : k_norm;
  float4 xv[V];
  float ss = 0;
#pragma unroll
  for (int v = 0; v < V; ++v) {
    xv[v] = *reinterpret_cast<const float4*>(x + (v * 32 + lane) * 4);
    ss += xv[v].x * xv[v].x + xv[v].y * xv[v].y + xv[v].z * xv[v].z + xv[v].w * xv[v].w;
  }
  const float inv = rsqrtf(WarpSum(ss) / D + eps);
  float* s = normed[warp];
#pragma unroll
  for (int v = 0; v < V; ++v) {
    const float4 a = xv[v], b = __ldg(reinterpret_cast<const float4*>(w + (v * 32 + lane) * 4));
    float4 o;
    o.x = a.x * inv * (one_plus ? 1.0f + b.x : b.x);
    o.y = a.y * inv * (one_plus ? 1.0f + b.y : b.y);
    o.z = a.z * inv * (one_plus ? 1.0f + b.z : b.z);
    o.w = a.w * inv * (one_plus ? 1.0f + b.w : b.w);
    *reinterpret_cast<float4*>(s + (v * 32 + lane) * 4) = o;
  }
  __syncwarp();
  const int half = rotary_dim / 2;
  const float pos = static_cast<float>(positions[r]);
  const int64_t dst = !is_q && kc != nullptr ? row_dst[r] : -1;
  const int64_t cache_row = dst * kh * D, x0 = static_cast<int64_t>(h - qh) * D;  // the head's values in its row
  for (int j = lane; j < D; j += 32) {
    float out = s[j];
    if (j < rotary_dim) {
      const int f = j < half ? j : j - half;
      float sn, cs;
      sincosf(pos * inv_freqs[f], &sn, &cs);
      out = j < half ? s[j] * cs - s[j + half] * sn : s[j] * cs + s[f] * sn;
    }
    x[j] = out;
    if (dst >= 0) {
      KvStoreAt(kc + cache_row, x0 + j, out);
      KvStoreAt(vc + cache_row, x0 + j, v[r * k_stride + x0 + j]);
    }
  }
}

}  // namespace

void AttentionBatch(const AttentionParams* descs, const int2* rows, int64_t R, int64_t heads, int64_t head_dim,
                    KvLayout layout, int splits, int64_t key_chunk, float* partial, cudaStream_t s) {
  if (R <= 0 || heads <= 0) return;
  const dim3 grid(static_cast<unsigned>(R), static_cast<unsigned>(heads), static_cast<unsigned>(splits));
  const int64_t chunk = splits == 1 ? INT64_MAX : key_chunk;
  const bool wide = head_dim > 32 * kLanesNarrow;
  WithKvType(layout, [&](auto tag) {
    using T = decltype(tag);
    LaunchKernel(wide ? AttentionKernel<T, kLanesWide> : AttentionKernel<T, kLanesNarrow>, grid, kAttnWarps * 32, 0,
                 s)(descs, rows, splits, chunk, partial);
  });
  // The general merge (head_dim 0) for the narrow kernel's shapes, as before; wide heads name theirs.
  if (splits > 1) AttentionMerge(descs, rows, R, heads, wide ? head_dim : 0, splits, partial, s);
}

void AttentionMerge(const AttentionParams* descs, const int2* rows, int64_t R, int64_t heads, int64_t head_dim,
                    int splits, const float* partial, cudaStream_t s) {
  if (R <= 0 || heads <= 0 || splits <= 1) return;
  const dim3 grid(static_cast<unsigned>(R), static_cast<unsigned>(heads));
  // The smallest instantiation that takes the splits: its loads in registers, no more (the 64-split
  // kernel made a denoise block's 10 splits at head_dim 256 slower than the general merge).
  auto kernel = [splits](auto eight, auto sixteen, auto any) {
    return splits <= 8 ? eight : splits <= 16 ? sixteen : any;
  };
  if (splits <= 64 && head_dim == 128) {
    LaunchKernel(kernel(AttentionMergeDimKernel<128, 8>, AttentionMergeDimKernel<128, 16>,
                        AttentionMergeDimKernel<128, 64>),
                 grid, 128, 0, s)(descs, rows, splits, partial);
  } else if (splits <= 64 && head_dim == 256) {
    LaunchKernel(kernel(AttentionMergeDimKernel<256, 8>, AttentionMergeDimKernel<256, 16>,
                        AttentionMergeDimKernel<256, 64>),
                 grid, 256, 0, s)(descs, rows, splits, partial);
  } else if (head_dim > 32 * kLanesNarrow) {
    LaunchKernel(AttentionMergeKernel<kLanesWide>, grid, kMergeWarps * 32, 0, s)(descs, rows, splits, partial);
  } else {
    LaunchKernel(AttentionMergeKernel<kLanesNarrow>, grid, kMergeWarps * 32, 0, s)(descs, rows, splits, partial);
  }
}

template <typename T>
__global__ void KvWriteRowsKernel(const float* k, const float* v, int64_t kv_stride, int64_t kv_dim,
                                  const int64_t* src_dst, int64_t n, T* kc, T* vc) {
  GridDependencyWait();
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n * kv_dim) return;
  const int64_t r = i / kv_dim, d = i % kv_dim, src = src_dst[2 * r], dst = src_dst[2 * r + 1];
  KvStoreAt(kc + dst * kv_dim, d, k[src * kv_stride + d]);
  KvStoreAt(vc + dst * kv_dim, d, v[src * kv_stride + d]);
}

void KvWriteRows(const float* k, const float* v, int64_t kv_stride, int64_t kv_dim, const int64_t* src_dst,
                 int64_t n, KvLayout layout, void* k_cache, void* v_cache, cudaStream_t s) {
  if (n * kv_dim <= 0) return;
  const auto blocks = static_cast<unsigned>((n * kv_dim + 255) / 256);
  WithKvType(layout, [&](auto tag) {
    using E = decltype(tag);
    LaunchKernel(KvWriteRowsKernel<E>, blocks, 256, 0, s)(k, v, kv_stride, kv_dim, src_dst, n, static_cast<E*>(k_cache),
                                                          static_cast<E*>(v_cache));
  });
}

// Block per staged row: its k / v in the cache's layout into k_new / v_new (rows [commit_len, T) of a
// bf16 or split call).
template <typename T>
__global__ void KvStageKernel(const AttentionParams* descs, const int2* rows) {
  GridDependencyWait();
  const int2 rr = rows[blockIdx.x];
  const AttentionParams& p = descs[rr.x];
  const int64_t t = rr.y, kv_dim = p.num_kv_heads * p.head_dim;
  const float* k = p.k + t * p.kv_stride;
  const float* v = p.v + t * p.kv_stride;
  T* kn = static_cast<T*>(p.k_new) + (t - p.commit_len) * kv_dim;
  T* vn = static_cast<T*>(p.v_new) + (t - p.commit_len) * kv_dim;
  for (int64_t d = threadIdx.x; d < kv_dim; d += blockDim.x) KvStoreAt(kn, d, k[d]), KvStoreAt(vn, d, v[d]);
}

void KvStage(const AttentionParams* descs, const int2* rows, int64_t n, int64_t kv_dim, KvLayout layout,
             cudaStream_t s) {
  const auto threads = static_cast<unsigned>(kv_dim < 512 ? (kv_dim + 31) / 32 * 32 : 512);
  if (n <= 0 || kv_dim <= 0) return;
  WithKvType(layout, [&](auto tag) {
    LaunchKernel(KvStageKernel<decltype(tag)>, static_cast<unsigned>(n), threads, 0, s)(descs, rows);
  });
}

void CausalConv1dSilu(const float* x, int64_t T, int64_t x_stride, int64_t channels, const float* w, int64_t K,
                      const float* state, float* y, cudaStream_t s) {
  const int64_t n = T * channels;
  if (n > 0)
    LaunchKernel(ConvSiluKernel, static_cast<unsigned>((n + 255) / 256), 256, 0, s)(x, T, x_stride, channels, w, K,
                                                                                    state, y);
}

void CausalConv1dUpdateState(const float* x, int64_t T, int64_t x_stride, int64_t channels, int64_t K,
                             float* state, cudaStream_t s) {
  if (channels > 0 && K > 1)
    LaunchKernel(ConvUpdateKernel, static_cast<unsigned>((channels + 255) / 256), 256, 0, s)(x, T, x_stride, channels,
                                                                                             K, state);
}

void GdnNormalizeQk(const float* q, const float* k, int64_t stride, int64_t T, int64_t key_heads, int64_t dk,
                    float* qn, float* kn, cudaStream_t s) {
  const int64_t warps = T * key_heads;
  if (warps > 0)
    LaunchKernel(NormalizeQkKernel, static_cast<unsigned>((warps + 7) / 8), 256, 0, s)(q, k, stride, T, key_heads, dk,
                                                                                       qn, kn);
}

void GatedDeltaRecurrent(const float* qn, const float* kn, int64_t key_heads, const float* v, int64_t v_stride,
                         const float* g, const float* beta, int64_t T, int64_t value_heads, int64_t dk,
                         int64_t dv, float* state, float* out, cudaStream_t s) {
  if (T <= 0) return;
  if (UseGdnColumnKernel(dk)) {
    const dim3 grid(static_cast<unsigned>(value_heads),
                    static_cast<unsigned>((dv + kGdnColColumns - 1) / kGdnColColumns));
    LaunchKernel(GdnColumnKernel, grid, kGdnColThreads, 0, s)(qn, kn, key_heads, v, v_stride, g, beta, T, value_heads,
                                                              dk, dv, state, out);
    return;
  }
  const dim3 grid(static_cast<unsigned>(value_heads), static_cast<unsigned>((dv + kGdnCols - 1) / kGdnCols));
  LaunchKernel(GdnRecurrentKernel, grid, kGdnWarps * 32, 0, s)(qn, kn, key_heads, v, v_stride, g, beta, T, value_heads,
                                                               dk, dv, state, out);
}

void CausalConv1dSiluBatch(const float* x, int64_t R, int64_t x_stride, int64_t channels, const float* w, int64_t K,
                           const int2* rows, const ConvSegmentParams* segs, float* y, cudaStream_t s) {
  const int64_t n = R * channels;
  if (n > 0)
    LaunchKernel(ConvSiluBatchKernel, static_cast<unsigned>((n + 255) / 256), 256, 0, s)(x, R, x_stride, channels, w, K,
                                                                                         rows, segs, y);
}

void CausalConv1dSiluUpdateRows(const float* x, int64_t x_stride, int64_t channels, const float* w, int64_t K,
                                const ConvSegmentParams* segs, int64_t n, float* y, cudaStream_t s) {
  if (channels > 0 && n > 0)
    LaunchKernel(ConvSiluUpdateRowsKernel,
                 dim3(static_cast<unsigned>((channels + 255) / 256), static_cast<unsigned>(n)), 256, 0, s)(
        x, x_stride, static_cast<int>(channels), w, static_cast<int>(K), segs, y);
}

void CausalConv1dUpdateStateBatch(const float* x, int64_t x_stride, int64_t channels, int64_t K,
                                  const ConvSegmentParams* segs, int64_t n, cudaStream_t s) {
  if (channels > 0 && K > 1 && n > 0)
    LaunchKernel(ConvUpdateBatchKernel, dim3(static_cast<unsigned>((channels + 255) / 256), static_cast<unsigned>(n)),
                 256, 0, s)(x, x_stride, channels, K, segs);
}

void GatedDeltaRuleBatch(const GdnRunParams* runs, int64_t n, const int2* rows, int64_t R, int64_t key_heads,
                         int64_t value_heads, int64_t dk, int64_t dv, float* qn, float* kn, cudaStream_t s) {
  if (n <= 0 || R <= 0) return;
  const int64_t warps = R * key_heads;
  LaunchKernel(NormalizeQkBatchKernel, static_cast<unsigned>((warps + 7) / 8), 256, 0, s)(runs, rows, R, key_heads, dk,
                                                                                          qn, kn);
  if (UseGdnColumnKernel(dk)) {
    const dim3 grid(static_cast<unsigned>(value_heads),
                    static_cast<unsigned>((dv + kGdnColColumns - 1) / kGdnColColumns), static_cast<unsigned>(n));
    LaunchKernel(GdnColumnBatchKernel, grid, kGdnColThreads, 0, s)(runs, qn, kn, key_heads, value_heads, dk, dv);
    return;
  }
  const dim3 grid(static_cast<unsigned>(value_heads), static_cast<unsigned>((dv + kGdnCols - 1) / kGdnCols),
                  static_cast<unsigned>(n));
  LaunchKernel(GdnRecurrentBatchKernel, grid, kGdnWarps * 32, 0, s)(runs, qn, kn, key_heads, value_heads, dk, dv);
}

bool QkNormRope(float* q, int64_t q_stride, int64_t q_heads, float* k, int64_t k_stride, int64_t k_heads,
                int64_t rows, int64_t head_dim, const float* q_norm, const float* k_norm, float eps, bool one_plus,
                int64_t rotary_dim, const int64_t* positions, const float* inv_freq, const float* v,
                const int64_t* row_dst, KvLayout layout, void* k_cache, void* v_cache, cudaStream_t s) {
  if (!QkNormRopeFits(q, q_stride, k, k_stride, head_dim, q_norm, k_norm, rotary_dim)) return false;
  const int64_t items = rows * (q_heads + k_heads);
  if (items == 0) return true;
  const unsigned blocks = static_cast<unsigned>((items + kQkWarps - 1) / kQkWarps);
  const bool wide = head_dim == 256;
  // Without a cache the element type does not matter (nothing is stored): f32's instantiation.
  WithKvType(k_cache != nullptr ? layout : KvLayout::kF32, [&](auto tag) {
    using E = decltype(tag);
    const auto kernel = wide ? QkNormRopeKernel<2, E> : QkNormRopeKernel<1, E>;
    LaunchKernel(kernel, blocks, kQkWarps * 32, 0, s)(q, q_stride, static_cast<int>(q_heads), k, k_stride,
                                                      static_cast<int>(k_heads), rows, q_norm, k_norm, eps, one_plus,
                                                      static_cast<int>(rotary_dim), positions, inv_freq, v, row_dst,
                                                      static_cast<E*>(k_cache), static_cast<E*>(v_cache));
  });
  return true;
}

}  // namespace tessera::cuda
