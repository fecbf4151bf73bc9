// tessera tests: the fixture models (tests/data/fixtures/models/*) on the CUDA backend against HF
// transformers' references: argmax identical at >= 99% of positions and max |logit diff| <= 5e-2
// (logits_long.npy), greedy continuation identical for its first 8 tokens through the paged cache,
// and prefill + decode through the cache against the full forward; decode steps replayed as CUDA
// graphs against the same steps queued op by op; tokens drawn on the device (Segment::sample) against
// the reference rule on the same logits. A bf16 KV cache (--kv-cache-dtype bf16): prefill + decode
// through it against the same model's full forward (the same bf16 K / V either way), and both near the
// reference. A per-segment router temperature against the CPU. Bf16 activations
// (--activation-precision bf16) against the default exact mode. Skipped without a device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/sampling.h"
#include "io/hf_config.h"
#include "io/npy.h"
#include "model/model.h"
#include "test_util.h"

namespace tessera {
namespace {

std::string FixtureDir(const std::string& family) { return testing::DataPath("fixtures/models/" + family); }

int32_t ArgmaxRow(const float* v, int64_t n) { return static_cast<int32_t>(std::max_element(v, v + n) - v); }

struct Diff {
  double max_abs = 0;
  double argmax_agree = 0;  // fraction of rows
};

Diff Compare(const float* got, const float* want, int64_t rows, int64_t n) {
  Diff d;
  int64_t same = 0;
  for (int64_t r = 0; r < rows; ++r) {
    d.max_abs = std::max(d.max_abs, testing::MaxAbsDiff(got + r * n, want + r * n, static_cast<size_t>(n)));
    same += ArgmaxRow(got + r * n, n) == ArgmaxRow(want + r * n, n);
  }
  d.argmax_agree = rows ? static_cast<double>(same) / rows : 1.0;
  return d;
}

Segment Seg(SequenceCache* cache, int64_t first_pos, std::vector<int32_t> tokens, bool all_logits) {
  Segment s;
  s.cache = cache;
  s.first_pos = first_pos;
  s.tokens = std::move(tokens);
  s.commit_len = static_cast<int64_t>(s.tokens.size());
  if (all_logits)
    for (int32_t i = 0; i < static_cast<int32_t>(s.tokens.size()); ++i) s.logits_rows.push_back(i);
  else
    s.logits_rows.push_back(static_cast<int32_t>(s.tokens.size()) - 1);
  return s;
}

ForwardResult RunSeg(Model& m, Segment s) {
  Batch b;
  b.segments.push_back(std::move(s));
  return m.Forward(b);
}

class CudaGolden : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) GTEST_SKIP() << "skipped: no CUDA device";
    LoadOptions o;
    o.device = "cuda";
    model_ = Model::Load(FixtureDir(GetParam()), o);
    ref_ = ReadJsonFile(FixtureDir(GetParam()) + "/reference.json");
    V_ = model_->config().vocab_size;
  }
  // Caches of 64 pages of 4 on `m` (the fixture's model by default) and one sequence over all of them.
  SequenceCache NewCache(Model* m = nullptr) {
    if (!m) m = model_.get();
    m->AllocateCaches(64, 4, 2);
    SequenceCache c;
    for (int32_t p = 0; p < 64; ++p) c.pages.push_back(63 - p);  // reversed: exercises the page table
    c.state_slot = m->config().NumLayersOf(LayerKind::kLinearAttention) > 0 ? 1 : -1;
    if (c.state_slot >= 0) m->ResetStateSlot(c.state_slot);
    return c;
  }
  std::unique_ptr<Model> model_;
  nlohmann::json ref_;
  int64_t V_ = 0;
};

TEST_P(CudaGolden, LongLogitsMatchReference) {
  const auto ids = ref_["long_ids"].get<std::vector<int32_t>>();
  NpyArray want = ReadNpy(FixtureDir(GetParam()) + "/logits_long.npy");
  const int64_t T = static_cast<int64_t>(ids.size());
  ASSERT_EQ(want.shape, (std::vector<int64_t>{T, V_}));
  auto r = RunSeg(*model_, Seg(nullptr, 0, ids, true));
  const Diff d = Compare(r.logits.data(), want.data.data(), T, V_);
  std::printf("golden cuda %s: max abs logit diff %.4e, argmax agreement %.2f%% (%ld positions)\n", GetParam().c_str(),
              d.max_abs, 100 * d.argmax_agree, static_cast<long>(T));
  RecordProperty("max_abs_logit_diff", std::to_string(d.max_abs));
  EXPECT_LE(d.max_abs, 5e-2);
  EXPECT_GE(d.argmax_agree, 0.99);
}

