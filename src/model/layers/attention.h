// tessera model layer: full (softmax) attention with per-head q/k RMSNorm before RoPE (partial
// when rotary_dim < head_dim), GQA, an optional sigmoid output gate (Qwen3-Next / Qwen3.5: q_proj
// yields [q, gate] per head), paged KV cache, causal or block-causal mask per segment; and the same
// for a layer of its own shape (SpecAttentionProject / SpecAttentionAttend: Gemma 4's sliding-window / global layers).
#pragma once

#include "model/layers/context.h"
#include "model/weights.h"

namespace tessera {

// x: [rows, hidden] (already input-normed) -> out: [rows, hidden].
void AttentionForward(const LayerContext& ctx, const AttentionWeights& w, int64_t cache_index,
                      const float* x, float* out);

// Attention of a layer whose shape is its own (AttentionLayerSpec: Gemma 4's sliding and global
// layers), in two parts so that an architecture may project different rows with different weights
// (an untied DiffusionGemma: encoder and decoder stacks) and attend over all of them at once.
// SpecAttentionProject: x [rows, hidden] (already input-normed) -> q [rows, heads * head_dim],
// k, v [rows, kv_heads * head_dim]: q / k RmsNorm (plain w), V from v_proj or (spec.value_from_key)
// the raw k_proj output, V normed by w.v_norm when set; no RoPE yet.
void SpecAttentionProject(Backend& be, const ModelConfig& c, const AttentionLayerSpec& spec,
                          const AttentionWeights& w, int64_t rows, const float* x, float* q, float* k, float* v);
// SpecAttentionAttend: RopePairs by spec.rope on q and k (in place), a causal mask limited to
// spec.sliding_window keys when set, scores times `scale`, no output gate; a canvas segment's
// uncommitted rows (SegmentRows::canvas) attend bidirectionally (the backend's
// AttentionArgs::canvas_begin rule). Committed rows go to the cache as the Qwen layer's do; canvas
// rows never do. attn: [ctx.rows, heads * head_dim], before o_proj.
void SpecAttentionAttend(const LayerContext& ctx, const AttentionLayerSpec& spec, float scale, int64_t cache_index,
                         float* q, float* k, const float* v, float* attn);

}  // namespace tessera
