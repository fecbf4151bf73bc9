// tessera cuda backend: grouped-query attention for decode and diffusion blocks. One block per
// (query row, KV head[, key split]) serves all G query heads that share the KV head, so each key and
// value row is read once per group instead of G times (GQA models re-read K/V 8x per head
// otherwise, which bounds batched decode by L2 bandwidth). With splits > 1 the block writes the same
// (max, sum, unnormalised output) partials as AttentionKernel for the merge kernel.
//
// Default kernel (GqaTileKernel): 4 warps, each taking tiles of TK keys (8 at head_dim 128) of the
// block's chunk. A tile's K and V rows are all requested before any is used (K rows by groups of 8
// lanes, a 128-byte line per load; V rows by the whole warp, lanes over dims), so a warp keeps ~8 KiB
// in flight; the next tile's K loads go out as soon as the scores are computed, its V loads once the
// values are accumulated. The 8 lanes of a key reduce their partial dot products for the G heads
// with a reduce-scatter (7 shuffles for 8 heads) that leaves each lane one head's score, so the
// online softmax runs a head per lane; probabilities reach the value pass through shared memory.
// The warps' states are merged by a fixed tree. GqaSplitPlan picks splits so that every SM gets work.
//
// Which kernel (measured on the H200, docs/PERFORMANCE.md): head_dim 256 always takes the tile kernel
// (the first one spills there: Qwen3.5-35B-A3B decode b64 42.2 vs 51.6 ms, denoise 8x32 153 vs
// 203 ms); head_dim 128 takes it for calls of up to kTileMaxRows rows (decode of a few sequences,
// whose keys are split over many blocks: b1 4.75 vs 5.02 ms) and the first kernel (GqaKernel: 4
// warps, a lane per key over 32-key tiles, the values by lanes over dims) for more rows, where it
// was as fast or faster (b64 36.9 vs 36.5 ms, one 32-row diffusion block at 8K 37.2 vs 43.8 ms).
// TESSERA_CUDA_GQA=v1 selects the first kernel for every call (A/B comparisons).
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "backend/cuda/cuda_device_util.cuh"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuda_launch.cuh"
#include "backend/cuda/cuda_switches.h"

