// tessera engine tests: DiffusionGemma's canvas sampler rules (docs/DIFFUSION_GEMMA.md section 6) on
// hand-worked cases: the temperature schedule's ends, the row picks (entropy, argmax, inverse-CDF
// sample) of known distributions and the CPU backend's CanvasSampleRows, the
// entropy-bound acceptance (prefix, boundary, ties, the lowest row always in), re-noising, the
// stable-and-confident stop, and generation_config.json parsing with transformers' validation.
// (Replaying transformers' recorded traces needs the GPU fixtures: tools/dgemma_fixtures.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>
#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "backend/sampling.h"
#include "core/dtype.h"
#include "engine/canvas_sampler.h"
#include "expect_error.h"

namespace tessera {
namespace {

using testing::ExpectError;

TEST(CanvasSampler, TemperatureRunsFromTmaxToJustAboveTmin) {
  CanvasSamplerParams p;  // 48 steps, 0.4 .. 0.8
  EXPECT_DOUBLE_EQ(CanvasTemperature(p, 48), 0.8);
  EXPECT_DOUBLE_EQ(CanvasTemperature(p, 24), 0.6);
  EXPECT_DOUBLE_EQ(CanvasTemperature(p, 1), 0.4 + 0.4 / 48);
  p.max_denoising_steps = 4;
  p.t_min = 0.5;
  p.t_max = 1.0;
  EXPECT_DOUBLE_EQ(CanvasTemperature(p, 3), 0.875);
}

// RowArgmax equals max_element (first index of the largest) on rows of every length around its 8 lanes,
// with ties, -inf (grammar-masked) entries, and the maximum in the lanes' tail.
TEST(CanvasSampler, RowArgmaxIsTheFirstLargest) {
  std::mt19937 g(7);
  std::uniform_int_distribution<int> pick(0, 5);
  for (int64_t n = 1; n <= 40; ++n) {
    for (int trial = 0; trial < 50; ++trial) {
      std::vector<float> z(static_cast<size_t>(n));
      for (float& x : z) {
        const int k = pick(g);
        x = k == 0 ? -std::numeric_limits<float>::infinity() : static_cast<float>(k);  // many ties
      }
      ASSERT_EQ(RowArgmax(z.data(), n), std::max_element(z.begin(), z.end()) - z.begin()) << n << " " << trial;
    }
  }
  const std::vector<float> masked(20, -std::numeric_limits<float>::infinity());
  EXPECT_EQ(RowArgmax(masked.data(), 20), 0);
}

// CanvasRowReference (backend/sampling.h): what every canvas row's step reads of its processed logits.
TEST(CanvasSampler, RowPicksOfKnownDistributions) {
  auto entropy = [](const float* z, int64_t n) { return CanvasRowReference(z, n, 0.5).entropy; };
  const float uniform[8] = {3, 3, 3, 3, 3, 3, 3, 3};
  EXPECT_NEAR(entropy(uniform, 8), std::log(8.0), 1e-12);
  EXPECT_EQ(CanvasRowReference(uniform, 8, 0.5).argmax, 0);  // the lowest index among equal maxima
  EXPECT_EQ(RowArgmax(uniform, 8), 0);
  EXPECT_FLOAT_EQ(CanvasRowReference(uniform, 8, 0.5).argmax_prob, 0.125f);
  // The inverse CDF in token order: the first token whose running sum exceeds u (0.5 is exactly 4/8:
  // token 4; just below: token 3; 0: token 0).
  EXPECT_EQ(CanvasRowReference(uniform, 8, 0.5).sampled, 4);
  EXPECT_EQ(CanvasRowReference(uniform, 8, 0.4999).sampled, 3);
  EXPECT_EQ(CanvasRowReference(uniform, 8, 0.0).sampled, 0);
  // p = (1/2, 1/4, 1/4) as logits: H = 1.5 ln 2, whatever the common shift.
  const float third[3] = {static_cast<float>(std::log(0.5) + 7), static_cast<float>(std::log(0.25) + 7),
                          static_cast<float>(std::log(0.25) + 7)};
  EXPECT_NEAR(entropy(third, 3), 1.5 * std::log(2.0), 1e-6);
  EXPECT_EQ(CanvasRowReference(third, 3, 0.6).sampled, 1);
  EXPECT_EQ(CanvasRowReference(third, 3, 0.8).sampled, 2);
  const float peaked[4] = {-1000, 50, -1000, -1000};
  EXPECT_NEAR(entropy(peaked, 4), 0.0, 1e-12);
  EXPECT_EQ(CanvasRowReference(peaked, 4, 0.9).argmax, 1);
  EXPECT_EQ(CanvasRowReference(peaked, 4, 0.9).sampled, 1);
  // A grammar-masked row (-inf where not allowed): the entropy of what is left, not NaN, and never a
  // masked token, even for a draw at the very top.
  const float inf = std::numeric_limits<float>::infinity();
  const float masked[4] = {-inf, 2, -inf, 2};
  EXPECT_NEAR(entropy(masked, 4), std::log(2.0), 1e-12);
  EXPECT_EQ(CanvasRowReference(masked, 4, 0.999999).sampled, 3);
  EXPECT_EQ(CanvasRowReference(masked, 4, 0.0).sampled, 1);
  const float pinned[3] = {-inf, 0, -inf};
  EXPECT_EQ(entropy(pinned, 3), 0.0);
}

// The CPU backend's CanvasSampleRows: z = logits / t in place, the picks of z, then z rounded to bf16.
TEST(CanvasSampler, BackendRowsDivideRoundAndPick) {
  auto be = MakeCpuBackend();
  const float row0[4] = {1.0f, 3.3f, 2.0f, 3.3f}, row1[4] = {0.7f, -2.0f, 5.1f, 5.0f};
  std::vector<float> x(row0, row0 + 4);
  x.insert(x.end(), row1, row1 + 4);
  const CanvasRowRule rules[2] = {{0.4f, 0.3}, {0.7f, 0.95}};
  CanvasRowPick picks[2];
  be->CanvasSampleRows(x.data(), 2, 4, rules, true, picks);
  for (int r = 0; r < 2; ++r) {
    const float* in = r == 0 ? row0 : row1;
    float z[4];
    for (int i = 0; i < 4; ++i) z[i] = in[i] / rules[r].temperature;
    const CanvasRowPick want = CanvasRowReference(z, 4, rules[r].uniform);
    EXPECT_EQ(picks[r].argmax, want.argmax);
    EXPECT_EQ(picks[r].sampled, want.sampled);
    EXPECT_DOUBLE_EQ(picks[r].entropy, want.entropy);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(x[r * 4 + i], Bf16ToF32(F32ToBf16(z[i]))) << r << " " << i;
  }
  EXPECT_EQ(picks[0].argmax, 1);  // 3.3 twice: the first
}

TEST(CanvasSampler, AcceptsTheLowestEntropiesWithinTheBound) {
  // Sorted: 0.02 (row 2), 0.04 (row 4), 0.05 (row 1), 0.3, 0.5. Sums before each: 0, 0.02, 0.06, 0.11.
  EXPECT_EQ(AcceptByEntropyBound({0.3, 0.05, 0.02, 0.5, 0.04}, 0.1), (std::vector<uint8_t>{0, 1, 1, 0, 1}));
  // The lowest row is accepted even above the bound; the next is not.
  EXPECT_EQ(AcceptByEntropyBound({6.0, 5.0}, 0.1), (std::vector<uint8_t>{0, 1}));
  // A sum equal to the bound is within it (<=), whatever the accepted row's own entropy.
  EXPECT_EQ(AcceptByEntropyBound({0.25, 0.9, 0.25}, 0.5), (std::vector<uint8_t>{1, 1, 1}));
  EXPECT_EQ(AcceptByEntropyBound({0.25, 0.9, 0.25}, 0.49), (std::vector<uint8_t>{1, 0, 1}));
  // Equal entropies in row order.
  EXPECT_EQ(AcceptByEntropyBound({0.1, 0.1}, 0.05), (std::vector<uint8_t>{1, 0}));
  EXPECT_TRUE(AcceptByEntropyBound({}, 0.1).empty());
}

TEST(CanvasSampler, RenoiseKeepsAcceptedSamplesOnly) {
  EXPECT_EQ(RenoiseCanvas({1, 0, 1, 0}, {10, 11, 12, 13}, {20, 21, 22, 23}), (std::vector<int32_t>{10, 21, 12, 23}));
  ExpectError([] { RenoiseCanvas({1, 0}, {1}, {2, 3}); }, ErrorKind::kInvalidArgument, {"RenoiseCanvas"});
}

TEST(CanvasSampler, StopsWhenStableAndConfident) {
  CanvasSamplerParams p;
  p.stability_threshold = 1;
  p.confidence_threshold = 0.5;
  CanvasStopRule stop(p);
  const std::vector<int32_t> a = {1, 2, 3}, b = {1, 2, 4};
  EXPECT_FALSE(stop.Step(a, 0.1));  // no earlier canvas: never stable at the first step
  EXPECT_FALSE(stop.Step(b, 0.1));  // changed
  EXPECT_FALSE(stop.Step(b, 0.7));  // stable, not confident
  EXPECT_TRUE(stop.Step(b, 0.1));
  stop.Reset();  // a new canvas forgets the old one's history
  EXPECT_FALSE(stop.Step(b, 0.1));

  p.stability_threshold = 2;
  CanvasStopRule two(p);
  EXPECT_FALSE(two.Step(a, 0.1));
  EXPECT_FALSE(two.Step(a, 0.1));  // one equal canvas before it, two needed
  EXPECT_TRUE(two.Step(a, 0.1));
  EXPECT_FALSE(two.Step(b, 0.1));

  p.stability_threshold = 0;  // confidence alone
  CanvasStopRule none(p);
  EXPECT_TRUE(none.Step(a, 0.1));
  EXPECT_FALSE(none.Step(a, 0.5));  // strictly below the threshold
}

TEST(CanvasSampler, GenerationConfigKnobs) {
  const std::string where = "generation_config.json";
  CanvasSamplerParams d = CanvasSamplerParams::FromGenerationConfig(nlohmann::json::object(), where);
  EXPECT_EQ(d.max_denoising_steps, 48);
  EXPECT_DOUBLE_EQ(d.entropy_bound, 0.1);
  EXPECT_DOUBLE_EQ(d.t_min, 0.4);
  EXPECT_DOUBLE_EQ(d.t_max, 0.8);
  EXPECT_EQ(d.stability_threshold, 1);
  EXPECT_DOUBLE_EQ(d.confidence_threshold, 0.005);

  const auto gen = nlohmann::json::parse(R"({"max_denoising_steps": 16, "t_min": 0.3, "t_max": 1.2,
      "stability_threshold": 2, "confidence_threshold": 0.01, "eos_token_id": [1, 106, 50],
      "sampler_config": {"entropy_bound": 0.5, "_cls_name": "EntropyBoundSamplerConfig"}})");
  const CanvasSamplerParams p = CanvasSamplerParams::FromGenerationConfig(gen, where);
  EXPECT_EQ(p.max_denoising_steps, 16);
  EXPECT_DOUBLE_EQ(p.entropy_bound, 0.5);
  EXPECT_DOUBLE_EQ(p.t_min, 0.3);
  EXPECT_DOUBLE_EQ(p.t_max, 1.2);
  EXPECT_EQ(p.stability_threshold, 2);
  EXPECT_DOUBLE_EQ(p.confidence_threshold, 0.01);

