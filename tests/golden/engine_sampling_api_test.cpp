// tessera tests: the engine's side of the sampling API on the fixture models: n choices (one prompt
// prefill shared through the prefix cache, independent continuations, seeds derived per choice),
// logit_bias on every sampling path (backend rules, host sampler, diffusion blocks), diffusion
// log-probabilities (the confidences of the step trace) and the per-request router temperature
// (1 = plain, cache entries kept apart).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <set>

#include "engine/engine.h"
#include "engine_outcome.h"
#include "io/hf_config.h"
#include "model/model.h"
#include "test_util.h"

namespace tessera {
namespace {

using testing::DataPath;
using testing::MakeCollectingRequest;
using testing::Outcome;

std::string Fixture() { return DataPath("fixtures/models/qwen3_moe"); }

std::vector<int32_t> LongIds(size_t n) {
  auto ids = ReadJsonFile(Fixture() + "/reference.json")["long_ids"].get<std::vector<int32_t>>();
  ids.resize(n);
  return ids;
}

// A request of n choices whose events land in outs[index] (each must outlive the request).
GenerationRequest ChoicesRequest(std::vector<int32_t> prompt, int64_t max_tokens, int64_t n,
                                 std::vector<Outcome>* outs) {
  outs->assign(static_cast<size_t>(n), Outcome{});
  std::vector<std::function<void(const GenerationEvent&)>> sinks;
  for (int64_t i = 0; i < n; ++i) sinks.push_back(MakeCollectingRequest({}, 1, &(*outs)[i]).on_event);
  GenerationRequest r = MakeCollectingRequest(std::move(prompt), max_tokens, &(*outs)[0]);
  r.n = n;
  r.on_event = [sinks](const GenerationEvent& ev) {
    ASSERT_GE(ev.index, 0);
    ASSERT_LT(ev.index, static_cast<int32_t>(sinks.size()));
    sinks[ev.index](ev);
  };
  return r;
}

DiffusionParams Diffusion(int64_t block, int64_t steps) {
  DiffusionParams p;
  p.block_size = block;
  p.steps = steps;
  p.policy = DiffusionPolicy::kStatic;
  p.mask_token_id =
      ReadJsonFile(DataPath("fixtures/diffusion/qwen3_moe/reference.json"))["mask_token_id"].get<int32_t>();
  return p;
}

std::vector<std::vector<int32_t>> RunChoices(Model& model, const EngineConfig& ec, GenerationRequest req,
                                             std::vector<Outcome>* outs) {
  Engine engine(&model, nullptr, ec);
  engine.Submit(std::move(req));
  engine.RunUntilIdle();
  std::vector<std::vector<int32_t>> tokens;
  for (const Outcome& o : *outs) {
    EXPECT_TRUE(o.finished) << o.error;
    tokens.push_back(o.tokens);
  }
  return tokens;
}

TEST(EngineChoices, PromptComputedOnceAndChoicesDiffer) {
  auto model = Model::Load(Fixture());
  EngineConfig ec;
  ec.page_size = 4;
  Engine engine(model.get(), nullptr, ec);
  std::vector<Outcome> outs;
  auto req = ChoicesRequest(LongIds(40), 8, 4, &outs);
  req.sampling.temperature = 1.f;
  req.sampling.ignore_eos = true;
  engine.Submit(std::move(req));
  engine.RunUntilIdle();
  std::set<std::vector<int32_t>> distinct;
  for (size_t i = 0; i < outs.size(); ++i) {
    ASSERT_TRUE(outs[i].finished) << outs[i].error;
    EXPECT_EQ(outs[i].tokens.size(), 8u) << i;
    distinct.insert(outs[i].tokens);
    // The first choice computed the prompt; the others took its 36 positions of full pages (all but
    // the last page, which holds the position whose logits are needed) from the cache.
    EXPECT_EQ(outs[i].stats.cached_tokens, i == 0 ? 0 : 36) << i;
  }
  EXPECT_EQ(distinct.size(), 4u);
  // Rows run: the prompt once (40), 4 more for each later choice, then 7 decode rows per choice. Four
  // separate prefills would have run 4 * 40 + 28 = 188.
  EXPECT_EQ(engine.total_rows(), 40 + 3 * 4 + 4 * 7);
  EXPECT_EQ(engine.Snapshot().prefix_cache_hits, 3 * 36);
  EXPECT_EQ(engine.Snapshot().kv_pages_used, 0);
}

TEST(EngineChoices, SeededChoicesAreReproducibleAndTheFirstIsTheSeedsOwn) {
  auto model = Model::Load(Fixture());
  EngineConfig ec;
  ec.page_size = 4;
  auto run = [&](int64_t n) {
    std::vector<Outcome> outs;
    auto req = ChoicesRequest(LongIds(21), 10, n, &outs);
    req.sampling.temperature = 1.f;
    req.sampling.ignore_eos = true;
    req.sampling.seed = 1234;
    return RunChoices(*model, ec, std::move(req), &outs);
  };
  const auto a = run(3), b = run(3), single = run(1);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a[0], single[0]);
  EXPECT_NE(a[0], a[1]);
  EXPECT_NE(a[1], a[2]);
  EXPECT_NE(ChoiceSeed(1234, 1), ChoiceSeed(1234, 2));
  EXPECT_EQ(ChoiceSeed(1234, 0), 1234u);
}

TEST(EngineChoices, DiffusionChoicesShareCommittedBlocks) {
  auto model = Model::Load(Fixture());
  EngineConfig ec;
  ec.page_size = 4;
  ec.force_diffusion = true;
  auto run = [&](Engine& engine) {
    std::vector<Outcome> outs;
    auto req = ChoicesRequest(LongIds(20), 16, 3, &outs);
    req.diffusion = Diffusion(8, 4);
    req.sampling.temperature = 1.f;
    req.sampling.ignore_eos = true;
    req.sampling.seed = 99;
    engine.Submit(std::move(req));
    engine.RunUntilIdle();
    std::vector<std::vector<int32_t>> tokens;
    for (size_t i = 0; i < outs.size(); ++i) {
      EXPECT_TRUE(outs[i].finished) << outs[i].error;
      EXPECT_EQ(outs[i].tokens.size(), 16u);
      // Whole committed blocks of the prompt (2 of 8) come from the first choice's pages.
      EXPECT_EQ(outs[i].stats.cached_tokens, i == 0 ? 0 : 16) << i;
      tokens.push_back(outs[i].tokens);
    }
    return tokens;
  };
  Engine e1(model.get(), nullptr, ec), e2(model.get(), nullptr, ec);
  const auto a = run(e1), b = run(e2);
  EXPECT_EQ(a, b);
  EXPECT_NE(a[0], a[1]);
  EXPECT_NE(a[1], a[2]);
}

TEST(EngineLogitBias, ForcesAndBansTokensOnEveryPath) {
  auto model = Model::Load(Fixture());
  EngineConfig ec;
  ec.page_size = 4;
  const auto prompt = LongIds(12);
  auto run = [&](float temperature, std::vector<std::pair<int32_t, float>> bias, bool diffusion, bool logprobs) {
    EngineConfig c = ec;
    c.force_diffusion = diffusion;
    Engine engine(model.get(), nullptr, c);
    Outcome out;
    auto req = MakeCollectingRequest(prompt, 8, &out);
    req.sampling.temperature = temperature;
    req.sampling.seed = 5;
    req.sampling.ignore_eos = true;
    req.sampling.logit_bias = std::move(bias);
    if (logprobs) req.sampling.top_logprobs = 0;
    if (diffusion) req.diffusion = Diffusion(8, 4);
    engine.Submit(std::move(req));
    engine.RunUntilIdle();
    EXPECT_TRUE(out.finished) << out.error;
    return out.tokens;
  };
  const std::vector<int32_t> fives(8, 5);
  for (bool diffusion : {false, true})
    for (float t : {0.f, 1.f})
      for (bool logprobs : {false, true})
        EXPECT_EQ(run(t, {{5, 100.f}}, diffusion, logprobs), fives)
            << "diffusion " << diffusion << " temperature " << t << " logprobs " << logprobs;
  // A -100 bias bans the greedy choice: the first token changes, and never comes back.
  const auto plain = run(0.f, {}, false, false);
  ASSERT_FALSE(plain.empty());
  const auto banned = run(0.f, {{plain[0], -100.f}}, false, false);
  ASSERT_FALSE(banned.empty());
  EXPECT_NE(banned[0], plain[0]);
  for (int32_t t : banned) EXPECT_NE(t, plain[0]);
}

TEST(EngineLogitBias, OutOfVocabularyIdIsAnError) {
  auto model = Model::Load(Fixture());
  Engine engine(model.get(), nullptr, EngineConfig{});
  Outcome out;
  auto req = MakeCollectingRequest({1, 2, 3}, 4, &out);
  req.sampling.logit_bias = {{512, 1.f}};
  engine.Submit(std::move(req));
  engine.RunUntilIdle();
  EXPECT_NE(out.error.find("logit_bias"), std::string::npos) << out.error;
}

TEST(EngineDiffusionLogprobs, AreTheLogOfTheUnmaskingConfidences) {
  auto model = Model::Load(Fixture());
  EngineConfig ec;
  ec.page_size = 4;
  ec.force_diffusion = true;
  const auto prompt = LongIds(11);
  for (float t : {0.f, 1.f}) {
    for (DiffusionPolicy policy : {DiffusionPolicy::kStatic, DiffusionPolicy::kThreshold}) {
      SCOPED_TRACE("temperature " + std::to_string(t) + " policy " + std::to_string(static_cast<int>(policy)));
      Engine engine(model.get(), nullptr, ec);
      Outcome out;
      auto req = MakeCollectingRequest(prompt, 20, &out);
      req.diffusion = Diffusion(8, 4);
      req.diffusion->policy = policy;
      req.diffusion->threshold = 0.05f;
      req.sampling.temperature = t;
      req.sampling.seed = 3;
      req.sampling.ignore_eos = true;
      req.sampling.top_logprobs = 0;
      req.emit_steps = true;
      engine.Submit(std::move(req));
      engine.RunUntilIdle();
      ASSERT_TRUE(out.finished) << out.error;
      ASSERT_EQ(out.tokens.size(), 20u);
      ASSERT_EQ(out.logprobs.size(), out.tokens.size());
      // The step trace: which position got which confidence.
      std::map<int64_t, float> conf;
      for (const DiffusionStepView& s : out.steps)
        for (size_t j = 0; j < s.unmasked.size(); ++j) conf[s.unmasked[j]] = s.conf[j];
      for (size_t i = 0; i < out.tokens.size(); ++i) {
        const int64_t pos = static_cast<int64_t>(prompt.size() + i);
        ASSERT_TRUE(conf.count(pos)) << pos;
        EXPECT_EQ(out.logprobs[i], std::log(conf[pos])) << "position " << pos;
        EXPECT_LE(out.logprobs[i], 0.f);
      }
    }
  }
}

TEST(EngineDiffusionLogprobs, AlternativesAreRefused) {
  auto model = Model::Load(Fixture());
  EngineConfig ec;
  ec.force_diffusion = true;
  Engine engine(model.get(), nullptr, ec);
  Outcome out;
  auto req = MakeCollectingRequest({1, 2, 3}, 4, &out);
  req.diffusion = Diffusion(8, 4);
  req.sampling.top_logprobs = 2;
  engine.Submit(std::move(req));
  engine.RunUntilIdle();
  EXPECT_NE(out.error.find("top_logprobs"), std::string::npos) << out.error;
}

TEST(EngineRouterTemperature, OneIsPlainOtherValuesChangeTheOutputAndTheCacheKey) {
  auto model = Model::Load(Fixture());
  EngineConfig ec;
  ec.page_size = 4;
  Engine engine(model.get(), nullptr, ec);
  const auto prompt = LongIds(30);
  auto run = [&](std::optional<float> t) {
    Outcome out;
    auto req = MakeCollectingRequest(prompt, 12, &out);
    req.sampling.ignore_eos = true;
    req.sampling.top_logprobs = 3;
    req.router_temperature = t;
    engine.Submit(std::move(req));
    engine.RunUntilIdle();
    EXPECT_TRUE(out.finished) << out.error;
    return out;
  };
  const Outcome plain = run(std::nullopt), one = run(1.f), hot = run(0.3f), hot_again = run(0.3f), after = run(1.f);
  EXPECT_EQ(plain.tokens, one.tokens);
  EXPECT_EQ(plain.logprobs, one.logprobs);  // bit for bit
  EXPECT_NE(plain.logprobs, hot.logprobs);
  EXPECT_EQ(hot.logprobs, hot_again.logprobs);
  // Cache entries are per temperature: 1 shares with the plain request, 0.3 starts apart.
  EXPECT_EQ(plain.stats.cached_tokens, 0);
  EXPECT_EQ(one.stats.cached_tokens, 28);
  EXPECT_EQ(hot.stats.cached_tokens, 0);
  EXPECT_EQ(hot_again.stats.cached_tokens, 28);
  EXPECT_EQ(after.logprobs, plain.logprobs);

  Outcome bad;
  auto req = MakeCollectingRequest(prompt, 4, &bad);
  req.router_temperature = 0.f;
  engine.Submit(std::move(req));
  engine.RunUntilIdle();
  EXPECT_NE(bad.error.find("router temperature"), std::string::npos) << bad.error;
  EngineConfig wrong = ec;
  wrong.router_temperature = 50.f;
  EXPECT_THROW(Engine(model.get(), nullptr, wrong), Error);
}

}  // namespace
}  // namespace tessera
