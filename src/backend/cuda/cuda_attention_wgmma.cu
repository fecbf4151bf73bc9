// tessera cuda backend: attention of many-row tiles (prompts, diffusion blocks) on Hopper's warpgroup
// MMA (sm_90a builds), in the FlashAttention-3 manner: Q K^T with both operands in shared memory, P V
// with P from registers and V as stored (MN-major), an online softmax between them.
//
// Why: the mma.sync flash kernel (cuda_attention_flash.cu) has each warp read its K and V fragments
// from shared memory for its own 16 query vectors, so a prompt's attention is bound by shared-memory
// reads (a 4K prompt: ~1.65 ms a layer of Qwen3-30B-A3B on an H100, ~83 TFLOP/s of attention). A
// warpgroup MMA reads a B tile once for 64 query vectors.
//
// Block: two consumer warpgroups, 64 query vectors (row, head) each, one tile of 128 / G rows of one
// sequence times the G query heads of one KV head (the tiles, masks, key splits and partials of the
// flash kernel: AttentionParams, cuda_attention_mask.h). Keys come in tiles of 64, copied by every
// thread with cp.async into two stages (the next tile in flight while one is used), each stage in
// wgmma's 128-byte-swizzled layout: a plane (hi, or lo of a split cache) of 64 rows x 64 dims a box.
// Q (scaled by scale * log2 e) is split once into hi and lo planes in the same layout.
// Per tile and warpgroup: S[64 x 64] = Q K^T (m64n64k16, 8 k-steps; exact: hi*hi + hi*lo + lo*hi, a
// bf16 cache hi*K + lo*K; bf16 activations hi*hi alone), masked per element, the online softmax in f32
// on the accumulators, P split hi + lo into A fragments (the accumulator layout of S is the A
// register layout of the next wgmma), O[64 x 128] += P V (m64n128k16, 4 k-steps, B MN-major: V's
// rows are the k dimension).
//
// Shapes: head_dim 128, G = 2, 4, 8 or 16, a bf16 or split cache. head_dim 256 would need twice the
// stages (or a third of the keys a tile): not built.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/cuda_device_util.cuh"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuda_launch.cuh"
#include "backend/cuda/cuda_mma_util.cuh"
#include "backend/cuda/cuda_wgmma_util.cuh"

