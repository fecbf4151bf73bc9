// tessera cuda backend: CudaBackend::SampleRows, one token per logits row drawn on the device by
// the rule of RowSampling (the kernel: cuda_sampling.cu), so that a step sends the host tokens and
// probabilities instead of whole logits rows. See cuda_backend.h.
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

}  // namespace tessera
