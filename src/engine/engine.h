// tessera engine: one engine thread owns the model, its caches and the scheduler. Each step
// builds one ragged batch (chunked prefills, autoregressive decode tokens, diffusion blocks of
// several requests), runs one forward, then samples or unmasks. Requests arrive through Submit
// (thread-safe) and leave through their on_event callbacks; cancellation frees their pages at the
// next step.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string_view>
#include <thread>
#include <vector>

#include "core/error.h"
#include "engine/engine_api.h"
#include "engine/engine_canvas.h"
#include "engine/page_pool.h"
#include "engine/prefix_cache.h"
#include "model/batch.h"

namespace tessera {

class Model;
class Tokenizer;
struct Sequence;

enum class SchedulingPolicy { kFcfs, kShortestPromptFirst, kPriority };

struct EngineConfig {
  int64_t max_num_seqs = 64;
  int64_t max_num_batched_tokens = 2048;
  int64_t page_size = 16;
  int64_t num_pages = 0;              // 0: kv_cache_bytes / bytes per page
  int64_t kv_cache_bytes = 256ll << 20;
  int64_t max_model_len = 0;          // 0: the model's max_position_embeddings
  bool enable_chunked_prefill = true;
  // Reuse the KV pages (and, for hybrid models, recurrent-state snapshots) of earlier requests
  // with the same prompt prefix and cache_namespace (prefix_cache.h).
  bool enable_prefix_caching = true;
  // Hybrid models with prefix caching: state slots kept for snapshots at page boundaries (each
  // as large as one sequence's recurrent state, outside kv_cache_bytes); 0: max_num_seqs / 4.
  int64_t num_state_snapshots = 0;
  SchedulingPolicy policy = SchedulingPolicy::kFcfs;
  std::string served_model_name = "tessera";
  DiffusionParams default_diffusion;  // the model's resolved defaults (ResolveDiffusionParams)
  SamplingDefaults sampling_defaults;  // passed on in ModelInfo() (SamplingDefaultsFromHf)
  bool force_diffusion = false;       // run a plain backbone (qwen3_moe / qwen3_5_moe) as a diffusion model
  // Per-step distinct experts and cumulative routed tokens per (layer, expert) in the snapshot
  // (costs a little per forward).
  bool collect_expert_stats = false;
  // MoE router temperature of requests that do not set one (router logits / T before the softmax
  // and top-k; 1 = the model as trained). In [kMinRouterTemperature, kMaxRouterTemperature].
  float router_temperature = 1.f;
  // Canvas models (DiffusionGemma): the sampler's knobs (the model's generation_config.json, read by the
  // caller with CanvasSamplerParams::FromGenerationConfig; transformers' defaults otherwise), and an
  // observer of every denoising step (tests: the random draws and decisions; null: none).
  CanvasSamplerParams canvas;
  std::function<void(const CanvasStepTrace&)> canvas_trace;
};

class Engine : public EngineApi {
 public:
  // `tokenizer` may be null (ids-only use): events then carry no text and stop strings are unused.
  Engine(Model* model, const Tokenizer* tokenizer, const EngineConfig& config);
  ~Engine() override;

  void Submit(GenerationRequest req) override;
  EngineSnapshot Snapshot() const override;
  const EngineModelInfo& ModelInfo() const override { return info_; }
  // Structured output over the tokenizer's vocabulary, with the model's eos ids as the stop ids
  // (engine_structured.cpp). The vocabulary and the compiler are built on first use, once.
  std::shared_ptr<const grammar::CompiledGrammar> CompileGrammar(grammar::GrammarFormat format,
                                                                 std::string_view text) override;

  // Runs the loop on a thread of its own until Stop().
  void Start();
  void Stop();
  void SetReady(bool ready);

  // Synchronous use (CLI, tests): run steps on the calling thread until nothing is left.
  void RunUntilIdle();
  // One scheduling step; false when there was nothing to do.
  bool Step();

  const EngineConfig& config() const { return config_; }
  // Cumulative: forwards run and token rows processed (for tests and benchmarks).
  int64_t total_forwards() const { return total_forwards_; }
  int64_t total_rows() const { return total_rows_; }

