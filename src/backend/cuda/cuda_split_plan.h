// tessera cuda backend: the key-split plans of the attention kernels (how many blocks share one row's
// keys, and how many keys each takes). Host code only, without CUDA headers: the plans are arguments
// of a step's graph (cuda_step_graph.h), so they must change rarely as the context grows, and they are
// unit-tested on machines without the toolkit (tests/unit/backend_cuda_split_plan_test.cpp).
#pragma once

#include <cstdint>

namespace tessera::cuda {

// The key count a split plan sizes its chunks for: max_keys rounded up to 2^k {1, 1.25, 1.5, 1.75}, so
// that splits and chunk (arguments of the step's graph, cuda_step_graph.h) change 4 times per doubling
// of the context, not every chunk.
int64_t SplitPlanKeys(int64_t max_keys);
// Key splits over R = rows blocks of kv_heads KV heads (named after the grouped-query kernel it was
// written for; the flash plan below is this over tiles), the longest row seeing max_keys keys:
// splits == 1 comes with key_chunk = INT64_MAX. Both change only when max_keys crosses 2^k {1, 1.25,
// 1.5, 1.75}, so decode steps keep their graph; trailing splits may have no keys. A split takes
// min_chunk keys at least.
void GqaSplitPlan(int64_t rows, int64_t kv_heads, int64_t max_keys, int sm_count, int* splits, int64_t* key_chunk,
                  int64_t min_chunk = 32);
// Key splits for AttentionFlash (same contract as GqaSplitPlan, over num_tiles x kv_heads blocks).
void AttentionFlashSplitPlan(int64_t num_tiles, int64_t kv_heads, int64_t max_keys, bool few_rows, int sm_count,
                             int* splits, int64_t* key_chunk);
// Key splits of a decode call (the contract of GqaSplitPlan: 4 changes a doubling of the context,
// splits == 1 with key_chunk = INT64_MAX), chosen for whole waves of resident_blocks (the decode kernel's
// blocks resident at once on the device: AttentionDecodeResidentBlocks).
void AttentionDecodeSplitPlan(int64_t num_tiles, int64_t kv_heads, int64_t max_keys, int64_t resident_blocks,
                              int* splits, int64_t* key_chunk);

}  // namespace tessera::cuda
