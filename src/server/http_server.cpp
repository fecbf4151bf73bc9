// tessera server: Beast/Asio implementation of HttpServer. One Session per connection, all of its
// work on its strand; a generation's engine events are posted onto that strand through a Link that
// Stop() severs, so an engine that outlives the server never touches a dead io_context.
#include "server/http_server.h"

#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <future>
#include <set>
#include <thread>

#include "core/error.h"
#include "server/access_log.h"
#include "server/openai_protocol.h"
#include "server/security.h"
#include "server/static_assets.h"
#include "server/tool_parser.h"

namespace tessera {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {
constexpr auto kIdleTimeout = std::chrono::seconds(75);
// The page uses only its own files and API: nothing inline, nothing from elsewhere.
constexpr const char* kStaticCsp =
    "default-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";
double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }
}  // namespace

class Session;

// Engine -> session path for one generation; cut by EndGeneration or Stop.
struct Link {
  std::mutex mu;
  std::shared_ptr<Session> session;
  std::shared_ptr<std::atomic<bool>> cancelled;
};

struct HttpServer::Impl {
  Impl(ServerConfig c, EngineApi& e, PromptBuilder& p)
      : cfg(std::move(c)),
        engine(e),
        prompts(p),
        m(registry),
        keys(ApiKeyStore::Load(cfg.security.api_keys, cfg.security.api_key_file)),
        allow(cfg.security.allow_cidrs),
        rate(cfg.limits.requests_per_minute, cfg.limits.tokens_per_minute),
        conc(cfg.limits.max_concurrent_requests, cfg.limits.max_queue),
        log(cfg.server.access_log, cfg.server.log_requests),
        acceptor(net::make_strand(ioc)),
        work(net::make_work_guard(ioc)) {
    created = UnixNow();
    registry.AddCollector([this] {
      EngineSnapshot s = engine.Snapshot();
      m.requests_running.Set(static_cast<double>(s.requests_running));
      m.requests_waiting.Set(static_cast<double>(s.requests_waiting + conc.waiting()));
      m.kv_pages_used.Set(static_cast<double>(s.kv_pages_used));
      m.kv_pages_total.Set(static_cast<double>(s.kv_pages_total));
      m.prefix_cache_queries.Set(static_cast<double>(s.prefix_cache_queries));
      m.prefix_cache_hits.Set(static_cast<double>(s.prefix_cache_hits));
      m.ready.Set(s.ready && !draining ? 1.0 : 0.0);
    });
  }

  void DoAccept();
  void BeginRequest() {
    std::lock_guard<std::mutex> l(mu);
    ++in_flight;
  }
  void EndRequest() {
    std::lock_guard<std::mutex> l(mu);
    --in_flight;
    cv.notify_all();
  }
  void AddLink(const std::shared_ptr<Link>& k) {
    std::lock_guard<std::mutex> l(mu);
    links.insert(k);
  }
  void RemoveLink(const std::shared_ptr<Link>& k) {
    std::lock_guard<std::mutex> l(mu);
    links.erase(k);
  }

  ServerConfig cfg;
  EngineApi& engine;
  PromptBuilder& prompts;
  MetricsRegistry registry;
  ServerMetrics m;
  ApiKeyStore keys;
  IpAllowList allow;
  RateLimiter rate;
  ConcurrencyLimiter conc;
  AccessLog log;
  // The model's diffusion defaults with the config's diffusion section on top. Read per request:
  // `tessera serve` starts the server before the model (and so its defaults) exists.
  DiffusionParams DiffusionDefaults() const {
    DiffusionParams d = engine.ModelInfo().default_diffusion;
    if (cfg.diffusion.block_size > 0) d.block_size = cfg.diffusion.block_size;
    if (cfg.diffusion.steps > 0) d.steps = cfg.diffusion.steps;
    if (cfg.diffusion.policy == "static") d.policy = DiffusionPolicy::kStatic;
    if (cfg.diffusion.policy == "threshold") d.policy = DiffusionPolicy::kThreshold;
    if (cfg.diffusion.policy == "editing") d.policy = DiffusionPolicy::kEditing;
    if (!cfg.diffusion.policy.empty()) d.threshold = static_cast<float>(cfg.diffusion.threshold);
    return d;
  }
  int64_t created = 0;
  net::io_context ioc;
  tcp::acceptor acceptor;
  net::executor_work_guard<net::io_context::executor_type> work;
  std::vector<std::thread> threads;
  std::atomic<bool> draining{false}, started{false}, stopped{false};
  std::atomic<int> bound_port{0};
  std::atomic<uint64_t> next_id{1};
  mutable std::mutex mu;
  std::condition_variable cv;
  int64_t in_flight = 0;
  std::set<std::shared_ptr<Link>> links;
};

