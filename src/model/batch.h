// tessera model: what one forward pass computes: a ragged batch of segments (one per sequence),
// each a run of tokens at consecutive positions over that sequence's caches, and what comes back.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.h"

namespace tessera {

struct SequenceCache {            // owned by the engine; the model only reads/writes through it
  std::vector<int32_t> pages;     // KV page ids covering positions [0, capacity) (page_size tokens each)
  int32_t state_slot = -1;        // recurrent-state slot (hybrid models), -1 for attention-only models
};

struct Segment {
  SequenceCache* cache = nullptr;  // nullptr: a stateless forward from position 0 (nothing persists)
  int64_t first_pos = 0;           // position of tokens[0]; positions [0, first_pos) are committed
  std::vector<int32_t> tokens;
  // tokens[0, commit_len): committed: K/V written to the pages, recurrent state advanced past them.
  // tokens[commit_len, end): ONE uncommitted diffusion block: attends all committed positions and
  // itself; GDN layers run causally from the state after the committed part; nothing persists.
  int64_t commit_len = 0;
  // 0: causal attention. >0: block-causal (blocks aligned at multiples of block_size from
  // position 0; a query sees every key in its own and earlier blocks).
  int64_t block_size = 0;
  std::vector<int32_t> logits_rows;  // indices into tokens whose logits are wanted, in this order
  // Empty: the logits of logits_rows come back (ForwardResult::logits). Otherwise one rule per
  // logits row: the backend draws the tokens where the logits are (Backend::SampleRows) and only the
  // tokens and their probabilities come back (ForwardResult::picks), not the [rows, vocab] logits.
  std::vector<RowSampling> sample;
  // With `sample`, optionally a structured-output mask per row, applied where the logits are
  // (Backend::MaskLogitsRows) before the draw: [rows, (vocab + 31) / 32] words, bit t % 32 of word
  // t / 32 set where token t is allowed. Empty: nothing masked.
  std::vector<uint32_t> sample_masks;
  // Canvas-decoder models (DiffusionGemma, ModelConfig::canvas_length > 0), where the uncommitted
  // block is a canvas (decoder path: bidirectional, self-conditioned input, decoder layer_scalars;
  // docs/DIFFUSION_GEMMA.md 1, 5): the self-conditioning input of its rows, [T - commit_len, hidden],
  // the soft embedding softmax(S) @ embed_tokens * embed_scale of the previous step's processed
  // logits S. Empty: a canvas's first step (zeros). Must be empty for other models and rows.
  std::vector<float> self_conditioning;
  // Canvas rows drawn by the backend (canvas-decoder models; one rule per logits row, every one a
  // canvas row; not with `sample`): instead of their logits, each row's CanvasRowPick and the next
  // step's self-conditioning input of the rows come back (ForwardResult::canvas_picks, canvas_soft):
  // [C, hidden] leaves the device instead of [C, vocab] (Backend::CanvasSampleRows).
  std::vector<CanvasRowRule> canvas_sample;
  // With canvas_sample: the rows' logits (before the temperature) come back as well
  // (ForwardResult::canvas_logits; the engine's traces and the tests).
  bool canvas_logits = false;
  // With canvas_sample over every canvas row, a caller that keeps the canvas going may name it
  // (canvas_state >= 0, unique in the batch): the next step's self-conditioning input then stays in
  // backend memory under that id (until Model::ReleaseCanvasState) instead of coming back in
  // ForwardResult::canvas_soft, and a later step reads it with self_conditioning_kept (self_conditioning
  // empty). [C, hidden] f32 (2.9 MB for DiffusionGemma) no longer crosses to the host and back a step.
  int64_t canvas_state = -1;
  bool self_conditioning_kept = false;
  // MoE models: the router logits of this segment's rows are divided by it before the softmax and
  // top-k (a request's router temperature; 1 = unchanged). Must be finite and > 0.
  float router_temperature = 1.f;
};

struct Batch {
  std::vector<Segment> segments;
};

struct ForwardOptions {
  bool capture_hidden = false;
  bool collect_expert_stats = false;
  GdnMode gdn_mode = GdnMode::kAuto;  // tests force the chunked or the recurrent delta rule
};

struct ForwardResult {
  // [logits rows of the segments without `sample`, vocab], segments in order.
  std::vector<float> logits;
  // The tokens drawn for the logits rows of the segments with `sample`, segments in order.
  struct Pick {
    int32_t token = -1;
    float prob = 0.f;  // RowSampling's probability of the token
  };
  std::vector<Pick> picks;
  // The rows of the segments with canvas_sample, segments in order: each row's pick, the next step's
  // self-conditioning input [rows, hidden] (Model::SelfConditioningInput of the rows' z; empty when
  // every such segment keeps it in backend memory, Segment::canvas_state), and, when any of those
  // segments set canvas_logits, every such row's logits [rows, vocab].
  std::vector<CanvasRowPick> canvas_picks;
  std::vector<float> canvas_soft;
  std::vector<float> canvas_logits;
  int64_t rows_processed = 0;  // token rows run through the layers
  // When capture_hidden: [num_layers + 1] of [rows, hidden]: embeddings, each layer's output, the
  // last one after the final norm (rows of all segments, in order).
  std::vector<std::vector<float>> hidden;
  // When collect_expert_stats: per layer, distinct experts routed to (-1 for dense layers), and
  // [layer][expert] routed token counts (empty for dense layers).
  std::vector<int32_t> distinct_experts_per_layer;
  std::vector<std::vector<int64_t>> expert_token_counts;
};

}  // namespace tessera
