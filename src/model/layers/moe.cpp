// tessera model layer: dense MLP and sparse MoE block (see moe.h).
#include "model/layers/moe.h"

#include "core/error.h"

namespace tessera {

void DenseMlpForward(Backend& be, const MlpWeights& w, int64_t rows, const float* x, float* out, GluAct act) {
  const int64_t inter = w.gate.dim(0);
  DeviceBuffer g = DeviceBuffer::Floats(be, rows * inter), u = DeviceBuffer::Floats(be, rows * inter);
  be.MatMulMulti(x, rows, {{&w.gate, g.f32()}, {&w.up, u.f32()}});
  if (act == GluAct::kSilu)
    be.SiluMul(g.f32(), u.f32(), rows * inter, g.f32());
  else
    be.GeluTanhMul(g.f32(), u.f32(), rows * inter, g.f32());
  be.MatMul(g.f32(), rows, w.down, out);
}

void MoeForward(const LayerContext& ctx, const MoeWeights& w, const float* x, float* out, int32_t* expert_counts,
                const Backend::ResidualNorm* residual) {
  Backend& be = *ctx.be;
  const ModelConfig& c = *ctx.cfg;
  const int64_t R = ctx.rows, E = c.num_experts, k = c.num_experts_per_tok, H = c.hidden_size;
  // Router outputs stay in the backend's memory, and so do the expert statistics.
  DeviceBuffer logits = DeviceBuffer::Floats(be, R * E), weights = DeviceBuffer::Floats(be, R * k);
  DeviceBuffer idx(be, static_cast<size_t>(R * k) * sizeof(int32_t));
  // With a shared expert, the router and the shared expert's gate, up and output gate all read x:
  // one multi-product.
  DeviceBuffer g, u, gate;
  const int64_t inter = w.has_shared ? w.shared.gate.dim(0) : 0;
  if (w.has_shared) {
    g = DeviceBuffer::Floats(be, R * inter);
    u = DeviceBuffer::Floats(be, R * inter);
    gate = DeviceBuffer::Floats(be, R);
    be.MatMulMulti(x, R,
                   {{&w.router, logits.f32()}, {&w.shared.gate, g.f32()}, {&w.shared.up, u.f32()},
                    {&w.shared_gate, gate.f32()}});
  } else {
    be.MatMul(x, R, w.router, logits.f32());
  }
  // Per-request router temperature: logits / T before the softmax and top-k (rows of requests at 1
  // are divided by 1, which changes nothing; batches without any skip the op).
  if (ctx.router_temperature) be.DivideRows(logits.f32(), R, E, ctx.router_temperature);
  if (static_cast<int64_t>(w.experts.size()) != E)
    Fail(ErrorKind::kInternal, "moe: {} experts loaded, config says {}", w.experts.size(), E);
  // The shared expert: sigmoid(gate) * down(act) as down(sigmoid(gate) * act) (the scale runs over
  // inter, not hidden, columns). Without `residual` its product accumulates into the routed
  // experts' sum; with it, it goes first into its own buffer, the residual's `extra`, which the
  // MoE op's last kernel adds after the sum (the same additions in the same order).
  DeviceBuffer shared_out;
  Backend::ResidualNorm fused;
  if (w.has_shared) {
    be.SiluMulScaleRows(g.f32(), u.f32(), R, inter, gate.f32(), g.f32());
    if (residual) {
      shared_out = DeviceBuffer::Floats(be, R * H);
      be.MatMul(g.f32(), R, w.shared.down, shared_out.f32(), /*accumulate=*/false);
      fused = *residual;
      fused.extra = shared_out.f32();
      residual = &fused;
    }
  }
  be.MoeRouteExperts(logits.f32(), x, R, H, k, c.norm_topk_prob, idx.i32(), weights.f32(), w.experts, out, residual);
  if (expert_counts) be.CountIds(idx.i32(), R * k, E, expert_counts);
  if (w.has_shared && !residual) be.MatMul(g.f32(), R, w.shared.down, out, /*accumulate=*/true);
}

void MoeRoutedForward(const LayerContext& ctx, const MoeWeights& w, const float* router_in, const float* x, GluAct act,
                      float* out, int32_t* expert_counts) {
  Backend& be = *ctx.be;
  const ModelConfig& c = *ctx.cfg;
  const int64_t R = ctx.rows, E = c.num_experts, k = c.num_experts_per_tok, H = c.hidden_size;
  if (!w.router_input_norm || !w.per_expert_scale)
    Fail(ErrorKind::kInternal, "moe: the scaled router needs its input norm and per-expert scales");
  if (static_cast<int64_t>(w.experts.size()) != E)
    Fail(ErrorKind::kInternal, "moe: {} experts loaded, config says {}", w.experts.size(), E);
  DeviceBuffer r = DeviceBuffer::Floats(be, R * H), logits = DeviceBuffer::Floats(be, R * E),
               weights = DeviceBuffer::Floats(be, R * k);
  DeviceBuffer idx(be, static_cast<size_t>(R * k) * sizeof(int32_t));
  be.RmsNorm(router_in, R, H, H, w.router_input_norm, static_cast<float>(c.rms_norm_eps), false, r.f32(), H);
  be.MatMul(r.f32(), R, w.router, logits.f32());
  if (ctx.router_temperature) be.DivideRows(logits.f32(), R, E, ctx.router_temperature);
  be.MoeRoute(logits.f32(), R, E, k, /*renormalize=*/true, idx.i32(), weights.f32());
  be.ScaleByIndex(weights.f32(), idx.i32(), R * k, w.per_expert_scale);
  be.MoeExpertsAct(x, R, H, idx.i32(), weights.f32(), k, w.experts, act, out);
  if (expert_counts) be.CountIds(idx.i32(), R * k, E, expert_counts);
}

}  // namespace tessera
