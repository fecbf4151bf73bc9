// tessera engine: what a client (CLI, HTTP server) hands the engine and what it gets back.
// A request carries token ids already rendered and tokenized; events come back on the engine
// thread through `on_event`, which must be quick and must not call into the engine.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/canvas_sampler.h"

namespace tessera {

namespace grammar {
class CompiledGrammar;
}

// Sampling defaults of a model (its generation_config.json, as vLLM's `--generation-config auto`):
// what a request that leaves these fields out gets. nullopt = the API's own default.
struct SamplingDefaults {
  std::optional<float> temperature, top_p;
  std::optional<int> top_k;
};

struct SamplingParams {
  float temperature = 1.0f;  // 0 = greedy
  int top_k = 0;             // 0 = off
  float top_p = 1.0f;        // 1 = off
  float min_p = 0.0f;        // 0 = off
  std::optional<uint64_t> seed;
  float repetition_penalty = 1.0f;  // HF semantics over prompt + output tokens
  float presence_penalty = 0.0f;    // OpenAI semantics over output tokens
  float frequency_penalty = 0.0f;
  int64_t max_tokens = 16;
  std::vector<std::string> stop;          // stop strings (not included in the output)
  std::vector<int32_t> stop_token_ids;    // in addition to the model's eos ids
  bool ignore_eos = false;
  int64_t min_tokens = 0;                 // eos and stop ids are suppressed until this many exist
  int top_logprobs = -1;                  // -1: no logprobs; 0..20: logprob of the chosen token + top N
  // OpenAI logit_bias: (token id, bias) added to the logits before sampling (ids distinct, in the
  // vocabulary). Rows with a bias are sampled on the host (Sampler::NextIsPlainRule is false).
  std::vector<std::pair<int32_t, float>> logit_bias;
};

// A trigger-activated ("lazy") grammar: the output is free text until the model draws one of
// `trigger_ids`; then `opening` is forced token by token (what the chat template writes between
// the trigger and the structure, e.g. the "\n" after <tool_call>), the structure follows the
// request's grammar with a fresh matcher, `closing` is forced once the structure is complete (an
// added token such as </tool_call> is never a grammar's text), and the output is free again.
// Inside a structure and its forced tokens nothing ends the output but max_tokens or a stop string.
struct GrammarTrigger {
  std::vector<int32_t> trigger_ids;
  std::vector<int32_t> opening;
  std::vector<int32_t> closing;
};

// Most choices one request may ask for (the server's own limit is lower).
constexpr int64_t kMaxChoices = 128;

// The range of router temperatures a request or the engine's default may take.
constexpr float kMinRouterTemperature = 0.05f, kMaxRouterTemperature = 20.f;

// The seed of choice `index` of a request with `n` choices and seed `seed`: choice 0 keeps the
// seed itself (so n=1 and the first of n choices agree), the others get well-mixed distinct seeds,
// so the choices differ while the whole response is reproducible.
uint64_t ChoiceSeed(uint64_t seed, int64_t index);

enum class DiffusionPolicy { kStatic, kThreshold, kEditing };

struct DiffusionParams {
  int64_t block_size = 0;
  int64_t steps = 0;
  DiffusionPolicy policy = DiffusionPolicy::kStatic;
  float threshold = 0.9f;        // kThreshold / kEditing: unmask every mask above it
  float edit_threshold = 0.9f;   // kEditing: replace a committed-in-block token above it
  int64_t max_edit_steps = 4;    // kEditing: extra steps per block once the masks are gone
  int32_t mask_token_id = -1;
};

enum class FinishReason { kNone, kStop, kLength, kCancelled, kError };
const char* FinishReasonName(FinishReason r);  // "stop", "length", "cancelled", "error"

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.f;
  std::vector<std::pair<int32_t, float>> top;  // top_logprobs alternatives
};

// One diffusion denoising step, for live views (--show-steps, the chat page).
struct DiffusionStepView {
  int64_t block_start = 0;
  int64_t step = 0;
  std::vector<int32_t> block_tokens;   // current block, mask id where still masked
  std::vector<int64_t> unmasked;       // absolute positions unmasked in this step
  std::vector<float> conf;             // their confidences
  // How far the step's unmasking decisions were from going the other way: the smallest gap between
  // a candidate's confidence and the rule's boundary (threshold: |conf - threshold| over the masked
  // positions; static: the last chosen's confidence minus the first left out's; editing pass: |conf -
  // edit threshold| over the changed argmaxes). Infinity when nothing competed (one candidate, or
  // every one taken). Confidences that move by less than this cannot change the decisions (a CPU /
  // GPU trace comparison reads it). Not set for grammar-constrained steps (infinity).
  float decision_margin = std::numeric_limits<float>::infinity();
};

