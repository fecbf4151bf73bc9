// tessera tests: a micro-benchmark of a full-size config on the CUDA backend with dummy bf16 weights
// (--load-format dummy), each step measured against its floor (DESIGN.md section 5): batch-1 decode
// at several contexts, aggregate decode of B concurrent sequences, prefill of one prompt, a
// block-diffusion denoising step of one 32-token block (and of 8 blocks of 8 sequences batched); for a
// canvas-diffusion config (DiffusionGemma) canvas steps of 1 and B sequences instead of decode and
// denoise rows (CanvasRow).
// Not a timed test: it runs only when TESSERA_CUDA_BENCH_CONFIG names a directory holding a
// config.json and a CUDA device exists (scripts/gpu_check.sh sets it), prints its numbers and
// checks only that the logits are finite and the drawn tokens valid.
//
// Environment (defaults in brackets):
//   TESSERA_CUDA_BENCH_CONFIG         config dir (required)
//   TESSERA_CUDA_BENCH_CONTEXTS       contexts of the batch-1 decode and 1-block denoise rows [1024,8192]
//   TESSERA_CUDA_BENCH_BATCHES        concurrent sequences of the aggregate decode rows (canvas rows) [8,32,64]
//   TESSERA_CUDA_BENCH_BATCH_CONTEXT  context of the aggregate decode and 8-block denoise rows [1024]
//   TESSERA_CUDA_BENCH_DECODE         timed steps per decode row [64] (denoise rows: a quarter, >= 4)
//   TESSERA_CUDA_BENCH_PREFILL        prompt length of the prefill row [4096] (0: no prefill row)
//   TESSERA_CUDA_BENCH_DENOISE_BATCH  sequences of the batched denoise row [8] (0: no such row)
//   TESSERA_CUDA_BENCH_KV_DTYPE       the KV cache's element type, f32 or bf16 (--kv-cache-dtype) [f32]
//   TESSERA_CUDA_BENCH_CANVAS_HOST    0: canvas rows without their "host" variant (at 64 canvases it
//                                     moves 17 GB of logits a step each way) [1]
//   TESSERA_CUDA_BENCH_LOGITS         1: decode / denoise rows bring their logits to the host instead of
//                                     greedy tokens drawn on the device (Segment::sample) [0]
//   TESSERA_CUDA_BENCH_MATMUL         rows of the dense-product comparison (CudaBench.MatMulRows, its
//                                     own test) [unset: not run], e.g. 32,64,128,256,512,1024
// An empty list (e.g. TESSERA_CUDA_BENCH_BATCHES=,) skips those rows; with TESSERA_CUDA_PROFILE=1
// the backend prints its per-op profile of the whole run at the end (docs/CUDA.md).
//
// Output: one line for the measured copy bandwidth, then one line per row:
//   bench-bw  | <config> | device copy ... | <TB/s> ... | bf16 matmul 790 TFLOP/s (constant, not measured) |
//               kv cache <f32 | bf16>
//   bench-row | <config> | <row> | <ms per step> | <token rows/s> | <GB> | <FLOP> | floor <ms> |
//               ratio <floor / measured> | experts/layer <mean distinct experts per MoE layer>
// tok/s counts token rows run per second (for a denoising step: the block's rows, not finished
// tokens). floor = max(bytes / measured copy bandwidth, FLOPs / 790e12); bytes and FLOPs as
// CountStep says. experts/layer, and the experts counted in the bytes, come from
// collect_expert_stats on one extra untimed forward of the row's inputs with nothing committed.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "model/model.h"
#include "model/weight_census.h"
#include "test_util.h"

namespace tessera {
namespace {

// bf16 dense matrix-product rate of the H200 machines the GPU runs use (an 8192^3 bf16 product
// measured there, DESIGN.md section 5): a constant, not measured by this test.
constexpr double kBf16MatmulFlopsPerSecond = 790e12;
constexpr int64_t kPageSize = 16;
constexpr int64_t kPrefillChunk = 512;            // context prefill: tokens per segment per forward
constexpr int64_t kPrefillRowsPerForward = 4096;  // context prefill: sequences share a forward up to this
constexpr int64_t kDenoiseBlock = 32;
constexpr int64_t kDenoiseBatchedSequences = 8;

int64_t EnvInt(const char* name, int64_t def) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoll(v) : def;
}

std::vector<int64_t> EnvList(const char* name, const char* def) {
  const char* v = std::getenv(name);
  std::stringstream in(v && *v ? v : def);
  std::vector<int64_t> out;
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(std::atoll(item.c_str()));
  return out;
}

double Seconds(std::chrono::steady_clock::time_point a) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
}

