// tessera engine: where a diffusion model's settings come from when a request or flag leaves them
// out: the mask token id (config.json / generation_config.json mask_token_id, then the
// tokenizer's mask token), block size and steps (config / generation_config), policy and
// threshold (generation_config or built-in defaults). A setting that cannot be found is an error
// that says how to give it.
#pragma once

#include <optional>
#include <string>

#include "engine/request.h"
#include "io/hf_config.h"
#include "model/model_config.h"

namespace tessera {

class Tokenizer;

struct DiffusionOverrides {
  std::optional<int64_t> block_size, steps, max_edit_steps;
  std::optional<int32_t> mask_token_id;
  std::optional<DiffusionPolicy> policy;
  std::optional<float> threshold, edit_threshold;
  // The caller's flags for the block size and the step count, named by the error that asks for one:
  // generate's are these, serve's --diffusion-block-size / --diffusion-steps (a flag serve does not
  // have sent its users to the wrong place).
  std::string block_size_flag = "--block-size", steps_flag = "--steps";
};

// Throws Error(kInvalidArgument) naming the missing setting and the flag / config key that gives it,
// and for values out of range (block size 0 or above max_model_len, steps 0, threshold outside
// (0, 1], mask id out of the vocabulary).
DiffusionParams ResolveDiffusionParams(const ModelConfig& cfg, const HfModelDir& dir, const Tokenizer* tokenizer,
                                       const DiffusionOverrides& overrides, int64_t max_model_len);

// "static" / "threshold" / "editing"; throws Error(kInvalidArgument) otherwise.
DiffusionPolicy ParseDiffusionPolicy(const std::string& name);
const char* DiffusionPolicyName(DiffusionPolicy p);

// generation_config.json's sampling defaults: "do_sample": false -> greedy (temperature 0), else
// its temperature / top_p / top_k where present.
SamplingDefaults SamplingDefaultsFromHf(const HfModelDir& dir);

// Architectures that have a block-diffusion variant (qwen3_moe: SDAR; qwen3_5_moe: Clover).
bool FamilySupportsDiffusion(ModelFamily family);

}  // namespace tessera
