// tessera tests: what one engine request produced, collected from its events (streamed ids and
// their log-probabilities, diffusion steps, the finished event's raw output, reason and stats, or
// the error). Shared by the engine golden tests.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "engine/request.h"

namespace tessera::testing {

struct Outcome {
  std::vector<int32_t> tokens;  // streamed token ids
  std::string text;             // streamed text (engines with a tokenizer)
  std::vector<float> logprobs;  // the chosen tokens' log-probabilities (when asked for)
  std::vector<int32_t> raw;     // raw_output of the finished event
  std::vector<DiffusionStepView> steps;
  FinishReason reason = FinishReason::kNone;
  RequestStats stats;
  std::string error;
  bool invalid_request = false;  // the kError blamed the request's input
  bool finished = false;
};

// A greedy request of `max_tokens` whose events land in *out (which must outlive the request).
inline GenerationRequest MakeCollectingRequest(std::vector<int32_t> prompt, int64_t max_tokens, Outcome* out) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.sampling.temperature = 0;
  r.sampling.max_tokens = max_tokens;
  r.on_event = [out](const GenerationEvent& ev) {
    switch (ev.kind) {
      case GenerationEvent::Kind::kTokens:
        out->tokens.insert(out->tokens.end(), ev.tokens.begin(), ev.tokens.end());
        out->text += ev.text;
        for (const auto& lp : ev.logprobs) out->logprobs.push_back(lp.logprob);
        break;
      case GenerationEvent::Kind::kDiffusionStep:
        out->steps.push_back(ev.step);
        break;
      case GenerationEvent::Kind::kFinished:
        out->finished = true;
        out->reason = ev.finish_reason;
        out->stats = ev.stats;
        out->raw = ev.raw_output;
        break;
      case GenerationEvent::Kind::kError:
        out->finished = true;
        out->error = ev.error;
        out->invalid_request = ev.invalid_request;
        break;
    }
  };
  return r;
}

}  // namespace tessera::testing
