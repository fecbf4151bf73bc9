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

}  // namespace

WeightCensus WeightCensus::Of(const ModelConfig& cfg) {
  WeightCensus w;
  w.format = cfg.WeightFormat();
  for (const ExpectedTensor& t : ExpectedTensors(cfg)) {
    double n = 1;
    for (int64_t d : t.shape) n *= static_cast<double>(d);
    w.total += n;
    const bool matrix = t.shape.size() == 2 && t.shape[1] != 1;
    const double bytes = matrix ? MatrixBytes(cfg, t.name, t.shape[0], t.shape[1]) : 2 * n;
    w.weight_bytes += bytes;
    if (t.name.find(".mlp.experts.") != std::string::npos)
      w.expert_bytes += bytes;
    else if (t.shape.size() == 2 && t.name != "model.embed_tokens.weight" && t.name != "lm_head.weight")
      w.dense_bytes += bytes;
    if (t.name == "model.embed_tokens.weight") {
      w.embedding = n;
      if (cfg.tie_word_embeddings) w.lm_head = n;
    } else if (t.name == "lm_head.weight") {
      w.lm_head = n;
    } else if (t.name.find(".mlp.experts.") != std::string::npos) {
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
