// tessera model: loading, cache storage and the forward pass over a ragged batch (see model.h).
// Row-wise work (projections, norms, MLP / MoE) runs over all rows of the batch at once; attention
// and Gated DeltaNet run per segment inside their layers.
#include "model/model.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/thread_pool.h"
#include "io/hf_config.h"
#include "model/arch/arch.h"
#include "model/caches.h"
#include "model/layers/attention.h"
#include "model/layers/gated_delta_net.h"
#include "model/layers/moe.h"
#include "model/loader.h"
#include "model/weights.h"

namespace tessera {

Model::Model() = default;
Model::~Model() = default;

std::unique_ptr<Model> Model::Load(const std::string& dir, const LoadOptions& opts) {
  if (opts.threads > 0) ThreadPool::SetGlobalThreads(opts.threads);
  std::unique_ptr<Model> m(new Model());
  m->cfg_ = ModelConfig::FromHf(LoadHfModelDir(dir));
  ArchFor(m->cfg_.family);  // fails early for an unregistered family
  if (opts.load_format != "auto" && opts.load_format != "dummy")
    Fail(ErrorKind::kInvalidArgument, "load format \"{}\" is not supported (expected auto or dummy)",
         opts.load_format);
  const bool dummy = opts.load_format == "dummy";
  m->backend_ = MakeBackend(opts.device);
  m->weights_ = std::make_unique<ModelWeights>();
  LoadModelWeights(m->cfg_, dir, m->weights_.get(), opts.log, m->backend_.get(), dummy);
  m->backend_->Synchronize();
  m->caches_ = std::make_unique<ModelCaches>();
  const std::string msg =
      dummy ? fmt::format("made {} ({} layers) with dummy weights on {} ({:.2f} GB)", FamilyName(m->cfg_.family),
                          m->cfg_.num_layers, m->backend_->Name(), m->weights_->device.total_bytes() / 1e9)
            : fmt::format("loaded {} ({} layers, {} tensors) from {} on {}", FamilyName(m->cfg_.family),
                          m->cfg_.num_layers, m->weights_->reader->size(), dir, m->backend_->Name());
  spdlog::info("{}", msg);
  if (opts.log) opts.log(msg);
  return m;
}

int64_t Model::KvBytesPerToken(const ModelConfig& c) {
  return c.NumLayersOf(LayerKind::kFullAttention) * 2 * c.num_kv_heads * c.head_dim * 4;
}

int64_t Model::StateBytesPerSequence(const ModelConfig& c) {
  const int64_t per_layer = c.LinearConvDim() * std::max<int64_t>(c.linear_conv_kernel - 1, 0) +
                            c.linear_num_value_heads * c.linear_key_head_dim * c.linear_value_head_dim;
  return c.NumLayersOf(LayerKind::kLinearAttention) * per_layer * 4;
}

void Model::AllocateCaches(int64_t num_pages, int64_t page_size, int64_t num_state_slots) {
  if (num_pages < 0 || page_size <= 0 || num_state_slots < 0)
    Fail(ErrorKind::kInvalidArgument, "AllocateCaches: bad sizes (pages {}, page_size {}, slots {})", num_pages,
         page_size, num_state_slots);
  ModelCaches& k = *caches_;
  k = ModelCaches{};
  Backend& be = *backend_;
  auto zeroed = [&](size_t floats) {
    DeviceBuffer b = DeviceBuffer::Floats(be, static_cast<int64_t>(floats));
    be.Zero(b.data(), b.bytes());
    return b;
  };
  k.num_pages = num_pages;
  k.page_size = page_size;
  k.num_slots = num_state_slots;
  const size_t kv = static_cast<size_t>(num_pages * page_size * cfg_.num_kv_heads * cfg_.head_dim);
  for (int64_t i = 0; i < cfg_.NumLayersOf(LayerKind::kFullAttention); ++i) {
    k.k.push_back(zeroed(kv));
    k.v.push_back(zeroed(kv));
  }
  k.conv_per_slot = cfg_.LinearConvDim() * std::max<int64_t>(cfg_.linear_conv_kernel - 1, 0);
  k.recurrent_per_slot = cfg_.linear_num_value_heads * cfg_.linear_key_head_dim * cfg_.linear_value_head_dim;
  for (int64_t i = 0; i < cfg_.NumLayersOf(LayerKind::kLinearAttention); ++i) {
    k.conv.push_back(zeroed(static_cast<size_t>(k.conv_per_slot * num_state_slots)));
    k.recurrent.push_back(zeroed(static_cast<size_t>(k.recurrent_per_slot * num_state_slots)));
  }
}

int64_t Model::page_size() const { return caches_->page_size; }
int64_t Model::num_pages() const { return caches_->num_pages; }
int64_t Model::num_state_slots() const { return caches_->num_slots; }

void Model::CopyStateSlot(int32_t from, int32_t to) {
  ModelCaches& k = *caches_;
  if (from < 0 || to < 0 || from >= k.num_slots || to >= k.num_slots)
    Fail(ErrorKind::kInvalidArgument, "CopyStateSlot({}, {}): slot out of range (allocated {})", from, to,
         k.num_slots);
  if (from == to) return;
  for (size_t l = 0; l < k.conv.size(); ++l) {
    backend_->CopyBuffer(k.conv[l].f32() + to * k.conv_per_slot, k.conv[l].f32() + from * k.conv_per_slot,
                         k.conv_per_slot * sizeof(float));
    backend_->CopyBuffer(k.recurrent[l].f32() + to * k.recurrent_per_slot,
                         k.recurrent[l].f32() + from * k.recurrent_per_slot, k.recurrent_per_slot * sizeof(float));
  }
}

void Model::ResetStateSlot(int32_t slot) {
  ModelCaches& k = *caches_;
  if (slot < 0 || slot >= k.num_slots)
    Fail(ErrorKind::kInvalidArgument, "ResetStateSlot({}): slot out of range (allocated {})", slot, k.num_slots);
  for (size_t l = 0; l < k.conv.size(); ++l) {
    backend_->Zero(k.conv[l].f32() + slot * k.conv_per_slot, k.conv_per_slot * sizeof(float));
    backend_->Zero(k.recurrent[l].f32() + slot * k.recurrent_per_slot, k.recurrent_per_slot * sizeof(float));
  }
}

ForwardResult Model::Forward(const Batch& batch, const ForwardOptions& opts) {
  const ModelConfig& c = cfg_;
  const ModelWeights& w = *weights_;
  Backend& be = *backend_;
  const int64_t H = c.hidden_size, V = c.vocab_size;
  const bool hybrid = c.NumLayersOf(LayerKind::kLinearAttention) > 0;

  LayerContext ctx;
  ctx.be = &be;
  ctx.cfg = &c;
  ctx.caches = caches_.get();
  ctx.gdn_mode = opts.gdn_mode;
  std::vector<int32_t> tokens;
  std::vector<int64_t> positions, logit_rows;
  for (size_t si = 0; si < batch.segments.size(); ++si) {
    const Segment& s = batch.segments[si];
    const int64_t T = static_cast<int64_t>(s.tokens.size());
    if (T == 0) Fail(ErrorKind::kInvalidArgument, "segment {} has no tokens", si);
    if (s.first_pos < 0 || s.commit_len < 0 || s.commit_len > T || s.block_size < 0)
      Fail(ErrorKind::kInvalidArgument, "segment {}: bad first_pos {} / commit_len {} / block_size {}", si,
           s.first_pos, s.commit_len, s.block_size);
    if (!s.cache && s.first_pos != 0)
      Fail(ErrorKind::kInvalidArgument, "segment {}: a segment without a cache must start at position 0", si);
    if (s.cache && c.NumLayersOf(LayerKind::kFullAttention) > 0) {
      // Committed rows are written to the pages; the cached prefix is read from them.
      const int64_t need = s.first_pos + s.commit_len;
      const int64_t have = static_cast<int64_t>(s.cache->pages.size()) * caches_->page_size;
      if (need > have)
        Fail(ErrorKind::kInvalidArgument, "segment {}: pages cover {} positions, {} needed", si, have, need);
      for (int32_t p : s.cache->pages)
        if (p < 0 || p >= caches_->num_pages)
          Fail(ErrorKind::kInvalidArgument, "segment {}: page id {} out of range (allocated {})", si, p,
               caches_->num_pages);
    }
    if (s.cache && hybrid && s.cache->state_slot < 0 && s.first_pos > 0)
      Fail(ErrorKind::kInvalidArgument, "segment {}: hybrid model needs a state slot", si);
    SegmentRows r;
    r.row0 = static_cast<int64_t>(tokens.size());
    r.T = T;
    r.first_pos = s.first_pos;
    r.commit_len = s.commit_len;
    r.block_size = s.block_size;
    r.cache = s.cache;
    ctx.segments.push_back(r);
    for (int64_t t = 0; t < T; ++t) {
      if (s.tokens[t] < 0 || s.tokens[t] >= V)
        Fail(ErrorKind::kInvalidArgument, "segment {}: token id {} out of range [0, {})", si, s.tokens[t], V);
      tokens.push_back(s.tokens[t]);
      positions.push_back(s.first_pos + t);
    }
    for (int32_t lr : s.logits_rows) {
      if (lr < 0 || lr >= T) Fail(ErrorKind::kInvalidArgument, "segment {}: logits row {} out of range", si, lr);
      logit_rows.push_back(r.row0 + lr);
    }
  }
  const int64_t R = static_cast<int64_t>(tokens.size());
  ctx.rows = R;
  ctx.positions = positions.data();

  ForwardResult res;
  res.rows_processed = R;
  // Activations live in the backend's memory; token ids and positions stay on the host.
  DeviceBuffer h = DeviceBuffer::Floats(be, R * H), x = DeviceBuffer::Floats(be, R * H),
               o = DeviceBuffer::Floats(be, R * H);
  be.Embedding(w.embed, tokens.data(), R, h.f32());
  if (opts.capture_hidden) res.hidden.push_back(h.ToHost());
  const float eps = static_cast<float>(c.rms_norm_eps);
  const bool one_plus = c.norm_style == RmsNormStyle::kOnePlusScale;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const LayerWeights& lw = w.layers[l];
    be.RmsNorm(h.f32(), R, H, H, lw.input_norm, eps, one_plus, x.f32(), H);
    if (lw.kind == LayerKind::kFullAttention)
      AttentionForward(ctx, lw.attn, lw.cache_index, x.f32(), o.f32());
    else
      GatedDeltaNetForward(ctx, lw.gdn, lw.cache_index, x.f32(), o.f32());
    be.Add(o.f32(), R * H, h.f32());
    be.RmsNorm(h.f32(), R, H, H, lw.post_norm, eps, one_plus, x.f32(), H);
    if (lw.is_moe) {
      MoeStats stats;
      MoeForward(ctx, lw.moe, x.f32(), o.f32(), opts.collect_expert_stats ? &stats : nullptr);
      if (opts.collect_expert_stats) {
        res.distinct_experts_per_layer.push_back(static_cast<int32_t>(
            std::count_if(stats.token_counts.begin(), stats.token_counts.end(), [](int64_t n) { return n > 0; })));
        res.expert_token_counts.push_back(std::move(stats.token_counts));
      }
    } else {
      DenseMlpForward(be, lw.mlp, R, x.f32(), o.f32());
      if (opts.collect_expert_stats) {
        res.distinct_experts_per_layer.push_back(-1);
        res.expert_token_counts.emplace_back();
      }
    }
    be.Add(o.f32(), R * H, h.f32());
    if (opts.capture_hidden) res.hidden.push_back(h.ToHost());
  }
  if (opts.capture_hidden) {
    // transformers reports the final norm's output in place of the last layer's.
    be.RmsNorm(h.f32(), R, H, H, w.final_norm, eps, one_plus, x.f32(), H);
    be.Download(res.hidden.back().data(), x.f32(), static_cast<size_t>(R * H) * sizeof(float));
  }
  const int64_t L = static_cast<int64_t>(logit_rows.size());
  DeviceBuffer sel = DeviceBuffer::Floats(be, L * H), logits = DeviceBuffer::Floats(be, L * V);
  for (int64_t i = 0; i < L; ++i) be.Copy2D(h.f32() + logit_rows[i] * H, 1, H, H, sel.f32() + i * H, H);
  be.RmsNorm(sel.f32(), L, H, H, w.final_norm, eps, one_plus, sel.f32(), H);
  be.MatMul(sel.f32(), L, w.lm_head, logits.f32());
  res.logits.resize(L * V);
  be.Download(res.logits.data(), logits.f32(), res.logits.size() * sizeof(float));
  return res;
}

}  // namespace tessera
