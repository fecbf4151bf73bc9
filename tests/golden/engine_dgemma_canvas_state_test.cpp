// tessera engine tests: the canvas loop's state handling (engine_canvas.cpp) on the tiny numpy
// DiffusionGemma checkpoint: max_tokens rounded up to whole canvases then cut, the output cut at an end
// token, a commit that does not fit the token budget beside the next canvas, preemption for pages,
// cancellation in the middle of a canvas (its pages return), a follow-up turn served from the prefix
// cache, a seed's reproducibility, and what the loop refuses, each by name.
// The numbers themselves are held to the doc model by engine_dgemma_canvas_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "dgemma_checkpoint.h"
#include "engine/engine.h"
#include "engine_outcome.h"
#include "expect_error.h"
#include "io/hf_config.h"
#include "model/model.h"

namespace tessera {
namespace {

using testing::Outcome;

EngineConfig Config() {
  EngineConfig cfg;
  cfg.num_pages = 64;
  cfg.page_size = 4;
  cfg.enable_prefix_caching = false;  // freed pages go back to the free list, where the test counts them
  cfg.canvas.max_denoising_steps = 4;
  return cfg;
}

GenerationRequest Request(int64_t max_tokens, Outcome* out, uint64_t seed = 11) {
  GenerationRequest r = testing::MakeCollectingRequest(testing::DgemmaPromptIds(), max_tokens, out);
  r.sampling.temperature = 1.0f;
  r.sampling.seed = seed;
  r.sampling.ignore_eos = true;  // the random model's end tokens would make the lengths vary
  return r;
}

struct EngineCanvasState : ::testing::Test {
  void SetUp() override { model = Model::Load(testing::DgemmaSelfcheckDir()); }
  std::unique_ptr<Model> model;
};

// A request's outcome from a fresh engine.
Outcome Generate(Model* model, int64_t max_tokens, EngineConfig cfg = Config(), uint64_t seed = 11,
            std::vector<int32_t> stop_ids = {}) {
  Outcome out;
  GenerationRequest r = Request(max_tokens, &out, seed);
  r.sampling.stop_token_ids = std::move(stop_ids);
  Engine engine(model, nullptr, cfg);
  engine.Submit(std::move(r));
  engine.RunUntilIdle();
  EXPECT_TRUE(out.finished && out.error.empty()) << out.error;
  EXPECT_EQ(engine.Snapshot().kv_pages_used, 0) << "pages released at the end";
  return out;
}

TEST_F(EngineCanvasState, MaxTokensRoundsUpToWholeCanvasesThenCuts) {
  const int64_t C = model->config().canvas_length;  // 16
  Outcome o = Generate(model.get(), 20);
  EXPECT_EQ(o.reason, FinishReason::kLength);
  EXPECT_EQ(o.stats.steps_per_block.size(), 2u) << "ceil(20 / 16) canvases";
  EXPECT_EQ(o.raw.size(), static_cast<size_t>(2 * C)) << "raw output: whole canvases";
  ASSERT_EQ(o.tokens.size(), 20u) << "streamed: cut at max_tokens";
  EXPECT_TRUE(std::equal(o.tokens.begin(), o.tokens.end(), o.raw.begin()));
  // Exactly one canvas's worth: one canvas, nothing cut.
  Outcome one = Generate(model.get(), C);
  EXPECT_EQ(one.stats.steps_per_block.size(), 1u);
  EXPECT_EQ(one.tokens, std::vector<int32_t>(o.raw.begin(), o.raw.begin() + C)) << "the same seed, the same canvas";
  EXPECT_EQ(one.reason, FinishReason::kLength);
}

TEST_F(EngineCanvasState, EndTokenCutsTheOutputAndStops) {
  const int64_t C = model->config().canvas_length;
  Outcome free_run = Generate(model.get(), 3 * C);
  ASSERT_EQ(free_run.raw.size(), static_cast<size_t>(3 * C));
  // The first token of the second canvas that does not occur before it, as a stop id.
  int64_t at = -1;
  for (int64_t i = C; i < 2 * C && at < 0; ++i)
    if (std::find(free_run.raw.begin(), free_run.raw.begin() + i, free_run.raw[i]) == free_run.raw.begin() + i) at = i;
  ASSERT_GE(at, 0);
  Outcome o = Generate(model.get(), 3 * C, Config(), 11, {free_run.raw[at]});
  EXPECT_EQ(o.reason, FinishReason::kStop);
  EXPECT_EQ(o.tokens, std::vector<int32_t>(free_run.raw.begin(), free_run.raw.begin() + at)) << "dropped from the end token on";
  EXPECT_EQ(o.raw, std::vector<int32_t>(free_run.raw.begin(), free_run.raw.begin() + 2 * C)) << "no third canvas";
  // transformers' tokens_per_forward counts the end token.
  int64_t steps = 0;
  for (int64_t n : o.stats.steps_per_block) steps += n;
  EXPECT_DOUBLE_EQ(o.stats.tokens_per_forward, static_cast<double>(at + 1) / static_cast<double>(steps));
  // max_tokens before the end token: "length", cut there.
  Outcome cut = Generate(model.get(), at - 2, Config(), 11, {free_run.raw[at]});
  EXPECT_EQ(cut.reason, FinishReason::kLength);
  EXPECT_EQ(cut.tokens.size(), static_cast<size_t>(at - 2));
}

TEST_F(EngineCanvasState, CommitsThatDoNotFitBesideTheCanvasAreChunkedWithTheSameResult) {
  // Budget 20: the 24-token prompt goes in a chunk of 20, then its 4 with the first canvas (20 rows);
  // each later commit (16) and its next canvas (16) do not fit together: commit alone, then the canvas.
  EngineConfig small = Config();
  small.max_num_batched_tokens = 20;
  Outcome chunked = Generate(model.get(), 48, small);
  Outcome whole = Generate(model.get(), 48);
  EXPECT_EQ(chunked.raw, whole.raw);
  EXPECT_EQ(chunked.tokens, whole.tokens);
  EXPECT_GT(chunked.stats.forwards, whole.stats.forwards);
}

TEST_F(EngineCanvasState, CancellationMidCanvasFreesThePages) {
  EngineConfig cfg = Config();
  cfg.canvas.max_denoising_steps = 8;
  std::shared_ptr<std::atomic<bool>> cancel = std::make_shared<std::atomic<bool>>(false);
  int64_t steps_seen = 0, first_canvas_steps = 0;
  cfg.canvas_trace = [&](const CanvasStepTrace& s) {
    ++steps_seen;
    first_canvas_steps += s.canvas == 0;
    if (s.canvas == 1 && s.step == 2) cancel->store(true);  // in the middle of the second canvas
  };
  Engine engine(model.get(), nullptr, cfg);
  Outcome out;
  GenerationRequest r = Request(64, &out);
  r.cancelled = cancel;
  engine.Submit(std::move(r));
  int64_t used_while_running = 0;
  while (engine.Step()) used_while_running = std::max(used_while_running, engine.Snapshot().kv_pages_used);
  EXPECT_GT(used_while_running, 0);
  EXPECT_TRUE(out.finished);
  EXPECT_EQ(out.reason, FinishReason::kCancelled);
  EXPECT_EQ(engine.Snapshot().kv_pages_used, 0) << "the cancelled sequence's pages are free";
  EXPECT_EQ(steps_seen, first_canvas_steps + 3) << "no step after the cancelling one";
  EXPECT_EQ(out.tokens.size(), 16u) << "the first canvas was streamed, the second never";
}

// The prefix cache across requests: a follow-up turn whose prompt is the first request's prompt and two
// of its committed canvases reuses their pages (the prompt's and the canvases' K/V, written when each
// commit rode with the next canvas's first step; the last canvas is never encoded, so never offered)
// and draws the same canvases as an engine that computes everything afresh.
TEST_F(EngineCanvasState, FollowUpTurnReusesCommittedCanvasPages) {
  const int64_t C = model->config().canvas_length;
  EngineConfig cached = Config();
  cached.enable_prefix_caching = true;
  Engine engine(model.get(), nullptr, cached);
  Outcome first;
  engine.Submit(Request(3 * C, &first));
  engine.RunUntilIdle();
  ASSERT_TRUE(first.finished && first.error.empty()) << first.error;
  ASSERT_EQ(first.raw.size(), static_cast<size_t>(3 * C));
  std::vector<int32_t> turn = testing::DgemmaPromptIds();
  const auto prompt_len = static_cast<int64_t>(turn.size());
  turn.insert(turn.end(), first.raw.begin(), first.raw.begin() + 2 * C);
  auto follow_up = [&](Engine& e) {
    Outcome out;
    GenerationRequest r = Request(2 * C, &out, 12);
    r.prompt = turn;
    e.Submit(std::move(r));
    e.RunUntilIdle();
    EXPECT_TRUE(out.finished && out.error.empty()) << out.error;
    return out;
  };
  const Outcome reused = follow_up(engine);
  // Every full page before the prompt's last token (which is always computed): pages of 4.
  EXPECT_EQ(reused.stats.cached_tokens, (prompt_len + 2 * C - 1) / 4 * 4);
  Engine fresh(model.get(), nullptr, Config());
  const Outcome computed = follow_up(fresh);
  EXPECT_EQ(computed.stats.cached_tokens, 0);
  EXPECT_EQ(reused.raw, computed.raw);
  // The last canvas was never written to the cache: a turn through all three canvases reuses only two.
  turn.insert(turn.end(), first.raw.begin() + 2 * C, first.raw.end());
  const Outcome past_the_last = follow_up(engine);
  EXPECT_EQ(past_the_last.stats.cached_tokens, prompt_len + 2 * C);
}

// Canvases preempted for pages (their caches dropped mid-generation, the committed text recomputed when
// they come back, the kept self-conditioning input kept) draw what each request draws alone.
TEST_F(EngineCanvasState, PreemptedCanvasesDrawWhatTheyDrawAlone) {
  const int64_t C = model->config().canvas_length;
  const uint64_t seeds[] = {11, 12, 13};
  std::vector<Outcome> alone;
  for (uint64_t seed : seeds) alone.push_back(Generate(model.get(), 3 * C, Config(), seed));
  // Three requests of 24 + 3 x 16 positions (18 pages of 4 each at their last canvas) in 36 pages.
  EngineConfig tight = Config();
  tight.num_pages = 36;
  tight.enable_prefix_caching = true;  // its lookups count the recomputed text
  Engine engine(model.get(), nullptr, tight);
  std::vector<Outcome> together(3);
  for (int i = 0; i < 3; ++i) engine.Submit(Request(3 * C, &together[static_cast<size_t>(i)], seeds[i]));
  engine.RunUntilIdle();
  const auto prompt_len = static_cast<int64_t>(testing::DgemmaPromptIds().size());
  EXPECT_GT(engine.Snapshot().prefix_cache_queries, 3 * prompt_len) << "a request came back after a preemption";
  std::printf("preempted canvases: %ld tokens looked up at admission for %ld of prompts\n",
              static_cast<long>(engine.Snapshot().prefix_cache_queries), static_cast<long>(3 * prompt_len));
  for (int i = 0; i < 3; ++i) {
    SCOPED_TRACE(i);
    ASSERT_TRUE(together[i].finished && together[i].error.empty()) << together[i].error;
    EXPECT_EQ(together[i].raw, alone[i].raw);
    EXPECT_EQ(together[i].tokens, alone[i].tokens);
  }
}

TEST_F(EngineCanvasState, SameSeedSameCanvasesOtherSeedOthers) {
  Outcome a = Generate(model.get(), 32), b = Generate(model.get(), 32), c = Generate(model.get(), 32, Config(), 12);
  EXPECT_EQ(a.raw, b.raw);
  EXPECT_NE(a.raw, c.raw);
}

TEST_F(EngineCanvasState, RefusesWhatTheCanvasLoopDoesNotDo) {
  Engine engine(model.get(), nullptr, Config());
  auto refused = [&](auto edit, const std::string& what) {
    Outcome out;
    GenerationRequest r = Request(16, &out);
    edit(r);
    engine.Submit(std::move(r));
    engine.RunUntilIdle();
    EXPECT_NE(out.error.find(what), std::string::npos) << "'" << what << "' not in: " << out.error;
    EXPECT_NE(out.error.find("diffusion_gemma"), std::string::npos) << out.error;
  };
  refused([](GenerationRequest& r) { r.sampling.temperature = 0.f; }, "temperature");
  refused([](GenerationRequest& r) { r.sampling.top_p = 0.9f; }, "top_p");
  refused([](GenerationRequest& r) { r.sampling.top_logprobs = 0; }, "logprobs");
  refused([](GenerationRequest& r) { r.sampling.logit_bias = {{5, 1.f}}; }, "logit_bias");
  refused([](GenerationRequest& r) { r.sampling.repetition_penalty = 1.1f; }, "penalties");
  refused([](GenerationRequest& r) { r.sampling.min_tokens = 1; }, "min_tokens");
  refused([](GenerationRequest& r) { r.diffusion = DiffusionParams{}; }, "masked-diffusion");
  EngineConfig forced = Config();
  forced.force_diffusion = true;
  testing::ExpectError([&] { Engine e(model.get(), nullptr, forced); }, ErrorKind::kInvalidArgument,
                       {"diffusion_gemma", "masked block diffusion"});
  EngineConfig bad = Config();
  bad.canvas.t_min = 0.9;  // above t_max
  testing::ExpectError([&] { Engine e(model.get(), nullptr, bad); }, ErrorKind::kInvalidArgument, {"t_min"});
}

// Every knob of a request's own canvas settings takes effect (the engine's defaults: 4 steps, the
// published thresholds): seen in the trace of the steps and in the output's shape.
TEST_F(EngineCanvasState, RequestSamplerSettingsTakeEffect) {
  auto run = [&](const CanvasSamplerParams& p, int64_t max_tokens, std::vector<CanvasStepTrace>* steps) {
    EngineConfig cfg = Config();
    cfg.canvas_trace = [steps](const CanvasStepTrace& s) { steps->push_back(s); };
    Engine engine(model.get(), nullptr, cfg);
    Outcome out;
    GenerationRequest r = Request(max_tokens, &out);
    r.canvas = p;
    engine.Submit(std::move(r));
    engine.RunUntilIdle();
    EXPECT_TRUE(out.finished && out.error.empty()) << out.error;
    return out;
  };
  const EngineConfig base = Config();
  std::vector<CanvasStepTrace> steps;
  // Defaults as a request's own: the same as no request settings at all.
  Outcome plain = Generate(model.get(), 32);
  CanvasSamplerParams d = base.canvas;
  EXPECT_EQ(run(d, 32, &steps).raw, plain.raw);
  // Steps, temperatures and the entropy bound: 3 steps from t_max 2 to t_min 1; a huge bound accepts
  // every row; no early stop (a canvas needs 3 identical argmax canvases before it).
  CanvasSamplerParams p = d;
  p.max_denoising_steps = 3;
  p.t_min = 1.0;
  p.t_max = 2.0;
  p.entropy_bound = 1e6;
  p.stability_threshold = 3;
  steps.clear();
  Outcome o = run(p, 16, &steps);
  ASSERT_EQ(steps.size(), 3u);
  EXPECT_EQ(o.stats.steps_per_block, std::vector<int64_t>({3}));
  EXPECT_DOUBLE_EQ(steps[0].temperature, 2.0);
  EXPECT_DOUBLE_EQ(steps[2].temperature, 1.0 + 1.0 / 3.0);
  for (const CanvasStepTrace& s : steps)
    EXPECT_EQ(std::count(s.accepted.begin(), s.accepted.end(), 1), 16) << "every row within the bound";
  // A tiny bound accepts only the lowest-entropy row (always accepted).
  p.entropy_bound = 1e-9;
  steps.clear();
  run(p, 16, &steps);
  for (const CanvasStepTrace& s : steps) EXPECT_EQ(std::count(s.accepted.begin(), s.accepted.end(), 1), 1);
  // Stopping: stable without history (0) and confident below a loose threshold: one step a canvas.
  p.stability_threshold = 0;
  p.confidence_threshold = 100;
  EXPECT_EQ(run(p, 32, &steps).stats.steps_per_block, std::vector<int64_t>({1, 1}));
  // ... and never confident: every step runs.
  p.confidence_threshold = 1e-12;
  EXPECT_EQ(run(p, 32, &steps).stats.steps_per_block, std::vector<int64_t>({3, 3}));
  // The canvas length: 8-token canvases, 3 of them for 20 tokens.
  CanvasSamplerParams c8 = d;
  c8.canvas_length = 8;
  steps.clear();
  Outcome eight = run(c8, 20, &steps);
  EXPECT_EQ(eight.stats.steps_per_block.size(), 3u);
  EXPECT_EQ(eight.raw.size(), 24u);
  EXPECT_EQ(eight.tokens.size(), 20u);
  for (const CanvasStepTrace& s : steps) EXPECT_EQ(s.input.size(), 8u);
}

TEST_F(EngineCanvasState, RefusesBadRequestSamplerSettings) {
  Engine engine(model.get(), nullptr, Config());
  auto refused = [&](auto edit, const std::string& what) {
    Outcome out;
    GenerationRequest r = Request(16, &out);
    r.canvas = Config().canvas;
    edit(*r.canvas);
    engine.Submit(std::move(r));
    engine.RunUntilIdle();
    EXPECT_NE(out.error.find(what), std::string::npos) << "'" << what << "' not in: " << out.error;
  };
  refused([](CanvasSamplerParams& p) { p.canvas_length = 17; }, "canvas_length 17 exceeds the model's 16");
  refused([](CanvasSamplerParams& p) { p.canvas_length = -1; }, "canvas_length");
  refused([](CanvasSamplerParams& p) { p.max_denoising_steps = 0; }, "max_denoising_steps");
  refused([](CanvasSamplerParams& p) { p.t_min = 0.9; }, "t_min");
  refused([](CanvasSamplerParams& p) { p.entropy_bound = 0; }, "entropy_bound");
  refused([](CanvasSamplerParams& p) { p.confidence_threshold = -1; }, "confidence_threshold");
  refused([](CanvasSamplerParams& p) { p.stability_threshold = -1; }, "stability_threshold");
  EngineConfig big = Config();
  big.canvas.canvas_length = 32;
  testing::ExpectError([&] { Engine e(model.get(), nullptr, big); }, ErrorKind::kInvalidArgument,
                       {"canvas_length 32"});
}

// --load-format dummy: random weights of config.json's shapes (the fused experts as random rows of
// their own), and a generation through the canvas loop on the CPU.
TEST_F(EngineCanvasState, DummyWeightsGenerate) {
  LoadOptions lo;
  lo.load_format = "dummy";
  std::unique_ptr<Model> dummy = Model::Load(testing::DgemmaSelfcheckDir(), lo);
  Outcome o = Generate(dummy.get(), 20);
  EXPECT_EQ(o.reason, FinishReason::kLength);
  EXPECT_EQ(o.tokens.size(), 20u);
  EXPECT_EQ(o.stats.steps_per_block.size(), 2u);
  // Random weights, not the checkpoint's, and not degenerate.
  EXPECT_NE(o.raw, Generate(model.get(), 20).raw);
  EXPECT_GT(std::set<int32_t>(o.raw.begin(), o.raw.end()).size(), 1u);
}

}  // namespace
}  // namespace tessera
