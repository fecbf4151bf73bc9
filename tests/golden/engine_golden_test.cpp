// tessera tests: the engine against the HF references: greedy continuations through the
// scheduler, the diffusion fixtures' outputs and step traces, the fused-commit / no-recompute
// counters, batching invariance (64 concurrent requests), preemption, cancellation and bad input;
// the diffusion cases also on the GPU when one is present.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>

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

using tessera::testing::MakeCollectingRequest;
using tessera::testing::Outcome;

std::vector<int32_t> Ids(const json& j) { return j.get<std::vector<int32_t>>(); }

class EngineAutoregressive : public ::testing::TestWithParam<std::string> {};

TEST_P(EngineAutoregressive, GreedyContinuationMatchesReference) {
  const std::string dir = DataPath("fixtures/models/" + GetParam());
  json ref = ReadJson(dir + "/reference.json");
  auto model = Model::Load(dir);
  EngineConfig ec;
  ec.page_size = 4;  // many page boundaries inside 31 positions
  Engine engine(model.get(), nullptr, ec);
  Outcome out;
  auto req = MakeCollectingRequest(Ids(ref["short_ids"]), 24, &out);
  // The reference generated exactly 24 tokens with eos suppressed (HF min_new_tokens).
  req.sampling.min_tokens = 24;
  engine.Submit(std::move(req));
  engine.RunUntilIdle();
  ASSERT_TRUE(out.finished) << out.error;
  EXPECT_EQ(out.tokens, Ids(ref["greedy_continuation"]));
  EXPECT_EQ(out.reason, FinishReason::kLength);
  EXPECT_EQ(engine.Snapshot().kv_pages_used, 0);
}

TEST_P(EngineAutoregressive, SixtyFourConcurrentRequestsEqualEachAlone) {
  const std::string dir = DataPath("fixtures/models/" + GetParam());
  auto model = Model::Load(dir);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 64; ++i) {
    std::vector<int32_t> p;
    for (int j = 0; j < 3 + (i * 7) % 29; ++j) p.push_back((i * 131 + j * 17 + 5) % 500);
    prompts.push_back(p);
  }
  std::vector<std::vector<int32_t>> alone(64);
  {
    EngineConfig ec;
    ec.max_num_seqs = 1;
    Engine engine(model.get(), nullptr, ec);
    for (int i = 0; i < 64; ++i) {
      Outcome out;
      auto req = MakeCollectingRequest(prompts[i], 12, &out);
      req.sampling.ignore_eos = true;
      engine.Submit(std::move(req));
      engine.RunUntilIdle();
      alone[i] = out.tokens;
    }
  }
  EngineConfig ec;
  ec.max_num_seqs = 64;
  ec.max_num_batched_tokens = 256;  // forces chunked prefills mixed with decodes
  Engine engine(model.get(), nullptr, ec);
  std::vector<Outcome> outs(64);
  for (int i = 0; i < 64; ++i) {
    auto req = MakeCollectingRequest(prompts[i], 12, &outs[i]);
    req.sampling.ignore_eos = true;
    engine.Submit(std::move(req));
  }
  engine.RunUntilIdle();
  for (int i = 0; i < 64; ++i) EXPECT_EQ(outs[i].tokens, alone[i]) << "request " << i;
  EXPECT_LT(engine.total_forwards(), 64 * 12) << "requests were not batched together";
  EXPECT_EQ(engine.Snapshot().kv_pages_used, 0);
}

TEST_P(EngineAutoregressive, PreemptionUnderPagePressureKeepsResults) {
  const std::string dir = DataPath("fixtures/models/" + GetParam());
  json ref = ReadJson(dir + "/reference.json");
  auto model = Model::Load(dir);
  EngineConfig ec;
  ec.page_size = 4;
  ec.num_pages = 12;  // 48 positions: three 31-position requests cannot all fit
  ec.max_model_len = 40;
  Engine engine(model.get(), nullptr, ec);
  std::vector<Outcome> outs(3);
  for (auto& o : outs) {
    auto req = MakeCollectingRequest(Ids(ref["short_ids"]), 24, &o);
    req.sampling.min_tokens = 24;
    engine.Submit(std::move(req));
  }
  engine.RunUntilIdle();
  for (auto& o : outs) {
    ASSERT_TRUE(o.finished);
    EXPECT_EQ(o.error, "");
    EXPECT_EQ(o.tokens, Ids(ref["greedy_continuation"]));
  }
  EXPECT_EQ(engine.Snapshot().kv_pages_used, 0);
}

