// tessera model: WeightCensus (weight_census.h), counted over the tensors an architecture expects.
#include "model/weight_census.h"

#include <algorithm>
#include <string>

#include "model/model.h"

namespace tessera {

namespace {

// Bytes of a [n, k] Linear weight in the model's format (as the loader holds it).
double MatrixBytes(const ModelConfig& cfg, const std::string& name, int64_t n, int64_t k) {
  const bool eligible = name.find("embed_tokens") == std::string::npos && name.rfind("lm_head", 0) != 0 &&
                        name.find("mlp.gate.weight") == std::string::npos &&
                        name.find("router.proj.weight") == std::string::npos &&
                        name.find("shared_expert_gate") == std::string::npos;
  QuantKind kind = cfg.load_quant;
  int64_t group = kind == QuantKind::kInt4 ? std::min<int64_t>(kLoadInt4Group, k) : k;
  bool zeros = false;
  if (cfg.quant.quantized()) {
    const QuantScheme& s = cfg.quant.schemes.at(0);
    kind = s.kind;
    group = s.strategy == "group" ? std::min(s.group_size, k) : s.strategy == "block" ? std::min(s.block_cols, k) : k;
    zeros = !s.symmetric && kind != QuantKind::kFp8;
  }
  if (!eligible || kind == QuantKind::kNone) return 2.0 * static_cast<double>(n) * static_cast<double>(k);
  const double groups = static_cast<double>(n) * static_cast<double>((k + group - 1) / group);
  return static_cast<double>(n) * static_cast<double>(QuantRowBytes(kind, k)) + groups * 4 * (zeros ? 2 : 1);
}

bool EndsWith(const std::string& s, const char* suffix) {
  const std::string x(suffix);
  return s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0;
}

// Roles by name, for every family's names: the input embedding ("model.embed_tokens.weight", or
// DiffusionGemma's "model.decoder.embed_tokens.weight") and the routed experts (Qwen's
// "mlp.experts.N.*_proj.weight", Gemma's fused 3-D "experts.gate_up_proj" / "experts.down_proj").
bool IsEmbedding(const std::string& name) { return EndsWith(name, "embed_tokens.weight"); }
bool IsRoutedExpert(const std::string& name) { return name.find(".experts.") != std::string::npos; }

}  // namespace

WeightCensus WeightCensus::Of(const ModelConfig& cfg) {
  WeightCensus w;
  w.format = cfg.WeightFormat();
  for (const ExpectedTensor& t : ExpectedTensors(cfg)) {
    double n = 1;
    for (int64_t d : t.shape) n *= static_cast<double>(d);
    w.total += n;
    const bool matrix = t.shape.size() == 2 && t.shape[1] != 1;
    const bool stacked = t.shape.size() == 3;  // fused experts [E, n, k]: E matrices of [n, k]
    const double bytes = matrix    ? MatrixBytes(cfg, t.name, t.shape[0], t.shape[1])
                         : stacked ? MatrixBytes(cfg, t.name, t.shape[0] * t.shape[1], t.shape[2])
                                   : 2 * n;
    w.weight_bytes += bytes;
    if (t.second_stack) {  // held, but a row reads the first stack's copy or this one, never both
      w.second_stack += n;
      continue;
    }
    if (IsRoutedExpert(t.name))
      w.expert_bytes += bytes;
    else if (t.shape.size() == 2 && !IsEmbedding(t.name) && t.name != "lm_head.weight")
      w.dense_bytes += bytes;
    if (IsEmbedding(t.name)) {
      w.embedding = n;
      if (cfg.tie_word_embeddings) w.lm_head = n;
    } else if (t.name == "lm_head.weight") {
      w.lm_head = n;
    } else if (IsRoutedExpert(t.name)) {
      w.routed_experts += n;
    } else if (t.shape.size() == 2) {
      w.dense_matrix += n;
    } else {
      w.dense_vector += n;
    }
  }
  for (int64_t l = 0; l < cfg.num_layers; ++l) w.moe_layers += cfg.IsMoeLayer(l) ? 1 : 0;
  if (w.moe_layers > 0 && cfg.num_experts > 0) {
    w.expert = w.routed_experts / static_cast<double>(w.moe_layers * cfg.num_experts);
    w.expert_bytes /= static_cast<double>(w.moe_layers * cfg.num_experts);
    w.experts_per_token = cfg.num_experts_per_tok;
  }
  w.embedding_row = cfg.hidden_size;
  return w;
}

}  // namespace tessera