// One generation request's state (lives on the session strand).
struct Gen {
  ParsedRequest req;
  std::vector<int32_t> prompt;
  std::string forced_prefix;  // ForcedToolCallPrefix: already in the prompt and fed to the parser
  std::shared_ptr<std::atomic<bool>> cancelled = std::make_shared<std::atomic<bool>>(false);
  std::shared_ptr<Link> link;
  ResponseHeader hdr;
  std::optional<ToolCallParser> parser;
  std::string content, raw_text;
  std::vector<ToolCall> calls;
  std::vector<TokenLogprob> logprobs;
  int64_t completion_tokens = 0, text_offset = 0;
  bool done = false, queued = false, admitted = false, first_token_seen = false;
  uint64_t ticket = 0;
  std::string rate_key;
  Clock::time_point arrival, admitted_at, last_token;
  std::unique_ptr<net::steady_timer> timer;
};

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, HttpServer::Impl* srv) : stream_(std::move(socket)), srv_(srv) {}

  void Run() {
    beast::error_code ec;
    remote_ = stream_.socket().remote_endpoint(ec).address().to_string();
    net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->DoRead(); });
  }

  // Called through the Link from the engine thread (posted here).
  void OnEvent(const std::shared_ptr<Gen>& g, const GenerationEvent& ev);
  void OnAdmitted(const std::shared_ptr<Gen>& g);
  auto executor() { return stream_.get_executor(); }

 private:
  void DoRead();
  void OnRead(beast::error_code ec, size_t);
  void BeginEntry();
  void Handle(http::request<http::string_body>& req);
  void Route(http::request<http::string_body>& req, const std::string& path);
  void Authenticate(const http::request<http::string_body>& req);
  void StartGeneration(http::request<http::string_body>& req, bool chat);
  void Submit(const std::shared_ptr<Gen>& g);
  void EmitContent(const std::shared_ptr<Gen>& g, const std::string& text, const ojson& logprobs);
  void EmitParsed(const std::shared_ptr<Gen>& g, std::vector<ToolStreamEvent> evs, const ojson& logprobs);
  void FinishGeneration(const std::shared_ptr<Gen>& g, FinishReason reason, const RequestStats& stats);
  void FailGeneration(const std::shared_ptr<Gen>& g, const ApiError& e);
  void EndGeneration(const std::shared_ptr<Gen>& g);
  void StartWatch(const std::shared_ptr<Gen>& g);
  void ClientGone(const std::shared_ptr<Gen>& g);

  void SendResponse(int status, std::string body, const char* content_type, bool close = false,
                    std::vector<std::pair<std::string, std::string>> headers = {});
  void SendError(const ApiError& e, bool close = false);
  void WriteRaw(std::string data);
  void WriteChunk(const std::string& data) { WriteRaw(fmt::format("{:x}\r\n{}\r\n", data.size(), data)); }
  void EndStream();
  void DoWrite();
  void Record();
  void FinishRequest();
  void GracefulClose();
  void Drain();

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  HttpServer::Impl* srv_;
  std::string remote_;
  // The request being answered.
  AccessLogEntry entry_;
  Clock::time_point start_;
  bool keep_alive_ = true, active_ = false, recorded_ = false;
  std::shared_ptr<Gen> gen_;
  // Streaming output.
  std::deque<std::string> outq_;
  bool writing_ = false, end_after_write_ = false, closed_ = false;
  std::string drain_buf_;
};

