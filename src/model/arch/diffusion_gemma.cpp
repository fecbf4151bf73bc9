// tessera model: DiffusionGemma (DiffusionGemmaForBlockDiffusion, model_type diffusion_gemma): the
// Gemma 4 MoE text stack, composed here from the shared layers as docs/DIFFUSION_GEMMA.md sections
// 3-4 describe it. Per layer (3.1): input norm, attention of the layer's own shape (sliding window
// with its head dim / KV heads and default RoPE, or global with V from K, a weightless V norm and
// proportional RoPE; scores unscaled), post-attention norm into the residual h; then a dense gelu-tanh
// MLP and the routed experts side by side, each between its own pre / post norms, the router reading
// h itself (weightless norm times router.scale / sqrt(H), per-expert scales after renormalisation);
// their sum normed, added to h, the whole scaled by the stack's layer_scalar. Embedding times
// sqrt(H) (rounded to bf16 for bf16 weights), final norm, lm_head (the embedding when tied), tanh soft-cap.
// Two paths, chosen per row: committed rows are the ENCODER (a prompt,
// a commit: causal, written to the cache, the raw scaled embedding, the encoder's layer_scalars); a
// segment's uncommitted rows are a CANVAS, one denoising step of the DECODER (section 5: the
// embedding plus the self-conditioning MLP of the previous step's soft embedding, normalised without
// weight even at the first step; the decoder's layer_scalars; bidirectional attention over the
// committed keys and the canvas, in sliding layers only the last W-1 committed keys: transformers'
// cached generation path, docs OPEN 2; nothing written to the cache).
// Checkpoint names (section 4): the tied stack under model.decoder.* (or, in the converter's layout,
// model.encoder.language_model.*), layer_scalar per stack, no lm_head.weight when tied; the vision
// tower is skipped by the loader's known-unused list. An untied checkpoint (tie_word_embeddings
// false, docs OPEN 5) holds two whole stacks and an lm_head: each row then runs through its own
// stack's weights (embedding, layers, final norm), the two kinds of rows of one batch gathered apart
// around the one attention call they share.
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
  std::vector<GemmaLayer> layers;  // the encoder stack's (tied: the one stack's)
  // Untied checkpoints only: the decoder stack's layers (ModelWeights::layers holds the encoder's),
  // its embedding and its layer extras (the same scalars as `layers`).
  bool untied = false;
  std::vector<LayerWeights> decoder_layers;
  std::vector<GemmaLayer> decoder_extras;
  Tensor decoder_embed;  // the canvas rows' embedding and the self-conditioning product (tied: embed)
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

// One stack's weights under prefix P (embedding, layers, final norm); its layer_scalars are listed
// by Tensors, since a tied checkpoint keeps both stacks' scalars but one stack.
void StackTensors(const ModelConfig& c, const std::string& P, std::vector<ExpectedTensor>* out) {
  const size_t first = out->size();
  const int64_t H = c.hidden_size, V = c.vocab_size, E = c.num_experts, I = c.moe_intermediate_size;
  const int64_t F = c.intermediate_size, nh = c.num_heads;
  out->push_back({P + "embed_tokens.weight", {V, H}});
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const AttentionLayerSpec& a = c.attention_layers.at(l);
    const std::string p = LayerPrefix(P, l), s = p + "self_attn.";
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
  }
  out->push_back({P + "norm.weight", {H}});
  if (P == kEnc)  // listed only for an untied checkpoint, where the decoder's stack is the first
    for (size_t i = first; i < out->size(); ++i) (*out)[i].second_stack = true;
}