INSTANTIATE_TEST_SUITE_P(Families, EngineAutoregressive, ::testing::Values("qwen3_moe", "qwen3_next", "qwen3_5_moe"));

class EngineDiffusion : public ::testing::TestWithParam<std::string> {};

DiffusionParams CaseParams(const json& c, int32_t mask) {
  DiffusionParams p;
  p.block_size = c["block"].get<int64_t>();
  p.steps = c["steps"].get<int64_t>();
  p.policy = c["policy"] == "static" ? DiffusionPolicy::kStatic : DiffusionPolicy::kThreshold;
  if (!c["threshold"].is_null()) p.threshold = c["threshold"].get<float>();
  p.mask_token_id = mask;
  return p;
}

// Same unmasked positions and tokens; confidences within conf_tol (1e-4 on the CPU).
// Whether the run's trace is the reference's: the same steps, positions and tokens, confidences within
// conf_tol. *first_diff: the first step that differs (steps.size() when none); *deviation: the largest
// |confidence - reference| over the matching steps' unmasked positions.
bool TraceMatches(const json& ref_trace, const std::vector<DiffusionStepView>& steps, double conf_tol,
                  size_t* first_diff, double* deviation) {
  *deviation = 0;
  for (size_t i = 0; i < std::min(steps.size(), ref_trace.size()); ++i) {
    const json& r = ref_trace[i];
    const auto& s = steps[i];
    *first_diff = i;
    if (s.block_start != r["block_start"].get<int64_t>() || s.step != r["step"].get<int64_t>() ||
        s.unmasked != r["unmasked"].get<std::vector<int64_t>>())
      return false;
    auto toks = r["tokens"].get<std::vector<int32_t>>();
    auto confs = r["conf"].get<std::vector<float>>();
    for (size_t j = 0; j < s.unmasked.size(); ++j) {
      const double d = std::fabs(double(s.conf[j]) - confs[j]);
      if (s.block_tokens[s.unmasked[j] - s.block_start] != toks[j] || !(d <= conf_tol)) return false;
      *deviation = std::max(*deviation, d);
    }
  }
  *first_diff = std::min(steps.size(), ref_trace.size());
  return steps.size() == ref_trace.size();
}

void ExpectTraceEqual(const json& ref_trace, const std::vector<DiffusionStepView>& steps, const std::string& what,
                      double conf_tol = 1e-4) {
  ASSERT_EQ(steps.size(), ref_trace.size()) << what;
  for (size_t i = 0; i < steps.size(); ++i) {
    const json& r = ref_trace[i];
    const auto& s = steps[i];
    EXPECT_EQ(s.block_start, r["block_start"].get<int64_t>()) << what << " step " << i;
    EXPECT_EQ(s.step, r["step"].get<int64_t>()) << what << " step " << i;
    ASSERT_EQ(s.unmasked, r["unmasked"].get<std::vector<int64_t>>()) << what << " step " << i;
    auto toks = r["tokens"].get<std::vector<int32_t>>();
    auto confs = r["conf"].get<std::vector<float>>();
    for (size_t j = 0; j < s.unmasked.size(); ++j) {
      EXPECT_EQ(s.block_tokens[s.unmasked[j] - s.block_start], toks[j]) << what << " step " << i;
      EXPECT_NEAR(s.conf[j], confs[j], conf_tol) << what << " step " << i;
    }
  }
}

