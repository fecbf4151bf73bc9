// tessera model: DiffusionGemma (DiffusionGemmaForBlockDiffusion, model_type diffusion_gemma): the
// Gemma 4 MoE text stack, composed here from the shared layers as docs/DIFFUSION_GEMMA.md sections
// 3-4 describe it. Per layer (3.1): input norm, attention of the layer's own shape (sliding window
// with its head dim / KV heads and default RoPE, or global with V from K, a weightless V norm and
// proportional RoPE; scores unscaled), post-attention norm into the residual h; then a dense gelu-tanh
// MLP and the routed experts side by side, each between its own pre / post norms, the router reading
// h itself (weightless norm times router.scale / sqrt(H), per-expert scales after renormalisation);
// their sum normed, added to h, the whole scaled by the stack's layer_scalar. Embedding times
// sqrt(H) (rounded to bf16 for bf16 weights), final norm, tied lm_head, tanh soft-cap.
// Two paths through the one (tied) stack, chosen per row: committed rows are the ENCODER (a prompt,
// a commit: causal, written to the cache, the raw scaled embedding, the encoder's layer_scalars); a
// segment's uncommitted rows are a CANVAS, one denoising step of the DECODER (section 5: the
// embedding plus the self-conditioning MLP of the previous step's soft embedding, normalised without
// weight even at the first step; the decoder's layer_scalars; bidirectional attention over the
// committed keys and the canvas, in sliding layers only the last W-1 committed keys: transformers'
// cached generation path, docs OPEN 2; nothing written to the cache).
// Checkpoint names (section 4): the tied stack under model.decoder.* (or, in the converter's layout,
// model.encoder.language_model.*), layer_scalar per stack, no lm_head.weight when tied; the vision
// tower is skipped by the loader's known-unused list. Untied checkpoints (two stacks) are refused.
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "model/arch/arch.h"
#include "model/layers/attention.h"
#include "model/layers/context.h"
#include "model/layers/moe.h"
#include "model/loader.h"