namespace tessera::cuda {

namespace {

constexpr int kWarps = 4;  // GqaKernel (v1)


// G query heads per KV head, DL = head_dim / 32 dims per lane.
template <int G, int DL>
__global__ void __launch_bounds__(kWarps * 32) GqaKernel(const AttentionParams* descs, const int2* rows, int splits,
                                                         int64_t key_chunk, float* partial) {
  GridDependencyWait();
  constexpr int D = DL * 32;
  const int2 rr = rows[blockIdx.x];
  const AttentionParams& p = descs[rr.x];
  const int64_t t = rr.y, kvh = blockIdx.y, z = blockIdx.z;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t last = AttentionLastKey(p, t);
  const int64_t j_begin = z * key_chunk, j_end = min(last + 1, j_begin + key_chunk);

  __shared__ float qs[G][D];
  __shared__ float ps[kWarps][G][32];
  __shared__ float sm_m[kWarps][G], sm_l[kWarps][G];
  __shared__ float sm_acc[kWarps][G][D];
  for (int i = tid; i < G * D; i += kWarps * 32)
    qs[i / D][i % D] = p.q[t * p.q_stride + (kvh * G + i / D) * D + i % D] * p.scale;
  __syncthreads();

  float acc[G][DL], m[G], l[G];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    m[g] = -INFINITY, l[g] = 0.0f;
#pragma unroll
    for (int i = 0; i < DL; ++i) acc[g][i] = 0.0f;
  }
  for (int64_t tile = j_begin + warp * 32; tile < j_end; tile += kWarps * 32) {
    const int64_t j = tile + lane;
    const bool valid = j < j_end;
    const float* kr = valid ? KvRow(p, j, kvh, false) : nullptr;
    const float* vr = valid ? KvRow(p, j, kvh, true) : nullptr;
    float s[G];
#pragma unroll
    for (int g = 0; g < G; ++g) s[g] = 0.0f;
    if (valid) {
#pragma unroll 4
      for (int c = 0; c < D; c += 4) {
        const float4 kv = *reinterpret_cast<const float4*>(kr + c);
#pragma unroll
        for (int g = 0; g < G; ++g)
          s[g] += qs[g][c] * kv.x + qs[g][c + 1] * kv.y + qs[g][c + 2] * kv.z + qs[g][c + 3] * kv.w;
      }
    }
    // Per head: the tile's max (lane 0's key is always valid), rescale, probabilities, sum.
#pragma unroll
    for (int g = 0; g < G; ++g) {
      const float sg = valid ? s[g] : -INFINITY;
      const float m_new = fmaxf(m[g], WarpMax(sg));
      const float corr = m[g] == -INFINITY ? 0.0f : expf(m[g] - m_new);
      const float pr = valid ? expf(sg - m_new) : 0.0f;
      l[g] = l[g] * corr + WarpSum(pr);
      m[g] = m_new;
#pragma unroll
      for (int i = 0; i < DL; ++i) acc[g][i] *= corr;
      ps[warp][g][lane] = pr;
    }
    __syncwarp();
    const int n = static_cast<int>(min(static_cast<int64_t>(32), j_end - tile));
    const unsigned long long vbits = reinterpret_cast<unsigned long long>(vr);
#pragma unroll 4
    for (int jj = 0; jj < n; ++jj) {
      const float* v = reinterpret_cast<const float*>(__shfl_sync(0xffffffffu, vbits, jj));
      float vv[DL];
#pragma unroll
      for (int i = 0; i < DL; ++i) vv[i] = v[lane + 32 * i];
#pragma unroll
      for (int g = 0; g < G; ++g) {
        const float pg = ps[warp][g][jj];
#pragma unroll
        for (int i = 0; i < DL; ++i) acc[g][i] += pg * vv[i];
      }
    }
    __syncwarp();
  }
  // Merge the warps (a warp without keys has sum 0 and no weight).
  if (lane == 0)
#pragma unroll
    for (int g = 0; g < G; ++g) sm_m[warp][g] = m[g], sm_l[warp][g] = l[g];
#pragma unroll
  for (int g = 0; g < G; ++g)
#pragma unroll
    for (int i = 0; i < DL; ++i) sm_acc[warp][g][lane + 32 * i] = acc[g][i];
  __syncthreads();
  const int64_t heads = static_cast<int64_t>(gridDim.y) * G;
  for (int idx = tid; idx < G * D; idx += kWarps * 32) {
    const int g = idx / D, d = idx % D;
    float gm = -INFINITY;
    for (int w = 0; w < kWarps; ++w)
      if (sm_l[w][g] > 0) gm = fmaxf(gm, sm_m[w][g]);
    float gl = 0, v = 0;
    for (int w = 0; w < kWarps; ++w) {
      if (sm_l[w][g] > 0) {
        const float f = expf(sm_m[w][g] - gm);
        gl += sm_l[w][g] * f;
        v += sm_acc[w][g][d] * f;
      }
    }
    if (splits == 1) {
      p.out[t * p.out_stride + (kvh * G + g) * D + d] = v / gl;
    } else {
      float* part = partial + ((static_cast<int64_t>(blockIdx.x) * heads + kvh * G + g) * splits + z) * (D + 2);
      if (d == 0) part[0] = gm, part[1] = gl;
      part[2 + d] = v;
    }
  }
}

// GqaTileKernel: 4 warps (a 32-key chunk is one tile per warp) at ~150 registers, 3 blocks per SM
// at head_dim 128.
constexpr int kTileWarps = 4;

// G query heads per KV head, NV = head_dim / 128 (float4 per lane of a V row). A tile is TK keys:
// NQ groups of 4 keys for the scores (lanes 8 kq .. 8 kq + 7 hold key kq of a group, lane sub
// loading dims 32 i + 4 sub .. + 3), the whole warp per key for the values (lane: dims 128 i + 4 lane).
template <int G, int NV>
__global__ void __launch_bounds__(kTileWarps * 32, NV == 1 ? 3 : 2)
    GqaTileKernel(const AttentionParams* descs, const int2* rows, int splits, int64_t key_chunk, float* partial) {
  GridDependencyWait();
  static_assert(G == 4 || G == 8, "one head per lane (or pair of lanes) of a key's 8 lanes");
  constexpr int D = NV * 128, KI = D / 32, NQ = 2 / NV, TK = 4 * NQ, LG = G == 8 ? 3 : 2;
  constexpr int kOwner = (8 >> LG) - 1;  // lanes with (sub & kOwner) == 0 own their head's state
  const int2 rr = rows[blockIdx.x];
  const AttentionParams& p = descs[rr.x];
  const int64_t t = rr.y, kvh = blockIdx.y, z = blockIdx.z;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int kq = lane >> 3, sub = lane & 7, hg = sub >> (3 - LG);
  const int64_t last = AttentionLastKey(p, t);
  // splits == 1 passes key_chunk = INT64_MAX with z = 0: j_begin + key_chunk does not overflow.
  const int64_t j_begin = z * key_chunk, j_end = min(last + 1, j_begin + key_chunk);

  __shared__ float4 qs[G][D / 4];
  __shared__ float4 ps[kTileWarps][TK][G / 4];  // a tile's probabilities, [key][head]
  __shared__ float cs[kTileWarps][G];           // the tile's rescale factor per head
  __shared__ float sm_m[kTileWarps][G], sm_l[kTileWarps][G];
  __shared__ float4 red[kTileWarps / 2][G][D / 4];

  float4 kv[NQ][KI], vv[TK][NV];
  const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  auto load_k = [&](int64_t tile) {
#pragma unroll
    for (int qd = 0; qd < NQ; ++qd) {
      const int64_t j = tile + qd * 4 + kq;
      const float* kr = j < j_end ? KvRow(p, j, kvh, false) + 4 * sub : nullptr;
#pragma unroll
      for (int i = 0; i < KI; ++i) kv[qd][i] = kr ? __ldg(reinterpret_cast<const float4*>(kr + 32 * i)) : zero;
    }
  };
  auto load_v = [&](int64_t tile) {
#pragma unroll
    for (int k = 0; k < TK; ++k) {
      const int64_t j = tile + k;
      const float* vr = j < j_end ? KvRow(p, j, kvh, true) + 4 * lane : nullptr;
#pragma unroll
      for (int i = 0; i < NV; ++i) vv[k][i] = vr ? __ldg(reinterpret_cast<const float4*>(vr + 128 * i)) : zero;
    }
  };
  // The first tile's loads go out before the query is staged, so both latencies overlap.
  int64_t tile = j_begin + warp * TK;
  if (tile < j_end) load_k(tile), load_v(tile);
  {
    const float* qr = p.q + t * p.q_stride + kvh * G * D;
    float* qf = reinterpret_cast<float*>(qs);
    for (int i = tid; i < G * D; i += kTileWarps * 32) qf[i] = qr[i] * p.scale;
  }
  __syncthreads();

  float m = -INFINITY, l = 0.0f;  // head hg's running max and sum (same in all lanes holding hg)
  float4 acc[G][NV];
#pragma unroll
  for (int g = 0; g < G; ++g)
#pragma unroll
    for (int i = 0; i < NV; ++i) acc[g][i] = zero;
  for (; tile < j_end;) {
    const int64_t next = tile + kTileWarps * TK;
    // This lane's part of the G scores of its NQ keys (q loads shared by the key groups).
    float s[NQ][G];
#pragma unroll
    for (int qd = 0; qd < NQ; ++qd)
#pragma unroll
      for (int g = 0; g < G; ++g) s[qd][g] = 0.0f;
#pragma unroll
    for (int g = 0; g < G; ++g)
#pragma unroll
      for (int i = 0; i < KI; ++i) {
        const float4 q = qs[g][i * 8 + sub];
#pragma unroll
        for (int qd = 0; qd < NQ; ++qd)
          s[qd][g] += q.x * kv[qd][i].x + q.y * kv[qd][i].y + q.z * kv[qd][i].z + q.w * kv[qd][i].w;
      }
    // K registers are free: the next tile's keys load while this one finishes.
    if (next < j_end) load_k(next);
    // Reduce-scatter over the key's 8 lanes: each step halves the heads a lane keeps (the upper half
    // where its mask bit is set) and adds the partner's half, so lane sub ends with head hg's full
    // score; with G = 4 the last step is a plain pair sum.
    float sc[NQ];
#pragma unroll
    for (int qd = 0; qd < NQ; ++qd) {
#pragma unroll
      for (int step = 0; step < 3; ++step) {
        const int mask = 4 >> step, half = G >> (step + 1);
        const bool up = (sub & mask) != 0;
        if (half >= 1) {
#pragma unroll
          for (int k = 0; k < half; ++k) {
            const float send = up ? s[qd][k] : s[qd][k + half], keep = up ? s[qd][k + half] : s[qd][k];
            s[qd][k] = keep + __shfl_xor_sync(0xffffffffu, send, mask);
          }
        } else {
          s[qd][0] += __shfl_xor_sync(0xffffffffu, s[qd][0], mask);
        }
      }
      sc[qd] = s[qd][0];
    }
    // Online softmax of head hg over the tile (key qd * 4 + kq; lane kq = 0 of group 0 is valid).
    float tmax = -INFINITY;
#pragma unroll
    for (int qd = 0; qd < NQ; ++qd)
      if (tile + qd * 4 + kq < j_end) tmax = fmaxf(tmax, sc[qd]);
    tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 8));
    tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 16));
    const float m_new = fmaxf(m, tmax);
    const float corr = m == -INFINITY ? 0.0f : expf(m - m_new);
    float pr[NQ], psum = 0.0f;