bool AllFinite(const std::vector<float>& v) {
  for (float x : v)
    if (!std::isfinite(x)) return false;
  return true;
}

// Finite logits, and drawn tokens in the vocabulary with a probability in (0, 1].
bool ResultValid(const ForwardResult& r, int64_t vocab) {
  for (const ForwardResult::Pick& p : r.picks)
    if (p.token < 0 || p.token >= vocab || !(p.prob > 0.f && p.prob <= 1.f)) return false;
  return AllFinite(r.logits);
}

// The shape of one forward step, as the floor needs it.
struct StepShape {
  int64_t sequences = 1;
  int64_t rows_per_sequence = 1;  // tokens each segment runs
  int64_t logits_rows = 1;        // over all sequences
  double cached_keys = 0;         // committed positions each sequence reads from its KV pages
  int64_t committed_rows = 0;     // rows per sequence whose K/V are written to the pages
  double attended_keys = 0;       // keys one row attends (cached + fresh), mean over rows
};

struct StepCost {
  double bytes = 0, flops = 0;
  double experts_per_layer = 0;  // mean distinct routed experts per MoE layer
};

// What one step must read and compute. Assumptions:
//  - weights in the model's format (bf16: 2 bytes a parameter, vectors too; quantized: codes + scales;
//    WeightCensus::FormatStepBytes, the count `tessera
//    inspect` prints) and each is read once per step whatever the row count: all non-expert tensors of every layer
//    (attention or Gated DeltaNet projections, norms, router, shared expert and its gate, dense
//    FFNs), the routed experts the step touches (`distinct_per_layer` from collect_expert_stats;
//    without stats the upper bound min(E, rows * k)), the whole lm_head, one embedding row a token;
//  - the KV cache holds kv_dtype (Model::KvBytesPerToken): each sequence's committed prefix is read once,
//    its committed rows written once; fresh rows' K/V stay in activations;
//  - Gated DeltaNet conv + recurrent state (Model::StateBytesPerSequence, f32) is read and written
//    once per sequence per step;
//  - activations, routing metadata and logits are not counted;
//  - FLOPs = 2 * active parameters * rows (k routed experts a row; lm_head only for logits rows)
//    + attention 4 * attended keys * heads * head_dim per row per full-attention layer
//    + the recurrent delta rule ~6 * value_heads * key_dim * value_dim per row per GDN layer.
StepCost CountStep(const ModelConfig& c, const WeightCensus& w, DType kv_dtype, const StepShape& s,
                   const std::vector<int32_t>& distinct_per_layer) {
  const int64_t rows = s.sequences * s.rows_per_sequence;
  StepCost cost;
  double touched = 0;
  if (distinct_per_layer.empty()) {
    touched = static_cast<double>(w.moe_layers * std::min(c.num_experts, rows * c.num_experts_per_tok));
  } else {
    for (int32_t d : distinct_per_layer) touched += std::max(d, 0);
  }
  cost.experts_per_layer = w.moe_layers ? touched / w.moe_layers : 0;
  const double kv_bytes = static_cast<double>(s.sequences) * (s.cached_keys + s.committed_rows) *
                          Model::KvBytesPerToken(c, kv_dtype);
  const double state_bytes = 2.0 * s.sequences * Model::StateBytesPerSequence(c);
  cost.bytes = w.FormatStepBytes(touched, rows) + kv_bytes + state_bytes;  // the weights' format, vectors included

  const double attention = 4.0 * s.attended_keys * c.num_heads * c.head_dim *
                           c.NumLayersOf(LayerKind::kFullAttention);
  const double delta_rule = 6.0 * c.linear_num_value_heads * c.linear_key_head_dim *
                            c.linear_value_head_dim * c.NumLayersOf(LayerKind::kLinearAttention);
  cost.flops = rows * (2.0 * w.MatmulParamsPerRow() + attention + delta_rule) + 2.0 * w.lm_head * s.logits_rows;
  return cost;
}