// Starts the bookkeeping of one answered request: in-flight count, timing, access-log entry.
void Session::BeginEntry() {
  active_ = true;
  recorded_ = false;
  srv_->BeginRequest();
  start_ = Clock::now();
  entry_ = {};
  entry_.request_id = fmt::format("req-{}", srv_->next_id++);
  entry_.remote = remote_;
}

void Session::DoRead() {
  parser_.emplace();
  parser_->body_limit(static_cast<uint64_t>(srv_->cfg.server.max_body_bytes));
  parser_->header_limit(64 * 1024);
  stream_.expires_after(kIdleTimeout);
  http::async_read(stream_, buffer_, *parser_,
                   beast::bind_front_handler(&Session::OnRead, shared_from_this()));
}

void Session::OnRead(beast::error_code ec, size_t) {
  if (ec == http::error::body_limit) {
    stream_.expires_never();
    BeginEntry();
    entry_.method = std::string(parser_->get().method_string());
    entry_.path = std::string(parser_->get().target());
    keep_alive_ = false;
    SendError(ApiError(413, "invalid_request_error",
                       fmt::format("request body exceeds {} bytes", srv_->cfg.server.max_body_bytes)),
              true);
    return;
  }
  if (ec) {
    if (ec.category() == http::make_error_code(http::error::bad_target).category() &&
        ec != http::error::end_of_stream && ec != http::error::partial_message) {
      stream_.expires_never();
      BeginEntry();
      SendError(InvalidRequest("malformed HTTP request: " + ec.message()), true);
      return;
    }
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    return;
  }
  stream_.expires_never();
  auto req = parser_->release();
  Handle(req);
}

void Session::Handle(http::request<http::string_body>& req) {
  BeginEntry();
  entry_.method = std::string(req.method_string());
  std::string target(req.target());
  std::string path = target.substr(0, target.find('?'));
  entry_.path = path;
  keep_alive_ = req.keep_alive() && !srv_->draining;
  try {
    Route(req, path);
  } catch (const ApiError& e) {
    SendError(e);
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::kInvalidArgument)
      SendError(InvalidRequest(e.what()));
    else
      SendError(ApiError(500, "internal_error", e.what()));
  } catch (const std::exception& e) {
    SendError(ApiError(500, "internal_error", std::string("internal error: ") + e.what()));
  }
}

void Session::Authenticate(const http::request<http::string_body>& req) {
  if (!srv_->keys.enabled()) return;
  auto it = req.find(http::field::authorization);
  std::string token = it == req.end() ? "" : BearerToken(std::string(it->value()));
  auto id = token.empty() ? std::nullopt : srv_->keys.Match(token);
  if (!id)
    throw ApiError(401, "invalid_request_error",
                   token.empty() ? "Missing API key: send 'Authorization: Bearer <key>'" : "Invalid API key",
                   "", "invalid_api_key");
  entry_.key_id = *id;
}

