// tessera grammar: random token sequences that a grammar accepts, ending in a stop token: what the
// schema-suite tests validate and what the mask benchmark times. A walk draws tokens uniformly from
// each step's mask for a random number of steps, then heads for the end: among the allowed
// single-byte tokens and a sample of others it takes the one leaving the fewest bytes to complete
// (every byte is a token in byte-level vocabularies, so this always terminates).
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "grammar/compiled_grammar.h"

namespace tessera::grammar {

struct RandomWalkOptions {
  int32_t min_free_steps = 5;   // uniformly drawn tokens before heading for the end, at least ...
  int32_t max_free_steps = 80;  // ... and at most
  int32_t max_steps = 4000;     // give up (complete = false) after this many tokens
  int32_t finish_sample = 32;   // other tokens considered per step while finishing
  bool time_masks = false;      // record each FillNextTokenBitmask's duration
};

struct RandomWalkResult {
  std::vector<int32_t> tokens;  // without the final stop token
  std::string text;             // their bytes
  bool complete = false;        // ended with a stop token
  std::string failure;          // why not, when !complete
  std::vector<double> mask_us;  // with time_masks
};

RandomWalkResult RandomWalk(const std::shared_ptr<const CompiledGrammar>& grammar, const RandomWalkOptions& options,
                            std::mt19937_64* rng);

}  // namespace tessera::grammar
