// tessera tests: host views of the CUDA backend's KV cache layouts (src/backend/cuda/cuda_kv_layout.h):
// what a split f32 cache stores for a value, and the values a downloaded cache holds.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_kv_layout.h"
#include "core/dtype.h"

namespace tessera {

// The split layout's (hi, lo) bf16 bits of x, each rounded to nearest even: hi = bf16(x), lo = bf16(x - hi).
inline std::pair<uint16_t, uint16_t> KvSplitParts(float x) {
  const uint16_t hi = F32ToBf16(x);
  return {hi, F32ToBf16(x - Bf16ToF32(hi))};
}

// Whether a CUDA backend keeps an f32 cache of rows of kv_dim values split.
inline bool KvCacheSplit(int64_t kv_dim) { return cuda::F32KvLayout(kv_dim) == cuda::KvLayout::kSplit; }

// The values an f32 cache (rows of kv_dim) keeps of x: x itself, or hi + lo when split.
inline std::vector<float> KvStoredValues(std::vector<float> x, int64_t kv_dim) {
  if (!KvCacheSplit(kv_dim)) return x;
  for (float& e : x) {
    const auto [hi, lo] = KvSplitParts(e);
    e = Bf16ToF32(hi) + Bf16ToF32(lo);
  }
  return x;
}

// The values of a downloaded split cache (raw bits, rows of kv_dim values, 2 bf16 a value).
inline std::vector<float> KvSplitValues(const std::vector<uint16_t>& bits, int64_t kv_dim) {
  const int64_t n = static_cast<int64_t>(bits.size()) / 2;
  std::vector<float> out(n);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t row = i / kv_dim, x = i % kv_dim;
    const uint16_t* r = bits.data() + 2 * row * kv_dim;
    out[i] = Bf16ToF32(r[cuda::KvSplitHiIndex(x)]) + Bf16ToF32(r[cuda::KvSplitHiIndex(x) + cuda::kKvSplitChunk]);
  }
  return out;
}

}  // namespace tessera
