// tessera tests: the load generator's workload: length sampling bounds, prompts of exactly the
// requested token count with a shared prefix, request bodies, and the arrival process (Poisson:
// mean gap 1/rate and coefficient of variation 1; gamma shape k: CV 1/sqrt(k)).
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "expect_error.h"
#include "loadgen/workload.h"

namespace tessera::loadgen {
namespace {

using json = nlohmann::json;

TEST(LoadgenWorkload, LengthsStayInRange) {
  auto l = SampleLengths(100, 0.5, 5000, 1, 7);  // uniform integers in [50, 150]
  std::set<int64_t> seen(l.begin(), l.end());
  EXPECT_EQ(*seen.begin(), 50);
  EXPECT_EQ(*seen.rbegin(), 150);
  double mean = 0;
  for (auto v : l) mean += static_cast<double>(v) / l.size();
  EXPECT_NEAR(mean, 100.0, 2.0);
  auto fixed = SampleLengths(64, 0.0, 10, 1, 7);
  for (auto v : fixed) EXPECT_EQ(v, 64);
  auto tiny = SampleLengths(1, 0.9, 50, 1, 7);  // [0, 1] clamped to at least 1
  for (auto v : tiny) EXPECT_EQ(v, 1);
  testing::ExpectError([] { SampleLengths(10, 1.0, 1, 1, 0); }, ErrorKind::kInvalidArgument, {"random-range-ratio"});
}

TEST(LoadgenWorkload, CompletionPromptsHaveExactTokenCounts) {
  WorkloadSpec spec;
  spec.model = "m";
  spec.input_len = 40;
  spec.output_len = 8;
  spec.range_ratio = 0.25;
  spec.prefix_len = 16;
  auto reqs = MakeRequests(spec, 20, 3);
  ASSERT_EQ(reqs.size(), 20u);
  std::vector<json> prefix;
  for (const auto& r : reqs) {
    json b = json::parse(r.body);
    EXPECT_EQ(b["model"], "m");
    ASSERT_TRUE(b["prompt"].is_array());
    EXPECT_EQ(static_cast<int64_t>(b["prompt"].size()), r.prompt_len);
    EXPECT_GE(r.prompt_len, 16 + 30);
    EXPECT_LE(r.prompt_len, 16 + 50);
    EXPECT_EQ(b["max_tokens"], r.max_tokens);
    EXPECT_GE(r.max_tokens, 6);
    EXPECT_LE(r.max_tokens, 10);
    for (const auto& id : b["prompt"]) {
      EXPECT_GE(id.get<int>(), 10);
      EXPECT_LE(id.get<int>(), 250);
    }
    std::vector<json> p(b["prompt"].begin(), b["prompt"].begin() + 16);
    if (prefix.empty()) prefix = p;
    EXPECT_EQ(p, prefix);  // the shared prefix
    EXPECT_EQ(b["stream"], true);
    EXPECT_EQ(b["stream_options"]["include_usage"], true);
    EXPECT_EQ(b["ignore_eos"], true);
    EXPECT_EQ(b["temperature"], 0.0);
  }
  // Distinct suffixes, deterministic per seed.
  EXPECT_NE(json::parse(reqs[0].body)["prompt"], json::parse(reqs[1].body)["prompt"]);
  EXPECT_EQ(MakeRequests(spec, 20, 3)[5].body, reqs[5].body);
  EXPECT_NE(MakeRequests(spec, 20, 4)[5].body, reqs[5].body);
}

TEST(LoadgenWorkload, ChatBodiesAndOptions) {
  WorkloadSpec spec;
  spec.endpoint = Endpoint::kChat;
  spec.input_len = 12;
  spec.output_len = 5;
  spec.stream = false;
  spec.ignore_eos = false;
  spec.vocab_size = 1000;
  spec.extra_body = {{"top_k", 1}};
  auto reqs = MakeRequests(spec, 3, 1);
  for (const auto& r : reqs) {
    json b = json::parse(r.body);
    EXPECT_FALSE(b.contains("model"));  // none given
    ASSERT_EQ(b["messages"].size(), 1u);
    EXPECT_EQ(b["messages"][0]["role"], "user");
    std::string text = b["messages"][0]["content"];
    EXPECT_EQ(std::count(text.begin(), text.end(), ' '), 11);  // 12 words
    EXPECT_EQ(b["max_completion_tokens"], 5);
    EXPECT_EQ(b["stream"], false);
    EXPECT_FALSE(b.contains("stream_options"));  // OpenAI rejects it without stream
    EXPECT_FALSE(b.contains("ignore_eos"));
    EXPECT_EQ(b["top_k"], 1);
  }
  WorkloadSpec bad;
  bad.vocab_size = 5;
  testing::ExpectError([&] { MakeRequests(bad, 1, 0); }, ErrorKind::kInvalidArgument, {"vocab-size"});
  bad = WorkloadSpec{};
  bad.output_len = 0;
  testing::ExpectError([&] { MakeRequests(bad, 1, 0); }, ErrorKind::kInvalidArgument, {"output-len"});
}

void GapStats(const std::vector<double>& t, double& mean, double& cv) {
  std::vector<double> gaps;
  for (size_t i = 1; i < t.size(); ++i) gaps.push_back(t[i] - t[i - 1]);
  mean = 0;
  for (double g : gaps) mean += g / gaps.size();
  double var = 0;
  for (double g : gaps) var += (g - mean) * (g - mean) / gaps.size();
  cv = std::sqrt(var) / mean;
}

TEST(LoadgenWorkload, PoissonArrivals) {
  // 20000 exponential gaps: the sample mean's relative standard error is 1/sqrt(20000) = 0.7%,
  // so 3% is over 4 standard errors.
  auto t = ArrivalTimes(20001, 8.0, 1.0, 42);
  EXPECT_DOUBLE_EQ(t[0], 0.0);
  for (size_t i = 1; i < t.size(); ++i) ASSERT_GE(t[i], t[i - 1]);
  double mean = 0, cv = 0;
  GapStats(t, mean, cv);
  EXPECT_NEAR(mean, 1.0 / 8.0, 0.03 / 8.0);
  EXPECT_NEAR(cv, 1.0, 0.05);  // exponential: std = mean
  auto g = ArrivalTimes(20001, 8.0, 4.0, 42);  // gamma shape 4: same mean, CV 1/2
  GapStats(g, mean, cv);
  EXPECT_NEAR(mean, 1.0 / 8.0, 0.03 / 8.0);
  EXPECT_NEAR(cv, 0.5, 0.03);
  EXPECT_EQ(ArrivalTimes(50, 8.0, 1.0, 42), ArrivalTimes(50, 8.0, 1.0, 42));
  for (double v : ArrivalTimes(10, kInfiniteRate, 1.0, 1)) EXPECT_EQ(v, 0.0);
  testing::ExpectError([] { ArrivalTimes(3, 0.0, 1.0, 1); }, ErrorKind::kInvalidArgument, {"request-rate"});
}

}  // namespace
}  // namespace tessera::loadgen
