// tessera model: the tensors a checkpoint of a config must hold (ExpectedTensors: names and shapes),
// for the Qwen families' shared layer; an architecture that composes its own layer (ArchSpec::body)
// lists its own. Read by the loader's checks, dummy weights, inspect and the weight census.
#include <string>
#include <vector>

#include "model/arch/arch.h"
#include "model/model.h"

namespace tessera {

namespace {

std::string Layer(int64_t i) { return "model.layers." + std::to_string(i) + "."; }

void AppendLayerTensors(const ModelConfig& c, int64_t i, std::vector<ExpectedTensor>* out) {
  const std::string p = Layer(i);
  const int64_t H = c.hidden_size;
  out->push_back({p + "input_layernorm.weight", {H}});
  out->push_back({p + "post_attention_layernorm.weight", {H}});
  if (c.layer_kinds[i] == LayerKind::kFullAttention) {
    const int64_t q_rows = c.num_heads * c.head_dim * (c.attn_output_gate ? 2 : 1);
    out->push_back({p + "self_attn.q_proj.weight", {q_rows, H}});
    out->push_back({p + "self_attn.k_proj.weight", {c.num_kv_heads * c.head_dim, H}});
    out->push_back({p + "self_attn.v_proj.weight", {c.num_kv_heads * c.head_dim, H}});
    out->push_back({p + "self_attn.o_proj.weight", {H, c.num_heads * c.head_dim}});
    out->push_back({p + "self_attn.q_norm.weight", {c.head_dim}});
    out->push_back({p + "self_attn.k_norm.weight", {c.head_dim}});
  } else {
    const std::string g = p + "linear_attn.";
    ArchFor(c.family).gdn_projection_tensors(c, g, out);
    out->push_back({g + "conv1d.weight", {c.LinearConvDim(), 1, c.linear_conv_kernel}});
    out->push_back({g + "A_log", {c.linear_num_value_heads}});
    out->push_back({g + "dt_bias", {c.linear_num_value_heads}});
    out->push_back({g + "norm.weight", {c.linear_value_head_dim}});
    out->push_back({g + "out_proj.weight", {H, c.linear_num_value_heads * c.linear_value_head_dim}});
  }
  if (c.IsMoeLayer(i)) {
    const int64_t I = c.moe_intermediate_size;
    out->push_back({p + "mlp.gate.weight", {c.num_experts, H}});
    for (int64_t e = 0; e < c.num_experts; ++e) {
      const std::string x = p + "mlp.experts." + std::to_string(e) + ".";
      out->push_back({x + "gate_proj.weight", {I, H}});
      out->push_back({x + "up_proj.weight", {I, H}});
      out->push_back({x + "down_proj.weight", {H, I}});
    }
    if (const int64_t S = c.shared_expert_intermediate_size; S > 0) {
      out->push_back({p + "mlp.shared_expert.gate_proj.weight", {S, H}});
      out->push_back({p + "mlp.shared_expert.up_proj.weight", {S, H}});
      out->push_back({p + "mlp.shared_expert.down_proj.weight", {H, S}});
      out->push_back({p + "mlp.shared_expert_gate.weight", {1, H}});
    }
  } else {
    const int64_t I = c.intermediate_size;
    out->push_back({p + "mlp.gate_proj.weight", {I, H}});
    out->push_back({p + "mlp.up_proj.weight", {I, H}});
    out->push_back({p + "mlp.down_proj.weight", {H, I}});
  }
}

}  // namespace

std::vector<ExpectedTensor> ExpectedTensors(const ModelConfig& c) {
  std::vector<ExpectedTensor> out;
  if (const ArchBody* body = ArchFor(c.family).body) {  // an architecture with its own layer lists its own
    body->tensors(c, &out);
    return out;
  }
  out.push_back({"model.embed_tokens.weight", {c.vocab_size, c.hidden_size}});
  for (int64_t i = 0; i < c.num_layers; ++i) AppendLayerTensors(c, i, &out);
  out.push_back({"model.norm.weight", {c.hidden_size}});
  if (!c.tie_word_embeddings) out.push_back({"lm_head.weight", {c.vocab_size, c.hidden_size}});
  return out;
}

}  // namespace tessera
