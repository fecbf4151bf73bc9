// tessera engine: Engine implementation (see engine.h): intake and validation, admission,
// batch building with a token budget, page provisioning with preemption, and the per-sequence
// bookkeeping after each forward (autoregressive sampling, diffusion unmasking, stop rules).
#include "engine/engine.h"
#include "engine/memory_plan.h"

#include <algorithm>
#include <cmath>
#include <new>
#include <string_view>

#include <spdlog/spdlog.h>

#include "core/error.h"
#include "engine/sequence.h"
#include "io/mapped_file.h"
#include "model/model.h"

namespace tessera {

const char* FinishReasonName(FinishReason r) {
  switch (r) {
    case FinishReason::kNone: return "none";
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kError: return "error";
  }
  return "?";
}

namespace {

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

Engine::Engine(Model* model, const Tokenizer* tokenizer, const EngineConfig& config)
    : model_(model), tokenizer_(tokenizer), config_(config), weight_faults_base_(MappedFileFaultCount()) {
  const ModelConfig& mc = model_->config();
  // Uniform-state canvas diffusion (DiffusionGemma) generates through its canvas loop
  // (engine_canvas.cpp), on the CPU and CUDA backends alike.
  canvas_ = mc.canvas_length > 0;
  if (canvas_) {
    if (config_.force_diffusion)
      Fail(ErrorKind::kInvalidArgument, "{} is a canvas-diffusion model: masked block diffusion cannot be forced on it",
           FamilyName(mc.family));
    config_.canvas.Validate("engine canvas settings");
    if (config_.canvas.canvas_length > mc.canvas_length)
      Fail(ErrorKind::kInvalidArgument, "engine canvas settings: canvas_length {} exceeds the model's {}",
           config_.canvas.canvas_length, mc.canvas_length);
    if (config_.canvas.canvas_length == 0) config_.canvas.canvas_length = mc.canvas_length;
  }
  if (config_.max_model_len <= 0) config_.max_model_len = mc.max_position_embeddings;
  if (config_.page_size <= 0) Fail(ErrorKind::kInvalidArgument, "page size must be positive");
  if (config_.max_num_seqs <= 0) Fail(ErrorKind::kInvalidArgument, "max_num_seqs must be positive");
  if (config_.max_num_batched_tokens <= 0)
    Fail(ErrorKind::kInvalidArgument, "max_num_batched_tokens must be positive");
  if (!(config_.router_temperature >= kMinRouterTemperature && config_.router_temperature <= kMaxRouterTemperature))
    Fail(ErrorKind::kInvalidArgument, "router temperature must be in [{}, {}], got {}", kMinRouterTemperature,
         kMaxRouterTemperature, config_.router_temperature);
  int64_t pages = config_.num_pages;
  const int64_t kv_per_token = Model::KvBytesPerToken(mc, model_->KvCacheDType());  // bf16 pages: half the bytes
  if (pages <= 0) {
    int64_t per_page = std::max<int64_t>(1, kv_per_token * config_.page_size);
    pages = config_.kv_cache_bytes / per_page;
  }
  pages = std::max<int64_t>(pages, 1);
  hybrid_ = mc.NumLayersOf(LayerKind::kLinearAttention) > 0;
  // Hybrid models: one state slot per running sequence, then the prefix cache's snapshot slots.
  if (config_.num_state_snapshots < 0) Fail(ErrorKind::kInvalidArgument, "num_state_snapshots must be >= 0");
  const StatePlan state = PlanState(config_, mc, 0);  // the GPU memory plan counts the same
  const int64_t slots = state.sequence_slots, snapshots = state.snapshots;
  model_->AllocateCaches(pages, config_.page_size, slots + snapshots);
  pool_ = std::make_unique<PagePool>(pages, config_.page_size, slots);
  if (config_.enable_prefix_caching) {
    std::vector<int32_t> snapshot_slots;
    for (int64_t i = snapshots - 1; i >= 0; --i) snapshot_slots.push_back(static_cast<int32_t>(slots + i));
    prefix_cache_ = std::make_unique<PrefixCache>(pool_.get(), std::move(snapshot_slots));
  }
  if (config_.collect_expert_stats && mc.num_experts > 0) expert_routed_.assign(mc.num_layers * mc.num_experts, 0);

  eos_ids_.assign(mc.eos_token_ids.begin(), mc.eos_token_ids.end());
  info_.name = config_.served_model_name;
  info_.max_model_len = config_.max_model_len;
  info_.weight_format = mc.WeightFormat();
  info_.vocab_size = mc.vocab_size;
  info_.diffusion = mc.diffusion || config_.force_diffusion;
  info_.default_diffusion = config_.default_diffusion;
  info_.canvas_length = canvas_ ? mc.canvas_length : 0;
  info_.canvas_defaults = config_.canvas;
  info_.sampling_defaults = config_.sampling_defaults;
  info_.num_layers = mc.num_layers;
  info_.num_experts = mc.num_experts;
  snapshot_.kv_pages_total = pages;
  snapshot_.state_slots_total = slots;
  snapshot_.expert_routed_tokens = expert_routed_;
}

Engine::~Engine() { Stop(); }

void Engine::Submit(GenerationRequest req) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    incoming_.push_back(std::move(req));
    snapshot_.requests_waiting++;
  }
  cv_.notify_one();
}