// Device-to-device copy bandwidth, counting bytes read and written.
double MeasureCopyBandwidth(Backend& be, int copies) {
  const size_t bytes = size_t{1} << 30;
  DeviceBuffer src(be, bytes), dst(be, bytes);
  be.Zero(src.data(), bytes);
  be.CopyBuffer(dst.data(), src.data(), bytes);  // warm-up
  be.Synchronize();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < copies; ++i) be.CopyBuffer(dst.data(), src.data(), bytes);
  be.Synchronize();
  return 2.0 * static_cast<double>(bytes) * copies / Seconds(t0);
}

int64_t PagesFor(int64_t positions) { return (positions + kPageSize - 1) / kPageSize; }

// Hands out page runs and state slots from the model's caches; Clear() starts over (content of
// earlier sequences is overwritten).
class CachePool {
 public:
  explicit CachePool(Model& m) : model_(m), hybrid_(m.config().NumLayersOf(LayerKind::kLinearAttention) > 0) {}
  void Clear() {
    sequences_.clear();
    next_page_ = 0;
  }
  SequenceCache* New(int64_t positions) {
    SequenceCache s;
    for (int64_t p = 0; p < PagesFor(positions); ++p) s.pages.push_back(static_cast<int32_t>(next_page_++));
    EXPECT_LE(next_page_, model_.num_pages()) << "bench cache sizing is wrong";
    s.state_slot = hybrid_ ? static_cast<int32_t>(sequences_.size()) : -1;
    sequences_.push_back(std::move(s));
    Restart(&sequences_.back());
    return &sequences_.back();
  }
  void Restart(SequenceCache* s) {
    if (hybrid_) model_.ResetStateSlot(s->state_slot);
  }
  std::vector<SequenceCache*> NewMany(int64_t n, int64_t positions) {
    std::vector<SequenceCache*> out(n);
    for (SequenceCache*& s : out) s = New(positions);
    return out;
  }

 private:
  Model& model_;
  const bool hybrid_;
  std::deque<SequenceCache> sequences_;
  int64_t next_page_ = 0;
};

class CudaBenchRun {
 public:
  CudaBenchRun(Model& m, std::string name, int64_t steps, double copy_bandwidth)
      : model_(m), cfg_(m.config()), census_(WeightCensus::Of(cfg_)), pool_(m), name_(std::move(name)), steps_(steps),
        bandwidth_(copy_bandwidth), host_logits_(EnvInt("TESSERA_CUDA_BENCH_LOGITS", 0) != 0) {}

  // Greedy tokens drawn on the device for every logits row (what a server does for greedy
  // requests), unless TESSERA_CUDA_BENCH_LOGITS=1 asks for the logits themselves.
  void DrawOnDevice(Segment& s, int32_t exclude = -1) const {
    if (host_logits_) return;
    RowSampling greedy;
    greedy.exclude = exclude;
    s.sample.assign(s.logits_rows.size(), greedy);
  }

  CachePool& pool() { return pool_; }

  std::vector<int32_t> Tokens(int64_t n, int64_t salt) const {
    std::vector<int32_t> t(n);
    for (int64_t i = 0; i < n; ++i) t[i] = static_cast<int32_t>((i * 7919 + salt * 104729) % cfg_.vocab_size);
    return t;
  }

  static Segment Committed(SequenceCache* cache, int64_t first_pos, std::vector<int32_t> tokens) {
    Segment s;
    s.cache = cache;
    s.first_pos = first_pos;
    s.tokens = std::move(tokens);
    s.commit_len = static_cast<int64_t>(s.tokens.size());
    s.logits_rows = {static_cast<int32_t>(s.tokens.size()) - 1};
    return s;
  }

  // Commits `ctx` tokens to every sequence, in chunks, several sequences a forward.
  void PrefillContexts(const std::vector<SequenceCache*>& seqs, int64_t ctx) {
    const int64_t n = static_cast<int64_t>(seqs.size()), per_forward = kPrefillRowsPerForward / kPrefillChunk;
    for (int64_t first = 0; first < n; first += per_forward)
      for (int64_t p = 0; p < ctx; p += kPrefillChunk) {
        Batch b;
        for (int64_t i = first; i < std::min(n, first + per_forward); ++i)
          b.segments.push_back(Committed(seqs[i], p, Tokens(std::min(kPrefillChunk, ctx - p), p + 131 * i)));
        model_.Forward(b);
      }
  }

  // Routing statistics of `b` run once more untimed with nothing committed (caches unchanged).
  std::vector<int32_t> ExpertsTouched(Batch b) {
    for (Segment& s : b.segments) s.commit_len = 0;
    ForwardOptions o;
    o.collect_expert_stats = true;
    return model_.Forward(b, o).distinct_experts_per_layer;
  }

