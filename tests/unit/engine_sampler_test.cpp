// tessera tests: the sampler (penalties by their published formulas, filters, seeding), stop
// strings and the static diffusion schedule: the engine's pure logic, without a model.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <set>

#include "backend/sampling.h"
#include "engine/diffusion_decoder.h"
#include "engine/sampler.h"
#include "engine/stop_matcher.h"

namespace tessera {
namespace {

std::vector<float> Logits() { return {0.5f, 2.0f, -1.0f, 1.5f, 0.0f, -2.0f, 1.0f, 0.25f}; }

TEST(EngineSampler, GreedyIsArgmaxAndTiesGoToLowestId) {
  SamplingParams p;
  p.temperature = 0;
  Sampler s(p, {});
  auto l = Logits();
  EXPECT_EQ(s.Sample(l.data(), l.size()), 1);
  std::vector<float> tie = {1.0f, 3.0f, 3.0f};
  EXPECT_EQ(ArgMax(tie.data(), 3), 1);
}

TEST(EngineSampler, RepetitionPenaltyFollowsHfFormula) {
  // HF: a seen token's logit is divided by the penalty when positive, multiplied when negative.
  SamplingParams p;
  p.temperature = 0;
  p.repetition_penalty = 4.0f;
  Sampler s(p, {1, 2});
  auto l = Logits();
  s.Sample(l.data(), l.size());
  EXPECT_FLOAT_EQ(l[1], 0.5f);   // 2.0 / 4
  EXPECT_FLOAT_EQ(l[2], -4.0f);  // -1.0 * 4
  EXPECT_FLOAT_EQ(l[3], 1.5f);   // untouched
}

TEST(EngineSampler, PresenceAndFrequencyPenaltiesFollowOpenAiFormula) {
  // OpenAI: logit -= count * frequency_penalty + (count > 0) * presence_penalty, output tokens only.
  SamplingParams p;
  p.temperature = 0;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  Sampler s(p, {3});  // prompt tokens are not penalised
  s.Observe(1);
  s.Observe(1);
  s.Observe(6);
  auto l = Logits();
  int32_t t = s.Sample(l.data(), l.size());
  EXPECT_FLOAT_EQ(l[1], 2.0f - 0.5f - 2 * 0.25f);
  EXPECT_FLOAT_EQ(l[6], 1.0f - 0.5f - 0.25f);
  EXPECT_FLOAT_EQ(l[3], 1.5f);
  EXPECT_EQ(t, 3);
}

TEST(EngineSampler, FiltersThatKeepOneTokenAreGreedy) {
  for (int which = 0; which < 3; ++which) {
    SamplingParams p;
    p.temperature = 1.0f;
    p.seed = 7;
    if (which == 0) p.top_k = 1;
    if (which == 1) p.top_p = 1e-6f;
    if (which == 2) p.min_p = 1.0f;
    Sampler s(p, {});
    for (int i = 0; i < 20; ++i) {
      auto l = Logits();
      EXPECT_EQ(s.Sample(l.data(), l.size()), 1) << "filter " << which;
    }
  }
}

TEST(EngineSampler, TopKRestrictsTheDraws) {
  SamplingParams p;
  p.temperature = 5.0f;  // nearly flat
  p.top_k = 3;
  p.seed = 1;
  Sampler s(p, {});
  std::set<int32_t> seen;
  for (int i = 0; i < 300; ++i) {
    auto l = Logits();
    seen.insert(s.Sample(l.data(), l.size()));
  }
  EXPECT_EQ(seen, (std::set<int32_t>{1, 3, 6}));
}

TEST(EngineSampler, SeedReproducesAndDifferentSeedsDiffer) {
  auto draw = [](uint64_t seed) {
    SamplingParams p;
    p.temperature = 3.0f;
    p.seed = seed;
    Sampler s(p, {});
    std::vector<int32_t> out;
    for (int i = 0; i < 64; ++i) {
      auto l = Logits();
      out.push_back(s.Sample(l.data(), l.size()));
    }
    return out;
  };
  EXPECT_EQ(draw(42), draw(42));
  EXPECT_NE(draw(42), draw(43));
}

TEST(EngineSampler, GreedyConfidenceIsSoftmaxOfArgmax) {
  SamplingParams p;
  p.temperature = 0;
  Sampler s(p, {});
  auto l = Logits();
  float conf = 0;
  int32_t t = s.SampleWithConfidence(l.data(), l.size(), &conf);
  double sum = 0;
  for (float v : l) sum += std::exp(v);
  EXPECT_EQ(t, 1);
  EXPECT_NEAR(conf, std::exp(2.0) / sum, 1e-6);
}

TEST(EngineSampler, LogprobsAreLogSoftmax) {
  auto l = Logits();
  TokenLogprob lp = ComputeLogprobs(l.data(), l.size(), 3, 2);
  double sum = 0;
  for (float v : l) sum += std::exp(v);
  EXPECT_NEAR(lp.logprob, 1.5 - std::log(sum), 1e-5);
  ASSERT_EQ(lp.top.size(), 2u);
  EXPECT_EQ(lp.top[0].first, 1);
  EXPECT_EQ(lp.top[1].first, 3);
}

TEST(EngineStopMatcher, HoldsBackPrefixesAndCutsAtTheStop) {
  StopMatcher m({"STOP", "xyz"});
  EXPECT_EQ(m.Feed("hello ST"), "hello ");
  EXPECT_FALSE(m.stopped());
  EXPECT_EQ(m.Feed("ART"), "START");
  EXPECT_EQ(m.Feed(" and S"), " and ");
  EXPECT_EQ(m.Feed("TOP tail"), "");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.matched(), "STOP");
  EXPECT_EQ(m.Feed("more"), "");
}

TEST(EngineStopMatcher, EarliestStopWinsAndFlushReleasesHeldText) {
  StopMatcher m({"bc", "abcd"});
  EXPECT_EQ(m.Feed("xabcd"), "x");  // "abcd" starts before "bc"
  StopMatcher n({"needle"});
  EXPECT_EQ(n.Feed("a nee"), "a ");
  EXPECT_EQ(n.Flush(), "nee");
}

TEST(EngineDiffusionSchedule, SplitsEvenlyWithRemainderFirst) {
  EXPECT_EQ(StaticSchedule(8, 4), (std::vector<int64_t>{2, 2, 2, 2}));
  EXPECT_EQ(StaticSchedule(10, 4), (std::vector<int64_t>{3, 3, 2, 2}));
  EXPECT_EQ(StaticSchedule(4, 8), (std::vector<int64_t>{1, 1, 1, 1, 0, 0, 0, 0}));
  EXPECT_EQ(StaticSchedule(32, 32), std::vector<int64_t>(32, 1));
}

TEST(EngineDiffusionDecoder, FirstBlockHoldsThePromptTail) {
  DiffusionParams p;
  p.block_size = 4;
  p.steps = 4;
  p.mask_token_id = 99;
  DiffusionDecoder d(p, {1, 2, 3, 4, 5, 6});
  EXPECT_EQ(d.block_start(), 4);
  EXPECT_EQ(d.block(), (std::vector<int32_t>{5, 6, 99, 99}));
  EXPECT_EQ(d.masks_left(), 2);
  DiffusionDecoder aligned(p, {1, 2, 3, 4});
  EXPECT_EQ(aligned.block_start(), 4);
  EXPECT_EQ(aligned.masks_left(), 4);
}

TEST(EngineDiffusionDecoder, NeverPredictsTheMaskTokenSoEveryStepProgresses) {
  // The model's favourite at every position is the mask token itself: x0 must be the best other
  // token (else the block would never complete), with the model's probability as confidence.
  DiffusionParams p;
  p.block_size = 2;
  p.steps = 2;
  p.policy = DiffusionPolicy::kThreshold;
  p.threshold = 0.5f;
  p.mask_token_id = 3;
  DiffusionDecoder d(p, {0, 1});
  SamplingParams sp;
  sp.temperature = 0;
  Sampler s(sp, {});
  std::vector<float> logits = {0.f, 1.f, 0.f, 5.f, 0.f, 0.f, 2.f, 6.f};  // two rows of vocab 4
  auto v = d.ApplyStep(logits.data(), 4, s);
  ASSERT_EQ(v.unmasked.size(), 1u);  // nothing above 0.5: the single most confident one
  EXPECT_EQ(v.unmasked[0], 3);       // row 1: p(2) = e^2 / (2 + e^2 + e^6) beats row 0's p(1)
  EXPECT_EQ(v.block_tokens[1], 2);
  EXPECT_NEAR(v.conf[0], std::exp(2.0) / (2 + std::exp(2.0) + std::exp(6.0)), 1e-6);
  v = d.ApplyStep(logits.data(), 4, s);
  EXPECT_TRUE(d.block_done());
  EXPECT_EQ(v.block_tokens, (std::vector<int32_t>{1, 2}));
}

// RowSampling's definition written out plainly (backend.h): the whole vocabulary sorted by e = exp((logit -
// max) / T) descending, ties by lower id; top_k; v = e / s1 (s1 over the kept tokens: in id order when all
// are kept, else in that order); top_p and min_p cuts; w = v / s2 (s2 the same way); the first token
// whose running w exceeds the uniform, else the last with w > 0.
int32_t PlainSample(const std::vector<float>& row, const RowSampling& p, float* prob) {
  const int64_t n = static_cast<int64_t>(row.size());
  const float inf = std::numeric_limits<float>::infinity();
  auto logit = [&](int64_t i) { return i == p.exclude ? -inf : row[static_cast<size_t>(i)]; };
  float mx = -inf;
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, logit(i));
  std::vector<std::pair<float, int32_t>> all;
  for (int64_t i = 0; i < n; ++i) all.push_back({std::exp((logit(i) - mx) * (1.0f / p.temperature)), static_cast<int32_t>(i)});
  std::vector<std::pair<float, int32_t>> order = all;
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  });
  size_t keep = p.top_k > 0 ? std::min<size_t>(static_cast<size_t>(p.top_k), order.size()) : order.size();
  const bool whole = keep == order.size();
  double s1 = 0;
  if (whole) for (const auto& c : all) s1 += c.first;
  else for (size_t i = 0; i < keep; ++i) s1 += order[i].first;
  std::vector<float> v(keep);
  for (size_t i = 0; i < keep; ++i) v[i] = static_cast<float>(order[i].first / s1);
  size_t cut = keep;
  if (p.top_p < 1.f) {
    double cum = 0;
    size_t m = 0;
    while (m < cut) {
      cum += v[m++];
      if (cum >= p.top_p) break;
    }
    cut = std::max<size_t>(m, 1);
  }
  if (p.min_p > 0.f) {
    size_t m = 1;
    while (m < cut && v[m] >= v[0] * p.min_p) ++m;
    cut = m;
  }
  double s2 = 0;
  if (whole && cut == keep) for (const auto& c : all) s2 += static_cast<float>(c.first / s1);
  else for (size_t i = 0; i < cut; ++i) s2 += v[i];
  double cum = 0;
  for (size_t i = 0; i < cut; ++i) {
    const float w = static_cast<float>(v[i] / s2);
    if (p.uniform < (cum += w)) return *prob = w, order[i].second;
  }
  for (size_t i = cut; i-- > 0;)
    if (static_cast<float>(v[i] / s2) > 0.f) return *prob = static_cast<float>(v[i] / s2), order[i].second;
  return *prob = static_cast<float>(v[cut - 1] / s2), order[cut - 1].second;
}

