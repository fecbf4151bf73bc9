// tessera engine tests: DiffusionGemma's canvas loop (engine_canvas.cpp, docs/DIFFUSION_GEMMA.md 6) on
// the tiny numpy checkpoint, replayed by the float64 doc model. The engine records every random draw it
// makes (EngineConfig::canvas_trace: each canvas's initial tokens, each step's sampling uniforms and
// re-noise tokens) together with its decisions; tools/dgemma_fixtures/replay_canvas_trace.py runs the
// draws through dgemma_doc_model.DocModel.generate (the section-6 algorithm, its own logits,
// entropies, inverse-CDF samples, acceptance, stop rule, commits, eos) and this test holds the
// engine to it: the same samples, accepted rows, next canvases and stop steps, the same committed
// canvases and output tokens, logits within 1e-3. SELF-CONSISTENCY ONLY: both sides read the same
// document (transformers' traces, make_dgemma_fixtures.py, are the reference still to come).
// EveryStepEqualsAStatelessForwardOfItsState (and its OnCuda twin) holds each step of the loop, on
// either backend, to the CPU model's stateless forward of that step's state.
// Break checks done by hand (each makes both tests fail): committing the last denoised canvas x instead
// of the argmax (the committed canvases, the later canvases' samples and argmax differ); leaving the
// self-conditioning input out of the segment (logits off by 46); not rounding S to bf16 before its
// softmax (docs 5: logits off by 43 once an acceptance flips).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "dgemma_checkpoint.h"
#include "engine/engine.h"
#include "engine_outcome.h"
#include "io/hf_config.h"
#include "io/npy.h"
#include "model/model.h"
#include "test_util.h"

