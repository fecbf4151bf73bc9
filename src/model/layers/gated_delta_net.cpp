// tessera model layer: Gated DeltaNet (see gated_delta_net.h).
#include "model/layers/gated_delta_net.h"

#include <vector>

#include "core/error.h"

namespace tessera {

void GatedDeltaNetForward(const LayerContext& ctx, const GdnWeights& w, int64_t cache_index,
                          const float* x, float* out) {
  Backend& be = *ctx.be;
  const ModelConfig& c = *ctx.cfg;
  const int64_t R = ctx.rows, kh = c.linear_num_key_heads, vh = c.linear_num_value_heads;
  const int64_t dk = c.linear_key_head_dim, dv = c.linear_value_head_dim, K = c.linear_conv_kernel;
  const int64_t conv_dim = c.LinearConvDim(), vd = vh * dv, key_total = kh * dk;
  const int64_t W = conv_dim + vd + 2 * vh;  // combined row: [q k v | z | b | a]
  const int64_t col_z = conv_dim, col_b = conv_dim + vd, col_a = conv_dim + vd + vh;

  // Buffers in the backend's memory.
  auto buf = [&](int64_t n) { return DeviceBuffer::Floats(be, n); };
  DeviceBuffer comb = buf(R * W);
  for (const GdnProjection& p : w.projections) {
    const int64_t n = p.w.dim(0);
    DeviceBuffer tmp = buf(R * n);
    be.MatMul(x, R, p.w, tmp.f32());
    be.Copy2D(tmp.f32(), R, n, n, comb.f32() + p.column, W);
  }
  be.GdnGates(comb.f32() + col_a, comb.f32() + col_b, R, vh, W, W, w.a_log, w.dt_bias);
  // g and beta, compact [rows, vh].
  DeviceBuffer g = buf(R * vh), beta = buf(R * vh), z = buf(R * vd), conv_out = buf(R * conv_dim),
               core = buf(R * vd);
  be.Copy2D(comb.f32() + col_a, R, vh, W, g.f32(), vh);
  be.Copy2D(comb.f32() + col_b, R, vh, W, beta.f32(), vh);
  be.Copy2D(comb.f32() + col_z, R, vd, W, z.f32(), vd);

  const int64_t conv_state_size = conv_dim * (K - 1), rec_size = vh * dk * dv;
  DeviceBuffer zero_conv, scratch_rec;
  for (const SegmentRows& s : ctx.segments) {
    float* conv_state = nullptr;
    float* rec_state = nullptr;
    if (s.cache && s.cache->state_slot >= 0) {
      if (!ctx.caches || s.cache->state_slot >= ctx.caches->num_slots)
        Fail(ErrorKind::kInvalidArgument, "state slot {} is out of range (allocated {})", s.cache->state_slot,
             ctx.caches ? ctx.caches->num_slots : 0);
      conv_state = ctx.caches->conv[cache_index].f32() + s.cache->state_slot * conv_state_size;
      rec_state = ctx.caches->recurrent[cache_index].f32() + s.cache->state_slot * rec_size;
    } else {
      if (s.first_pos != 0)
        Fail(ErrorKind::kInvalidArgument,
             "a segment at position {} of a hybrid model needs a recurrent-state slot", s.first_pos);
      zero_conv = buf(conv_state_size);
      scratch_rec = buf(rec_size);
      be.Zero(zero_conv.data(), zero_conv.bytes());
      be.Zero(scratch_rec.data(), scratch_rec.bytes());
      conv_state = zero_conv.f32();
      rec_state = scratch_rec.f32();
    }
    const float* xs = comb.f32() + s.row0 * W;
    float* cs = conv_out.f32() + s.row0 * conv_dim;
    be.CausalConv1dSilu(xs, s.T, W, conv_dim, w.conv, K, conv_state, cs);

    auto run = [&](int64_t t0, int64_t n, float* state) {
      if (n == 0) return;
      GatedDeltaArgs a;
      a.q = cs + t0 * conv_dim;
      a.k = cs + t0 * conv_dim + key_total;
      a.qk_stride = conv_dim;
      a.v = cs + t0 * conv_dim + 2 * key_total;
      a.v_stride = conv_dim;
      a.g = g.f32() + (s.row0 + t0) * vh;
      a.beta = beta.f32() + (s.row0 + t0) * vh;
      a.T = n;
      a.key_heads = kh;
      a.value_heads = vh;
      a.key_dim = dk;
      a.value_dim = dv;
      a.state = state;
      a.out = core.f32() + (s.row0 + t0) * vd;
      be.GatedDeltaRule(a, ctx.gdn_mode);
    };
    // Committed rows advance the slot's state; the uncommitted block runs from a copy.
    run(0, s.commit_len, rec_state);
    if (s.commit_len > 0) be.CausalConv1dUpdateState(xs, s.commit_len, W, conv_dim, K, conv_state);
    if (s.commit_len < s.T) {
      DeviceBuffer copy = buf(rec_size);
      be.Copy2D(rec_state, 1, rec_size, rec_size, copy.f32(), rec_size);
      run(s.commit_len, s.T - s.commit_len, copy.f32());
    }
  }
  be.GatedRmsNorm(core.f32(), z.f32(), R * vh, dv, w.norm, static_cast<float>(c.rms_norm_eps), core.f32());
  be.MatMul(core.f32(), R, w.out_proj, out);
}

}  // namespace tessera