 private:
  void Intake();
  bool Validate(Sequence& seq, std::string* error) const;
  // Sampler, decoders and router temperature of a validated sequence (one choice of a request).
  void InitSequence(Sequence& seq);
  void Admit();
  // invalid_request: a kError that the request's own input caused; unavailable: the engine can serve
  // no request now (see GenerationEvent).
  void Finish(Sequence& seq, FinishReason reason, const std::string& error = "", bool invalid_request = false,
              bool unavailable = false, bool server_fault = false);
  // A step threw (Start's loop): fails every running sequence as unavailable (out of memory) or as
  // the server's fault, and the engine goes on.
  void FailRunning(const std::exception& e);
  // True once a checkpoint file was truncated under the engine (io/mapped_file.h's fault guard counted
  // a read past its end since the engine was built): sets fault_ (published in the snapshot) the
  // first time. FailAllForFault ends every running and waiting request with it.
  bool WeightsFaulted();
  void FailAllForFault();
  void ReleaseResources(Sequence& seq);
  bool EnsurePages(Sequence& seq, int64_t positions);
  void Preempt(Sequence& victim);
  // `with_text` false: the tokens count, their text is not output (a constrained output's end token).
  void EmitTokens(Sequence& seq, const std::vector<int32_t>& tokens, std::vector<TokenLogprob> logprobs,
                  bool with_text = true);
  Sequence* PickVictim(const Sequence& needy);
  // Structured output (engine_structured.cpp). An autoregressive token of a constrained sequence:
  // masks `logits` (host row) before the sampler draws; false when the sequence ended instead.
  bool MaskForSampling(Sequence& seq, float* logits, int64_t vocab);
  // A row drawn by the backend: its grammar's mask as words (Segment::sample_masks; empty without an
  // active grammar). False: the row takes the host path (no token allowed, or the grammar failed; that
  // path ends the sequence).
  bool MaskForDeviceSampling(Sequence& seq, std::vector<uint32_t>* words);
  // A request's GrammarTrigger: ids in the vocabulary, a grammar to trigger, no end token forced.
  bool ValidTrigger(const GenerationRequest& r, std::string* error) const;
  // Ends a sequence whose grammar threw: a bad-argument error (too ambiguous, too deep) is the
  // request's fault, anything else the engine's.
  void FailOnGrammar(Sequence& seq, const Error& e);
  // After the token is appended: advances the grammar; true when the sequence is complete.
  bool AdvanceGrammar(Sequence& seq, int32_t token);
  // A completed diffusion block's fresh tokens into the grammar, up to the first end token or the
  // structure's completion: returns how many of them are output; *done: the output is complete.
  size_t AdvanceGrammarBlock(Sequence& seq, const std::vector<int32_t>& fresh, bool* done);
  void PublishSnapshot();

  // A token or block sequence's part of a step (engine_sequence_step.cpp). Its segment within
  // `budget` (alone: nothing else is planned yet), or a prompt chunk; false: nothing for it this step.
  bool PlanTokens(Sequence& seq, int64_t budget, bool alone, Segment* seg, bool* prompt_chunk);
  // Whether `token` ends seq's output (eos unless ignore_eos, a stop id; never for a constrained one).
  bool EndsOutput(const Sequence& seq, int32_t token) const;
  // Its autoregressive row: the backend's draw (pick) or the host's from logits; the stop rules.
  void ApplyTokenRow(Sequence& seq, float* logits, const ForwardResult::Pick* pick);
  // A constrained block's host draw (each row under its prefix's grammar mask), made before the
  // step's results are applied: DrawConstrainedBlocks runs the sequences' chains on the host's
  // threads (each sequence has its own decoder, sampler and matcher; the compiled grammars are
  // thread-safe), so the draws are those of the serial order.
  struct BlockDraw {
    DiffusionStepView view;
    std::string error;          // the grammar threw: the sequence ends with it
    std::exception_ptr fault;   // anything else (rethrown by DrawConstrainedBlocks)
  };
  // draws[i]: the draw of seqs[i] from its `logits[i]` rows.
  void DrawConstrainedBlocks(const std::vector<Sequence*>& seqs, const std::vector<float*>& logits,
                             std::vector<BlockDraw>* draws);
  // Its diffusion block's denoising step: `draw` (a constrained block's, from DrawConstrainedBlocks;
  // null otherwise), or from the block's logits rows (host) or picks (backend); then OutputBlock once
  // the block is complete: its fresh tokens streamed up to the stop rules.
  void ApplyBlockStep(Sequence& seq, float* logits, const ForwardResult::Pick* picks, size_t rows, BlockDraw* draw);
  void OutputBlock(Sequence& seq);

