// tessera engine: turns one row of logits into a token: penalties (HF repetition, OpenAI presence /
// frequency), temperature, top-k, top-p, min-p, then greedy argmax or a seeded draw. Also the
// log-probabilities the API reports, and the diffusion decoder's (x0, confidence) choice.
#pragma once

#include <cstdint>
#include <random>
#include <unordered_map>
#include <vector>

#include "backend/sampling.h"
#include "engine/request.h"

namespace tessera {

// Per-request sampling state: the RNG and the token counts penalties need.
class Sampler {
 public:
  // `end_ids`: the tokens that end generation (eos + stop ids), suppressed while fewer than
  // params.min_tokens tokens were generated (HF MinNewTokensLengthLogitsProcessor, vLLM min_tokens).
  Sampler(const SamplingParams& params, const std::vector<int32_t>& prompt, std::vector<int32_t> end_ids = {});

  // Records a token of the output (for presence / frequency / repetition penalties).
  void Observe(int32_t token);

  // Picks the next token from `logits` (vocab floats, modified in place by the penalties).
  int32_t Sample(float* logits, int64_t vocab);

  // Draws x0 for a diffusion position and returns its probability under the distribution it was
  // drawn from (greedy: softmax(logits)[argmax]). No penalties: diffusion scores whole blocks; the
  // logit bias applies (to a copy of the row). `exclude` (the mask token) is never chosen; greedy
  // confidence is still the model's probability softmax(logits)[x0] over the whole vocabulary.
  int32_t SampleWithConfidence(const float* logits, int64_t vocab, float* confidence, int32_t exclude = -1);

  bool greedy() const { return params_.temperature <= 0.f; }
  const SamplingParams& params() const { return params_; }

 // The rule of the next draw without penalties (backend.h RowSampling): this request's temperature,
  // top-k / top-p / min-p and `exclude`, with the next uniform of this sequence's generator when
  // sampled (one per draw, the order Sample and SampleWithConfidence consume them in). The engine
  // hands these rules to the model so the backend draws the tokens; the results equal Sample's and
  // SampleWithConfidence's on the same logits when NextIsPlainRule().
  RowSampling RowRule(int32_t exclude = -1);
  // True when the next Sample(logits) is RowRule() applied to the raw logits: no repetition /
  // presence / frequency penalty, no logit bias and no end-token suppression by min_tokens at this
  // point.
  bool NextIsPlainRule() const;
  // Whether rows must reach the host for this request's logit bias (diffusion blocks too).
  bool has_logit_bias() const { return !params_.logit_bias.empty(); }

 private:
  void ApplyPenalties(float* logits, int64_t vocab) const;
  double NextUniform();

  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<int32_t> end_ids_;
  int64_t generated_ = 0;
  std::unordered_map<int32_t, int32_t> output_counts_;
  std::vector<int32_t> seen_;  // prompt + output tokens, for the repetition penalty
  SamplingCandidates candidates_;  // scratch of the sampled rule (backend/sampling.h)
  std::vector<float> biased_;      // scratch: a diffusion row with the logit bias added
};

// Index of the largest value; ties go to the lowest index (as torch.argmax).
int32_t ArgMax(const float* values, int64_t n);

// log_softmax of a row into `out` (size n).
void LogSoftmax(const float* logits, int64_t n, float* out);

// The chosen token's log-probability and the top_n alternatives (log-probs of the raw logits).
TokenLogprob ComputeLogprobs(const float* logits, int64_t vocab, int32_t chosen, int top_n);

}  // namespace tessera
