// tessera cuda backend: products with quantized weights (core/quant.h layout), launchers of
// cuda_quant.cu (staged few-row kernels, the f32-scratch GEMM pieces), cuda_quant_tiled.cu (few-row
// kernels with many loads in flight) and cuda_quant_mma.cu (tensor cores for many rows). Codes are
// dequantized in registers as they stream from memory, so every product reads the compressed bytes;
// shapes the tensor-core kernels do not take dequantize a weight into f32 scratch for cuBLASLt's f32
// GEMM. W8A8 schemes round the input rows to the weight's code type as the CPU backend does
// (backend/cpu/gemm_quant.cpp): the staged kernels in shared memory, the tensor-core kernels from the
// rows' 8-bit codes with each row's scale applied to the sums (the codes as bf16, exact; int8 ones on
// wgmma as s8 x s8 MMAs where k is a multiple of 128).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tessera::cuda {

// One quantized matrix as the kernels read it (device pointers). The launchers take it by a host
// pointer that outlives the queued work (the backend keeps one per weight): recorded steps fingerprint
// their arguments by value, so they must be scalars or pointers.
// QuantKind::kNone as a matrix kind: plain bf16 rows (codes = the rows, row_bytes = 2 k, group = k, no
// scales), which cuda_quant_wgmma.cu's kernel takes as it takes codes (prompt-sized bf16 experts).
constexpr int8_t kBf16Rows = 0;
struct QuantMatrix {
  const uint8_t* codes = nullptr;  // [n, row_bytes]
  const float* scales = nullptr;   // [n, groups]
  const float* zeros = nullptr;    // [n, groups] or null
  const int32_t* perm = nullptr;   // [k] or null
  int64_t row_bytes = 0;
  int32_t group = 0, groups = 0;
  int8_t kind = 0;  // core/quant.h QuantKind: 1 fp8, 2 int8, 3 int4; kBf16Rows above
  int8_t act = 0;   // ActQuant: 0 none, 1 dynamic per token, 2 static
  float act_scale = 0.f;
};

// The few-row kernel's limits: m rows of x (f32, staged in shared memory) up to kQuantGemvMaxRows,
// m * k * 4 bytes of shared memory at most kQuantGemvMaxSmem.
constexpr int64_t kQuantGemvMaxRows = 8;
constexpr int64_t kQuantGemvMaxSmem = 160 << 10;
inline bool QuantGemvFits(int64_t m, int64_t k) {
  return m >= 1 && m <= kQuantGemvMaxRows && m * k * 4 <= kQuantGemvMaxSmem;
}
// y[m, n] (+)= round(x)[m, perm] * dequant(w)[n, k]^T for m rows (QuantGemvFits).
void QuantGemv(const float* x, int64_t m, int64_t k, const QuantMatrix* w, int64_t n, float* y, bool accumulate,
               cudaStream_t s);
// out [n, k] f32 = the dequantized weight, columns in the codes' order.
void QuantDequantF32(const QuantMatrix* w, int64_t n, int64_t k, float* out, cudaStream_t s);
// out [m, k] = rows of x rounded as the weight's W8A8 rule says and gathered by its permutation.
void QuantPrepareInput(const float* x, int64_t m, int64_t k, const QuantMatrix* w, float* out, cudaStream_t s);
// The same rows as their 8-bit codes (out, exact in bf16) and each row's scale (row_scale [m]): out x
// row_scale is QuantPrepareInput's value. The tensor-core kernels multiply the codes as they are (one
// bf16 MMA, no rounding) and scale the rows at the end.
void QuantPrepareInputCodes(const float* x, int64_t m, int64_t k, const QuantMatrix* w, float* out, float* row_scale,
                            cudaStream_t s);

// Routed experts of few rows on quantized weights: each (row, slot) pair reads its expert's codes.
// experts: device array [3 * E] of QuantMatrix (gate..., up..., down...). act [slots, inter] then
// slot_out [slots, hidden] (weighted by the routing weight), as MoeGateUp / MoeDown do for bf16.
// vec: every expert matrix takes the 16-byte vector path (QuantVecOk).
void QuantMoeGateUp(const float* x, int64_t hidden, const int32_t* idx, int64_t slots, int64_t k,
                    const QuantMatrix* experts, int64_t E, int64_t inter, bool vec, float* act, cudaStream_t s);
void QuantMoeDown(const float* act, int64_t inter, const int32_t* idx, const float* weights, int64_t slots,
                  const QuantMatrix* experts, int64_t E, int64_t hidden, bool vec, float* slot_out, cudaStream_t s);
