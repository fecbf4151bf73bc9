// tessera model: loading, cache storage and the forward pass over a ragged batch (see model.h).
// The forward is the batch plumbing around the family's ArchBody (model/arch/arch.h: embedding and
// layers), the same for every family: positions, logits rows, final norm, lm_head, sampling.
// Row-wise work (projections, norms, MLP / MoE) runs over all rows of the batch at once; attention
// and Gated DeltaNet run per segment inside their layers. A split model runs the same forward on
// every rank with its local config (model/shard.h): the body all-reduces inside its layers (the
// Qwen body: qwen_body.cpp) and the vocab-parallel logits are all-gathered here.
#include "model/model.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <memory>
#include <unordered_map>

#include "backend/communicator.h"
#include "backend/sampling.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "io/hf_config.h"
#include "io/safetensors.h"
#include "model/arch/arch.h"
#include "model/caches.h"
#include "model/layers/context.h"
#include "model/loader.h"
#include "model/rank_workers.h"
#include "model/shard.h"
#include "model/weights.h"

namespace tessera {

// One rank: declared so that the weights and caches go before the communicator and the backend.
struct Model::Rank {
  RankShard shard;
  ModelConfig cfg;  // local head counts and widths
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Communicator> comm;  // null when the model is not split
  std::unique_ptr<ModelWeights> weights;
  std::unique_ptr<ModelCaches> caches;
  // Canvases' self-conditioning inputs kept between steps (Segment::canvas_state), [C, hidden] each.
  std::unordered_map<int64_t, DeviceBuffer> canvas_states;
};

// A validated batch, shared read-only by the ranks.
struct Model::Prepared {
  std::vector<int32_t> tokens;
  std::vector<int64_t> positions;
  // Rows whose logits are computed: those that come back as logits first (full_rows of them), then
  // those the backend samples by `rules` (one each), both in segment order.
  std::vector<int64_t> logit_rows;
  int64_t full_rows = 0;
  std::vector<RowSampling> rules;
  // The masked ones among them (index into rules) and their words, [n, (vocab + 31) / 32].
  std::vector<int64_t> masked_rows;
  std::vector<uint32_t> masks;
  // Then the canvas rows the backend draws (Segment::canvas_sample), one rule each, and whether their
  // logits come back too.
  std::vector<CanvasRowRule> canvas_rules;
  bool canvas_logits = false;
  std::vector<SegmentRows> segments;
  std::vector<int64_t> drawn_rows;  // per segment: its canvas rows drawn by the backend (canvas_rules)
  std::vector<float> router_temperature;  // [rows] when a segment's is not 1, else empty
};

Model::Model() = default;

Model::~Model() {
  if (!workers_) return;
  // Device memory goes back on the thread bound to its device.
  try {
    workers_->Run([&](int r) { ranks_[r].reset(); });
  } catch (...) {
  }
  workers_.reset();
}

Backend& Model::backend() { return *ranks_.at(0)->backend; }

void Model::OnRanks(const std::function<void(Rank&)>& fn) {
  if (!broken_.empty()) Fail(ErrorKind::kInternal, "tensor-parallel model is unusable: {}", broken_);
  if (!workers_) return fn(*ranks_[0]);
  try {
    workers_->Run([&](int r) { fn(*ranks_[r]); });
  } catch (const std::exception& e) {
    broken_ = fmt::format("a rank failed: {}", e.what());
    throw;
  }
}

std::unique_ptr<Model> Model::Load(const std::string& dir, const LoadOptions& opts) {
  if (opts.threads > 0) ThreadPool::SetGlobalThreads(opts.threads);
  std::unique_ptr<Model> m(new Model());
  m->cfg_ = ModelConfig::FromHf(LoadHfModelDir(dir));
  m->cfg_.load_quant = ParseLoadQuantization(opts.quantization);
  ArchFor(m->cfg_.family);  // fails early for an unregistered family
  if (opts.load_format != "auto" && opts.load_format != "dummy")
    Fail(ErrorKind::kInvalidArgument, "load format \"{}\" is not supported (expected auto or dummy)",
         opts.load_format);
  const bool dummy = opts.load_format == "dummy";
  const int n = opts.tensor_parallel_size;
  if (!ArchFor(m->cfg_.family).body->tensor_parallel && n > 1)  // its layer has no rank split yet
    Fail(ErrorKind::kUnsupported, "{}: tensor parallelism is not supported yet", FamilyName(m->cfg_.family));
  const std::vector<RankShard> shards = PlanShards(m->cfg_, n);  // fails for an impossible split
  // A bad cache type fails before any device is set up.
  const DType kv_dtype = ParseKvCacheDType(opts.kv_cache_dtype);
  const DType act_precision = ParseActivationPrecision(opts.activation_precision);
  RankGroup group;
  if (n == 1) {
    group.backends.push_back(MakeBackend(opts.device));
  } else {
    group = MakeRankGroup(opts.device, n);
  }
  for (auto& be : group.backends) {
    be->SetKvCacheDType(kv_dtype);  // before any cache exists
    be->SetActivationPrecision(act_precision);
  }
  for (int r = 0; r < n; ++r) {
    auto rank = std::make_unique<Rank>();
    rank->shard = shards[r];
    rank->cfg = LocalConfig(m->cfg_, shards[r]);
    rank->backend = std::move(group.backends[r]);
    if (n > 1) rank->comm = std::move(group.comms[r]);
    rank->weights = std::make_unique<ModelWeights>();
    rank->caches = std::make_unique<ModelCaches>();
    m->ranks_.push_back(std::move(rank));
  }
  if (n > 1) {
    std::vector<Communicator*> comms;
    for (auto& r : m->ranks_) comms.push_back(r->comm.get());
    m->workers_ = std::make_unique<RankWorkers>(n, group.bind_thread, [comms] {
      for (Communicator* c : comms) c->Abort();
    });
  }
  // One mapping of the checkpoint; every rank takes its slices of it.
  std::shared_ptr<CheckpointReader> reader = dummy ? nullptr : std::make_shared<CheckpointReader>(dir);
  m->OnRanks([&](Rank& rk) {
    LoadTarget t;
    t.be = rk.backend.get();
    t.dummy = dummy;
    t.shard = &rk.shard;
    t.reader = reader;
    t.progress = rk.shard.rank == 0;
    LoadModelWeights(m->cfg_, dir, rk.weights.get(), rk.shard.rank == 0 ? opts.log : nullptr, t);
    rk.backend->Synchronize();
  });
  const Rank& r0 = *m->ranks_[0];
  std::string split = n > 1 ? fmt::format(", tensor parallel {}", n) : "";
  if (r0.backend->IsDevice()) split += fmt::format(", {} activations", DTypeName(r0.backend->ActivationPrecision()));
  const std::string msg =
      dummy ? fmt::format("made {} ({} layers) with dummy {} weights on {} ({:.2f} GB per rank{})",
                          FamilyName(m->cfg_.family), m->cfg_.num_layers, m->cfg_.WeightFormat(), r0.backend->Name(),
                          r0.weights->device.total_bytes() / 1e9, split)
            : fmt::format("loaded {} ({} layers, {} tensors, weights {}) from {} on {}{}", FamilyName(m->cfg_.family),
                          m->cfg_.num_layers, reader->size(), m->cfg_.WeightFormat(), dir, r0.backend->Name(), split);
  spdlog::info("{}", msg);
  if (opts.log) opts.log(msg);
  return m;
}

DType ParseKvCacheDType(const std::string& name) {
  if (name == "f32") return DType::kF32;
  if (name == "bf16") return DType::kBF16;
  Fail(ErrorKind::kInvalidArgument, "kv cache dtype \"{}\" is not supported (expected f32 or bf16)", name);
}

DType ParseActivationPrecision(const std::string& name) {
  if (name == "f32") return DType::kF32;
  if (name == "bf16") return DType::kBF16;
  Fail(ErrorKind::kInvalidArgument, "activation precision \"{}\" is not supported (expected f32 or bf16)", name);
}

int64_t Model::KvBytesPerToken(const ModelConfig& c, DType kv_dtype) {
  // Attention layers may have different shapes (Gemma's sliding / global ones): their sum.
  const ArchBody& body = *ArchFor(c.family).body;
  int64_t values = 0;
  for (int64_t l = 0; l < c.num_layers; ++l)
    if (c.layer_kinds[l] == LayerKind::kFullAttention) values += body.kv_values_per_token(c, l);
  return values * static_cast<int64_t>(DTypeSize(kv_dtype));
}

int64_t Model::StateBytesPerSequence(const ModelConfig& c) {
  const int64_t per_layer = c.LinearConvDim() * std::max<int64_t>(c.linear_conv_kernel - 1, 0) +
                            c.linear_num_value_heads * c.linear_key_head_dim * c.linear_value_head_dim;
  return c.NumLayersOf(LayerKind::kLinearAttention) * per_layer * 4;
}

int64_t Model::KvBytesPerTokenPerRank() const { return KvBytesPerToken(ranks_[0]->cfg, KvCacheDType()); }
DType Model::KvCacheDType() const { return ranks_[0]->backend->KvCacheDType(); }
int64_t Model::StateBytesPerSequencePerRank() const { return StateBytesPerSequence(ranks_[0]->cfg); }

void Model::AllocateCaches(int64_t num_pages, int64_t page_size, int64_t num_state_slots) {
  if (num_pages < 0 || page_size <= 0 || num_state_slots < 0)
    Fail(ErrorKind::kInvalidArgument, "AllocateCaches: bad sizes (pages {}, page_size {}, slots {})", num_pages,
         page_size, num_state_slots);
  OnRanks([&](Rank& rk) {
    const ModelConfig& c = rk.cfg;  // this rank's heads
    ModelCaches& k = *rk.caches;
    k = ModelCaches{};
    Backend& be = *rk.backend;
    // Zero-filled caches. Host memory comes zero-filled from Allocate (calloc: for buffers this size
    // fresh pages of the OS, which cost nothing until a page is first written); device memory is
    // zeroed here. A memset of the host pool wrote every page of it at start: 1 GB (3 s) before the
    // demo model served, 256 MiB per engine of a test, most of the time of many engine tests.
    auto zeroed = [&](size_t bytes) {
      DeviceBuffer b(be, bytes);
      if (be.IsDevice()) be.Zero(b.data(), b.bytes());
      return b;
    };
    k.num_pages = num_pages;
    k.page_size = page_size;
    k.num_slots = num_state_slots;
    k.kv_dtype = be.KvCacheDType();  // K / V pages of the backend's element type; the states stay f32
    // K and V pages per attention layer, in layer order (cache_index): one shape for the Qwen
    // families, each layer's own where the architecture says (Gemma's sliding / global layers).
    const ArchBody& body = *ArchFor(c.family).body;
    for (int64_t l = 0; l < c.num_layers; ++l) {
      if (c.layer_kinds[l] != LayerKind::kFullAttention) continue;
      const int64_t per_row = body.kv_values_per_token(c, l) / 2;
      const size_t kv_bytes = static_cast<size_t>(num_pages * page_size * per_row) * DTypeSize(k.kv_dtype);
      k.k.push_back(zeroed(kv_bytes));
      k.v.push_back(zeroed(kv_bytes));
    }
    k.conv_per_slot = c.LinearConvDim() * std::max<int64_t>(c.linear_conv_kernel - 1, 0);
    k.recurrent_per_slot = c.linear_num_value_heads * c.linear_key_head_dim * c.linear_value_head_dim;
    for (int64_t i = 0; i < c.NumLayersOf(LayerKind::kLinearAttention); ++i) {
      k.conv.push_back(zeroed(static_cast<size_t>(k.conv_per_slot * num_state_slots) * sizeof(float)));
      k.recurrent.push_back(zeroed(static_cast<size_t>(k.recurrent_per_slot * num_state_slots) * sizeof(float)));
    }
  });
}

static std::vector<float> DownloadFloats(Backend& be, const float* p, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  if (n > 0) be.Download(out.data(), p, out.size() * sizeof(float));
  return out;
}

// The self-conditioning input's S is the processed logits z stored in the embedding's dtype
// (docs/DIFFUSION_GEMMA.md 5): rounded to bf16 in a bf16 checkpoint.
static bool StoresSInBf16(const ModelWeights& w) { return w.embed.dtype == DType::kBF16; }

std::vector<float> Model::SelfConditioningInput(const float* z, int64_t rows) {
  const ArchBody* body = ArchFor(cfg_.family).body;
  if (!body->self_conditioning)
    Fail(ErrorKind::kUnsupported, "{} has no canvas decoder (no self-conditioning input)", FamilyName(cfg_.family));
  if (ranks_.size() != 1)  // refused at load today; the product would need the whole embedding on one rank
    Fail(ErrorKind::kUnsupported, "the self-conditioning input is not implemented with tensor parallelism");
  Rank& rk = *ranks_[0];
  Backend& be = *rk.backend;
  const int64_t V = cfg_.vocab_size, H = cfg_.hidden_size;
  std::vector<float> out(static_cast<size_t>(rows * H));
  if (rows == 0) return out;
  DeviceBuffer ds = DeviceBuffer::Floats(be, rows * V), y = DeviceBuffer::Floats(be, rows * H);
  if (StoresSInBf16(*rk.weights)) {
    // S: z as the embedding's dtype stores it, rounded on the host's threads ([rows, vocab] is 268 MB
    // for a DiffusionGemma canvas; one thread took ~0.1 s a step).
    std::unique_ptr<float[]> s(new float[static_cast<size_t>(rows * V)]);
    ThreadPool::Global().ParallelFor(static_cast<size_t>(rows), [&](size_t a, size_t b, int) {
      for (int64_t i = static_cast<int64_t>(a) * V; i < static_cast<int64_t>(b) * V; ++i)
        s[static_cast<size_t>(i)] = Bf16ToF32(F32ToBf16(z[i]));
    });
    be.Upload(ds.data(), s.get(), static_cast<size_t>(rows * V) * sizeof(float));
  } else {
    be.Upload(ds.data(), z, static_cast<size_t>(rows * V) * sizeof(float));
  }
  body->self_conditioning(be, cfg_, *rk.weights, ds.f32(), rows, y.f32());
  be.Download(out.data(), y.f32(), out.size() * sizeof(float));
  return out;
}

void Model::ReleaseCanvasState(int64_t id) { ranks_[0]->canvas_states.erase(id); }

int64_t Model::kept_canvas_states() const { return static_cast<int64_t>(ranks_[0]->canvas_states.size()); }

int64_t Model::page_size() const { return ranks_[0]->caches->page_size; }
int64_t Model::num_pages() const { return ranks_[0]->caches->num_pages; }
int64_t Model::num_state_slots() const { return ranks_[0]->caches->num_slots; }

void Model::CopyStateSlot(int32_t from, int32_t to) {
  const ModelCaches& k0 = *ranks_[0]->caches;
  if (from < 0 || to < 0 || from >= k0.num_slots || to >= k0.num_slots)
    Fail(ErrorKind::kInvalidArgument, "CopyStateSlot({}, {}): slot out of range (allocated {})", from, to,
         k0.num_slots);
  if (from == to) return;
  OnRanks([&](Rank& rk) {
    ModelCaches& k = *rk.caches;
    for (size_t l = 0; l < k.conv.size(); ++l) {
      rk.backend->CopyBuffer(k.conv[l].f32() + to * k.conv_per_slot, k.conv[l].f32() + from * k.conv_per_slot,
                             k.conv_per_slot * sizeof(float));
      rk.backend->CopyBuffer(k.recurrent[l].f32() + to * k.recurrent_per_slot,
                             k.recurrent[l].f32() + from * k.recurrent_per_slot,
                             k.recurrent_per_slot * sizeof(float));
    }
  });
}

void Model::ResetStateSlot(int32_t slot) {
  const ModelCaches& k0 = *ranks_[0]->caches;
  if (slot < 0 || slot >= k0.num_slots)
    Fail(ErrorKind::kInvalidArgument, "ResetStateSlot({}): slot out of range (allocated {})", slot, k0.num_slots);
  OnRanks([&](Rank& rk) {
    ModelCaches& k = *rk.caches;
    for (size_t l = 0; l < k.conv.size(); ++l) {
      rk.backend->Zero(k.conv[l].f32() + slot * k.conv_per_slot, k.conv_per_slot * sizeof(float));
      rk.backend->Zero(k.recurrent[l].f32() + slot * k.recurrent_per_slot, k.recurrent_per_slot * sizeof(float));
    }
  });
}

ForwardResult Model::Forward(const Batch& batch, const ForwardOptions& opts) {
  const ModelConfig& c = cfg_;
  const ModelCaches& caches = *ranks_[0]->caches;
  const int64_t V = c.vocab_size;
  const bool hybrid = c.NumLayersOf(LayerKind::kLinearAttention) > 0;
  // Every check happens here, before any rank starts: ranks must never fail one by one.
  Prepared p;
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
      const int64_t have = static_cast<int64_t>(s.cache->pages.size()) * caches.page_size;
      if (need > have)
        Fail(ErrorKind::kInvalidArgument, "segment {}: pages cover {} positions, {} needed", si, have, need);
      for (int32_t pg : s.cache->pages)
        if (pg < 0 || pg >= caches.num_pages)
          Fail(ErrorKind::kInvalidArgument, "segment {}: page id {} out of range (allocated {})", si, pg,
               caches.num_pages);
    }
    if (s.cache && hybrid && s.cache->state_slot < 0 && s.first_pos > 0)
      Fail(ErrorKind::kInvalidArgument, "segment {}: hybrid model needs a state slot", si);
    if (s.cache && hybrid && s.cache->state_slot >= caches.num_slots)
      Fail(ErrorKind::kInvalidArgument, "state slot {} is out of range (allocated {})", s.cache->state_slot,
           caches.num_slots);
    SegmentRows r;
    r.row0 = static_cast<int64_t>(p.tokens.size());
    r.T = T;
    r.first_pos = s.first_pos;
    r.commit_len = s.commit_len;
    r.block_size = s.block_size;
    r.cache = s.cache;
    p.segments.push_back(r);
    for (int64_t t = 0; t < T; ++t) {
      if (s.tokens[t] < 0 || s.tokens[t] >= V)
        Fail(ErrorKind::kInvalidArgument, "segment {}: token id {} out of range [0, {})", si, s.tokens[t], V);
      p.tokens.push_back(s.tokens[t]);
      p.positions.push_back(s.first_pos + t);
    }
    if (!s.sample.empty() && s.sample.size() != s.logits_rows.size())
      Fail(ErrorKind::kInvalidArgument, "segment {}: {} sampling rules for {} logits rows", si, s.sample.size(),
           s.logits_rows.size());
    if (!s.sample_masks.empty() &&
        s.sample_masks.size() != s.sample.size() * static_cast<size_t>((c.vocab_size + 31) / 32))
      Fail(ErrorKind::kInvalidArgument, "segment {}: {} mask words for {} sampled rows of a {}-token vocabulary", si,
           s.sample_masks.size(), s.sample.size(), c.vocab_size);
    for (const RowSampling& rule : s.sample)
      if (!(rule.temperature <= 0.f || (rule.top_p > 0.f && rule.top_p <= 1.f && rule.min_p >= 0.f &&
                                        rule.min_p <= 1.f && rule.top_k >= 0 && rule.uniform >= 0.0 &&
                                        rule.uniform < 1.0)))
        Fail(ErrorKind::kInvalidArgument, "segment {}: bad sampling rule", si);
    for (int32_t lr : s.logits_rows)
      if (lr < 0 || lr >= T) Fail(ErrorKind::kInvalidArgument, "segment {}: logits row {} out of range", si, lr);
    if (!s.canvas_sample.empty()) {
      if (c.canvas_length <= 0 || !s.sample.empty() || s.canvas_sample.size() != s.logits_rows.size())
        Fail(ErrorKind::kInvalidArgument,
             "segment {}: {} canvas rules for {} logits rows ({} sampling rules; canvas model: {})", si,
             s.canvas_sample.size(), s.logits_rows.size(), s.sample.size(), c.canvas_length > 0);
      for (int32_t lr : s.logits_rows)
        if (lr < s.commit_len) Fail(ErrorKind::kInvalidArgument, "segment {}: logits row {} is not a canvas row", si, lr);
      for (const CanvasRowRule& rule : s.canvas_sample)
        if (!(rule.temperature > 0.f && std::isfinite(rule.temperature) && rule.uniform >= 0.0 && rule.uniform < 1.0))
          Fail(ErrorKind::kInvalidArgument, "segment {}: bad canvas rule (temperature {}, uniform {})", si,
               rule.temperature, rule.uniform);
    }
    // A canvas-decoder model (DiffusionGemma): committed rows are causal (the encoder), the
    // uncommitted block is a canvas (the decoder) with an optional self-conditioning input.
    const bool canvas_model = c.canvas_length > 0;
    if (canvas_model && s.block_size > 0)
      Fail(ErrorKind::kInvalidArgument, "segment {}: {} has no block-causal mask (block_size {})", si,
           FamilyName(c.family), s.block_size);
    const int64_t canvas_rows = T - s.commit_len;
    if (!s.self_conditioning.empty() &&
        (!canvas_model || canvas_rows == 0 ||
         static_cast<int64_t>(s.self_conditioning.size()) != canvas_rows * c.hidden_size))
      Fail(ErrorKind::kInvalidArgument,
           "segment {}: self-conditioning input of {} values; expected none, or [{} canvas rows, {}] for a "
           "canvas-decoder model",
           si, s.self_conditioning.size(), canvas_model ? canvas_rows : 0, c.hidden_size);
    p.segments.back().canvas = canvas_model && canvas_rows > 0;
    p.segments.back().self_conditioning = s.self_conditioning.empty() ? nullptr : s.self_conditioning.data();
    if (s.canvas_state >= 0 || s.self_conditioning_kept) {
      // Kept inputs: a named canvas drawn over all of its rows, in order (its [C, hidden] is stored whole).
      bool whole = s.canvas_state >= 0 && !s.canvas_sample.empty() &&
                   static_cast<int64_t>(s.logits_rows.size()) == canvas_rows;
      for (size_t i = 0; whole && i < s.logits_rows.size(); ++i)
        whole = s.logits_rows[i] == s.commit_len + static_cast<int64_t>(i);
      if (!whole)
        Fail(ErrorKind::kInvalidArgument,
             "segment {}: a kept self-conditioning input (canvas state {}) needs every canvas row drawn, in order", si,
             s.canvas_state);
      for (size_t sj = 0; sj < si; ++sj)
        if (batch.segments[sj].canvas_state == s.canvas_state)
          Fail(ErrorKind::kInvalidArgument, "segments {} and {}: the same canvas state {}", sj, si, s.canvas_state);
      if (s.self_conditioning_kept) {
        const auto& kept = ranks_[0]->canvas_states;
        const auto it = kept.find(s.canvas_state);
        if (!s.self_conditioning.empty() || it == kept.end() ||
            it->second.bytes() != static_cast<size_t>(canvas_rows * c.hidden_size) * sizeof(float))
          Fail(ErrorKind::kInvalidArgument, "segment {}: no kept self-conditioning input of {} rows for canvas state {}",
               si, canvas_rows, s.canvas_state);
      }
      p.segments.back().canvas_state = s.canvas_state;
      p.segments.back().self_conditioning_kept = s.self_conditioning_kept;
    }
    if (!(s.router_temperature > 0.f && std::isfinite(s.router_temperature)))
      Fail(ErrorKind::kInvalidArgument, "segment {}: router temperature {} must be finite and > 0", si,
           s.router_temperature);
  }
  // Router temperatures per row, only when some segment's is not 1.
  for (const Segment& s : batch.segments)
    if (s.router_temperature != 1.f) {
      for (const Segment& t : batch.segments)
        p.router_temperature.insert(p.router_temperature.end(), t.tokens.size(), t.router_temperature);
      break;
    }
  // Logits rows: the returned ones first, then the sampled ones, then the canvas rows the backend
  // draws (each class in segment order).
  auto row_class = [](const Segment& s) { return !s.sample.empty() ? 1 : !s.canvas_sample.empty() ? 2 : 0; };
  p.drawn_rows.assign(batch.segments.size(), 0);
  for (int pass = 0; pass < 3; ++pass)
    for (size_t si = 0; si < batch.segments.size(); ++si) {
      const Segment& s = batch.segments[si];
      if (row_class(s) != pass) continue;
      for (int32_t lr : s.logits_rows) p.logit_rows.push_back(p.segments[si].row0 + lr);
      if (!s.sample_masks.empty())
        for (size_t i = 0; i < s.sample.size(); ++i) p.masked_rows.push_back(static_cast<int64_t>(p.rules.size() + i));
      p.masks.insert(p.masks.end(), s.sample_masks.begin(), s.sample_masks.end());
      p.rules.insert(p.rules.end(), s.sample.begin(), s.sample.end());
      p.canvas_rules.insert(p.canvas_rules.end(), s.canvas_sample.begin(), s.canvas_sample.end());
      p.drawn_rows[si] = static_cast<int64_t>(s.canvas_sample.size());
      p.canvas_logits = p.canvas_logits || (pass == 2 && s.canvas_logits);
      if (pass == 0) p.full_rows += static_cast<int64_t>(s.logits_rows.size());
    }
  if (!p.canvas_rules.empty() && ranks_.size() != 1)  // refused at load for this family today
    Fail(ErrorKind::kUnsupported, "canvas rows drawn on the device are not implemented with tensor parallelism");
  ForwardResult res;
  OnRanks([&](Rank& rk) { ForwardRank(rk, p, opts, rk.shard.rank == 0 ? &res : nullptr); });
  return res;
}

