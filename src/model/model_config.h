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

enum class ModelFamily { kQwen3Moe, kQwen3Next, kQwen35Moe };
enum class LayerKind { kFullAttention, kLinearAttention };  // linear = Gated DeltaNet
enum class RmsNormStyle { kScale, kOnePlusScale };          // w * x_hat  vs  (1 + w) * x_hat

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

}  // namespace tessera