namespace tessera::cuda {

namespace {

constexpr int kHeadDim = 128;
constexpr int kGroups = 2;                // consumer warpgroups a block
constexpr int kVectors = 64 * kGroups;    // query vectors (row, head) a block
constexpr int kThreads = 128 * kGroups;
constexpr int kKeys = 64;                 // keys a tile
constexpr int kBoxBytes = kKeys * 128;    // 64 rows x 64 bf16 (128 bytes), one swizzle box
constexpr int kBoxes = kHeadDim / 64;     // boxes a plane
constexpr int kQBoxBytes = 64 * 128;      // a warpgroup's 64 vectors x 64 dims

template <typename T>
struct WgShape {
  static constexpr int kPlanes = kKvSplit<T> ? 2 : 1;                 // hi (+ lo) of the cache rows
  static constexpr int kPlaneBytes = kBoxes * kBoxBytes;
  static constexpr int kKBytes = kPlanes * kPlaneBytes;               // a tile's K rows (V the same)
  static constexpr int kStageBytes = 2 * kKBytes;
  static constexpr int kQPlaneBytes = kBoxes * kQBoxBytes;
  static constexpr int kQBytes = kGroups * 2 * kQPlaneBytes;          // hi and lo planes a warpgroup
  static constexpr int kSmem = 2 * kStageBytes + kQBytes + 1024;      // + the 1024-byte alignment
  static constexpr int kPieces = kHeadDim * int{sizeof(T)} / 16;      // 16-byte pieces of a row
  static constexpr int kRowThreads = kThreads / (2 * kKeys);          // threads copying one K or V row
  static_assert(kRowThreads * 2 * kKeys == kThreads && kPieces % kRowThreads == 0, "whole pieces a thread");
  static_assert(kSmem <= 227 * 1024, "shared memory of one block");
};

// Byte offset in a plane-major tile of piece c (16 bytes) of staged row r: the plane (a split row's
// pieces 16..31 are its lo half), its 64-dim box, the row's 128 bytes with the chunks swizzled.
template <typename T>
__device__ __forceinline__ int StagedPiece(int r, int c) {
  constexpr int kPlanePieces = kHeadDim * 2 / 16;  // bf16 pieces of one plane of a row
  const int plane = c / kPlanePieces, dc = c % kPlanePieces, box = dc / 8, col = dc % 8;
  return plane * WgShape<T>::kPlaneBytes + box * kBoxBytes + r * 128 + ((col ^ (r & 7)) << 4);
}

__device__ __forceinline__ uint32_t SmemAddr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// kExact: f32 activations (every operand hi + lo); else bf16 (hi alone). A template argument, not a
// branch: a branch between wgmmas makes ptxas serialize them (warpgroup.arrive at each).
template <typename T, int G, bool kExact>
__global__ void __launch_bounds__(kThreads, 1)
    WgmmaAttentionKernel(const AttentionParams* descs, const int4* tiles, int splits, int64_t key_chunk,
                         float* partial) {
  GridDependencyWait();
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using S = WgShape<T>;
  constexpr int D = kHeadDim, NK = kKeys;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t raw = SmemAddr(smem_raw);
  unsigned char* smem = smem_raw + ((1024 - (raw & 1023)) & 1023);  // swizzled boxes: 1024-aligned
  unsigned char* kv = smem;                        // [stage]: K planes, then V planes
  unsigned char* qs = smem + 2 * S::kStageBytes;   // [group][hi, lo]

  // tiles[x] = (sequence, first row t0, its index in the call's rows, rows in the tile).
  const int4 tile = tiles[blockIdx.x];
  const AttentionParams& p = descs[tile.x];
  const int64_t t0 = tile.y, r0 = tile.z, kvh = blockIdx.y, z = blockIdx.z;
  const int nr = tile.w;
  const int tid = threadIdx.x, wg = tid / 128, wt = tid % 128, lane = tid & 31;
  const int g = lane >> 2, q = lane & 3, wi = wt >> 5;
  // Keys [j_begin, j_end): the tile's rows' key ranges within split z's (as the flash kernel).
  const int64_t split_begin = splits == 1 ? 0 : z * key_chunk;
  const int64_t split_end = splits == 1 ? INT64_MAX : split_begin + key_chunk;
  const int64_t j_begin = max(AttentionKeys(p, t0).first, split_begin);
  const int64_t j_end = min(AttentionLastKey(p, t0 + nr - 1) + 1, split_end);
  const int ntiles = j_end > j_begin ? static_cast<int>((j_end - j_begin + NK - 1) / NK) : 0;

  // This thread's two accumulator rows (h = 0, 1): vector 64 wg + 16 wi + g + 8 h = (tile row, head).
  int rrow[2], head[2], row_begin[2], row_end[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int m = 64 * wg + 16 * wi + g + 8 * h;
    rrow[h] = m / G, head[h] = m % G;
    const KeyRange keys = AttentionKeys(p, t0 + (rrow[h] < nr ? rrow[h] : 0));
    row_begin[h] = static_cast<int>(max(int64_t{0}, keys.first - j_begin));
    row_end[h] = rrow[h] < nr ? static_cast<int>(max(int64_t{0}, min(keys.last + 1, j_end) - j_begin)) : 0;
  }

  // Copies: staged row rho (K rows of the tile's keys, then their V rows) by kRowThreads threads,
  // thread sub taking pieces sub, sub + kRowThreads, ... (neighbours read neighbouring pieces). Each
  // thread looks its row up (page table) a tile ahead. Keys past j_end: zero-filled, never read.
  const int rho = tid / S::kRowThreads, sub = tid % S::kRowThreads;
  const bool is_v = rho >= NK;
  const int srow = rho % NK;
  auto row_pointer = [&](int n) -> const unsigned char* {
    if (n >= ntiles) return nullptr;
    const int64_t j = j_begin + int64_t{n} * NK + srow;
    return j < j_end ? reinterpret_cast<const unsigned char*>(KvRow<T>(p, j, kvh, is_v)) : nullptr;
  };
  const void* const dummy = p.k;  // a valid address for the zero-filling copies (not read)
  auto issue = [&](int n, const unsigned char* row) {
    if (n < ntiles) {
      unsigned char* dst = kv + (n & 1) * S::kStageBytes + (is_v ? S::kKBytes : 0);
#pragma unroll
      for (int i = 0; i < S::kPieces / S::kRowThreads; ++i) {
        const int c = sub + S::kRowThreads * i;
        CpAsync16(dst + StagedPiece<T>(srow, c), row ? row + 16 * c : dummy, row != nullptr);
      }
    }
    CpAsyncCommit();  // an empty group past the last tile keeps the wait count uniform
  };
  issue(0, row_pointer(0));
  issue(1, row_pointer(1));

  // Q of this warpgroup's 64 vectors, hi and lo planes: two threads a vector, 8 pieces of 8 dims each.
  const float qscale = p.scale * kLog2e;
  unsigned char* qw = qs + wg * 2 * S::kQPlaneBytes;
  {
    const int v = wt / 2, m = 64 * wg + v, row = m / G, hd = m % G;
    const bool ok = row < nr;
    const float* qr = p.q + (t0 + (ok ? row : 0)) * p.q_stride + (kvh * G + hd) * D;
#pragma unroll
    for (int i = 0; i < kHeadDim / 16; ++i) {
      const int c = (wt % 2) + 2 * i;  // piece: dims 8c .. 8c + 7
      uint32_t hi[4], lo[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float x0 = ok ? qr[8 * c + 2 * e] * qscale : 0.0f, x1 = ok ? qr[8 * c + 2 * e + 1] * qscale : 0.0f;
        SplitPair(x0, x1, hi[e], lo[e]);
      }
      const int off = (c / 8) * kQBoxBytes + v * 128 + (((c % 8) ^ (v & 7)) << 4);
      *reinterpret_cast<uint4*>(qw + off) = make_uint4(hi[0], hi[1], hi[2], hi[3]);
      *reinterpret_cast<uint4*>(qw + S::kQPlaneBytes + off) = make_uint4(lo[0], lo[1], lo[2], lo[3]);
    }
  }
  const uint32_t q_addr = SmemAddr(qw), kv_addr = SmemAddr(kv);

  // Running state of the thread's two rows (max in base 2, this thread's part of the sum) and O:
  // acc[i] is row h = (i >> 1) & 1, dim 8 (i >> 2) + 2 q + (i & 1).
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};
  float acc[kWgmmaN128Accs];
#pragma unroll
  for (int i = 0; i < kWgmmaN128Accs; ++i) acc[i] = 0.0f;