// Whether a matrix's rows take the vector loads (16-byte aligned rows, 16 bytes within one group).
bool QuantVecOk(const QuantMatrix& w);

// The tiled kernels of cuda_quant_tiled.cu: many weight loads in flight, no shared-memory staging.
// They take weight-only matrices on the vector path (no act-order permutation, no W8A8 rounding) and
// 16-byte aligned f32 inputs with rows of a multiple of 4; the staged kernels above take the rest.
bool QuantTiledOk(const QuantMatrix& w);
// y_j[n_j] (+)= x[k] * dequant(w_j)^T for one row on the tiled kernels (2..8 rows take QuantGemmMma),
// up to kQuantGemvMaxJobs matrices of one k and one kind / zero-point form in one launch (q / k / v);
// unused jobs are null. Each job's sums are the same whether it runs alone or with others only when
// the launch splits k the same way (it depends on the launch's total rows).
constexpr int kQuantGemvMaxJobs = 3;
void QuantGemvTiled(const float* x, const QuantMatrix* w0, int64_t n0, float* y0, const QuantMatrix* w1, int64_t n1,
                    float* y1, const QuantMatrix* w2, int64_t n2, float* y2, bool accumulate, cudaStream_t s);
// Routed experts on the tiled kernels, per (row, expert) pair: pair u reads expert idx[u] (act and
// slot_out indexed by pair); first: experts[0] on the host (every expert matrix shares its kind, zero
// points and group). Up to kQuantMoePerPairMaxSlots pairs (at batch-1 / few-row decode no two pairs
// share an expert); more take the tensor-core kernels below, grouped by expert.
constexpr int64_t kQuantMoePerPairMaxSlots = 64;
void QuantMoeGateUpTiled(const float* x, int64_t hidden, int64_t k, const int32_t* idx, int64_t pairs,
                         const QuantMatrix* experts, const QuantMatrix* first, int64_t E, int64_t inter, float* act,
                         cudaStream_t s);
void QuantMoeDownTiled(const float* act, int64_t inter, const int32_t* idx, int64_t pairs, const float* weights,
                       const QuantMatrix* experts, const QuantMatrix* first, int64_t E, int64_t hidden,
                       float* slot_out, cudaStream_t s);

// The tensor-core kernels of cuda_quant_mma.cu (bf16 MMA on codes decoded in registers, scales
// applied in f32 per group): products of many rows. They take weight-only matrices whose k is a
// multiple of 32, scale groups of a multiple of 32 columns (or one a row), 16-byte aligned rows, and
// 16-byte aligned f32 inputs; act-order and W8A8 inputs are prepared first (QuantPrepareInput).
// exact: activations split hi + lo (cuda_mma_util.cuh), else rounded to bf16.
constexpr int kQuantMmaRows = 64;     // activation rows a block (and a MoE unit)
constexpr int kQuantMmaFewRows = 16;  // ... for experts of few rows each (batched decode)
bool QuantMmaOk(const QuantMatrix& w, int64_t k);
// y[m, n] (+)= x[m, k] * dequant(w)^T. Products of few row and column tiles split k over the blocks:
// scratch holds QuantGemmMmaScratch(m, n, k) floats (0: no split, scratch unused; null: k not split).
int64_t QuantGemmMmaScratch(int64_t m, int64_t n, int64_t k);
// row_scale (null: none): y's rows are scaled by it (W8A8 inputs given as codes, QuantPrepareInputCodes).
void QuantGemmMma(const float* x, int64_t m, int64_t k, const QuantMatrix* w, int64_t n, float* y, bool accumulate,
                  bool exact, float* scratch, const float* row_scale, cudaStream_t s);
// Dense products of kQuantWgmmaMinRows rows or more on Hopper's wgmma (cuda_quant_wgmma.cu, sm_90a
// builds): symmetric codes (no zero points), k % 64 == 0, groups of a multiple of 64 (or one a row),
// and the tensor-core kernels' other conditions (QuantMmaOk). split: scratch of (exact ? 2 : 1) x m x
// k bf16 where x goes split into hi (and lo) for the launch. row_scale (W8A8: x holds codes,
// QuantPrepareInputCodes): int8 weights with k % 128 == 0 and one scale a row multiply the codes on
// the s8 wgmma (x packed to int8 in split), others (fp8 among them) as bf16.
constexpr int64_t kQuantWgmmaMinRows = 256;
bool QuantWgmmaOk(const QuantMatrix& w, int64_t m, int64_t k);
bool Bf16WgmmaOk(int64_t k);  // kBf16Rows matrices of k columns: sm_90a, k % 64 == 0, a tensor-map encoder
void QuantGemmWgmma(const float* x, int64_t m, int64_t k, const QuantMatrix* w, int64_t n, float* y, bool accumulate,
                    uint16_t* split, bool exact, const float* row_scale, cudaStream_t s);
