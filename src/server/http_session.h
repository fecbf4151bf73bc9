// tessera server: the types http_server.cpp and http_session_generation.cpp share (private to
// src/server): the server's state (HttpServer::Impl), the Link that carries a generation's engine
// events to its session, one generation's state (Gen) and the per-connection Session.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "server/access_log.h"
#include "server/content_filter.h"
#include "server/http_server.h"
#include "server/moderation_client.h"
#include "server/openai_protocol.h"
#include "server/security.h"
#include "server/tool_parser.h"

namespace tessera {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;

inline double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

class Session;

// A prompt refused by the content-safety stage (400) or its fail-closed classifier (503): carries
// the matches to the access log, since the refusal happens before the session's entry sees them.
struct ContentSafetyError : ApiError {
  ContentSafetyError(ApiError e, std::vector<AccessLogEntry::SafetyHit> h) : ApiError(std::move(e)), hits(std::move(h)) {}
  std::vector<AccessLogEntry::SafetyHit> hits;
};

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
        accept_retry(acceptor.get_executor()),
        work(net::make_work_guard(ioc)) {
    created = UnixNow();
    // Content safety (docs/CONTENT_SAFETY.md): compiled once; a bad rule fails the server's start.
    if (cfg.content_safety.enabled) {
      const auto& cs = cfg.content_safety;
      auto in = ContentRuleSet::Compile(cs.rules, cs.mask_with, ContentRuleSet::Stage::kInput);
      auto out = ContentRuleSet::Compile(cs.rules, cs.mask_with, ContentRuleSet::Stage::kOutput);
      if (!in->empty()) safety_in = in;
      if (!out->empty()) safety_out = out;
      if (!cs.classifier_url.empty())
        classifier = std::make_unique<ModerationClient>(cs.classifier_url, cs.classifier_model,
                                                        cs.classifier_api_key, cs.classifier_timeout_s);
    }
    registry.AddCollector([this] {
      EngineSnapshot s = engine.Snapshot();
      m.requests_running.Set(static_cast<double>(s.requests_running));
      m.requests_waiting.Set(static_cast<double>(s.requests_waiting + conc.waiting()));
      m.kv_pages_used.Set(static_cast<double>(s.kv_pages_used));
      m.kv_pages_total.Set(static_cast<double>(s.kv_pages_total));
      m.state_slots_used.Set(static_cast<double>(s.state_slots_used));
      m.state_slots_total.Set(static_cast<double>(s.state_slots_total));
      m.prefix_cache_queries.Set(static_cast<double>(s.prefix_cache_queries));
      m.prefix_cache_hits.Set(static_cast<double>(s.prefix_cache_hits));
      m.ready.Set(s.ready && !draining && s.fault.empty() ? 1.0 : 0.0);
      m.access_log_errors.Set(static_cast<double>(log.lines_lost()));
      std::lock_guard<std::mutex> l(conn_mu);
      m.connections_open.Set(static_cast<double>(connections));
    });
  }