#pragma unroll
    for (int qd = 0; qd < NQ; ++qd) {
      pr[qd] = tile + qd * 4 + kq < j_end ? expf(sc[qd] - m_new) : 0.0f;
      psum += pr[qd];
    }
    psum += __shfl_xor_sync(0xffffffffu, psum, 8);  // butterflies: every lane gets the same sum
    psum += __shfl_xor_sync(0xffffffffu, psum, 16);
    l = l * corr + psum;
    m = m_new;
    if ((sub & kOwner) == 0) {
      float* pw = reinterpret_cast<float*>(ps[warp]);
#pragma unroll
      for (int qd = 0; qd < NQ; ++qd) pw[(qd * 4 + kq) * G + hg] = pr[qd];
      if (kq == 0) cs[warp][hg] = corr;
    }
    __syncwarp();
    // Values: rescale, then add the tile's keys in order (an invalid key has p = 0 and V = 0).
#pragma unroll
    for (int g = 0; g < G; ++g) {
      const float c = cs[warp][g];
#pragma unroll
      for (int i = 0; i < NV; ++i) acc[g][i].x *= c, acc[g][i].y *= c, acc[g][i].z *= c, acc[g][i].w *= c;
    }
#pragma unroll
    for (int k = 0; k < TK; ++k) {
#pragma unroll
      for (int g4 = 0; g4 < G / 4; ++g4) {
        const float4 pk = ps[warp][k][g4];
        const float pg[4] = {pk.x, pk.y, pk.z, pk.w};
#pragma unroll
        for (int e = 0; e < 4; ++e)
#pragma unroll
          for (int i = 0; i < NV; ++i) {
            float4& a = acc[g4 * 4 + e][i];
            const float4 v = vv[k][i];
            a.x += pg[e] * v.x, a.y += pg[e] * v.y, a.z += pg[e] * v.z, a.w += pg[e] * v.w;
          }
      }
    }
    __syncwarp();  // ps / cs are rewritten by the next tile
    if (next < j_end) load_v(next);
    tile = next;
  }

  // Merge the warps: common max per head, each warp scales its output, then a fixed tree sum into
  // warp 0 (a warp without keys has sum 0 and no weight).
  if (kq == 0 && (sub & kOwner) == 0) sm_m[warp][hg] = m, sm_l[warp][hg] = l;
  __syncthreads();
  float gm[G];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    gm[g] = -INFINITY;
    for (int w = 0; w < kTileWarps; ++w)
      if (sm_l[w][g] > 0) gm[g] = fmaxf(gm[g], sm_m[w][g]);
    const float f = sm_l[warp][g] > 0 ? expf(sm_m[warp][g] - gm[g]) : 0.0f;
