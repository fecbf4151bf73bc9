// tessera model: how a model is split over the ranks of a tensor-parallel group. Attention query
// heads and Gated DeltaNet value heads are split evenly; KV heads and GDN key heads are split too,
// or, when there are fewer of them than ranks, each rank holds the one its query / value heads
// read (replicated, as GQA allows). Dense and shared-expert FFN widths are split column- then
// row-parallel (uneven widths allowed), routed experts are owned whole (expert e on rank
// e % size), embedding and lm_head rows are split by vocabulary (uneven allowed; the logits
// all-gather pads every rank to the largest share).
#pragma once

#include <cstdint>
#include <vector>

#include "model/model_config.h"

namespace tessera {

struct IndexRange {
  int64_t begin = 0, count = 0;
  int64_t end() const { return begin + count; }
};

// Rows [offset + r.begin * dim, offset + r.end() * dim): the rows of heads r in blocks of `dim`.
inline IndexRange HeadRows(IndexRange r, int64_t dim, int64_t offset = 0) {
  return {offset + r.begin * dim, r.count * dim};
}

struct RankShard {
  int rank = 0, size = 1;
  IndexRange q_heads, kv_heads;            // attention
  IndexRange key_heads, value_heads;       // Gated DeltaNet
  IndexRange dense_inter, shared_inter;    // dense FFN / shared-expert intermediate columns
  IndexRange vocab;                        // embedding / lm_head rows
  int64_t vocab_stride = 0;                // max vocab share over ranks (the all-gather block)

  bool sharded() const { return size > 1; }
  bool OwnsExpert(int64_t e) const { return e % size == rank; }
};

// One RankShard per rank; throws Error(kInvalidArgument) naming the dimension when the heads,
// KV heads or GDN heads cannot be split over n ranks.
std::vector<RankShard> PlanShards(const ModelConfig& cfg, int n);

// The config a rank's layers compute with: local head counts and FFN widths (the routing, expert
// shapes, hidden size and vocabulary stay global).
ModelConfig LocalConfig(const ModelConfig& cfg, const RankShard& s);

}  // namespace tessera
