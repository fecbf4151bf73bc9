// tessera model layer: the feed-forward blocks: the dense gated MLP (SiLU or gelu-tanh) and the
// sparse MoE block (softmax router in f32, top-k, renormalised when norm_topk_prob, SiLU(gate) * up
// -> down per expert, plus an optional shared expert scaled by sigmoid(shared_expert_gate(x))), and
// Gemma 4's routed block (MoeRoutedForward: scaled router input, per-expert scales).
#pragma once

#include <cstdint>
#include <vector>

#include "model/layers/context.h"
#include "model/weights.h"

namespace tessera {

// x: [rows, hidden] -> out: [rows, hidden]. act(x gate^T) * (x up^T) -> down.
void DenseMlpForward(Backend& be, const MlpWeights& w, int64_t rows, const float* x, float* out,
                     GluAct act = GluAct::kSilu);

// Gemma 4's MoE block: the router reads router_in (the residual, not the experts' input):
// logits = proj(RmsNorm(router_in; w.router_input_norm)), f32 softmax, top-k renormalised, times
// w.per_expert_scale[e]; the experts (activation `act`) read x. out: [rows, hidden].
void MoeRoutedForward(const LayerContext& ctx, const MoeWeights& w, const float* router_in, const float* x, GluAct act,
                      float* out, int32_t* expert_counts);

// expert_counts (backend memory, [num_experts], may be null): += the tokens routed to each expert.
// With `residual`, the block's output goes into its residual add and the norm after it
// (Backend::ResidualNorm: h += output, y = RmsNorm(h)) and out is scratch.
void MoeForward(const LayerContext& ctx, const MoeWeights& w, const float* x, float* out, int32_t* expert_counts,
                const Backend::ResidualNorm* residual = nullptr);

}  // namespace tessera
