// tessera tests: the engine's scheduling policies (fcfs, shortest-prompt-first, priority with
// vLLM's convention: lower runs first, ties by arrival), which request preemption picks under
// each, and the cumulative per-(layer, expert) routed-token counts of the snapshot.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <numeric>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "model/model.h"
#include "test_util.h"

namespace tessera {
namespace {

using nlohmann::json;
using tessera::testing::DataPath;

struct Finished {
  std::vector<std::string> order;  // request ids in the order they finished
  std::map<std::string, std::vector<int32_t>> tokens;
  std::map<std::string, std::string> errors;
};

GenerationRequest MakeRequest(const std::string& id, std::vector<int32_t> prompt, int64_t max_tokens, int priority,
                              Finished* log) {
  GenerationRequest r;
  r.id = id;
  r.prompt = std::move(prompt);
  r.sampling.temperature = 0;
  r.sampling.max_tokens = max_tokens;
  r.sampling.min_tokens = max_tokens;
  r.priority = priority;
  r.on_event = [log, id](const GenerationEvent& ev) {
    if (ev.kind == GenerationEvent::Kind::kTokens)
      log->tokens[id].insert(log->tokens[id].end(), ev.tokens.begin(), ev.tokens.end());
    if (ev.kind == GenerationEvent::Kind::kFinished) log->order.push_back(id);
    if (ev.kind == GenerationEvent::Kind::kError) log->errors[id] = ev.error;
  };
  return r;
}

std::vector<std::string> RunOneAtATime(Model* model, SchedulingPolicy policy) {
  EngineConfig ec;
  ec.max_num_seqs = 1;  // one request at a time: the finish order is the admission order
  ec.num_pages = 16;
  ec.policy = policy;
  Engine engine(model, nullptr, ec);
  Finished log;
  // Submitted together, so all of them wait when the first step admits one.
  engine.Submit(MakeRequest("a", {5, 6, 7, 8, 9}, 2, 2, &log));
  engine.Submit(MakeRequest("b", {5, 6, 7}, 2, 0, &log));
  engine.Submit(MakeRequest("c", {5, 6, 7, 8, 9, 10, 11, 12, 13}, 2, 1, &log));
  engine.Submit(MakeRequest("d", {9, 8, 7}, 2, 0, &log));
  engine.Submit(MakeRequest("e", {1, 2, 3, 4}, 2, -3, &log));
  engine.RunUntilIdle();
  EXPECT_TRUE(log.errors.empty());
  return log.order;
}

TEST(EngineScheduling, PoliciesOrderAdmission) {
  auto model = Model::Load(DataPath("fixtures/models/qwen3_moe"));
  using V = std::vector<std::string>;
  EXPECT_EQ(RunOneAtATime(model.get(), SchedulingPolicy::kFcfs), (V{"a", "b", "c", "d", "e"}));
  // Prompt lengths 5, 3, 9, 3, 4: shortest first, equal lengths by arrival.
  EXPECT_EQ(RunOneAtATime(model.get(), SchedulingPolicy::kShortestPromptFirst), (V{"b", "d", "e", "a", "c"}));
  // Priorities 2, 0, 1, 0, -3: lowest value first, equal priorities by arrival.
  EXPECT_EQ(RunOneAtATime(model.get(), SchedulingPolicy::kPriority), (V{"e", "b", "d", "c", "a"}));
}

// A low-priority request runs; a high-priority one arrives; together they need more pages than
// the pool has. Under kPriority the low-priority one is preempted (and recomputed later), under
// fcfs the later arrival is. Both still produce the HF reference continuation.
std::vector<std::string> RunUnderPressure(Model* model, SchedulingPolicy policy) {
  json ref = json::parse(std::ifstream(DataPath("fixtures/models/qwen3_moe/reference.json")));
  const auto prompt = ref["short_ids"].get<std::vector<int32_t>>();
  const auto expected = ref["greedy_continuation"].get<std::vector<int32_t>>();
  EngineConfig ec;
  ec.page_size = 4;
  ec.num_pages = 10;  // 40 positions: two 31-position requests cannot both finish in place
  ec.max_model_len = 40;
  ec.policy = policy;
  ec.enable_prefix_caching = false;
  Engine engine(model, nullptr, ec);
  Finished log;
  engine.Submit(MakeRequest("low", prompt, 24, 5, &log));
  for (int i = 0; i < 6; ++i) engine.Step();
  engine.Submit(MakeRequest("high", prompt, 24, 0, &log));
  engine.RunUntilIdle();
  EXPECT_TRUE(log.errors.empty());
  EXPECT_EQ(log.tokens["low"], expected);
  EXPECT_EQ(log.tokens["high"], expected);
  EXPECT_EQ(engine.Snapshot().kv_pages_used, 0);
  return log.order;
}

TEST(EngineScheduling, PreemptionFollowsThePolicy) {
  auto model = Model::Load(DataPath("fixtures/models/qwen3_moe"));
  using V = std::vector<std::string>;
  EXPECT_EQ(RunUnderPressure(model.get(), SchedulingPolicy::kPriority), (V{"high", "low"}));
  EXPECT_EQ(RunUnderPressure(model.get(), SchedulingPolicy::kFcfs), (V{"low", "high"}));
}

class EngineExpertStats : public ::testing::TestWithParam<std::string> {};

TEST_P(EngineExpertStats, RoutedTokensPerExpertAddUpToRowsTimesTopK) {
  auto model = Model::Load(DataPath("fixtures/models/" + GetParam()));
  const ModelConfig& mc = model->config();
  EngineConfig ec;
  ec.page_size = 4;
  ec.num_pages = 32;
  {
    Engine engine(model.get(), nullptr, ec);
    EXPECT_TRUE(engine.Snapshot().expert_routed_tokens.empty()) << "collected without collect_expert_stats";
  }
  ec.collect_expert_stats = true;
  Engine engine(model.get(), nullptr, ec);
  ASSERT_EQ(engine.Snapshot().expert_routed_tokens.size(), static_cast<size_t>(mc.num_layers * mc.num_experts));
  Finished log;
  engine.Submit(MakeRequest("x", {3, 1, 4, 1, 5, 9, 2, 6, 5, 3}, 6, 0, &log));
  engine.Submit(MakeRequest("y", {2, 7, 1, 8}, 4, 0, &log));
  engine.RunUntilIdle();
  const auto counts = engine.Snapshot().expert_routed_tokens;
  ASSERT_EQ(counts.size(), static_cast<size_t>(mc.num_layers * mc.num_experts));
  // Every token row of every forward is routed to top-k experts in each MoE layer.
  for (int64_t l = 0; l < mc.num_layers; ++l) {
    int64_t sum = std::accumulate(counts.begin() + l * mc.num_experts, counts.begin() + (l + 1) * mc.num_experts,
                                  int64_t{0});
    EXPECT_EQ(sum, mc.IsMoeLayer(l) ? engine.total_rows() * mc.num_experts_per_tok : 0) << "layer " << l;
  }
  EXPECT_GT(engine.total_rows(), 0);
}

INSTANTIATE_TEST_SUITE_P(Families, EngineExpertStats, ::testing::Values("qwen3_moe", "qwen3_next", "qwen3_5_moe"));

}  // namespace
}  // namespace tessera