// The saved layout: model.decoder.* (tied: the encoder's weights are tied to it), both stacks'
// layer_scalar, the self-conditioning MLP; untied, the encoder stack under
// model.encoder.language_model.* and lm_head.weight as well (no lm_head.weight when tied).
void Tensors(const ModelConfig& c, std::vector<ExpectedTensor>* out) {
  const int64_t H = c.hidden_size, V = c.vocab_size, F = c.intermediate_size;
  StackTensors(c, kDec, out);
  if (!c.tie_word_embeddings) StackTensors(c, kEnc, out);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    out->push_back({LayerPrefix(kDec, l) + "layer_scalar", {1}});
    out->push_back({LayerPrefix(kEnc, l) + "layer_scalar", {1}});
  }
  const std::string sc = kDec + "self_conditioning.";
  out->push_back({sc + "pre_norm.weight", {H}});
  out->push_back({sc + "gate_proj.weight", {F, H}});
  out->push_back({sc + "up_proj.weight", {F, H}});
  out->push_back({sc + "down_proj.weight", {H, F}});
  if (!c.tie_word_embeddings) out->push_back({"lm_head.weight", {V, H}});
}

// One stack's layers under prefix P (layer_scalars aside: Load reads them per stack).
void LoadStackLayers(const ModelConfig& c, WeightLoader& L, const std::string& P, const float* ones,
                     std::vector<LayerWeights>* layers, std::vector<GemmaLayer>* extras) {
  const int64_t H = c.hidden_size, E = c.num_experts, F = c.intermediate_size, nh = c.num_heads;
  const float router_mult = static_cast<float>(1.0 / std::sqrt(static_cast<double>(H)));
  layers->resize(c.num_layers);
  extras->resize(c.num_layers);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const AttentionLayerSpec& a = c.attention_layers[l];
    LayerWeights& lw = (*layers)[l];
    GemmaLayer& gl = (*extras)[l];
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
  }
}