namespace tessera {
namespace {

using testing::Outcome;

// Knobs under which this random model's canvases stop at different steps (its mean entropies run
// 0.15 .. 1 nats, far above the checkpoint's 0.005): the confidence stop alone (K = 0) with a threshold
// inside that range, and an entropy bound that accepts about half the rows.
CanvasSamplerParams ConfidenceParams() {
  CanvasSamplerParams p;
  p.max_denoising_steps = 10;
  p.entropy_bound = 0.5;
  p.t_min = 0.4;
  p.t_max = 0.8;
  p.stability_threshold = 0;
  p.confidence_threshold = 0.4;
  return p;
}

// The checkpoint's own rule shape (K = 1, the default bound) with every canvas confident: the stop then
// rests on the argmax history alone (this model's argmax canvas never repeats: every canvas runs all
// its steps, and a stop the history did not allow would show).
CanvasSamplerParams StabilityParams() {
  CanvasSamplerParams p;
  p.max_denoising_steps = 6;
  p.stability_threshold = 1;
  p.confidence_threshold = 5.0;
  return p;
}

GenerationRequest Request(const std::string& id, uint64_t seed, int64_t max_tokens, Outcome* out,
                          const std::string& dir = testing::DgemmaSelfcheckDir()) {
  GenerationRequest r = testing::MakeCollectingRequest(testing::DgemmaPromptIds(dir), max_tokens, out);
  r.id = id;
  r.sampling.temperature = 1.0f;  // the canvas sampler's own temperatures apply
  r.sampling.seed = seed;
  return r;
}

struct Traced {
  std::string id;
  std::vector<int32_t> eos_ids;  // the model's plus the request's stop ids
  int64_t max_tokens = 0;
  Outcome out;
};

// Writes the trace of `runs` (their draws; their logits as .npy) into dir/trace.json, runs the replay
// on the checkpoint in model_dir, returns its report.
nlohmann::json Replay(const std::string& dir, const std::map<std::string, std::vector<CanvasStepTrace>>& traces,
                      const std::vector<Traced*>& runs, const CanvasSamplerParams& p, int64_t vocab,
                      const std::string& model_dir = testing::DgemmaSelfcheckDir()) {
  nlohmann::json t;
  t["params"] = {{"max_denoising_steps", p.max_denoising_steps}, {"entropy_bound", p.entropy_bound},
                 {"t_min", p.t_min}, {"t_max", p.t_max}, {"stability_threshold", p.stability_threshold},
                 {"confidence_threshold", p.confidence_threshold}};
  t["round_s_to_bf16"] = true;  // the checkpoint is bf16 (docs 5)
  for (Traced* r : runs) {
    const auto& steps = traces.at(r->id);
    nlohmann::json q;
    q["id"] = r->id;
    q["prompt"] = testing::DgemmaPromptIds(model_dir);
    q["eos_ids"] = r->eos_ids;
    q["max_tokens"] = r->max_tokens;
    q["logits"] = r->id + "_logits.npy";
    nlohmann::json canvases = nlohmann::json::array();
    std::vector<float> logits;
    for (const CanvasStepTrace& s : steps) {
      if (s.step == 0) canvases.push_back({{"initial", s.input}, {"steps", nlohmann::json::array()}});
      canvases.back()["steps"].push_back({{"uniforms", s.uniforms}, {"noise", s.noise}});
      logits.insert(logits.end(), s.logits.begin(), s.logits.end());
    }
    q["canvases"] = canvases;
    const int64_t C = static_cast<int64_t>(steps.at(0).input.size());
    WriteNpyF32(dir + "/" + r->id + "_logits.npy", {static_cast<int64_t>(steps.size()), C, vocab}, logits.data());
    t["requests"].push_back(q);
  }
  testing::WriteFile(dir + "/trace.json", t.dump());
  const auto res = testing::RunCommand(testing::Python3() + " " + std::string(TESSERA_SOURCE_DIR) +
                                       "/tools/dgemma_fixtures/replay_canvas_trace.py " + model_dir +
                                       " " + dir + "/trace.json " + dir + "/replay.json");
  EXPECT_EQ(res.exit_code, 0) << res.out << res.err;
  return ReadJsonFile(dir + "/replay.json");
}

// The engine's trace and outcome of one request against the doc model's replay of its draws.
void ExpectSameGeneration(const Traced& run, const std::vector<CanvasStepTrace>& engine, const nlohmann::json& doc) {
  SCOPED_TRACE("request " + run.id);
  const auto& steps = doc["steps"];
  ASSERT_EQ(steps.size(), engine.size()) << "denoising steps";
  int64_t near_ties = 0;
  double worst_h = 0;
  std::string stops;
  std::vector<int32_t> committed;
  for (size_t i = 0; i < engine.size(); ++i) {
    const CanvasStepTrace& e = engine[i];
    const auto& d = steps[i];
    SCOPED_TRACE("canvas " + std::to_string(e.canvas) + " step " + std::to_string(e.step));
    ASSERT_EQ(d["canvas"].get<int64_t>(), e.canvas);
    ASSERT_EQ(d["step"].get<int64_t>(), e.step);
    EXPECT_EQ(d["argmax"].get<std::vector<int32_t>>(), e.argmax);
    const auto sampled = d["sampled"].get<std::vector<int32_t>>();
    const auto margin = d["margin"].get<std::vector<double>>();
    for (size_t r = 0; r < sampled.size(); ++r) {
      // A draw within rounding of a CDF edge may fall either way; none did in the recorded runs.
      if (margin[r] < 1e-6) ++near_ties;
      else EXPECT_EQ(sampled[r], e.sampled[r]) << "row " << r;
    }
    const auto acc = d["accepted"].get<std::vector<int>>();
    EXPECT_EQ(std::vector<uint8_t>(acc.begin(), acc.end()), e.accepted);
    EXPECT_EQ(d["next"].get<std::vector<int32_t>>(), e.next);
    EXPECT_EQ(d["stop"].get<bool>(), e.stop);
    const auto h = d["entropy"].get<std::vector<double>>();
    for (size_t r = 0; r < h.size(); ++r) worst_h = std::max(worst_h, std::abs(h[r] - e.entropy[r]));
    if (e.stop) {
      stops += std::to_string(e.step + 1) + " ";
      committed.insert(committed.end(), e.argmax.begin(), e.argmax.end());
    }
  }
  EXPECT_EQ(near_ties, 0);
  // The committed canvases are the argmax of each canvas's last step (the raw output, whole canvases).
  std::vector<int32_t> doc_committed;
  for (const auto& c : doc["committed"]) {
    const auto v = c.get<std::vector<int32_t>>();
    doc_committed.insert(doc_committed.end(), v.begin(), v.end());
  }
  EXPECT_EQ(doc_committed, committed);
  EXPECT_EQ(run.out.raw, committed);
  EXPECT_EQ(doc["output"].get<std::vector<int32_t>>(), run.out.tokens);
  EXPECT_EQ(doc["finish"].get<std::string>(), FinishReasonName(run.out.reason));
  const double worst = doc["max_logits_diff"].get<double>();
  EXPECT_LE(worst, 1e-3);
  EXPECT_LE(worst_h, 1e-3);
  std::printf("canvas replay %-8s steps per canvas [ %s] output %zu tokens (%s)  max |logits C++ - doc| %.3e  "
              "max |entropy diff| %.3e\n",
              run.id.c_str(), stops.c_str(), run.out.tokens.size(), FinishReasonName(run.out.reason), worst, worst_h);
}

TEST(EngineDiffusionGemmaCanvas, WholeGenerationsMatchTheDocModelReplay) {
  auto model = Model::Load(testing::DgemmaSelfcheckDir());
  const ModelConfig& mc = model->config();
  std::map<std::string, std::vector<CanvasStepTrace>> traces;
  EngineConfig cfg;
  cfg.num_pages = 64;
  cfg.page_size = 4;  // canvases and the window of 8 span pages
  cfg.canvas = ConfidenceParams();
  cfg.canvas_trace = [&](const CanvasStepTrace& s) { traces[s.request_id].push_back(s); };
  Engine engine(model.get(), nullptr, cfg);
  std::vector<int32_t> eos(mc.eos_token_ids.begin(), mc.eos_token_ids.end());

  // Two requests at once: their canvases share forwards (one segment each).
  Traced a{"a", eos, 40, {}}, b{"b", eos, 20, {}};
  engine.Submit(Request("a", 7, a.max_tokens, &a.out));
  engine.Submit(Request("b", 8, b.max_tokens, &b.out));
  engine.RunUntilIdle();
  ASSERT_TRUE(a.out.finished && b.out.finished) << a.out.error << b.out.error;
  ASSERT_TRUE(a.out.error.empty() && b.out.error.empty()) << a.out.error << b.out.error;
  EXPECT_LT(engine.total_forwards(), a.out.stats.forwards + b.out.stats.forwards) << "the canvases were batched";
  // Their self-conditioning inputs were kept by the model between steps, and released at the end.
  EXPECT_EQ(model->kept_canvas_states(), 0);

  // An end token the model produces: request "a" again with the same seed and, as a stop id, a token of
  // its second canvas that its first lacks: the same draws up to there, the output cut before it.
  ASSERT_GE(a.out.raw.size(), 32u);
  const int64_t C = mc.canvas_length;
  int32_t stop_id = -1;
  for (int64_t i = C; i < 2 * C && stop_id < 0; ++i)
    if (std::find(a.out.raw.begin(), a.out.raw.begin() + i, a.out.raw[i]) == a.out.raw.begin() + i)
      stop_id = a.out.raw[i];
  ASSERT_GE(stop_id, 0);
  Traced e{"e", eos, 40, {}};
  e.eos_ids.push_back(stop_id);
  GenerationRequest re = Request("e", 7, e.max_tokens, &e.out);
  re.sampling.stop_token_ids = {stop_id};
  engine.Submit(std::move(re));
  engine.RunUntilIdle();
  ASSERT_TRUE(e.out.finished && e.out.error.empty()) << e.out.error;
  EXPECT_EQ(e.out.reason, FinishReason::kStop);
  EXPECT_EQ(e.out.raw.size(), static_cast<size_t>(2 * C)) << "two canvases, then the end token";

  const std::string dir = testing::ScratchDir("dgemma_canvas_replay");
  const nlohmann::json report = Replay(dir, traces, {&a, &b, &e}, cfg.canvas, mc.vocab_size);
  ASSERT_EQ(report["requests"].size(), 3u);
  ExpectSameGeneration(a, traces.at("a"), report["requests"][0]);
  ExpectSameGeneration(b, traces.at("b"), report["requests"][1]);
  ExpectSameGeneration(e, traces.at("e"), report["requests"][2]);
  // The stats: tokens_per_forward as transformers counts it (new tokens up to and including the end
  // token, whole canvases, over the denoising forwards).
  int64_t steps_e = 0;
  for (int64_t n : e.out.stats.steps_per_block) steps_e += n;
  EXPECT_EQ(steps_e, static_cast<int64_t>(traces.at("e").size()));
  EXPECT_DOUBLE_EQ(e.out.stats.tokens_per_forward, static_cast<double>(e.out.tokens.size() + 1) / steps_e);
}

TEST(EngineDiffusionGemmaCanvas, StabilityRuleMatchesTheDocModelReplay) {
  auto model = Model::Load(testing::DgemmaSelfcheckDir());
  const ModelConfig& mc = model->config();
  std::map<std::string, std::vector<CanvasStepTrace>> traces;
  EngineConfig cfg;
  cfg.num_pages = 64;
  cfg.page_size = 4;
  cfg.canvas = StabilityParams();
  cfg.canvas_trace = [&](const CanvasStepTrace& s) { traces[s.request_id].push_back(s); };
  Engine engine(model.get(), nullptr, cfg);
  Traced k{"k", {}, 32, {}};
  GenerationRequest r = Request("k", 21, k.max_tokens, &k.out);
  r.sampling.ignore_eos = true;  // no end token: two whole canvases
  engine.Submit(std::move(r));
  engine.RunUntilIdle();
  ASSERT_TRUE(k.out.finished && k.out.error.empty()) << k.out.error;
  const nlohmann::json report =
      Replay(testing::ScratchDir("dgemma_canvas_replay_k1"), traces, {&k}, cfg.canvas, mc.vocab_size);
  ASSERT_EQ(report["requests"].size(), 1u);
  ExpectSameGeneration(k, traces.at("k"), report["requests"][0]);
}

// Every step of a traced run recomputed by `ref` as one stateless forward built from the trace alone:
// the prompt, the canvases the run committed before the step (each canvas's argmax at its stop step),
// the step's canvas, and the self-conditioning input of the run's previous step (ref's own
// SelfConditioningInput of that step's logits / temperature, as the engine computes it). This checks
// each step of the run's cached, batched, paged, graph-replayed loop against an independent forward
// of the same state, so a backend's error cannot compound from step to step: the loop itself is
// chaotic in that error (a 1e-3 perturbation of the logits fed to self-conditioning moves the next
// step's logits by 0.3 and parts the trajectory within 3-8 steps on the CPU alone, 2026-12-06), which
// makes two backends' whole trajectories incomparable. Also checks the loop's wiring: each step
// denoises the previous step's `next`, and the output is the committed canvases. Returns the largest
// |logits - ref's| of the run.
double MaxStatelessReplayDiff(Model& ref, const std::string& dir, const std::vector<CanvasStepTrace>& steps,
                              const Outcome& out) {
  std::vector<int32_t> text = testing::DgemmaPromptIds(dir);  // prompt + committed canvases
  const auto prompt_len = static_cast<int64_t>(text.size());
  double worst = 0;
  for (size_t i = 0; i < steps.size(); ++i) {
    const CanvasStepTrace& s = steps[i];
    SCOPED_TRACE("canvas " + std::to_string(s.canvas) + " step " + std::to_string(s.step));
    const auto C = static_cast<int64_t>(s.input.size());
    Segment seg;
    seg.tokens = text;
    seg.commit_len = static_cast<int64_t>(text.size());
    seg.tokens.insert(seg.tokens.end(), s.input.begin(), s.input.end());
    for (int64_t r = 0; r < C; ++r) seg.logits_rows.push_back(static_cast<int32_t>(seg.commit_len + r));
    if (s.step > 0) {
      const CanvasStepTrace& prev = steps.at(i - 1);
      EXPECT_EQ(prev.next, s.input) << "the step does not denoise the previous step's next canvas";
      std::vector<float> z = prev.logits;
      const auto t = static_cast<float>(prev.temperature);
      for (float& v : z) v /= t;
      seg.self_conditioning = ref.SelfConditioningInput(z.data(), C);
    } else {
      EXPECT_EQ(static_cast<int64_t>(text.size()), prompt_len + s.canvas * C) << "committed text before the canvas";
    }
    Batch b;
    b.segments.push_back(std::move(seg));
    const ForwardResult r = ref.Forward(b);
    EXPECT_EQ(r.logits.size(), s.logits.size());
    if (r.logits.size() != s.logits.size()) return 1e30;
    const double diff = testing::MaxAbsDiff(s.logits.data(), r.logits.data(), s.logits.size());
    worst = std::max(worst, diff);
    if (s.stop) text.insert(text.end(), s.argmax.begin(), s.argmax.end());
  }
  EXPECT_EQ(std::vector<int32_t>(text.begin() + prompt_len, text.end()), out.raw) << "output = the committed canvases";
  return worst;
}

struct TracedRun {
  std::map<std::string, std::vector<CanvasStepTrace>> traces;
  std::map<std::string, Outcome> outs;
};

// The runs the replay checks: two requests batched (ConfidenceParams: canvases of different lengths
// of steps, an end token) and the K = 1 history (StabilityParams: two whole canvases), over pages of
// 4 tokens so that canvases and the window of 8 span pages. dir: the checkpoint m was loaded from.
TracedRun RunTraced(Model& m, const std::string& dir, bool stability) {
  TracedRun run;
  EngineConfig cfg;
  cfg.num_pages = 64;
  cfg.page_size = 4;
  cfg.canvas = stability ? StabilityParams() : ConfidenceParams();
  cfg.canvas_trace = [&](const CanvasStepTrace& s) { run.traces[s.request_id].push_back(s); };
  Engine engine(&m, nullptr, cfg);
  if (stability) {
    GenerationRequest r = Request("k", 21, 32, &run.outs["k"], dir);
    r.sampling.ignore_eos = true;
    engine.Submit(std::move(r));
  } else {
    engine.Submit(Request("a", 7, 40, &run.outs["a"], dir));
    engine.Submit(Request("b", 8, 20, &run.outs["b"], dir));
  }
  engine.RunUntilIdle();
  for (auto& [id, out] : run.outs) EXPECT_TRUE(out.finished && out.error.empty()) << id << ": " << out.error;
  return run;
}

void ExpectStepsEqualStatelessReplays(Model& run_on, Model& ref, const std::string& dir, double tolerance,
                                      const char* label) {
  for (const bool stability : {false, true}) {
    const TracedRun run = RunTraced(run_on, dir, stability);
    for (const auto& [id, out] : run.outs) {
      SCOPED_TRACE("request " + id);
      const std::vector<CanvasStepTrace>& steps = run.traces.at(id);
      int64_t canvases = 0;
      for (const CanvasStepTrace& s : steps) canvases += s.stop ? 1 : 0;
      const double worst = MaxStatelessReplayDiff(ref, dir, steps, out);
      EXPECT_LE(worst, tolerance) << "logits of the loop's steps against stateless forwards of the same state";
      std::printf("canvas replay %s %-2s %zu steps, %ld canvases, output %zu tokens: max |logits - stateless cpu| %.3e\n",
                  label, id.c_str(), steps.size(), static_cast<long>(canvases), out.tokens.size(), worst);
    }
  }
}

// The harness on the CPU: the engine's cached, paged loop against stateless forwards of the same model
// (the same arithmetic in another order: ~1e-5).
TEST(EngineDiffusionGemmaCanvas, EveryStepEqualsAStatelessForwardOfItsState) {
  for (const std::string& dir : {testing::DgemmaSelfcheckDir(), testing::DgemmaUntiedDir()}) {
    SCOPED_TRACE(dir);
    auto cpu = Model::Load(dir);
    ExpectStepsEqualStatelessReplays(*cpu, *cpu, dir, 1e-4, "cpu ");
  }
}

// The canvas loop on the CUDA backend (segments batched, pages of 4, steps replayed as CUDA graphs,
// the self-conditioning input from the device) against the CPU model's stateless forward of every
// step's state: logits within 5e-3 (logits ~ +-30; the forward's own bound, CudaDgemma.*).
TEST(EngineDiffusionGemmaCanvas, EveryCudaStepEqualsTheCpusForwardOfItsStateOnCuda) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "skipped: no CUDA device";
  for (const std::string& dir : {testing::DgemmaSelfcheckDir(), testing::DgemmaUntiedDir()}) {
    SCOPED_TRACE(dir);
    auto cpu = Model::Load(dir);
    LoadOptions o;
    o.device = "cuda";
    auto gpu = Model::Load(dir, o);
    ExpectStepsEqualStatelessReplays(*gpu, *cpu, dir, 5e-3, "cuda");
  }
}

// An untied checkpoint (two stacks, docs OPEN 5): two requests batched through the canvas loop (prompts
// beside canvases, commits fused with the next canvas's first step: both stacks in one forward) against
// the doc model's replay of their draws.
TEST(EngineDiffusionGemmaCanvas, UntiedCheckpointMatchesTheDocModelReplay) {
  const std::string dir = testing::DgemmaUntiedDir();
  auto model = Model::Load(dir);
  ASSERT_FALSE(model->config().tie_word_embeddings);
  TracedRun run = RunTraced(*model, dir, false);
  std::vector<int32_t> eos(model->config().eos_token_ids.begin(), model->config().eos_token_ids.end());
  Traced a{"a", eos, 40, run.outs["a"]}, b{"b", eos, 20, run.outs["b"]};
  const nlohmann::json report = Replay(testing::ScratchDir("dgemma_canvas_replay_untied"), run.traces, {&a, &b},
                                       ConfidenceParams(), model->config().vocab_size, dir);
  ASSERT_EQ(report["requests"].size(), 2u);
  ExpectSameGeneration(a, run.traces.at("a"), report["requests"][0]);
  ExpectSameGeneration(b, run.traces.at("b"), report["requests"][1]);
}

}  // namespace
}  // namespace tessera