namespace tessera {

namespace {

const std::string kDec = "model.decoder.";
const std::string kEnc = "model.encoder.language_model.";

// What a Gemma layer has beyond LayerWeights (input_norm = input_layernorm, post_norm =
// post_attention_layernorm, attn, mlp = the dense MLP, moe = router + experts).
struct GemmaLayer {
  const float* pre_ff_norm = nullptr;     // pre_feedforward_layernorm: the dense MLP's input
  const float* post_ff_norm_1 = nullptr;  // post_feedforward_layernorm_1: after the dense MLP
  const float* pre_ff_norm_2 = nullptr;   // pre_feedforward_layernorm_2: the experts' input
  const float* post_ff_norm_2 = nullptr;  // post_feedforward_layernorm_2: after the experts
  const float* post_ff_norm = nullptr;    // post_feedforward_layernorm: after their sum
  float encoder_scalar = 1.0f, decoder_scalar = 1.0f;  // each stack's layer_scalar
};

struct GemmaWeights {
  std::vector<GemmaLayer> layers;
  float embed_scale = 1.0f;  // sqrt(H), in the embedding's dtype (docs 3.5)
  // Decoder input (docs 5).
  MlpWeights self_cond;
  const float* self_cond_pre_norm = nullptr;
  const float* ones = nullptr;  // [max(H, head dims)] of 1: the weightless norms (v_norm, sc.post_norm)
};

const GemmaWeights& Arch(const ModelWeights& w) { return *static_cast<const GemmaWeights*>(w.arch.get()); }

std::string LayerPrefix(const std::string& stack, int64_t l) { return stack + "layers." + std::to_string(l) + "."; }

GluAct ActOf(const ModelConfig& c) { return c.hidden_act == Activation::kGeluTanh ? GluAct::kGeluTanh : GluAct::kSilu; }

const char* const kLayerNorms[] = {"input_layernorm",           "post_attention_layernorm",
                                   "pre_feedforward_layernorm", "post_feedforward_layernorm_1",
                                   "pre_feedforward_layernorm_2", "post_feedforward_layernorm_2",
                                   "post_feedforward_layernorm"};

// The saved layout: model.decoder.* (the encoder's weights are tied to it), both stacks'
// layer_scalar, no lm_head.weight when tied.
void Tensors(const ModelConfig& c, std::vector<ExpectedTensor>* out) {
  const int64_t H = c.hidden_size, V = c.vocab_size, E = c.num_experts, I = c.moe_intermediate_size;
  const int64_t F = c.intermediate_size, nh = c.num_heads;
  out->push_back({kDec + "embed_tokens.weight", {V, H}});
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const AttentionLayerSpec& a = c.attention_layers.at(l);
    const std::string p = LayerPrefix(kDec, l), s = p + "self_attn.";
    for (const char* n : kLayerNorms) out->push_back({p + n + ".weight", {H}});
    out->push_back({s + "q_proj.weight", {nh * a.head_dim, H}});
    out->push_back({s + "k_proj.weight", {a.num_kv_heads * a.head_dim, H}});
    if (!a.value_from_key) out->push_back({s + "v_proj.weight", {a.num_kv_heads * a.head_dim, H}});
    out->push_back({s + "o_proj.weight", {H, nh * a.head_dim}});
    out->push_back({s + "q_norm.weight", {a.head_dim}});
    out->push_back({s + "k_norm.weight", {a.head_dim}});
    out->push_back({p + "mlp.gate_proj.weight", {F, H}});
    out->push_back({p + "mlp.up_proj.weight", {F, H}});
    out->push_back({p + "mlp.down_proj.weight", {H, F}});
    out->push_back({p + "router.proj.weight", {E, H}});
    out->push_back({p + "router.scale", {H}});
    out->push_back({p + "router.per_expert_scale", {E}});
    out->push_back({p + "experts.gate_up_proj", {E, 2 * I, H}});
    out->push_back({p + "experts.down_proj", {E, H, I}});
    out->push_back({p + "layer_scalar", {1}});
    out->push_back({LayerPrefix(kEnc, l) + "layer_scalar", {1}});
  }
  out->push_back({kDec + "norm.weight", {H}});
  const std::string sc = kDec + "self_conditioning.";
  out->push_back({sc + "pre_norm.weight", {H}});
  out->push_back({sc + "gate_proj.weight", {F, H}});
  out->push_back({sc + "up_proj.weight", {F, H}});
  out->push_back({sc + "down_proj.weight", {H, F}});
  if (!c.tie_word_embeddings) out->push_back({"lm_head.weight", {V, H}});
}

void Load(const ModelConfig& c, WeightLoader& L, ModelWeights* out) {
  const char* fam = FamilyName(c.family);
  if (!c.tie_word_embeddings)  // transformers then unties the encoder and decoder stacks too (docs OPEN 5)
    Fail(ErrorKind::kUnsupported, "{}: untied checkpoints (tie_word_embeddings false: two stacks) are not supported",
         fam);
  if (static_cast<int64_t>(c.attention_layers.size()) != c.num_layers)
    Fail(ErrorKind::kInternal, "{}: {} attention layer specs for {} layers", fam, c.attention_layers.size(),
         c.num_layers);
  const int64_t H = c.hidden_size, V = c.vocab_size, E = c.num_experts, F = c.intermediate_size, nh = c.num_heads;
  // The tied stack: the saved layout keeps model.decoder.*, the converter's model.encoder.language_model.*.
  const std::string P = L.Has(kDec + "embed_tokens.weight") ? kDec : kEnc;
  auto g = std::make_shared<GemmaWeights>();
  out->embed = L.Matrix(P + "embed_tokens.weight", {V, H});
  // transformers multiplies by embed_scale.to(weight dtype): bf16(sqrt(2816)) = 53.0 (docs 3.5).
  const float scale = static_cast<float>(c.embedding_multiplier);
  g->embed_scale = out->embed.dtype == DType::kBF16 ? Bf16ToF32(F32ToBf16(scale)) : scale;
  int64_t max_head_dim = 0;
  for (const AttentionLayerSpec& a : c.attention_layers) max_head_dim = std::max(max_head_dim, a.head_dim);
  const float* ones = L.HostVector(std::vector<float>(static_cast<size_t>(std::max(max_head_dim, H)), 1.0f));
  g->ones = ones;
  const float router_mult = static_cast<float>(1.0 / std::sqrt(static_cast<double>(H)));
  out->layers.resize(c.num_layers);
  g->layers.resize(c.num_layers);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const AttentionLayerSpec& a = c.attention_layers[l];
    LayerWeights& lw = out->layers[l];
    GemmaLayer& gl = g->layers[l];
    const std::string p = LayerPrefix(P, l), s = p + "self_attn.";
    lw.kind = LayerKind::kFullAttention;  // softmax attention; its shape is attention_layers[l]
    lw.is_moe = true;
    lw.cache_index = l;
    lw.input_norm = L.Vector(p + "input_layernorm.weight", {H});
    lw.post_norm = L.Vector(p + "post_attention_layernorm.weight", {H});
    const int64_t d = a.head_dim, kv = a.num_kv_heads * d;
    lw.attn.q_proj = L.Matrix(s + "q_proj.weight", {nh * d, H});
    lw.attn.k_proj = L.Matrix(s + "k_proj.weight", {kv, H});
    if (!a.value_from_key) lw.attn.v_proj = L.Matrix(s + "v_proj.weight", {kv, H});
    lw.attn.o_proj = L.Matrix(s + "o_proj.weight", {H, nh * d});
    lw.attn.q_norm = L.Vector(s + "q_norm.weight", {d});
    lw.attn.k_norm = L.Vector(s + "k_norm.weight", {d});
    lw.attn.v_norm = ones;
    lw.mlp = LoadMlp(L, p + "mlp.", F, H, {0, F});
    lw.moe.router = L.Matrix(p + "router.proj.weight", {E, H});
    {  // the router's input norm weight: router.scale * H^-0.5, folded once (dummy weights: scale 1)
      std::vector<float> w(static_cast<size_t>(H), 1.0f);
      if (!L.dummy()) {
        const TensorView& v = L.View(p + "router.scale", {H});
        ConvertToF32(v.dtype, v.data, w.data(), w.size());
      }
      for (float& x : w) x *= router_mult;
      lw.moe.router_input_norm = L.HostVector(std::move(w));
    }
    lw.moe.per_expert_scale = L.Vector(p + "router.per_expert_scale", {E});
    LoadExperts(c, L, p, &lw.moe);
    gl.pre_ff_norm = L.Vector(p + "pre_feedforward_layernorm.weight", {H});
    gl.post_ff_norm_1 = L.Vector(p + "post_feedforward_layernorm_1.weight", {H});
    gl.pre_ff_norm_2 = L.Vector(p + "pre_feedforward_layernorm_2.weight", {H});
    gl.post_ff_norm_2 = L.Vector(p + "post_feedforward_layernorm_2.weight", {H});
    gl.post_ff_norm = L.Vector(p + "post_feedforward_layernorm.weight", {H});
    // layer_scalar is a buffer, not tied: each stack keeps its own (a checkpoint with one set gives it
    // to both; docs OPEN 4).
    const std::string dec = LayerPrefix(kDec, l) + "layer_scalar", enc = LayerPrefix(kEnc, l) + "layer_scalar";
    const bool has_dec = L.Has(dec), has_enc = L.Has(enc);
    gl.decoder_scalar = L.Scalar(has_dec || !has_enc ? dec : enc);  // neither: fails naming the decoder's
    gl.encoder_scalar = has_enc ? L.Scalar(enc) : gl.decoder_scalar;
  }
  out->final_norm = L.Vector(P + "norm.weight", {H});
  if (L.Has("lm_head.weight")) {
    out->lm_head = L.Matrix("lm_head.weight", {V, H});
  } else {
    out->lm_head = out->embed;  // tied to model.decoder.embed_tokens
  }
  const std::string sc = kDec + "self_conditioning.";
  g->self_cond_pre_norm = L.Vector(sc + "pre_norm.weight", {H});
  g->self_cond = LoadMlp(L, sc, F, H, {0, F});
  out->arch = std::move(g);
}