// Every diffusion case of the fixture through the engine on `device`: the HF reference's output and
// step trace (confidences within conf_tol), and the fused-commit / no-recompute counters.
void RunDiffusionCases(const std::string& fam, const std::string& device, double conf_tol) {
  json ref = ReadJson(DataPath("fixtures/diffusion/" + fam + "/reference.json"));
  LoadOptions lo;
  lo.device = device;
  auto model = Model::Load(DataPath("fixtures/models/" + fam), lo);
  const int32_t mask = ref["mask_token_id"].get<int32_t>();
  for (const json& c : ref["cases"]) {
    std::string what = fam + " block " + c["block"].dump() + " steps " + c["steps"].dump() + " " +
                       c["policy"].get<std::string>();
    EngineConfig ec;
    ec.force_diffusion = true;
    ec.page_size = 4;
    Engine engine(model.get(), nullptr, ec);
    Outcome out;
    auto req = MakeCollectingRequest(Ids(ref["prompt"]), c["max_new_tokens"].get<int64_t>(), &out);
    req.diffusion = CaseParams(c, mask);
    req.emit_steps = true;
    engine.Submit(std::move(req));
    engine.RunUntilIdle();
    ASSERT_TRUE(out.finished) << out.error;
    // Issue 32: the run's smallest decision margin (DiffusionStepView::decision_margin: how close an
    // unmasking decision came to going the other way) against this device's confidence error
    // (conf_tol). A trace that differs from the reference is explained only when a decision up to
    // the first differing step was closer than that error (rounding picked the other side); any
    // other difference is a bug and fails with the whole comparison.
    size_t first_diff = 0;
    double deviation = 0;
    const bool same = TraceMatches(c["trace"], out.steps, conf_tol, &first_diff, &deviation);
    double margin = INFINITY;
    for (size_t i = 0; i < out.steps.size() && i <= first_diff; ++i)
      margin = std::min<double>(margin, out.steps[i].decision_margin);
    std::printf("diffusion %s %s: %s; smallest decision margin %.3e, largest confidence deviation %.3e\n",
                device.c_str(), what.c_str(), same ? "trace identical" : "trace differs", margin, deviation);
    if (!same && margin < conf_tol) {
      std::printf("  explained: step %zu's decision margin is below the device's error %.1e\n", first_diff, conf_tol);
      continue;
    }
    EXPECT_EQ(out.raw, Ids(c["output"])) << what;
    ExpectTraceEqual(c["trace"], out.steps, what, conf_tol);

    // Counters: commit is fused (forwards = steps run, no extra forward per block) and a denoising
    // step never recomputes the prefix: rows = one block per forward + each committed position once.
    const int64_t b = c["block"].get<int64_t>();
    int64_t steps_total = 0;
    for (int64_t s : out.stats.steps_per_block) steps_total += s;
    EXPECT_EQ(out.stats.forwards, steps_total) << what;
    EXPECT_EQ(engine.total_forwards(), steps_total) << what;
    const int64_t prompt_len = static_cast<int64_t>(ref["prompt"].size());
    const int64_t blocks = static_cast<int64_t>(out.stats.steps_per_block.size());
    const int64_t committed = (prompt_len / b) * b + (blocks - 1) * b;
    EXPECT_EQ(engine.total_rows(), steps_total * b + committed) << what;
  }
}

TEST_P(EngineDiffusion, CasesReproduceOutputAndTrace) { RunDiffusionCases(GetParam(), "cpu", 1e-4); }

// The same cases on the GPU (issue 5: the diffusion fixtures' outputs identical): every op, the
// attention kernels and the tokens and confidences drawn on the device. Confidences within 2e-3:
// the GPU's logits differ from the CPU's by up to ~5e-4.
TEST_P(EngineDiffusion, CasesReproduceOutputAndTraceOnCuda) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "skipped: no CUDA device";
  RunDiffusionCases(GetParam(), "cuda", 2e-3);
}

