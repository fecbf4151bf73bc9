// tessera model: the architecture registry. Each supported family (one file in model/arch) gives an
// ArchBody: its tensor list and loading, and its embedding and layer composed from the shared layers
// (model/layers), with no backend code; Model::ForwardRank keeps only the batch plumbing and calls
// the body, with no family-specific branch. The three Qwen families share one body (qwen_body.cpp:
// the decoder layer with the residual add fused into the next layer's input norm, tensor-parallel
// all-reduces, the vocab-parallel embedding) and differ only in the tensors of a Gated DeltaNet
// layer's input projections and how they map onto the combined projection row [q k v | z | b | a]
// the shared GDN layer computes on; everything else of theirs (norm style, attention gate, partial
// RoPE, shared expert, dense layers) comes from ModelConfig. A family whose layer differs in its
// structure (DiffusionGemma: seven norms, a dense MLP beside the experts, a scaled router, a layer
// scalar, per-layer attention shapes) gives a body of its own (docs/DIFFUSION_GEMMA.md section 10).
#pragma once

#include <string>
#include <vector>

#include "model/model.h"
#include "model/weights.h"

namespace tessera {

class WeightLoader;
struct LayerContext;

// The activations one forward keeps across its layers: backend memory, [rows, hidden] each, made
// once per forward by Model::ForwardRank (which also reads x for the final norm of captured hidden
// states). Layers run in order 0..num_layers-1, so a layer may leave its successor's input in the
// scratch: the Qwen layer ends in the residual add fused with the next layer's input norm and leaves
// x = input_norm_{l+1}(h) (one kernel instead of two).
struct LayerStream {
  float* h = nullptr;  // the residual stream
  float* x = nullptr;  // scratch kept across layers (the Qwen layer's normed input)
  float* o = nullptr;  // scratch (a sub-layer's output)
};

// The forward and the weights of an architecture. Model::ForwardRank keeps the batch plumbing
// (segments, positions, logits rows, final norm, lm_head, sampling) and calls these;
// ModelWeights::arch holds what `load` made beyond embed / lm_head / final_norm / layers[].
// With tensor parallelism every function runs on every rank with that rank's LayerContext
// (ctx.comm, ctx.shard, ctx.cfg the rank's local config) and meets the others in ctx.comm's collectives.
struct ArchBody {
  // Every tensor the architecture reads, under its checkpoint name (loading, inspect, census).
  void (*tensors)(const ModelConfig& cfg, std::vector<ExpectedTensor>* out);
  // Fills out->embed, lm_head, final_norm, layers[] (kind, is_moe, cache_index) and out->arch.
  void (*load)(const ModelConfig& cfg, WeightLoader& loader, ModelWeights* out);
  // h [rows, hidden] = the residual stream entering layer 0 for ctx.rows tokens (whole on every rank).
  void (*embed)(const LayerContext& ctx, const ModelWeights& w, const int32_t* tokens, float* h);
  // Layer l in place on s.h (whole on every rank when it returns); expert_counts (backend memory,
  // [num_experts], may be null) += routing.
  void (*layer)(const LayerContext& ctx, const ModelWeights& w, int64_t l, const LayerStream& s,
                int32_t* expert_counts);
  // In place on the lm_head's output [rows, vocab] before sampling (a soft-cap); may be null.
  void (*logits)(const LayerContext& ctx, float* logits, int64_t rows, int64_t vocab);
  // K/V values per token of attention layer l's cache (both K and V: 2 * kv_heads * head_dim).
  int64_t (*kv_values_per_token)(const ModelConfig& cfg, int64_t layer);
  // Canvas-decoder families (Model::SelfConditioningInput, Segment::canvas_sample): out [rows, hidden]
  // = the next denoising step's self-conditioning input from this step's processed logits as stored,
  // s [rows, vocab] (z rounded to the embedding's dtype; overwritten). Both in backend memory. Null:
  // the family has no canvas decoder.
  void (*self_conditioning)(Backend& be, const ModelConfig& cfg, const ModelWeights& w, float* s, int64_t rows,
                            float* out) = nullptr;
  // Whether its layer splits over the ranks of a tensor-parallel group (shards, all-reduces);
  // Model::Load refuses tensor_parallel_size > 1 otherwise.
  bool tensor_parallel = false;
};

// The Qwen families' shared body (qwen_body.cpp); a family's GDN projections come from its ArchSpec.
const ArchBody& QwenBody();

struct ArchSpec {
  ModelFamily family;
  const char* name;
  // Appends the input-projection tensors of GDN layer prefix "model.layers.N.linear_attn." (read by
  // QwenBody: the one point where the Qwen families' layers differ).
  void (*gdn_projection_tensors)(const ModelConfig& cfg, const std::string& prefix,
                                 std::vector<ExpectedTensor>* out);
  // Loads them as GdnProjections.
  void (*load_gdn_projections)(const ModelConfig& cfg, const std::string& prefix, WeightLoader& loader,
                               GdnWeights* out);
  // Never null: QwenBody() for the Qwen families, a family's own for one that composes its own layer.
  const ArchBody* body = nullptr;
};

const ArchSpec& Qwen3MoeArch();
const ArchSpec& Qwen3NextArch();
const ArchSpec& Qwen35MoeArch();
const ArchSpec& DiffusionGemmaArch();
const ArchSpec& ArchFor(ModelFamily family);

}  // namespace tessera
