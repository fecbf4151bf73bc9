// tessera golden tests: tensor / expert parallelism simulated on the CPU (N CPU backends and the
// in-process communicator). For every fixture family and N in {2, 4}: the split model's logits
// equal the unsplit model's within 1e-4 and HF's float64 reference within 1e-3 (prefill through
// the paged caches, decode steps, a mixed two-sequence batch, block-diffusion commit + denoise),
// the per-rank cache sizes shrink as the heads are split, and the expert statistics agree.
// Fixtures have 4 query heads, 2 KV heads, 2 GDN key / 4 value heads and 8 experts: N = 4 also
// covers replicated KV / key heads.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "backend/sampling.h"
#include "io/hf_config.h"
#include "io/npy.h"
#include "model/model.h"
#include "model_segment.h"
#include "test_util.h"

namespace tessera {
namespace {

using testing::DataPath;

std::string FixtureDir(const std::string& family) { return DataPath("fixtures/models/" + family); }

double MaxDiff(const std::vector<float>& a, const float* b, size_t n) {
  return testing::MaxAbsDiff(a.data(), b, n);
}

int64_t Argmax(const float* v, int64_t n) { return std::max_element(v, v + n) - v; }

bool SameArgmax(const std::vector<float>& a, const float* b, int64_t rows, int64_t V) {
  for (int64_t r = 0; r < rows; ++r)
    if (Argmax(a.data() + r * V, V) != Argmax(b + r * V, V)) return false;
  return true;
}

using tessera::testing::Seg;

// The same sequence of forwards on two models (unsplit and split), each with its own caches.
struct Pair {
  std::unique_ptr<Model> one, split;
  SequenceCache c1[2], cn[2];

