// tessera server: the generation half of Session: a /v1/chat/completions or /v1/completions
// request from its parsed body through admission (rate limit, concurrency cap), the engine's events
// (SSE chunks or one JSON answer) to its end, timeout, or the client leaving.
#include <algorithm>

#include "core/error.h"
#include "server/http_session.h"

namespace tessera {
namespace {

// Strict tools under tool_choice auto: the engine constrains each call the model opens. The trigger
// is the template's call opening, which must be one token (an added token: <tool_call> in Qwen
// vocabularies) for the engine to see it drawn; the "\n" the template writes after it is forced (the
// call's grammar starts at '{'), and so is the closing "\n</tool_call>" once the object is complete.
std::shared_ptr<const GrammarTrigger> ToolCallTrigger(PromptBuilder& prompts, const StructuredConstraint& c) {
  auto t = std::make_shared<GrammarTrigger>();
  t->trigger_ids = prompts.EncodeContinuation("<tool_call>");
  if (t->trigger_ids.size() != 1)
    throw InvalidRequest(fmt::format("'{}' under tool_choice auto needs '<tool_call>' to be one token of the model's "
                                     "vocabulary (it is {} here), so that a call can be told apart from text",
                                     c.strict_param, t->trigger_ids.size()),
                         c.strict_param);
  t->opening = prompts.EncodeContinuation("\n");
  t->closing = prompts.EncodeContinuation("\n</tool_call>");
  return t;
}

}  // namespace

void Session::StartGeneration(http::request<http::string_body>& req, bool chat) {
  if (srv_->draining) throw ApiError(503, "service_unavailable", "the server is shutting down");
  const EngineSnapshot snap = srv_->engine.Snapshot();
  if (!snap.fault.empty()) throw ApiError(503, "service_unavailable", snap.fault);
  if (!snap.ready) throw ApiError(503, "service_unavailable", "the model is still loading");
  // Parsing the body and building the prompt take seconds for a body of megabytes (the chat
  // template, the tokenizer): on the prompt pool, not on the I/O threads, which serve every
  // connection. The session reads nothing more until this request is answered.
  net::post(srv_->prompt_pool, [self = shared_from_this(), body = std::move(req.body()), chat] {
    std::shared_ptr<Gen> g;
    std::exception_ptr failure;
    try {
      g = self->PrepareGeneration(body, chat);
    } catch (...) {
      failure = std::current_exception();
    }
    net::post(self->executor(), [self, g, failure, chat] {
      if (failure) return self->SendFailure(failure);
      try {
        self->AdmitGeneration(g, chat);
      } catch (...) {
        self->SendFailure(std::current_exception());
      }
    });
  });
}

// The request parsed and its prompt built, without touching the session (this runs on the prompt
// pool): prompts, the engine's model info and the config are safe from any thread.
std::shared_ptr<Gen> Session::PrepareGeneration(const std::string& body_text, bool chat) {
  ojson body = ParseRequestJson(body_text);
  const EngineModelInfo& info = srv_->engine.ModelInfo();
  auto g = std::make_shared<Gen>();
  const DiffusionParams ddef = srv_->DiffusionDefaults();
  g->req = chat ? ParseChatRequest(body, info, ddef) : ParseCompletionRequest(body, info, ddef);
  // Content safety reviews the prompt's text before the template sees it (a mask changes it).
  if (srv_->safety_in || srv_->classifier) {
    CheckInputSafety(*g, chat);
    if (g->refused) return g;
  }
  try {
    if (chat) {
      g->format = srv_->prompts.chat_format();
      g->prompt = srv_->prompts.BuildChat(g->req.messages, g->req.ParseTools() ? g->req.tools : ojson(),
                                          g->req.chat_template_kwargs);
      g->forced_prefix = ForcedToolCallPrefix(g->req, g->format);
      if (!g->forced_prefix.empty()) {
        // Mid-prompt: no special tokens (a tokenizer that adds BOS would put one inside).
        std::vector<int32_t> opening = srv_->prompts.EncodeContinuation(g->forced_prefix);
        g->prompt.insert(g->prompt.end(), opening.begin(), opening.end());
      }
      // The output parsers need the format's markers in the text, and to know where the reply starts.
      const MarkerEncoder encode = [this](const std::string& m) { return srv_->prompts.EncodeContinuation(m); };
      g->keep_special_ids = OutputMarkerIds(g->format, encode);
      g->in_reasoning = PromptOpensReasoning(g->format, g->prompt, encode);
    }
    else
      g->prompt = g->req.prompt_is_ids ? g->req.prompt_ids : srv_->prompts.Encode(g->req.prompt_text);
    if (g->req.echo) g->echo = g->req.prompt_is_ids ? srv_->prompts.Decode(g->req.prompt_ids) : g->req.prompt_text;
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::kInvalidArgument) throw InvalidRequest(e.what(), chat ? "messages" : "prompt");
    throw;
  }
  CheckPromptLength(g->req, static_cast<int64_t>(g->prompt.size()), info.max_model_len);
  if (const auto& c = g->req.constraint) {
    // Qwen3-Coder writes calls as XML (<parameter=..>), Gemma 4 in its own syntax (call:f{k:<|"|>v<|"|>}):
    // a JSON Schema grammar describes neither.
    if (c->tool_call && g->format != ChatFormat::kHermes)
      throw InvalidRequest(fmt::format("strict tools are enforced for JSON tool calls; this model writes {} tool calls "
                                       "(set 'strict' false)",
                                       g->format == ChatFormat::kQwen3Coder ? "XML" : "Gemma 4"),
                           c->lazy ? c->strict_param : "tools");
    if (c->lazy) g->grammar_trigger = ToolCallTrigger(srv_->prompts, *c);
    // The compiler is the engine's (one per process, cached by text); here, on the prompt threads.
    try {
      g->grammar = srv_->engine.CompileGrammar(c->format, c->text);
    } catch (const Error& e) {
      throw InvalidRequest(fmt::format("invalid '{}': {}", c->param, e.what()), c->param);
    }
  }
  // A tokenizer larger than the model's vocabulary (a mismatched --tokenizer) would otherwise fail
  // inside the engine, after a streaming response has already begun with 200.
  for (int32_t id : g->prompt)
    if (id < 0 || id >= info.vocab_size)
      throw InvalidRequest(fmt::format("the prompt has token id {}, outside the model's vocabulary [0, {}): the "
                                       "tokenizer does not match the model",
                                       id, info.vocab_size),
                           chat ? "messages" : "prompt");
  return g;
}

