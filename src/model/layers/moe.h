// tessera model layer: the feed-forward blocks: the dense SwiGLU MLP and the sparse MoE block
// (softmax router in f32, top-k, renormalised when norm_topk_prob, SiLU(gate) * up -> down per
// expert, plus an optional shared expert scaled by sigmoid(shared_expert_gate(x))).
#pragma once

#include <cstdint>
#include <vector>

#include "model/layers/context.h"
#include "model/weights.h"

namespace tessera {

// x: [rows, hidden] -> out: [rows, hidden].
void DenseMlpForward(Backend& be, const MlpWeights& w, int64_t rows, const float* x, float* out);

// expert_counts (backend memory, [num_experts], may be null): += the tokens routed to each expert.
// With `residual`, the block's output goes into its residual add and the norm after it
// (Backend::ResidualNorm: h += output, y = RmsNorm(h)) and out is scratch.
void MoeForward(const LayerContext& ctx, const MoeWeights& w, const float* x, float* out, int32_t* expert_counts,
                const Backend::ResidualNorm* residual = nullptr);

}  // namespace tessera