// The expert statistics of a forward from the per-layer counts (backend memory, [layers, experts]):
// tokens per expert and the distinct experts of each MoE layer (-1 and no counts for dense layers).
static void ReadExpertCounts(Backend& be, const ModelConfig& c, const ModelWeights& w, const DeviceBuffer& counts,
                             ForwardResult* res) {
  const int64_t E = c.num_experts;
  std::vector<int32_t> host(static_cast<size_t>(c.num_layers * E));
  if (!host.empty()) be.Download(host.data(), counts.data(), host.size() * sizeof(int32_t));
  for (int64_t l = 0; l < c.num_layers; ++l) {
    if (!w.layers[l].is_moe) {
      res->distinct_experts_per_layer.push_back(-1);
      res->expert_token_counts.emplace_back();
      continue;
    }
    std::vector<int64_t> layer(host.begin() + l * E, host.begin() + (l + 1) * E);
    res->distinct_experts_per_layer.push_back(
        static_cast<int32_t>(std::count_if(layer.begin(), layer.end(), [](int64_t n) { return n > 0; })));
    res->expert_token_counts.push_back(std::move(layer));
  }
}

// The final norm of n rows `in` -> `out` (may alias), row i being batch row batch_rows[i] (null: i):
// ModelWeights::final_norm, or canvas_final_norm for the canvas rows of a model that has one.
static void FinalNorm(Backend& be, const ModelConfig& c, const ModelWeights& w, const std::vector<SegmentRows>& segs,
                      const int64_t* batch_rows, int64_t n, const float* in, float* out) {
  const int64_t H = c.hidden_size;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const bool one_plus = c.norm_style == RmsNormStyle::kOnePlusScale;
  if (!w.canvas_final_norm) return be.RmsNorm(in, n, H, H, w.final_norm, eps, one_plus, out, H);
  auto canvas_row = [&](int64_t i) {
    const int64_t r = batch_rows ? batch_rows[i] : i;
    for (const SegmentRows& s : segs)
      if (s.canvas && r >= s.row0 + s.commit_len && r < s.row0 + s.T) return true;
    return false;
  };
  for (int64_t i = 0, run = 1; i < n; i += run) {  // one call per run of rows of one kind
    const bool canvas = canvas_row(i);
    for (run = 1; i + run < n && canvas_row(i + run) == canvas;) ++run;
    be.RmsNorm(in + i * H, run, H, H, canvas ? w.canvas_final_norm : w.final_norm, eps, one_plus, out + i * H, H);
  }
}