// Back on the session's strand: rate limits, the concurrency cap, then the engine.
void Session::AdmitGeneration(const std::shared_ptr<Gen>& g, bool chat) {
  const EngineModelInfo& info = srv_->engine.ModelInfo();
  g->arrival = start_;
  entry_.stream = g->req.stream;
  entry_.prompt_tokens = static_cast<int64_t>(g->prompt.size());
  entry_.completion_tokens = 0;
  if (srv_->log.log_requests()) entry_.prompt = chat ? DumpJson(g->req.messages) : g->req.prompt_text;
  if (srv_->draining) throw ApiError(503, "service_unavailable", "the server is shutting down");
  entry_.content_safety = g->input_log.content_safety;
  if (g->refused) {
    g->hdr = {NewResponseId(chat ? "chatcmpl-" : "cmpl-"), info.name, UnixNow()};
    g->choices.resize(static_cast<size_t>(g->req.n));
    g->choices_left = g->req.n;
    g->link = std::make_shared<Link>();  // never given to the engine; EndGeneration cuts it
    g->admitted_at = g->arrival;
    return RespondRefusal(g);
  }

  g->rate_key = entry_.key_id.empty() ? "ip:" + remote_ : entry_.key_id;
  auto d = srv_->rate.Admit(g->rate_key, static_cast<int64_t>(g->prompt.size()), Clock::now());
  if (!d.allowed) {
    ApiError e(429, "rate_limit_error", "Rate limit reached for this API key; retry later", "",
               "rate_limit_exceeded");
    e.retry_after_s = d.retry_after_s;
    throw e;
  }
  g->hdr = {NewResponseId(chat ? "chatcmpl-" : "cmpl-"), info.name, UnixNow()};
  g->choices.resize(static_cast<size_t>(g->req.n));
  g->choices_left = g->req.n;
  if (srv_->safety_out)
    for (GenChoice& c : g->choices) c.filter.emplace(srv_->safety_out);
  const bool parse_tools = g->req.ParseTools();
  if (g->req.chat && ChatOutputParser::Needed(g->format, parse_tools)) {
    for (GenChoice& c : g->choices) {
      c.parser = std::make_unique<ChatOutputParser>(g->format, parse_tools, g->req.tools, g->in_reasoning);
      if (!g->forced_prefix.empty()) (void)c.parser->Push(g->forced_prefix);  // inside a call: emits nothing
    }
  }
  g->link = std::make_shared<Link>();
  g->link->session = shared_from_this();
  g->link->cancelled = g->cancelled;

  std::weak_ptr<Link> wlink = g->link;
  auto* conc = &srv_->conc;
  auto on_admit = [wlink, g, conc] {
    auto link = wlink.lock();
    std::shared_ptr<Session> s;
    if (link) {
      std::lock_guard<std::mutex> l(link->mu);
      s = link->session;
    }
    if (!s) return conc->Release();
    net::post(s->executor(), [s, g] { s->OnAdmitted(g); });
  };
  auto r = srv_->conc.Acquire(on_admit, &g->ticket);
  if (r == ConcurrencyLimiter::Result::kRejected) {
    ApiError e(429, "rate_limit_error", "Too many concurrent requests; retry later", "",
               "rate_limit_exceeded");
    e.retry_after_s = 1;
    throw e;
  }
  gen_ = g;
  srv_->AddLink(g->link);
  if (srv_->cfg.server.request_timeout_s > 0) {
    g->timer = std::make_unique<net::steady_timer>(stream_.get_executor());
    g->timer->expires_after(std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(srv_->cfg.server.request_timeout_s)));
    g->timer->async_wait([self = shared_from_this(), g](beast::error_code ec) {
      if (ec || g != self->gen_ || g->done) return;
      self->FailGeneration(
          g, ApiError(504, "timeout_error",
                      fmt::format("request timed out after {} s", self->srv_->cfg.server.request_timeout_s)));
    });
  }
  StartWatch(g);
  if (r == ConcurrencyLimiter::Result::kAdmitted) {
    OnAdmitted(g);
  } else {
    g->queued = true;
  }
}