// The rows of the segments' canvases (decoder rows): [row0 + commit_len, row0 + T) each.
int64_t CanvasRows(const LayerContext& ctx) {
  int64_t n = 0;
  for (const SegmentRows& s : ctx.segments)
    if (s.canvas) n += s.T - s.commit_len;
  return n;
}

// Encoder rows: the raw scaled embedding e. Canvas rows (docs 5): x0 = rmsnorm_noweight(e + sc), sc =
// the self-conditioning MLP of pre_norm(soft), soft the segment's [C, H] input (zeros at a canvas's
// first step, where sc is 0 and x0 = rmsnorm_noweight(e): the norm is applied all the same).
void Embed(const LayerContext& ctx, const ModelWeights& w, const int32_t* tokens, float* h) {
  Backend& be = *ctx.be;
  const GemmaWeights& g = Arch(w);
  const int64_t H = ctx.cfg->hidden_size;
  be.Embedding(w.embed, tokens, ctx.rows, h);
  be.Scale(h, ctx.rows * H, g.embed_scale);
  const int64_t Rc = CanvasRows(ctx);
  if (Rc == 0) return;
  const float eps = static_cast<float>(ctx.cfg->rms_norm_eps);
  bool any_soft = false, every_soft = true;
  for (const SegmentRows& s : ctx.segments) {
    if (!s.canvas) continue;
    const bool has = s.self_conditioning || s.kept_input;
    any_soft |= has, every_soft &= has;
  }
  if (any_soft) {  // one MLP over every canvas row of the batch (rows without an input stay zero: sc = 0)
    DeviceBuffer x = DeviceBuffer::Floats(be, Rc * H), sc = DeviceBuffer::Floats(be, Rc * H);
    if (!every_soft) be.Zero(x.data(), x.bytes());
    int64_t at = 0;
    for (const SegmentRows& s : ctx.segments) {  // each input into its rows: from the host, or kept
      if (!s.canvas) continue;
      const int64_t C = s.T - s.commit_len;
      if (s.kept_input) be.Copy2D(s.kept_input, C, H, H, x.f32() + at * H, H);
      else if (s.self_conditioning) be.Upload(x.f32() + at * H, s.self_conditioning, static_cast<size_t>(C * H) * 4);
      at += C;
    }
    be.RmsNorm(x.f32(), Rc, H, H, g.self_cond_pre_norm, eps, false, x.f32(), H);
    DenseMlpForward(be, g.self_cond, Rc, x.f32(), sc.f32(), ActOf(*ctx.cfg));
    at = 0;
    for (const SegmentRows& s : ctx.segments) {
      if (!s.canvas) continue;
      const int64_t C = s.T - s.commit_len;
      be.Add(sc.f32() + at * H, C * H, h + (s.row0 + s.commit_len) * H);
      at += C;
    }
  }
  for (const SegmentRows& s : ctx.segments)  // sc.post_norm: weightless, always applied
    if (s.canvas) {
      float* x0 = h + (s.row0 + s.commit_len) * H;
      be.RmsNorm(x0, s.T - s.commit_len, H, H, g.ones, eps, false, x0, H);
    }
}

