// tessera model: the decoder layer the Qwen families share (qwen3_moe, qwen3_next, qwen3_5_moe, and
// the diffusion checkpoints built on them), as an ArchBody (arch.h): its tensor list and loading
// (a tensor-parallel rank takes its slices), the vocab-parallel embedding, and the layer: input norm,
// full attention or Gated DeltaNet, post-attention norm, routed experts (+ shared expert) or a dense
// MLP. Each residual add runs fused with the norm that follows it, the next layer's input norm
// after the FFN included, so a layer starts from the normed input its predecessor left in the
// stream's x. Split over ranks, the attention / GDN output projections and the FFN down
// projections yield partial sums that are all-reduced, and the embedding is all-reduced (each
// token's row is non-zero on one rank only). Where the families differ (a GDN layer's input
// projections) it asks the family's ArchSpec.
#include <string>
#include <vector>

#include "backend/communicator.h"
#include "model/arch/arch.h"
#include "model/layers/attention.h"
#include "model/layers/context.h"
#include "model/layers/gated_delta_net.h"
#include "model/layers/moe.h"
#include "model/loader.h"
#include "model/shard.h"

namespace tessera {

namespace {

std::string LayerPrefix(int64_t i) { return "model.layers." + std::to_string(i) + "."; }

void AppendLayerTensors(const ModelConfig& c, int64_t i, std::vector<ExpectedTensor>* out) {
  const std::string p = LayerPrefix(i);
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

void Tensors(const ModelConfig& c, std::vector<ExpectedTensor>* out) {
  out->push_back({"model.embed_tokens.weight", {c.vocab_size, c.hidden_size}});
  for (int64_t i = 0; i < c.num_layers; ++i) AppendLayerTensors(c, i, out);
  out->push_back({"model.norm.weight", {c.hidden_size}});
  if (!c.tie_word_embeddings) out->push_back({"lm_head.weight", {c.vocab_size, c.hidden_size}});
}

// The conv channels of a rank's GDN heads: its q, k (key heads) and v (value heads) channels.
std::vector<IndexRange> GdnConvChannels(const ModelConfig& c, const RankShard& s) {
  const int64_t kd = c.linear_num_key_heads * c.linear_key_head_dim;
  return {HeadRows(s.key_heads, c.linear_key_head_dim), HeadRows(s.key_heads, c.linear_key_head_dim, kd),
          HeadRows(s.value_heads, c.linear_value_head_dim, 2 * kd)};
}

// A rank loads its heads' rows of q / k / v and GDN projections, its heads' columns of the output
// projections, its experts (others zero), its share of dense / shared-expert FFN columns and of the
// vocabulary (embedding and lm_head).
void Load(const ModelConfig& c, WeightLoader& L, ModelWeights* out) {
  const RankShard& s = L.shard();
  const int64_t H = c.hidden_size;
  if (s.sharded())
    out->embed = L.EmbeddingShard("model.embed_tokens.weight", {c.vocab_size, H}, s.vocab);
  else
    out->embed = L.Matrix("model.embed_tokens.weight", {c.vocab_size, H});
  int64_t n_attn = 0, n_gdn = 0;
  out->layers.resize(c.num_layers);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    LayerWeights& lw = out->layers[i];
    const std::string p = LayerPrefix(i);
    lw.kind = c.layer_kinds[i];
    lw.input_norm = L.Vector(p + "input_layernorm.weight", {H});
    lw.post_norm = L.Vector(p + "post_attention_layernorm.weight", {H});
    if (lw.kind == LayerKind::kFullAttention) {
      lw.cache_index = n_attn++;
      const std::string a = p + "self_attn.";
      const int64_t hd = c.head_dim, q_block = hd * (c.attn_output_gate ? 2 : 1);  // q_proj rows per head
      const int64_t q_rows = c.num_heads * q_block, kv_rows = c.num_kv_heads * hd;
      lw.attn.q_proj = L.MatrixSlice(a + "q_proj.weight", {q_rows, H}, {HeadRows(s.q_heads, q_block)}, {0, H});
      lw.attn.k_proj = L.MatrixSlice(a + "k_proj.weight", {kv_rows, H}, {HeadRows(s.kv_heads, hd)}, {0, H});
      lw.attn.v_proj = L.MatrixSlice(a + "v_proj.weight", {kv_rows, H}, {HeadRows(s.kv_heads, hd)}, {0, H});
      lw.attn.o_proj = L.MatrixSlice(a + "o_proj.weight", {H, c.num_heads * hd}, {{0, H}}, HeadRows(s.q_heads, hd));
      lw.attn.q_norm = L.Vector(a + "q_norm.weight", {hd});
      lw.attn.k_norm = L.Vector(a + "k_norm.weight", {hd});
    } else {
      lw.cache_index = n_gdn++;
      const std::string g = p + "linear_attn.";
      ArchFor(c.family).load_gdn_projections(c, g, L, &lw.gdn);
      const int64_t vh = c.linear_num_value_heads, dv = c.linear_value_head_dim;
      lw.gdn.conv = L.VectorRows(g + "conv1d.weight", {c.LinearConvDim(), 1, c.linear_conv_kernel},
                                 GdnConvChannels(c, s));
      lw.gdn.a_log = L.VectorRows(g + "A_log", {vh}, {s.value_heads});
      lw.gdn.dt_bias = L.VectorRows(g + "dt_bias", {vh}, {s.value_heads});
      lw.gdn.norm = L.Vector(g + "norm.weight", {dv});
      lw.gdn.out_proj = L.MatrixSlice(g + "out_proj.weight", {H, vh * dv}, {{0, H}}, HeadRows(s.value_heads, dv));
    }
    lw.is_moe = c.IsMoeLayer(i);
    if (lw.is_moe) {
      lw.moe.router = L.Matrix(p + "mlp.gate.weight", {c.num_experts, H});
      LoadExperts(c, L, p + "mlp.", &lw.moe);
      if (const int64_t S = c.shared_expert_intermediate_size; S > 0) {
        lw.moe.has_shared = true;
        lw.moe.shared = LoadMlp(L, p + "mlp.shared_expert.", S, H, s.shared_inter);
        lw.moe.shared_gate = L.Matrix(p + "mlp.shared_expert_gate.weight", {1, H});
      }
    } else {
      lw.mlp = LoadMlp(L, p + "mlp.", c.intermediate_size, H, s.dense_inter);
    }
  }
  out->final_norm = L.Vector("model.norm.weight", {H});
  const bool own_head = !c.tie_word_embeddings || L.Has("lm_head.weight");
  if (own_head) {
    out->lm_head = L.MatrixSlice("lm_head.weight", {c.vocab_size, H}, {s.vocab}, {0, H});
  } else {
    out->lm_head = out->embed;  // a sharded embedding's extra zero row is not part of the head
    out->lm_head.shape = {s.vocab.count, H};
  }
}

void Embed(const LayerContext& ctx, const ModelWeights& w, const int32_t* tokens, float* h) {
  Backend& be = *ctx.be;
  const RankShard& sh = *ctx.shard;
  const int64_t R = ctx.rows;
  if (!sh.sharded()) {
    be.Embedding(w.embed, tokens, R, h);
    return;
  }
  // Vocab-parallel: ids of other ranks' rows read the shard's trailing zero row.
  std::vector<int32_t> local(static_cast<size_t>(R));
  for (size_t i = 0; i < local.size(); ++i) {
    const int64_t id = tokens[i];
    local[i] = static_cast<int32_t>(id >= sh.vocab.begin && id < sh.vocab.end() ? id - sh.vocab.begin
                                                                                : sh.vocab.count);
  }
  be.Embedding(w.embed, local.data(), R, h);
  if (ctx.comm) ctx.comm->AllReduceSum(h, R * ctx.cfg->hidden_size);
}

// On entry s.x = input_norm_l(s.h): layer 0 norms it here, every other layer finds it left by its
// predecessor's fused residual add. The last layer's residual add runs alone: its norm is the final
// one, over the logits rows only (Model::ForwardRank).
void Layer(const LayerContext& ctx, const ModelWeights& w, int64_t l, const LayerStream& s, int32_t* expert_counts) {
  Backend& be = *ctx.be;
  const ModelConfig& c = *ctx.cfg;
  const int64_t R = ctx.rows, H = c.hidden_size;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const bool one_plus = c.norm_style == RmsNormStyle::kOnePlusScale;
  auto all_reduce = [&](float* b) {
    if (ctx.comm) ctx.comm->AllReduceSum(b, R * H);
  };
  const LayerWeights& lw = w.layers[l];
  if (l == 0) be.RmsNorm(s.h, R, H, H, lw.input_norm, eps, one_plus, s.x, H);
  if (lw.kind == LayerKind::kFullAttention)
    AttentionForward(ctx, lw.attn, lw.cache_index, s.x, s.o);
  else
    GatedDeltaNetForward(ctx, lw.gdn, lw.cache_index, s.x, s.o);
  all_reduce(s.o);  // row-parallel o_proj / out_proj
  be.AddRmsNorm(s.o, s.h, R, H, lw.post_norm, eps, one_plus, s.x);
  // A MoE block ends in the residual add and the next layer's input norm (one kernel on a GPU),
  // unless its output must first be summed over the ranks.
  const bool last = l + 1 == c.num_layers;
  const bool residual_in_moe = lw.is_moe && !last && !ctx.comm;
  Backend::ResidualNorm next;
  if (residual_in_moe) {
    next.h = s.h;
    next.w = w.layers[l + 1].input_norm;
    next.eps = eps;
    next.one_plus = one_plus;
    next.y = s.x;
  }
  if (lw.is_moe)
    MoeForward(ctx, lw.moe, s.x, s.o, expert_counts, residual_in_moe ? &next : nullptr);
  else
    DenseMlpForward(be, lw.mlp, R, s.x, s.o);
  all_reduce(s.o);  // this rank's experts / FFN columns
  if (!residual_in_moe) {
    if (!last)
      be.AddRmsNorm(s.o, s.h, R, H, w.layers[l + 1].input_norm, eps, one_plus, s.x);
    else
      be.Add(s.o, R * H, s.h);
  }
}

// Every attention layer has the config's shape.
int64_t KvValuesPerToken(const ModelConfig& c, int64_t) { return 2 * c.num_kv_heads * c.head_dim; }

// No logits transform, no canvas decoder; splits over the ranks of a tensor-parallel group.
const ArchBody kBody{Tensors, Load, Embed, Layer, /*logits=*/nullptr, KvValuesPerToken,
                     /*self_conditioning=*/nullptr, /*tensor_parallel=*/true};

}  // namespace

const ArchBody& QwenBody() { return kBody; }

}  // namespace tessera
