// tessera model layer: full attention (see attention.h).
#include "model/layers/attention.h"

#include <cmath>
#include <vector>

#include "core/error.h"

namespace tessera {

void AttentionForward(const LayerContext& ctx, const AttentionWeights& w, int64_t cache_index,
                      const float* x, float* out) {
  Backend& be = *ctx.be;
  const ModelConfig& c = *ctx.cfg;
  const int64_t R = ctx.rows, nh = c.num_heads, kvh = c.num_kv_heads, hd = c.head_dim;
  const int64_t qdim = nh * hd, kvdim = kvh * hd;
  const bool gated = c.attn_output_gate;
  const bool one_plus = c.norm_style == RmsNormStyle::kOnePlusScale;
  const float eps = static_cast<float>(c.rms_norm_eps);

  // q_proj: [rows, heads, (q | gate)] when gated; de-interleave into q and gate.
  const int64_t qp = gated ? 2 * qdim : qdim;
  // Buffers in the backend's memory.
  DeviceBuffer qg = DeviceBuffer::Floats(be, R * qp), q, gate, k = DeviceBuffer::Floats(be, R * kvdim),
               v = DeviceBuffer::Floats(be, R * kvdim), attn = DeviceBuffer::Floats(be, R * qdim);
  be.MatMulMulti(x, R, {{&w.q_proj, qg.f32()}, {&w.k_proj, k.f32()}, {&w.v_proj, v.f32()}});
  if (gated) {
    q = DeviceBuffer::Floats(be, R * qdim);
    gate = DeviceBuffer::Floats(be, R * qdim);
    be.Copy2D(qg.f32(), R * nh, hd, 2 * hd, q.f32(), hd);
    be.Copy2D(qg.f32() + hd, R * nh, hd, 2 * hd, gate.f32(), hd);
  } else {
    q = std::move(qg);
  }

  // The pages hold the backend's KvCacheDType(); only the backend reads or writes them.
  void* k_cache = nullptr;
  void* v_cache = nullptr;
  if (ctx.caches && cache_index < static_cast<int64_t>(ctx.caches->k.size())) {
    k_cache = ctx.caches->k[cache_index].data();
    v_cache = ctx.caches->v[cache_index].data();
  }
  // All segments at once: one KV scatter of the committed rows and one attention call (a device
  // backend launches once per layer, not once per sequence).
  std::vector<int64_t> src_rows, cache_rows;
  std::vector<AttentionArgs> args;
  args.reserve(ctx.segments.size());
  for (const SegmentRows& s : ctx.segments) {
    const int32_t* pages = s.cache ? s.cache->pages.data() : nullptr;
    // Only the committed rows persist; the uncommitted block reads its own K/V from the k/v buffers.
    if (s.cache && s.commit_len > 0) {
      const int64_t page_size = ctx.caches->page_size;
      for (int64_t t = 0; t < s.commit_len; ++t) {
        const int64_t pos = s.first_pos + t;
        src_rows.push_back(s.row0 + t);
        cache_rows.push_back(static_cast<int64_t>(pages[pos / page_size]) * page_size + pos % page_size);
      }
    }
    AttentionArgs a;
    a.q = q.f32() + s.row0 * qdim;
    a.q_stride = qdim;
    a.k = k.f32() + s.row0 * kvdim;
    a.v = v.f32() + s.row0 * kvdim;
    a.kv_stride = kvdim;
    a.T = s.T;
    a.num_heads = nh;
    a.num_kv_heads = kvh;
    a.head_dim = hd;
    a.first_pos = s.first_pos;
    a.commit_len = s.cache ? s.commit_len : 0;  // written by QkNormRopeKvWrite below, before the attention
    a.k_cache = k_cache;
    a.v_cache = v_cache;
    a.pages = pages;
    a.page_size = ctx.caches ? ctx.caches->page_size : 0;
    a.block_size = s.block_size;
    a.scale = 1.0f / std::sqrt(static_cast<float>(hd));
    a.out = attn.f32() + s.row0 * qdim;
    a.out_stride = qdim;
    args.push_back(a);
  }
  // q / k head norms and RoPE, then the committed rows' k / v into the cache (one launch on a GPU).
  Backend::KvRowWrites writes;
  writes.v = v.f32();
  writes.src_rows = src_rows.data();
  writes.cache_rows = cache_rows.data();
  writes.n = static_cast<int64_t>(src_rows.size());
  writes.k_cache = k_cache;
  writes.v_cache = v_cache;
  be.QkNormRopeKvWrite(q.f32(), qdim, nh, k.f32(), kvdim, kvh, R, hd, w.q_norm, w.k_norm, eps, one_plus, c.rotary_dim,
                       ctx.positions, c.rope_theta, writes);
  be.AttentionBatch(args);
  if (gated) be.SigmoidGate(attn.f32(), R, qdim, qdim, gate.f32(), qdim);
  be.MatMul(attn.f32(), R, w.o_proj, out);
}

}  // namespace tessera