  for (int n = 0; n < ntiles; ++n) {
    CpAsyncWait<1>();   // this thread's pieces of tile n have landed (n + 1 may be in flight)
    FenceProxyAsync();  // ... visible to wgmma's reads (the async proxy), as are Q's stores
    __syncthreads();    // ... and everyone's
    const unsigned char* next_row = row_pointer(n + 2);  // its page table load overlaps the compute
    const uint32_t k_addr = kv_addr + (n & 1) * S::kStageBytes, v_addr = k_addr + S::kKBytes;

    // S = Q K^T: accumulator i is row h = (i >> 1) & 1, key 8 (i >> 2) + 2 q + (i & 1) of the tile.
    float s[kWgmmaN64Accs];
#pragma unroll
    for (int i = 0; i < kWgmmaN64Accs; ++i) s[i] = 0.0f;
    WgmmaFence();
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
      const uint32_t koff = (ks / 4) * kBoxBytes + (ks % 4) * 32, qoff = (ks / 4) * kQBoxBytes + (ks % 4) * 32;
      const uint64_t qh = WgmmaDescriptor(q_addr + qoff), kh = WgmmaDescriptor(k_addr + koff);
      Wgmma64x64(s, qh, kh);
      if constexpr (kExact) {
        if constexpr (S::kPlanes == 2) Wgmma64x64(s, qh, WgmmaDescriptor(k_addr + S::kPlaneBytes + koff));
        Wgmma64x64(s, WgmmaDescriptor(q_addr + S::kQPlaneBytes + qoff), kh);
      }
    }
    WgmmaCommit();
    WgmmaWait<0>();

    // Mask, then the online softmax per row (a row's 64 keys are spread over the 4 lanes of a quad).
    const int key0 = n * NK;
    int from[2], lim[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      from[h] = max(0, min(NK, row_begin[h] - key0));
      lim[h] = max(0, min(NK, row_end[h] - key0));
    }
    float corr[2];
    TileSoftmax<kWgmmaN64Accs>(s, 0, q, from, lim, m_run, l_run, corr);
#pragma unroll
    for (int i = 0; i < kWgmmaN128Accs; ++i) acc[i] *= corr[(i >> 1) & 1];
    // P as A fragments of k-step kk (keys 16 kk .. + 15): accumulators 8 kk .. 8 kk + 7 in order.
    uint32_t ph[NK / 16][4], pl[NK / 16][4];
#pragma unroll
    for (int kk = 0; kk < NK / 16; ++kk)
#pragma unroll
      for (int r = 0; r < 4; ++r) SplitPair(s[8 * kk + 2 * r], s[8 * kk + 2 * r + 1], ph[kk][r], pl[kk][r]);