// (h + ...) * layer_scalar: the encoder stack's on committed rows, the decoder's on canvas rows.
void ScaleByStack(const LayerContext& ctx, const GemmaLayer& gl, float* h) {
  Backend& be = *ctx.be;
  const int64_t H = ctx.cfg->hidden_size;
  const int64_t Rc = CanvasRows(ctx);
  if (Rc == 0 || Rc == ctx.rows || gl.encoder_scalar == gl.decoder_scalar) {  // one scalar for every row
    const float s = Rc == 0 ? gl.encoder_scalar : gl.decoder_scalar;
    if (s != 1.0f) be.Scale(h, ctx.rows * H, s);
    return;
  }
  for (const SegmentRows& s : ctx.segments) {
    const int64_t enc = s.canvas ? s.commit_len : s.T;
    if (enc > 0 && gl.encoder_scalar != 1.0f) be.Scale(h + s.row0 * H, enc * H, gl.encoder_scalar);
    if (s.T > enc && gl.decoder_scalar != 1.0f) be.Scale(h + (s.row0 + enc) * H, (s.T - enc) * H, gl.decoder_scalar);
  }
}

// docs 3.1; the stacks share every weight but layer_scalar (ScaleByStack).
// Its own scratch per layer: nothing is carried between layers but h (stream.x / o stay unused).
void Layer(const LayerContext& ctx, const ModelWeights& w, int64_t l, const LayerStream& stream,
           int32_t* expert_counts) {
  float* const h = stream.h;
  Backend& be = *ctx.be;
  const ModelConfig& c = *ctx.cfg;
  const LayerWeights& lw = w.layers[l];
  const GemmaLayer& gl = Arch(w).layers[l];
  const int64_t R = ctx.rows, H = c.hidden_size;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const GluAct act = ActOf(c);
  auto norm = [&](const float* in, const float* weight, float* y) { be.RmsNorm(in, R, H, H, weight, eps, false, y, H); };
  DeviceBuffer x = DeviceBuffer::Floats(be, R * H), o = DeviceBuffer::Floats(be, R * H),
               m = DeviceBuffer::Floats(be, R * H);
  // h = h + post_attention_layernorm(attn(input_layernorm(h))); scores unscaled (q, k are normed).
  norm(h, lw.input_norm, x.f32());
  SpecAttentionForward(ctx, c.attention_layers[l], lw.attn, 1.0f, lw.cache_index, x.f32(), o.f32());
  norm(o.f32(), lw.post_norm, o.f32());
  be.Add(o.f32(), R * H, h);
  // Dense MLP and experts side by side on h, each between its own norms; the router reads h itself.
  norm(h, gl.pre_ff_norm, x.f32());
  DenseMlpForward(be, lw.mlp, R, x.f32(), o.f32(), act);
  norm(o.f32(), gl.post_ff_norm_1, o.f32());
  norm(h, gl.pre_ff_norm_2, x.f32());
  MoeRoutedForward(ctx, lw.moe, h, x.f32(), act, m.f32(), expert_counts);
  norm(m.f32(), gl.post_ff_norm_2, m.f32());
  be.Add(m.f32(), R * H, o.f32());
  norm(o.f32(), gl.post_ff_norm, o.f32());
  // (h + post_feedforward_layernorm(m1 + m2)) * layer_scalar
  be.Add(o.f32(), R * H, h);
  ScaleByStack(ctx, gl, h);
}