EngineSnapshot Engine::Snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  EngineSnapshot s = snapshot_;
  s.ready = ready_;
  return s;
}

void Engine::SetReady(bool ready) {
  std::lock_guard<std::mutex> lock(mu_);
  ready_ = ready;
}

void Engine::Start() {
  thread_ = std::thread([this] {
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        if (stop_) break;
        if (incoming_.empty() && waiting_.empty() && running_.empty())
          cv_.wait(lock, [this] { return stop_ || !incoming_.empty(); });
        if (stop_) break;
      }
      try {
        Step();
      } catch (const std::exception& e) {
        FailRunning(e);
      }
    }
  });
}

// A failed forward must not take the server down: fail what was running, keep serving. None of it
// failed by its own input, so no 400: out of memory (cudaMalloc in a step: the CUDA backend's "CUDA
// out of memory allocating ...", a driver call's "out of memory", the host's bad_alloc) is a 503 the
// client may retry once other requests have ended and freed their buffers; anything else a 500.
void Engine::FailRunning(const std::exception& e) {
  const bool oom = dynamic_cast<const std::bad_alloc*>(&e) != nullptr ||
                   std::string_view(e.what()).find("out of memory") != std::string_view::npos;
  spdlog::error("engine step failed ({} request(s) running, failed{}): {}", running_.size(),
                oom ? " as unavailable" : "", e.what());
  const std::string msg = oom ? fmt::format("engine error: {} (the step was dropped; retry later)", e.what())
                              : std::string("engine error: ") + e.what();
  for (auto& s : running_) Finish(*s, FinishReason::kError, msg, false, /*unavailable=*/oom, /*server_fault=*/!oom);
  running_.clear();
}

void Engine::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Engine::RunUntilIdle() {
  for (;;) {
    bool worked = Step();
    std::lock_guard<std::mutex> lock(mu_);
    if (!worked && incoming_.empty() && waiting_.empty() && running_.empty()) return;
  }
}