    // O += P V: B = V's 16 rows of the k-step, 128 dims (two 64-dim boxes kBoxBytes apart).
    WgmmaFence();
#pragma unroll
    for (int kk = 0; kk < NK / 16; ++kk) {
      const uint32_t voff = kk * 16 * 128;
      const uint64_t vh = WgmmaDescriptorMn(v_addr + voff, kBoxBytes);
      Wgmma64x128<true>(acc, ph[kk], vh);
      if constexpr (kExact) {
        if constexpr (S::kPlanes == 2)
          Wgmma64x128<true>(acc, ph[kk], WgmmaDescriptorMn(v_addr + S::kPlaneBytes + voff, kBoxBytes));
        Wgmma64x128<true>(acc, pl[kk], vh);
      }
    }
    WgmmaCommit();
    WgmmaWait<0>();
    __syncthreads();  // everyone is done with stage n % 2
    issue(n + 2, next_row);
  }

  // The rows' sums over their 4 lanes.
#pragma unroll
  for (int h = 0; h < 2; ++h) l_run[h] = QuadSum(l_run[h]);
  const int64_t heads = static_cast<int64_t>(gridDim.y) * G;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if (rrow[h] >= nr) continue;
    const int64_t hq = kvh * G + head[h];
    float* o;
    if (splits == 1) {
      o = p.out + (t0 + rrow[h]) * p.out_stride + hq * D + 2 * q;
    } else {
      // A split with no keys for this row writes sum 0: the merge gives it no weight.
      float* stats = partial + (((r0 + rrow[h]) * heads + hq) * splits + z) * (D + 2);
      if (q == 0) stats[0] = l_run[h] > 0 ? m_run[h] * kLn2 : -INFINITY, stats[1] = l_run[h];
      o = stats + 2 + 2 * q;
    }
    const float inv = splits == 1 ? 1.0f / l_run[h] : 1.0f;  // partials stay unnormalised
#pragma unroll
    for (int t = 0; t < D / 8; ++t) o[8 * t] = acc[4 * t + 2 * h] * inv, o[8 * t + 1] = acc[4 * t + 2 * h + 1] * inv;
  }
#else
  __trap();  // not built for sm_90a: AttentionWgmmaSupported is false and nothing launches this
#endif
}

template <typename T, int G>
void LaunchWgmma(const AttentionParams* descs, const int4* tiles, int64_t num_tiles, int64_t kv_heads, int splits,
                 int64_t key_chunk, float* partial, bool exact, cudaStream_t s) {
  auto* kernel = exact ? WgmmaAttentionKernel<T, G, true> : WgmmaAttentionKernel<T, G, false>;
  KernelResidency(kernel, WgShape<T>::kSmem, kThreads);  // the dynamic shared memory limit, once per device
  const dim3 grid(static_cast<unsigned>(num_tiles), static_cast<unsigned>(kv_heads), static_cast<unsigned>(splits));
  LaunchKernel(kernel, grid, kThreads, WgShape<T>::kSmem, s)(descs, tiles, splits, key_chunk, partial);
}

template <typename T>
void LaunchForGroup(int64_t group, const AttentionParams* descs, const int4* tiles, int64_t num_tiles,
                    int64_t kv_heads, int splits, int64_t key_chunk, float* partial, bool exact, cudaStream_t s) {
  auto* launch = group == 2 ? LaunchWgmma<T, 2> : group == 4 ? LaunchWgmma<T, 4> : group == 8 ? LaunchWgmma<T, 8>
                                                                                                : LaunchWgmma<T, 16>;
  launch(descs, tiles, num_tiles, kv_heads, splits, key_chunk, partial, exact, s);
}

}  // namespace

bool AttentionWgmmaSupported(int64_t heads, int64_t kv_heads, int64_t head_dim, KvLayout layout) {
#if defined(TESSERA_CUDA_SM90A)
  if (layout == KvLayout::kF32 || kv_heads <= 0 || heads % kv_heads != 0) return false;
  const int64_t G = heads / kv_heads;
  return head_dim == kHeadDim && (G == 2 || G == 4 || G == 8 || G == 16);
#else
  (void)heads, (void)kv_heads, (void)head_dim, (void)layout;
  return false;
#endif
}

int64_t AttentionWgmmaTileRows(int64_t group) { return kVectors / group; }

void AttentionWgmma(const AttentionParams* descs, const int4* tiles, int64_t num_tiles, int64_t heads,
                    int64_t kv_heads, KvLayout layout, int splits, int64_t key_chunk, float* partial, bool exact,
                    cudaStream_t s) {
  if (num_tiles <= 0) return;
  const int64_t G = heads / kv_heads, chunk = splits == 1 ? INT64_MAX : key_chunk;
  WithPackedKvType(layout, [&](auto tag) {
    LaunchForGroup<decltype(tag)>(G, descs, tiles, num_tiles, kv_heads, splits, chunk, partial, exact, s);
  });
}

}  // namespace tessera::cuda