// SampleRowReference sorts only as far as the cuts and the draw read: the same token and probability as
// the plain definition, bit for bit, over peaked and flat rows, every filter, draws at the edges.
TEST(EngineSampler, ReferenceEqualsThePlainDefinition) {
  std::mt19937_64 g(11);
  std::uniform_real_distribution<double> uni(0.0, 1.0);
  int rows = 0;
  for (const int64_t n : {7, 300, 5000, 40000}) {
    for (const float sigma : {0.3f, 3.f, 12.f}) {
      std::normal_distribution<float> d(0.f, sigma);
      std::vector<float> row(static_cast<size_t>(n));
      for (float& x : row) x = d(g);
      for (int64_t i = 0; i + 3 < n; i += 97) row[static_cast<size_t>(i + 3)] = row[static_cast<size_t>(i)];  // ties
      for (const float t : {0.5f, 1.f, 1.7f})
        for (const int32_t k : {0, 1, 40, 3000})
          for (const float tp : {1.f, 0.95f, 0.3f})
            for (const float mp : {0.f, 0.02f})
              for (const double u : {uni(g), 0.0, 0.9999999, 1.5}) {
                RowSampling p{t, k, tp, mp, static_cast<int32_t>(g() % 3 == 0 ? g() % n : -1), u};
                float want_p = 0, got_p = 0;
                const int32_t want = PlainSample(row, p, &want_p);
                ASSERT_EQ(SampleRowReference(row.data(), n, p, &got_p), want)
                    << "n " << n << " sigma " << sigma << " t " << t << " k " << k << " top_p " << tp << " min_p " << mp
                    << " u " << u;
                ASSERT_EQ(got_p, want_p);
                ++rows;
              }
    }
  }
  EXPECT_EQ(rows, 4 * 3 * 3 * 4 * 3 * 2 * 4);
}