  // Canvas diffusion (DiffusionGemma, docs/DIFFUSION_GEMMA.md 6; engine_canvas.cpp).
  // What a canvas model's request may not ask for (each refusal names it), and its pages.
  bool ValidateCanvas(const Sequence& seq, std::string* error) const;
  // The canvas length of seq's request (its own, or the engine's default).
  int64_t CanvasLength(const Sequence& seq) const;
  void InitCanvas(Sequence& seq);
  // seq's segment this step: [committed tokens the cache lacks; the canvas], or a prompt chunk alone
  // when both do not fit `budget`. False: nothing for seq this step.
  bool PlanCanvas(Sequence& seq, int64_t budget, bool alone, Segment* seg, bool* prompt_chunk);
  // One denoising step from what the forward gave back for seq's canvas (CanvasForwardRows):
  // sampling, acceptance, re-noising, the stop rule; a finished canvas's argmax is output and queued
  // for its commit, or the sequence finishes. A canvas that goes on keeps its next self-conditioning
  // input (the backend's), or on the host path its processed logits in CanvasState::z for
  // UpdateSelfConditioning.
  void ApplyCanvasStep(Sequence& seq, const CanvasForwardRows& rows, int64_t vocab);
  // Structured output on a canvas: masks each processed row z [C, vocab] (in place) by seq's grammar
  // after the argmax of the rows before it, rows past the output's end pinned to the filler token.
  // False when the grammar threw (the sequence has ended).
  bool ConstrainCanvasRows(Sequence& seq, float* z, int64_t C, int64_t vocab);
  // The kDiffusionStep event of a canvas step (requests with emit_steps).
  void EmitCanvasStep(Sequence& seq, const CanvasRowPick* picks, const std::vector<int32_t>& argmax,
                      const std::vector<uint8_t>& accepted);
  // The self-conditioning inputs of the canvases that go on, from their processed logits (rows of this
  // step's forward result: called before the step ends), a product a canvas.
  void UpdateSelfConditioning(const std::vector<Sequence*>& seqs);

  // Prefix caching (engine_prefix_cache.cpp).
  // Shares the longest usable cached prefix with a sequence being admitted: retains the pages,
  // sets its pages and num_cached, counts the query. RollbackPrefix undoes it when admission
  // fails after all. The caller restores the returned snapshot into the sequence's state slot.
  PrefixCache::Match AttachCachedPrefix(Sequence& seq);
  void RollbackPrefix(Sequence& seq);
  // Hybrid models: the page boundary where the sequence's state is to be snapshotted.
  void PlanSnapshot(Sequence& seq);
  // After a forward committed more of `seq`: offers its new full pages to the cache and takes
  // the state snapshot when the planned boundary is reached.
  void OnCommitted(Sequence& seq);
  void ExtendPageKeys(Sequence& seq, int64_t pages);
  // Whether later choices of `seq`'s request can take any of its prompt from the cache (a whole
  // aligned page of it): if not, they need not wait for the first choice's prompt.
  bool PromptShareable(const Sequence& seq) const;

  Model* model_;
  const Tokenizer* tokenizer_;
  EngineConfig config_;
  EngineModelInfo info_;
  std::unique_ptr<PagePool> pool_;
  std::unique_ptr<PrefixCache> prefix_cache_;  // null when prefix caching is off
  bool hybrid_ = false;                        // the model has recurrent-state layers
  bool canvas_ = false;                        // a canvas-decoder model (DiffusionGemma)
  std::vector<int32_t> eos_ids_;
  std::once_flag grammar_once_;
  std::unique_ptr<grammar::GrammarCompiler> grammar_compiler_;  // CompileGrammar's, once built

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<GenerationRequest> incoming_;
  bool stop_ = false;
  bool ready_ = false;
  std::thread thread_;

  std::list<std::unique_ptr<Sequence>> waiting_;
  std::list<std::unique_ptr<Sequence>> running_;
  uint64_t arrival_counter_ = 0;

  // Snapshot counters, written by the engine thread and read under mu_.
  EngineSnapshot snapshot_;
  int64_t prefix_queries_ = 0, prefix_hits_ = 0;  // engine-thread copies, published each step
  std::vector<int64_t> expert_routed_;            // [layer * num_experts + expert]
  int64_t total_forwards_ = 0, total_rows_ = 0;
  uint64_t weight_faults_base_ = 0;  // MappedFileFaultCount() when the engine was built
  std::string fault_;                // engine thread; copied into snapshot_.fault
};

}  // namespace tessera
