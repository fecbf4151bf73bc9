// tessera cuda backend: grouped-query attention for decode and diffusion blocks. One block per
// (query row, KV head[, key split]) serves all G query heads that share the KV head, so each key and
// value row is read once per group instead of G times (GQA models re-read K/V 8x per head
// otherwise, which bounds batched decode by L2 bandwidth). Warps take 32-key tiles: lane j scores
// key j against the G queries (shared memory) with vector loads of its key row, the warp updates
// each head's online softmax, then every lane accumulates its dims of all G heads over the tile's
// value rows (coalesced). The warps' states are merged at the end; with splits > 1 the block writes
// the same (max, sum, unnormalised output) partials as AttentionKernel for the merge kernel.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/cuda_device_util.cuh"
#include "backend/cuda/cuda_kernels.h"

namespace tessera::cuda {

namespace {

constexpr int kWarps = 4;


// G query heads per KV head, DL = head_dim / 32 dims per lane.
template <int G, int DL>
__global__ void __launch_bounds__(kWarps * 32) GqaKernel(const AttentionParams* descs, const int2* rows, int splits,
                                                         int64_t key_chunk, float* partial) {
  constexpr int D = DL * 32;
  const int2 rr = rows[blockIdx.x];
  const AttentionParams& p = descs[rr.x];
  const int64_t t = rr.y, kvh = blockIdx.y, z = blockIdx.z;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t pos = p.first_pos + t, total = p.first_pos + p.T;
  int64_t last = pos;
  if (p.block_size > 0) last = min(total - 1, (pos / p.block_size + 1) * p.block_size - 1);
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
        for (int g = 0; g < G; ++g) s[g] += qs[g][c] * kv.x + qs[g][c + 1] * kv.y + qs[g][c + 2] * kv.z + qs[g][c + 3] * kv.w;
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

template <int G, int DL>
void Launch(const AttentionParams* descs, const int2* rows, int64_t R, int64_t kv_heads, int splits,
            int64_t key_chunk, float* partial, cudaStream_t s) {
  const dim3 grid(static_cast<unsigned>(R), static_cast<unsigned>(kv_heads), static_cast<unsigned>(splits));
  GqaKernel<G, DL><<<grid, kWarps * 32, 0, s>>>(descs, rows, splits, key_chunk, partial);
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
  if (head_dim == 128 && G == 4) Launch<4, 4>(descs, rows, R, kv_heads, splits, chunk, partial, s);
  if (head_dim == 128 && G == 8) Launch<8, 4>(descs, rows, R, kv_heads, splits, chunk, partial, s);
  if (head_dim == 256 && G == 4) Launch<4, 8>(descs, rows, R, kv_heads, splits, chunk, partial, s);
  if (head_dim == 256 && G == 8) Launch<8, 8>(descs, rows, R, kv_heads, splits, chunk, partial, s);
}

}  // namespace tessera::cuda