// A grammar-masked row (-inf but for a few tokens): the draw is the inverse CDF over the allowed tokens by
// their renormalised probabilities (highest first, ties by id), greedy takes the best with its softmax
// probability; computed here independently of SampleRowReference, which leaves the zeros out.
TEST(EngineSampler, MaskedRowsDrawFromTheAllowedTokensOnly) {
  const int64_t vocab = 1000;
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> row(vocab, -inf);
  const std::vector<std::pair<int32_t, float>> allowed = {{7, 1.0f}, {123, 2.5f}, {400, 1.0f}, {401, 0.2f},
                                                           {999, 2.0f}, {0, -1.0f}};
  for (const auto& [t, l] : allowed) row[t] = l;
  double total = 0;
  for (const auto& a : allowed) total += std::exp(static_cast<double>(a.second) - 2.5);
  std::vector<std::pair<double, int32_t>> sorted;
  for (const auto& [t, l] : allowed) sorted.push_back({std::exp(static_cast<double>(l) - 2.5) / total, t});
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  });
  float prob = 0;
  RowSampling greedy;
  EXPECT_EQ(SampleRowReference(row.data(), vocab, greedy, &prob), 123);
  EXPECT_NEAR(prob, sorted[0].first, 1e-6);
  for (double u = 0; u < 1; u += 0.03) {
    RowSampling p;
    p.temperature = 1.f;
    p.uniform = u;
    double cum = 0;
    int32_t want = -1;
    double want_p = 0;
    for (const auto& [q, t] : sorted)
      if (u < (cum += q)) {
        want = t, want_p = q;
        break;
      }
    ASSERT_EQ(SampleRowReference(row.data(), vocab, p, &prob), want) << u;
    EXPECT_NEAR(prob, want_p, 1e-6) << u;
  }
}

