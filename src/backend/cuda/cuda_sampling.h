// tessera cuda backend: the launchers of the row-sampling kernel (cuda_sampling.cu), which draws one
// token per logits row on the device by the rule of backend.h's RowSampling, so that only tokens and
// probabilities leave the GPU, and of the canvas-row kernel (cuda_canvas_sampling.cu: a canvas step's
// z, entropy, argmax and draw, Backend::CanvasSampleRows). Plain C++ (the backend class, compiled by the host compiler, calls it);
// every pointer is device memory.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tessera::cuda {

// One row's rule, as the kernel reads it from the step's scratch (the backend copies RowSampling
// field by field, so this layout does not depend on RowSampling's).
struct SampleRowParams {
  float temperature;  // <= 0: greedy
  int32_t top_k;      // 0 (or >= vocab): off
  float top_p;        // >= 1: off
  float min_p;        // <= 0: off
  int32_t exclude;    // never chosen; -1: none
  int32_t unused;
  double uniform;  // the draw in [0, 1)
};
static_assert(sizeof(SampleRowParams) == 32, "SampleRowParams is copied as raw bytes");

// Backend::MaskLogitsRows on device memory: rows[n] and words[n, (vocab + 31) / 32] are device copies.
void MaskLogitsRows(float* logits, int64_t vocab, const int64_t* rows, int64_t n, const uint32_t* words,
                    cudaStream_t s);

// Rows per call and vocabulary sizes are not limited by the kernel (ids must fit int32), and it needs
// no scratch memory. tokens[row] = -1 only when a row has no token to give (vocab 1 with that token
// excluded); the caller then asks the reference, as backend.h allows.
void SampleRows(const float* logits, int64_t rows, int64_t vocab, const SampleRowParams* params, int32_t* tokens,
                float* probs, cudaStream_t s);

// One canvas row's rule as the kernel reads it from the step's scratch (the backend copies
// CanvasRowRule field by field).
struct CanvasRowParams {
  float temperature;  // > 0: z = logits / t
  int32_t unused;
  double uniform;  // the draw in [0, 1)
};
static_assert(sizeof(CanvasRowParams) == 16, "CanvasRowParams is copied as raw bytes");

// A row's result as the kernel writes it: backend.h's CanvasRowPick field for field (the backend
// checks the offsets agree; this header stays free of backend.h).
struct CanvasPick {
  double entropy;
  int32_t argmax;
  int32_t sampled;
  float argmax_prob;
  int32_t reserved;
};
static_assert(sizeof(CanvasPick) == 24, "CanvasPick is CanvasRowPick's layout");

// Backend::CanvasSampleRows on device memory (params: device copies of the rules, one per row): each
// row becomes z = logits / t in place (bf16-rounded after the pick when round_z_to_bf16) and
// picks[r] is CanvasRowReference(z) up to the order of the double sums. Any vocabulary that fits
// int32; no scratch memory.
void CanvasSampleRows(float* logits, int64_t rows, int64_t vocab, const CanvasRowParams* params,
                      bool round_z_to_bf16, CanvasPick* picks, cudaStream_t s);

}  // namespace tessera::cuda