void Session::OnAdmitted(const std::shared_ptr<Gen>& g) {
  if (g->done) return srv_->conc.Release();  // ended while waiting: hand the slot on
  g->queued = false;
  g->admitted = true;
  g->admitted_at = Clock::now();
  Submit(g);
}

// The 200 of a stream goes out with the engine's first event, not at admission: a request the
// engine refuses (its own checks run when it takes the request) still gets its HTTP error, as
// vLLM does.
void Session::StartStream(const std::shared_ptr<Gen>& g) {
  if (!g->req.stream || g->stream_started) return;
  g->stream_started = true;
  if (http10_) keep_alive_ = false;  // no chunked coding in HTTP/1.0: the close ends the stream
  WriteRaw(fmt::format("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
                       "{}X-Request-Id: {}\r\nConnection: {}\r\n\r\n",
                       http10_ ? "" : "Transfer-Encoding: chunked\r\n", entry_.request_id,
                       keep_alive_ ? "keep-alive" : "close"));
  // Each choice opens with its role (chat) or, with echo, the prompt's text (completions).
  for (int64_t i = 0; i < g->req.n; ++i) {
    if (g->req.chat)
      WriteChunk(
          SseData(ChatChunkJson(g->hdr, i, {{"role", "assistant"}, {"content", ""}}, nullptr, nullptr, ChunkUsage(g))));
    else if (!g->echo.empty())
      WriteChunk(SseData(CompletionChunkJson(g->hdr, i, g->echo, nullptr, nullptr, ChunkUsage(g))));
  }
}