TEST_P(EngineDiffusion, SixtyFourConcurrentRequestsEqualEachAlone) {
  const std::string fam = GetParam();
  auto model = Model::Load(DataPath("fixtures/models/" + fam));
  DiffusionParams p;
  p.block_size = 4;
  p.steps = 2;
  p.policy = DiffusionPolicy::kThreshold;
  p.threshold = 0.02f;
  p.mask_token_id = 511;
  auto prompt = [](int i) {
    std::vector<int32_t> v;
    for (int j = 0; j < 2 + (i * 5) % 19; ++j) v.push_back((i * 37 + j * 11 + 3) % 500);
    return v;
  };
  std::vector<std::vector<int32_t>> alone(64);
  {
    EngineConfig ec;
    ec.force_diffusion = true;
    Engine engine(model.get(), nullptr, ec);
    for (int i = 0; i < 64; ++i) {
      Outcome out;
      auto req = MakeCollectingRequest(prompt(i), 10, &out);
      req.diffusion = p;
      engine.Submit(std::move(req));
      engine.RunUntilIdle();
      alone[i] = out.raw;
    }
  }
  EngineConfig ec;
  ec.force_diffusion = true;
  ec.max_num_seqs = 64;
  Engine engine(model.get(), nullptr, ec);
  std::vector<Outcome> outs(64);
  for (int i = 0; i < 64; ++i) {
    auto req = MakeCollectingRequest(prompt(i), 10, &outs[i]);
    req.diffusion = p;
    engine.Submit(std::move(req));
  }
  engine.RunUntilIdle();
  for (int i = 0; i < 64; ++i) EXPECT_EQ(outs[i].raw, alone[i]) << "request " << i;
  EXPECT_EQ(engine.Snapshot().kv_pages_used, 0);
}

TEST_P(EngineDiffusion, SeededSamplingReproducesAndSeedsDiffer) {
  const std::string fam = GetParam();
  auto model = Model::Load(DataPath("fixtures/models/" + fam));
  auto run = [&](uint64_t seed) {
    EngineConfig ec;
    ec.force_diffusion = true;
    Engine engine(model.get(), nullptr, ec);
    Outcome out;
    auto req = MakeCollectingRequest({500, 94, 275, 158, 96}, 16, &out);
    req.sampling.temperature = 1.0f;
    req.sampling.seed = seed;
    DiffusionParams p;
    p.block_size = 8;
    p.steps = 4;
    p.mask_token_id = 511;
    req.diffusion = p;
    engine.Submit(std::move(req));
    engine.RunUntilIdle();
    return out.raw;
  };
  EXPECT_EQ(run(1), run(1));
  EXPECT_NE(run(1), run(2));
}

TEST_P(EngineDiffusion, EditingPolicyIsBoundedAndStillCompletesBlocks) {
  const std::string fam = GetParam();
  auto model = Model::Load(DataPath("fixtures/models/" + fam));
  EngineConfig ec;
  ec.force_diffusion = true;
  Engine engine(model.get(), nullptr, ec);
  Outcome out;
  auto req = MakeCollectingRequest({500, 94, 275, 158, 96}, 16, &out);
  DiffusionParams p;
  p.block_size = 8;
  p.steps = 4;
  p.policy = DiffusionPolicy::kEditing;
  p.threshold = 0.5f;
  p.edit_threshold = 1e-6f;  // every changed argmax is taken: edits happen
  p.max_edit_steps = 2;
  p.mask_token_id = 511;
  req.diffusion = p;
  req.emit_steps = true;
  engine.Submit(std::move(req));
  engine.RunUntilIdle();
  ASSERT_TRUE(out.finished) << out.error;
  EXPECT_EQ(out.raw.size() % 8, 3u);  // prompt of 5 + output ends on a block boundary
  for (int64_t s : out.stats.steps_per_block) EXPECT_LE(s, 8 + 2);
  for (int32_t t : out.raw) EXPECT_NE(t, 511);
}

INSTANTIATE_TEST_SUITE_P(Families, EngineDiffusion, ::testing::Values("qwen3_moe", "qwen3_5_moe"));