void Session::Route(http::request<http::string_body>& req, const std::string& path) {
  bool get = req.method() == http::verb::get, post = req.method() == http::verb::post;
  if (path == "/health") {
    if (!get) throw ApiError(405, "invalid_request_error", "use GET /health");
    if (srv_->draining) return SendResponse(503, R"({"status":"draining"})", "application/json");
    if (!srv_->engine.Snapshot().ready)
      return SendResponse(503, R"({"status":"loading"})", "application/json");
    return SendResponse(200, R"({"status":"ok"})", "application/json");
  }
  if (!srv_->allow.Allowed(remote_))
    throw ApiError(403, "permission_error", fmt::format("client address {} is not allowed", remote_));
  // The chat page (web/, built in): loads without an API key; its API calls carry the key typed in.
  if (const StaticAsset* a = get ? FindStaticAsset(path) : nullptr) {
    auto inm = req.find(http::field::if_none_match);
    bool fresh = inm != req.end() && EtagMatches(inm->value(), a->etag);
    return SendResponse(fresh ? 304 : 200, fresh ? "" : std::string(a->body), a->content_type.data(), false,
                        {{"ETag", a->etag}, {"Cache-Control", "no-cache"}, {"X-Content-Type-Options", "nosniff"},
                         {"Content-Security-Policy", kStaticCsp}});
  }
  if (path == "/metrics") {
    if (!get) throw ApiError(405, "invalid_request_error", "use GET /metrics");
    if (srv_->cfg.server.metrics_require_key) Authenticate(req);
    return SendResponse(200, srv_->registry.Render(), "text/plain; version=0.0.4; charset=utf-8");
  }
  if (path.rfind("/v1/", 0) == 0) Authenticate(req);
  if (path == "/v1/models") {
    if (!get) throw ApiError(405, "invalid_request_error", "use GET /v1/models");
    return SendResponse(200, DumpJson(ModelsJson(srv_->engine.ModelInfo(), srv_->created)),
                        "application/json");
  }
  if (path == "/v1/chat/completions" || path == "/v1/completions") {
    if (!post) throw ApiError(405, "invalid_request_error", fmt::format("use POST {}", path));
    return StartGeneration(req, path == "/v1/chat/completions");
  }
  throw ApiError(404, "invalid_request_error",
                 fmt::format("Unknown route: {} {}", std::string(req.method_string()), path), "",
                 "not_found");
}

void Session::StartGeneration(http::request<http::string_body>& req, bool chat) {
  if (srv_->draining) throw ApiError(503, "service_unavailable", "the server is shutting down");
  if (!srv_->engine.Snapshot().ready)
    throw ApiError(503, "service_unavailable", "the model is still loading");
  ojson body = ojson::parse(req.body(), nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) throw InvalidRequest("the request body is not valid JSON");
  const EngineModelInfo& info = srv_->engine.ModelInfo();
  auto g = std::make_shared<Gen>();
  g->arrival = start_;
  const DiffusionParams ddef = srv_->DiffusionDefaults();
  g->req = chat ? ParseChatRequest(body, info, ddef) : ParseCompletionRequest(body, info, ddef);
  entry_.stream = g->req.stream;
  try {
    if (chat) {
      g->prompt = srv_->prompts.BuildChat(g->req.messages, g->req.ParseTools() ? g->req.tools : ojson(),
                                          g->req.chat_template_kwargs);
      g->forced_prefix = ForcedToolCallPrefix(g->req, srv_->prompts.UsesXmlToolCalls());
      if (!g->forced_prefix.empty()) {
        std::vector<int32_t> opening = srv_->prompts.Encode(g->forced_prefix);
        g->prompt.insert(g->prompt.end(), opening.begin(), opening.end());
      }
    }
    else
      g->prompt = g->req.prompt_is_ids ? g->req.prompt_ids : srv_->prompts.Encode(g->req.prompt_text);
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::kInvalidArgument) throw InvalidRequest(e.what(), chat ? "messages" : "prompt");
    throw;
  }
  CheckPromptLength(g->req, static_cast<int64_t>(g->prompt.size()), info.max_model_len);
  // A tokenizer larger than the model's vocabulary (a mismatched --tokenizer) would otherwise fail
  // inside the engine, after a streaming response has already begun with 200.
  for (int32_t id : g->prompt)
    if (id < 0 || id >= info.vocab_size)
      throw InvalidRequest(fmt::format("the prompt has token id {}, outside the model's vocabulary [0, {}): the "
                                       "tokenizer does not match the model",
                                       id, info.vocab_size),
                           chat ? "messages" : "prompt");
  entry_.prompt_tokens = static_cast<int64_t>(g->prompt.size());
  entry_.completion_tokens = 0;
  if (srv_->log.log_requests()) entry_.prompt = chat ? DumpJson(g->req.messages) : g->req.prompt_text;

  g->rate_key = entry_.key_id.empty() ? "ip:" + remote_ : entry_.key_id;
  auto d = srv_->rate.Admit(g->rate_key, static_cast<int64_t>(g->prompt.size()), Clock::now());
  if (!d.allowed) {
    ApiError e(429, "rate_limit_error", "Rate limit reached for this API key; retry later", "",
               "rate_limit_exceeded");
    e.retry_after_s = d.retry_after_s;
    throw e;
  }
  g->hdr = {NewResponseId(chat ? "chatcmpl-" : "cmpl-"), info.name, UnixNow()};
  if (g->req.ParseTools()) {
    g->parser.emplace(g->req.tools);
    if (!g->forced_prefix.empty()) (void)g->parser->Push(g->forced_prefix);  // inside a call: emits nothing
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
  if (g->req.stream) {
    WriteRaw(
        fmt::format("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
                    "Transfer-Encoding: chunked\r\nX-Request-Id: {}\r\nConnection: {}\r\n\r\n",
                    entry_.request_id, keep_alive_ ? "keep-alive" : "close"));
    if (g->req.chat)
      WriteChunk(SseData(ChatChunkJson(g->hdr, {{"role", "assistant"}, {"content", ""}}, nullptr, nullptr,
                                       g->req.include_usage)));
  }
  Submit(g);
}