std::optional<ojson> Session::ChunkUsage(const std::shared_ptr<Gen>& g) const {
  if (!g->req.include_usage) return std::nullopt;
  if (!g->req.continuous_usage) return ojson(nullptr);
  const int64_t prompt = static_cast<int64_t>(g->prompt.size());
  ojson u = ojson::object();
  u["prompt_tokens"] = prompt;
  u["completion_tokens"] = g->completion_tokens;
  u["total_tokens"] = prompt + g->completion_tokens;
  return u;
}

void Session::Submit(const std::shared_ptr<Gen>& g) {
  GenerationRequest r;
  r.id = entry_.request_id;
  r.prompt = g->prompt;
  r.sampling = g->req.sampling;
  r.priority = g->req.priority;
  r.diffusion = g->req.diffusion;
  r.canvas = g->req.canvas;
  r.emit_steps = g->req.stream && g->req.stream_steps;
  r.n = g->req.n;
  r.router_temperature = g->req.router_temperature;
  r.grammar = g->grammar;
  r.grammar_trigger = g->grammar_trigger;
  r.keep_special_ids = g->keep_special_ids;
  r.cache_namespace = srv_->cfg.engine.share_prefix_cache_across_keys ? "" : entry_.key_id;
  r.cancelled = g->cancelled;
  std::shared_ptr<Link> link = g->link;
  r.on_event = [link, g](const GenerationEvent& ev) {
    std::lock_guard<std::mutex> l(link->mu);
    if (!link->session) return;
    auto s = link->session;
    net::post(s->executor(), [s, g, ev] { s->OnEvent(g, ev); });
  };
  srv_->engine.Submit(std::move(r));
}

void Session::OnEvent(const std::shared_ptr<Gen>& g, const GenerationEvent& ev) {
  if (g != gen_ || g->done) return;
  if (ev.index < 0 || ev.index >= static_cast<int32_t>(g->choices.size())) return;
  GenChoice& c = g->choices[ev.index];
  if (c.finished) return;
  auto now = Clock::now();
  ServerMetrics& m = srv_->m;
  bool failure = ev.kind == GenerationEvent::Kind::kError ||
                 (ev.kind == GenerationEvent::Kind::kFinished &&
                  (ev.finish_reason == FinishReason::kCancelled || ev.finish_reason == FinishReason::kError));
  if (!failure) StartStream(g);
  switch (ev.kind) {
    case GenerationEvent::Kind::kTokens: {
      size_t k = ev.tokens.size();
      if (!g->first_token_seen) {
        g->first_token_seen = true;
        entry_.ttft_s = Seconds(now - g->arrival);
        m.ttft.Observe(entry_.ttft_s);
      } else if (k > 0) {
        double dt = Seconds(now - g->last_token) / static_cast<double>(k);
        for (size_t i = 0; i < k; ++i) m.inter_token.Observe(dt);
      }
      g->last_token = now;
      g->completion_tokens += static_cast<int64_t>(k);
      c.completion_tokens += static_cast<int64_t>(k);
      c.raw_text += ev.text;
      ojson lp = nullptr;
      if (g->req.logprobs && !ev.logprobs.empty()) {
        c.logprobs.insert(c.logprobs.end(), ev.logprobs.begin(), ev.logprobs.end());
        auto text_fn = [this](int32_t id) { return srv_->prompts.TokenText(id); };
        lp = g->req.chat ? ChatLogprobsJson(ev.logprobs, text_fn)
                         : CompletionLogprobsJson(ev.logprobs, text_fn, c.text_offset);
      }
      c.text_offset += static_cast<int64_t>(ev.text.size());
      EmitFiltered(g, ev.index, ev.text, lp, /*final=*/false);
      return;
    }
    case GenerationEvent::Kind::kDiffusionStep:
      if (g->req.stream && g->req.stream_steps) {
        ojson step = DiffusionStepJson(ev.step, g->req.diffusion ? g->req.diffusion->mask_token_id : -1,
                                       [this](int32_t id) { return srv_->prompts.TokenText(id); });
        step["index"] = ev.index;  // the choice
        WriteChunk(SseData(step, "diffusion_step"));
      }
      return;
    case GenerationEvent::Kind::kFinished:
      if (ev.finish_reason == FinishReason::kCancelled)
        return FailGeneration(g, ApiError(503, "service_unavailable", "the engine cancelled the request"));
      if (ev.finish_reason == FinishReason::kError)
        return FailGeneration(g, ApiError(500, "internal_error", "the engine failed the request"));
      if (c.filter) {
        // What the output filter still holds goes out now (or a match in it blocks the choice).
        EmitFiltered(g, ev.index, "", nullptr, /*final=*/true);
        if (c.finished) return;
      }
      return FinishChoice(g, ev.index, ev.finish_reason, ev.stats);
    case GenerationEvent::Kind::kError:
      // The engine reports request problems it finds (bad ids, too long...) this way; once output
      // has started it is an internal failure unless the engine says the request's input caused it
      // (a grammar too ambiguous to follow). One failed choice fails the request.
      if (ev.unavailable) return FailGeneration(g, ApiError(503, "service_unavailable", ev.error));
      if (ev.server_fault) return FailGeneration(g, ApiError(500, "internal_error", ev.error));
      if (!g->first_token_seen || ev.invalid_request) return FailGeneration(g, InvalidRequest(ev.error));
      return FailGeneration(g, ApiError(500, "internal_error", ev.error));
  }
}

