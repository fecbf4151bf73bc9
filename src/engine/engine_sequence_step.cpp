// tessera engine: one token or block sequence's part of a step (Engine::Step orchestrates; canvases
// are engine_canvas.cpp's): the segment it asks the forward for within the step's token budget, and
// what the forward gave back applied to it: an autoregressive row drawn (on the host or by the
// backend), a diffusion block's denoising step, a completed block streamed, and the stop rules
// (eos, stop ids, max_tokens, the context's end, a structure's completion).
#include <algorithm>
#include <cmath>
#include <utility>

#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/engine.h"
#include "engine/sequence.h"
#include "model/model.h"

namespace tessera {

// An unconstrained output ends at an eos (unless ignore_eos) or one of the request's stop ids; a
// constrained one where its grammar says instead.
bool Engine::EndsOutput(const Sequence& s, int32_t token) const {
  if (s.constraint) return false;
  const auto& stop_ids = s.req.sampling.stop_token_ids;
  return (!s.req.sampling.ignore_eos && std::find(eos_ids_.begin(), eos_ids_.end(), token) != eos_ids_.end()) ||
         std::find(stop_ids.begin(), stop_ids.end(), token) != stop_ids.end();
}

bool Engine::PlanTokens(Sequence& s, int64_t budget, bool alone, Segment* seg, bool* prompt_chunk) {
  if (!s.diffusion) {
    const int64_t remaining = static_cast<int64_t>(s.tokens.size()) - s.num_cached;
    int64_t n = std::min(remaining, budget);
    // Without chunked prefill a prompt runs whole, alone in a step if it must.
    if (n < remaining && !config_.enable_chunked_prefill) {
      if (!alone) return false;
      n = remaining;
    }
    // Hybrid models with prefix caching: the chunk ends on the boundary whose state is saved.
    if (s.snapshot_at > s.num_cached) n = std::min(n, s.snapshot_at - s.num_cached);
    if (n <= 0) return false;
    seg->tokens.assign(s.tokens.begin() + s.num_cached, s.tokens.begin() + s.num_cached + n);
    seg->commit_len = n;
    *prompt_chunk = n < remaining;
    if (!*prompt_chunk) seg->logits_rows = {static_cast<int32_t>(n - 1)};
    return true;
  }
  // Committed part: everything before the current block the cache lacks (prompt blocks, the block
  // completed last step, or all of it after a preemption). It is block-aligned, and is committed in
  // the same forward that denoises the current block when the budget allows.
  const int64_t b = s.diffusion->block_size();
  const int64_t commit_end = s.diffusion->block_start();
  const int64_t to_commit = commit_end - s.num_cached;
  seg->block_size = b;
  // A snapshot boundary inside the committed part ends a prefill chunk there first.
  const bool cut = s.snapshot_at > s.num_cached && s.snapshot_at < commit_end;
  if (!cut && (to_commit + b <= budget || (to_commit == 0 && alone))) {
    seg->tokens.assign(s.tokens.begin() + s.num_cached, s.tokens.begin() + commit_end);
    seg->commit_len = to_commit;
    const auto& block = s.diffusion->block();
    seg->tokens.insert(seg->tokens.end(), block.begin(), block.end());
    // A constrained block reads only the rows its step can draw (DiffusionDecoder::ConstrainedRows).
    const auto [lo, hi] = s.constraint ? s.diffusion->ConstrainedRows() : std::pair<int64_t, int64_t>{0, b};
    for (int64_t i = lo; i < hi; ++i) seg->logits_rows.push_back(static_cast<int32_t>(to_commit + i));
    return true;
  }
  // Too long for one forward: prefill whole blocks first (chunks end on block boundaries, since a
  // block-causal query sees its whole block).
  int64_t n = std::min(to_commit, std::max(b, (budget / b) * b));
  if (cut) n = std::min(n, s.snapshot_at - s.num_cached);
  // Nothing to commit and no room for the block this step: it waits for the next one.
  if (n <= 0 || (n > budget && !alone)) return false;
  seg->tokens.assign(s.tokens.begin() + s.num_cached, s.tokens.begin() + s.num_cached + n);
  seg->commit_len = n;
  *prompt_chunk = true;
  return true;
}

void Engine::ApplyTokenRow(Sequence& s, float* logits, const ForwardResult::Pick* pick) {
  const int64_t vocab = model_->config().vocab_size;
  // Log-probabilities are those of the model's distribution, before penalties and the grammar.
  std::vector<float> raw;
  if (s.req.sampling.top_logprobs >= 0) raw.assign(logits, logits + vocab);
  if (!pick && s.constraint && !MaskForSampling(s, logits, vocab)) return;
  const int32_t tok = pick ? pick->token : s.sampler->Sample(logits, vocab);
  std::vector<TokenLogprob> lps;
  if (s.req.sampling.top_logprobs >= 0) lps.push_back(ComputeLogprobs(raw.data(), vocab, tok, s.req.sampling.top_logprobs));
  s.sampler->Observe(tok);
  s.tokens.push_back(tok);
  // A constrained output's end token is not text of it (the fixtures' eos is a byte).
  const bool ends = s.constraint && s.constraint->CanTerminate() && s.constraint->IsEnd(tok);
  const bool complete = s.constraint && AdvanceGrammar(s, tok);
  EmitTokens(s, {tok}, std::move(lps), !ends);
  // A constrained sequence ends where its grammar says (AdvanceGrammar: end tokens count there).
  if (EndsOutput(s, tok) || complete || s.stop->stopped())
    Finish(s, FinishReason::kStop);
  else if (s.generated() >= s.req.sampling.max_tokens || static_cast<int64_t>(s.tokens.size()) >= config_.max_model_len)
    Finish(s, FinishReason::kLength);
}

void Engine::DrawConstrainedBlocks(const std::vector<Sequence*>& seqs, const std::vector<float*>& logits,
                                   std::vector<BlockDraw>* draws) {
  draws->assign(seqs.size(), BlockDraw{});
  const int64_t vocab = model_->config().vocab_size;
  auto draw = [&](size_t i) {
    Sequence& s = *seqs[i];
    BlockDraw& d = (*draws)[i];
    try {
      d.view = s.diffusion->ApplyConstrainedStep(logits[i], vocab, *s.sampler, *s.constraint);
    } catch (const Error& e) {
      d.error = e.what();
    } catch (...) {  // out of memory and the like: rethrown on the engine's thread below
      d.fault = std::current_exception();
    }
  };
  // A row's draw is ~1 ms on a 152K vocabulary (mask, softmax, sample), a chain several rows: a batch
  // of constrained blocks was that many milliseconds a step on the engine's thread alone.
  if (seqs.size() == 1) {
    draw(0);
  } else {
    ThreadPool::Global().ParallelFor(
        seqs.size(),
        [&](size_t b, size_t e, int) {
          for (size_t i = b; i < e; ++i) draw(i);
        },
        1);
  }
  // A failure that is not the grammar's ends the step as it did on one thread (Engine::FailRunning).
  for (const BlockDraw& d : *draws)
    if (d.fault) std::rethrow_exception(d.fault);
}

void Engine::ApplyBlockStep(Sequence& s, float* logits, const ForwardResult::Pick* picks, size_t rows,
                            BlockDraw* draw) {
  DiffusionDecoder& d = *s.diffusion;
  const int64_t vocab = model_->config().vocab_size;
  DiffusionStepView view;
  if (draw) {
    if (!draw->error.empty()) {
      Finish(s, FinishReason::kError, draw->error);
      return;
    }
    view = std::move(draw->view);
  } else if (picks) {
    std::vector<int32_t> tokens(rows);
    std::vector<float> probs(rows);
    for (size_t i = 0; i < rows; ++i) tokens[i] = picks[i].token, probs[i] = picks[i].prob;
    view = d.ApplyPickedStep(tokens.data(), probs.data());
  } else {
    TESSERA_CHECK(!s.constraint);  // drawn by DrawConstrainedBlocks
    view = d.ApplyStep(logits, vocab, *s.sampler);
  }
  if (s.req.emit_steps && s.req.on_event) {
    GenerationEvent ev;
    ev.index = s.index;
    ev.kind = GenerationEvent::Kind::kDiffusionStep;
    ev.step = std::move(view);
    s.req.on_event(ev);
  }
  if (d.block_done()) OutputBlock(s);
}

void Engine::OutputBlock(Sequence& s) {
  DiffusionDecoder& d = *s.diffusion;
  s.stats.steps_per_block.push_back(d.steps_in_block());
  const int64_t start = d.block_start();
  std::vector<float> confidence;
  const std::vector<int32_t> block = d.AdvanceBlock(&confidence);
  // The new tokens of the block (the prompt's tail is not output), with their confidences.
  std::vector<int32_t> fresh;
  std::vector<float> fresh_conf;
  for (int64_t i = 0; i < static_cast<int64_t>(block.size()); ++i)
    if (start + i >= s.prompt_len) fresh.push_back(block[i]), fresh_conf.push_back(confidence[i]);
  s.tokens.insert(s.tokens.end(), fresh.begin(), fresh.end());
  // Stream the block, cut at eos / stop ids / max_tokens (and where a structure is complete).
  std::vector<int32_t> emit;
  bool eos = false;
  size_t output_end = fresh.size();
  if (s.constraint) output_end = AdvanceGrammarBlock(s, fresh, &eos);
  if (s.finished) return;
  for (size_t i = 0; i < output_end; ++i) {
    const int32_t t = fresh[i];
    if (s.output_tokens + static_cast<int64_t>(emit.size()) >= s.req.sampling.max_tokens) {
      eos = false;  // cut by max_tokens before the structure's end: "length"
      break;
    }
    if (EndsOutput(s, t)) {
      eos = true;
      break;
    }
    emit.push_back(t);
  }
  // Log-probabilities: each token's confidence when it was unmasked (or last edited), as the step
  // events report it. -9999 stands for a zero probability (OpenAI's floor; JSON has no -inf).
  std::vector<TokenLogprob> lps;
  if (s.req.sampling.top_logprobs >= 0)
    for (size_t i = 0; i < emit.size(); ++i)
      lps.push_back({emit[i], fresh_conf[i] > 0.f ? std::max(std::log(fresh_conf[i]), -9999.f) : -9999.f, {}});
  if (!emit.empty()) EmitTokens(s, emit, std::move(lps));
  if (eos || s.stop->stopped())
    Finish(s, FinishReason::kStop);
  else if (s.generated() >= s.req.sampling.max_tokens ||
           static_cast<int64_t>(s.tokens.size()) + d.block_size() > config_.max_model_len)
    Finish(s, FinishReason::kLength);
}

}  // namespace tessera