// A constrained step reads the rows from the first masked position on: the static schedule's count
// of them, or the rest of the block under a threshold (the forward asks for these rows only).
TEST(EngineDiffusionDecoder, ConstrainedRowsAreTheStepsChain) {
  DiffusionParams p;
  p.block_size = 8;
  p.steps = 3;  // schedule 3, 3, 2
  p.mask_token_id = 99;
  DiffusionDecoder tail(p, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10});  // the block holds the prompt's 9, 10
  EXPECT_EQ(tail.ConstrainedRows(), (std::pair<int64_t, int64_t>{2, 5}));
  DiffusionDecoder aligned(p, {1, 2, 3, 4, 5, 6, 7, 8});
  EXPECT_EQ(aligned.ConstrainedRows(), (std::pair<int64_t, int64_t>{0, 3}));
  p.block_size = 4;
  p.steps = 1;  // schedule 4: the whole block after the prompt's tail, cut at its end
  DiffusionDecoder one_step(p, {1, 2, 3, 4, 5});
  EXPECT_EQ(one_step.ConstrainedRows(), (std::pair<int64_t, int64_t>{1, 4}));
  p.policy = DiffusionPolicy::kThreshold;
  DiffusionDecoder threshold(p, {1, 2, 3, 4, 5, 6});
  EXPECT_EQ(threshold.ConstrainedRows(), (std::pair<int64_t, int64_t>{2, 4}));
}