struct RequestStats {
  int64_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
  int64_t forwards = 0;                        // model forwards this request took part in
  std::vector<int64_t> steps_per_block;        // diffusion only (canvas models: steps per canvas)
  // Canvas models: transformers' tokens_per_forward, the new tokens up to and including the first eos
  // (whole canvases) over the denoising forwards.
  double tokens_per_forward = 0;
  int64_t expert_distinct_sum = 0;             // sum over (step, MoE layer) of distinct experts touched
  int64_t expert_layer_steps = 0;              // number of (step, MoE layer) pairs in that sum
  double queue_seconds = 0, first_token_seconds = 0, total_seconds = 0;
};

struct GenerationEvent {
  enum class Kind { kTokens, kDiffusionStep, kFinished, kError } kind = Kind::kTokens;
  int32_t index = 0;                   // the choice (0..n-1) this event belongs to
  std::vector<int32_t> tokens;         // kTokens: newly final output tokens
  std::string text;                    // kTokens: newly final text (never a broken UTF-8 sequence)
  std::vector<TokenLogprob> logprobs;  // kTokens when requested (diffusion: log of each token's
                                       // confidence when it was unmasked; no alternatives)
  DiffusionStepView step;              // kDiffusionStep
  FinishReason finish_reason = FinishReason::kNone;  // kFinished
  RequestStats stats;                  // kFinished
  std::vector<int32_t> raw_output;     // kFinished: every generated id (diffusion: block-aligned,
                                       // before the max_tokens cut; includes eos)
  std::string error;                   // kError (the request is over)
  // kError: the request's own input is at fault (its grammar proved too ambiguous to follow...),
  // found only while generating: a client error even after output has started.
  bool invalid_request = false;
  // kError: the server cannot serve the request now, through no fault of the request (503, not 400
  // or 500): its weights changed under it (EngineSnapshot::fault, for good), or a step ran out of
  // memory (GPU or host; a retry may pass once other requests end).
  bool unavailable = false;
  // kError: a step failed for another reason (a bug, a device error): the server's fault (500),
  // also before any output, where an engine error is otherwise taken as the request's (400).
  bool server_fault = false;
};

struct GenerationRequest {
  std::string id;
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  std::optional<DiffusionParams> diffusion;  // set for diffusion models
  // Canvas-diffusion models (DiffusionGemma): this request's sampler knobs, whole (the server starts
  // from EngineModelInfo::canvas_defaults and applies the request's `diffusion` fields). Unset: the
  // engine's (EngineConfig::canvas). Refused for other models.
  std::optional<CanvasSamplerParams> canvas;
  bool emit_steps = false;                   // send kDiffusionStep events
  int priority = 0;                          // lower runs first (vLLM convention) when policy uses it
  std::string cache_namespace;               // prefix-cache isolation key (API key id)
  // Choices: n independent continuations of the prompt (events carry their index). The first
  // computes the prompt; the others start once its pages are in the prefix cache and share them.
  // With a seed, choice i samples with ChoiceSeed(seed, i). The choices share on_event and
  // `cancelled`; a request that fails validation gets one kError (index 0) and no choice runs.
  int64_t n = 1;
  // MoE router temperature of this request (router logits / T before the softmax and top-k);
  // unset: EngineConfig::router_temperature.
  std::optional<float> router_temperature;
  // Structured output (docs/STRUCTURED_OUTPUT.md): the output is constrained to this grammar's
  // language, compiled by EngineApi::CompileGrammar of the same engine (its vocabulary). Null: free.
  // Each choice follows it with a matcher of its own; constrained rows are sampled on the host.
  std::shared_ptr<const grammar::CompiledGrammar> grammar;
  // With `grammar`: the grammar applies lazily, to each structure the model opens with a trigger
  // (docs/STRUCTURED_OUTPUT.md, "Trigger-activated grammars"; OpenAI strict tools under tool_choice
  // auto). Null: the whole output follows the grammar.
  std::shared_ptr<const GrammarTrigger> grammar_trigger;
  // Special tokens whose text the output keeps (the others are left out of the text, as
  // skip_special_tokens does): the markers of a chat format that the server parses, such as Gemma 4's
  // <|tool_call>, <|"|> and <|channel> (vLLM turns skip_special_tokens off for its gemma4 parsers).
  std::vector<int32_t> keep_special_ids;
  std::function<void(const GenerationEvent&)> on_event;
  std::shared_ptr<std::atomic<bool>> cancelled = std::make_shared<std::atomic<bool>>(false);
};

}  // namespace tessera
