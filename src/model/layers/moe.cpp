// tessera model layer: dense MLP and sparse MoE block (see moe.h).
#include "model/layers/moe.h"

namespace tessera {

void DenseMlpForward(Backend& be, const MlpWeights& w, int64_t rows, const float* x, float* out) {
  const int64_t inter = w.gate.dim(0);
  std::vector<float> g(rows * inter), u(rows * inter);
  be.MatMul(x, rows, w.gate, g.data());
  be.MatMul(x, rows, w.up, u.data());
  be.SiluMul(g.data(), u.data(), rows * inter, g.data());
  be.MatMul(g.data(), rows, w.down, out);
}

void MoeForward(const LayerContext& ctx, const MoeWeights& w, const float* x, float* out, MoeStats* stats) {
  Backend& be = *ctx.be;
  const ModelConfig& c = *ctx.cfg;
  const int64_t R = ctx.rows, E = c.num_experts, k = c.num_experts_per_tok, H = c.hidden_size;
  std::vector<float> logits(R * E), weights(R * k);
  std::vector<int32_t> idx(R * k);
  be.MatMul(x, R, w.router, logits.data());
  be.MoeRoute(logits.data(), R, E, k, c.norm_topk_prob, idx.data(), weights.data());
  be.MoeExperts(x, R, H, idx.data(), weights.data(), k, w.experts, out);
  if (stats) {
    stats->token_counts.assign(E, 0);
    for (int32_t e : idx) stats->token_counts[e]++;
  }
  if (w.has_shared) {
    std::vector<float> shared(R * H), gate(R);
    DenseMlpForward(be, w.shared, R, x, shared.data());
    be.MatMul(x, R, w.shared_gate, gate.data());
    be.SigmoidScaleRows(shared.data(), R, H, gate.data());
    be.Add(shared.data(), R * H, out);
  }
}

}  // namespace tessera