bool Engine::Validate(Sequence& seq, std::string* error) const {
  const ModelConfig& mc = model_->config();
  const auto& r = seq.req;
  if (r.prompt.empty()) return *error = "the prompt is empty", false;
  for (int32_t t : r.prompt)
    if (t < 0 || t >= mc.vocab_size)
      return *error = fmt::format("token id {} is out of range [0, {})", t, mc.vocab_size), false;
  if (static_cast<int64_t>(r.prompt.size()) >= config_.max_model_len)
    return *error = fmt::format("the prompt has {} tokens; max_model_len is {}", r.prompt.size(),
                                config_.max_model_len), false;
  if (r.sampling.max_tokens <= 0) return *error = "max_tokens must be at least 1", false;
  if (r.grammar && (!grammar_compiler_ || &r.grammar->vocab() != &grammar_compiler_->vocab()))
    return *error = "the request's grammar was not compiled by this engine (Engine::CompileGrammar)", false;
  if (r.grammar_trigger && !ValidTrigger(r, error)) return false;
  if (r.sampling.temperature < 0 || !std::isfinite(r.sampling.temperature))
    return *error = "temperature must be >= 0", false;
  if (r.sampling.top_p <= 0 || r.sampling.top_p > 1) return *error = "top_p must be in (0, 1]", false;
  if (r.sampling.top_k < 0) return *error = "top_k must be >= 0", false;
  if (r.sampling.min_p < 0 || r.sampling.min_p > 1) return *error = "min_p must be in [0, 1]", false;
  if (r.sampling.repetition_penalty <= 0) return *error = "repetition_penalty must be > 0", false;
  if (r.sampling.min_tokens < 0 || r.sampling.min_tokens > r.sampling.max_tokens)
    return *error = "min_tokens must be in [0, max_tokens]", false;
  if (r.n < 1 || r.n > kMaxChoices)
    return *error = fmt::format("n must be in [1, {}], got {}", kMaxChoices, r.n), false;
  for (const auto& [t, bias] : r.sampling.logit_bias) {
    if (t < 0 || t >= mc.vocab_size)
      return *error = fmt::format("logit_bias token id {} is out of range [0, {})", t, mc.vocab_size), false;
    if (!std::isfinite(bias)) return *error = fmt::format("logit_bias of token {} is not finite", t), false;
  }
  if (r.router_temperature &&
      !(*r.router_temperature >= kMinRouterTemperature && *r.router_temperature <= kMaxRouterTemperature))
    return *error = fmt::format("router temperature must be in [{}, {}], got {}", kMinRouterTemperature,
                                kMaxRouterTemperature, *r.router_temperature),
           false;
  if (canvas_) return ValidateCanvas(seq, error);
  if (r.canvas) return *error = "canvas sampler settings were given but this model is not a canvas-diffusion model", false;
  if (info_.diffusion != r.diffusion.has_value())
    return *error = info_.diffusion ? "this is a diffusion model: the request needs diffusion settings"
                                 : "diffusion settings were given but this model is autoregressive", false;
  if (r.diffusion) {
    const auto& d = *r.diffusion;
    if (d.block_size <= 0 || d.block_size > config_.max_model_len)
      return *error = fmt::format("block size must be in [1, {}], got {}", config_.max_model_len, d.block_size), false;
    if (d.steps <= 0) return *error = fmt::format("steps must be at least 1, got {}", d.steps), false;
    if (!(d.threshold > 0 && d.threshold <= 1))
      return *error = fmt::format("threshold must be in (0, 1], got {}", d.threshold), false;
    if (d.mask_token_id < 0 || d.mask_token_id >= mc.vocab_size)
      return *error = fmt::format("mask token id {} is out of range [0, {})", d.mask_token_id, mc.vocab_size), false;
    // A committed token's log-probability is its confidence when it was unmasked; the alternatives
    // at that step are not kept.
    if (r.sampling.top_logprobs > 0) return *error = "top_logprobs are not available for diffusion models", false;
  }
  int64_t need = static_cast<int64_t>(r.prompt.size()) + (r.diffusion ? 2 * r.diffusion->block_size : 1);
  if (pool_->PagesFor(need) > pool_->num_pages())
    return *error = fmt::format("the KV cache ({} pages of {} tokens) cannot hold this request", pool_->num_pages(),
                                pool_->page_size()), false;
  return true;
}