// Random logits rows (vocab n), with a few exact ties so the tie order matters.
std::vector<float> RandomRows(int64_t rows, int64_t n, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> d(0.f, 2.f);
  std::vector<float> v(rows * n);
  for (float& x : v) x = d(g);
  for (int64_t r = 0; r < rows; ++r) v[r * n + 3] = v[r * n + 1];
  return v;
}

TEST(EngineSampler, RowRuleDrawsWhatSampleDraws) {
  // The backend samples by RowRule (backend/sampling.h); without penalties its draws must be
  // Sample's, draw for draw, from the same seed: same filters, same generator consumption.
  const int64_t n = 300;
  const std::vector<float> rows = RandomRows(40, n, 7);
  struct Case {
    float t;
    int k;
    float p, min_p;
  };
  for (const Case c : {Case{0.f, 0, 1.f, 0.f}, Case{1.f, 0, 1.f, 0.f}, Case{0.7f, 20, 1.f, 0.f},
                       Case{1.3f, 0, 0.8f, 0.f}, Case{1.f, 50, 0.9f, 0.05f}}) {
    SamplingParams sp;
    sp.temperature = c.t;
    sp.top_k = c.k;
    sp.top_p = c.p;
    sp.min_p = c.min_p;
    sp.seed = 1234;
    Sampler host(sp, {}), device(sp, {});
    ASSERT_TRUE(device.NextIsPlainRule());
    // The draws are the seed's mt19937_64 uniforms in [0, 1), one per sampled token.
    std::mt19937_64 gen(1234);
    std::uniform_real_distribution<double> uniform(0.0, 1.0);
    std::set<int32_t> distinct;
    for (int64_t r = 0; r < 40; ++r) {
      std::vector<float> row(rows.begin() + r * n, rows.begin() + (r + 1) * n);
      const int32_t want = host.Sample(row.data(), n);
      const RowSampling rule = device.RowRule();
      EXPECT_EQ(rule.temperature, c.t);
      EXPECT_EQ(rule.top_k, c.k);
      EXPECT_EQ(rule.top_p, c.p);
      EXPECT_EQ(rule.min_p, c.min_p);
      if (c.t > 0) {  // greedy takes no draw
        EXPECT_EQ(rule.uniform, uniform(gen)) << "row " << r;
      }
      float prob = 0.f;
      EXPECT_EQ(SampleRowReference(rows.data() + r * n, n, rule, &prob), want) << "t " << c.t << " row " << r;
      EXPECT_GT(prob, 0.f);
      distinct.insert(want);
    }
    if (c.t > 0) {
      EXPECT_GT(distinct.size(), 5u);  // really sampled
    }
  }
}

TEST(EngineSampler, DrawAboveTheTotalTakesTheLastTokenWithProbability) {
  // A draw at or above the final distribution's total (its float rounding can leave it just under 1)
  // takes the last token that has a probability, never the excluded one (probability 0, last in
  // the order).
  const std::vector<float> row = {0.5f, 2.0f, 9.0f, -1.0f, 1.0f};
  RowSampling rule;
  rule.temperature = 1.0f;
  rule.exclude = 2;
  rule.uniform = 1.5;
  float prob = 0.f;
  EXPECT_EQ(SampleRowReference(row.data(), 5, rule, &prob), 3);  // the smallest logit left
  EXPECT_GT(prob, 0.f);
}

TEST(EngineSampler, PlainRuleOnlyWithoutPenalties) {
  SamplingParams sp;
  EXPECT_TRUE(Sampler(sp, {}).NextIsPlainRule());
  sp.repetition_penalty = 1.1f;
  EXPECT_FALSE(Sampler(sp, {}).NextIsPlainRule());
  sp = {};
  sp.presence_penalty = 0.5f;
  EXPECT_FALSE(Sampler(sp, {}).NextIsPlainRule());
  sp = {};
  sp.frequency_penalty = 0.5f;
  EXPECT_FALSE(Sampler(sp, {}).NextIsPlainRule());
  sp = {};
  sp.min_tokens = 2;
  Sampler s(sp, {}, {7});
  EXPECT_FALSE(s.NextIsPlainRule());  // eos suppressed for two more tokens
  s.Observe(1);
  s.Observe(2);
  EXPECT_TRUE(s.NextIsPlainRule());
}

