// tessera tests: one Segment of a Batch, as the model tests build them (logits for every row or for
// the last one only).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "model/batch.h"

namespace tessera::testing {

inline Segment Seg(SequenceCache* cache, int64_t first_pos, std::vector<int32_t> tokens, int64_t commit_len,
                   bool all_logits, int64_t block_size = 0) {
  Segment s;
  s.cache = cache;
  s.first_pos = first_pos;
  s.tokens = std::move(tokens);
  s.commit_len = commit_len;
  s.block_size = block_size;
  if (all_logits)
    for (int32_t i = 0; i < static_cast<int32_t>(s.tokens.size()); ++i) s.logits_rows.push_back(i);
  else
    s.logits_rows.push_back(static_cast<int32_t>(s.tokens.size()) - 1);
  return s;
}

}  // namespace tessera::testing
