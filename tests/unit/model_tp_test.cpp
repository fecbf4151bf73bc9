// tessera unit tests: the tensor-parallel split plan (model/shard.h), the in-process communicator
// (backend/communicator.h) and the clear errors of impossible splits.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "backend/communicator.h"
#include "expect_error.h"
#include "io/hf_config.h"
#include "model/model.h"
#include "model/shard.h"
#include "test_util.h"

namespace tessera {
namespace {

using testing::DataPath;
using testing::ExpectError;

ModelConfig FixtureConfig(const std::string& family) {
  return ModelConfig::FromHf(LoadHfModelDir(DataPath("fixtures/models/" + family)));
}

TEST(ShardPlan, RangesTileEveryDimension) {
  ModelConfig c = FixtureConfig("qwen3_next");
  c.vocab_size = 510;  // uneven over 4
  c.intermediate_size = 97;
  const auto plan = PlanShards(c, 4);
  ASSERT_EQ(plan.size(), 4u);
  int64_t vocab = 0, inter = 0, q = 0, vh = 0;
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(plan[r].vocab.begin, vocab);
    vocab += plan[r].vocab.count;
    EXPECT_LE(plan[r].vocab.count, plan[r].vocab_stride);
    EXPECT_EQ(plan[r].dense_inter.begin, inter);
    inter += plan[r].dense_inter.count;
    EXPECT_EQ(plan[r].q_heads.begin, q);
    q += plan[r].q_heads.count;
    EXPECT_EQ(plan[r].value_heads.begin, vh);
    vh += plan[r].value_heads.count;
    // 2 KV heads over 4 ranks: ranks 0,1 read KV head 0 and ranks 2,3 KV head 1 (4 q heads, GQA 2).
    EXPECT_EQ(plan[r].kv_heads.count, 1);
    EXPECT_EQ(plan[r].kv_heads.begin, r / 2);
    EXPECT_EQ(plan[r].key_heads.begin, r / 2);
  }
  EXPECT_EQ(vocab, 510);
  EXPECT_EQ(inter, 97);
  EXPECT_EQ(q, c.num_heads);
  EXPECT_EQ(vh, c.linear_num_value_heads);
  // Experts: each owned by exactly one rank.
  for (int64_t e = 0; e < c.num_experts; ++e) {
    int owners = 0;
    for (const RankShard& s : plan) owners += s.OwnsExpert(e);
    EXPECT_EQ(owners, 1) << "expert " << e;
  }
  const ModelConfig local = LocalConfig(c, plan[1]);
  EXPECT_EQ(local.num_heads, 1);
  EXPECT_EQ(local.linear_num_value_heads, 1);
  EXPECT_EQ(local.num_experts, c.num_experts);
  EXPECT_EQ(local.hidden_size, c.hidden_size);
}

TEST(ShardPlan, IndivisibleHeadsAreClearErrors) {
  const ModelConfig c = FixtureConfig("qwen3_moe");  // 4 heads, 2 KV heads
  ExpectError([&] { PlanShards(c, 3); }, ErrorKind::kInvalidArgument, {"tensor_parallel_size 3", "num_attention_heads"});
  ExpectError([&] { PlanShards(c, 8); }, ErrorKind::kInvalidArgument, {"tensor_parallel_size 8", "num_attention_heads"});
  ExpectError([&] { PlanShards(c, 0); }, ErrorKind::kInvalidArgument, {"at least 1"});
  ModelConfig g = FixtureConfig("qwen3_5_moe");
  g.num_kv_heads = 3;
  g.num_heads = 12;
  ExpectError([&] { PlanShards(g, 2); }, ErrorKind::kInvalidArgument, {"num_key_value_heads"});
  ModelConfig k = FixtureConfig("qwen3_5_moe");
  k.linear_num_value_heads = 6;
  k.linear_num_key_heads = 3;
  ExpectError([&] { PlanShards(k, 2); }, ErrorKind::kInvalidArgument, {"linear_num_key_heads"});
  k.linear_num_value_heads = 5;
  ExpectError([&] { PlanShards(k, 2); }, ErrorKind::kInvalidArgument, {"linear_num_value_heads"});
}

TEST(ShardPlan, LoadRejectsAnImpossibleSplit) {
  LoadOptions o;
  o.tensor_parallel_size = 3;
  ExpectError([&] { Model::Load(DataPath("fixtures/models/qwen3_moe"), o); }, ErrorKind::kInvalidArgument,
              {"tensor_parallel_size 3", "num_attention_heads (4)"});
}

TEST(ShardPlan, CudaSplitWithoutCudaIsAClearError) {
  if (CudaDeviceCount() > 0) GTEST_SKIP() << "skipped: a CUDA device is present (tests/unit/backend_cuda_tp_test.cpp runs there)";
  LoadOptions o;
  o.tensor_parallel_size = 2;
  o.device = "cuda";
  try {
    Model::Load(DataPath("fixtures/models/qwen3_moe"), o);
    ADD_FAILURE() << "expected an Error";
  } catch (const Error& e) {
    // A build without CUDA: unsupported; a CUDA build on a machine without GPUs: too few devices.
    EXPECT_TRUE(e.kind() == ErrorKind::kUnsupported || e.kind() == ErrorKind::kInvalidArgument) << e.what();
    EXPECT_NE(std::string(e.what()).find("CUDA"), std::string::npos) << e.what();
  }
}

// Runs fn(rank, comm) on n threads.
template <typename F>
void OnThreads(std::vector<std::unique_ptr<Communicator>>& comms, F fn) {
  std::vector<std::thread> t;
  for (size_t r = 0; r < comms.size(); ++r) t.emplace_back([&, r] { fn(static_cast<int>(r), *comms[r]); });
  for (auto& th : t) th.join();
}

TEST(LocalCommunicator, AllReduceAndAllGather) {
  for (int n : {1, 2, 3, 4}) {
    auto comms = MakeLocalCommunicators(n);
    std::vector<std::vector<float>> sums(n), gathered(n);
    OnThreads(comms, [&](int r, Communicator& c) {
      EXPECT_EQ(c.rank(), r);
      EXPECT_EQ(c.size(), n);
      for (int round = 0; round < 3; ++round) {  // repeated collectives reuse the barrier
        std::vector<float> v = {1.0f * r, 10.0f + r, -0.5f * r * round};
        c.AllReduceSum(v.data(), 3);
        sums[r] = v;
        std::vector<float> in = {100.0f * r + round, 100.0f * r + 1}, out(2 * n);
        c.AllGather(in.data(), 2, out.data());
        gathered[r] = out;
      }
    });
    const float tri = n * (n - 1) / 2.0f;
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(sums[r], (std::vector<float>{tri, 10.0f * n + tri, -0.5f * 2 * tri})) << "n " << n;
      for (int q = 0; q < n; ++q) {
        EXPECT_EQ(gathered[r][2 * q], 100.0f * q + 2);
        EXPECT_EQ(gathered[r][2 * q + 1], 100.0f * q + 1);
      }
    }
  }
}

TEST(LocalCommunicator, AbortReleasesWaitingRanks) {
  auto comms = MakeLocalCommunicators(3);
  std::vector<int> threw(3, 0);
  OnThreads(comms, [&](int r, Communicator& c) {
    if (r == 2) {
      c.Abort();  // rank 2 "failed" and never joins
      return;
    }
    float v = 1;
    try {
      c.AllReduceSum(&v, 1);
    } catch (const Error&) {
      threw[r] = 1;
    }
  });
  EXPECT_EQ(threw, (std::vector<int>{1, 1, 0}));
}

}  // namespace
}  // namespace tessera
