// tessera engine: the thread-safe face of the engine that the server and the CLI talk to.
// Implemented by Engine (engine.h); tests of the server implement it with fakes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/request.h"
#include "grammar/grammar_compiler.h"

namespace tessera {

struct EngineSnapshot {
  int64_t requests_running = 0, requests_waiting = 0;
  int64_t kv_pages_used = 0, kv_pages_total = 0;
  int64_t kv_pages_cached = 0;  // free pages still holding prefix-cache content (evictable; not in used)
  // Recurrent-state slots (hybrid models: one per running sequence; 0 / 0 without Gated DeltaNet
  // layers). The prefix cache's snapshot slots are not counted: they are cache content, like cached pages.
  int64_t state_slots_used = 0, state_slots_total = 0;
  // Prefix cache, cumulative, in tokens: tokens looked up at admission (the prompt, or the whole
  // sequence when a preempted request comes back) and tokens found cached.
  int64_t prefix_cache_queries = 0, prefix_cache_hits = 0;
  // Cumulative routed tokens per (layer, expert) at [layer * num_experts + expert] (dense layers
  // stay 0); empty unless EngineConfig::collect_expert_stats.
  std::vector<int64_t> expert_routed_tokens;
  bool ready = false;                                        // loaded and warmed up
  // Non-empty once the engine can no longer compute correct outputs (a checkpoint file truncated
  // under the running server: io/mapped_file.h's fault guard); every request fails with it (503).
  std::string fault;
};

struct EngineModelInfo {
  std::string name;              // served model name (/v1/models)
  int64_t max_model_len = 0;     // prompt + output tokens
  int64_t vocab_size = 0;
  bool diffusion = false;
  DiffusionParams default_diffusion;  // block_size, steps, policy, threshold, mask id
  // Canvas-diffusion models (DiffusionGemma): the model's canvas length (0: not such a model) and the
  // sampler's defaults (generation_config.json; canvas_length resolved), which a request overrides.
  int64_t canvas_length = 0;
  CanvasSamplerParams canvas_defaults;
  SamplingDefaults sampling_defaults;  // for request fields left out (generation_config.json)
  int64_t num_layers = 0, num_experts = 0;  // for per-expert metrics
  std::string weight_format;  // ModelConfig::WeightFormat(): "bf16", "gptq int4 group 128 ...", ...
};

class EngineApi {
 public:
  virtual ~EngineApi() = default;
  // Queues a request; events arrive on req.on_event from the engine thread. Never throws for a
  // bad request: validation problems come back as a kError event.
  virtual void Submit(GenerationRequest req) = 0;
  virtual EngineSnapshot Snapshot() const = 0;
  virtual const EngineModelInfo& ModelInfo() const = 0;
  // Structured output: compiles a constraint for GenerationRequest::grammar over this engine's
  // vocabulary (one process-wide GrammarCompiler, cached by text). Thread-safe; meant for the
  // server's prompt threads. Throws Error(kInvalidArgument) naming the problem (a 400), or
  // Error(kUnsupported) when this engine has no tokenizer.
  virtual std::shared_ptr<const grammar::CompiledGrammar> CompileGrammar(grammar::GrammarFormat format,
                                                                         std::string_view text);
};

}  // namespace tessera
