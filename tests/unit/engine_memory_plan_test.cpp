// tessera tests: the GPU memory plan's arithmetic and its one-line description (memory_plan.h),
// including a plan that does not fit (a negative KV pool, shown with its sign).
#include <gtest/gtest.h>

#include <string>

#include "engine/memory_plan.h"

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

}  // namespace
}  // namespace tessera