// The default is exact (f32 activations: issue 5 measured 3.9e-5 / 4.7e-4 / 1.9e-4 from the
// reference, bound 1e-3). bf16 activations take effect (the logits move) and stay near the reference
// only loosely: these small random fixtures turn the rounding of every product's input into logit
// errors of 0.50 / 1.59 / 1.04 (argmax 100 / 93 / 94%, H100 2026-12-05; rounding only the MoE
// experts' inputs still gave 0.35 and 1.02), which is why bf16 is not the default. The loose bound
// catches a broken product, whose errors are of the logits' own size.
TEST_P(CudaGolden, ExactByDefaultAndBf16ActivationsTakeEffect) {
  ASSERT_EQ(model_->backend().ActivationPrecision(), DType::kF32);
  LoadOptions o;
  o.device = "cuda";
  o.activation_precision = "bf16";
  auto bf16 = Model::Load(FixtureDir(GetParam()), o);
  ASSERT_EQ(bf16->backend().ActivationPrecision(), DType::kBF16);
  const auto ids = ref_["long_ids"].get<std::vector<int32_t>>();
  NpyArray want = ReadNpy(FixtureDir(GetParam()) + "/logits_long.npy");
  const int64_t T = static_cast<int64_t>(ids.size());
  const auto e = RunSeg(*model_, Seg(nullptr, 0, ids, true));
  const auto b = RunSeg(*bf16, Seg(nullptr, 0, ids, true));
  const Diff de = Compare(e.logits.data(), want.data.data(), T, V_);
  const Diff db = Compare(b.logits.data(), want.data.data(), T, V_);
  std::printf("golden cuda %s: f32 activations max abs %.4e (argmax %.2f%%); bf16 activations max abs %.4e "
              "(argmax %.2f%%)\n",
              GetParam().c_str(), de.max_abs, 100 * de.argmax_agree, db.max_abs, 100 * db.argmax_agree);
  EXPECT_LE(de.max_abs, 1e-3);
  EXPECT_GE(de.argmax_agree, 0.99);
  EXPECT_GT(Compare(b.logits.data(), e.logits.data(), T, V_).max_abs, 1e-5) << "bf16 should round the products";
  EXPECT_LE(db.max_abs, 3.0);
  EXPECT_GE(db.argmax_agree, 0.85);
}

TEST_P(CudaGolden, GreedyContinuationThroughCache) {
  SequenceCache cache = NewCache();
  const auto prompt = ref_["short_ids"].get<std::vector<int32_t>>();
  auto want = ref_["greedy_continuation"].get<std::vector<int32_t>>();
  want.resize(std::min<size_t>(want.size(), 8));
  auto r = RunSeg(*model_, Seg(&cache, 0, prompt, false));
  std::vector<int32_t> got;
  int64_t pos = static_cast<int64_t>(prompt.size());
  while (got.size() < want.size()) {
    // The reference generated with eos suppressed (see tests/golden/model_golden_test.cpp).
    for (int64_t eos : model_->config().eos_token_ids) r.logits[eos] = -INFINITY;
    got.push_back(ArgmaxRow(r.logits.data(), V_));
    r = RunSeg(*model_, Seg(&cache, pos++, {got.back()}, false));
  }
  EXPECT_EQ(got, want);
}

TEST_P(CudaGolden, PrefillThenDecodeMatchesReference) {
  SequenceCache cache = NewCache();
  const auto ids = ref_["long_ids"].get<std::vector<int32_t>>();
  NpyArray want = ReadNpy(FixtureDir(GetParam()) + "/logits_long.npy");
  const int64_t T = static_cast<int64_t>(ids.size()), P = std::min<int64_t>(70, T - 1);
  auto pre = RunSeg(*model_, Seg(&cache, 0, {ids.begin(), ids.begin() + P}, true));
  std::vector<float> got(pre.logits);
  for (int64_t t = P; t < T; ++t) {
    auto d = RunSeg(*model_, Seg(&cache, t, {ids[t]}, false));
    got.insert(got.end(), d.logits.begin(), d.logits.end());
  }
  const Diff d = Compare(got.data(), want.data.data(), T, V_);
  std::printf("golden cuda %s prefill %ld + decode %ld: max abs logit diff %.4e, argmax agreement %.2f%%\n",
              GetParam().c_str(), static_cast<long>(P), static_cast<long>(T - P), d.max_abs, 100 * d.argmax_agree);
  EXPECT_LE(d.max_abs, 5e-2);
  EXPECT_GE(d.argmax_agree, 0.99);
}

