// tessera model: Qwen3.5 / 3.6 MoE (Qwen3_5MoeForCausalLM, Qwen3_5MoeForConditionalGeneration's text
// model; Clover diffusion checkpoints share it): as Qwen3-Next but with split GDN input
// projections in_proj_qkv ([q k v] flat), in_proj_z, in_proj_b, in_proj_a. Nested checkpoints
// (weights under model.language_model.*) are mapped by the loader. Everything but those projections
// is the Qwen families' shared body (qwen_body.cpp).
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

// A tensor-parallel rank takes the rows of its key heads (q, k) and value heads (v, z, b, a).
void Load(const ModelConfig& cfg, const std::string& prefix, WeightLoader& loader, GdnWeights* out) {
  const RankShard& s = loader.shard();
  const int64_t vh = cfg.linear_num_value_heads, vd = vh * cfg.linear_value_head_dim;
  const int64_t dk = cfg.linear_key_head_dim, dv = cfg.linear_value_head_dim, kd = cfg.linear_num_key_heads * dk;
  const int64_t conv = cfg.LinearConvDim(), h = cfg.hidden_size;
  // One stacked [q k v | z | b | a] matrix: the layer's input projection is one matrix product
  // written straight into its combined row.
  using Rows = std::vector<IndexRange>;
  const std::vector<int64_t> qkv = WeightLoader::RowsOf(
      {HeadRows(s.key_heads, dk), HeadRows(s.key_heads, dk, kd), HeadRows(s.value_heads, dv, 2 * kd)});
  const std::vector<int64_t> z = WeightLoader::RowsOf(Rows{HeadRows(s.value_heads, dv)});
  const std::vector<int64_t> heads = WeightLoader::RowsOf(Rows{s.value_heads});
  // (A checkpoint that keeps some of them float beside quantized ones gives one projection a format.)
  out->projections = loader.StackedProjections({{prefix + "in_proj_qkv.weight", {conv, h}, qkv},
                                                {prefix + "in_proj_z.weight", {vd, h}, z},
                                                {prefix + "in_proj_b.weight", {vh, h}, heads},
                                                {prefix + "in_proj_a.weight", {vh, h}, heads}});
}

}  // namespace

const ArchSpec& Qwen35MoeArch() {
  static const ArchSpec spec{ModelFamily::kQwen35Moe, "qwen3_5_moe", Tensors, Load, &QwenBody()};
  return spec;
}

}  // namespace tessera
