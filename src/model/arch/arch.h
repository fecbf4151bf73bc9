// tessera model: the architecture registry. Each supported family (one file in model/arch) says
// what differs between them. The Qwen families share one layer (written in Model::ForwardRank and
// the loader) and differ only in the tensors of a Gated DeltaNet layer's input projections and how
// they map onto the combined projection row [q k v | z | b | a] the shared GDN layer computes on;
// everything else of theirs (norm style, attention gate, partial RoPE, shared expert, dense layers)
// comes from ModelConfig. A family whose layer differs in its structure (DiffusionGemma: seven
// norms, a dense MLP beside the experts, a scaled router, a layer scalar, per-layer attention
// shapes) gives an ArchBody instead: its own tensor list and loading, and its embedding and layer
// composed from the shared layers (model/layers), with no backend code (docs/DIFFUSION_GEMMA.md
// section 10, its steps 2-3 in their smallest form; the Qwen families are not moved onto it yet).
#pragma once

#include <string>
#include <vector>

#include "model/model.h"
#include "model/weights.h"

namespace tessera {

class WeightLoader;
struct LayerContext;

// The forward and the weights of an architecture that composes its own layer. Model::ForwardRank
// keeps the batch plumbing (segments, positions, logits rows, final norm, lm_head, sampling) and
// calls these; ModelWeights::arch holds what `load` made beyond embed / lm_head / final_norm.
struct ArchBody {
  // Every tensor the architecture reads, under its checkpoint name (loading, inspect, census).
  void (*tensors)(const ModelConfig& cfg, std::vector<ExpectedTensor>* out);
  // Fills out->embed, lm_head, final_norm, layers[] (kind, is_moe, cache_index) and out->arch.
  void (*load)(const ModelConfig& cfg, WeightLoader& loader, ModelWeights* out);
  // h [rows, hidden] = the residual stream entering layer 0 for ctx.rows tokens.
  void (*embed)(const LayerContext& ctx, const ModelWeights& w, const int32_t* tokens, float* h);
  // Layer l in place on h; expert_counts (backend memory, [num_experts], may be null) += routing.
  void (*layer)(const LayerContext& ctx, const ModelWeights& w, int64_t l, float* h, int32_t* expert_counts);
  // In place on the lm_head's output [rows, vocab] before sampling (a soft-cap); may be null.
  void (*logits)(const LayerContext& ctx, float* logits, int64_t rows, int64_t vocab);
  // K/V values per token of attention layer l's cache (both K and V: 2 * kv_heads * head_dim).
  int64_t (*kv_values_per_token)(const ModelConfig& cfg, int64_t layer);
  // Canvas-decoder families (Model::SelfConditioningInput): out [rows, hidden] (host) = the next
  // denoising step's self-conditioning input from this step's processed logits z [rows, vocab] (host).
  // Null: the family has no canvas decoder.
  void (*self_conditioning)(Backend& be, const ModelConfig& cfg, const ModelWeights& w, const float* z, int64_t rows,
                            float* out) = nullptr;
};

struct ArchSpec {
  ModelFamily family;
  const char* name;
  // Appends the input-projection tensors of GDN layer prefix "model.layers.N.linear_attn.".
  void (*gdn_projection_tensors)(const ModelConfig& cfg, const std::string& prefix,
                                 std::vector<ExpectedTensor>* out);
  // Loads them as GdnProjections.
  void (*load_gdn_projections)(const ModelConfig& cfg, const std::string& prefix, WeightLoader& loader,
                               GdnWeights* out);
  // Null for the Qwen families (their layer is the shared one), set by families that compose their own.
  const ArchBody* body = nullptr;
};

const ArchSpec& Qwen3MoeArch();
const ArchSpec& Qwen3NextArch();
const ArchSpec& Qwen35MoeArch();
const ArchSpec& DiffusionGemmaArch();
const ArchSpec& ArchFor(ModelFamily family);

}  // namespace tessera