void Engine::Intake() {
  std::deque<GenerationRequest> fresh;
  {
    std::lock_guard<std::mutex> lock(mu_);
    fresh.swap(incoming_);
  }
  for (auto& req : fresh) {
    auto first = std::make_unique<Sequence>();
    first->req = std::move(req);
    first->arrived_at = Clock::now();
    std::string error;
    if (!Validate(*first, &error)) {
      GenerationEvent ev;
      ev.kind = GenerationEvent::Kind::kError;
      ev.error = error;
      if (first->req.on_event) first->req.on_event(ev);
      continue;
    }
    // One sequence per choice: the later ones are copies of the request with seeds of their own.
    const int64_t n = first->req.n;
    std::shared_ptr<ChoiceGroup> group;
    GenerationRequest base;
    if (n > 1) {
      group = std::make_shared<ChoiceGroup>();
      base = first->req;
    }
    const Clock::time_point arrived = first->arrived_at;
    for (int64_t i = 0; i < n; ++i) {
      std::unique_ptr<Sequence> seq = i == 0 ? std::move(first) : std::make_unique<Sequence>();
      if (i > 0) {
        seq->req = base;
        seq->arrived_at = arrived;
        if (base.sampling.seed) seq->req.sampling.seed = ChoiceSeed(*base.sampling.seed, i);
      }
      seq->index = static_cast<int32_t>(i);
      seq->group = group;
      InitSequence(*seq);
      // Nothing of the prompt to share (caching off, a prompt shorter than a page): no waiting.
      if (i == 0 && group && !PromptShareable(*seq)) group->prompt_ready = true;
      waiting_.push_back(std::move(seq));
    }
  }
}

void Engine::InitSequence(Sequence& seq) {
  seq.arrival = arrival_counter_++;
  seq.router_temperature = seq.req.router_temperature.value_or(config_.router_temperature);
  seq.tokens = seq.req.prompt;
  seq.prompt_len = static_cast<int64_t>(seq.tokens.size());
  seq.stats.prompt_tokens = seq.prompt_len;
  std::vector<int32_t> end_ids = seq.req.sampling.stop_token_ids;
  if (!seq.req.sampling.ignore_eos) end_ids.insert(end_ids.end(), eos_ids_.begin(), eos_ids_.end());
  seq.sampler = std::make_unique<Sampler>(seq.req.sampling, seq.req.prompt, std::move(end_ids));
  if (seq.req.diffusion) seq.diffusion.emplace(*seq.req.diffusion, seq.req.prompt);
  if (canvas_) InitCanvas(seq);
  if (seq.req.grammar)
    seq.constraint = std::make_unique<GrammarConstraint>(seq.req.grammar, seq.req.sampling.stop_token_ids,
                                                         seq.req.sampling.ignore_eos, seq.req.grammar_trigger);
  if (tokenizer_) seq.detok = std::make_unique<IncrementalDecoder>(*tokenizer_, true, seq.req.keep_special_ids);
  seq.stop = std::make_unique<StopMatcher>(seq.req.sampling.stop);
}

void Engine::ReleaseResources(Sequence& seq) {
  // Last pages first: cached ones then enter the LRU tail-first, so a prefix's later pages are
  // evicted before its earlier ones (which more requests share).
  for (auto it = seq.cache.pages.rbegin(); it != seq.cache.pages.rend(); ++it) pool_->Release(*it);
  seq.cache.pages.clear();
  if (seq.cache.state_slot >= 0) pool_->ReleaseStateSlot(seq.cache.state_slot);
  seq.cache.state_slot = -1;
  seq.num_cached = 0;
  seq.pages_registered = 0;
  seq.snapshot_at = -1;
}

void Engine::Finish(Sequence& seq, FinishReason reason, const std::string& error, bool invalid_request,
                    bool unavailable, bool server_fault) {
  if (seq.finished) return;
  seq.finished = true;
  ReleaseResources(seq);
  if (seq.canvas) model_->ReleaseCanvasState(static_cast<int64_t>(seq.arrival));  // its kept input, if any
  if (seq.group && seq.index == 0) seq.group->prompt_ready = true;  // the other choices go on alone
  if (reason == FinishReason::kError) {
    GenerationEvent ev;
    ev.index = seq.index;
    ev.kind = GenerationEvent::Kind::kError;
    ev.error = error;
    ev.invalid_request = invalid_request;
    ev.unavailable = unavailable;
    ev.server_fault = server_fault;
    if (seq.req.on_event) seq.req.on_event(ev);
    return;
  }
  // Text still held back (an undecided stop-string prefix, an incomplete character) goes out now.
  if (reason != FinishReason::kCancelled && !seq.stop->stopped()) {
    std::string tail;
    if (seq.detok) tail = seq.stop->Feed(seq.detok->Flush());
    tail += seq.stop->Flush();
    if (!tail.empty() && seq.req.on_event) {
      GenerationEvent ev;
      ev.index = seq.index;
      ev.kind = GenerationEvent::Kind::kTokens;
      ev.text = tail;
      seq.req.on_event(ev);
    }
  }
  auto now = Clock::now();
  seq.stats.completion_tokens = seq.output_tokens;
  seq.stats.total_seconds = Seconds(seq.arrived_at, now);
  GenerationEvent ev;
  ev.index = seq.index;
  ev.kind = GenerationEvent::Kind::kFinished;
  ev.finish_reason = reason;
  ev.stats = seq.stats;
  ev.raw_output.assign(seq.tokens.begin() + seq.prompt_len, seq.tokens.end());
  if (seq.req.on_event) seq.req.on_event(ev);
}