void Session::Submit(const std::shared_ptr<Gen>& g) {
  GenerationRequest r;
  r.id = entry_.request_id;
  r.prompt = g->prompt;
  r.sampling = g->req.sampling;
  r.diffusion = g->req.diffusion;
  r.emit_steps = g->req.stream && g->req.stream_steps;
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
  auto now = Clock::now();
  ServerMetrics& m = srv_->m;
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
      g->raw_text += ev.text;
      ojson lp = nullptr;
      if (g->req.logprobs && !ev.logprobs.empty()) {
        g->logprobs.insert(g->logprobs.end(), ev.logprobs.begin(), ev.logprobs.end());
        auto text_fn = [this](int32_t id) { return srv_->prompts.TokenText(id); };
        lp = g->req.chat ? ChatLogprobsJson(ev.logprobs, text_fn)
                         : CompletionLogprobsJson(ev.logprobs, text_fn, g->text_offset);
      }
      g->text_offset += static_cast<int64_t>(ev.text.size());
      if (g->parser)
        EmitParsed(g, g->parser->Push(ev.text), lp);
      else
        EmitContent(g, ev.text, lp);
      return;
    }
    case GenerationEvent::Kind::kDiffusionStep:
      if (g->req.stream && g->req.stream_steps)
        WriteChunk(SseData(DiffusionStepJson(ev.step, g->req.diffusion ? g->req.diffusion->mask_token_id : -1,
                                             [this](int32_t id) { return srv_->prompts.TokenText(id); }),
                           "diffusion_step"));
      return;
    case GenerationEvent::Kind::kFinished:
      if (ev.finish_reason == FinishReason::kCancelled)
        return FailGeneration(g, ApiError(503, "service_unavailable", "the engine cancelled the request"));
      if (ev.finish_reason == FinishReason::kError)
        return FailGeneration(g, ApiError(500, "internal_error", "the engine failed the request"));
      return FinishGeneration(g, ev.finish_reason, ev.stats);
    case GenerationEvent::Kind::kError:
      // The engine reports request problems it finds (bad ids, too long...) this way; once output
      // has started it can only be an internal failure.
      if (!g->first_token_seen) return FailGeneration(g, InvalidRequest(ev.error));
      return FailGeneration(g, ApiError(500, "internal_error", ev.error));
  }
}

