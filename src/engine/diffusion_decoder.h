// tessera engine: the block-diffusion decoding rule for one sequence, independent of batching.
// It owns the current block (prompt tail + masks), decides after each forward which masked
// positions to unmask (policies static / threshold / editing; greedy or sampled x0) and when a
// block is complete. The engine turns its state into segments: the block to denoise, plus the
// previous block to commit in the same forward (DESIGN.md, "Block-diffusion semantics").
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "engine/grammar_constraint.h"
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
  // Structured output: the step under a grammar (docs/STRUCTURED_OUTPUT.md, "Block diffusion").
  // Decided positions always form a prefix of the block: positions are drawn left to right from the
  // first masked one, each under the mask its decided prefix (the constraint's state at the block's
  // start, then the block's new tokens) allows, and the policy takes a prefix of that chain (static:
  // schedule[step] positions; threshold / editing: while the confidence is above the threshold, at
  // least one). After an end token the rest of the block is filler, taken at once. No editing passes.
  // So every committed block extends the output to a prefix of a string of the language.
  // `rows_logits` holds the logits of the block rows ConstrainedRows() names, in block order.
  DiffusionStepView ApplyConstrainedStep(const float* rows_logits, int64_t vocab, Sampler& sampler,
                                         GrammarConstraint& constraint);
  // The block rows [first, last) whose logits the next ApplyConstrainedStep may read: from the first
  // masked position, schedule[step] of them under the static policy (the rows after an end token are
  // filler and read none), the rest of the block under the others. The forward asks for these only: a
  // row's logits are vocab floats each that cross to the host (8 sequences of 32-row blocks over
  // Qwen3's vocabulary: 156 MB a step, where the static 8-step schedule reads 4 rows of each block).
  std::pair<int64_t, int64_t> ConstrainedRows() const;
  // The same step from tokens already drawn for every block row (tokens[i], probs[i]: row i's x0
  // and its confidence) by the rules the engine made with RulesForRows (the backend's SampleRows).
  DiffusionStepView ApplyPickedStep(const int32_t* tokens, const float* probs);
  // One sampling rule per block row for the next step: the rows ApplyStep would draw from get
  // sampler.RowRule(mask), in the order it draws them (so a seeded sampler gives the same draws);
  // the others get a greedy rule whose result the step does not read.
  std::vector<RowSampling> RulesForRows(Sampler& sampler) const;
  bool block_done() const { return done_; }

  // Moves to the next block (all masks) after a completed block; returns the completed block's
  // tokens, which the caller commits with the next forward. `confidence` (optional) receives each
  // position's confidence when its token was unmasked or last edited (0 for the prompt's tail).
  std::vector<int32_t> AdvanceBlock(std::vector<float>* confidence = nullptr);

 private:
  // The step itself; pick(i, &conf) draws row i's x0 (called in row order, only for the rows read).
  template <typename PickFn>
  DiffusionStepView Apply(PickFn pick);
  // Whether the next step draws row i: the masked rows, or in an editing pass the generated ones.
  bool DrawsRow(int64_t i, bool any_masked) const;
  DiffusionParams params_;
  std::vector<int64_t> schedule_;
  int64_t prompt_len_ = 0;
  int64_t block_start_ = 0;
  std::vector<int32_t> block_;
  std::vector<float> conf_;  // per block position: the confidence its current token was chosen with
  int64_t step_ = 0;
  int64_t edit_steps_ = 0;
  bool done_ = false;
};

}  // namespace tessera
