// tessera engine: the engine thread's record of one request while it waits and runs: its tokens,
// cache handle, sampler, diffusion state, text streaming state and timings.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/diffusion_decoder.h"
#include "engine/engine_canvas.h"
#include "engine/grammar_constraint.h"
#include "engine/prefix_cache.h"
#include "engine/request.h"
#include "engine/sampler.h"
#include "engine/stop_matcher.h"
#include "model/batch.h"
#include "tokenizer/tokenizer.h"

namespace tessera {

using Clock = std::chrono::steady_clock;

// The choices of one request with n > 1 (GenerationRequest::n): the first computes the prompt; the
// others wait in the queue until its pages are in the prefix cache, then take them from there.
struct ChoiceGroup {
  bool prompt_ready = false;  // the first choice committed its prompt (or ended): the others may start
};

struct Sequence {
  GenerationRequest req;
  int32_t index = 0;                   // the choice this sequence produces
  std::shared_ptr<ChoiceGroup> group;  // n > 1 only
  float router_temperature = 1.f;      // the request's, or the engine's default
  uint64_t arrival = 0;
  Clock::time_point arrived_at, started_at;
  bool started = false;       // admitted at least once (queue time measured)
  bool first_token_sent = false;

  // Autoregressive: prompt + generated tokens. Diffusion: prompt + completed blocks' new tokens.
  // Canvas: prompt + finished canvases (argmax), each committed by the forward after it finished.
  std::vector<int32_t> tokens;
  int64_t prompt_len = 0;
  int64_t num_cached = 0;     // positions [0, num_cached) are committed in the cache
  SequenceCache cache;

  // Prefix caching: the chain root (namespace + attention layout), keys of the full pages of
  // `tokens` computed so far, how many of the cached pages were offered to the cache, and the
  // page boundary where the recurrent state is to be snapshotted (hybrid models; -1: none).
  PageKey cache_root;
  std::vector<PageKey> page_keys;
  int64_t pages_registered = 0;
  int64_t snapshot_at = -1;

  std::unique_ptr<Sampler> sampler;
  std::optional<DiffusionDecoder> diffusion;
  std::unique_ptr<CanvasState> canvas;  // canvas models (DiffusionGemma), else null
  std::unique_ptr<GrammarConstraint> constraint;  // structured output (req.grammar), else null

  std::unique_ptr<IncrementalDecoder> detok;
  std::unique_ptr<StopMatcher> stop;
  int64_t output_tokens = 0;  // tokens reported to the client (after cuts)

  RequestStats stats;
  bool finished = false;

  int64_t generated() const { return static_cast<int64_t>(tokens.size()) - prompt_len; }
  // A choice other than the first whose prompt is not in the cache yet: not admitted.
  bool waits_for_prompt() const { return group && index > 0 && !group->prompt_ready; }
};

}  // namespace tessera
