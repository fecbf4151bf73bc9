// tessera model layer: full attention (see attention.h).
#include "model/layers/attention.h"

#include <cmath>
#include <vector>

#include "core/error.h"

namespace tessera {

namespace {

// The per-segment attention calls of one layer and the cache rows its committed rows go to: q [R,
// qdim], k / v [R, kvdim] (after norms and RoPE when the attention runs), attn [R, qdim] the output.
struct AttentionCalls {
  void* k_cache = nullptr;
  void* v_cache = nullptr;
  std::vector<int64_t> src_rows, cache_rows;
  std::vector<AttentionArgs> args;
};

AttentionCalls PlanAttention(const LayerContext& ctx, int64_t cache_index, const float* q, const float* k,
                             const float* v, float* attn, int64_t nh, int64_t kvh, int64_t hd, float scale,
                             int64_t window) {
  const int64_t qdim = nh * hd, kvdim = kvh * hd;
  AttentionCalls c;
  // The pages hold the backend's KvCacheDType(); only the backend reads or writes them.
  if (ctx.caches && cache_index < static_cast<int64_t>(ctx.caches->k.size())) {
    c.k_cache = ctx.caches->k[cache_index].data();
    c.v_cache = ctx.caches->v[cache_index].data();
  }
  // All segments at once: one KV scatter of the committed rows and one attention call (a device
  // backend launches once per layer, not once per sequence).
  c.args.reserve(ctx.segments.size());
  for (const SegmentRows& s : ctx.segments) {
    const int32_t* pages = s.cache ? s.cache->pages.data() : nullptr;
    // Only the committed rows persist; the uncommitted block reads its own K/V from the k/v buffers.
    if (s.cache && s.commit_len > 0) {
      const int64_t page_size = ctx.caches->page_size;
      for (int64_t t = 0; t < s.commit_len; ++t) {
        const int64_t pos = s.first_pos + t;
        c.src_rows.push_back(s.row0 + t);
        c.cache_rows.push_back(static_cast<int64_t>(pages[pos / page_size]) * page_size + pos % page_size);
      }
    }
    AttentionArgs a;
    a.q = q + s.row0 * qdim;
    a.q_stride = qdim;
    a.k = k + s.row0 * kvdim;
    a.v = v + s.row0 * kvdim;
    a.kv_stride = kvdim;
    a.T = s.T;
    a.num_heads = nh;
    a.num_kv_heads = kvh;
    a.head_dim = hd;
    a.first_pos = s.first_pos;
    a.commit_len = s.cache ? s.commit_len : 0;  // written before the attention runs
    a.k_cache = c.k_cache;
    a.v_cache = c.v_cache;
    a.pages = pages;
    a.page_size = ctx.caches ? ctx.caches->page_size : 0;
    a.block_size = s.block_size;
    a.sliding_window = window;
    a.canvas_begin = s.canvas ? s.commit_len : -1;
    a.scale = scale;
    a.out = attn + s.row0 * qdim;
    a.out_stride = qdim;
    c.args.push_back(a);
  }
  return c;
}

}  // namespace

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

  AttentionCalls calls = PlanAttention(ctx, cache_index, q.f32(), k.f32(), v.f32(), attn.f32(), nh, kvh, hd,
                                       1.0f / std::sqrt(static_cast<float>(hd)), 0);
  std::vector<int64_t>& src_rows = calls.src_rows;
  std::vector<int64_t>& cache_rows = calls.cache_rows;
  void* k_cache = calls.k_cache;
  void* v_cache = calls.v_cache;
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
  be.AttentionBatch(calls.args);
  if (gated) be.SigmoidGate(attn.f32(), R, qdim, qdim, gate.f32(), qdim);
  be.MatMul(attn.f32(), R, w.o_proj, out);
}

void SpecAttentionProject(Backend& be, const ModelConfig& c, const AttentionLayerSpec& spec,
                          const AttentionWeights& w, int64_t rows, const float* x, float* q, float* k, float* v) {
  const int64_t R = rows, nh = c.num_heads, kvh = spec.num_kv_heads, hd = spec.head_dim;
  const float eps = static_cast<float>(c.rms_norm_eps);
  if (spec.value_from_key) {  // V is the raw K projection, before k_norm and RoPE
    be.MatMulMulti(x, R, {{&w.q_proj, q}, {&w.k_proj, k}});
    be.CopyBuffer(v, k, static_cast<size_t>(R * kvh * hd) * sizeof(float));
  } else {
    be.MatMulMulti(x, R, {{&w.q_proj, q}, {&w.k_proj, k}, {&w.v_proj, v}});
  }
  be.RmsNorm(q, R * nh, hd, hd, w.q_norm, eps, false, q, hd);
  be.RmsNorm(k, R * kvh, hd, hd, w.k_norm, eps, false, k, hd);
  if (w.v_norm) be.RmsNorm(v, R * kvh, hd, hd, w.v_norm, eps, false, v, hd);
}

void SpecAttentionAttend(const LayerContext& ctx, const AttentionLayerSpec& spec, float scale, int64_t cache_index,
                         float* q, float* k, const float* v, float* attn) {
  Backend& be = *ctx.be;
  const int64_t R = ctx.rows, nh = ctx.cfg->num_heads, kvh = spec.num_kv_heads, hd = spec.head_dim;
  const int64_t qdim = nh * hd, kvdim = kvh * hd;
  // inv_freq_i = theta^(-2i / freq_dim) / factor, in f32 (transformers builds its table in f32).
  const RopeSpec& r = spec.rope;
  std::vector<float> inv_freq(static_cast<size_t>(r.rotated_pairs));
  for (int64_t i = 0; i < r.rotated_pairs; ++i)
    inv_freq[i] = static_cast<float>(1.0 / std::pow(r.theta, static_cast<double>(2 * i) / r.freq_dim) /
                                     r.linear_factor);
  if (r.rotated_pairs > 0) {
    be.RopePairs(q, R, qdim, nh, hd, r.pair_offset, r.rotated_pairs, inv_freq.data(), ctx.positions);
    be.RopePairs(k, R, kvdim, kvh, hd, r.pair_offset, r.rotated_pairs, inv_freq.data(), ctx.positions);
  }
  AttentionCalls calls = PlanAttention(ctx, cache_index, q, k, v, attn, nh, kvh, hd, scale, spec.sliding_window);
  if (!calls.src_rows.empty())
    be.KvWriteRows(k, v, kvdim, kvdim, calls.src_rows.data(), calls.cache_rows.data(),
                   static_cast<int64_t>(calls.src_rows.size()), calls.k_cache, calls.v_cache);
  be.AttentionBatch(calls.args);
}

}  // namespace tessera
