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
// `scratch` may be null. A renormalisation over the whole row sums in id order, over a cut prefix in
// the sorted order; the order itself is built only as far as the cuts and the draw read it.
int32_t SampleRowReference(const float* row, int64_t vocab, const RowSampling& p, float* prob,
                           SamplingCandidates* scratch = nullptr);

// A structured-output mask on one host row: logits[t] = -inf wherever bit t % 32 of words[t / 32] is
// clear, and past the num_words given. Word by word (most words of a mask are all-zero or all-one).
void MaskRowByWords(float* logits, int64_t vocab, const uint32_t* words, size_t num_words);

// A canvas row's pick (CanvasRowPick) from its processed logits z (vocab floats, not modified; -inf
// entries, a grammar's masked tokens, have probability 0), in double: m = max z (argmax: its first
// index), e_i = exp(z_i - m), entropy = log(sum e) - sum e_i (z_i - m) / sum e, argmax_prob = 1 / sum e,
// sampled = the first i whose running sum e_0 + .. + e_i exceeds uniform * sum e (none: the last i
// with e_i > 0). The CPU backend's CanvasSampleRows and the engine's constrained rows call it; the
// CUDA kernel computes the same sums in another order.
CanvasRowPick CanvasRowReference(const float* z, int64_t vocab, double uniform);

// One row of Backend::CanvasSampleRows on host memory: z = row / t in place, *pick from z, then z
// rounded to bf16 in place when asked.
void CanvasSampleRowInPlace(float* row, int64_t vocab, const CanvasRowRule& rule, bool round_z_to_bf16,
                            CanvasRowPick* pick);

}  // namespace tessera