void Session::EmitContent(const std::shared_ptr<Gen>& g, const std::string& text, const ojson& logprobs) {
  if (!g->req.stream) {
    g->content += text;
    return;
  }
  if (text.empty() && logprobs.is_null()) return;
  if (g->req.chat)
    WriteChunk(SseData(ChatChunkJson(g->hdr, {{"content", text}}, nullptr, logprobs, g->req.include_usage)));
  else
    WriteChunk(SseData(CompletionChunkJson(g->hdr, text, nullptr, logprobs, g->req.include_usage)));
}

void Session::EmitParsed(const std::shared_ptr<Gen>& g, std::vector<ToolStreamEvent> evs,
                         const ojson& logprobs) {
  ojson lp = logprobs;
  for (auto& e : evs) {
    if (!e.is_call) {
      EmitContent(g, e.content, lp);
      lp = nullptr;
      continue;
    }
    g->calls.push_back(e.call);
    if (!g->req.stream) continue;
    ojson head = {{"index", e.index},
                  {"id", e.call.id},
                  {"type", "function"},
                  {"function", {{"name", e.call.name}, {"arguments", ""}}}};
    ojson args = {{"index", e.index}, {"function", {{"arguments", e.call.arguments}}}};
    WriteChunk(SseData(ChatChunkJson(g->hdr, {{"tool_calls", ojson::array({head})}}, nullptr, nullptr,
                                     g->req.include_usage)));
    WriteChunk(SseData(ChatChunkJson(g->hdr, {{"tool_calls", ojson::array({args})}}, nullptr, nullptr,
                                     g->req.include_usage)));
  }
}

void Session::FinishGeneration(const std::shared_ptr<Gen>& g, FinishReason reason, const RequestStats& st) {
  if (g->parser) EmitParsed(g, g->parser->Finish(), nullptr);
  EndGeneration(g);
  ServerMetrics& m = srv_->m;
  auto now = Clock::now();
  int64_t prompt = st.prompt_tokens > 0 ? st.prompt_tokens : static_cast<int64_t>(g->prompt.size());
  int64_t completion = std::max(st.completion_tokens, g->completion_tokens);
  ojson usage = UsageJson(prompt, completion, st.cached_tokens);
  const char* fr = FinishReasonText(reason, !g->calls.empty());
  m.e2e.Observe(Seconds(now - g->arrival));
  m.queue_time.Observe(Seconds(g->admitted_at - g->arrival) + st.queue_seconds);
  m.prompt_tokens.Inc({}, static_cast<double>(prompt));
  m.generation_tokens.Inc({}, static_cast<double>(completion));
  m.cached_tokens.Inc({}, static_cast<double>(st.cached_tokens));
  if (g->req.diffusion) {
    if (st.forwards > 0)
      m.diffusion_tokens_per_forward.Observe(static_cast<double>(completion) /
                                             static_cast<double>(st.forwards));
    for (int64_t s : st.steps_per_block) m.diffusion_steps_per_block.Observe(static_cast<double>(s));
  }
  srv_->rate.ChargeTokens(g->rate_key, completion, now);
  entry_.prompt_tokens = prompt;
  entry_.completion_tokens = completion;
  entry_.finish_reason = fr;
  if (srv_->log.log_requests()) entry_.completion = g->raw_text;
  if (g->req.stream) {
    if (g->req.chat)
      WriteChunk(SseData(ChatChunkJson(g->hdr, ojson::object(), fr, nullptr, g->req.include_usage)));
    else
      WriteChunk(SseData(CompletionChunkJson(g->hdr, "", fr, nullptr, g->req.include_usage)));
    if (g->req.include_usage) WriteChunk(SseData(UsageChunkJson(g->hdr, g->req.chat, usage)));
    WriteChunk(kSseDone);
    return EndStream();
  }
  auto text_fn = [this](int32_t id) { return srv_->prompts.TokenText(id); };
  ojson lp = nullptr;
  if (g->req.logprobs)
    lp = g->req.chat ? ChatLogprobsJson(g->logprobs, text_fn)
                     : CompletionLogprobsJson(g->logprobs, text_fn, 0);
  ojson body = g->req.chat ? ChatCompletionJson(g->hdr, g->content, g->calls, fr, usage, lp)
                           : CompletionJson(g->hdr, g->content, fr, usage, lp);
  SendResponse(200, DumpJson(body), "application/json");
}