  void DoAccept();
  void DoHealthAccept();  // the health port's loop: no connection limits, no drain stop
  void BeginRequest() {
    std::lock_guard<std::mutex> l(mu);
    ++in_flight;
  }
  void EndRequest() {
    std::lock_guard<std::mutex> l(mu);
    --in_flight;
    cv.notify_all();
  }
  // Counts a new connection from `remote` unless it is over server.max_connections (kTotal) or
  // server.max_connections_per_client (kPerClient); a refused one is not counted.
  enum class ConnLimit { kNone, kTotal, kPerClient };
  ConnLimit AddConnection(const std::string& remote) {
    std::lock_guard<std::mutex> l(conn_mu);
    if (cfg.server.max_connections > 0 && connections >= cfg.server.max_connections) return ConnLimit::kTotal;
    int64_t& mine = connections_per_client[remote];
    if (cfg.server.max_connections_per_client > 0 && mine >= cfg.server.max_connections_per_client) {
      if (mine == 0) connections_per_client.erase(remote);
      return ConnLimit::kPerClient;
    }
    ++mine;
    ++connections;
    return ConnLimit::kNone;
  }
  void RemoveConnection(const std::string& remote) {
    std::lock_guard<std::mutex> l(conn_mu);
    --connections;
    auto it = connections_per_client.find(remote);
    if (it != connections_per_client.end() && --it->second <= 0) connections_per_client.erase(it);
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
  // Content safety; all null when content_safety.enabled is off or the stage has no rule.
  std::shared_ptr<const ContentRuleSet> safety_in, safety_out;
  std::unique_ptr<ModerationClient> classifier;
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
  // Open connections by AddConnection. Declared before `ioc`: sessions still queued there are
  // destroyed with it (after these members, were they declared later) and release their count.
  std::mutex conn_mu;
  int64_t connections = 0;
  std::map<std::string, int64_t> connections_per_client;  // remote address -> open; no zero entries
  // Every live Session (registered by its constructor, removed by its destructor), so that Stop can
  // close the sockets of idle keep-alive connections and of requests still being read. Declared
  // before `ioc` for the same reason as the counts.
  std::mutex sessions_mu;
  std::set<Session*> sessions;
  net::io_context ioc;
  // Parses generation bodies and builds their prompts (server.prompt_threads). Declared after
  // `ioc`: it is destroyed first, with the sessions its queued work still holds, whose sockets
  // belong to `ioc`.
  net::thread_pool prompt_pool{static_cast<size_t>(std::max<int64_t>(1, cfg.server.prompt_threads))};
  tcp::acceptor acceptor;
  net::steady_timer accept_retry;  // backs off after a failed accept (EMFILE...)
  // server.health_port's listener (open only when it is set) and its own back-off timer.
  tcp::acceptor health_acceptor{net::make_strand(ioc)};
  net::steady_timer health_retry{health_acceptor.get_executor()};
  std::atomic<int> health_bound_port{0};
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

// One choice of a generation (n of them; one engine sequence each).
struct GenChoice {
  // The output's reasoning / tool-call parser (ChatOutputParser; null: the text is all content).
  std::unique_ptr<ToolStreamParser> parser;
  std::optional<StreamFilter> filter;  // the output rules (content safety), before the parser
  std::string content, reasoning, raw_text;
  std::vector<ToolCall> calls;
  std::vector<TokenLogprob> logprobs;
  int64_t completion_tokens = 0, text_offset = 0;
  bool finished = false;
  const char* finish_reason = nullptr;
  RequestStats stats;
};

// One generation request's state (lives on the session strand).
struct Gen {
  ParsedRequest req;
  std::vector<int32_t> prompt;
  std::string forced_prefix;  // ForcedToolCallPrefix: already in the prompt and fed to the parser
  // Chat output conventions of the model (chat_format.h), found on the prompt threads.
  ChatFormat format = ChatFormat::kHermes;
  bool in_reasoning = false;              // the prompt leaves the model inside its thinking channel
  std::vector<int32_t> keep_special_ids;  // the format's markers, kept in the output text
  std::shared_ptr<const grammar::CompiledGrammar> grammar;  // req.constraint compiled (null: free output)
  std::shared_ptr<const GrammarTrigger> grammar_trigger;    // strict tools under auto (ToolCallTrigger)
  std::string echo;           // completions with echo: the prompt's text, opening every choice
  // Content safety of the prompt (found on the prompt pool, logged on the strand): a block rule or
  // a flagged prompt under input_block refusal answers refusal_message without the engine.
  bool refused = false;
  AccessLogEntry input_log;  // its content_safety only: the prompt's matches
  std::shared_ptr<std::atomic<bool>> cancelled = std::make_shared<std::atomic<bool>>(false);
  std::shared_ptr<Link> link;
  ResponseHeader hdr;
  std::vector<GenChoice> choices;  // req.n of them
  int64_t completion_tokens = 0;   // over all choices
  int64_t choices_left = 0;        // not finished yet
  bool done = false, queued = false, admitted = false, first_token_seen = false;
  bool stream_started = false;  // the 200 and the SSE head are out (StartStream)
  uint64_t ticket = 0;
  std::string rate_key;
  Clock::time_point arrival, admitted_at, last_token;
  std::unique_ptr<net::steady_timer> timer;
};

class Session : public std::enable_shared_from_this<Session> {
 public:
  // `health_only`: a connection of server.health_port (only /health and /metrics, not counted).
  Session(tcp::socket socket, HttpServer::Impl* srv, bool health_only = false)
      : stream_(std::move(socket)), read_timer_(stream_.get_executor()), write_timer_(stream_.get_executor()), srv_(srv), health_only_(health_only) {
    std::lock_guard<std::mutex> l(srv_->sessions_mu);
    srv_->sessions.insert(this);
  }
  // The connection is counted while its session lives: until the socket is closed and the last
  // handler has run.
  ~Session() {
    {
      // First: Stop may be closing this session's socket under the lock.
      std::lock_guard<std::mutex> l(srv_->sessions_mu);
      srv_->sessions.erase(this);
    }
    if (counted_) srv_->RemoveConnection(remote_);
  }
  // Stop, once no I/O thread runs: closes the socket (the client sees the connection end); the
  // handlers still queued are dropped with the io_context.
  void CloseSocket() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.socket().close(ec);
  }

  void Run() {
    beast::error_code ec;
    remote_ = stream_.socket().remote_endpoint(ec).address().to_string();
    if (health_only_) {
      net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->DoRead(); });
      return;
    }
    HttpServer::Impl::ConnLimit over = srv_->AddConnection(remote_);
    counted_ = over == HttpServer::Impl::ConnLimit::kNone;
    net::dispatch(stream_.get_executor(), [self = shared_from_this(), over] {
      if (over == HttpServer::Impl::ConnLimit::kNone)
        self->DoRead();
      else
        self->RefuseConnection(over);
    });
  }

  // Called through the Link from the engine thread (posted here).
  void OnEvent(const std::shared_ptr<Gen>& g, const GenerationEvent& ev);
  void OnAdmitted(const std::shared_ptr<Gen>& g);
  auto executor() { return stream_.get_executor(); }

 private:
  void RefuseConnection(HttpServer::Impl::ConnLimit over);
  void DoRead();
  void ReadHeader();
  void OnHeader(beast::error_code ec, size_t);
  void ReadBody();
  void OnRead(beast::error_code ec, size_t);
  // The whole-phase read deadlines (server.header_timeout_s, body_timeout_s): on expiry the pending
  // read is cancelled and OnRead answers 408.
  void ArmReadDeadline(double seconds);
  void EndReadDeadline();
  void SendReadTimeout();
  void BeginEntry();
  void Handle(http::request<http::string_body>& req);
  void Route(http::request<http::string_body>& req, const std::string& path);
  void Authenticate(const http::request<http::string_body>& req);
  void StartGeneration(http::request<http::string_body>& req, bool chat);
  std::shared_ptr<Gen> PrepareGeneration(const std::string& body, bool chat);  // on the prompt pool
  void AdmitGeneration(const std::shared_ptr<Gen>& g, bool chat);
  void SendFailure(std::exception_ptr e);
  void Submit(const std::shared_ptr<Gen>& g);
  void StartStream(const std::shared_ptr<Gen>& g);
  void EmitContent(const std::shared_ptr<Gen>& g, int64_t index, const std::string& text, const ojson& logprobs);
  void EmitReasoning(const std::shared_ptr<Gen>& g, int64_t index, const std::string& text, const ojson& logprobs);
  void EmitParsed(const std::shared_ptr<Gen>& g, int64_t index, std::vector<ToolStreamEvent> evs,
                  const ojson& logprobs);
  // A chunk's usage field: absent, null (include_usage) or the running usage (continuous_usage_stats).
  std::optional<ojson> ChunkUsage(const std::shared_ptr<Gen>& g) const;
  // `reason_text` overrides the reason's text (content_filter).
  void FinishChoice(const std::shared_ptr<Gen>& g, int64_t index, FinishReason reason, const RequestStats& stats,
                    const char* reason_text = nullptr);
  // Content safety (http_session_safety.cpp).
  void CheckInputSafety(Gen& g, bool chat);  // on the prompt pool; throws the 400 / 503
  void RespondRefusal(const std::shared_ptr<Gen>& g);
  // Output text of choice `index` through its filter, then the parser or EmitContent.
  void EmitFiltered(const std::shared_ptr<Gen>& g, int64_t index, const std::string& text, const ojson& logprobs,
                    bool final);
  void RecordOutputHits(const std::vector<ContentHit>& hits);
  void FinishGeneration(const std::shared_ptr<Gen>& g);
  void FailGeneration(const std::shared_ptr<Gen>& g, const ApiError& e);
  void EndGeneration(const std::shared_ptr<Gen>& g);
  void StartWatch(const std::shared_ptr<Gen>& g);
  void ClientGone(const std::shared_ptr<Gen>& g);

  void SendResponse(int status, std::string body, const char* content_type, bool close = false,
                    std::vector<std::pair<std::string, std::string>> headers = {});
  void SendError(const ApiError& e, bool close = false);
  void ArmWriteDeadline();
  void EndWriteDeadline();
  void WriteRaw(std::string data);
  // HTTP/1.0 has no chunked coding: there the stream is sent as is and the close ends it.
  void WriteChunk(const std::string& data) {
    WriteRaw(http10_ ? data : fmt::format("{:x}\r\n{}\r\n", data.size(), data));
  }
  void EndStream();
  void DoWrite();
  void Record();
  void FinishRequest();
  void GracefulClose();
  void Drain();

  beast::tcp_stream stream_;
  // A read deadline of our own rather than the stream's: beast's timeout closes the socket, which
  // leaves no way to answer 408.
  net::steady_timer read_timer_;
  uint64_t read_deadline_gen_ = 0;  // a timer whose handler was already queued when re-armed is stale
  bool reading_ = false, read_timed_out_ = false, first_request_ = true;
  // The write deadline is ours too: beast's would close the socket, and a close leaves the bytes the
  // kernel still holds for the client (its send buffer: megabytes on loopback) going out at the
  // reader's pace; the timer resets the connection instead (ArmWriteDeadline).
  net::steady_timer write_timer_;
  uint64_t write_deadline_gen_ = 0;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  HttpServer::Impl* srv_;
  std::string remote_;
  bool health_only_ = false;  // accepted on server.health_port
  bool counted_ = false;      // by HttpServer::Impl::AddConnection
  bool refused_ = false;  // answered by RefuseConnection: no request, not in the request metrics
  // The request being answered.
  AccessLogEntry entry_;
  Clock::time_point start_;
  bool keep_alive_ = true, active_ = false, recorded_ = false, http10_ = false;
  bool head_ = false;  // a HEAD request: its answer goes out without the body
  std::shared_ptr<Gen> gen_;
  // Streaming output.
  std::deque<std::string> outq_;
  bool writing_ = false, end_after_write_ = false, closed_ = false;
  std::string drain_buf_;
};

}  // namespace tessera
