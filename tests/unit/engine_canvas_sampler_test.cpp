// tessera engine tests: DiffusionGemma's canvas sampler rules (docs/DIFFUSION_GEMMA.md section 6) on
// hand-worked cases: the temperature schedule's ends, entropy of known distributions, the
// entropy-bound acceptance (prefix, boundary, ties, the lowest row always in), re-noising, the
// stable-and-confident stop, and generation_config.json parsing with transformers' validation.
// (Replaying transformers' recorded traces needs the GPU fixtures: tools/dgemma_fixtures.)
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

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

TEST(CanvasSampler, RowEntropyAndArgmax) {
  const float uniform[8] = {3, 3, 3, 3, 3, 3, 3, 3};
  EXPECT_NEAR(RowEntropy(uniform, 8), std::log(8.0), 1e-12);
  EXPECT_EQ(RowArgmax(uniform, 8), 0);  // the lowest index among equal maxima
  // p = (1/2, 1/4, 1/4) as logits: H = 1.5 ln 2, whatever the common shift.
  const float third[3] = {static_cast<float>(std::log(0.5) + 7), static_cast<float>(std::log(0.25) + 7),
                          static_cast<float>(std::log(0.25) + 7)};
  EXPECT_NEAR(RowEntropy(third, 3), 1.5 * std::log(2.0), 1e-6);
  const float peaked[4] = {-1000, 50, -1000, -1000};
  EXPECT_NEAR(RowEntropy(peaked, 4), 0.0, 1e-12);
  EXPECT_EQ(RowArgmax(peaked, 4), 1);
  // A grammar-masked row (-inf where not allowed): the entropy of what is left, not NaN.
  const float inf = std::numeric_limits<float>::infinity();
  const float masked[4] = {-inf, 2, -inf, 2};
  EXPECT_NEAR(RowEntropy(masked, 4), std::log(2.0), 1e-12);
  const float pinned[3] = {-inf, 0, -inf};
  EXPECT_EQ(RowEntropy(pinned, 3), 0.0);
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
