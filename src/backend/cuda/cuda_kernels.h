// tessera cuda backend: launchers of the CUDA kernels (cuda_kernels.cu, cuda_sequence_kernels.cu,
// cuda_moe_fused.cu, cuda_moe_grouped.cu, cuda_gemma_kernels.cu).
// Plain C++ declarations so that the backend class (cuda_backend.cpp) is compiled by the host
// compiler; every pointer is device memory; every launch goes to `s` and is checked by the caller.
// bf16 data is passed as uint16_t bit patterns.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/cuda_kv_layout.h"
#include "backend/cuda/cuda_split_plan.h"

namespace tessera::cuda {

// --- Element-wise and row-wise ops (cuda_kernels.cu).
void Embedding(const void* table, bool bf16, const int32_t* ids, int64_t n, int64_t dim, float* out,
               cudaStream_t s);
void RmsNorm(const float* x, int64_t rows, int64_t dim, int64_t x_stride, const float* w, float eps,
             bool one_plus, float* y, int64_t y_stride, cudaStream_t s);
void GatedRmsNorm(const float* x, const float* z, int64_t rows, int64_t dim, const float* w, float eps,
                  float* y, cudaStream_t s);
// inv_freq: [rotary_dim / 2] (computed on the host exactly as the CPU backend does).
void Rope(float* x, int64_t rows, int64_t row_stride, int64_t heads, int64_t head_dim, int64_t rotary_dim,
          const int64_t* positions, const float* inv_freq, cudaStream_t s);
void SigmoidGate(float* x, int64_t rows, int64_t dim, int64_t x_stride, const float* gate,
                 int64_t gate_stride, cudaStream_t s);
void SigmoidScaleRows(float* x, int64_t rows, int64_t dim, const float* sc, cudaStream_t s);
// x[r, :] /= d[r] (d: device, [rows]).
void DivideRows(float* x, int64_t rows, int64_t dim, const float* d, cudaStream_t s);
void SiluMul(const float* gate, const float* up, int64_t n, float* out, cudaStream_t s);
void SiluMulScaleRows(const float* gate, const float* up, int64_t rows, int64_t dim, const float* sc, float* out,
                      cudaStream_t s);
void Add(const float* x, int64_t n, float* y, cudaStream_t s);
// h += delta, then y = RmsNorm(h) (rows of dim, contiguous): one kernel where the row fits the
// row-in-registers RmsNorm (dim % 4 == 0, <= 8192, 16-byte aligned), else Add then RmsNorm.
void AddRmsNorm(const float* delta, float* h, int64_t rows, int64_t dim, const float* w, float eps, bool one_plus,
                float* y, cudaStream_t s);
// T rows of k / v (f32) into the paged cache at positions first_pos.. in its layout (cuda_kv_layout.h;
// bf16 and split parts rounded to nearest even).
void KvWrite(const float* k, const float* v, int64_t kv_stride, int64_t T, int64_t kv_dim, int64_t first_pos,
             const int32_t* pages, int64_t page_size, KvLayout layout, void* k_cache, void* v_cache, cudaStream_t s);
void F32ToBf16(const float* x, int64_t n, uint16_t* out, cudaStream_t s);
// x = hi + lo with hi = bf16(x), lo = bf16(x - hi): two bf16 GEMMs then carry ~16 mantissa bits.
void F32ToBf16Split(const float* x, int64_t n, uint16_t* hi, uint16_t* lo, cudaStream_t s);
void FillRandom(void* dst, bool bf16, int64_t n, float scale, float offset, uint64_t seed, cudaStream_t s);
void GdnGates(const float* a, const float* b, int64_t T, int64_t heads, int64_t a_stride, int64_t b_stride,
              const float* a_log, const float* dt_bias, float* g, float* beta, int64_t out_stride, cudaStream_t s);
void Softmax(float* x, int64_t rows, int64_t n, cudaStream_t s);
void Argmax(const float* x, int64_t rows, int64_t n, int32_t* out, cudaStream_t s);

// --- The Gemma family's element-wise ops (cuda_gemma_kernels.cu), each the CPU backend's arithmetic.
// out = gelu_tanh(gate) * up; x *= scale; x = cap * tanh(x / cap); x[i] *= table[idx[i]].
void GeluTanhMul(const float* gate, const float* up, int64_t n, float* out, cudaStream_t s);
void Scale(float* x, int64_t n, float scale, cudaStream_t s);
void SoftCap(float* x, int64_t n, float cap, cudaStream_t s);
void ScaleByIndex(float* x, const int32_t* idx, int64_t n, const float* table, cudaStream_t s);
// Backend::RopePairs: dims (i, i + pair_offset) of each head turn by positions[r] * inv_freq[i] for i <
// rotated_pairs (inv_freq and positions: device).
void RopePairs(float* x, int64_t rows, int64_t row_stride, int64_t heads, int64_t head_dim, int64_t pair_offset,
               int64_t rotated_pairs, const float* inv_freq, const int64_t* positions, cudaStream_t s);

// Whether a pointer is 16-byte aligned (the vector loads of most kernels need it).
inline bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// y[m, n] (+)= x[m, k] * w[n, k]^T for few rows (m <= kGemvMaxRows), bf16 w, f32 accumulation
// (cuda_gemv.cu).
constexpr int64_t kGemvMaxRows = 8;
void GemvBf16(const float* x, int64_t m, int64_t k, const uint16_t* w, int64_t n, float* y, bool accumulate,
              cudaStream_t s);
// y_j = x w_j^T for up to kGemvMaxJobs weights of the same k (null w_j: unused), in one launch when
// the tiled kernel takes them (each job summed as GemvBf16 would), else one GemvBf16 each.
constexpr int kGemvMaxJobs = 4;
void GemvBf16Multi(const float* x, int64_t m, int64_t k, const uint16_t* w0, int64_t n0, float* y0,
                   const uint16_t* w1, int64_t n1, float* y1, const uint16_t* w2, int64_t n2, float* y2,
                   const uint16_t* w3, int64_t n3, float* y3, cudaStream_t s);

// y[m, n] (+)= x[m, k] * w[n, k]^T for kGemvMaxRows < m <= the backend's row limit on tensor cores
// (cuda_skinny_gemm.cu: bf16 MMA, x split hi + lo, cp.async stages, up to 32 rows; Hopper's wgmma
// in cuda_skinny_wgmma.cu from 33 rows in sm_90a builds; tiles of 32 or 64 rows, each
// weight read once from memory per product (row tiles of one column tile run together and share it
// through L2); narrow outputs split k over a thread-block cluster summed through distributed shared
// memory). Beyond the limit, cuBLASLt's hi + lo GEMMs (larger tiles, but every weight read twice).
// SkinnyGemm returns false (nothing queued) when the shape or alignment (16 bytes for x and w) does not
// fit.
constexpr int64_t kSkinnyGemmMaxRows = 64;        // one row tile: the "few-row" products
constexpr int64_t kSkinnyGemmDefaultRows = 256;   // default row limit (TESSERA_CUDA_SKINNY_MAX_ROWS)
constexpr int64_t kSkinnyGemmTiledMaxWork = int64_t{1} << 31;  // past one row tile: m n k a weight (_MAX_WORK)
constexpr int64_t kSkinnyGemmRowLimit = 1 << 16;               // what the v2 / v3 launchers take at most
// Whether SkinnyGemm takes the product (shape, and x and w 16-byte aligned): the host decides before
// queueing, so a recorded step (cuda_step_graph.h) never depends on the launcher's answer.
inline bool SkinnyGemmFits(const float* x, int64_t m, int64_t k, const uint16_t* w) {
  return m > 0 && m <= kSkinnyGemmRowLimit && k % 32 == 0 && Aligned16(x) && Aligned16(w);
}
// x_split: scratch of SkinnySplitBytes(m, k, the outputs' widths) bytes where the wgmma kernel puts x
// split into bf16 hi + lo before multiplying, for launches of many column tiles (0: none needed, null
// may be passed; null where one is needed: the launch splits x in its blocks instead). exact: both
// parts multiplied (f32 activations); else hi alone (x rounded to bf16, one MMA: the bf16 precision).
int64_t SkinnySplitBytes(int64_t m, int64_t k, const int64_t* n, int count);
bool SkinnyGemm(const float* x, int64_t m, int64_t k, const uint16_t* w, int64_t n, float* y, bool accumulate,
                uint16_t* x_split, bool exact, cudaStream_t s);
// y_j = x w_j^T for up to kSkinnyMaxJobs weights of the same k (null w_j: unused) in one launch of
// the v2 / v3 kernels: the column tiles of all jobs share one grid and one k split. False (nothing
// queued) when a weight does not fit (SkinnyGemmFits).
constexpr int kSkinnyMaxJobs = 4;
bool SkinnyGemmMulti(const float* x, int64_t m, int64_t k, const uint16_t* w0, int64_t n0, float* y0,
                     const uint16_t* w1, int64_t n1, float* y1, const uint16_t* w2, int64_t n2, float* y2,
                     const uint16_t* w3, int64_t n3, float* y3, uint16_t* x_split, bool exact, cudaStream_t s);

// --- MoE: routing (cuda_kernels.cu), the fused few-token path (cuda_moe_fused.cu).
// counts[e] += how many of idx[0..n) equal e (integer atomics: the totals do not depend on order).
void CountIds(const int32_t* idx, int64_t n, int64_t num_experts, int32_t* counts, cudaStream_t s);
void MoeRoute(const float* logits, int64_t rows, int64_t num_experts, int64_t k, bool renormalize,
              int32_t* idx, float* weights, cudaStream_t s);
// Few-token path: per (row, slot) pair, act[slot] = silu(x gate_e^T) * (x up_e^T) (gelu: gelu-tanh
// in silu's place, Gemma's experts; the same for every gate/up launcher below), then
// slot_out[slot] = weight * act down_e^T, then out[row] = sum of its slots in slot order.
// ptrs: device array [3 * num_experts] of gate, up, down bf16 pointers (ptrs_aligned: all 16-byte
// aligned, for vector loads).
void MoeGateUp(const float* x, int64_t hidden, const int32_t* idx, int64_t slots, int64_t k,
               const uint16_t* const* ptrs, int64_t num_experts, int64_t inter, bool ptrs_aligned, float* act,
               bool gelu, cudaStream_t s);
// MoeRoute and MoeGateUp in one launch for rows * k pairs (the few-token path): every warp routes its
// pair's row from the logits as MoeRoute's kernel does and the row's first writes idx and weights.
// Only for shapes MoeGateUpRoutedFits accepts (the tiled gate/up kernel's, num_experts <= 512).
bool MoeGateUpRoutedFits(const float* x, int64_t hidden, int64_t rows, int64_t k, int64_t num_experts, int64_t inter,
                         bool ptrs_aligned);
void MoeGateUpRouted(const float* x, int64_t hidden, const float* logits, int64_t rows, int64_t k, bool renormalize,
                     int32_t* idx, float* weights, const uint16_t* const* ptrs, int64_t num_experts, int64_t inter,
                     float* act, cudaStream_t s);
void MoeDown(const float* act, int64_t inter, const int32_t* idx, const float* weights, int64_t slots,
             const uint16_t* const* ptrs, int64_t num_experts, int64_t hidden, bool ptrs_aligned, float* slot_out,
             cudaStream_t s);
void MoeSumSlots(const float* slot_out, int64_t rows, int64_t k, int64_t hidden, float* out, cudaStream_t s);
// The end of a MoE block fused with the residual add and the norm after it (Backend::ResidualNorm):
// out = sum of the k slots in slot order (+ extra), h += out, y = RmsNorm(h), in one row-in-registers
// kernel where AddRmsNorm would take one; else MoeSumSlots into scratch ([rows, dim]), Add,
// AddRmsNorm. Same results either way.
void MoeSumSlotsAddRmsNorm(const float* slot_out, int64_t rows, int64_t k, int64_t dim, const float* extra, float* h,
                           const float* w, float eps, bool one_plus, float* y, float* scratch, cudaStream_t s);
// Grouped path helpers: dst[i] = src[rows[i] ] (rows of `cols`); dst[rows[i]] = src[i] * scale[rows[i]].
void GatherRows(const float* src, int64_t cols, const int32_t* rows, int64_t n, int64_t row_div, float* dst,
                cudaStream_t s);
void ScatterScaledRows(const float* src, int64_t cols, const int32_t* rows, int64_t n, const float* scale,
                       float* dst, cudaStream_t s);

// --- Device-grouped MoE path (cuda_moe_grouped.cu): batched decode, diffusion blocks, prompt chunks.
// Pairs of one expert are cut into units of at most MoeUnitRows rows; each unit streams its
// expert's weights once for all its rows. tensor_cores: bf16 MMA (needs hidden and inter % 32 == 0):
// 16-row units on the pipelined kernels, or for prompt chunks (more than 1,024 such units) 64-row
// units on the tiled kernels (cuda_moe_tiled.cu); else CUDA cores (8-row units; needs % 8). All need
// 16-byte aligned weights and activations.
constexpr int kMoeUnitRows = 8;            // CUDA-core kernels
constexpr int kMoePipelinedUnitRows = 16;  // tensor cores, decode batches and diffusion blocks
constexpr int kMoeTiledUnitRows = 64;      // tensor cores, prompt chunks
int MoeUnitRows(bool tensor_cores, int64_t slots, int64_t num_experts);
// Upper bound on the number of units for `slots` pairs over `num_experts` experts (the grid size).
int64_t MoeMaxUnits(int64_t slots, int64_t num_experts, int rows_per_unit);
// Groups the pairs by expert on the device: order[slots] (pair ids sorted by expert; order within an
// expert unspecified), units[MoeMaxUnits] as (expert, first sorted position, rows, 0), num_units[1].
void MoeGroupByExpert(const int32_t* idx, int64_t slots, int64_t num_experts, int rows_per_unit, int32_t* order,
                      int4* units, int32_t* num_units, cudaStream_t s);
// act[pos] = silu(x[order[pos] / k] gate_e^T) * (x[order[pos] / k] up_e^T), pos in sorted order, by
// the kernels of units of unit_rows (MoeUnitRows). exact (tensor cores): activations split hi + lo;
// else rounded to bf16 (cuda_mma_util.cuh).
void MoeGroupedGateUp(int unit_rows, const float* x, int64_t hidden, int64_t k, const int32_t* order,
                      const int4* units, const int32_t* num_units, int64_t max_units, const uint16_t* const* ptrs,
                      int64_t num_experts, int64_t inter, float* act, bool exact, bool gelu, cudaStream_t s);
// slot_out[order[pos]] = weights[order[pos]] * act[pos] down_e^T.
void MoeGroupedDown(int unit_rows, const float* act, int64_t inter, const int32_t* order, const int4* units,
                    const int32_t* num_units, int64_t max_units, const float* weights, const uint16_t* const* ptrs,
                    int64_t num_experts, int64_t hidden, float* slot_out, bool exact, cudaStream_t s);
// The tiled kernels (units of kMoeTiledUnitRows; the same contracts).
void MoeTiledGateUp(const float* x, int64_t hidden, int64_t k, const int32_t* order, const int4* units,
                    const int32_t* num_units, int64_t max_units, const uint16_t* const* ptrs, int64_t num_experts,
                    int64_t inter, float* act, bool exact, bool gelu, cudaStream_t s);
void MoeTiledDown(const float* act, int64_t inter, const int32_t* order, const int4* units, const int32_t* num_units,
                  int64_t max_units, const float* weights, const uint16_t* const* ptrs, int64_t num_experts,
                  int64_t hidden, float* slot_out, bool exact, cudaStream_t s);

// --- Per-sequence ops (cuda_sequence_kernels.cu).
// One sequence of an attention call. The cache's layout is the call's (cuda_kv_layout.h): plain f32
// kernels read keys j >= first_pos from k / v; bf16 and split kernels read keys up to first_pos +
// commit_len from the cache (the rows committed now were written before the call) and later ones from
// k_new / v_new (KvStage's copy of rows [commit_len, T) in the cache's layout), so every K/V row they
// read is in that layout.
struct AttentionParams {
  const float* q;
  int64_t q_stride;
  const float* k;
  const float* v;
  int64_t kv_stride;
  int64_t T, num_heads, num_kv_heads, head_dim, first_pos;
  const void* k_cache;  // [num_pages * page_size, num_kv_heads * head_dim] in the call's layout
  const void* v_cache;
  const int32_t* pages;  // device; bf16 / split caches: covering [0, first_pos + commit_len)
  int64_t page_size, block_size;
  float scale;
  float* out;
  int64_t out_stride;
  int64_t commit_len;  // rows [0, commit_len) are in the cache (bf16 / split calls read them there)
  void* k_new;         // bf16 / split calls: rows [commit_len, T) in the cache's layout, [T - commit_len, kv_dim]
  void* v_new;
  // AttentionArgs' sliding window (0: none) and canvas rows (-1: none): the per-head and flash kernels
  // read them (cuda_attention_mask.h); the decode kernel is not given such calls.
  int64_t sliding_window;
  int64_t canvas_begin;
};
// bf16 / split calls: rows [commit_len, T) of every sequence's k / v in the cache's layout into its k_new /
// v_new (one block a row; rows[n] = (sequence, row) lists only those rows).
void KvStage(const AttentionParams* descs, const int2* rows, int64_t n, int64_t kv_dim, KvLayout layout,
             cudaStream_t s);
// Attention of the rows of several sequences in one launch: descs (device) has one entry per
// sequence, rows[R] (device) = (sequence, row within it); every sequence has `heads` query heads.
// layout: the cache's (AttentionParams); any head_dim <= kAttentionMaxHeadDim; every mask of
// AttentionParams (sliding window and canvas rows included).
// splits > 1: block z of a row takes keys [z * key_chunk, (z + 1) * key_chunk) and writes its
// (max, sum, unnormalised output) into partial[R, heads, splits, head_dim + 2], then a merge kernel
// writes the rows' outputs.
constexpr int64_t kAttentionMaxHeadDim = 512;  // Gemma 4's global layers
void AttentionBatch(const AttentionParams* descs, const int2* rows, int64_t R, int64_t heads, int64_t head_dim,
                    KvLayout layout, int splits, int64_t key_chunk, float* partial, cudaStream_t s);
// Combines the partials of split keys into the rows' outputs (AttentionBatch does it itself).
// head_dim: every descriptor's (128 and 256 take a kernel with one round of loads; others, or 0,
// the general one).
void AttentionMerge(const AttentionParams* descs, const int2* rows, int64_t R, int64_t heads, int64_t head_dim,
                    int splits, const float* partial, cudaStream_t s);
// The tensor-core kernels' key-split plans (AttentionFlashSplitPlan, AttentionDecodeSplitPlan) are host
// code: cuda_split_plan.h.
// Flash-style attention on tensor cores (cuda_attention_flash.cu): one block per (tile of query rows
// of one sequence, KV head, key split) serving the tile's rows x the G query heads of the KV head, so
// K/V are read once per tile. tiles[num_tiles] (device) = (sequence, first row, index of that row in
// the call's rows[], rows in the tile <= AttentionFlashTileRows). few_rows picks the decode block shape
// (AttentionFlashTileRows(G, D, true) rows a tile), else the prompt / diffusion-block one. Every mask of
// AttentionParams (a row's keys are one range, cuda_attention_mask.h). Head_dim 512 takes
// AttentionFlashOutputParts blocks a tile and split, each with part of the output dims. Same partial
// layout as AttentionBatch: the caller merges splits > 1 with AttentionMerge. Needs 16-byte aligned
// K/V rows and a shape and cache layout AttentionFlashSupported accepts (2, 4, 8 or 16 query heads per
// KV head of 128, 256 or 512 dims; a bf16 or split cache: a plain f32 one goes to AttentionBatch); q /
// out any alignment. layout: the cache's (and k_new / v_new's; AttentionParams). exact: every f32
// operand split hi + lo (f32 activations); else Q, K, P and V rounded to bf16 (one MMA a product).
bool AttentionFlashSupported(int64_t heads, int64_t kv_heads, int64_t head_dim, KvLayout layout);
int64_t AttentionFlashTileRows(int64_t group, int64_t head_dim, bool few_rows);
int64_t AttentionFlashOutputParts(int64_t head_dim);
void AttentionFlash(const AttentionParams* descs, const int4* tiles, int64_t num_tiles, int64_t heads,
                    int64_t kv_heads, int64_t head_dim, bool few_rows, KvLayout layout, int splits, int64_t key_chunk,
                    float* partial, bool exact, cudaStream_t s);
// Attention of many-row tiles on Hopper's warpgroup MMA (cuda_attention_wgmma.cu, sm_90a builds): the
// flash kernel's contract (tiles, masks, splits, partials, alignment, exact) with tiles of
// AttentionWgmmaTileRows(G) rows, for head_dim 128 and 2, 4, 8 or 16 query heads a KV head on a bf16
// or split cache (AttentionWgmmaSupported; false in builds without sm_90a code).
bool AttentionWgmmaSupported(int64_t heads, int64_t kv_heads, int64_t head_dim, KvLayout layout);
int64_t AttentionWgmmaTileRows(int64_t group);
void AttentionWgmma(const AttentionParams* descs, const int4* tiles, int64_t num_tiles, int64_t heads,
                    int64_t kv_heads, KvLayout layout, int splits, int64_t key_chunk, float* partial, bool exact,
                    cudaStream_t s);
// Decode attention on tensor cores (cuda_attention_decode.cu): the flash kernel's tiles, block grid,
// masks and partial layout for calls whose tiles have at most AttentionDecodeTileRows(G) rows (1, or
// 2 at G = 4), with the keys as the MMA's M dimension so a row's G heads fill its N. Keys [0, last]
// only (no sliding window or canvas rows). Shapes: AttentionDecodeSupported (AttentionFlash's at 4,
// 8 or 16 heads a KV head of 128 or 256 dims); alignment as AttentionFlash; splits from
// AttentionDecodeSplitPlan.
bool AttentionDecodeSupported(int64_t heads, int64_t kv_heads, int64_t head_dim);
int64_t AttentionDecodeTileRows(int64_t group);
// Blocks of the decode kernel for this shape and cache layout resident at once on the current device.
int64_t AttentionDecodeResidentBlocks(int64_t heads, int64_t kv_heads, int64_t head_dim, KvLayout layout);
void AttentionDecode(const AttentionParams* descs, const int4* tiles, int64_t num_tiles, int64_t heads,
                     int64_t kv_heads, int64_t head_dim, KvLayout layout, int splits, int64_t key_chunk, float* partial,
                     cudaStream_t s);
// Per-head RmsNorm of q and k in place, then RoPE of both (the attention layer's q / k preparation)
// in one launch: head_dim 128 or 256, 16-byte aligned rows. False (nothing queued) otherwise; the
// host checks with QkNormRopeFits before recording.
inline bool QkNormRopeFits(const float* q, int64_t q_stride, const float* k, int64_t k_stride, int64_t head_dim,
                           const float* q_norm, const float* k_norm, int64_t rotary_dim) {
  return (head_dim == 128 || head_dim == 256) && rotary_dim <= head_dim && rotary_dim % 2 == 0 && q_stride % 4 == 0 &&
         k_stride % 4 == 0 && Aligned16(q) && Aligned16(k) && Aligned16(q_norm) && Aligned16(k_norm);
}
// With k_cache: the k heads (after norm and RoPE) and v's heads (row stride k_stride) of row r also go
// to cache row row_dst[r] of k_cache / v_cache in the cache's layout (rounded to nearest even), rows with
// row_dst[r] < 0 to none: KvWriteRows in the same launch.
bool QkNormRope(float* q, int64_t q_stride, int64_t q_heads, float* k, int64_t k_stride, int64_t k_heads,
                int64_t rows, int64_t head_dim, const float* q_norm, const float* k_norm, float eps, bool one_plus,
                int64_t rotary_dim, const int64_t* positions, const float* inv_freq, const float* v,
                const int64_t* row_dst, KvLayout layout, void* k_cache, void* v_cache, cudaStream_t s);
// k_cache[dst] = k[src], v_cache[dst] = v[src] for n pairs src_dst[2i], src_dst[2i + 1] (rows), in the
// cache's layout (rounded to nearest even).
void KvWriteRows(const float* k, const float* v, int64_t kv_stride, int64_t kv_dim, const int64_t* src_dst,
                 int64_t n, KvLayout layout, void* k_cache, void* v_cache, cudaStream_t s);
void CausalConv1dSilu(const float* x, int64_t T, int64_t x_stride, int64_t channels, const float* w, int64_t K,
                      const float* state, float* y, cudaStream_t s);
void CausalConv1dUpdateState(const float* x, int64_t T, int64_t x_stride, int64_t channels, int64_t K,
                             float* state, cudaStream_t s);
// q/k L2-normalised (q also scaled by 1/sqrt(dk)) into compact [T, key_heads, dk] buffers.
void GdnNormalizeQk(const float* q, const float* k, int64_t stride, int64_t T, int64_t key_heads, int64_t dk,
                    float* qn, float* kn, cudaStream_t s);
// Recurrent gated delta rule over T tokens (one token after the other) from and into `state`.
void GatedDeltaRecurrent(const float* qn, const float* kn, int64_t key_heads, const float* v, int64_t v_stride,
                         const float* g, const float* beta, int64_t T, int64_t value_heads, int64_t dk,
                         int64_t dv, float* state, float* out, cudaStream_t s);
// Batched Gated DeltaNet pieces (the sequences of a batch in one launch each). Rows are the batch's
// rows; rows[r] = (sequence or run, row within it).
struct ConvSegmentParams {
  int64_t row0, T;
  float* state;  // [channels, K - 1]
};
void CausalConv1dSiluBatch(const float* x, int64_t R, int64_t x_stride, int64_t channels, const float* w, int64_t K,
                           const int2* rows, const ConvSegmentParams* segs, float* y, cudaStream_t s);
// Both of the above for segments of one row each (decode): a thread per (segment, channel) reads the
// state and the row once, writes y and the shifted state. Same arithmetic as the two kernels. Needs
// K <= kConvMaxK and channels < 2^31.
constexpr int64_t kConvMaxK = 9;
void CausalConv1dSiluUpdateRows(const float* x, int64_t x_stride, int64_t channels, const float* w, int64_t K,
                                const ConvSegmentParams* segs, int64_t n, float* y, cudaStream_t s);
void CausalConv1dUpdateStateBatch(const float* x, int64_t x_stride, int64_t channels, int64_t K,
                                  const ConvSegmentParams* segs, int64_t n, cudaStream_t s);
struct GdnRunParams {
  const float* q;
  const float* k;
  int64_t qk_stride;
  const float* v;
  int64_t v_stride;
  const float* g;
  const float* beta;
  int64_t T;
  float* state;
  float* out;
  int64_t compact_row0;  // first row of this run in qn / kn
  int64_t chunk_rank;    // >= 0: the run takes the chunked form, the rank-th such run of the batch; -1: recurrent
};
// n independent runs (distinct states): q/k of all R rows normalised into qn / kn ([R, key_heads,
// dk], scratch), then one recurrent block per (value head, column tile, run) for the runs not chunked
// (the chunked ones: GatedDeltaChunkedPass, after this).
void GatedDeltaRuleBatch(const GdnRunParams* runs, int64_t n, const int2* rows, int64_t R, int64_t key_heads,
                         int64_t value_heads, int64_t dk, int64_t dv, float* qn, float* kn, cudaStream_t s);
// The chunked (WY / UT) form with its state pass on tensor cores, cuda_gdn_chunked.cu: for key_dim 128
// and value_dim a multiple of 32 up to 128 (GdnChunkedFits). A batch's chunked runs (chunk_rank 0, 1,
// ...) go in passes over records of at most kGdnChunkSlots chunks of every value head: groups of
// runs_per_group runs (by rank), chunks_per_run chunks of each a pass (GdnChunkPasses); pass (group,
// piece) covers chunks piece * chunks_per_run .. of the group's runs, and a group's passes go in
// piece order. qn / kn as GatedDeltaRuleBatch left them; records: GdnChunkRecordsBytes of scratch.
// 8: a pass's records (~38 MB for Qwen3.5-35B-A3B's 32 value heads) stay in L2 between prep and state.
constexpr int64_t kGdnChunkSlots = 8;
constexpr int64_t kGdnChunkTokens = 64;
// Runs of at least this many tokens take the chunked form under GdnMode::kAuto (CudaBench.GatedDeltaRuleForms
// on an H100: chunked 0.074 against 0.098 ms at 64 tokens, 0.060 against 0.043 at 32; docs/CUDA.md).
constexpr int64_t kGdnChunkedMinTokens = 64;
struct GdnChunkPassShape {
  int runs_per_group, chunks_per_run;
};
bool GdnChunkedFits(int64_t dk, int64_t dv);
GdnChunkPassShape GdnChunkPasses(int64_t chunked_runs);
int64_t GdnChunkRecordsBytes(int64_t chunked_runs, int64_t value_heads, int64_t dv);
void GatedDeltaChunkedPass(const GdnRunParams* runs, int64_t n, int group, int runs_per_group, int chunks_per_run,
                           int piece, const float* qn, const float* kn, int64_t key_heads, int64_t value_heads,
                           int64_t dv, void* records, cudaStream_t s);
// Largest key_dim GatedDeltaRecurrent supports.
constexpr int64_t kGdnMaxKeyDim = 256;

}  // namespace tessera::cuda
