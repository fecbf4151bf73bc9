// tessera engine: DiffusionGemma's canvas loop (docs/DIFFUSION_GEMMA.md section 6) inside the engine's
// step. A sequence's segment is [the committed tokens the cache lacks; its canvas]: the prompt (or its
// rest after a prefix-cache hit or a chunk) with the first canvas, then each finished canvas's argmax
// with the next canvas's first step, so a commit costs no forward of its own. The backend turns the
// canvas rows' logits into each row's entropy, argmax and sample (Backend::CanvasSampleRows, with the
// uniforms drawn when the step is planned) and computes the next step's self-conditioning input
// (Segment::canvas_sample): only [C] picks and [C, hidden] come back, never the [C, vocab] logits.
// canvas_sampler.h's rules then run here (entropy-bound acceptance, re-noising, the stable-and-
// confident stop) with the sequence's own generator. Several sequences' canvases share a forward as
// segments of one batch (a canvas model only generates canvases: no autoregressive rows to mix in).
// Structured output: a grammar masks the canvas rows left to right after the argmax of the rows before
// them (ConstrainCanvasRows), so the argmax a canvas commits is always a prefix of the language; those
// rows' logits come to the host, and their self-conditioning inputs are computed in one product
// (Model::SelfConditioningInput).
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include <spdlog/spdlog.h>

#include "backend/sampling.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/engine.h"
#include "engine/grammar_constraint.h"
#include "engine/sequence.h"
#include "model/model.h"

