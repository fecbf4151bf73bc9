// tessera tests: prefix caching in the engine. A request whose prompt repeats an earlier one
// reuses its full KV pages (and, for the hybrid families, the recurrent-state snapshot at the
// page boundary) and must produce exactly what it produces without the cache: the HF greedy
// references of the fixtures, and the no-cache engine's tokens and log-probabilities (which the
// golden tests tie to HF) for longer prompts. Also: namespaces never share, short prompts and
// evictions, preemption, the snapshot counters, diffusion (committed blocks only).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "model/model.h"
#include "engine_outcome.h"
#include "test_util.h"

namespace tessera {
namespace {

using nlohmann::json;
using tessera::testing::DataPath;

json ReadJson(const std::string& path) {
  std::ifstream f(path);
  return json::parse(f);
}

std::vector<int32_t> Ids(const json& j) { return j.get<std::vector<int32_t>>(); }

using tessera::testing::Outcome;

GenerationRequest MakeRequest(std::vector<int32_t> prompt, int64_t max_tokens, Outcome* out) {
  GenerationRequest r = testing::MakeCollectingRequest(std::move(prompt), max_tokens, out);
  r.sampling.min_tokens = max_tokens;  // fixed length: eos suppressed like HF min_new_tokens
  return r;
}

// Runs one greedy request (with the chosen tokens' log-probabilities) to the end.
Outcome RunOne(Engine& engine, const std::vector<int32_t>& prompt, int64_t max_tokens, const std::string& ns = "") {
  Outcome out;
  auto req = MakeRequest(prompt, max_tokens, &out);
  req.sampling.top_logprobs = 0;
  req.cache_namespace = ns;
  engine.Submit(std::move(req));
  engine.RunUntilIdle();
  EXPECT_TRUE(out.finished);
  EXPECT_EQ(out.error, "");
  return out;
}

void ExpectSameOutput(const Outcome& got, const Outcome& want, const std::string& what) {
  EXPECT_EQ(got.tokens, want.tokens) << what;
  ASSERT_EQ(got.logprobs.size(), want.logprobs.size()) << what;
  for (size_t i = 0; i < got.logprobs.size(); ++i) EXPECT_NEAR(got.logprobs[i], want.logprobs[i], 1e-5) << what << " token " << i;
}

EngineConfig SmallPages(bool caching) {
  EngineConfig ec;
  ec.page_size = 4;
  ec.num_pages = 64;  // small caches keep the tests quick
  ec.enable_prefix_caching = caching;
  return ec;
}

class PrefixCacheFamilies : public ::testing::TestWithParam<std::string> {
 protected:
  std::string Dir() const { return DataPath("fixtures/models/" + GetParam()); }
};

TEST_P(PrefixCacheFamilies, RepeatedShortPromptHitsAndMatchesReference) {
  json ref = ReadJson(Dir() + "/reference.json");
  auto model = Model::Load(Dir());
  const auto prompt = Ids(ref["short_ids"]);  // 7 tokens: one full page of 4 usable
  const auto expected = Ids(ref["greedy_continuation"]);
  Outcome plain;
  {
    Engine engine(model.get(), nullptr, SmallPages(false));
    plain = RunOne(engine, prompt, 24);
    EXPECT_EQ(engine.Snapshot().prefix_cache_queries, 0);
  }
  EXPECT_EQ(plain.tokens, expected);
  Engine engine(model.get(), nullptr, SmallPages(true));
  Outcome first = RunOne(engine, prompt, 24);
  Outcome second = RunOne(engine, prompt, 24);
  EXPECT_EQ(first.stats.cached_tokens, 0);
  EXPECT_EQ(second.stats.cached_tokens, 4);
  EXPECT_EQ(first.tokens, expected);
  EXPECT_EQ(second.tokens, expected);
  ExpectSameOutput(first, plain, "first");
  ExpectSameOutput(second, plain, "second");
  EngineSnapshot snap = engine.Snapshot();
  EXPECT_EQ(snap.kv_pages_used, 0);
  EXPECT_GT(snap.kv_pages_cached, 0);
}

TEST_P(PrefixCacheFamilies, LongPromptReusesEveryFullPageButTheLastToken) {
  json ref = ReadJson(Dir() + "/reference.json");
  auto model = Model::Load(Dir());
  const auto long_ids = Ids(ref["long_ids"]);
  for (int64_t len : {23, 24, 41}) {
    const std::vector<int32_t> prompt(long_ids.begin(), long_ids.begin() + len);
    const std::string what = GetParam() + " prompt " + std::to_string(len);
    Outcome plain;
    {
      Engine engine(model.get(), nullptr, SmallPages(false));
      plain = RunOne(engine, prompt, 10);
    }
    Engine engine(model.get(), nullptr, SmallPages(true));
    Outcome first = RunOne(engine, prompt, 10);
    Outcome second = RunOne(engine, prompt, 10);
    // Whole pages, always leaving the last prompt token to compute (its logits are needed): a
    // 24-token prompt reuses 20 tokens. Hybrid models snapshot their state at that boundary.
    const int64_t want = (len - 1) / 4 * 4;
    EXPECT_EQ(first.stats.cached_tokens, 0) << what;
    EXPECT_EQ(second.stats.cached_tokens, want) << what;
    ExpectSameOutput(first, plain, what + " first");
    ExpectSameOutput(second, plain, what + " second");
  }
}

TEST_P(PrefixCacheFamilies, FollowUpPromptExtendsTheFirstRequest) {
  // The next chat turn: the first prompt, its answer, and more. Attention-only models reuse the
  // answer's committed pages too; hybrid ones resume at the first prompt's last page boundary.
  json ref = ReadJson(Dir() + "/reference.json");
  auto model = Model::Load(Dir());
  const auto long_ids = Ids(ref["long_ids"]);
  const std::vector<int32_t> prompt(long_ids.begin(), long_ids.begin() + 18);
  Engine engine(model.get(), nullptr, SmallPages(true));
  Outcome first = RunOne(engine, prompt, 12);
  std::vector<int32_t> next = prompt;
  next.insert(next.end(), first.tokens.begin(), first.tokens.end());
  next.insert(next.end(), long_ids.begin() + 50, long_ids.begin() + 55);  // 35 tokens
  Outcome second = RunOne(engine, next, 8);
  // The reference runs on a model of its own: an engine owns its model's caches.
  auto ref_model = Model::Load(Dir());
  Engine ref_engine(ref_model.get(), nullptr, SmallPages(false));
  Outcome plain = RunOne(ref_engine, next, 8);
  // The first request committed 18 + 11 = 29 positions: 7 full pages (28 tokens).
  const bool hybrid = GetParam() != "qwen3_moe";
  EXPECT_EQ(second.stats.cached_tokens, hybrid ? 16 : 28);
  ExpectSameOutput(second, plain, "follow-up");
}

TEST_P(PrefixCacheFamilies, NamespacesNeverShare) {
  json ref = ReadJson(Dir() + "/reference.json");
  auto model = Model::Load(Dir());
  const auto long_ids = Ids(ref["long_ids"]);
  const std::vector<int32_t> prompt(long_ids.begin(), long_ids.begin() + 21);
  Engine engine(model.get(), nullptr, SmallPages(true));
  Outcome a = RunOne(engine, prompt, 4, "key-a");
  Outcome b = RunOne(engine, prompt, 4, "key-b");
  Outcome none = RunOne(engine, prompt, 4, "");
  Outcome a2 = RunOne(engine, prompt, 4, "key-a");
  Outcome b2 = RunOne(engine, prompt, 4, "key-b");
  EXPECT_EQ(a.stats.cached_tokens, 0);
  EXPECT_EQ(b.stats.cached_tokens, 0);
  EXPECT_EQ(none.stats.cached_tokens, 0);
  EXPECT_EQ(a2.stats.cached_tokens, 20);
  EXPECT_EQ(b2.stats.cached_tokens, 20);
  ExpectSameOutput(b, a, "namespace b");
  ExpectSameOutput(a2, a, "namespace a again");
}

TEST_P(PrefixCacheFamilies, PromptShorterThanAPageIsNeverCached) {
  auto model = Model::Load(Dir());
  Engine engine(model.get(), nullptr, SmallPages(true));
  const std::vector<int32_t> prompt = {17, 230, 41};
  Outcome a = RunOne(engine, prompt, 6);
  Outcome b = RunOne(engine, prompt, 6);
  EXPECT_EQ(a.stats.cached_tokens, 0);
  EXPECT_EQ(b.stats.cached_tokens, 0);
  ExpectSameOutput(b, a, "short prompt");
  // Exactly one page: the last token must be computed, so nothing is reusable either.
  const std::vector<int32_t> page = {17, 230, 41, 99};
  Outcome c = RunOne(engine, page, 6);
  Outcome d = RunOne(engine, page, 6);
  EXPECT_EQ(d.stats.cached_tokens, 0);
  ExpectSameOutput(d, c, "one-page prompt");
}

TEST_P(PrefixCacheFamilies, EvictionUnderASmallPoolKeepsResults) {
  json ref = ReadJson(Dir() + "/reference.json");
  auto model = Model::Load(Dir());
  const auto long_ids = Ids(ref["long_ids"]);
  // Five prompts of 22 tokens (two share their first 12) + 8 new tokens: 8 pages each, in a pool
  // of 12 pages with one state snapshot: every request evicts what the one before left.
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 5; ++i) prompts.emplace_back(long_ids.begin() + 10 * i, long_ids.begin() + 10 * i + 22);
  prompts[3].assign(prompts[0].begin(), prompts[0].begin() + 12);
  prompts[3].insert(prompts[3].end(), long_ids.begin() + 80, long_ids.begin() + 90);
  std::vector<Outcome> plain;
  {
    Engine engine(model.get(), nullptr, SmallPages(false));
    for (const auto& p : prompts) plain.push_back(RunOne(engine, p, 8));
  }
  EngineConfig ec = SmallPages(true);
  ec.num_pages = 12;
  ec.max_model_len = 40;
  ec.num_state_snapshots = 1;
  Engine engine(model.get(), nullptr, ec);
  // 5 prompts x 7 registered pages do not fit in 12: evictions must happen along the way.
  for (int round = 0; round < 2; ++round) {
    for (size_t i = 0; i < prompts.size(); ++i) {
      const std::string what = "round " + std::to_string(round) + " prompt " + std::to_string(i);
      // Each prompt twice in a row: the repeat hits what the first left in the pool.
      Outcome a = RunOne(engine, prompts[i], 8);
      Outcome b = RunOne(engine, prompts[i], 8);
      ExpectSameOutput(a, plain[i], what);
      ExpectSameOutput(b, plain[i], "repeat, " + what);
      EXPECT_EQ(b.stats.cached_tokens, 20) << what;
      // Only prompts 0 and 3 share anything (12 tokens): more would be a stale hit.
      EXPECT_LE(a.stats.cached_tokens, 12) << what;
      EXPECT_EQ(engine.Snapshot().kv_pages_used, 0);
    }
  }
}

TEST_P(PrefixCacheFamilies, ConcurrentIdenticalRequestsWithPreemptionKeepResults) {
  json ref = ReadJson(Dir() + "/reference.json");
  auto model = Model::Load(Dir());
  EngineConfig ec = SmallPages(true);
  ec.num_pages = 12;  // 48 positions: three 31-position requests cannot all fit
  ec.max_model_len = 40;
  Engine engine(model.get(), nullptr, ec);
  std::vector<Outcome> outs(4);
  for (auto& o : outs) {
    auto req = MakeRequest(Ids(ref["short_ids"]), 24, &o);
    engine.Submit(std::move(req));
  }
  engine.RunUntilIdle();
  for (auto& o : outs) {
    ASSERT_TRUE(o.finished);
    EXPECT_EQ(o.error, "");
    EXPECT_EQ(o.tokens, Ids(ref["greedy_continuation"]));
  }
  // Submitted together, none could reuse another's pages at admission (none was committed yet).
  EngineSnapshot snap = engine.Snapshot();
  EXPECT_EQ(snap.kv_pages_used, 0);
  EXPECT_GE(snap.prefix_cache_queries, 4 * 7);
  // Preempted requests came back to find the prompt page the others had committed.
  EXPECT_GT(snap.prefix_cache_hits, 0);
}

TEST_P(PrefixCacheFamilies, SnapshotCountersAddUp) {
  json ref = ReadJson(Dir() + "/reference.json");
  auto model = Model::Load(Dir());
  const auto long_ids = Ids(ref["long_ids"]);
  Engine engine(model.get(), nullptr, SmallPages(true));
  int64_t prompt_tokens = 0, cached = 0;
  for (int64_t len : {9, 13, 13, 9, 30, 30, 2}) {
    const std::vector<int32_t> prompt(long_ids.begin(), long_ids.begin() + len);
    Outcome o = RunOne(engine, prompt, 3);
    EXPECT_EQ(o.stats.prompt_tokens, len);
    prompt_tokens += len;
    cached += o.stats.cached_tokens;
  }
  EngineSnapshot snap = engine.Snapshot();
  EXPECT_EQ(snap.prefix_cache_queries, prompt_tokens);
  EXPECT_EQ(snap.prefix_cache_hits, cached);
  EXPECT_GT(cached, 0);
  EXPECT_EQ(snap.kv_pages_used, 0);
  EXPECT_EQ(snap.requests_running, 0);
}

INSTANTIATE_TEST_SUITE_P(Families, PrefixCacheFamilies, ::testing::Values("qwen3_moe", "qwen3_next", "qwen3_5_moe"));

class PrefixCacheDiffusion : public ::testing::TestWithParam<std::string> {};

TEST_P(PrefixCacheDiffusion, RepeatedPromptReusesCommittedBlocksAndMatchesReference) {
  const std::string fam = GetParam();
  json ref = ReadJson(DataPath("fixtures/diffusion/" + fam + "/reference.json"));
  auto model = Model::Load(DataPath("fixtures/models/" + fam));
  const int32_t mask = ref["mask_token_id"].get<int32_t>();
  const auto prompt = Ids(ref["prompt"]);  // 13 tokens
  for (const json& c : ref["cases"]) {
    const std::string what = fam + " block " + c["block"].dump() + " " + c["policy"].get<std::string>();
    DiffusionParams p;
    p.block_size = c["block"].get<int64_t>();
    p.steps = c["steps"].get<int64_t>();
    p.policy = c["policy"] == "static" ? DiffusionPolicy::kStatic : DiffusionPolicy::kThreshold;
    if (!c["threshold"].is_null()) p.threshold = c["threshold"].get<float>();
    p.mask_token_id = mask;
    EngineConfig ec = SmallPages(true);
    ec.force_diffusion = true;
    Engine engine(model.get(), nullptr, ec);
    std::vector<Outcome> outs(2);
    for (auto& o : outs) {
      auto req = MakeRequest(prompt, c["max_new_tokens"].get<int64_t>(), &o);
      req.sampling.min_tokens = 0;
      req.diffusion = p;
      req.emit_steps = true;
      engine.Submit(std::move(req));
      engine.RunUntilIdle();
      ASSERT_TRUE(o.finished) << o.error;
      EXPECT_EQ(o.raw, Ids(c["output"])) << what;
      ASSERT_EQ(o.steps.size(), c["trace"].size()) << what;
      for (size_t i = 0; i < o.steps.size(); ++i) {
        EXPECT_EQ(o.steps[i].unmasked, c["trace"][i]["unmasked"].get<std::vector<int64_t>>()) << what;
        auto confs = c["trace"][i]["conf"].get<std::vector<float>>();
        for (size_t j = 0; j < confs.size() && j < o.steps[i].conf.size(); ++j)
          EXPECT_NEAR(o.steps[i].conf[j], confs[j], 1e-4) << what << " step " << i;
      }
    }
    // The committed blocks before the prompt's partial block (which is denoised): 12 tokens
    // for blocks of 4, 8 for blocks of 8.
    const int64_t b = p.block_size;
    EXPECT_EQ(outs[0].stats.cached_tokens, 0) << what;
    EXPECT_EQ(outs[1].stats.cached_tokens, 13 / b * b) << what;
    EXPECT_EQ(engine.Snapshot().kv_pages_used, 0);
  }
}

TEST_P(PrefixCacheDiffusion, DifferentBlockSizesNeverShare) {
  // A page's K/V depends on the block layout (block-causal attention): block 4 and block 8
  // requests keep separate entries.
  const std::string fam = GetParam();
  auto model = Model::Load(DataPath("fixtures/models/" + fam));
  EngineConfig ec = SmallPages(true);
  ec.force_diffusion = true;
  Engine engine(model.get(), nullptr, ec);
  std::vector<int32_t> prompt;
  for (int i = 0; i < 17; ++i) prompt.push_back((i * 29 + 7) % 500);
  auto run = [&](int64_t block) {
    Outcome o;
    auto req = MakeRequest(prompt, 8, &o);
    req.sampling.min_tokens = 0;
    DiffusionParams p;
    p.block_size = block;
    p.steps = 2;
    p.mask_token_id = 511;
    req.diffusion = p;
    engine.Submit(std::move(req));
    engine.RunUntilIdle();
    EXPECT_EQ(o.error, "");
    return o;
  };
  EXPECT_EQ(run(4).stats.cached_tokens, 0);
  EXPECT_EQ(run(8).stats.cached_tokens, 0);
  EXPECT_EQ(run(8).stats.cached_tokens, 16);
  EXPECT_EQ(run(4).stats.cached_tokens, 16);
}

INSTANTIATE_TEST_SUITE_P(Families, PrefixCacheDiffusion, ::testing::Values("qwen3_moe", "qwen3_5_moe"));

}  // namespace
}  // namespace tessera