// One rank's forward; `res` (rank 0 only) receives the logits, hidden states and expert statistics.
void Model::ForwardRank(Rank& rk, const Prepared& p, const ForwardOptions& opts, ForwardResult* res) {
  const ModelConfig& c = cfg_;
  const ModelWeights& w = *rk.weights;
  Backend& be = *rk.backend;
  Communicator* comm = rk.comm.get();
  const RankShard& sh = rk.shard;
  const int64_t H = c.hidden_size, V = c.vocab_size;

  // One step for the backend (a CUDA graph when the same step ran before). Not with tensor
  // parallelism: the collectives queue on the stream outside the backend's recording.
  if (!comm) be.BeginStep();
  LayerContext ctx;
  ctx.be = &be;
  ctx.cfg = &rk.cfg;
  ctx.caches = rk.caches.get();
  ctx.gdn_mode = opts.gdn_mode;
  ctx.segments = p.segments;
  for (SegmentRows& s : ctx.segments)
    if (s.self_conditioning_kept) s.kept_input = rk.canvas_states.at(s.canvas_state).f32();
  const int64_t R = static_cast<int64_t>(p.tokens.size());
  ctx.rows = R;
  ctx.positions = p.positions.data();
  ctx.router_temperature = p.router_temperature.empty() ? nullptr : p.router_temperature.data();
  ctx.shard = &sh;
  ctx.comm = comm;
  if (res) res->rows_processed = R;

  // Activations live in the backend's memory; token ids and positions stay on the host.
  DeviceBuffer h = DeviceBuffer::Floats(be, R * H), x = DeviceBuffer::Floats(be, R * H),
               o = DeviceBuffer::Floats(be, R * H);
  const ArchBody& body = *ArchFor(c.family).body;  // the family's embedding and layer (arch.h)
  body.embed(ctx, w, p.tokens.data(), h.f32());
  if (res && opts.capture_hidden) res->hidden.push_back(h.ToHost());
  // Expert statistics (routing is global and the same on every rank): token counts per layer and
  // expert, counted in backend memory and read once after the step (a read per layer would end the
  // step there: no CUDA graph, a host round trip per layer).
  const bool stats_wanted = res && opts.collect_expert_stats;
  const int64_t E = c.num_experts;
  DeviceBuffer expert_counts;
  if (stats_wanted && E > 0) {
    expert_counts = DeviceBuffer(be, static_cast<size_t>(c.num_layers * E) * sizeof(int32_t));
    be.Zero(expert_counts.data(), expert_counts.bytes());
  }
  const LayerStream stream{h.f32(), x.f32(), o.f32()};
  for (int64_t l = 0; l < c.num_layers; ++l) {
    body.layer(ctx, w, l, stream, stats_wanted ? expert_counts.i32() + l * E : nullptr);
    if (res && opts.capture_hidden) res->hidden.push_back(h.ToHost());
  }
  if (res && opts.capture_hidden) {
    // transformers reports the final norm's output in place of the last layer's.
    FinalNorm(be, c, w, ctx.segments, nullptr, R, h.f32(), x.f32());
    be.Download(res->hidden.back().data(), x.f32(), static_cast<size_t>(R * H) * sizeof(float));
  }
  const int64_t L = static_cast<int64_t>(p.logit_rows.size()), F = p.full_rows,
                K = static_cast<int64_t>(p.canvas_rules.size()), S = L - F - K;
  DeviceBuffer sel = DeviceBuffer::Floats(be, L * H);
  // One copy per run of consecutive rows (a diffusion block's rows are one run).
  for (int64_t i = 0, run = 1; i < L; i += run) {
    for (run = 1; i + run < L && p.logit_rows[i + run] == p.logit_rows[i] + run;) ++run;
    be.Copy2D(h.f32() + p.logit_rows[i] * H, run, H, H, sel.f32() + i * H, H);
  }
  FinalNorm(be, c, w, ctx.segments, p.logit_rows.data(), L, sel.f32(), sel.f32());
  if (!sh.sharded()) {
    // Rows in order: F full rows (logits to the host), S sampled rows, K canvas rows; the lm_head runs
    // over kLogitsChunkRows of them at a time into one buffer, each chunk's rows consumed before the
    // next product overwrites it.
    const int64_t chunk = std::min(L, kLogitsChunkRows);
    const bool chunked = L > chunk;
    DeviceBuffer logits = DeviceBuffer::Floats(be, chunk * V);
    res->logits.resize(F * V);
    // Sampled rows: tokens and probabilities (S ints, then S floats) are all that leaves the device.
    DeviceBuffer picked;
    if (S > 0) picked = DeviceBuffer(be, static_cast<size_t>(S) * 8);
    // Canvas rows: their picks and the next step's self-conditioning input are all that leaves the
    // device (unless their logits are asked for: read before the division, which ends the step there).
    DeviceBuffer canvas_picks, soft;
    if (K > 0) {
      canvas_picks = DeviceBuffer(be, static_cast<size_t>(K) * sizeof(CanvasRowPick));
      soft = DeviceBuffer::Floats(be, K * H);
      if (p.canvas_logits) res->canvas_logits.resize(K * V);
    }
    auto* picks = static_cast<CanvasRowPick*>(canvas_picks.data());
    for (int64_t i0 = 0; i0 < L; i0 += chunk) {
      const int64_t n = std::min(chunk, L - i0);
      be.MatMul(sel.f32() + i0 * H, n, w.lm_head, logits.f32());
      if (body.logits) body.logits(ctx, logits.f32(), n, V);
      // The chunk's rows [a, b) of the kinds' ranges [lo, hi), at logits row a - i0.
      auto part = [&](int64_t lo, int64_t hi, int64_t* a, int64_t* b) {
        *a = std::max(lo, i0), *b = std::min(hi, i0 + n);
        return *a < *b;
      };
      int64_t a = 0, b = 0;
      // Full rows go to the host after the step, or now when a later chunk reuses the buffer.
      if (chunked && part(0, F, &a, &b))
        be.Download(res->logits.data() + a * V, logits.f32() + (a - i0) * V, static_cast<size_t>((b - a) * V) * 4);
      if (part(F, F + S, &a, &b)) {
        // The chunk's masked rows first (rows of the chunk buffer, their words in p.masks' order).
        std::vector<int64_t> rows;
        size_t first = SIZE_MAX;
        for (size_t m = 0; m < p.masked_rows.size(); ++m) {
          const int64_t r = F + p.masked_rows[m];
          if (r < a || r >= b) continue;
          if (first == SIZE_MAX) first = m;
          rows.push_back(r - i0);
        }
        if (!rows.empty())
          be.MaskLogitsRows(logits.f32(), V, rows.data(), static_cast<int64_t>(rows.size()),
                            p.masks.data() + first * static_cast<size_t>((V + 31) / 32));
        be.SampleRows(logits.f32() + (a - i0) * V, b - a, V, p.rules.data() + (a - F), picked.i32() + (a - F),
                      picked.f32() + S + (a - F));
      }
      if (part(F + S, L, &a, &b)) {
        const int64_t k0 = a - F - S;
        float* z = logits.f32() + (a - i0) * V;
        if (p.canvas_logits)
          be.Download(res->canvas_logits.data() + k0 * V, z, static_cast<size_t>((b - a) * V) * sizeof(float));
        be.CanvasSampleRows(z, b - a, V, p.canvas_rules.data() + k0, StoresSInBf16(w), picks + k0);
        body.self_conditioning(be, c, w, z, b - a, soft.f32() + k0 * H);
      }
    }
    // Named canvases keep their next input here (canvas rows: the drawn segments' rows in segment
    // order); the others' come back.
    bool soft_to_host = false;
    for (int64_t si = 0, k0 = 0; si < static_cast<int64_t>(p.segments.size()) && K > 0; ++si) {
      const SegmentRows& s = p.segments[si];
      const int64_t n = p.drawn_rows[si];
      if (n == 0) continue;
      if (s.canvas_state < 0) {
        soft_to_host = true;
      } else {
        DeviceBuffer& kept = rk.canvas_states[s.canvas_state];
        if (kept.bytes() != static_cast<size_t>(n * H) * sizeof(float)) kept = DeviceBuffer::Floats(be, n * H);
        be.CopyBuffer(kept.data(), soft.f32() + k0 * H, kept.bytes());
      }
      k0 += n;
    }
    be.EndStep();
    if (K > 0) {
      res->canvas_picks.resize(static_cast<size_t>(K));
      be.Download(res->canvas_picks.data(), canvas_picks.data(), canvas_picks.bytes());
      if (soft_to_host) res->canvas_soft = DownloadFloats(be, soft.f32(), K * H);
    }
    if (F > 0 && !chunked) be.Download(res->logits.data(), logits.f32(), res->logits.size() * sizeof(float));
    if (S > 0) {
      std::vector<int32_t> host(static_cast<size_t>(S) * 2);
      be.Download(host.data(), picked.data(), picked.bytes());
      res->picks.resize(S);
      std::vector<float> row;
      for (int64_t i = 0; i < S; ++i) {
        ForwardResult::Pick& pk = res->picks[i];
        pk.token = host[i];
        std::memcpy(&pk.prob, &host[S + i], sizeof(float));
        if (pk.token >= 0) continue;
        // A row the backend could not finish: sample it here from its logits, computed again (the
        // chunk buffer may hold other rows by now).
        row.resize(V);
        be.MatMul(sel.f32() + (F + i) * H, 1, w.lm_head, logits.f32());
        if (body.logits) body.logits(ctx, logits.f32(), 1, V);
        const auto m = std::find(p.masked_rows.begin(), p.masked_rows.end(), i);
        if (m != p.masked_rows.end()) {
          const int64_t zero = 0;
          be.MaskLogitsRows(logits.f32(), V, &zero, 1,
                            p.masks.data() + static_cast<size_t>(m - p.masked_rows.begin()) * ((V + 31) / 32));
        }
        be.Download(row.data(), logits.f32(), static_cast<size_t>(V) * sizeof(float));
        pk.token = SampleRowReference(row.data(), V, p.rules[i], &pk.prob);
      }
    }
    if (stats_wanted) ReadExpertCounts(be, c, w, expert_counts, res);
    return;
  }
  // Vocab-parallel lm_head: each rank's [L, its vocab share] padded to a block of L * vocab_stride,
  // all-gathered, then rank 0 puts the columns in vocabulary order.
  const int64_t block = L * sh.vocab_stride;
  DeviceBuffer part = DeviceBuffer::Floats(be, block), all = DeviceBuffer::Floats(be, block * sh.size);
  be.MatMul(sel.f32(), L, w.lm_head, part.f32());
  comm->AllGather(part.f32(), block, all.f32());
  if (!res) return;
  if (stats_wanted) ReadExpertCounts(be, c, w, expert_counts, res);
  std::vector<float> host = all.ToHost();
  res->logits.resize(L * V);
  const std::vector<RankShard> plan = PlanShards(c, sh.size);
  for (int r = 0; r < sh.size; ++r) {
    const IndexRange vr = plan[r].vocab;
    for (int64_t i = 0; i < L; ++i)
      std::memcpy(res->logits.data() + i * V + vr.begin, host.data() + r * block + i * vr.count,
                  static_cast<size_t>(vr.count) * sizeof(float));
  }
  // The sampled rows of a split model are drawn here, from the gathered logits (masked rows first:
  // the base Backend's MaskLogitsRows works on host memory).
  for (size_t m = 0; m < p.masked_rows.size(); ++m)
    be.Backend::MaskLogitsRows(res->logits.data() + (F + p.masked_rows[m]) * V, V, std::array<int64_t, 1>{0}.data(),
                               1, p.masks.data() + m * static_cast<size_t>((V + 31) / 32));
  res->picks.resize(S);
  SamplingCandidates scratch;
  for (int64_t i = 0; i < S; ++i)
    res->picks[i].token = SampleRowReference(res->logits.data() + (F + i) * V, V, p.rules[i], &res->picks[i].prob,
                                             &scratch);
  res->logits.resize(F * V);
}

}  // namespace tessera