  void Alloc() {
    for (Model* m : {one.get(), split.get()}) m->AllocateCaches(2 * 64, 4, 2);
    const bool hybrid = one->config().NumLayersOf(LayerKind::kLinearAttention) > 0;
    for (int32_t s = 0; s < 2; ++s) {
      for (SequenceCache* c : {&c1[s], &cn[s]}) {
        c->pages.clear();
        for (int32_t p = 0; p < 64; ++p) c->pages.push_back(s * 64 + p);
        c->state_slot = hybrid ? s : -1;
      }
      if (hybrid) {
        one->ResetStateSlot(s);
        split->ResetStateSlot(s);
      }
    }
  }
  // Runs `make(caches)` on both; returns {unsplit, split}.
  template <typename F>
  std::pair<ForwardResult, ForwardResult> Run(F make, const ForwardOptions& o = {}) {
    Batch a, b;
    a.segments = make(c1);
    b.segments = make(cn);
    return {one->Forward(a, o), split->Forward(b, o)};
  }
};

class TensorParallel : public ::testing::TestWithParam<std::tuple<std::string, int>> {
 protected:
  void SetUp() override {
    const auto& [family, n] = GetParam();
    p_.one = Model::Load(FixtureDir(family));
    LoadOptions o;
    o.tensor_parallel_size = n;
    p_.split = Model::Load(FixtureDir(family), o);
    ref_ = ReadJsonFile(FixtureDir(family) + "/reference.json");
    V_ = p_.one->config().vocab_size;
  }
  void ExpectClose(const ForwardResult& one, const ForwardResult& split, const char* what) {
    ASSERT_EQ(one.logits.size(), split.logits.size()) << what;
    const int64_t rows = static_cast<int64_t>(one.logits.size()) / V_;
    EXPECT_LT(MaxDiff(split.logits, one.logits.data(), one.logits.size()), 1e-4) << what;
    EXPECT_TRUE(SameArgmax(split.logits, one.logits.data(), rows, V_)) << what;
  }
  Pair p_;
  nlohmann::json ref_;
  int64_t V_ = 0;
};

TEST_P(TensorParallel, StatelessLogitsMatchUnsplitAndReference) {
  const auto ids = ref_["long_ids"].get<std::vector<int32_t>>();
  ForwardOptions o;
  o.capture_hidden = true;
  o.collect_expert_stats = true;
  auto [one, split] = p_.Run([&](SequenceCache*) { return std::vector<Segment>{Seg(nullptr, 0, ids, 0, true)}; }, o);
  ExpectClose(one, split, "long_ids");
  const NpyArray want = ReadNpy(FixtureDir(std::get<0>(GetParam())) + "/logits_long.npy");
  ASSERT_EQ(want.data.size(), split.logits.size());
  EXPECT_LT(MaxDiff(split.logits, want.data.data(), want.data.size()), 1e-3);
  // Hidden states are replicated on every rank: rank 0's are the whole model's.
  ASSERT_EQ(one.hidden.size(), split.hidden.size());
  for (size_t l = 0; l < one.hidden.size(); ++l)
    EXPECT_LT(MaxDiff(split.hidden[l], one.hidden[l].data(), one.hidden[l].size()), 1e-4) << "layer " << l;
  // Routing is computed identically on every rank.
  EXPECT_EQ(one.distinct_experts_per_layer, split.distinct_experts_per_layer);
  EXPECT_EQ(one.expert_token_counts, split.expert_token_counts);
}

TEST_P(TensorParallel, PrefillThenDecodeThroughCaches) {
  const auto ids = ref_["long_ids"].get<std::vector<int32_t>>();
  p_.Alloc();
  const int64_t P = 40;
  auto [one, split] = p_.Run([&](SequenceCache* c) {
    return std::vector<Segment>{Seg(&c[0], 0, std::vector<int32_t>(ids.begin(), ids.begin() + P), P, true)};
  });
  ExpectClose(one, split, "prefill");
  for (int64_t t = P; t < P + 12; ++t) {
    auto [a, b] = p_.Run([&](SequenceCache* c) { return std::vector<Segment>{Seg(&c[0], t, {ids[t]}, 1, true)}; });
    ExpectClose(a, b, ("decode at " + std::to_string(t)).c_str());
  }
  // The split model's decode also continues HF's full-sequence logits.
  const NpyArray want = ReadNpy(FixtureDir(std::get<0>(GetParam())) + "/logits_long.npy");
  auto [a, b] = p_.Run([&](SequenceCache* c) {
    return std::vector<Segment>{Seg(&c[0], P + 12, {ids[P + 12]}, 1, true)};
  });
  EXPECT_LT(MaxDiff(b.logits, want.data.data() + (P + 12) * V_, V_), 1e-3);
}

TEST_P(TensorParallel, MixedBatchOfPrefillChunkAndDecode) {
  const auto ids = ref_["long_ids"].get<std::vector<int32_t>>();
  const auto short_ids = ref_["short_ids"].get<std::vector<int32_t>>();
  p_.Alloc();
  auto [a0, b0] = p_.Run([&](SequenceCache* c) {
    return std::vector<Segment>{Seg(&c[0], 0, std::vector<int32_t>(ids.begin(), ids.begin() + 20), 20, false)};
  });
  ExpectClose(a0, b0, "first chunk");
  // Sequence 0 decodes while sequence 1 prefills, in one batch.
  auto [a, b] = p_.Run([&](SequenceCache* c) {
    return std::vector<Segment>{Seg(&c[0], 20, {ids[20]}, 1, true), Seg(&c[1], 0, short_ids, 7, true)};
  });
  ExpectClose(a, b, "mixed batch");
  // And a chunk continuing sequence 1 after its cached prefix.
  auto [a2, b2] = p_.Run([&](SequenceCache* c) {
    return std::vector<Segment>{Seg(&c[1], 7, std::vector<int32_t>(ids.begin(), ids.begin() + 9), 9, true)};
  });
  ExpectClose(a2, b2, "second chunk");
}

TEST_P(TensorParallel, PerRankCacheSizesShrink) {
  const int n = std::get<1>(GetParam());
  const ModelConfig& c = p_.one->config();
  EXPECT_EQ(p_.split->tensor_parallel_size(), n);
  EXPECT_EQ(p_.one->KvBytesPerTokenPerRank(), Model::KvBytesPerToken(c, p_.one->KvCacheDType()));
  // KV heads (2) split over 2 ranks, or one replicated head per rank over 4.
  const int64_t kv_per_rank = std::max<int64_t>(1, c.num_kv_heads / n);
  EXPECT_EQ(p_.split->KvBytesPerTokenPerRank(),
            Model::KvBytesPerToken(c, p_.one->KvCacheDType()) / c.num_kv_heads * kv_per_rank);
  if (c.NumLayersOf(LayerKind::kLinearAttention) > 0) {
    EXPECT_LT(p_.split->StateBytesPerSequencePerRank(), Model::StateBytesPerSequence(c));
  }
}

TEST_P(TensorParallel, SampledRowsAreDrawnFromTheirLogits) {
  // A batch whose second segment has sampling rules (Segment::sample): its rows come back as
  // tokens drawn by the backend (unsplit) or on rank 0 (split), equal to the reference rule on the
  // same model's logits; the first segment's logits come back as without rules.
  const auto ids = ref_["long_ids"].get<std::vector<int32_t>>();
  const std::vector<int32_t> a(ids.begin(), ids.begin() + 7), b(ids.begin() + 3, ids.begin() + 15);
  std::vector<RowSampling> rules(b.size());
  for (size_t i = 0; i < rules.size(); ++i) {
    rules[i].temperature = i % 3 == 0 ? 0.f : 0.6f + 0.2f * static_cast<float>(i % 4);
    rules[i].top_k = i % 4 == 1 ? 5 : 0;
    rules[i].top_p = i % 5 == 2 ? 0.8f : 1.f;
    rules[i].exclude = i % 2 == 0 ? ids[i] : -1;
    rules[i].uniform = static_cast<double>((i * 37) % 100) / 100.0;
  }
  for (Model* m : {p_.one.get(), p_.split.get()}) {
    Batch plain;
    plain.segments = {Seg(nullptr, 0, a, 0, true), Seg(nullptr, 0, b, 0, true)};
    Batch drawn = plain;
    drawn.segments[1].sample = rules;
    const ForwardResult want = m->Forward(plain), got = m->Forward(drawn);
    const int64_t A = static_cast<int64_t>(a.size());
    ASSERT_EQ(got.logits.size(), static_cast<size_t>(A * V_));
    EXPECT_EQ(MaxDiff(got.logits, want.logits.data(), got.logits.size()), 0.0);
    ASSERT_EQ(got.picks.size(), rules.size());
    std::set<int32_t> tokens;
    for (size_t i = 0; i < rules.size(); ++i) {
      float prob = 0.f;
      const int32_t t = SampleRowReference(want.logits.data() + (A + i) * V_, V_, rules[i], &prob);
      EXPECT_EQ(got.picks[i].token, t) << "row " << i;
      EXPECT_NEAR(got.picks[i].prob, prob, 1e-6) << "row " << i;
      EXPECT_NE(got.picks[i].token, rules[i].exclude) << "row " << i;
      tokens.insert(t);
    }
    EXPECT_GT(tokens.size(), 3u);
  }
  // A rule count that does not match the logits rows is a clear error.
  Batch bad;
  bad.segments = {Seg(nullptr, 0, a, 0, true)};
  bad.segments[0].sample.resize(2);
  EXPECT_THROW(p_.one->Forward(bad), Error);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, TensorParallel,
                         ::testing::Combine(::testing::Values("qwen3_moe", "qwen3_next", "qwen3_5_moe"),
                                            ::testing::Values(2, 4)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_tp" + std::to_string(std::get<1>(info.param));
                         });

// Block diffusion (block-causal attention, commit + denoise in one segment) on the diffusion
// fixtures, split vs unsplit vs HF's block-causal reference.
class TensorParallelDiffusion : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(TensorParallelDiffusion, CommitAndDenoiseMatch) {
  const auto& [family, n] = GetParam();
  const std::string d = DataPath("fixtures/diffusion/" + family);
  const auto ids = ReadJsonFile(d + "/reference.json")["block8_ids"].get<std::vector<int32_t>>();
  const NpyArray want = ReadNpy(d + "/logits_block8.npy");
  Pair p;
  p.one = Model::Load(FixtureDir(family));
  LoadOptions o;
  o.tensor_parallel_size = n;
  p.split = Model::Load(FixtureDir(family), o);
  const int64_t V = p.one->config().vocab_size;
  p.Alloc();
  auto sub = [&](int64_t a, int64_t b) { return std::vector<int32_t>(ids.begin() + a, ids.begin() + b); };
  // Block 0 committed; then [block 1 committed ; block 2 denoised] in one segment.
  auto [a0, b0] = p.Run([&](SequenceCache* c) { return std::vector<Segment>{Seg(&c[0], 0, sub(0, 8), 8, true, 8)}; });
  auto [a1, b1] = p.Run([&](SequenceCache* c) { return std::vector<Segment>{Seg(&c[0], 8, sub(8, 24), 8, true, 8)}; });
  ASSERT_FALSE(a0.logits.empty());
  ASSERT_FALSE(a1.logits.empty());
  EXPECT_LT(MaxDiff(b0.logits, a0.logits.data(), a0.logits.size()), 1e-4);
  EXPECT_LT(MaxDiff(b1.logits, a1.logits.data(), a1.logits.size()), 1e-4);
  EXPECT_LT(MaxDiff(b0.logits, want.data.data(), 8 * V), 1e-3);
  EXPECT_LT(MaxDiff(b1.logits, want.data.data() + 8 * V, 16 * V), 1e-3);
  EXPECT_TRUE(SameArgmax(b1.logits, want.data.data() + 8 * V, 16, V));
  // The denoised block left no trace: denoising it again gives the same logits.
  auto [a2, b2] = p.Run([&](SequenceCache* c) { return std::vector<Segment>{Seg(&c[0], 16, sub(16, 24), 0, true, 8)}; });
  EXPECT_LT(MaxDiff(b2.logits, b1.logits.data() + 8 * V, 8 * V), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, TensorParallelDiffusion,
                         ::testing::Combine(::testing::Values("qwen3_moe", "qwen3_5_moe"), ::testing::Values(2, 4)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_tp" + std::to_string(std::get<1>(info.param));
                         });

}  // namespace
}  // namespace tessera