void Logits(const LayerContext& ctx, float* logits, int64_t rows, int64_t vocab) {
  ctx.be->SoftCap(logits, rows * vocab, static_cast<float>(ctx.cfg->final_logit_softcap));
}

// docs 5: soft = softmax_f32(S) @ embed_tokens * embed_scale, S = z stored in the embedding's dtype
// (transformers casts the processed logits before keeping them: in a bf16 model z, up to 30 / t_min,
// is rounded to bf16, spacing 0.5 above 64, which visibly moves the softmax; the caller rounds). The
// probabilities stay f32 here (transformers rounds them to bf16 as well, an activation-sized error like
// every other activation tessera keeps in f32). The product is E without the transpose the lm_head uses.
void SelfConditioning(Backend& be, const ModelConfig& c, const ModelWeights& w, float* s, int64_t rows, float* out) {
  be.Softmax(s, rows, c.vocab_size);
  be.MatMulNoTrans(s, rows, w.embed, out);
  be.Scale(out, rows * c.hidden_size, Arch(w).embed_scale);
}

int64_t KvValuesPerToken(const ModelConfig& c, int64_t l) {
  const AttentionLayerSpec& a = c.attention_layers.at(l);
  return 2 * a.num_kv_heads * a.head_dim;
}

void NoGdnTensors(const ModelConfig&, const std::string& prefix, std::vector<ExpectedTensor>*) {
  Fail(ErrorKind::kCorrupt, "{}: diffusion_gemma has no linear-attention layers", prefix);
}

void NoGdnLoad(const ModelConfig&, const std::string& prefix, WeightLoader&, GdnWeights*) {
  Fail(ErrorKind::kCorrupt, "{}: diffusion_gemma has no linear-attention layers", prefix);
}

// Not split over ranks: its layer has no shards or all-reduces yet (Model::Load refuses it).
const ArchBody kBody{Tensors, Load, Embed, Layer, Logits, KvValuesPerToken, SelfConditioning, /*tensor_parallel=*/false};

}  // namespace

const ArchSpec& DiffusionGemmaArch() {
  static const ArchSpec spec{ModelFamily::kDiffusionGemma, "diffusion_gemma", NoGdnTensors, NoGdnLoad, &kBody};
  return spec;
}

}  // namespace tessera