void Session::FailGeneration(const std::shared_ptr<Gen>& g, const ApiError& e) {
  EndGeneration(g);
  entry_.completion_tokens = g->completion_tokens;
  if (g->req.stream && g->admitted) {
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

void Session::SendResponse(int status, std::string body, const char* content_type, bool close,
                           std::vector<std::pair<std::string, std::string>> headers) {
  auto res = std::make_shared<http::response<http::string_body>>(static_cast<http::status>(status), 11);
  res->set(http::field::server, "tessera");
  res->set(http::field::content_type, content_type);
  res->set("X-Request-Id", entry_.request_id);
  for (auto& [k, v] : headers) res->set(k, v);
  if (close) keep_alive_ = false;
  res->keep_alive(keep_alive_);
  res->body() = std::move(body);
  res->prepare_payload();
  entry_.status = status;
  Record();
  http::async_write(stream_, *res, [self = shared_from_this(), res](beast::error_code ec, size_t) {
    self->FinishRequest();
    if (ec) return;
    if (!self->keep_alive_) return self->GracefulClose();
    self->DoRead();
  });
}

void Session::SendError(const ApiError& e, bool close) {
  std::vector<std::pair<std::string, std::string>> headers;
  if (e.status == 429)
    headers.emplace_back("Retry-After",
                         std::to_string(std::max<int64_t>(1, std::llround(std::ceil(e.retry_after_s)))));
  if (e.status == 401) headers.emplace_back("WWW-Authenticate", "Bearer");
  entry_.error = e.message;
  SendResponse(e.status, ErrorJson(e), "application/json", close, std::move(headers));
}

void Session::WriteRaw(std::string data) {
  if (closed_) return;
  outq_.push_back(std::move(data));
  if (!writing_) DoWrite();
}

void Session::EndStream() {
  Record();
  WriteRaw("0\r\n\r\n");
  end_after_write_ = true;
}

void Session::DoWrite() {
  if (outq_.empty()) {
    writing_ = false;
    if (end_after_write_) {
      end_after_write_ = false;
      if (entry_.status == 0) entry_.status = 200;
      FinishRequest();
      if (keep_alive_)
        DoRead();
      else
        GracefulClose();
    }
    return;
  }
  writing_ = true;
  net::async_write(stream_, net::buffer(outq_.front()),
                   [self = shared_from_this()](beast::error_code ec, size_t) {
                     self->writing_ = false;
                     if (ec || self->closed_) {
                       // The buffers are released only here, once no write refers to them any more.
                       self->outq_.clear();
                       self->end_after_write_ = false;
                       if (!self->closed_ && self->gen_ && !self->gen_->done)
                         return self->ClientGone(self->gen_);
                       if (self->active_) self->FinishRequest();
                       return;
                     }
                     self->outq_.pop_front();
                     self->DoWrite();
                   });
}

void Session::Record() {
  // Metrics and the log line are written when the answer is committed (before its last bytes
  // go out), so a client that reads the answer and then scrapes /metrics sees its request.
  if (recorded_) return;
  recorded_ = true;
  if (entry_.status == 0) entry_.status = 200;
  entry_.e2e_s = Seconds(Clock::now() - start_);
  std::string code = std::to_string(entry_.status);
  srv_->m.http_requests.Inc({entry_.path.size() > 64 ? "other" : entry_.path, code});
  if (entry_.status >= 400) srv_->m.errors.Inc({code});
  srv_->log.Write(entry_);
}

void Session::FinishRequest() {
  if (!active_) return;
  Record();
  active_ = false;
  gen_.reset();
  srv_->EndRequest();
}

void Session::GracefulClose() {
  // Half-close, then drain what the client still sends (an unread body would make the kernel
  // answer with RST and the client could lose our response), then close.
  beast::error_code ec;
  stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
  stream_.expires_after(std::chrono::seconds(2));
  drain_buf_.resize(4096);
  Drain();
}

void Session::Drain() {
  stream_.async_read_some(net::buffer(drain_buf_), [self = shared_from_this()](beast::error_code ec, size_t) {
    if (!ec) return self->Drain();
    beast::error_code ig;
    self->stream_.socket().close(ig);
  });
}

void HttpServer::Impl::DoAccept() {
  acceptor.async_accept(net::make_strand(ioc), [this](beast::error_code ec, tcp::socket socket) {
    if (!acceptor.is_open() || draining) return;
    if (!ec) {
      beast::error_code ig;
      socket.set_option(tcp::no_delay(true), ig);
      std::make_shared<Session>(std::move(socket), this)->Run();
    }
    DoAccept();
  });
}

HttpServer::HttpServer(ServerConfig config, EngineApi& engine, PromptBuilder& prompts)
    : impl_(std::make_shared<Impl>(std::move(config), engine, prompts)) {}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::Start() {
  Impl& s = *impl_;
  if (s.started.exchange(true)) return;
  beast::error_code ec;
  tcp::resolver resolver(s.ioc);
  auto results = resolver.resolve(s.cfg.server.host, std::to_string(s.cfg.server.port), ec);
  if (ec || results.empty())
    Fail(ErrorKind::kInvalidArgument, "cannot resolve server.host '{}': {}", s.cfg.server.host, ec.message());
  tcp::endpoint ep = results.begin()->endpoint();
  s.acceptor.open(ep.protocol(), ec);
  if (!ec) s.acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) s.acceptor.bind(ep, ec);
  if (!ec) s.acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec)
    Fail(ErrorKind::kInvalidArgument, "cannot listen on {}:{}: {}", s.cfg.server.host, s.cfg.server.port,
         ec.message());
  s.bound_port = s.acceptor.local_endpoint().port();
  net::post(s.acceptor.get_executor(), [impl = impl_] { impl->DoAccept(); });
  for (int64_t i = 0; i < s.cfg.server.threads; ++i)
    s.threads.emplace_back([impl = impl_] { impl->ioc.run(); });
}