#pragma unroll
    for (int i = 0; i < NV; ++i) acc[g][i].x *= f, acc[g][i].y *= f, acc[g][i].z *= f, acc[g][i].w *= f;
  }
#pragma unroll
  for (int half = kTileWarps / 2; half >= 1; half >>= 1) {
    if (warp >= half && warp < 2 * half)
#pragma unroll
      for (int g = 0; g < G; ++g)
#pragma unroll
        for (int i = 0; i < NV; ++i) red[warp - half][g][lane + 32 * i] = acc[g][i];
    __syncthreads();
    if (warp < half)
#pragma unroll
      for (int g = 0; g < G; ++g)
#pragma unroll
        for (int i = 0; i < NV; ++i) {
          const float4 r = red[warp][g][lane + 32 * i];
          acc[g][i].x += r.x, acc[g][i].y += r.y, acc[g][i].z += r.z, acc[g][i].w += r.w;
        }
    __syncthreads();
  }
  if (warp != 0) return;
  const int64_t heads = static_cast<int64_t>(gridDim.y) * G;
#pragma unroll
  for (int g = 0; g < G; ++g) {
    float gl = 0;
    for (int w = 0; w < kTileWarps; ++w)
      if (sm_l[w][g] > 0) gl += sm_l[w][g] * expf(sm_m[w][g] - gm[g]);
    if (splits == 1) {
      float* o = p.out + t * p.out_stride + (kvh * G + g) * D + 4 * lane;
#pragma unroll
      for (int i = 0; i < NV; ++i)
        o[128 * i] = acc[g][i].x / gl, o[128 * i + 1] = acc[g][i].y / gl, o[128 * i + 2] = acc[g][i].z / gl,
                o[128 * i + 3] = acc[g][i].w / gl;
    } else {
      // A split with no keys (past this row's last key) writes sum 0: the merge gives it no weight.
      float* part = partial + ((static_cast<int64_t>(blockIdx.x) * heads + kvh * G + g) * splits + z) * (D + 2);
      if (lane == 0) part[0] = gm[g], part[1] = gl;
      float* o = part + 2 + 4 * lane;
#pragma unroll
      for (int i = 0; i < NV; ++i)
        o[128 * i] = acc[g][i].x, o[128 * i + 1] = acc[g][i].y, o[128 * i + 2] = acc[g][i].z,
                o[128 * i + 3] = acc[g][i].w;
    }
  }
}

