// tessera cuda backend: the attention kernels' key-split plans (cuda_split_plan.h). Host code only;
// built with and without the CUDA backend.
#include "backend/cuda/cuda_split_plan.h"

#include <algorithm>
#include <cstdint>

namespace tessera::cuda {

int64_t SplitPlanKeys(int64_t max_keys) {
  int64_t top = 16;
  while (top * 2 < max_keys) top *= 2;  // top < max_keys <= 2 top
  return top + top / 4 * ((max_keys - top + top / 4 - 1) / (top / 4));
}

void GqaSplitPlan(int64_t rows, int64_t kv_heads, int64_t max_keys, int sm_count, int* splits, int64_t* key_chunk,
                  int64_t min_chunk) {
  // Blocks of min_chunk keys at least (32: a block's partials are G (head_dim + 2) floats, small next
  // to 32 K/V rows), at most 64 splits (the merge reads them all), ~4 blocks per SM (2 resident, 2
  // waves).
  constexpr int64_t kMaxSplits = 64;
  *splits = 1;
  *key_chunk = INT64_MAX;
  const int64_t blocks = rows * kv_heads > 0 ? rows * kv_heads : 1;
  const int64_t want = 4 * static_cast<int64_t>(sm_count > 0 ? sm_count : 1);
  if (blocks >= want || max_keys <= min_chunk) return;
  const int64_t keys = SplitPlanKeys(max_keys);
  const int64_t target = (want + blocks - 1) / blocks < kMaxSplits ? (want + blocks - 1) / blocks : kMaxSplits;
  const int64_t chunk = ((keys + target - 1) / target + min_chunk - 1) / min_chunk * min_chunk;
  const int64_t n = (keys + chunk - 1) / chunk;
  if (n <= 1) return;
  *splits = static_cast<int>(n);
  *key_chunk = chunk;
}

void AttentionFlashSplitPlan(int64_t num_tiles, int64_t kv_heads, int64_t max_keys, bool few_rows, int sm_count,
                             int* splits, int64_t* key_chunk) {
  // GqaSplitPlan's stepping (~4 blocks an SM, <= 64 splits, the key count rounded up to 2^k {1, 1.25,
  // 1.5, 1.75} so that decode steps keep their graph), with a larger least chunk for tiles of many
  // rows: their partials are 64 query vectors x (head_dim + 2) floats a split, and every block
  // stages 64 query vectors, so a split should bring a few K/V tiles (decode tiles: 16 vectors).
  GqaSplitPlan(num_tiles, kv_heads, max_keys, sm_count, splits, key_chunk, few_rows ? 32 : 128);
}

void AttentionDecodeSplitPlan(int64_t num_tiles, int64_t kv_heads, int64_t max_keys, int64_t resident_blocks,
                              int* splits, int64_t* key_chunk) {
  // Splits of >= 32 keys (two 16-key tiles, one a key warp), at most 64 (the merge reads them all). The key
  // count is SplitPlanKeys' (the plan, an argument of the step's graph, changes 4 times a doubling of the
  // context). Of the split counts, the one whose blocks
  // take the least time if all of a wave end together (the kernel gives a tile's splits even shares): waves
  // x (chunk + a block's fixed cost, ~32 keys of latency), ties to fewer splits. E.g. 8 sequences of 4 KV
  // heads at 1,025 keys (planned for 1,280) and 396 resident blocks: 10 splits of 128 keys (320 blocks, one
  // wave) where ~4 blocks an SM (GqaSplitPlan) made 14 of 96 (448 blocks: a second wave of 52).
  constexpr int64_t kMinChunk = 32, kMaxSplits = 64, kBlockCost = 32;
  *splits = 1;
  *key_chunk = INT64_MAX;
  const int64_t blocks = std::max<int64_t>(1, num_tiles * kv_heads), resident = std::max<int64_t>(1, resident_blocks);
  if (blocks >= resident || max_keys <= kMinChunk) return;
  const int64_t keys = SplitPlanKeys(max_keys);
  int64_t best_cost = INT64_MAX;
  for (int64_t s = 1; s <= kMaxSplits; ++s) {
    const int64_t chunk = ((keys + s - 1) / s + kMinChunk - 1) / kMinChunk * kMinChunk;
    const int64_t n = (keys + chunk - 1) / chunk;
    if (n != s) continue;  // the same split as a smaller s
    const int64_t waves = (blocks * n + resident - 1) / resident;
    const int64_t cost = waves * (chunk + kBlockCost);
    if (cost < best_cost) best_cost = cost, *splits = static_cast<int>(n), *key_chunk = chunk;
  }
  if (*splits == 1) *key_chunk = INT64_MAX;
}

}  // namespace tessera::cuda
