// tessera model layer: Gated DeltaNet (linear attention) of Qwen3-Next / Qwen3.5: input projections
// into [q k v | z | b | a], causal depthwise conv1d + SiLU over q,k,v, beta = sigmoid(b),
// g = -exp(A_log) * softplus(a + dt_bias), the gated delta rule (chunked for prompts, recurrent for
// decode; on CUDA recurrent also for diffusion blocks), gated RMSNorm w * norm(o) * silu(z), out_proj.
// Per segment the committed rows advance the sequence's state slot; an uncommitted block runs from a
// copy and leaves the slot untouched.
#pragma once

#include "model/layers/context.h"
#include "model/weights.h"

namespace tessera {

void GatedDeltaNetForward(const LayerContext& ctx, const GdnWeights& w, int64_t cache_index,
                          const float* x, float* out);

}  // namespace tessera
