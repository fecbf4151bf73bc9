// tessera model: Qwen3.5 / 3.6 MoE (Qwen3_5MoeForCausalLM, Qwen3_5MoeForConditionalGeneration's text
// model; Clover diffusion checkpoints share it): as Qwen3-Next but with split GDN input
// projections in_proj_qkv ([q k v] flat), in_proj_z, in_proj_b, in_proj_a. Nested checkpoints
// (weights under model.language_model.*) are mapped by the loader.
#include "model/arch/arch.h"
#include "model/loader.h"

namespace tessera {

namespace {

void Tensors(const ModelConfig& cfg, const std::string& prefix, std::vector<ExpectedTensor>* out) {
  const int64_t vh = cfg.linear_num_value_heads, vd = vh * cfg.linear_value_head_dim;
  out->push_back({prefix + "in_proj_qkv.weight", {cfg.LinearConvDim(), cfg.hidden_size}});
  out->push_back({prefix + "in_proj_z.weight", {vd, cfg.hidden_size}});
  out->push_back({prefix + "in_proj_b.weight", {vh, cfg.hidden_size}});
  out->push_back({prefix + "in_proj_a.weight", {vh, cfg.hidden_size}});
}

void Load(const ModelConfig& cfg, const std::string& prefix, WeightLoader& loader, GdnWeights* out) {
  const int64_t vh = cfg.linear_num_value_heads, vd = vh * cfg.linear_value_head_dim;
  const int64_t conv = cfg.LinearConvDim(), h = cfg.hidden_size;
  out->projections.push_back({loader.Matrix(prefix + "in_proj_qkv.weight", {conv, h}), 0});
  out->projections.push_back({loader.Matrix(prefix + "in_proj_z.weight", {vd, h}), conv});
  out->projections.push_back({loader.Matrix(prefix + "in_proj_b.weight", {vh, h}), conv + vd});
  out->projections.push_back({loader.Matrix(prefix + "in_proj_a.weight", {vh, h}), conv + vd + vh});
}

}  // namespace

const ArchSpec& Qwen35MoeArch() {
  static const ArchSpec spec{ModelFamily::kQwen35Moe, "qwen3_5_moe", Tensors, Load};
  return spec;
}

}  // namespace tessera