void HttpServer::StopAccepting() {
  Impl& s = *impl_;
  s.draining = true;
  std::promise<void> done;
  auto fut = done.get_future();
  net::post(s.acceptor.get_executor(), [&s, &done] {
    beast::error_code ec;
    s.acceptor.close(ec);
    done.set_value();
  });
  if (!s.threads.empty()) fut.wait();
}

bool HttpServer::WaitForIdle(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> l(impl_->mu);
  return impl_->cv.wait_until(l, deadline, [&] { return impl_->in_flight == 0; });
}

void HttpServer::Stop() {
  Impl& s = *impl_;
  if (s.stopped.exchange(true)) return;
  s.draining = true;
  std::set<std::shared_ptr<Link>> links;
  {
    std::lock_guard<std::mutex> l(s.mu);
    links = s.links;
  }
  for (const auto& k : links) {
    std::lock_guard<std::mutex> l(k->mu);
    if (k->cancelled) k->cancelled->store(true);
    k->session.reset();
  }
  s.work.reset();
  s.ioc.stop();
  for (auto& t : s.threads) t.join();
  s.threads.clear();
  // Sessions still referenced by queued handlers are destroyed with the io_context (in ~Impl).
}

int HttpServer::port() const { return impl_->bound_port; }

int64_t HttpServer::in_flight() const {
  std::lock_guard<std::mutex> l(impl_->mu);
  return impl_->in_flight;
}

MetricsRegistry& HttpServer::metrics() { return impl_->registry; }

ServerMetrics& HttpServer::server_metrics() { return impl_->m; }

}  // namespace tessera