  // Decode of one token per sequence per step over `ctx` committed tokens (plus the steps so far).
  void DecodeRow(const std::vector<SequenceCache*>& seqs, int64_t ctx) {
    auto step = [&](int64_t pos) {
      Batch b;
      for (int64_t i = 0; i < static_cast<int64_t>(seqs.size()); ++i) {
        b.segments.push_back(Committed(seqs[i], pos, {static_cast<int32_t>((pos * 31 + i) % cfg_.vocab_size)}));
        DrawOnDevice(b.segments.back());
      }
      return b;
    };
    model_.Forward(step(ctx));  // warm-up
    model_.backend().Synchronize();
    model_.backend().ProfileReset();
    const auto t0 = std::chrono::steady_clock::now();
    ForwardResult r;
    for (int64_t i = 1; i <= steps_; ++i) r = model_.Forward(step(ctx + i));
    model_.backend().Synchronize();
    const std::string profile = model_.backend().ProfileReport();  // TESSERA_CUDA_PROFILE=1
    const double seconds = Seconds(t0) / steps_;
    EXPECT_TRUE(ResultValid(r, cfg_.vocab_size));
    StepShape s;
    s.sequences = static_cast<int64_t>(seqs.size());
    s.logits_rows = s.sequences;
    s.cached_keys = ctx + (steps_ + 1) / 2.0;  // step i reads ctx + i committed positions
    s.committed_rows = 1;
    s.attended_keys = s.cached_keys + 1;
    const auto experts = ExpertsTouched(step(ctx + steps_ + 1));
    Print("decode b" + std::to_string(seqs.size()) + " ctx " + std::to_string(ctx), seconds,
          static_cast<double>(s.sequences), CountStep(cfg_, census_, model_.KvCacheDType(), s, experts));
    std::printf("%s  %s (so far)\n", profile.c_str(), model_.backend().StepSummary().c_str());
  }

  // One denoising step of a 32-token block per sequence (block-diffusion): the block at positions
  // [ctx, ctx + 32) attends the committed prefix and itself, nothing is committed, all 32 rows give
  // logits. The row matters most for the hybrid (Gated DeltaNet) config, the one served with
  // diffusion; it runs for every config so the two can be compared.
  void DenoiseRow(const std::vector<SequenceCache*>& seqs, int64_t ctx) {
    const int32_t mask = static_cast<int32_t>(cfg_.mask_token_id >= 0 ? cfg_.mask_token_id : cfg_.vocab_size - 1);
    Batch b;
    for (size_t i = 0; i < seqs.size(); ++i) {
      Segment s;
      s.cache = seqs[i];
      s.first_pos = ctx;
      s.tokens = Tokens(kDenoiseBlock, 17 + static_cast<int64_t>(i));
      for (int64_t t = 0; t < kDenoiseBlock; ++t)
        if (t % 4 != 0) s.tokens[t] = mask;  // a partly unmasked block: 3 of 4 rows still masked
      s.block_size = kDenoiseBlock;
      for (int32_t t = 0; t < kDenoiseBlock; ++t) s.logits_rows.push_back(t);
      DrawOnDevice(s, mask);
      b.segments.push_back(std::move(s));
    }
    model_.Forward(b);  // warm-up
    model_.backend().Synchronize();
    model_.backend().ProfileReset();
    const int64_t repeats = std::max<int64_t>(4, steps_ / 4);
    const auto t0 = std::chrono::steady_clock::now();
    ForwardResult r;
    for (int64_t i = 0; i < repeats; ++i) r = model_.Forward(b);
    model_.backend().Synchronize();
    const std::string profile = model_.backend().ProfileReport();  // TESSERA_CUDA_PROFILE=1
    const double seconds = Seconds(t0) / repeats;
    EXPECT_TRUE(ResultValid(r, cfg_.vocab_size));
    StepShape s;
    s.sequences = static_cast<int64_t>(seqs.size());
    s.rows_per_sequence = kDenoiseBlock;
    s.logits_rows = s.sequences * kDenoiseBlock;
    s.cached_keys = static_cast<double>(ctx);
    s.attended_keys = ctx + kDenoiseBlock;  // block-causal: every row sees its whole block
    const auto experts = ExpertsTouched(b);
    const std::string row =
        "denoise " + std::to_string(seqs.size()) + "x" + std::to_string(kDenoiseBlock) + " ctx " + std::to_string(ctx);
    Print(row, seconds, static_cast<double>(s.sequences * kDenoiseBlock), CountStep(cfg_, census_, model_.KvCacheDType(), s, experts));
    std::printf("%s  %s (so far)\n", profile.c_str(), model_.backend().StepSummary().c_str());
  }

