// tessera model: WeightCensus (weight_census.h), counted over the tensors an architecture expects.
#include "model/weight_census.h"

#include <string>

#include "model/model.h"

namespace tessera {

WeightCensus WeightCensus::Of(const ModelConfig& cfg) {
  WeightCensus w;
  for (const ExpectedTensor& t : ExpectedTensors(cfg)) {
    double n = 1;
    for (int64_t d : t.shape) n *= static_cast<double>(d);
    w.total += n;
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
    w.experts_per_token = cfg.num_experts_per_tok;
  }
  w.embedding_row = cfg.hidden_size;
  return w;
}

}  // namespace tessera
