// tessera tests: the GPU memory plan's arithmetic and its one-line description (memory_plan.h),
// including a plan that does not fit (a negative KV pool, shown with its sign).
#include <gtest/gtest.h>

#include <string>

#include "engine/memory_plan.h"
#include "io/hf_config.h"
#include "model/model.h"
#include "model/model_config.h"

namespace tessera {
namespace {

TEST(MemoryPlan, HumanBytesPicksTheUnitAndKeepsTheSign) {
  EXPECT_EQ(HumanBytes(0), "0.00 B");
  EXPECT_EQ(HumanBytes(1023), "1023.00 B");
  EXPECT_EQ(HumanBytes(1536), "1.50 KiB");
  EXPECT_EQ(HumanBytes(62.81 * 1024 * 1024), "62.81 MiB");
  EXPECT_EQ(HumanBytes(3.0 * (int64_t{1} << 30)), "3.00 GiB");
  EXPECT_EQ(HumanBytes(-3.0 * (int64_t{1} << 30)), "-3.00 GiB");
}

TEST(MemoryPlan, KvPoolIsWhatTheBudgetLeaves) {
  const int64_t gib = int64_t{1} << 30;
  const GpuMemoryPlan p = PlanGpuMemory(100 * gib, 0.9, 40 * gib, 196608, 2 * gib, 8 * gib);
  EXPECT_EQ(p.budget_bytes, 90 * gib);
  EXPECT_EQ(p.kv_pool_bytes, 40 * gib);
  EXPECT_EQ(p.kv_tokens, 40 * gib / 196608);
  EXPECT_EQ(DescribeGpuMemoryPlan(p),
            "gpu memory: 0.90 x 100.00 GiB = 90.00 GiB: in use 40.00 GiB (weights, context), state 2.00 GiB, "
            "activation reserve 8.00 GiB, KV pool 40.00 GiB (218453 tokens at 196608 B)");
  // Weights that do not fit leave a negative pool and no tokens.
  const GpuMemoryPlan q = PlanGpuMemory(10 * gib, 0.5, 6 * gib, 196608, 0, gib);
  EXPECT_EQ(q.kv_pool_bytes, -2 * gib);
  EXPECT_EQ(q.kv_tokens, 0);
  EXPECT_NE(DescribeGpuMemoryPlan(q).find("KV pool -2.00 GiB"), std::string::npos) << DescribeGpuMemoryPlan(q);
}

// A canvas model (the published DiffusionGemma config) returns a whole canvas of logits rows a
// sequence, not 32, and its self-conditioning product copies them once more: the reserve counts both,
// for at most Model::kLogitsChunkRows rows (the forward's chunk): 64 canvases of 256 rows over a
// 262,144 vocabulary reserve 2 copies x 2,048 rows x 1 MiB, doubled for the caching allocator (8 GiB),
// not 16,384 rows' worth (64 GiB, more than an 80 GB card has beside the weights).
TEST(MemoryPlan, CanvasModelsReserveTheirCanvasLogits) {
  const ModelConfig mc =
      ModelConfig::FromHf(LoadHfModelDir(std::string(TESSERA_SOURCE_DIR) + "/tests/data/configs/diffusiongemma-26b-a4b-it"));
  ASSERT_EQ(mc.canvas_length, 256);
  ASSERT_EQ(mc.vocab_size, 262144);
  ASSERT_EQ(Model::kLogitsChunkRows, 2048);
  const int64_t rows = 64 * 256, logits_bytes = 2 * 2 * Model::kLogitsChunkRows * mc.vocab_size * 4;
  const int64_t reserve = ActivationReserveBytes(mc, rows, 64);
  EXPECT_GE(reserve, logits_bytes);
  EXPECT_LT(reserve, logits_bytes + (int64_t{24} << 30)) << "the rest: per-row activations and 256 MiB";
  // Eight canvases fill a chunk: more sequences add only their kept self-conditioning inputs ([C, H] f32).
  EXPECT_EQ(ActivationReserveBytes(mc, rows, 64) - ActivationReserveBytes(mc, rows, 8),
            56 * 256 * mc.hidden_size * 4);
  // One canvas: its 256 rows, not 32 (the Qwen rule), even with a larger token budget.
  const int64_t one = ActivationReserveBytes(mc, 8192, 1) - ActivationReserveBytes(mc, 8192, 0);
  EXPECT_EQ(one, 2 * 2 * int64_t{256} * mc.vocab_size * 4 + int64_t{256} * mc.hidden_size * 4);
}

// An autoregressive step's logits are one row a sequence (its decode row or its prompt's last), a
// block-diffusion step's a block of 32; the feed-forward rows are the experts' width (768 for
// Qwen3-30B-A3B), not the config's dense intermediate_size (6,144, unused: every layer is MoE).
TEST(MemoryPlan, AutoregressiveStepsReserveOneLogitsRowASequenceAndTheExpertsWidth) {
  const ModelConfig mc =
      ModelConfig::FromHf(LoadHfModelDir(std::string(TESSERA_SOURCE_DIR) + "/tests/data/configs/qwen3-30b-a3b"));
  ASSERT_EQ(mc.vocab_size, 151936);
  ASSERT_EQ(mc.moe_intermediate_size, 768);
  ASSERT_EQ(mc.intermediate_size, 6144);
  const int64_t doubled_f32 = 2 * 4;
  EXPECT_EQ(ActivationReserveBytes(mc, 2048, 64) - ActivationReserveBytes(mc, 2048, 63), doubled_f32 * 151936);
  EXPECT_EQ(ActivationReserveBytes(mc, 2048, 64, /*block_diffusion=*/true) -
                ActivationReserveBytes(mc, 2048, 63, /*block_diffusion=*/true),
            doubled_f32 * 32 * 151936);
  // One more token row (no sequences: no logits): 4 x hidden, then the router's 128 logits and 8
  // slots of 3 x hidden + 3 x 768 (the MoE term is the widest: attention's is 2 x 4096 + 2 x 512).
  EXPECT_EQ(ActivationReserveBytes(mc, 2049, 0) - ActivationReserveBytes(mc, 2048, 0),
            doubled_f32 * (4 * 2048 + 128 + 8 * (3 * 2048 + 3 * 768)));
}

}  // namespace
}  // namespace tessera
