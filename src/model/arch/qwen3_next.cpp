// tessera model: Qwen3-Next (Qwen3NextForCausalLM): hybrid Gated DeltaNet / gated full attention,
// (1+w) RMSNorm, partial RoPE, shared expert. Its GDN input projections are fused and grouped per
// key head: in_proj_qkvz rows are, per key head g, [q_g (dk), k_g (dk), v_g (r*dv), z_g (r*dv)]
// with r = value_heads / key_heads, and in_proj_ba rows are [b_g (r), a_g (r)] (transformers'
// fix_query_key_value_ordering). The loader permutes the rows once into the flat [q k v z] and
// [b a] orders, so the shared layer (qwen_body.cpp, the Qwen families' body) sees the same layout
// as Qwen3.5's split projections.
#include "model/arch/arch.h"
#include "model/loader.h"

namespace tessera {

namespace {

struct Dims {
  int64_t kh, vh, dk, dv, r, conv_dim, vd;
};

Dims DimsOf(const ModelConfig& c) {
  Dims d{c.linear_num_key_heads, c.linear_num_value_heads, c.linear_key_head_dim, c.linear_value_head_dim,
         c.linear_num_value_heads / c.linear_num_key_heads, c.LinearConvDim(),
         c.linear_num_value_heads * c.linear_value_head_dim};
  return d;
}

void Tensors(const ModelConfig& cfg, const std::string& prefix, std::vector<ExpectedTensor>* out) {
  const Dims d = DimsOf(cfg);
  out->push_back({prefix + "in_proj_qkvz.weight", {d.conv_dim + d.vd, cfg.hidden_size}});
  out->push_back({prefix + "in_proj_ba.weight", {2 * d.vh, cfg.hidden_size}});
}

// A tensor-parallel rank keeps the rows of its key heads (q, k) and value heads (v, z, b, a), in
// the same flat order.
void Load(const ModelConfig& cfg, const std::string& prefix, WeightLoader& loader, GdnWeights* out) {
  const Dims d = DimsOf(cfg);
  const RankShard& s = loader.shard();
  const int64_t group = 2 * d.dk + 2 * d.r * d.dv;  // rows per key head in in_proj_qkvz
  std::vector<int64_t> qkvz;
  for (int part = 0; part < 2; ++part)  // q, k
    for (int64_t g = s.key_heads.begin; g < s.key_heads.end(); ++g)
      for (int64_t i = 0; i < d.dk; ++i) qkvz.push_back(g * group + part * d.dk + i);
  for (int part = 0; part < 2; ++part)  // v, z: value head h is head h % r of key head h / r's group
    for (int64_t h = s.value_heads.begin; h < s.value_heads.end(); ++h)
      for (int64_t i = 0; i < d.dv; ++i)
        qkvz.push_back((h / d.r) * group + 2 * d.dk + part * d.r * d.dv + (h % d.r) * d.dv + i);
  std::vector<int64_t> ba;
  for (int part = 0; part < 2; ++part)  // b, a
    for (int64_t h = s.value_heads.begin; h < s.value_heads.end(); ++h)
      ba.push_back((h / d.r) * 2 * d.r + part * d.r + h % d.r);
  // One stacked [q k v z | b a] matrix: the layer's input projection is one matrix product written
  // straight into its combined row.
  out->projections =
      loader.StackedProjections({{prefix + "in_proj_qkvz.weight", {d.conv_dim + d.vd, cfg.hidden_size}, qkvz},
                                 {prefix + "in_proj_ba.weight", {2 * d.vh, cfg.hidden_size}, ba}});
}

}  // namespace

const ArchSpec& Qwen3NextArch() {
  static const ArchSpec spec{ModelFamily::kQwen3Next, "qwen3_next", Tensors, Load, &QwenBody()};
  return spec;
}

}  // namespace tessera
