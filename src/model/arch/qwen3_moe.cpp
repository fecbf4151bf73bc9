// tessera model: Qwen3-MoE (Qwen3MoeForCausalLM; SDAR-MoE diffusion checkpoints share it): every
// layer full attention with per-head q/k RMSNorm (w * x) before RoPE, softmax top-k router, dense
// layers from mlp_only_layers / decoder_sparse_step. No Gated DeltaNet layers. Its layer, tensors
// and loading are the Qwen families' shared body (qwen_body.cpp).
#include "core/error.h"
#include "model/arch/arch.h"

namespace tessera {

namespace {

void NoGdnTensors(const ModelConfig&, const std::string& prefix, std::vector<ExpectedTensor>*) {
  Fail(ErrorKind::kCorrupt, "{}: qwen3_moe has no linear-attention layers", prefix);
}

void NoGdnLoad(const ModelConfig&, const std::string& prefix, WeightLoader&, GdnWeights*) {
  Fail(ErrorKind::kCorrupt, "{}: qwen3_moe has no linear-attention layers", prefix);
}

}  // namespace

const ArchSpec& Qwen3MoeArch() {
  static const ArchSpec spec{ModelFamily::kQwen3Moe, "qwen3_moe", NoGdnTensors, NoGdnLoad, &QwenBody()};
  return spec;
}

}  // namespace tessera