void Engine::EmitTokens(Sequence& seq, const std::vector<int32_t>& tokens, std::vector<TokenLogprob> logprobs,
                        bool with_text) {
  GenerationEvent ev;
  ev.index = seq.index;
  ev.kind = GenerationEvent::Kind::kTokens;
  for (size_t i = 0; i < tokens.size() && !seq.stop->stopped(); ++i) {
    ev.tokens.push_back(tokens[i]);
    if (i < logprobs.size()) ev.logprobs.push_back(std::move(logprobs[i]));
    ++seq.output_tokens;
    // Ids past the tokenizer's vocabulary (embedding rows it has no token for) carry no text.
    if (with_text && seq.detok && tokens[i] < tokenizer_->vocab_size()) ev.text += seq.stop->Feed(seq.detok->Push(tokens[i]));
  }
  if (!seq.first_token_sent) {
    seq.first_token_sent = true;
    seq.stats.first_token_seconds = Seconds(seq.arrived_at, Clock::now());
  }
  if (seq.req.on_event) seq.req.on_event(ev);
}

bool Engine::EnsurePages(Sequence& seq, int64_t positions) {
  int64_t need = pool_->PagesFor(positions);
  while (static_cast<int64_t>(seq.cache.pages.size()) < need) {
    int32_t p = pool_->AllocatePage();
    if (p < 0) return false;
    seq.cache.pages.push_back(p);
  }
  return true;
}

void Engine::Preempt(Sequence& victim) {
  // Recompute later: drop the caches, keep the tokens (and the diffusion block in progress).
  spdlog::debug("preempting request {} ({} cached tokens)", victim.req.id, victim.num_cached);
  ReleaseResources(victim);
}

Sequence* Engine::PickVictim(const Sequence& needy) {
  // The running sequence the policy would admit last, `needy` included (it then waits):
  // kPriority the lowest priority (largest value), else and among equals the latest arrival.
  // Null when `needy` runs alone (then nothing can make room for it).
  const bool by_priority = config_.policy == SchedulingPolicy::kPriority;
  Sequence* victim = nullptr;
  bool others = false;
  for (auto& r : running_) {
    Sequence* c = r.get();
    if (c->finished) continue;
    others = others || c != &needy;
    if (!victim || (by_priority && c->req.priority != victim->req.priority ? c->req.priority > victim->req.priority
                                                                            : c->arrival > victim->arrival))
      victim = c;
  }
  return others ? victim : nullptr;
}