namespace tessera {

namespace {

// A fresh canvas: C uniform tokens (transformers' torch.randint), no self-conditioning, all steps left.
void NewCanvas(CanvasState& cs, int64_t vocab) {
  cs.x.resize(static_cast<size_t>(cs.length));
  for (int32_t& t : cs.x) t = cs.Token(vocab);
  cs.soft.clear();
  cs.soft_kept = false;  // the model's kept input (if any) is overwritten by the next step's
  cs.z = nullptr;
  cs.uniforms.clear();
  cs.steps_remaining = cs.params.max_denoising_steps;
  cs.step = 0;
  cs.stop_rule.Reset();
}

}  // namespace

bool Engine::ValidateCanvas(const Sequence& seq, std::string* error) const {
  const ModelConfig& mc = model_->config();
  const GenerationRequest& r = seq.req;
  const SamplingParams& sp = r.sampling;
  const char* fam = FamilyName(mc.family);
  auto refuse = [&](const std::string& what) {
    *error = fmt::format("{} (canvas diffusion) does not support {}", fam, what);
    return false;
  };
  if (r.diffusion) return refuse("masked-diffusion settings (block size, steps, policy)");
  // The request's own sampler knobs: transformers' rules, and a canvas no longer than the model's (the
  // memory plan reserves the model's canvas).
  if (r.canvas) {
    try {
      r.canvas->Validate("canvas sampler settings");
    } catch (const Error& e) {
      return *error = e.what(), false;
    }
    if (r.canvas->canvas_length > mc.canvas_length)
      return *error = fmt::format("canvas_length {} exceeds the model's {}", r.canvas->canvas_length,
                                  mc.canvas_length),
             false;
  }
  const int64_t C = CanvasLength(seq);
  // The canvas sampler has its own temperatures (t_max annealed to t_min) and no truncation
  // (transformers honours nothing else): a request's own would be silently ignored.
  if (sp.temperature != 1.f) return refuse("a temperature (its steps anneal from t_max to t_min)");
  if (sp.top_k != 0 || sp.top_p != 1.f || sp.min_p != 0.f) return refuse("top_k / top_p / min_p");
  if (sp.repetition_penalty != 1.f || sp.presence_penalty != 0.f || sp.frequency_penalty != 0.f)
    return refuse("repetition / presence / frequency penalties");
  if (!sp.logit_bias.empty()) return refuse("logit_bias");
  if (sp.top_logprobs >= 0) return refuse("logprobs");
  if (sp.min_tokens > 0) return refuse("min_tokens");
  const int64_t P = static_cast<int64_t>(r.prompt.size());
  if (P + C > config_.max_model_len)
    return *error = fmt::format("the prompt has {} tokens; with one canvas of {} it exceeds max_model_len {}", P, C,
                                config_.max_model_len),
           false;
  // A step holds the last canvas's commit and the next canvas: 2C positions past the committed text.
  if (pool_->PagesFor(P + 2 * C) > pool_->num_pages())
    return *error = fmt::format("the KV cache ({} pages of {} tokens) cannot hold this request", pool_->num_pages(),
                                pool_->page_size()),
           false;
  return true;
}

int64_t Engine::CanvasLength(const Sequence& seq) const {
  const int64_t c = seq.req.canvas ? seq.req.canvas->canvas_length : config_.canvas.canvas_length;
  return c > 0 ? c : model_->config().canvas_length;
}

void Engine::InitCanvas(Sequence& seq) {
  const ModelConfig& mc = model_->config();
  auto cs = std::make_unique<CanvasState>(seq.req.canvas.value_or(config_.canvas));
  if (seq.req.sampling.seed) {
    cs->rng.seed(*seq.req.sampling.seed);
  } else {
    std::random_device rd;
    cs->rng.seed((static_cast<uint64_t>(rd()) << 32) ^ rd());
  }
  cs->length = CanvasLength(seq);
  // max_tokens rounded up to whole canvases (transformers' max_new_tokens); the output is cut at it.
  cs->canvases_total = (seq.req.sampling.max_tokens + cs->length - 1) / cs->length;
  NewCanvas(*cs, mc.vocab_size);
  seq.canvas = std::move(cs);
}

bool Engine::PlanCanvas(Sequence& s, int64_t budget, bool alone, Segment* seg, bool* prompt_chunk) {
  CanvasState& cs = *s.canvas;
  const int64_t C = cs.length;
  const int64_t end = static_cast<int64_t>(s.tokens.size());
  const int64_t to_commit = end - s.num_cached;
  // Hybrid models' snapshot boundaries do not arise: the family has no recurrent layers.
  if (to_commit + C <= budget || (alone && (to_commit == 0 || !config_.enable_chunked_prefill))) {
    seg->tokens.assign(s.tokens.begin() + s.num_cached, s.tokens.end());
    seg->commit_len = to_commit;
    seg->tokens.insert(seg->tokens.end(), cs.x.begin(), cs.x.end());
    for (int64_t i = 0; i < C; ++i) seg->logits_rows.push_back(static_cast<int32_t>(to_commit + i));
    seg->self_conditioning = cs.soft;
    // The step's draws (transformers' order: the rows' multinomial draws, then the re-noise tokens
    // after the step). The backend samples the rows with them, unless a grammar must mask the rows
    // one after another on the host (ConstrainCanvasRows).
    if (cs.uniforms.empty())
      for (int64_t i = 0; i < C; ++i) cs.uniforms.push_back(cs.Uniform());
    if (!s.constraint) {
      const auto t = static_cast<float>(CanvasTemperature(cs.params, cs.steps_remaining));
      for (int64_t i = 0; i < C; ++i) seg->canvas_sample.push_back({t, cs.uniforms[static_cast<size_t>(i)]});
      seg->canvas_logits = static_cast<bool>(config_.canvas_trace);
      // The next input stays with the model (released when the sequence finishes).
      seg->canvas_state = static_cast<int64_t>(s.arrival);
      seg->self_conditioning_kept = cs.soft_kept;
    }
    *prompt_chunk = false;
    return true;
  }
  // Too long with the canvas: commit a chunk now (the canvas waits); without chunked prefill the whole
  // committed part, alone in its step.
  int64_t n = std::min(to_commit, budget);
  if (!config_.enable_chunked_prefill) {
    if (!alone) return false;
    n = to_commit;
  }
  if (n <= 0) return false;
  seg->tokens.assign(s.tokens.begin() + s.num_cached, s.tokens.begin() + s.num_cached + n);
  seg->commit_len = n;
  *prompt_chunk = true;
  return true;
}

void Engine::ApplyCanvasStep(Sequence& s, const CanvasForwardRows& in, int64_t vocab) {
  CanvasState& cs = *s.canvas;
  const CanvasSamplerParams& p = cs.params;
  const int64_t C = cs.length;
  const double T = CanvasTemperature(p, cs.steps_remaining);
  CanvasStepTrace trace;
  const bool tracing = static_cast<bool>(config_.canvas_trace);
  if (tracing) {
    trace.request_id = s.req.id;
    trace.index = s.index;
    trace.canvas = cs.canvases_done;
    trace.step = cs.step;
    trace.steps_remaining = cs.steps_remaining;
    trace.temperature = T;
    trace.input = cs.x;
    if (in.logits) trace.logits.assign(in.logits, in.logits + C * vocab);
  }
  std::vector<CanvasRowPick> host_picks;
  const CanvasRowPick* rows = in.picks;
  if (!rows) {
    // The host path: z = logits / T in f32 (as transformers divides), masked by the grammar, each
    // row's pick by the backend's own reference.
    // The rows are independent but for the grammar's chain: the division and each row's pick run on the
    // host's threads (a 262K-entry row's pick is ~2 ms; a canvas has 256 of them), the chain on this one.
    const float Tf = static_cast<float>(T);
    ThreadPool& pool = ThreadPool::Global();
    pool.ParallelFor(static_cast<size_t>(C), [&](size_t a, size_t b, int) {
      for (int64_t i = static_cast<int64_t>(a) * vocab; i < static_cast<int64_t>(b) * vocab; ++i) in.logits[i] /= Tf;
    });
    if (s.constraint && !ConstrainCanvasRows(s, in.logits, C, vocab)) return;
    host_picks.resize(static_cast<size_t>(C));
    pool.ParallelFor(static_cast<size_t>(C), [&](size_t a, size_t b, int) {
      for (size_t r = a; r < b; ++r)
        host_picks[r] = CanvasRowReference(in.logits + static_cast<int64_t>(r) * vocab, vocab, cs.uniforms[r]);
    });
    rows = host_picks.data();
  }
  const std::vector<double> uniforms = std::move(cs.uniforms);
  cs.uniforms.clear();
  std::vector<double> entropy(static_cast<size_t>(C));
  std::vector<int32_t> argmax(static_cast<size_t>(C)), sampled(static_cast<size_t>(C)), noise(static_cast<size_t>(C));
  double mean_entropy = 0;
  for (int64_t r = 0; r < C; ++r) {
    entropy[r] = rows[r].entropy;
    argmax[r] = rows[r].argmax;
    sampled[r] = rows[r].sampled;
    mean_entropy += entropy[r];
  }
  mean_entropy /= static_cast<double>(C);
  for (int32_t& t : noise) t = cs.Token(vocab);
  const std::vector<uint8_t> accepted = AcceptByEntropyBound(entropy, p.entropy_bound);
  std::vector<int32_t> next = RenoiseCanvas(accepted, sampled, noise);
  // The stop rule sees every step (its history must hold this canvas's argmax); the last step ends the
  // canvas whatever it says.
  const bool stop = cs.stop_rule.Step(argmax, mean_entropy) || cs.steps_remaining <= 1;
  if (s.req.emit_steps && s.req.on_event) EmitCanvasStep(s, rows, argmax, accepted);
  ++cs.decoder_forwards;
  ++cs.step;
  if (tracing) {
    trace.uniforms = uniforms;
    trace.sampled = sampled;
    trace.noise = noise;
    trace.argmax = argmax;
    trace.entropy = entropy;
    trace.accepted = accepted;
    trace.next = next;
    trace.stop = stop;
    config_.canvas_trace(trace);
  }
  if (!stop) {
    cs.x = std::move(next);
    --cs.steps_remaining;
    if (in.picks) cs.soft.clear(), cs.soft_kept = true;  // the backend's path: the model keeps the next input
    else cs.z = in.logits;  // for UpdateSelfConditioning, at the end of this step
    return;
  }

  // The canvas is done: its ARGMAX (not the last sample) is the text. It is committed by the next
  // forward (positions continue), fused with the next canvas's first step.
  s.stats.steps_per_block.push_back(cs.step);
  ++cs.canvases_done;
  s.tokens.insert(s.tokens.end(), argmax.begin(), argmax.end());
  // Output: up to the first end token (dropped with everything after it, as transformers blanks them),
  // cut at max_tokens.
  std::vector<int32_t> emit;
  bool eos = false;
  if (s.constraint) {
    // The grammar decides where the output ends: an end token where the structure is complete, or the
    // structure's completion itself (inside a structure a stop id may be ordinary text). The rows were
    // masked after this very argmax, so the grammar takes every token up to there.
    const size_t end = AdvanceGrammarBlock(s, argmax, &eos);
    if (s.finished) return;
    emit.assign(argmax.begin(), argmax.begin() + static_cast<std::ptrdiff_t>(end));
  } else {
    for (int32_t t : argmax) {
      if (EndsOutput(s, t)) {
        eos = true;
        break;
      }
      emit.push_back(t);
    }
  }
  // transformers' metric counts the end token too, and whole canvases (not cut at max_tokens).
  const int64_t kept = static_cast<int64_t>(emit.size()) + (eos ? 1 : 0);
  const int64_t room = std::max<int64_t>(0, s.req.sampling.max_tokens - s.output_tokens);
  bool cut = false;
  if (static_cast<int64_t>(emit.size()) > room) emit.resize(static_cast<size_t>(room)), cut = true;
  cs.hf_tokens += kept;
  if (!emit.empty()) EmitTokens(s, emit, {});
  cs.z = nullptr;
  cs.soft.clear();
  const bool length = cut || cs.canvases_done >= cs.canvases_total || s.output_tokens >= s.req.sampling.max_tokens ||
                      static_cast<int64_t>(s.tokens.size()) + C > config_.max_model_len;
  if ((eos && !cut) || s.stop->stopped() || length) {
    s.stats.tokens_per_forward =
        cs.decoder_forwards > 0 ? static_cast<double>(cs.hf_tokens) / static_cast<double>(cs.decoder_forwards) : 0.0;
    Finish(s, (eos && !cut) || s.stop->stopped() ? FinishReason::kStop : FinishReason::kLength);
    return;
  }
  NewCanvas(cs, model_->config().vocab_size);
}

// A live view of the step (stream_steps, --show-steps): the canvas as it would be committed now (its
// argmax) at its absolute position, the rows this step accepted and the probability each one's argmax
// has. Computed only for requests that ask.
void Engine::EmitCanvasStep(Sequence& s, const CanvasRowPick* picks, const std::vector<int32_t>& argmax,
                            const std::vector<uint8_t>& accepted) {
  const CanvasState& cs = *s.canvas;
  GenerationEvent ev;
  ev.index = s.index;
  ev.kind = GenerationEvent::Kind::kDiffusionStep;
  DiffusionStepView& v = ev.step;
  v.block_start = static_cast<int64_t>(s.tokens.size());  // the canvas follows the committed tokens
  v.step = cs.step;
  v.block_tokens = argmax;
  for (size_t r = 0; r < accepted.size(); ++r) {
    if (!accepted[r]) continue;
    v.unmasked.push_back(v.block_start + static_cast<int64_t>(r));
    v.conf.push_back(picks[r].argmax_prob);
  }
  s.req.on_event(ev);
}

bool Engine::ConstrainCanvasRows(Sequence& s, float* z, int64_t C, int64_t vocab) {
  try {
    // The committed text's grammar state, advanced on a copy by this step's argmax row after row: the
    // tokens the canvas would commit if it stopped now. Each row is masked where that prefix leaves
    // it, so its entropy, sample and argmax (and the self-conditioning input) all see the constraint.
    // Rows are not conditioned on their own samples: those are proposals the next step revises.
    GrammarConstraint chain = *s.constraint;
    bool ended = false;
    for (int64_t r = 0; r < C; ++r) {
      float* row = z + r * vocab;
      if (!ended && chain.MaskLogits(row, vocab)) {
        const auto best = static_cast<int32_t>(RowArgmax(row, vocab));
        if (chain.EndsAtLastMask(best)) {
          ended = true;
        } else if (!chain.Accept(best)) {
          Fail(ErrorKind::kInternal, "canvas row {}: token {} was drawn outside the grammar's mask", r, best);
        }
        continue;
      }
      // Past the output's end (an end token above, or nothing more allowed): the row is never output;
      // pinning it to one token keeps it certain (entropy 0) and stable for the stop rule.
      ended = true;
      std::fill(row, row + vocab, -std::numeric_limits<float>::infinity());
      row[chain.filler()] = 0.f;
    }
  } catch (const Error& e) {
    FailOnGrammar(s, e);
    return false;
  }
  return true;
}

void Engine::UpdateSelfConditioning(const std::vector<Sequence*>& seqs) {
  // A product a canvas, straight from the forward's result (no gathered copy of [rows, vocab]).
  for (Sequence* s : seqs) {
    s->canvas->soft = model_->SelfConditioningInput(s->canvas->z, s->canvas->length);
    s->canvas->z = nullptr;
  }
}

}  // namespace tessera