void Session::EmitContent(const std::shared_ptr<Gen>& g, int64_t index, const std::string& text,
                          const ojson& logprobs) {
  if (!g->req.stream) {
    g->choices[index].content += text;
    return;
  }
  if (text.empty() && logprobs.is_null()) return;
  if (g->req.chat)
    WriteChunk(SseData(ChatChunkJson(g->hdr, index, {{"content", text}}, nullptr, logprobs, ChunkUsage(g))));
  else
    WriteChunk(SseData(CompletionChunkJson(g->hdr, index, text, nullptr, logprobs, ChunkUsage(g))));
}

void Session::EmitReasoning(const std::shared_ptr<Gen>& g, int64_t index, const std::string& text,
                            const ojson& logprobs) {
  if (!g->req.stream) {
    g->choices[index].reasoning += text;
    return;
  }
  if (text.empty() && logprobs.is_null()) return;
  WriteChunk(SseData(ChatChunkJson(g->hdr, index, {{"reasoning_content", text}}, nullptr, logprobs, ChunkUsage(g))));
}

void Session::EmitParsed(const std::shared_ptr<Gen>& g, int64_t index, std::vector<ToolStreamEvent> evs,
                         const ojson& logprobs) {
  GenChoice& c = g->choices[index];
  ojson lp = logprobs;
  for (auto& e : evs) {
    if (e.is_reasoning) {
      EmitReasoning(g, index, e.content, lp);
      lp = nullptr;
      continue;
    }
    if (!e.is_call) {
      EmitContent(g, index, e.content, lp);
      lp = nullptr;
      continue;
    }
    // parallel_tool_calls false: at most one call per choice; later ones are left out.
    if (!g->req.parallel_tool_calls && !c.calls.empty()) continue;
    c.calls.push_back(e.call);
    if (!g->req.stream) continue;
    ojson head = {{"index", e.index},
                  {"id", e.call.id},
                  {"type", "function"},
                  {"function", {{"name", e.call.name}, {"arguments", ""}}}};
    ojson args = {{"index", e.index}, {"function", {{"arguments", e.call.arguments}}}};
    WriteChunk(
        SseData(ChatChunkJson(g->hdr, index, {{"tool_calls", ojson::array({head})}}, nullptr, nullptr, ChunkUsage(g))));
    WriteChunk(
        SseData(ChatChunkJson(g->hdr, index, {{"tool_calls", ojson::array({args})}}, nullptr, nullptr, ChunkUsage(g))));
  }
}