// Decode steps of two sequences queued as CUDA graphs (captured on the second equal step, replayed
// from the third) give the logits of the same steps queued op by op, bit for bit: a replay runs the
// same kernels on the same arguments, with this step's ids, positions and page tables. Both with the
// default chunks of a step and with chunks of 5 commands (TESSERA_CUDA_GRAPH_CHUNK: many cuts, each
// chunk's scratch copied by its own graph).
TEST_P(CudaGolden, StepGraphsMatchOpByOp) {
  auto decode = [&](Model& m, std::string* summary) {
    m.AllocateCaches(64, 4, 3);
    const bool has_state = m.config().NumLayersOf(LayerKind::kLinearAttention) > 0;
    SequenceCache caches[2];
    for (int s = 0; s < 2; ++s) {
      for (int32_t p = 0; p < 32; ++p) caches[s].pages.push_back(32 * s + 31 - p);
      caches[s].state_slot = has_state ? s + 1 : -1;
      if (has_state) m.ResetStateSlot(s + 1);
    }
    const auto prompt = ref_["short_ids"].get<std::vector<int32_t>>();
    const std::vector<int32_t> prompts[2] = {prompt, {prompt.begin(), prompt.begin() + prompt.size() / 2}};
    Batch pre;
    for (int s = 0; s < 2; ++s) pre.segments.push_back(Seg(&caches[s], 0, prompts[s], false));
    ForwardResult r = m.Forward(pre);
    std::vector<float> all = r.logits;
    int64_t pos[2] = {static_cast<int64_t>(prompts[0].size()), static_cast<int64_t>(prompts[1].size())};
    for (int step = 0; step < 12; ++step) {
      Batch b;
      for (int s = 0; s < 2; ++s)
        b.segments.push_back(Seg(&caches[s], pos[s]++, {ArgmaxRow(r.logits.data() + s * V_, V_)}, false));
      r = m.Forward(b);
      all.insert(all.end(), r.logits.begin(), r.logits.end());
    }
    *summary = m.backend().StepSummary();
    return all;
  };
  LoadOptions o;
  o.device = "cuda";
  auto load_with = [&](const char* name, const char* value) {
    ::setenv(name, value, 1);
    std::unique_ptr<Model> m = Model::Load(FixtureDir(GetParam()), o);
    ::unsetenv(name);
    return m;
  };
  std::string graphs_summary, small_summary, eager_summary;
  const std::vector<float> with_graphs = decode(*model_, &graphs_summary);
  const std::vector<float> small_chunks = decode(*load_with("TESSERA_CUDA_GRAPH_CHUNK", "5"), &small_summary);
  const std::vector<float> op_by_op = decode(*load_with("TESSERA_CUDA_GRAPHS", "0"), &eager_summary);
  std::printf("step graphs %s: %s | chunks of 5: %s | graphs off: %s\n", GetParam().c_str(), graphs_summary.c_str(),
              small_summary.c_str(), eager_summary.c_str());
  long replayed = 0, replayed_small = 0, replayed_off = 0;
  ASSERT_EQ(std::sscanf(graphs_summary.c_str(), "steps: %ld replayed", &replayed), 1) << graphs_summary;
  ASSERT_EQ(std::sscanf(small_summary.c_str(), "steps: %ld replayed", &replayed_small), 1) << small_summary;
  ASSERT_EQ(std::sscanf(eager_summary.c_str(), "steps: %ld replayed", &replayed_off), 1) << eager_summary;
  EXPECT_GE(replayed, 8) << "most decode steps should replay a graph";
  EXPECT_GE(replayed_small, 8 * 4) << "the chunks of most decode steps should replay their graphs";
  EXPECT_EQ(replayed_off, 0);
  ASSERT_EQ(with_graphs.size(), op_by_op.size());
  ASSERT_EQ(small_chunks.size(), op_by_op.size());
  int64_t differing = 0, differing_small = 0;
  for (size_t i = 0; i < with_graphs.size(); ++i) differing += with_graphs[i] != op_by_op[i];
  for (size_t i = 0; i < small_chunks.size(); ++i) differing_small += small_chunks[i] != op_by_op[i];
  EXPECT_EQ(differing, 0) << "of " << with_graphs.size() << " logits";
  EXPECT_EQ(differing_small, 0) << "of " << small_chunks.size() << " logits (chunks of 5)";
}

