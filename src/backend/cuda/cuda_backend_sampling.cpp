// tessera cuda backend: CudaBackend::SampleRows, one token per logits row drawn on the device by
// the rule of RowSampling (the kernel: cuda_sampling.cu), so that a step sends the host tokens and
// probabilities instead of whole logits rows, and CudaBackend::CanvasSampleRows, a canvas step's
// per-row work (cuda_canvas_sampling.cu). See cuda_backend.h.
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_sampling.h"
#include "core/error.h"

namespace tessera {

void CudaBackend::SampleRows(const float* logits, int64_t rows, int64_t vocab, const RowSampling* params,
                             int32_t* tokens, float* probs) {
  profiler_->Mark("SampleRows");
  if (rows <= 0) return;
  if (vocab <= 0 || vocab > std::numeric_limits<int32_t>::max())
    Fail(ErrorKind::kInvalidArgument, "SampleRows: a vocabulary of {} tokens", vocab);
  // The rules travel through the step's scratch, like token ids: the draw (`uniform`) changes every
  // step, and scratch contents are not part of a recorded step's fingerprint (cuda_step_graph.h).
  std::vector<cuda::SampleRowParams> rules(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    const RowSampling& p = params[r];
    rules[r] = {p.temperature, p.top_k, p.top_p, p.min_p, p.exclude, 0, p.uniform};
  }
  const ScratchArray d = UploadScratch(rules.data(), rules.size() * sizeof(cuda::SampleRowParams));
  Enqueue("SampleRows", cuda::SampleRows, logits, rows, vocab, static_cast<const cuda::SampleRowParams*>(d.data),
          tokens, probs, stream_);
}

void CudaBackend::MaskLogitsRows(float* logits, int64_t vocab, const int64_t* rows, int64_t n, const uint32_t* words) {
  profiler_->Mark("MaskLogitsRows");
  if (n <= 0) return;
  // Through the step's scratch like SampleRows' rules: the masks change every step.
  const ScratchArray drows = UploadScratch(rows, static_cast<size_t>(n) * sizeof(int64_t));
  const ScratchArray dwords =
      UploadScratch(words, static_cast<size_t>(n * ((vocab + 31) / 32)) * sizeof(uint32_t));
  Enqueue("MaskLogitsRows", cuda::MaskLogitsRows, logits, vocab, static_cast<const int64_t*>(drows.data), n,
          static_cast<const uint32_t*>(dwords.data), stream_);
}

// The kernel writes CanvasRowPick as cuda::CanvasPick (cuda_sampling.h stays free of backend.h).
static_assert(sizeof(cuda::CanvasPick) == sizeof(CanvasRowPick) &&
                  offsetof(cuda::CanvasPick, entropy) == offsetof(CanvasRowPick, entropy) &&
                  offsetof(cuda::CanvasPick, argmax) == offsetof(CanvasRowPick, argmax) &&
                  offsetof(cuda::CanvasPick, sampled) == offsetof(CanvasRowPick, sampled) &&
                  offsetof(cuda::CanvasPick, argmax_prob) == offsetof(CanvasRowPick, argmax_prob) &&
                  offsetof(cuda::CanvasPick, reserved) == offsetof(CanvasRowPick, reserved),
              "cuda::CanvasPick must have CanvasRowPick's layout");

void CudaBackend::CanvasSampleRows(float* logits, int64_t rows, int64_t vocab, const CanvasRowRule* rules,
                                   bool round_z_to_bf16, CanvasRowPick* picks) {
  profiler_->Mark("CanvasSampleRows");
  if (rows <= 0) return;
  if (vocab <= 0 || vocab > std::numeric_limits<int32_t>::max())
    Fail(ErrorKind::kInvalidArgument, "CanvasSampleRows: a vocabulary of {} tokens", vocab);
  // Through the step's scratch like SampleRows' rules: the draws change every step, and scratch
  // contents are not part of a recorded step's fingerprint (cuda_step_graph.h).
  std::vector<cuda::CanvasRowParams> params(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) params[r] = {rules[r].temperature, 0, rules[r].uniform};
  const ScratchArray d = UploadScratch(params.data(), params.size() * sizeof(cuda::CanvasRowParams));
  Enqueue("CanvasSampleRows", cuda::CanvasSampleRows, logits, rows, vocab,
          static_cast<const cuda::CanvasRowParams*>(d.data), round_z_to_bf16, reinterpret_cast<cuda::CanvasPick*>(picks),
          stream_);
}

}  // namespace tessera
