// tessera tests: the attention kernels' key-split plans (src/backend/cuda/cuda_split_plan.h), host code
// that runs in every build, with or without the CUDA backend. The contract every plan keeps: splits in
// [1, 64], splits == 1 exactly when key_chunk is INT64_MAX, chunks of whole least chunks that cover the
// keys, and a plan that depends on the context only through SplitPlanKeys (so a decode step's graph,
// which records the plan, changes 4 times a doubling of the context). The decode plan also: whole waves
// of the resident blocks, the examples its comment and docs/PERFORMANCE.md give, no split when the
// blocks fill the device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <set>
#include <string>
#include <utility>

#include "backend/cuda/cuda_split_plan.h"

namespace tessera::cuda {
namespace {

struct Plan {
  int splits = 0;
  int64_t chunk = 0;
  bool operator==(const Plan& o) const { return splits == o.splits && chunk == o.chunk; }
  bool operator<(const Plan& o) const { return std::make_pair(splits, chunk) < std::make_pair(o.splits, o.chunk); }
};

Plan Decode(int64_t tiles, int64_t kv_heads, int64_t keys, int64_t resident) {
  Plan p;
  AttentionDecodeSplitPlan(tiles, kv_heads, keys, resident, &p.splits, &p.chunk);
  return p;
}

Plan Gqa(int64_t rows, int64_t kv_heads, int64_t keys, int sms, int64_t min_chunk) {
  Plan p;
  GqaSplitPlan(rows, kv_heads, keys, sms, &p.splits, &p.chunk, min_chunk);
  return p;
}

// The contract of every plan for max_keys keys and a least chunk of min_chunk.
void ExpectContract(const Plan& p, int64_t max_keys, int64_t min_chunk, const std::string& what) {
  ASSERT_GE(p.splits, 1) << what;
  ASSERT_LE(p.splits, 64) << what;
  if (p.splits == 1) {
    EXPECT_EQ(p.chunk, INT64_MAX) << what;
    return;
  }
  EXPECT_EQ(p.chunk % min_chunk, 0) << what;
  EXPECT_GE(p.chunk, min_chunk) << what;
  EXPECT_GE(p.splits * p.chunk, max_keys) << "keys past the last split: " << what;
  // No split is empty for the key count the plan was made for.
  EXPECT_LT((p.splits - 1) * p.chunk, SplitPlanKeys(max_keys)) << what;
}

TEST(CudaSplitPlan, PlanKeysStepFourTimesADoubling) {
  int64_t prev = 0;
  std::set<int64_t> values;
  for (int64_t keys = 1; keys <= 70000; ++keys) {
    const int64_t k = SplitPlanKeys(keys);
    ASSERT_GE(k, keys) << keys;
    ASSERT_GE(k, prev) << keys;
    if (keys > 16) {  // (16 keys or fewer: not idempotent; no plan splits so few keys)
      ASSERT_EQ(SplitPlanKeys(k), k) << "not a fixed point: " << keys;
    }
    prev = k;
    if (keys > 64) {
      EXPECT_LE(k, keys + keys / 4) << keys;  // at most a quarter of a doubling above
      values.insert(k);
    }
  }
  // Above 64 keys: 2^k {1, 1.25, 1.5, 1.75}, four values a doubling (64..65536 is 10 doublings).
  for (const int64_t k : values) {
    int64_t top = 64;
    while (top * 2 <= k) top *= 2;
    EXPECT_EQ((k - top) % (top / 4), 0) << k;
  }
  EXPECT_EQ(values.size(), 4u * 10 + 1) << "values from 80 to 65536 and 70000's step";
}

// The decode plan's contract over batch sizes, head counts, contexts and device sizes; the plan depends
// on the context only through SplitPlanKeys.
TEST(CudaSplitPlan, DecodePlanContract) {
  for (int64_t resident : {132 * 3, 132 * 5, 66})
    for (int64_t kv_heads : {1, 2, 4, 8})
      for (int64_t tiles : {1, 2, 3, 8, 32, 64, 200}) {
        std::set<Plan> plans;
        for (int64_t keys = 1; keys <= 40000; keys += keys < 300 ? 1 : 37) {
          const std::string what = "resident " + std::to_string(resident) + " kv_heads " + std::to_string(kv_heads) +
                                   " tiles " + std::to_string(tiles) + " keys " + std::to_string(keys);
          const Plan p = Decode(tiles, kv_heads, keys, resident);
          ExpectContract(p, keys, 32, what);
          if (tiles * kv_heads >= resident || keys <= 32) {
            EXPECT_EQ(p.splits, 1) << "split without need: " << what;
          }
          if (keys > 32) {
            EXPECT_TRUE(p == Decode(tiles, kv_heads, SplitPlanKeys(keys), resident)) << what;
          }
          plans.insert(p);
        }
        EXPECT_LE(plans.size(), 4u * 12) << "plans of a decode row over 1..40000 keys";
      }
}

// Whole waves: under the plan's cost (waves of resident blocks x (chunk + 32)) the chosen split never costs
// more than leaving each row whole, and while twice the blocks would still fit one wave the chunk is the
// least that 64 splits allow (no half-idle device).
TEST(CudaSplitPlan, DecodePlanFillsWaves) {
  for (int64_t resident : {132 * 3, 132 * 5})
    for (int64_t kv_heads : {2, 4})
      for (int64_t tiles = 1; tiles * kv_heads < resident; tiles += tiles < 16 ? 1 : 7)
        for (int64_t keys : {100, 1024, 1025, 4096, 8192, 30000}) {
          const Plan p = Decode(tiles, kv_heads, keys, resident);
          const int64_t blocks = tiles * kv_heads * p.splits;
          const int64_t unsplit_waves = 1;  // tiles * kv_heads < resident
          const std::string what = "resident " + std::to_string(resident) + " blocks " + std::to_string(blocks) +
                                   " keys " + std::to_string(keys);
          // A plan of w waves costs w (chunk + 32) key times; the whole row, one wave of its keys (rounded to
          // 32) + 32. The chosen plan is never worse than leaving the row whole.
          const int64_t planned = SplitPlanKeys(keys), whole = (planned + 31) / 32 * 32;
          const int64_t waves = (blocks + resident - 1) / resident;
          const int64_t chunk = p.splits == 1 ? whole : p.chunk;
          EXPECT_LE(waves * (chunk + 32), unsplit_waves * (whole + 32)) << what;
          // With room for twice the blocks in the wave, the chunk is the least one 64 splits allow (more
          // splits of a shorter chunk would cost less): no half-idle device.
          const int64_t least = std::max<int64_t>(32, ((planned + 63) / 64 + 31) / 32 * 32);
          if (blocks * 2 <= resident) {
            EXPECT_EQ(chunk, least) << "idle device: " << what;
          }
        }
}

// The examples of the plan's comment and of the sixteenth session (`git show 5cf9cf6:docs/PERFORMANCE.md`), worked by
// hand from the documented cost (waves x (chunk + 32)) at 1,025 keys (planned for 1,280): 8 sequences of 4 KV heads on
// 396 resident blocks take 10 splits of 128 (320 blocks, one wave), not GqaSplitPlan's 14 of 96 (448 blocks: a second
// wave of 52); 32 sequences take 3 of 448 (384 blocks) where ~4 blocks an SM made 5 (640 blocks, 1.6 waves); batch 1
// takes the least chunk, 40 splits of 32 (160 blocks); 64 sequences (256 blocks) take 3 of 448: two waves of 448 + 32
// (768 blocks) beat one wave of 1,280 + 32 and 2 splits' two waves of 640 + 32.
TEST(CudaSplitPlan, DecodePlanExamples) {
  EXPECT_TRUE(Decode(8, 4, 1025, 396) == (Plan{10, 128}));
  EXPECT_TRUE(Gqa(8, 4, 1025, 132, 32) == (Plan{14, 96}));
  EXPECT_TRUE(Decode(32, 4, 1025, 396) == (Plan{3, 448}));
  EXPECT_EQ(Gqa(32, 4, 1025, 132, 32).splits, 5);
  EXPECT_TRUE(Decode(1, 4, 1025, 396) == (Plan{40, 32}));
  EXPECT_TRUE(Decode(64, 4, 1025, 396) == (Plan{3, 448}));
}

// GqaSplitPlan (and AttentionFlashSplitPlan, which is GqaSplitPlan with a least chunk of 32 or 128).
TEST(CudaSplitPlan, GqaAndFlashPlanContract) {
  for (int sms : {132, 66})
    for (int64_t min_chunk : {32, 128})
      for (int64_t blocks : {1, 4, 16, 100, 527, 528, 2000}) {
        std::set<Plan> plans;
        for (int64_t keys = 1; keys <= 40000; keys += keys < 300 ? 1 : 41) {
          const std::string what = "sms " + std::to_string(sms) + " min_chunk " + std::to_string(min_chunk) +
                                   " blocks " + std::to_string(blocks) + " keys " + std::to_string(keys);
          const Plan p = Gqa(blocks, 1, keys, sms, min_chunk);
          ExpectContract(p, keys, min_chunk, what);
          if (blocks >= 4 * sms || keys <= min_chunk) {
            EXPECT_EQ(p.splits, 1) << what;
          }
          if (keys > min_chunk) {
            EXPECT_TRUE(p == Gqa(blocks, 1, SplitPlanKeys(keys), sms, min_chunk)) << what;
          }
          Plan f;
          AttentionFlashSplitPlan(blocks, 1, keys, min_chunk == 32, sms, &f.splits, &f.chunk);
          EXPECT_TRUE(f == p) << "flash plan: " << what;
          plans.insert(p);
        }
        EXPECT_LE(plans.size(), 4u * 12) << "plans over 1..40000 keys, " << blocks << " blocks";
      }
}

}  // namespace
}  // namespace tessera::cuda
