// tessera backend: the reference of RowSampling (backend.h): one logits row to one token, as the
// engine's Sampler draws it after its penalties. The CPU backend's SampleRows, the engine's Sampler
// and the CUDA backend's fallback for rows its kernel cannot finish all call this one function, so
// the host and the device paths cannot drift apart.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "backend/backend.h"

namespace tessera {

// (probability, token) pairs of a sampled row's distribution, kept between calls to save allocations.
using SamplingCandidates = std::vector<std::pair<float, int32_t>>;

// The token RowSampling `p` picks from `row` (vocab floats, not modified) and its probability
// (greedy: softmax(row) at the token; sampled: the token's share of the final distribution).
// `scratch` may be null.
int32_t SampleRowReference(const float* row, int64_t vocab, const RowSampling& p, float* prob,
                           SamplingCandidates* scratch = nullptr);

}  // namespace tessera
