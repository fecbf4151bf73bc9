// tessera model: the hyper-parameters of a supported architecture, parsed from an HF config.json
// (with its nested text_config), in one struct shared by the loader, the architectures,
// `tessera inspect` and memory planning.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/hf_config.h"
#include "io/quant_config.h"

namespace tessera {

enum class ModelFamily { kQwen3Moe, kQwen3Next, kQwen35Moe, kDiffusionGemma };
// Which token mixer a layer has: softmax attention (its shape in AttentionLayerSpec where layers
// differ) or Gated DeltaNet ("linear attention").
enum class LayerKind { kFullAttention, kLinearAttention };
enum class RmsNormStyle { kScale, kOnePlusScale };  // w * x_hat  vs  (1 + w) * x_hat
enum class Activation { kSilu, kGeluTanh };         // of the gated MLPs and experts: act(gate) * up

// Rotary embedding of one attention layer, general enough for the families served: the dimension
// pairs (i, i + pair_offset) for i < rotated_pairs turn by position * inv_freq_i, inv_freq_i =
// theta^(-2i / freq_dim) / linear_factor; every other dimension passes unchanged.
//   full RoPE over d:                  rotated_pairs = pair_offset = d/2, freq_dim = d
//   Qwen partial RoPE (rotary_dim r):  rotated_pairs = pair_offset = r/2, freq_dim = r
//   Gemma 4 "proportional" (factor p): rotated_pairs = floor(p*d/2), pair_offset = d/2, freq_dim = d
struct RopeSpec {
  double theta = 10000.0;
  int64_t rotated_pairs = 0, pair_offset = 0, freq_dim = 0;
  double linear_factor = 1.0;
};

// The shape of one attention layer, for families whose attention layers differ (Gemma 4: sliding
// window layers and global layers with other head dims, KV heads and RoPE).
struct AttentionLayerSpec {
  int64_t sliding_window = 0;  // a causal query i sees keys (i - W, i]; 0: all
  int64_t head_dim = 0, num_kv_heads = 0;
  bool value_from_key = false;  // no v_proj: V is the raw k_proj output (then its own norm)
  RopeSpec rope;
};

struct ModelConfig {
  ModelFamily family = ModelFamily::kQwen3Moe;
  std::string model_type;    // as in the config (text_config's when nested)
  std::string architecture;  // architectures[0]
  bool nested_language_model = false;  // weights under model.language_model.* (Qwen3.5 VL wrapper)

  int64_t vocab_size = 0, hidden_size = 0, num_layers = 0;
  int64_t num_heads = 0, num_kv_heads = 0, head_dim = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  double partial_rotary_factor = 1.0;
  int64_t rotary_dim = 0;  // head_dim * partial_rotary_factor (even)
  int64_t max_position_embeddings = 0;
  bool tie_word_embeddings = false;
  bool attn_output_gate = false;  // q_proj also yields a sigmoid gate on the attention output
  RmsNormStyle norm_style = RmsNormStyle::kScale;
  std::vector<LayerKind> layer_kinds;  // one per layer

  // Gated DeltaNet (linear attention) layers.
  int64_t linear_conv_kernel = 0, linear_key_head_dim = 0, linear_value_head_dim = 0;
  int64_t linear_num_key_heads = 0, linear_num_value_heads = 0;

  // Feed-forward: MoE layers unless the layer is in mlp_only_layers or off the sparse step.
  int64_t num_experts = 0, num_experts_per_tok = 0, moe_intermediate_size = 0;
  int64_t shared_expert_intermediate_size = 0;  // 0 = no shared expert
  bool norm_topk_prob = true;
  int64_t decoder_sparse_step = 1;
  std::vector<int64_t> mlp_only_layers;
  int64_t intermediate_size = 0;  // dense FFN width

  // Token ids.
  std::vector<int64_t> eos_token_ids;  // config + generation_config, de-duplicated
  int64_t bos_token_id = -1;
  int64_t mask_token_id = -1;  // -1 = none declared

  // Block diffusion (declared by model_type sdar / sdar_moe / clover_moe or forced by flags).
  bool diffusion = false;
  int64_t block_size = 0;

  // Per-layer attention shapes (one entry per layer) for families that have them; empty for the Qwen
  // families, whose attention layers all use num_kv_heads / head_dim / rope_theta / rotary_dim above.
  std::vector<AttentionLayerSpec> attention_layers;
  Activation hidden_act = Activation::kSilu;
  double embedding_multiplier = 1.0;  // input embeddings are scaled by it (Gemma: sqrt(hidden_size))
  double final_logit_softcap = 0.0;   // logits = c * tanh(logits / c); 0: none
  // Uniform-state canvas diffusion (DiffusionGemma): canvases of this many tokens are denoised after
  // the committed text, each attending it and itself; 0 for other models. Not `diffusion`, which
  // is the masked block diffusion of SDAR / Clover.
  int64_t canvas_length = 0;

  // Quantized weights: the checkpoint's quantization_config (method kNone for float checkpoints), and
  // the code type float weights are quantized to at load (LoadOptions::quantization; kNone: kept).
  QuantConfig quant;
  QuantKind load_quant = QuantKind::kNone;
  // "bf16" / "fp8 block [128, 128] ..." / "int4 (quantized at load, group 128)": for logs and the API.
  std::string WeightFormat() const;

  bool IsMoeLayer(int64_t layer) const;
  int64_t NumLayersOf(LayerKind kind) const;
  // Width of the GDN conv / q,k,v projections: 2 * key_heads * key_dim + value_heads * value_dim.
  int64_t LinearConvDim() const;

  // Parses and validates; throws Error(kUnsupported) for an unknown architecture and
  // Error(kCorrupt) naming the key for a missing / wrong-typed / inconsistent value.
  static ModelConfig FromHf(const HfModelDir& dir);
};

const char* FamilyName(ModelFamily f);

// DiffusionGemma's config.json (nested text_config, Gemma 4 keys) into `m`, whose family, model_type,
// architecture and quant are set; docs/DIFFUSION_GEMMA.md section 2 lists the keys. Same errors as
// FromHf. Defined in config_diffusion_gemma.cpp.
void ParseDiffusionGemmaConfig(const HfModelDir& dir, const std::string& where, ModelConfig* m);

}  // namespace tessera
