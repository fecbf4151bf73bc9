// tessera model: what every layer of one forward pass sees: the backend, the config, the rows of
// the ragged batch (all segments concatenated) and, per segment, where its rows are and which
// caches it reads and writes; with tensor parallelism, the rank's shard and communicator.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "model/batch.h"
#include "model/caches.h"
#include "model/model_config.h"

namespace tessera {

class Communicator;  // backend/communicator.h
struct RankShard;    // model/shard.h

struct SegmentRows {
  int64_t row0 = 0;       // first row of the segment in the batch
  int64_t T = 0;          // its rows
  int64_t first_pos = 0;  // absolute position of its first row
  int64_t commit_len = 0;
  int64_t block_size = 0;
  const SequenceCache* cache = nullptr;  // nullptr: stateless (positions from 0, nothing persists)
  // Rows [commit_len, T) are a DiffusionGemma canvas (decoder path, AttentionArgs::canvas_begin).
  bool canvas = false;
  const float* self_conditioning = nullptr;  // host [T - commit_len, hidden] (Segment), null: zeros
  // Segment::canvas_state and self_conditioning_kept; with the latter, kept_input is that input in the
  // rank's backend memory (set by the forward).
  int64_t canvas_state = -1;
  bool self_conditioning_kept = false;
  const float* kept_input = nullptr;
};

struct LayerContext {
  Backend* be = nullptr;
  const ModelConfig* cfg = nullptr;
  ModelCaches* caches = nullptr;
  int64_t rows = 0;                      // all rows of the batch
  const int64_t* positions = nullptr;    // [rows]
  std::vector<SegmentRows> segments;
  // Host, [rows]: each row's router temperature (its segment's), or null when every segment routes
  // at temperature 1 (then the MoE layers skip the division).
  const float* router_temperature = nullptr;
  GdnMode gdn_mode = GdnMode::kAuto;
  // Tensor parallelism: the rank's part of the model (cfg is then its local config) and the group's
  // collectives; comm is null when the model is not split (shard then covers the whole model).
  const RankShard* shard = nullptr;
  Communicator* comm = nullptr;
};

}  // namespace tessera