TEST_P(CudaGolden, DeviceSampledDecodeMatchesHostRule) {
  // Two sequence pairs decode the same tokens: the first of each pair draws on the device
  // (Segment::sample; greedy, and temperature 0.8 / top-p 0.9 with a new uniform every step), its
  // twin brings back its logits. The device's tokens must be the reference rule's on the twin's
  // logits (rows are independent, so the logits are the same), and the steps, whose uniforms change,
  // must still replay as CUDA graphs.
  model_->AllocateCaches(128, 4, 5);
  const bool has_state = model_->config().NumLayersOf(LayerKind::kLinearAttention) > 0;
  SequenceCache caches[4];
  for (int s = 0; s < 4; ++s) {
    for (int32_t p = 0; p < 32; ++p) caches[s].pages.push_back(32 * s + 31 - p);
    caches[s].state_slot = has_state ? s + 1 : -1;
    if (has_state) model_->ResetStateSlot(s + 1);
  }
  const auto prompt = ref_["short_ids"].get<std::vector<int32_t>>();
  Batch pre;
  for (int s = 0; s < 4; ++s) pre.segments.push_back(Seg(&caches[s], 0, prompt, false));
  const ForwardResult first = model_->Forward(pre);
  int32_t next[2] = {ArgmaxRow(first.logits.data(), V_), ArgmaxRow(first.logits.data() + V_, V_)};
  int64_t pos = static_cast<int64_t>(prompt.size());
  std::mt19937_64 gen(5);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  int64_t sampled_differs_from_greedy = 0;
  for (int step = 0; step < 12; ++step, ++pos) {
    RowSampling rules[2];
    rules[1].temperature = 0.8f;
    rules[1].top_p = 0.9f;
    rules[1].uniform = u(gen);
    Batch b;
    for (int pair = 0; pair < 2; ++pair) {
      b.segments.push_back(Seg(&caches[pair], pos, {next[pair]}, false));
      b.segments.back().sample = {rules[pair]};
      b.segments.push_back(Seg(&caches[2 + pair], pos, {next[pair]}, false));
    }
    const ForwardResult r = model_->Forward(b);
    ASSERT_EQ(r.picks.size(), 2u);
    ASSERT_EQ(r.logits.size(), static_cast<size_t>(2 * V_));
    for (int pair = 0; pair < 2; ++pair) {
      float prob = 0.f;
      const int32_t want = SampleRowReference(r.logits.data() + pair * V_, V_, rules[pair], &prob);
      EXPECT_EQ(r.picks[pair].token, want) << "step " << step << " rule " << pair;
      EXPECT_NEAR(r.picks[pair].prob, prob, 1e-5 * prob + 1e-7) << "step " << step << " rule " << pair;
      next[pair] = want;
    }
    sampled_differs_from_greedy += ArgmaxRow(r.logits.data() + V_, V_) != next[1];
  }
  const std::string summary = model_->backend().StepSummary();
  std::printf("device sampling %s: %s, %ld of 12 sampled tokens not the argmax\n", GetParam().c_str(), summary.c_str(),
              static_cast<long>(sampled_differs_from_greedy));
  long replayed = 0;
  ASSERT_EQ(std::sscanf(summary.c_str(), "steps: %ld replayed", &replayed), 1) << summary;
  EXPECT_GE(replayed, 8) << "decode steps with device sampling should replay a graph";
}