  auto bad = [&](const char* text) {
    return [text, where] { CanvasSamplerParams::FromGenerationConfig(nlohmann::json::parse(text), where); };
  };
  ExpectError(bad(R"({"t_min": 0.8, "t_max": 0.8})"), ErrorKind::kInvalidArgument, {where, "t_min"});
  ExpectError(bad(R"({"max_denoising_steps": 0})"), ErrorKind::kInvalidArgument, {"max_denoising_steps"});
  ExpectError(bad(R"({"max_denoising_steps": 4.5})"), ErrorKind::kCorrupt, {"max_denoising_steps"});
  ExpectError(bad(R"({"stability_threshold": -1})"), ErrorKind::kInvalidArgument, {"stability_threshold"});
  ExpectError(bad(R"({"confidence_threshold": 0})"), ErrorKind::kInvalidArgument, {"confidence_threshold"});
  ExpectError(bad(R"({"sampler_config": {"entropy_bound": 0}})"), ErrorKind::kInvalidArgument, {"entropy_bound"});
  ExpectError(bad(R"({"sampler_config": {"entropy_bound": 0.1, "_cls_name": "TopKSamplerConfig"}})"),
              ErrorKind::kUnsupported, {"sampler_config", "TopKSamplerConfig"});
}

}  // namespace
}  // namespace tessera
