// tessera model layer: full (softmax) attention with per-head q/k RMSNorm before RoPE (partial
// when rotary_dim < head_dim), GQA, an optional sigmoid output gate (Qwen3-Next / Qwen3.5: q_proj
// yields [q, gate] per head), paged KV cache, causal or block-causal mask per segment.
#pragma once

#include "model/layers/context.h"
#include "model/weights.h"

namespace tessera {

// x: [rows, hidden] (already input-normed) -> out: [rows, hidden].
void AttentionForward(const LayerContext& ctx, const AttentionWeights& w, int64_t cache_index,
                      const float* x, float* out);

}  // namespace tessera
