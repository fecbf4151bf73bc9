// tessera engine tests: DiffusionGemma's canvas loop (engine_canvas.cpp, docs/DIFFUSION_GEMMA.md 6) on
// the tiny numpy checkpoint, replayed by the float64 doc model. The engine records every random draw it
// makes (EngineConfig::canvas_trace: each canvas's initial tokens, each step's sampling uniforms and
// re-noise tokens) together with its decisions; tools/dgemma_fixtures/replay_canvas_trace.py runs the
// draws through dgemma_doc_model.DocModel.generate (the section-6 algorithm, its own logits,
// entropies, inverse-CDF samples, acceptance, stop rule, commits, eos) and this test holds the
// engine to it: the same samples, accepted rows, next canvases and stop steps, the same committed
// canvases and output tokens, logits within 1e-3. SELF-CONSISTENCY ONLY: both sides read the same
// document (transformers' traces, make_dgemma_fixtures.py, are the reference still to come).
// GenerationsEqualTheCpusOnCuda runs the same loop on the CUDA backend against the CPU engine's run.
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

std::vector<int32_t> PromptIds() {
  return ReadJsonFile(testing::DgemmaSelfcheckDir() + "/selfcheck.json")["prompt_ids"].get<std::vector<int32_t>>();
}

GenerationRequest Request(const std::string& id, uint64_t seed, int64_t max_tokens, Outcome* out) {
  GenerationRequest r = testing::MakeCollectingRequest(PromptIds(), max_tokens, out);
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

// Writes the trace of `runs` (their draws; their logits as .npy) into dir/trace.json, runs the replay,
// returns its report.
nlohmann::json Replay(const std::string& dir, const std::map<std::string, std::vector<CanvasStepTrace>>& traces,
                      const std::vector<Traced*>& runs, const CanvasSamplerParams& p, int64_t vocab) {
  nlohmann::json t;
  t["params"] = {{"max_denoising_steps", p.max_denoising_steps}, {"entropy_bound", p.entropy_bound},
                 {"t_min", p.t_min}, {"t_max", p.t_max}, {"stability_threshold", p.stability_threshold},
                 {"confidence_threshold", p.confidence_threshold}};
  t["round_s_to_bf16"] = true;  // the checkpoint is bf16 (docs 5)
  for (Traced* r : runs) {
    const auto& steps = traces.at(r->id);
    nlohmann::json q;
    q["id"] = r->id;
    q["prompt"] = PromptIds();
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
                                       "/tools/dgemma_fixtures/replay_canvas_trace.py " + testing::DgemmaSelfcheckDir() +
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

// How close step `s`'s decisions came to going the other way: each row's uniform draw against the edges
// of its sample's CDF interval (softmax of logits / T in double), and the entropy-bound acceptance's
// nearest tie (two rows' entropies, or a prefix sum of the sorted entropies against the bound).
double DecisionMargin(const CanvasStepTrace& s, int64_t vocab, double bound) {
  double margin = 1e30;
  const int64_t C = static_cast<int64_t>(s.input.size());
  for (int64_t r = 0; r < C; ++r) {
    const float* l = s.logits.data() + r * vocab;
    double mx = -1e300, sum = 0;
    for (int64_t j = 0; j < vocab; ++j) mx = std::max(mx, l[j] / s.temperature);
    for (int64_t j = 0; j < vocab; ++j) sum += std::exp(l[j] / s.temperature - mx);
    double cdf = 0;
    for (int64_t j = 0; j <= s.sampled[r]; ++j) {
      const double p = std::exp(l[j] / s.temperature - mx) / sum;
      if (j == s.sampled[r]) margin = std::min({margin, s.uniforms[r] - cdf, cdf + p - s.uniforms[r]});
      cdf += p;
    }
  }
  std::vector<double> h = s.entropy;
  std::sort(h.begin(), h.end());
  double prefix = 0;
  for (size_t i = 0; i < h.size(); ++i) {
    if (i + 1 < h.size()) margin = std::min(margin, h[i + 1] - h[i]);
    prefix += h[i];
    margin = std::min(margin, std::fabs(prefix - bound));
  }
  return margin;
}

// The canvas loop on the CUDA backend against the same engine on the CPU (the same seeds, so the same
// draws): every step's logits within 5e-3 (logits ~ +-30; the forward's own bound, CudaDgemma.*), and
// the same samples, acceptance, next canvases, stops, committed canvases and output tokens. A trace may
// part from the CPU's only at a step whose decision the CPU took within 1e-3 of going the other way
// (DecisionMargin: a draw at a CDF edge, tied entropies): the device's error, not a bug; the test then
// says so and compares no further. Two requests batched (ConfidenceParams) and the K = 1 history
// (StabilityParams), as the CPU tests above run them.
TEST(EngineDiffusionGemmaCanvas, GenerationsEqualTheCpusOnCuda) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "skipped: no CUDA device";
  auto cpu = Model::Load(testing::DgemmaSelfcheckDir());
  LoadOptions o;
  o.device = "cuda";
  auto gpu = Model::Load(testing::DgemmaSelfcheckDir(), o);
  const int64_t V = gpu->config().vocab_size;
  struct Run {
    std::map<std::string, std::vector<CanvasStepTrace>> traces;
    std::map<std::string, Outcome> outs;
  };
  auto generate = [&](Model* m, const CanvasSamplerParams& p, bool stability) {
    Run run;
    EngineConfig cfg;
    cfg.num_pages = 64;
    cfg.page_size = 4;
    cfg.canvas = p;
    cfg.canvas_trace = [&](const CanvasStepTrace& s) { run.traces[s.request_id].push_back(s); };
    cfg.allow_device_canvas = true;  // the verification this flag waits for
    Engine engine(m, nullptr, cfg);
    if (stability) {
      GenerationRequest r = Request("k", 21, 32, &run.outs["k"]);
      r.sampling.ignore_eos = true;
      engine.Submit(std::move(r));
    } else {
      engine.Submit(Request("a", 7, 40, &run.outs["a"]));
      engine.Submit(Request("b", 8, 20, &run.outs["b"]));
    }
    engine.RunUntilIdle();
    for (auto& [id, out] : run.outs) EXPECT_TRUE(out.finished && out.error.empty()) << id << ": " << out.error;
    return run;
  };
  for (const bool stability : {false, true}) {
    const CanvasSamplerParams p = stability ? StabilityParams() : ConfidenceParams();
    const Run c = generate(cpu.get(), p, stability), g = generate(gpu.get(), p, stability);
    for (const auto& [id, cout] : c.outs) {
      SCOPED_TRACE("request " + id);
      const std::vector<CanvasStepTrace>& ct = c.traces.at(id);
      const std::vector<CanvasStepTrace>& gt = g.traces.at(id);
      double worst = 0;
      bool parted = false;
      for (size_t i = 0; i < std::min(ct.size(), gt.size()) && !parted; ++i) {
        const CanvasStepTrace &a = ct[i], &b = gt[i];
        SCOPED_TRACE("canvas " + std::to_string(a.canvas) + " step " + std::to_string(a.step));
        ASSERT_EQ(a.input, b.input) << "the canvases diverged before this step unnoticed";
        const double diff = testing::MaxAbsDiff(b.logits.data(), a.logits.data(), a.logits.size());
        worst = std::max(worst, diff);
        if (diff > 1e-3)
          std::printf("canvas cuda %s: canvas %ld step %ld logits differ by %.3e\n", id.c_str(),
                      static_cast<long>(a.canvas), static_cast<long>(a.step), diff);
        EXPECT_EQ(a.uniforms, b.uniforms);
        const bool same = a.argmax == b.argmax && a.sampled == b.sampled && a.accepted == b.accepted &&
                          a.next == b.next && a.stop == b.stop;
        if (!same) {
          const double margin = DecisionMargin(a, V, p.entropy_bound);
          std::printf("canvas cuda %s: parts from the cpu at canvas %ld step %ld, decision margin %.2e\n", id.c_str(),
                      static_cast<long>(a.canvas), static_cast<long>(a.step), margin);
          EXPECT_LT(margin, 1e-3) << "the GPU took another decision where the CPU's was not a near tie";
          parted = true;
        }
      }
      EXPECT_LE(worst, 5e-3) << "logits of the steps compared";
      if (!parted) {
        EXPECT_EQ(ct.size(), gt.size()) << "denoising steps";
        EXPECT_EQ(g.outs.at(id).raw, cout.raw);
        EXPECT_EQ(g.outs.at(id).tokens, cout.tokens);
        EXPECT_EQ(g.outs.at(id).reason, cout.reason);
      }
      std::printf("canvas cuda %-3s %zu steps, output %zu tokens, max |logits cuda - cpu| %.3e%s\n", id.c_str(),
                  gt.size(), g.outs.at(id).tokens.size(), worst, parted ? " (parted at a near tie)" : ", same tokens");
    }
  }
}

}  // namespace
}  // namespace tessera
