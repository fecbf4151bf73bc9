// tessera model layer: Gated DeltaNet (see gated_delta_net.h).
#include "model/layers/gated_delta_net.h"

#include <algorithm>
#include <utility>
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
    if (p.column == 0 && n == W) {  // one stacked projection (the loaders make one): no copy
      be.MatMul(x, R, p.w, comb.f32());
      continue;
    }
    DeviceBuffer tmp = buf(R * n);
    be.MatMul(x, R, p.w, tmp.f32());
    be.Copy2D(tmp.f32(), R, n, n, comb.f32() + p.column, W);
  }
  // g and beta, compact [rows, vh], straight from the combined row.
  DeviceBuffer g = buf(R * vh), beta = buf(R * vh), z = buf(R * vd), conv_out = buf(R * conv_dim),
               core = buf(R * vd);
  be.GdnGates(comb.f32() + col_a, comb.f32() + col_b, R, vh, W, W, w.a_log, w.dt_bias, g.f32(), beta.f32(), vh);
  be.Copy2D(comb.f32() + col_z, R, vd, W, z.f32(), vd);

  const int64_t conv_state_size = conv_dim * (K - 1), rec_size = vh * dk * dv;
  // All sequences at once (a device backend launches each piece once per layer, not per sequence):
  // conv over every segment from its state, the committed runs (they advance their slot's state),
  // the conv states shifted past the committed rows, then the uncommitted diffusion blocks from a
  // copy of their sequence's state after its committed rows.
  std::vector<DeviceBuffer> scratch;  // zero states of stateless segments, copies for the blocks
  std::vector<Backend::ConvSegment> conv_segs, conv_updates;
  std::vector<GatedDeltaArgs> committed, blocks;
  std::vector<std::pair<const float*, float*>> block_state_copies;
  auto args = [&](const SegmentRows& s, int64_t t0, int64_t n, float* state) {
    const float* cs = conv_out.f32() + (s.row0 + t0) * conv_dim;
    GatedDeltaArgs a;
    a.q = cs;
    a.k = cs + key_total;
    a.qk_stride = conv_dim;
    a.v = cs + 2 * key_total;
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
    return a;
  };
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
      scratch.push_back(buf(conv_state_size));
      be.Zero(scratch.back().data(), scratch.back().bytes());
      conv_state = scratch.back().f32();
      scratch.push_back(buf(rec_size));
      be.Zero(scratch.back().data(), scratch.back().bytes());
      rec_state = scratch.back().f32();
    }
    conv_segs.push_back({s.row0, s.T, conv_state});
    if (s.commit_len > 0) {
      committed.push_back(args(s, 0, s.commit_len, rec_state));
      conv_updates.push_back({s.row0, s.commit_len, conv_state});
    }
    if (s.commit_len < s.T) {
      scratch.push_back(buf(rec_size));
      block_state_copies.emplace_back(rec_state, scratch.back().f32());
      blocks.push_back(args(s, s.commit_len, s.T - s.commit_len, scratch.back().f32()));
    }
  }
  // Every row committed (decode, prompts): the conv and its state shift as one op (one pass on a
  // GPU for one-row segments); the recurrence does not read the conv state.
  const bool all_committed = conv_updates.size() == conv_segs.size() &&
                             std::equal(conv_segs.begin(), conv_segs.end(), conv_updates.begin(),
                                        [](const Backend::ConvSegment& a, const Backend::ConvSegment& b) {
                                          return a.row0 == b.row0 && a.T == b.T && a.state == b.state;
                                        });
  if (all_committed) {
    be.CausalConv1dSiluUpdateBatch(comb.f32(), W, conv_dim, w.conv, K, conv_segs, conv_out.f32());
    be.GatedDeltaRuleBatch(committed, ctx.gdn_mode);
  } else {
    be.CausalConv1dSiluBatch(comb.f32(), W, conv_dim, w.conv, K, conv_segs, conv_out.f32());
    be.GatedDeltaRuleBatch(committed, ctx.gdn_mode);
    be.CausalConv1dUpdateStateBatch(comb.f32(), W, conv_dim, K, conv_updates);
  }
  for (const auto& [from, to] : block_state_copies) be.CopyBuffer(to, from, static_cast<size_t>(rec_size) * sizeof(float));
  be.GatedDeltaRuleBatch(blocks, ctx.gdn_mode);
  be.GatedRmsNorm(core.f32(), z.f32(), R * vh, dv, w.norm, static_cast<float>(c.rms_norm_eps), core.f32());
  be.MatMul(core.f32(), R, w.out_proj, out);
}

}  // namespace tessera