void Engine::Admit() {
  auto order = [this](const std::unique_ptr<Sequence>& a, const std::unique_ptr<Sequence>& b) {
    switch (config_.policy) {
      case SchedulingPolicy::kShortestPromptFirst:
        if (a->tokens.size() != b->tokens.size()) return a->tokens.size() < b->tokens.size();
        break;
      case SchedulingPolicy::kPriority:
        if (a->req.priority != b->req.priority) return a->req.priority < b->req.priority;
        break;
      case SchedulingPolicy::kFcfs: break;
    }
    return a->arrival < b->arrival;
  };
  waiting_.sort(order);
  for (auto it = waiting_.begin();
       it != waiting_.end() && static_cast<int64_t>(running_.size()) < config_.max_num_seqs;) {
    Sequence& s = **it;
    if (s.req.cancelled->load()) {
      Finish(s, FinishReason::kCancelled);
      it = waiting_.erase(it);
      continue;
    }
    // A later choice of an n > 1 request waits for the first one's prompt pages; others pass it.
    if (s.waits_for_prompt()) {
      ++it;
      continue;
    }
    // The cached prefix first (its pages may leave the evictable LRU), then admit only when the
    // first chunk's new pages are free, so admission never forces a preemption.
    PrefixCache::Match hit;
    if (prefix_cache_) hit = AttachCachedPrefix(s);
    const int64_t todo = static_cast<int64_t>(s.tokens.size()) - s.num_cached;
    const int64_t first = s.num_cached + std::min<int64_t>(todo, config_.max_num_batched_tokens) + 1;
    const int64_t new_pages = pool_->PagesFor(first) - static_cast<int64_t>(s.cache.pages.size());
    if (pool_->free_pages() < new_pages) {
      RollbackPrefix(s);
      break;
    }
    if (hybrid_) {
      s.cache.state_slot = pool_->AllocateStateSlot();
      if (s.cache.state_slot < 0) {
        RollbackPrefix(s);
        break;
      }
      if (hit.snapshot_slot >= 0) model_->CopyStateSlot(hit.snapshot_slot, s.cache.state_slot);
      else model_->ResetStateSlot(s.cache.state_slot);
    }
    if (prefix_cache_) {
      prefix_queries_ += static_cast<int64_t>(s.tokens.size());
      prefix_hits_ += hit.tokens;
      if (!s.started) s.stats.cached_tokens = hit.tokens;
      PlanSnapshot(s);
    }
    if (!s.started) {
      s.started = true;
      s.started_at = Clock::now();
      s.stats.queue_seconds = Seconds(s.arrived_at, s.started_at);
    }
    running_.push_back(std::move(*it));
    it = waiting_.erase(it);
  }
}

bool Engine::WeightsFaulted() {
  if (!fault_.empty()) return true;
  if (MappedFileFaultCount() == weight_faults_base_) return false;
  std::string path = MappedFileFaultPath();
  fault_ = fmt::format("the model's weights changed under the running server: {} was truncated (a read past its "
                       "end); outputs would be wrong, so every request fails until tessera is restarted",
                       path.empty() ? "a checkpoint file" : path);
  spdlog::error("{}", fault_);
  std::lock_guard<std::mutex> lock(mu_);
  snapshot_.fault = fault_;
  return true;
}

void Engine::FailAllForFault() {
  for (auto* list : {&running_, &waiting_}) {
    for (auto& s : *list) Finish(*s, FinishReason::kError, fault_, false, /*unavailable=*/true);
    list->clear();
  }
}