void Session::FinishChoice(const std::shared_ptr<Gen>& g, int64_t index, FinishReason reason, const RequestStats& st,
                           const char* reason_text) {
  GenChoice& c = g->choices[index];
  // A forced strict call ends where its grammar does (before </tool_call>, an added token no grammar
  // emits): the server closes it. Cut short (length), it stays unterminated, hence plain text. Under
  // auto the engine forces the closing itself (the output goes on after a call).
  if (c.parser && reason == FinishReason::kStop && g->req.constraint && g->req.constraint->tool_call &&
      !g->req.constraint->lazy)
    EmitParsed(g, index, c.parser->Push("\n</tool_call>"), nullptr);
  if (c.parser) EmitParsed(g, index, c.parser->Finish(), nullptr);
  c.finished = true;
  c.stats = st;
  c.finish_reason = reason_text != nullptr ? reason_text : FinishReasonText(reason, !c.calls.empty());
  if (g->req.stream) {
    if (g->req.chat)
      WriteChunk(SseData(ChatChunkJson(g->hdr, index, ojson::object(), c.finish_reason, nullptr, ChunkUsage(g))));
    else
      WriteChunk(SseData(CompletionChunkJson(g->hdr, index, "", c.finish_reason, nullptr, ChunkUsage(g))));
  }
  if (--g->choices_left == 0) FinishGeneration(g);
}

void Session::FinishGeneration(const std::shared_ptr<Gen>& g) {
  EndGeneration(g);
  ServerMetrics& m = srv_->m;
  auto now = Clock::now();
  // The prompt counts once (OpenAI's usage with n > 1): its size and cache hits are the first
  // choice's, which computed it; the later choices took its pages from the cache. Completion tokens
  // add up over the choices.
  const RequestStats& first = g->choices[0].stats;
  const int64_t prompt = first.prompt_tokens > 0 ? first.prompt_tokens : static_cast<int64_t>(g->prompt.size());
  int64_t completion = 0;
  for (const GenChoice& c : g->choices) completion += std::max(c.stats.completion_tokens, c.completion_tokens);
  ojson usage = UsageJson(prompt, completion, first.cached_tokens);
  m.e2e.Observe(Seconds(now - g->arrival));
  m.queue_time.Observe(Seconds(g->admitted_at - g->arrival) + first.queue_seconds);
  m.prompt_tokens.Inc({}, static_cast<double>(prompt));
  m.generation_tokens.Inc({}, static_cast<double>(completion));
  m.cached_tokens.Inc({}, static_cast<double>(first.cached_tokens));
  if (g->req.diffusion || srv_->engine.ModelInfo().canvas_length > 0) {  // canvas models: steps per canvas
    for (const GenChoice& c : g->choices) {
      if (c.stats.forwards > 0)
        m.diffusion_tokens_per_forward.Observe(
            static_cast<double>(std::max(c.stats.completion_tokens, c.completion_tokens)) /
            static_cast<double>(c.stats.forwards));
      for (int64_t s : c.stats.steps_per_block) m.diffusion_steps_per_block.Observe(static_cast<double>(s));
    }
  }
  srv_->rate.ChargeTokens(g->rate_key, completion, now);
  entry_.prompt_tokens = prompt;
  entry_.completion_tokens = completion;
  entry_.finish_reason = g->choices[0].finish_reason;
  if (srv_->log.log_requests()) {
    if (g->choices.size() == 1) {
      entry_.completion = g->choices[0].raw_text;
    } else {
      ojson texts = ojson::array();
      for (const GenChoice& c : g->choices) texts.push_back(c.raw_text);
      entry_.completion = DumpJson(texts);
    }
  }
  if (g->req.stream) {
    if (g->req.include_usage) WriteChunk(SseData(UsageChunkJson(g->hdr, g->req.chat, usage)));
    WriteChunk(kSseDone);
    return EndStream();
  }
  auto text_fn = [this](int32_t id) { return srv_->prompts.TokenText(id); };
  ojson body;
  if (g->req.chat) {
    std::vector<ChatChoice> out;
    for (size_t i = 0; i < g->choices.size(); ++i) {
      GenChoice& c = g->choices[i];
      out.push_back({static_cast<int64_t>(i), std::move(c.content), std::move(c.calls), c.finish_reason,
                     g->req.logprobs ? ChatLogprobsJson(c.logprobs, text_fn) : ojson(nullptr),
                     std::move(c.reasoning)});
    }
    body = ChatCompletionJson(g->hdr, out, usage);
  } else {
    std::vector<CompletionChoice> out;
    for (size_t i = 0; i < g->choices.size(); ++i) {
      GenChoice& c = g->choices[i];
      out.push_back({static_cast<int64_t>(i), g->echo + c.content, c.finish_reason,
                     g->req.logprobs ? CompletionLogprobsJson(c.logprobs, text_fn, 0) : ojson(nullptr)});
    }
    body = CompletionJson(g->hdr, out, usage);
  }
  SendResponse(200, DumpJson(body), "application/json");
}