// A bf16 KV cache rounds K and V to bf16, so the logits move away from the reference (this is why it is
// not the default: on these small random models by up to ~0.8, measured 2026-12-02); the check against
// the reference is only loose (a wrong cache row or page gives errors of the logits' own size). The exact
// check: a full forward without a cache rounds its K / V the same way (KvStage), so prefill + decode
// through the bf16 cache must give its logits up to summation order (measured 2026-12-03 on the H200:
// 2.0e-4 / 2.1e-3 / 4.3e-4 apart, so the bound is 1e-2: five times the largest, 1/80 of the bf16 cache's
// distance from the reference on qwen3_5_moe).
TEST_P(CudaGolden, Bf16KvCacheMatchesFullForward) {
  LoadOptions o;
  o.device = "cuda";
  o.kv_cache_dtype = "bf16";
  std::unique_ptr<Model> m = Model::Load(FixtureDir(GetParam()), o);
  ASSERT_EQ(m->KvCacheDType(), DType::kBF16);
  const auto ids = ref_["long_ids"].get<std::vector<int32_t>>();
  NpyArray ref = ReadNpy(FixtureDir(GetParam()) + "/logits_long.npy");
  const int64_t T = static_cast<int64_t>(ids.size()), P = std::min<int64_t>(70, T - 1);
  const ForwardResult full = RunSeg(*m, Seg(nullptr, 0, ids, true));
  SequenceCache cache = NewCache(m.get());
  std::vector<float> got = RunSeg(*m, Seg(&cache, 0, {ids.begin(), ids.begin() + P}, true)).logits;
  for (int64_t t = P; t < T; ++t) {
    const ForwardResult d = RunSeg(*m, Seg(&cache, t, {ids[t]}, false));
    got.insert(got.end(), d.logits.begin(), d.logits.end());
  }
  const Diff vs_full = Compare(got.data(), full.logits.data(), T, V_);
  const Diff vs_ref = Compare(full.logits.data(), ref.data.data(), T, V_);
  std::printf(
      "golden cuda %s bf16 kv cache: through the cache vs full forward max abs %.4e (argmax %.2f%%); "
      "full forward vs reference max abs %.4e (argmax %.2f%%)\n",
      GetParam().c_str(), vs_full.max_abs, 100 * vs_full.argmax_agree, vs_ref.max_abs, 100 * vs_ref.argmax_agree);
  EXPECT_LE(vs_full.max_abs, 1e-2);
  EXPECT_GE(vs_full.argmax_agree, 0.99);
  EXPECT_LE(vs_ref.max_abs, 2.0);
  EXPECT_GE(vs_ref.argmax_agree, 0.9);
}

// A per-segment router temperature (Segment::router_temperature, DivideRows before the routing kernels)
// on the GPU: a batch of a plain segment and one at 0.3 agrees with the CPU's (itself checked against
// an independent numpy forward in tests/golden/model_router_temperature_test.cpp), the 0.3 changes its
// own rows, and the plain segment's rows are bit for bit those of the same batch with both at 1.
TEST_P(CudaGolden, RouterTemperatureMatchesCpuPerSegment) {
  auto cpu = Model::Load(FixtureDir(GetParam()));
  Model* gpu = model_.get();
  auto ids = ref_["long_ids"].get<std::vector<int32_t>>();
  ids.resize(40);
  const std::vector<int32_t> other = {7, 300, 41, 9, 250, 18, 77, 5};
  auto batch = [&](Model& m, float t) {
    Batch b;
    b.segments = {Seg(nullptr, 0, ids, true), Seg(nullptr, 0, other, true)};
    b.segments[1].router_temperature = t;
    return m.Forward(b);
  };
  const ForwardResult plain = batch(*gpu, 1.f), hot = batch(*gpu, 0.3f), hot_cpu = batch(*cpu, 0.3f);
  const int64_t rows = static_cast<int64_t>(ids.size() + other.size()), first = static_cast<int64_t>(ids.size()) * V_;
  ASSERT_EQ(hot.logits.size(), static_cast<size_t>(rows * V_));
  const Diff d = Compare(hot.logits.data(), hot_cpu.logits.data(), rows, V_);
  std::printf("router temperature cuda %s: max abs logit diff to the cpu %.4e, argmax agreement %.2f%%\n",
              GetParam().c_str(), d.max_abs, 100 * d.argmax_agree);
  EXPECT_LE(d.max_abs, 5e-2);
  EXPECT_GE(d.argmax_agree, 0.99);
  EXPECT_TRUE(std::equal(plain.logits.begin(), plain.logits.begin() + first, hot.logits.begin()));
  EXPECT_GT(testing::MaxAbsDiff(plain.logits.data() + first, hot.logits.data() + first, other.size() * V_), 1e-3);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaGolden, ::testing::Values("qwen3_moe", "qwen3_next", "qwen3_5_moe"));

}  // namespace
}  // namespace tessera