  // One denoising step of canvas diffusion (DiffusionGemma) for every sequence, as the engine runs it
  // (engine_canvas.cpp): the canvas of C = canvas_length rows at [ctx, ctx + C) attends the committed
  // prefix and the whole canvas, with the self-conditioning input of a previous step. Two rows:
  //  - "drawn": the engine's path (Segment::canvas_sample): the backend draws the rows and computes the
  //    next step's self-conditioning input in the same forward, which the model keeps for the next step
  //    (Segment::canvas_state; the first, warm-up step's input comes from the host); [C] picks come back;
  //  - "host": the constrained canvases' path: the [C, vocab] logits come to the host, and their
  //    self-conditioning input is a second call (Model::SelfConditioningInput); the host's own
  //    per-row work (a grammar, entropies, samples) is not included.
  // The floor counts the step's weights and the soft product (2 C V H FLOPs, the table read once).
  void CanvasRow(const std::vector<SequenceCache*>& seqs, int64_t ctx) {
    const int64_t C = cfg_.canvas_length, H = cfg_.hidden_size, n = static_cast<int64_t>(seqs.size());
    Batch b;
    for (int64_t i = 0; i < n; ++i) {
      Segment s;
      s.cache = seqs[i];
      s.first_pos = ctx;
      s.tokens = Tokens(C, 29 + i);
      for (int32_t t = 0; t < C; ++t) s.logits_rows.push_back(t);
      s.self_conditioning.assign(static_cast<size_t>(C * H), 0.01f);
      b.segments.push_back(std::move(s));
    }
    Batch drawn = b;
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t t = 0; t < C; ++t)
        drawn.segments[i].canvas_sample.push_back({0.6f, static_cast<double>((t * 37 + i * 11) % 100) / 100.0});
      drawn.segments[i].canvas_state = i;
    }
    const int64_t repeats = std::max<int64_t>(3, steps_ / 8);
    StepShape s;
    s.sequences = n;
    s.rows_per_sequence = C;
    s.logits_rows = n * C;
    s.cached_keys = static_cast<double>(ctx);
    s.attended_keys = static_cast<double>(ctx + C);  // every layer counted as global: an upper bound
    StepCost cost = CountStep(cfg_, census_, model_.KvCacheDType(), s, ExpertsTouched(b));
    cost.flops += 2.0 * n * C * cfg_.vocab_size * H;
    cost.bytes += 2.0 * cfg_.vocab_size * H;
    const std::string row = "canvas " + std::to_string(n) + "x" + std::to_string(C) + " ctx " + std::to_string(ctx);
    for (const bool device : {true, false}) {
      if (!device && EnvInt("TESSERA_CUDA_BENCH_CANVAS_HOST", 1) == 0) continue;
      auto step = [&] {
        if (device) {
          const ForwardResult r = model_.Forward(drawn);
          EXPECT_EQ(r.canvas_picks.size(), static_cast<size_t>(n * C));
          EXPECT_TRUE(r.canvas_soft.empty()) << "kept by the model";
          for (const CanvasRowPick& p : r.canvas_picks)
            EXPECT_TRUE(p.sampled >= 0 && p.sampled < cfg_.vocab_size && std::isfinite(p.entropy));
          for (Segment& s : drawn.segments) s.self_conditioning.clear(), s.self_conditioning_kept = true;
          return;
        }
        const ForwardResult r = model_.Forward(b);
        EXPECT_TRUE(AllFinite(model_.SelfConditioningInput(r.logits.data(), n * C)));
      };
      step();  // warm-up (and the graph's first sightings)
      step();
      model_.backend().Synchronize();
      model_.backend().ProfileReset();
      const auto t0 = std::chrono::steady_clock::now();
      for (int64_t k = 0; k < repeats; ++k) step();
      const double seconds = Seconds(t0) / repeats;
      const std::string profile = model_.backend().ProfileReport();  // TESSERA_CUDA_PROFILE=1
      Print(row + (device ? " drawn" : " host"), seconds, static_cast<double>(n * C), cost);
      std::printf("%s  %s (so far)\n", profile.c_str(), model_.backend().StepSummary().c_str());
    }
    for (int64_t i = 0; i < n; ++i) model_.ReleaseCanvasState(i);
  }

  // Prefill of one prompt in one forward (committed, logits of the last row).
  void PrefillRow(int64_t prompt) {
    SequenceCache* seq = pool_.New(prompt);
    model_.Forward(Batch{{Committed(seq, 0, Tokens(std::min<int64_t>(128, prompt), 3))}});  // warm-up
    pool_.Restart(seq);
    model_.backend().Synchronize();
    model_.backend().ProfileReset();
    const Batch b{{Committed(seq, 0, Tokens(prompt, 5))}};
    const auto t0 = std::chrono::steady_clock::now();
    const ForwardResult r = model_.Forward(b);
    model_.backend().Synchronize();
    const std::string profile = model_.backend().ProfileReport();  // TESSERA_CUDA_PROFILE=1
    const double seconds = Seconds(t0);
    EXPECT_TRUE(ResultValid(r, cfg_.vocab_size));
    pool_.Restart(seq);
    const auto experts = ExpertsTouched(b);
    StepShape s;
    s.rows_per_sequence = prompt;
    s.committed_rows = prompt;
    s.attended_keys = (prompt + 1) / 2.0;
    Print("prefill " + std::to_string(prompt), seconds, static_cast<double>(prompt),
          CountStep(cfg_, census_, model_.KvCacheDType(), s, experts));
    std::printf("%s  %s (so far)\n", profile.c_str(), model_.backend().StepSummary().c_str());
  }

 private:
  void Print(const std::string& row, double seconds, double rows, const StepCost& c) const {
    const double floor = std::max(c.bytes / bandwidth_, c.flops / kBf16MatmulFlopsPerSecond);
    std::printf("bench-row | %s | %s | %.2f ms | %.1f tok/s | %.2f GB | %.2e FLOP | floor %.2f ms | ratio %.3f | "
                "experts/layer %.1f\n",
                name_.c_str(), row.c_str(), 1e3 * seconds, rows / seconds, c.bytes / 1e9, c.flops, 1e3 * floor,
                floor / seconds, c.experts_per_layer);
    std::fflush(stdout);
  }

  Model& model_;
  const ModelConfig& cfg_;
  const WeightCensus census_;
  CachePool pool_;
  const std::string name_;
  const int64_t steps_;
  const double bandwidth_;
  const bool host_logits_;  // TESSERA_CUDA_BENCH_LOGITS=1
};

