// tessera cuda backend: how the paged KV cache lays out its elements (host and device; no CUDA headers,
// so the tests can pack and read caches too).
//
// Three layouts. kBf16 (--kv-cache-dtype bf16): one bf16 an element. kF32: one f32 an element. kSplit:
// the default f32 cache when a cache row is a whole number of 128-element chunks (every target model):
// each chunk of 128 values x is stored as 128 bf16 hi = bf16(x) then 128 bf16 lo = bf16(x - hi), both
// rounded to nearest even. Same bytes as f32, and exactly the bf16 pair every tensor-core attention
// kernel multiplies (hi*hi + hi*lo + lo*hi), so those kernels read their MMA operands as stored instead
// of splitting every K and V element in their inner loops (half the decode kernel's instructions). A
// value reads back as hi + lo (~16 significant bits; the f32 products see no difference).
// Plain f32 is what a row of other widths holds (e.g. the qwen3_moe fixture's 64 values); a plain f32
// cache of whole chunks, which the attention kernels split in their inner loops, lost to this layout
// and is gone.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define TESSERA_KV_HD __host__ __device__
#else
#define TESSERA_KV_HD
#endif

namespace tessera::cuda {

enum class KvLayout { kF32, kBf16, kSplit };

constexpr int64_t kKvSplitChunk = 128;  // values a hi + lo chunk holds

// The layout of an f32 cache whose rows hold kv_dim values (split when kv_dim is whole chunks).
inline KvLayout F32KvLayout(int64_t kv_dim) { return kv_dim % kKvSplitChunk == 0 ? KvLayout::kSplit : KvLayout::kF32; }

// Index (in bf16 units from the row's start) of value x's hi part; its lo part is 128 further.
TESSERA_KV_HD inline int64_t KvSplitHiIndex(int64_t x) {
  return (x / kKvSplitChunk) * (2 * kKvSplitChunk) + x % kKvSplitChunk;
}

}  // namespace tessera::cuda