// Routed experts of prompt-sized batches on the wgmma kernel: MoeGroupByExpert with
// kQuantWgmmaUnitRows rows a unit, x gathered into x_split in sorted order (each unit's rows
// contiguous for TMA), gate/up into act_split (split for the down matrices), down into slot_out
// weighted (pairs in no unit untouched). Every gate / up / down matrix takes QuantWgmmaOk; gate0 /
// down0 on the host as for QuantMoeMmaGateUp. x_split: (exact ? 2 : 1) x pairs x hidden bf16,
// act_split the same x inter. Taken from kQuantWgmmaMinRowsPerExpert rows an expert on average.
// W8A8 (x_scale not null): x holds each token's codes and x_scale their factors
// (QuantPrepareInputCodes); gate / up sums are scaled by the token's factor, act goes to act_f32
// [pairs, inter] f32 in sorted order, then as codes (act_codes, same size) with each pair's factor
// (act_scale [pairs]) into act_split, and the down sums are scaled by it; one MMA (exact ignored):
// int8 codes on the s8 MMA where QuantGemmWgmma would take them (both k), others as bf16.
// bf16 experts with bf16 activations (exact false) take the same kernel: matrices of kind kBf16Rows,
// where Bf16WgmmaOk holds for hidden and inter.
constexpr int kQuantWgmmaUnitRows = 128;
constexpr int64_t kQuantWgmmaMinRowsPerExpert = 64;
void QuantMoeWgmma(const float* x, int64_t hidden, int64_t top_k, int64_t pairs, const int32_t* order,
                   const int4* units, const int32_t* num_units, int64_t max_units, const QuantMatrix* experts,
                   const QuantMatrix* gate0, const QuantMatrix* down0, int64_t E, int64_t inter, bool gelu,
                   const float* weights, uint16_t* x_split, uint16_t* act_split, bool exact, const float* x_scale,
                   float* act_f32, float* act_codes, float* act_scale, float* slot_out, cudaStream_t s);
// x [rows, k] f32 -> hi (and lo, when not null) bf16 [rows, k], each 32-wide chunk permuted for the
// consuming weight's kind (cuda_quant_decode.cuh, PermutedK).
void QuantSplitActivations(const float* x, int64_t rows, int64_t k, int8_t kind, uint16_t* hi, uint16_t* lo,
                           cudaStream_t s);
// Routed experts grouped by expert (MoeGroupByExpert with unit_rows = QuantMoeMmaUnitRows rows a
// unit), the contracts of MoeGroupedGateUp / MoeGroupedDown (any activation); first: experts[0] on
// the host (every gate / up matrix shares its kind, group and zero points, as every down matrix does).
// The unit rows for `slots` pairs over E experts: kQuantMmaFewRows while they average at most that
// many an expert. row_scale (null: none): W8A8 inputs given as codes (QuantPrepareInputCodes), the
// gate / up sums scaled by their token's factor ([rows of x]) before the activation, the down sums by
// their sorted position's ([pairs], act's rows) before the routing weight.
int QuantMoeMmaUnitRows(int64_t slots, int64_t num_experts);
// W8A8 experts of fewer pairs take the staged per-pair kernels (their inputs rounded in shared memory):
// below it the two coding launches and the 16-row units cost more than they save.
constexpr int64_t kQuantMoeW8a8MmaMinSlots = 64;
void QuantMoeMmaGateUp(int unit_rows, const float* x, int64_t hidden, int64_t k, const int32_t* order,
                       const int4* units, const int32_t* num_units, int64_t max_units, const QuantMatrix* experts,
                       const QuantMatrix* first, int64_t E, int64_t inter, float* act, bool exact, bool gelu,
                       const float* row_scale, cudaStream_t s);
void QuantMoeMmaDown(int unit_rows, const float* act, int64_t inter, const int32_t* order, const int4* units,
                     const int32_t* num_units, int64_t max_units, const float* weights, const QuantMatrix* experts,
                     const QuantMatrix* first, int64_t E, int64_t hidden, float* slot_out, bool exact,
                     const float* row_scale, cudaStream_t s);

// Pairs the staged per-pair MoE kernels take (each re-reads its expert's codes; past this the
// host-grouped products read each expert once), for matrices the tiled and tensor-core kernels refuse.
constexpr int64_t kQuantMoeMaxSlots = 512;

}  // namespace tessera::cuda