TEST(CudaBench, DummyDecodeAndPrefill) {
  const char* dir = std::getenv("TESSERA_CUDA_BENCH_CONFIG");
  if (!dir || !*dir) GTEST_SKIP() << "skipped: TESSERA_CUDA_BENCH_CONFIG is not set";
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "skipped: no CUDA device";
  const std::vector<int64_t> contexts = EnvList("TESSERA_CUDA_BENCH_CONTEXTS", "1024,8192");
  const std::vector<int64_t> batches = EnvList("TESSERA_CUDA_BENCH_BATCHES", "8,32,64");
  const int64_t batch_ctx = EnvInt("TESSERA_CUDA_BENCH_BATCH_CONTEXT", 1024);
  const int64_t steps = std::max<int64_t>(1, EnvInt("TESSERA_CUDA_BENCH_DECODE", 64));
  const int64_t prompt = EnvInt("TESSERA_CUDA_BENCH_PREFILL", 4096);
  const int64_t denoise_batch = EnvInt("TESSERA_CUDA_BENCH_DENOISE_BATCH", kDenoiseBatchedSequences);
  std::string name = dir;
  while (name.size() > 1 && name.back() == '/') name.pop_back();
  name = name.substr(name.find_last_of('/') + 1);

  LoadOptions o;
  o.device = "cuda";
  o.load_format = "dummy";
  // TESSERA_CUDA_BENCH_KV_DTYPE=bf16: the rows on a bf16 KV cache (--kv-cache-dtype bf16).
  if (const char* kv = std::getenv("TESSERA_CUDA_BENCH_KV_DTYPE"); kv && *kv) o.kv_cache_dtype = kv;
  // TESSERA_CUDA_BENCH_PRECISION=f32|bf16: the activation precision (--activation-precision; default f32).
  if (const char* p = std::getenv("TESSERA_CUDA_BENCH_PRECISION"); p && *p) o.activation_precision = p;
  // TESSERA_CUDA_BENCH_QUANT=fp8|int8|int4: dummy weights in that format (--quantization).
  if (const char* q = std::getenv("TESSERA_CUDA_BENCH_QUANT"); q && *q) {
    o.quantization = q;
    name += std::string("-") + q;
  }
  const auto t0 = std::chrono::steady_clock::now();
  auto model = Model::Load(dir, o);
  std::printf("bench %s: dummy weights ready in %.1f s\n", dir, Seconds(t0));

  const int copies = 10;
  const double bandwidth = MeasureCopyBandwidth(model->backend(), copies);
  std::printf("bench-bw | %s | device copy 1 GiB x %d | %.2f TB/s (2 x bytes / s) | bf16 matmul %.0f TFLOP/s "
              "(constant, not measured) | kv cache %s\n",
              name.c_str(), copies, bandwidth / 1e12, kBf16MatmulFlopsPerSecond / 1e12,
              DTypeName(model->KvCacheDType()));

  // One cache allocation that fits the largest phase (each phase reuses the pages from 0).
  // decode steps / a denoise block / a canvas past ctx
  const int64_t tail = std::max({steps + 2, kDenoiseBlock, model->config().canvas_length});
  int64_t pages = PagesFor(prompt + tail);
  int64_t slots = std::max<int64_t>(1, denoise_batch);
  for (int64_t ctx : contexts) pages = std::max(pages, PagesFor(ctx + tail));
  for (int64_t b : batches) {
    pages = std::max(pages, b * PagesFor(batch_ctx + tail));
    slots = std::max(slots, b);
  }
  pages = std::max(pages, denoise_batch * PagesFor(batch_ctx + tail));
  model->AllocateCaches(pages, kPageSize, slots);

  CudaBenchRun bench(*model, name, steps, bandwidth);
  const bool canvas = model->config().canvas_length > 0;  // a canvas model only runs canvas steps
  for (int64_t ctx : contexts) {  // batch 1: a denoise block (or canvas) over the prefix, then decode from it
    bench.pool().Clear();
    const auto seq = bench.pool().NewMany(1, ctx + tail);
    bench.PrefillContexts(seq, ctx);
    if (canvas) {
      bench.CanvasRow(seq, ctx);
      continue;
    }
    bench.DenoiseRow(seq, ctx);
    bench.DecodeRow(seq, ctx);
  }
  for (int64_t b : batches) {
    bench.pool().Clear();
    const auto seqs = bench.pool().NewMany(b, batch_ctx + tail);
    bench.PrefillContexts(seqs, batch_ctx);
    if (canvas) bench.CanvasRow(seqs, batch_ctx);
    else bench.DecodeRow(seqs, batch_ctx);
  }
  if (denoise_batch > 0 && !canvas) {
    bench.pool().Clear();
    const auto blocks = bench.pool().NewMany(denoise_batch, batch_ctx + tail);
    bench.PrefillContexts(blocks, batch_ctx);
    bench.DenoiseRow(blocks, batch_ctx);
  }
  bench.pool().Clear();
  if (prompt > 0) bench.PrefillRow(prompt);
}