void Load(const ModelConfig& c, WeightLoader& L, ModelWeights* out) {
  const char* fam = FamilyName(c.family);
  if (static_cast<int64_t>(c.attention_layers.size()) != c.num_layers)
    Fail(ErrorKind::kInternal, "{}: {} attention layer specs for {} layers", fam, c.attention_layers.size(),
         c.num_layers);
  const int64_t H = c.hidden_size, V = c.vocab_size, F = c.intermediate_size;
  auto g = std::make_shared<GemmaWeights>();
  g->untied = !c.tie_word_embeddings;  // transformers then unties the encoder and decoder stacks too (docs OPEN 5)
  // A checkpoint of the other kind: name the config key, not the first tensor found missing or unused.
  const bool two_embeddings = L.Has(kDec + "embed_tokens.weight") && L.Has(kEnc + "embed_tokens.weight");
  if (!g->untied && two_embeddings)
    Fail(ErrorKind::kCorrupt, "{}: the checkpoint holds two stacks ({}* and {}*) but config.json ties them "
         "(tie_word_embeddings true or absent)", fam, kEnc, kDec);
  if (g->untied && !two_embeddings)
    Fail(ErrorKind::kCorrupt, "{}: config.json has tie_word_embeddings false (two stacks) but the checkpoint holds "
         "one ({}embed_tokens.weight and {}embed_tokens.weight are not both there)", fam, kEnc, kDec);
  // The tied stack: the saved layout keeps model.decoder.*, the converter's model.encoder.language_model.*.
  // Untied: the encoder's own stack.
  const std::string P = g->untied ? kEnc : L.Has(kDec + "embed_tokens.weight") ? kDec : kEnc;
  out->embed = L.Matrix(P + "embed_tokens.weight", {V, H});
  g->decoder_embed = g->untied ? L.Matrix(kDec + "embed_tokens.weight", {V, H}) : out->embed;
  // transformers multiplies by embed_scale.to(weight dtype): bf16(sqrt(2816)) = 53.0 (docs 3.5).
  const float scale = static_cast<float>(c.embedding_multiplier);
  g->embed_scale = out->embed.dtype == DType::kBF16 ? Bf16ToF32(F32ToBf16(scale)) : scale;
  int64_t max_head_dim = 0;
  for (const AttentionLayerSpec& a : c.attention_layers) max_head_dim = std::max(max_head_dim, a.head_dim);
  const float* ones = L.HostVector(std::vector<float>(static_cast<size_t>(std::max(max_head_dim, H)), 1.0f));
  g->ones = ones;
  LoadStackLayers(c, L, P, ones, &out->layers, &g->layers);
  if (g->untied) LoadStackLayers(c, L, kDec, ones, &g->decoder_layers, &g->decoder_extras);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    GemmaLayer& gl = g->layers[l];
    // layer_scalar is a buffer, not tied: each stack keeps its own (a tied checkpoint with one set
    // gives it to both; docs OPEN 4).
    const std::string dec = LayerPrefix(kDec, l) + "layer_scalar", enc = LayerPrefix(kEnc, l) + "layer_scalar";
    const bool has_dec = L.Has(dec), has_enc = L.Has(enc);
    if (g->untied) {  // two stacks: each its own, both required
      gl.decoder_scalar = L.Scalar(dec);
      gl.encoder_scalar = L.Scalar(enc);
      g->decoder_extras[l].decoder_scalar = gl.decoder_scalar;
      g->decoder_extras[l].encoder_scalar = gl.encoder_scalar;
    } else {
      gl.decoder_scalar = L.Scalar(has_dec || !has_enc ? dec : enc);  // neither: fails naming the decoder's
      gl.encoder_scalar = has_enc ? L.Scalar(enc) : gl.decoder_scalar;
    }
  }
  out->final_norm = L.Vector(P + "norm.weight", {H});
  if (g->untied) out->canvas_final_norm = L.Vector(kDec + "norm.weight", {H});
  if (g->untied || L.Has("lm_head.weight")) {  // untied: required (missing fails naming it)
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
  const int64_t Rc = CanvasRows(ctx);
  if (g.untied)  // canvas rows embed with the decoder stack's table
    for (const SegmentRows& s : ctx.segments)
      if (s.canvas)
        be.Embedding(g.decoder_embed, tokens + s.row0 + s.commit_len, s.T - s.commit_len,
                     h + (s.row0 + s.commit_len) * H);
  be.Scale(h, ctx.rows * H, g.embed_scale);
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

// One stack's weights of layer l.
struct StackLayer {
  const LayerWeights& lw;
  const GemmaLayer& gl;
};

// docs 3.1 after the attention's core, over ctx.rows rows of one stack: h += post_attention_layernorm(
// o_proj(attn)); then the dense MLP and the experts side by side on h, each between its own norms (the
// router reads h itself), and h += post_feedforward_layernorm(m1 + m2). The layer_scalar is the
// caller's (it follows the row, not the weights).
void LayerAfterAttention(const LayerContext& ctx, const StackLayer& st, const float* attn, float* h,
                         int32_t* expert_counts) {
  Backend& be = *ctx.be;
  const ModelConfig& c = *ctx.cfg;
  const int64_t R = ctx.rows, H = c.hidden_size;
  const float eps = static_cast<float>(c.rms_norm_eps);
  auto norm = [&](const float* in, const float* weight, float* y) { be.RmsNorm(in, R, H, H, weight, eps, false, y, H); };
  DeviceBuffer x = DeviceBuffer::Floats(be, R * H), o = DeviceBuffer::Floats(be, R * H),
               m = DeviceBuffer::Floats(be, R * H);
  be.MatMul(attn, R, st.lw.attn.o_proj, o.f32());
  norm(o.f32(), st.lw.post_norm, o.f32());
  be.Add(o.f32(), R * H, h);
  norm(h, st.gl.pre_ff_norm, x.f32());
  DenseMlpForward(be, st.lw.mlp, R, x.f32(), o.f32(), ActOf(c));
  norm(o.f32(), st.gl.post_ff_norm_1, o.f32());
  norm(h, st.gl.pre_ff_norm_2, x.f32());
  MoeRoutedForward(ctx, st.lw.moe, h, x.f32(), ActOf(c), m.f32(), expert_counts);
  norm(m.f32(), st.gl.post_ff_norm_2, m.f32());
  be.Add(m.f32(), R * H, o.f32());
  norm(o.f32(), st.gl.post_ff_norm, o.f32());
  be.Add(o.f32(), R * H, h);
}

// The q / k / v of `rows` rows of one stack from their h: input_layernorm, then the projections.
void LayerAttentionInput(Backend& be, const ModelConfig& c, int64_t l, const StackLayer& st, int64_t rows,
                         const float* h, float* q, float* k, float* v) {
  const int64_t H = c.hidden_size;
  DeviceBuffer x = DeviceBuffer::Floats(be, rows * H);
  be.RmsNorm(h, rows, H, H, st.lw.input_norm, static_cast<float>(c.rms_norm_eps), false, x.f32(), H);
  SpecAttentionProject(be, c, c.attention_layers[l], st.lw.attn, rows, x.f32(), q, k, v);
}

// Every row through one stack's weights (a tied checkpoint, or a batch of one kind of rows).
void OneStackLayer(const LayerContext& ctx, int64_t l, const StackLayer& st, float* h, int32_t* expert_counts) {
  Backend& be = *ctx.be;
  const ModelConfig& c = *ctx.cfg;
  const AttentionLayerSpec& a = c.attention_layers[l];
  const int64_t R = ctx.rows, qdim = c.num_heads * a.head_dim, kvdim = a.num_kv_heads * a.head_dim;
  DeviceBuffer q = DeviceBuffer::Floats(be, R * qdim), k = DeviceBuffer::Floats(be, R * kvdim),
               v = DeviceBuffer::Floats(be, R * kvdim), attn = DeviceBuffer::Floats(be, R * qdim);
  LayerAttentionInput(be, c, l, st, R, h, q.f32(), k.f32(), v.f32());
  // Scores unscaled (q, k are normed).
  SpecAttentionAttend(ctx, a, 1.0f, st.lw.cache_index, q.f32(), k.f32(), v.f32(), attn.f32());
  LayerAfterAttention(ctx, st, attn.f32(), h, expert_counts);
}

// The rows of one stack in a batch of both (an untied checkpoint): runs [first row, count) in batch
// order, gathered into contiguous buffers for the per-row work and scattered back.
struct RowRuns {
  std::vector<std::pair<int64_t, int64_t>> runs;
  int64_t rows = 0;
  void Add(int64_t first, int64_t n) {
    if (n > 0) runs.push_back({first, n}), rows += n;
  }
  void Gather(Backend& be, const float* all, int64_t width, float* mine) const {
    int64_t at = 0;
    for (const auto& [r0, n] : runs) be.Copy2D(all + r0 * width, n, width, width, mine + at * width, width), at += n;
  }
  void Scatter(Backend& be, const float* mine, int64_t width, float* all) const {
    int64_t at = 0;
    for (const auto& [r0, n] : runs) be.Copy2D(mine + at * width, n, width, width, all + r0 * width, width), at += n;
  }
};

// Committed rows through the encoder stack, canvas rows through the decoder's, one attention over
// both (the canvas attends to the commit's keys as the cache will hold them).
void TwoStackLayer(const LayerContext& ctx, int64_t l, const StackLayer& enc, const StackLayer& dec, float* h,
                   int32_t* expert_counts) {
  Backend& be = *ctx.be;
  const ModelConfig& c = *ctx.cfg;
  const GemmaLayer& scalars = enc.gl;
  const AttentionLayerSpec& a = c.attention_layers[l];
  const int64_t R = ctx.rows, H = c.hidden_size, qdim = c.num_heads * a.head_dim, kvdim = a.num_kv_heads * a.head_dim;
  RowRuns kinds[2];  // [0] encoder rows, [1] canvas rows
  for (const SegmentRows& s : ctx.segments) {
    const int64_t committed = s.canvas ? s.commit_len : s.T;
    kinds[0].Add(s.row0, committed);
    kinds[1].Add(s.row0 + committed, s.T - committed);
  }
  const StackLayer* stacks[2] = {&enc, &dec};
  DeviceBuffer q = DeviceBuffer::Floats(be, R * qdim), k = DeviceBuffer::Floats(be, R * kvdim),
               v = DeviceBuffer::Floats(be, R * kvdim), attn = DeviceBuffer::Floats(be, R * qdim);
  for (int i = 0; i < 2; ++i) {
    const RowRuns& rr = kinds[i];
    const int64_t n = rr.rows;
    DeviceBuffer hs = DeviceBuffer::Floats(be, n * H), qs = DeviceBuffer::Floats(be, n * qdim),
                 ks = DeviceBuffer::Floats(be, n * kvdim), vs = DeviceBuffer::Floats(be, n * kvdim);
    rr.Gather(be, h, H, hs.f32());
    LayerAttentionInput(be, c, l, *stacks[i], n, hs.f32(), qs.f32(), ks.f32(), vs.f32());
    rr.Scatter(be, qs.f32(), qdim, q.f32());
    rr.Scatter(be, ks.f32(), kvdim, k.f32());
    rr.Scatter(be, vs.f32(), kvdim, v.f32());
  }
  SpecAttentionAttend(ctx, a, 1.0f, stacks[0]->lw.cache_index, q.f32(), k.f32(), v.f32(), attn.f32());
  for (int i = 0; i < 2; ++i) {
    const RowRuns& rr = kinds[i];
    const int64_t n = rr.rows;
    DeviceBuffer hs = DeviceBuffer::Floats(be, n * H), as = DeviceBuffer::Floats(be, n * qdim);
    rr.Gather(be, h, H, hs.f32());
    rr.Gather(be, attn.f32(), qdim, as.f32());
    LayerContext sub = ctx;  // the stack's rows alone (the MoE reads rows and router temperatures)
    sub.rows = n;
    sub.segments.clear();
    sub.positions = nullptr;
    std::vector<float> temperature;
    if (ctx.router_temperature) {
      for (const auto& [r0, cnt] : rr.runs)
        temperature.insert(temperature.end(), ctx.router_temperature + r0, ctx.router_temperature + r0 + cnt);
      sub.router_temperature = temperature.data();
    }
    LayerAfterAttention(sub, *stacks[i], as.f32(), hs.f32(), expert_counts);
    const float s = i == 0 ? scalars.encoder_scalar : scalars.decoder_scalar;
    if (s != 1.0f) be.Scale(hs.f32(), n * H, s);
    rr.Scatter(be, hs.f32(), H, h);
  }
}

// docs 3.1: (h + attention and feed-forward) * layer_scalar, the encoder stack's scalar on committed
// rows and the decoder's on canvas rows. Tied, every weight but layer_scalar is shared (ScaleByStack);
// untied, a batch of both kinds of rows takes TwoStackLayer. Its own scratch per layer: nothing is
// carried between layers but h (stream.x / o stay unused).
void Layer(const LayerContext& ctx, const ModelWeights& w, int64_t l, const LayerStream& stream,
           int32_t* expert_counts) {
  const GemmaWeights& g = Arch(w);
  const StackLayer enc{w.layers[l], g.layers[l]};
  const int64_t Rc = CanvasRows(ctx);
  if (g.untied && Rc > 0) {
    const StackLayer dec{g.decoder_layers[l], g.decoder_extras[l]};
    if (Rc < ctx.rows) return TwoStackLayer(ctx, l, enc, dec, stream.h, expert_counts);
    OneStackLayer(ctx, l, dec, stream.h, expert_counts);
  } else {
    OneStackLayer(ctx, l, enc, stream.h, expert_counts);
  }
  ScaleByStack(ctx, g.layers[l], stream.h);
}

void Logits(const LayerContext& ctx, float* logits, int64_t rows, int64_t vocab) {
  ctx.be->SoftCap(logits, rows * vocab, static_cast<float>(ctx.cfg->final_logit_softcap));
}

// docs 5: soft = softmax_f32(S) @ embed_tokens * embed_scale, S = z stored in the embedding's dtype
// (transformers casts the processed logits before keeping them: in a bf16 model z, up to 30 / t_min,
// is rounded to bf16, spacing 0.5 above 64, which visibly moves the softmax; the caller rounds). The
// probabilities stay f32 here (transformers rounds them to bf16 as well, an activation-sized error like
// every other activation tessera keeps in f32). The product is E (the decoder stack's embedding)
// without the transpose the lm_head uses.
void SelfConditioning(Backend& be, const ModelConfig& c, const ModelWeights& w, float* s, int64_t rows, float* out) {
  be.Softmax(s, rows, c.vocab_size);
  be.MatMulNoTrans(s, rows, Arch(w).decoder_embed, out);
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