bool Engine::Step() {
  Intake();
  if (WeightsFaulted()) {
    FailAllForFault();
    PublishSnapshot();
    return false;
  }
  // Cancelled requests leave first so their pages serve this step. Waiting ones too: Admit reaches
  // them only while a sequence slot is free, and under a full batch clients that gave up (timeouts,
  // closed connections) piled up in the queue and in tessera_num_requests_waiting.
  for (auto* list : {&running_, &waiting_}) {
    for (auto it = list->begin(); it != list->end();) {
      if ((*it)->req.cancelled->load()) {
        Finish(**it, FinishReason::kCancelled);
        it = list->erase(it);
      } else {
        ++it;
      }
    }
  }
  Admit();
  if (running_.empty()) {
    PublishSnapshot();
    return false;
  }

  // Plan one segment per running sequence within the token budget; decode tokens and diffusion
  // blocks (small, latency-bound) before prompt chunks.
  struct Planned {
    Sequence* seq;
    Segment segment;
    bool prompt_chunk;  // a prefill that produces no output yet
  };
  std::vector<Planned> plan;
  int64_t budget = config_.max_num_batched_tokens;
  std::vector<Sequence*> order;
  for (auto& s : running_) order.push_back(s.get());
  std::stable_sort(order.begin(), order.end(), [](Sequence* a, Sequence* b) {
    bool a_prefill = a->num_cached < a->prompt_len, b_prefill = b->num_cached < b->prompt_len;
    return !a_prefill && b_prefill;
  });
  for (Sequence* s : order) {
    Segment seg;
    seg.cache = &s->cache;
    seg.first_pos = s->num_cached;
    seg.router_temperature = s->router_temperature;
    bool prompt_chunk = false;
    const bool planned = s->canvas ? PlanCanvas(*s, budget, plan.empty(), &seg, &prompt_chunk)
                                   : PlanTokens(*s, budget, plan.empty(), &seg, &prompt_chunk);
    if (!planned) continue;
    int64_t n = static_cast<int64_t>(seg.tokens.size());
    if (n > budget && !plan.empty()) continue;
    budget -= n;
    plan.push_back({s, std::move(seg), prompt_chunk});
  }

  // Pages for every planned segment; when the pool runs dry, preempt the latest arrivals.
  for (size_t i = 0; i < plan.size(); ++i) {
    Sequence* s = plan[i].seq;
    int64_t positions = plan[i].segment.first_pos + static_cast<int64_t>(plan[i].segment.tokens.size());
    while (!EnsurePages(*s, positions)) {
      Sequence* victim = PickVictim(*s);
      if (!victim) {
        Finish(*s, FinishReason::kError, "out of KV cache pages for this request");
        break;
      }
      Preempt(*victim);
      plan.erase(std::remove_if(plan.begin(), plan.end(), [&](const Planned& p) { return p.seq == victim; }),
                 plan.end());
      for (auto it = running_.begin(); it != running_.end(); ++it)
        if (it->get() == victim) {
          waiting_.push_front(std::move(*it));
          running_.erase(it);
          break;
        }
      // `plan` may have shifted: restart the provisioning from the beginning.
      i = static_cast<size_t>(-1);
      break;
    }
  }
  plan.erase(std::remove_if(plan.begin(), plan.end(), [](const Planned& p) { return p.seq->finished; }), plan.end());

  if (!plan.empty()) {
    // Rows without penalties or log-probabilities are drawn by the backend (only the tokens come
    // back); the rules take the sequences' draws now, in the order the host sampler would.
    for (auto& p : plan) {
      Sequence& s = *p.seq;
      if (p.prompt_chunk || p.segment.logits_rows.empty() || s.canvas) continue;  // canvas rows: PlanCanvas
      if (s.diffusion) {
        // A logit bias changes the block's rows before the draw: those come back to the host.
        // So do a constrained block's: each position is drawn under its prefix's grammar mask.
        if (!s.sampler->has_logit_bias() && !s.constraint) p.segment.sample = s.diffusion->RulesForRows(*s.sampler);
      } else if (s.sampler->NextIsPlainRule() && s.req.sampling.top_logprobs < 0) {
        // A constrained row too, its grammar's mask applied where the logits are.
        std::vector<uint32_t> mask;
        if (!MaskForDeviceSampling(s, &mask)) continue;
        p.segment.sample = {s.sampler->RowRule()};
        p.segment.sample_masks = std::move(mask);
      }
    }
    Batch batch;
    for (auto& p : plan) batch.segments.push_back(p.segment);
    ForwardOptions opts;
    opts.collect_expert_stats = config_.collect_expert_stats;
    ForwardResult result = model_->Forward(batch, opts);
    if (WeightsFaulted()) {  // this forward read zeros where the file lost its bytes: none of it goes out
      FailAllForFault();
      PublishSnapshot();
      return true;
    }
    ++total_forwards_;
    total_rows_ += result.rows_processed;
    int64_t distinct_sum = 0, moe_layers = 0;
    for (int32_t d : result.distinct_experts_per_layer)
      if (d >= 0) distinct_sum += d, ++moe_layers;
    if (!expert_routed_.empty()) {
      const size_t E = static_cast<size_t>(model_->config().num_experts);
      for (size_t l = 0; l < result.expert_token_counts.size(); ++l)
        for (size_t e = 0; e < result.expert_token_counts[l].size() && e < E; ++e)
          if ((l + 1) * E <= expert_routed_.size()) expert_routed_[l * E + e] += result.expert_token_counts[l][e];
    }

    // Each planned segment's rows of the result: host logits, the backend's picks, or a canvas's.
    const int64_t vocab = model_->config().vocab_size;
    struct Rows {
      float* logits = nullptr;
      const ForwardResult::Pick* picks = nullptr;
      CanvasForwardRows canvas;
    };
    std::vector<Rows> rows(plan.size());
    size_t row = 0, pick = 0, canvas_row = 0;  // next row of result.logits / result.picks / result.canvas_*
    for (size_t i = 0; i < plan.size(); ++i) {
      const Segment& seg = plan[i].segment;
      const bool sampled = !seg.sample.empty(), canvas_drawn = !seg.canvas_sample.empty();
      if (canvas_drawn) {
        rows[i].canvas.picks = result.canvas_picks.data() + canvas_row;
        if (!result.canvas_logits.empty()) rows[i].canvas.logits = result.canvas_logits.data() + canvas_row * vocab;
      } else if (sampled) {
        rows[i].picks = result.picks.data() + pick;
      } else {
        rows[i].logits = result.logits.data() + row * vocab;
        if (plan[i].seq->canvas) rows[i].canvas.logits = rows[i].logits;
      }
      (canvas_drawn ? canvas_row : sampled ? pick : row) += seg.logits_rows.size();
    }
    // Constrained blocks drawn on the host, all of them at once (DrawConstrainedBlocks).
    std::vector<Sequence*> chain_seqs;
    std::vector<float*> chain_logits;
    std::vector<size_t> chain_of(plan.size(), SIZE_MAX);
    for (size_t i = 0; i < plan.size(); ++i) {
      Sequence& s = *plan[i].seq;
      if (plan[i].prompt_chunk || s.canvas || !s.diffusion || !s.constraint || !rows[i].logits) continue;
      chain_of[i] = chain_seqs.size();
      chain_seqs.push_back(&s);
      chain_logits.push_back(rows[i].logits);
    }
    std::vector<BlockDraw> draws;
    if (!chain_seqs.empty()) DrawConstrainedBlocks(chain_seqs, chain_logits, &draws);

    std::vector<Sequence*> canvases_going_on;  // host-path canvases: their self-conditioning inputs below
    for (size_t i = 0; i < plan.size(); ++i) {
      const Planned& p = plan[i];
      Sequence& s = *p.seq;
      const Segment& seg = p.segment;
      s.num_cached += seg.commit_len;
      if (prefix_cache_ && seg.commit_len > 0) OnCommitted(s);
      // The first choice's prompt is committed (its full pages are now in the prefix cache): the
      // other choices may start and take them.
      if (!p.prompt_chunk && s.group && s.index == 0) s.group->prompt_ready = true;
      s.stats.forwards++;
      s.stats.expert_distinct_sum += distinct_sum;
      s.stats.expert_layer_steps += moe_layers;
      if (p.prompt_chunk) continue;
      if (s.canvas) {
        ApplyCanvasStep(s, rows[i].canvas, vocab);
        if (s.canvas->z) canvases_going_on.push_back(&s);
      } else if (!s.diffusion) {
        ApplyTokenRow(s, rows[i].logits, rows[i].picks);
      } else {
        ApplyBlockStep(s, rows[i].logits, rows[i].picks, seg.logits_rows.size(),
                       chain_of[i] == SIZE_MAX ? nullptr : &draws[chain_of[i]]);
      }
    }
    if (!canvases_going_on.empty()) UpdateSelfConditioning(canvases_going_on);
  }
  running_.remove_if([](const std::unique_ptr<Sequence>& s) { return s->finished; });
  PublishSnapshot();
  return true;
}

void Engine::PublishSnapshot() {
  std::lock_guard<std::mutex> lock(mu_);
  snapshot_.requests_running = static_cast<int64_t>(running_.size());
  snapshot_.requests_waiting = static_cast<int64_t>(waiting_.size() + incoming_.size());
  snapshot_.kv_pages_used = pool_->used_pages();
  snapshot_.kv_pages_cached = pool_->cached_free_pages();
  snapshot_.state_slots_used = pool_->num_state_slots() - pool_->free_state_slots();
  snapshot_.prefix_cache_queries = prefix_queries_;
  snapshot_.prefix_cache_hits = prefix_hits_;
  if (!expert_routed_.empty()) snapshot_.expert_routed_tokens = expert_routed_;
}

}  // namespace tessera