template <int G, int DL>
void Launch(const AttentionParams* descs, const int2* rows, int64_t R, int64_t kv_heads, int splits,
            int64_t key_chunk, float* partial, cudaStream_t s) {
  const dim3 grid(static_cast<unsigned>(R), static_cast<unsigned>(kv_heads), static_cast<unsigned>(splits));
  LaunchKernel(GqaKernel<G, DL>, grid, kWarps * 32, 0, s)(descs, rows, splits, key_chunk, partial);
}

template <int G, int NV>
void LaunchTile(const AttentionParams* descs, const int2* rows, int64_t R, int64_t kv_heads, int splits,
                int64_t key_chunk, float* partial, cudaStream_t s) {
  const dim3 grid(static_cast<unsigned>(R), static_cast<unsigned>(kv_heads), static_cast<unsigned>(splits));
  LaunchKernel(GqaTileKernel<G, NV>, grid, kTileWarps * 32, 0, s)(descs, rows, splits, key_chunk, partial);
}

constexpr int64_t kTileMaxRows = 4;

// The first kernel for head_dim 128 calls of many rows, or for all with TESSERA_CUDA_GQA=v1 (read
// once).
bool UseV1(int64_t rows, int64_t head_dim) {
  static const bool forced = SwitchValue("TESSERA_CUDA_GQA") == "v1";
  return forced || (head_dim == 128 && rows > kTileMaxRows);
}

}  // namespace

bool AttentionGqaSupported(int64_t heads, int64_t kv_heads, int64_t head_dim) {
  if (kv_heads <= 0 || heads % kv_heads != 0) return false;
  const int64_t G = heads / kv_heads;
  // Shapes with an instantiation (static shared memory stays under 48 KiB).
  return (head_dim == 128 || head_dim == 256) && (G == 4 || G == 8);
}

void AttentionGqa(const AttentionParams* descs, const int2* rows, int64_t R, int64_t heads, int64_t kv_heads,
                  int64_t head_dim, int splits, int64_t key_chunk, float* partial, cudaStream_t s) {
  if (R <= 0) return;
  const int64_t G = heads / kv_heads, chunk = splits == 1 ? INT64_MAX : key_chunk;
  if (UseV1(R, head_dim)) {
    if (head_dim == 128 && G == 4) Launch<4, 4>(descs, rows, R, kv_heads, splits, chunk, partial, s);
    if (head_dim == 128 && G == 8) Launch<8, 4>(descs, rows, R, kv_heads, splits, chunk, partial, s);
    if (head_dim == 256 && G == 4) Launch<4, 8>(descs, rows, R, kv_heads, splits, chunk, partial, s);
    if (head_dim == 256 && G == 8) Launch<8, 8>(descs, rows, R, kv_heads, splits, chunk, partial, s);
    return;
  }
  if (head_dim == 128 && G == 4) LaunchTile<4, 1>(descs, rows, R, kv_heads, splits, chunk, partial, s);
  if (head_dim == 128 && G == 8) LaunchTile<8, 1>(descs, rows, R, kv_heads, splits, chunk, partial, s);
  if (head_dim == 256 && G == 4) LaunchTile<4, 2>(descs, rows, R, kv_heads, splits, chunk, partial, s);
  if (head_dim == 256 && G == 8) LaunchTile<8, 2>(descs, rows, R, kv_heads, splits, chunk, partial, s);
}

}  // namespace tessera::cuda
