// tessera model: cache storage of a model: per attention layer K and V pages
// ([num_pages * page_size, kv_heads * head_dim] of the backend's KvCacheDType(): f32, or bf16 where
// chosen), per GDN layer and state slot the conv state ([conv_dim, K-1]) and the recurrent state
// ([value_heads, key_dim, value_dim]) in f32, all in the backend's memory (device memory on a GPU
// backend).
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.h"

namespace tessera {

struct ModelCaches {
  int64_t num_pages = 0, page_size = 0, num_slots = 0;
  DType kv_dtype = DType::kF32;               // element type of k / v (Backend::KvCacheDType())
  std::vector<DeviceBuffer> k, v;             // [attention layer]
  std::vector<DeviceBuffer> conv, recurrent;  // [gdn layer], slot-major
  int64_t conv_per_slot = 0, recurrent_per_slot = 0;
};

}  // namespace tessera