TEST(EngineDiffusionDecoder, PickedStepsEqualLogitsSteps) {
  // Decoding a block from tokens drawn by RulesForRows (as the backend draws them) must give the
  // same steps as drawing from the logits on the host: sampled x0, editing passes included.
  for (DiffusionPolicy policy : {DiffusionPolicy::kStatic, DiffusionPolicy::kThreshold, DiffusionPolicy::kEditing}) {
    for (float t : {0.f, 0.9f}) {
      DiffusionParams p;
      p.block_size = 8;
      p.steps = 3;
      p.policy = policy;
      p.threshold = 0.3f;
      p.edit_threshold = 0.2f;
      p.max_edit_steps = 2;
      p.mask_token_id = 5;
      SamplingParams sp;
      sp.temperature = t;
      sp.top_k = 40;
      sp.seed = 99;
      const int64_t n = 64;
      const std::vector<int32_t> prompt = {1, 2, 3, 4, 6, 7, 8, 9, 10, 11};  // tail of 2 in the block
      DiffusionDecoder host(p, prompt), device(p, prompt);
      Sampler hs(sp, prompt), ds(sp, prompt);
      for (int step = 0; step < 12 && !host.block_done(); ++step) {
        const std::vector<float> logits = RandomRows(p.block_size, n, 100 + step);
        const std::vector<RowSampling> rules = device.RulesForRows(ds);
        ASSERT_EQ(static_cast<int64_t>(rules.size()), p.block_size);
        std::vector<int32_t> tokens(p.block_size);
        std::vector<float> probs(p.block_size);
        for (int64_t i = 0; i < p.block_size; ++i)
          tokens[i] = SampleRowReference(logits.data() + i * n, n, rules[i], &probs[i]);
        const DiffusionStepView want = host.ApplyStep(logits.data(), n, hs);
        const DiffusionStepView got = device.ApplyPickedStep(tokens.data(), probs.data());
        EXPECT_EQ(got.unmasked, want.unmasked) << "step " << step;
        EXPECT_EQ(got.conf, want.conf) << "step " << step;
        EXPECT_EQ(got.block_tokens, want.block_tokens) << "step " << step;
        EXPECT_EQ(device.block_done(), host.block_done());
      }
      EXPECT_TRUE(host.block_done()) << "policy " << static_cast<int>(policy) << " t " << t;
    }
  }
}

// DiffusionStepView::decision_margin: how far each rule's decision was from going the other way.
TEST(EngineDiffusionDecoder, DecisionMarginIsTheGapToTheRulesBoundary) {
  DiffusionParams p;
  p.block_size = 4;
  p.steps = 2;
  p.mask_token_id = 5;
  const std::vector<int32_t> prompt = {1, 2, 3, 4};
  const std::vector<int32_t> tokens = {7, 8, 9, 10};
  {  // static: 2 of 4 a step; the last taken (0.5) against the first left out (0.45)
    p.policy = DiffusionPolicy::kStatic;
    DiffusionDecoder d(p, prompt);
    const std::vector<float> probs = {0.9f, 0.45f, 0.5f, 0.1f};
    const DiffusionStepView v = d.ApplyPickedStep(tokens.data(), probs.data());
    ASSERT_EQ(v.unmasked.size(), 2u);
    EXPECT_NEAR(v.decision_margin, 0.05f, 1e-6);
    // Step 2 takes the remaining two: nothing left out, nothing competed.
    EXPECT_TRUE(std::isinf(d.ApplyPickedStep(tokens.data(), probs.data()).decision_margin));
  }
  {  // threshold 0.3: the closest confidence to it, taken or not
    p.policy = DiffusionPolicy::kThreshold;
    p.threshold = 0.3f;
    DiffusionDecoder d(p, prompt);
    const std::vector<float> probs = {0.9f, 0.32f, 0.2f, 0.1f};
    const DiffusionStepView v = d.ApplyPickedStep(tokens.data(), probs.data());
    ASSERT_EQ(v.unmasked.size(), 2u);
    EXPECT_NEAR(v.decision_margin, 0.02f, 1e-6);
  }
}

}  // namespace
}  // namespace tessera