TEST(EngineValidation, BadRequestsAreErrorsAndTheEngineKeepsServing) {
  auto model = Model::Load(DataPath("fixtures/models/qwen3_moe"));
  EngineConfig ec;
  ec.force_diffusion = true;
  ec.max_model_len = 64;
  Engine engine(model.get(), nullptr, ec);
  auto diffusion = [](int64_t block, int64_t steps, float threshold, int32_t mask) {
    DiffusionParams p;
    p.block_size = block;
    p.steps = steps;
    p.threshold = threshold;
    p.mask_token_id = mask;
    return p;
  };
  struct Case {
    std::vector<int32_t> prompt;
    std::optional<DiffusionParams> d;
    std::string expect;
  };
  std::vector<Case> cases = {
      {{1, 2}, diffusion(0, 4, 0.5f, 511), "block size"},
      {{1, 2}, diffusion(65, 4, 0.5f, 511), "block size"},
      {{1, 2}, diffusion(4, 0, 0.5f, 511), "steps"},
      {{1, 2}, diffusion(4, 4, 0.0f, 511), "threshold"},
      {{1, 2}, diffusion(4, 4, 1.5f, 511), "threshold"},
      {{1, 2}, diffusion(4, 4, 0.5f, 512), "mask token"},
      {{1, 600}, diffusion(4, 4, 0.5f, 511), "out of range"},
      {{}, diffusion(4, 4, 0.5f, 511), "empty"},
      {std::vector<int32_t>(64, 3), diffusion(4, 4, 0.5f, 511), "max_model_len"},
      {{1, 2}, std::nullopt, "diffusion"},
  };
  for (const auto& c : cases) {
    Outcome out;
    auto req = MakeCollectingRequest(c.prompt, 8, &out);
    req.diffusion = c.d;
    engine.Submit(std::move(req));
    engine.RunUntilIdle();
    ASSERT_TRUE(out.finished);
    EXPECT_NE(out.error.find(c.expect), std::string::npos) << "expected '" << c.expect << "' in: " << out.error;
  }
  Outcome ok;
  auto req = MakeCollectingRequest({1, 2, 3}, 8, &ok);
  req.sampling.ignore_eos = true;
  req.diffusion = diffusion(4, 4, 0.5f, 511);
  engine.Submit(std::move(req));
  engine.RunUntilIdle();
  EXPECT_EQ(ok.error, "");
  EXPECT_EQ(ok.raw.size(), 9u);  // 3 prompt tokens, blocks of 4 up to >= 8 new: 12 - 3
}

TEST(EngineCancellation, CancelledRequestFreesItsPages) {
  auto model = Model::Load(DataPath("fixtures/models/qwen3_5_moe"));
  EngineConfig ec;
  ec.page_size = 4;
  Engine engine(model.get(), nullptr, ec);
  Outcome out;
  auto req = MakeCollectingRequest({1, 2, 3, 4, 5, 6, 7, 8, 9}, 1000, &out);
  req.sampling.ignore_eos = true;
  auto flag = req.cancelled;
  engine.Submit(std::move(req));
  for (int i = 0; i < 5; ++i) engine.Step();
  EXPECT_GT(engine.Snapshot().kv_pages_used, 0);
  // The hybrid model's sequence holds a recurrent-state slot too (what /metrics shows as
  // tessera_state_slots_used): the cancellation must give it back, or max_num_seqs of such
  // cancellations would leave no slot to admit anyone.
  EXPECT_EQ(engine.Snapshot().state_slots_used, 1);
  EXPECT_EQ(engine.Snapshot().state_slots_total, ec.max_num_seqs);
  flag->store(true);
  engine.Step();
  EXPECT_TRUE(out.finished);
  EXPECT_EQ(out.reason, FinishReason::kCancelled);
  EXPECT_EQ(engine.Snapshot().kv_pages_used, 0);
  EXPECT_EQ(engine.Snapshot().state_slots_used, 0);
  // A request that finishes gives its slot back as well.
  Outcome done;
  engine.Submit(MakeCollectingRequest({1, 2, 3}, 4, &done));
  engine.RunUntilIdle();
  EXPECT_TRUE(done.finished);
  EXPECT_EQ(engine.Snapshot().state_slots_used, 0);
}

}  // namespace
}  // namespace tessera