// The dense bf16 products of the denoise and decode steps at m rows on three backends: the default
// (GEMV <= 8 rows, the MMA kernel where UseSkinnyGemm says), the MMA kernel for every size
// (TESSERA_CUDA_SKINNY_MAX_WORK unbounded) and cuBLASLt's hi + lo GEMMs (TESSERA_CUDA_SKINNY_MAX_ROWS
// =0), with the nominal rate (2 m n k FLOPs) and weight bandwidth: where the MMA kernel's limits
// belong. A shape of several weights (n = a+b+..) is one MatMulMulti. Checks only that all agree.
// Output: bench-matmul | <n>x<k> | m <m> | default <us> (<TFLOP/s>, <TB/s>) | mma <us> (..) | cublaslt <us> (..)
TEST(CudaBench, MatMulRows) {
  const std::vector<int64_t> rows = EnvList("TESSERA_CUDA_BENCH_MATMUL", "");
  if (rows.empty()) GTEST_SKIP() << "skipped: TESSERA_CUDA_BENCH_MATMUL is not set";
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "skipped: no CUDA device";
  std::unique_ptr<Backend> be[3];
  be[0] = MakeCudaBackend();
  setenv("TESSERA_CUDA_SKINNY_MAX_WORK", "1000000000000000", 1);
  be[1] = MakeCudaBackend();
  unsetenv("TESSERA_CUDA_SKINNY_MAX_WORK");
  setenv("TESSERA_CUDA_SKINNY_MAX_ROWS", "0", 1);
  be[2] = MakeCudaBackend();
  unsetenv("TESSERA_CUDA_SKINNY_MAX_ROWS");
  // Weights of one k: Qwen3.5-35B-A3B GDN in_proj (stacked) and out_proj, attention q (+ gate), the
  // router + shared expert gate / up / output gate, shared down; Qwen3-30B-A3B q / k / v and o.
  const std::vector<std::pair<std::vector<int64_t>, int64_t>> shapes = {
      {{12352}, 2048}, {{2048}, 4096}, {{8192}, 2048},        {{256, 512, 512, 1}, 2048},
      {{2048}, 512},   {{1024}, 2048}, {{4096, 512, 512}, 2048}, {{5120}, 2048}};
  constexpr int kCalls = 50;
  for (const auto& [ns, k] : shapes) {
    int64_t n = 0;
    for (int64_t part : ns) n += part;
    const auto w = testing::NonZeroUniform(n * k, -0.05f, 0.05f, 3);
    std::vector<uint16_t> wb(w.size());
    for (size_t i = 0; i < w.size(); ++i) wb[i] = F32ToBf16(w[i]);
    for (int64_t m : rows) {
      const auto x = testing::NonZeroUniform(m * k, -1, 1, 4 + m);
      std::vector<float> out[3];
      double us[3];
      for (int b = 0; b < 3; ++b) {
        DeviceBuffer dw(*be[b], wb.size() * 2), dx = DeviceBuffer::Floats(*be[b], m * k),
                                                dy = DeviceBuffer::Floats(*be[b], m * n);
        be[b]->Upload(dw.data(), wb.data(), wb.size() * 2);
        be[b]->Upload(dx.data(), x.data(), x.size() * 4);
        std::vector<Tensor> parts;
        std::vector<Backend::MatMulOut> outs;
        int64_t row0 = 0;
        for (int64_t part : ns) {  // weight j = rows row0.. of the stacked matrix; its output likewise
          parts.push_back(Tensor{static_cast<uint16_t*>(dw.data()) + row0 * k, DType::kBF16, {part, k}, {}});
          row0 += part;
        }
        row0 = 0;
        for (size_t j = 0; j < ns.size(); ++j) {
          outs.push_back({&parts[j], dy.f32() + row0 * m});
          row0 += ns[j];
        }
        auto call = [&, ns = ns] {  // a copy: clang 14 cannot capture structured bindings
          if (ns.size() == 1)
            be[b]->MatMul(dx.f32(), m, parts[0], dy.f32(), false);
          else
            be[b]->MatMulMulti(dx.f32(), m, outs);
        };
        for (int i = 0; i < 3; ++i) call();
        be[b]->Synchronize();
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < kCalls; ++i) call();
        be[b]->Synchronize();
        us[b] = Seconds(t0) / kCalls * 1e6;
        out[b].resize(m * n);
        be[b]->Download(out[b].data(), dy.data(), out[b].size() * 4);
      }
      double diff = 0, ref = 1e-30;
      for (int b = 0; b < 2; ++b)
        for (size_t i = 0; i < out[2].size(); ++i) {
          diff = std::max(diff, static_cast<double>(std::fabs(out[b][i] - out[2][i])));
          ref = std::max(ref, static_cast<double>(std::fabs(out[2][i])));
        }
      std::string name;
      for (int64_t part : ns) {  // appended piece by piece: GCC 12 warns (-Wrestrict) on "+" + to_string
        if (!name.empty()) name += '+';
        name += std::to_string(part);
      }
      EXPECT_LE(diff / ref, 1e-4) << name << "x" << k << " m=" << m;
      const double flops = 2.0 * m * n * k, bytes = 2.0 * n * k;
      std::printf("bench-matmul | %sx%ld | m %ld", name.c_str(), static_cast<long>(k), static_cast<long>(m));
      const char* label[3] = {"default", "mma", "cublaslt"};
      for (int b = 0; b < 3; ++b)
        std::printf(" | %s %.1f us (%.0f TFLOP/s, %.2f TB/s)", label[b], us[b], flops / us[b] / 1e6,
                    bytes / us[b] / 1e6);
      std::printf(" | rel diff %.1e\n", diff / ref);
    }
  }
}

}  // namespace
}  // namespace tessera