void Session::FailGeneration(const std::shared_ptr<Gen>& g, const ApiError& e) {
  EndGeneration(g);
  entry_.completion_tokens = g->completion_tokens;
  if (g->stream_started) {
    // Headers are out: the error goes in the stream (as vLLM does), then [DONE].
    entry_.status = e.status;
    entry_.error = e.message;
    WriteChunk("data: " + ErrorJson(e) + "\n\n");
    WriteChunk(kSseDone);
    return EndStream();
  }
  SendError(e);
}

void Session::EndGeneration(const std::shared_ptr<Gen>& g) {
  if (g->done) return;
  g->done = true;
  // Cancel and destroy the timeout timer here, on the strand, while the io_context surely lives:
  // the engine may hold the last reference to `g` (through on_event) until after the server is gone.
  if (g->timer) {
    g->timer->cancel();
    g->timer.reset();
  }
  if (g->queued) {
    // Still waiting for a slot: leave the queue. If the slot was granted meanwhile, OnAdmitted
    // (already posted) sees done and passes it on.
    srv_->conc.Cancel(g->ticket);
  } else if (g->admitted) {
    srv_->conc.Release();
  }
  g->cancelled->store(true);  // harmless after a normal finish; stops the engine otherwise
  {
    std::lock_guard<std::mutex> l(g->link->mu);
    g->link->session.reset();
  }
  srv_->RemoveLink(g->link);
}

void Session::StartWatch(const std::shared_ptr<Gen>& g) {
  // Readability without reading: EOF or an error means the client left; data means a pipelined
  // request (stop watching, it will be read after this response).
  stream_.socket().async_wait(tcp::socket::wait_read, [self = shared_from_this(), g](beast::error_code ec) {
    if (g != self->gen_ || g->done || ec == net::error::operation_aborted) return;
    if (!ec) {
      char c;
      beast::error_code pec;
      self->stream_.socket().non_blocking(true, pec);
      size_t n = self->stream_.socket().receive(net::buffer(&c, 1), tcp::socket::message_peek, pec);
      if (pec == net::error::would_block || pec == net::error::try_again) return self->StartWatch(g);
      if (!pec && n > 0) return;
    }
    self->ClientGone(g);
  });
}

void Session::ClientGone(const std::shared_ptr<Gen>& g) {
  EndGeneration(g);
  entry_.status = 499;  // nginx's "client closed request"
  entry_.completion_tokens = g->completion_tokens;
  keep_alive_ = false;
  closed_ = true;
  beast::error_code ec;
  stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
  stream_.socket().close(ec);
  if (!writing_) outq_.clear();  // else the pending write's handler clears it
  FinishRequest();
}

}  // namespace tessera
