// tessera engine: the block-diffusion decoding rule for one sequence, independent of batching.
// It owns the current block (prompt tail + masks), decides after each forward which masked
// positions to unmask (policies static / threshold / editing; greedy or sampled x0) and when a
// block is complete. The engine turns its state into segments: the block to denoise, plus the
// previous block to commit in the same forward (DESIGN.md, "Block-diffusion semantics").
#pragma once

#include <cstdint>
#include <vector>

#include "engine/request.h"
#include "engine/sampler.h"

namespace tessera {

// Number of tokens to unmask at each step of a static schedule: block_size split evenly over
// `steps`, remainder to the first steps (the fixtures' rule).
std::vector<int64_t> StaticSchedule(int64_t block_size, int64_t steps);

class DiffusionDecoder {
 public:
  // `prompt_len` tokens exist; the first block to denoise starts at the last block boundary
  // at or before prompt_len and holds the prompt's tail followed by masks.
  DiffusionDecoder(const DiffusionParams& params, const std::vector<int32_t>& prompt);

  int64_t block_size() const { return params_.block_size; }
  int64_t block_start() const { return block_start_; }
  // The current block's tokens (mask id where masked): the denoise part of the next forward.
  const std::vector<int32_t>& block() const { return block_; }
  // Masked positions left in the current block.
  int64_t masks_left() const;
  // Steps run on the current block so far.
  int64_t steps_in_block() const { return step_; }

  // Applies one forward's logits for the current block (rows in block order, `vocab` wide).
  // Returns the step view (positions unmasked and their confidences). When the block completes,
  // block_done() turns true.
  DiffusionStepView ApplyStep(const float* block_logits, int64_t vocab, Sampler& sampler);
  bool block_done() const { return done_; }

  // Moves to the next block (all masks) after a completed block; returns the completed block's
  // tokens, which the caller commits with the next forward.
  std::vector<int32_t> AdvanceBlock();

 private:
  DiffusionParams params_;
  std::vector<int64_t> schedule_;
  int64_t prompt_len_ = 0;
  int64_t block_start_ = 0;
  std::vector<int32_t> block_;
  int64_t step_ = 0;
  int64_t edit_steps_ = 0;
  bool done_ = false;
};

}  // namespace tessera
