// tessera server: Beast/Asio implementation of HttpServer. One Session per connection, all of its
// work on its strand; a generation's engine events are posted onto that strand through a Link that
// Stop() severs, so an engine that outlives the server never touches a dead io_context. Here: the
// server (listen, accept, drain, stop) and Session's request reading, auth, routing and response
// writing; the generation requests are in http_session_generation.cpp.
#include "server/http_server.h"

#include <algorithm>
#include <cmath>
#include <future>

#include "core/error.h"
#include "server/http_session.h"
#include "server/static_assets.h"

namespace tessera {

namespace {
constexpr auto kIdleTimeout = std::chrono::seconds(75);
// The page uses only its own files and API: nothing inline, nothing from elsewhere.
constexpr const char* kStaticCsp =
    "default-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

// The path label of tessera_http_requests_total: served routes by name, anything else "other"
// (a label value per path a client makes up would grow the registry and every scrape for good).
std::string MetricsPath(const std::string& path) {
  static const char* const kRoutes[] = {"/health", "/metrics", "/v1/models", "/v1/chat/completions",
                                        "/v1/completions"};
  for (const char* r : kRoutes)
    if (path == r) return path;
  return FindStaticAsset(path) != nullptr ? path : "other";
}
}  // namespace

// Starts the bookkeeping of one answered request: in-flight count, timing, access-log entry.
void Session::BeginEntry() {
  active_ = true;
  recorded_ = false;
  head_ = false;
  srv_->BeginRequest();
  start_ = Clock::now();
  entry_ = {};
  entry_.request_id = fmt::format("req-{}", srv_->next_id++);
  entry_.remote = remote_;
}

// Over a connection limit: the error goes out at once, before any of the request is read (the
// limits are there against clients that hold connections with slow uploads), then the graceful
// close drains what the client sends for at most its 2 s.
void Session::RefuseConnection(HttpServer::Impl::ConnLimit over) {
  BeginEntry();
  // Not a request (none was read): counted by its own counter, so a flood of refusals does not read
  // as a rate of failed requests (tessera_request_errors_total, the error-rate alert).
  refused_ = true;
  entry_.refused = over == HttpServer::Impl::ConnLimit::kTotal ? "max_connections" : "max_connections_per_client";
  srv_->m.connections_refused.Inc({over == HttpServer::Impl::ConnLimit::kTotal ? "total" : "per_client"});
  const HttpSection& c = srv_->cfg.server;
  ApiError e =
      over == HttpServer::Impl::ConnLimit::kTotal
          ? ApiError(503, "service_unavailable",
                     fmt::format("the server has {} connections open, its limit; retry later", c.max_connections))
          : ApiError(429, "rate_limit_error",
                     fmt::format("client address {} has {} connections open, its limit; reuse one or retry later",
                                 remote_, c.max_connections_per_client),
                     "", "too_many_connections");
  e.retry_after_s = 1;
  SendError(e, true);
}

// Between requests on a keep-alive connection the idle timeout waits for the next request's first
// byte; from there (for a new connection's first request: from accept) the header deadline runs,
// then the body's (ArmReadDeadline). A request already in the buffer (pipelined) starts at once.
void Session::DoRead() {
  parser_.emplace();
  parser_->body_limit(static_cast<uint64_t>(srv_->cfg.server.max_body_bytes));
  parser_->header_limit(64 * 1024);
  if (first_request_ || buffer_.size() > 0) {
    first_request_ = false;
    return ReadHeader();
  }
  stream_.expires_after(kIdleTimeout);
  stream_.async_read_some(buffer_.prepare(4096), [self = shared_from_this()](beast::error_code ec, size_t n) {
    if (ec) {  // the client closed, or the idle timeout closed the socket: nothing to answer
      beast::error_code ignored;
      self->stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
      return;
    }
    self->buffer_.commit(n);
    self->ReadHeader();
  });
}

void Session::ReadHeader() {
  stream_.expires_never();
  ArmReadDeadline(srv_->cfg.server.header_timeout_s);
  http::async_read_header(stream_, buffer_, *parser_,
                          beast::bind_front_handler(&Session::OnHeader, shared_from_this()));
}

void Session::ArmReadDeadline(double seconds) {
  reading_ = true;
  read_timed_out_ = false;
  const uint64_t gen = ++read_deadline_gen_;
  read_timer_.cancel();
  if (seconds <= 0) return;
  read_timer_.expires_after(std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds)));
  read_timer_.async_wait([self = shared_from_this(), gen](beast::error_code ec) {
    if (ec || gen != self->read_deadline_gen_ || !self->reading_) return;
    self->read_timed_out_ = true;
    beast::error_code ignored;
    self->stream_.socket().cancel(ignored);  // the read ends with operation_aborted: OnRead answers 408
  });
}

// The read it guarded has ended: its timer lets go of the session now (a pending wait holds it, and
// the session counts as an open connection while it lives).
void Session::EndReadDeadline() {
  reading_ = false;
  ++read_deadline_gen_;
  read_timer_.cancel();
}

void Session::OnHeader(beast::error_code ec, size_t) {
  EndReadDeadline();
  if (ec) return OnRead(ec, 0);
  // A client that sent "Expect: 100-continue" (curl, for large bodies) holds the body back until
  // it gets the interim 100 or its own timeout (1 s for curl) runs out (RFC 9110 10.1.1).
  const auto& h = parser_->get();
  auto expect = h.find(http::field::expect);
  if (expect == h.end() || h.version() < 11 || parser_->is_done() ||
      !beast::iequals(expect->value(), "100-continue"))
    return ReadBody();
  static const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
  ArmWriteDeadline();
  net::async_write(stream_, net::buffer(kContinue), [self = shared_from_this()](beast::error_code ec, size_t) {
    self->EndWriteDeadline();
    if (ec) return self->OnRead(ec, 0);
    self->ReadBody();
  });
}

void Session::ReadBody() {
  stream_.expires_never();  // the body's deadline is ours (ArmReadDeadline), as a write's is
  ArmReadDeadline(srv_->cfg.server.body_timeout_s);
  http::async_read(stream_, buffer_, *parser_, beast::bind_front_handler(&Session::OnRead, shared_from_this()));
}

// A header or body not whole by its deadline (slowloris: a byte every few seconds, a Content-Length
// never finished): 408 and the close, with an access-log line and the request counters' 408. A new
// connection that sent nothing at all is closed without an answer (nothing was asked).
void Session::SendReadTimeout() {
  const bool header_done = parser_->is_header_done();
  if (!header_done && buffer_.size() == 0 && !parser_->got_some()) {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.socket().close(ignored);
    return;
  }
  BeginEntry();
  http10_ = false;
  if (header_done) {
    entry_.method = std::string(parser_->get().method_string());
    entry_.path = std::string(parser_->get().target());
    entry_.path = entry_.path.substr(0, entry_.path.find('?'));
  }
  const HttpSection& c = srv_->cfg.server;
  SendError(ApiError(408, "invalid_request_error",
                     header_done ? fmt::format("the request's body did not arrive within {} s (server.body_timeout_s)",
                                               c.body_timeout_s)
                                 : fmt::format("the request's header did not arrive within {} s "
                                               "(server.header_timeout_s)",
                                               c.header_timeout_s),
                     "", "request_timeout"),
            true);
}

void Session::OnRead(beast::error_code ec, size_t) {
  EndReadDeadline();
  if (ec && read_timed_out_) return SendReadTimeout();
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
  if (ec == http::error::header_limit) {  // RFC 6585: 431, not a generic 400
    stream_.expires_never();
    BeginEntry();
    SendError(ApiError(431, "invalid_request_error", "the request's header fields exceed 64 KiB"), true);
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
  // RFC 9112 3.2.2: the absolute form ("http://host:port/v1/...", as proxies send) names the same
  // resource as its path.
  if (target.rfind("http://", 0) == 0 || target.rfind("https://", 0) == 0) {
    size_t start = target.find_first_of("/?", target.find("//") + 2);
    if (start == std::string::npos) start = target.size();
    target = (start == target.size() || target[start] == '?' ? "/" : "") + target.substr(start);
  }
  std::string path = target.substr(0, target.find('?'));
  entry_.path = path;
  keep_alive_ = req.keep_alive() && !srv_->draining;
  http10_ = req.version() < 11;
  head_ = req.method() == http::verb::head;
  try {
    Route(req, path);
  } catch (...) {
    SendFailure(std::current_exception());
  }
}

// The answer to what handling a request threw: an ApiError as it is, a bad argument 400, else 500.
void Session::SendFailure(std::exception_ptr failure) {
  try {
    std::rethrow_exception(failure);
  } catch (const ContentSafetyError& e) {
    entry_.content_safety = e.hits;
    SendError(e);
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
  // Every GET route takes HEAD (RFC 9110 9.3.2): the same answer, whose body SendResponse drops.
  bool get = req.method() == http::verb::get || head_, post = req.method() == http::verb::post;
  auto not_allowed = [&](const char* allow) {  // 405 with Allow (RFC 9110 15.5.6)
    ApiError e(405, "invalid_request_error",
               fmt::format("{} is not allowed on {}; use {}", std::string(req.method_string()), path, allow));
    e.allow = allow;
    return e;
  };
  if (path == "/health") {
    if (!get) throw not_allowed("GET, HEAD");
    if (srv_->draining) return SendResponse(503, R"({"status":"draining"})", "application/json");
    const EngineSnapshot snap = srv_->engine.Snapshot();
    if (!snap.fault.empty())  // no answer would be right: a liveness probe restarts the server
      return SendResponse(503, nlohmann::ordered_json{{"status", "failed"}, {"error", snap.fault}}.dump(),
                          "application/json");
    if (!snap.ready) return SendResponse(503, R"({"status":"loading"})", "application/json");
    return SendResponse(200, R"({"status":"ok"})", "application/json");
  }
  if (health_only_ && path != "/metrics")
    throw ApiError(404, "invalid_request_error",
                   fmt::format("the health port serves only /health and /metrics, not {}", path), "", "not_found");
  if (!srv_->allow.Allowed(remote_))
    throw ApiError(403, "permission_error", fmt::format("client address {} is not allowed", remote_));
  // The chat page (web/, built in): loads without an API key; its API calls carry the key typed in.
  if (const StaticAsset* a = FindStaticAsset(path)) {
    if (!get) throw not_allowed("GET, HEAD");
    auto inm = req.find(http::field::if_none_match);
    bool fresh = inm != req.end() && EtagMatches(inm->value(), a->etag);
    return SendResponse(fresh ? 304 : 200, fresh ? "" : std::string(a->body), a->content_type.data(), false,
                        {{"ETag", a->etag}, {"Cache-Control", "no-cache"}, {"X-Content-Type-Options", "nosniff"},
                         {"Content-Security-Policy", kStaticCsp}});
  }
  if (path == "/metrics") {
    if (!get) throw not_allowed("GET, HEAD");
    if (srv_->cfg.server.metrics_require_key) Authenticate(req);
    return SendResponse(200, srv_->registry.Render(), "text/plain; version=0.0.4; charset=utf-8");
  }
  if (path.rfind("/v1/", 0) == 0) Authenticate(req);
  if (path == "/v1/models") {
    if (!get) throw not_allowed("GET, HEAD");
    return SendResponse(200, DumpJson(ModelsJson(srv_->engine.ModelInfo(), srv_->created)),
                        "application/json");
  }
  if (path == "/v1/chat/completions" || path == "/v1/completions") {
    if (!post) throw not_allowed("POST");
    return StartGeneration(req, path == "/v1/chat/completions");
  }
  throw ApiError(404, "invalid_request_error",
                 fmt::format("Unknown route: {} {}", std::string(req.method_string()), path), "",
                 "not_found");
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
  if (http10_ && keep_alive_) res->set(http::field::connection, "keep-alive");  // 1.0 closes by default
  res->body() = std::move(body);
  res->prepare_payload();
  // A HEAD answer has the GET's headers, Content-Length included, and no body: a client reads none,
  // so body bytes would be taken for the start of the next response on the connection.
  if (head_) res->body().clear();
  entry_.status = status;
  Record();
  ArmWriteDeadline();
  http::async_write(stream_, *res, [self = shared_from_this(), res](beast::error_code ec, size_t) {
    self->EndWriteDeadline();
    self->FinishRequest();
    if (ec) return;
    if (!self->keep_alive_) return self->GracefulClose();
    self->DoRead();
  });
}

void Session::SendError(const ApiError& e, bool close) {
  std::vector<std::pair<std::string, std::string>> headers;
  if (e.status == 429 || e.retry_after_s > 0)  // 429 always; a 503 when it says when
    headers.emplace_back("Retry-After",
                         std::to_string(std::max<int64_t>(1, std::llround(std::ceil(e.retry_after_s)))));
  if (e.status == 401) headers.emplace_back("WWW-Authenticate", "Bearer");
  if (!e.allow.empty()) headers.emplace_back("Allow", e.allow);
  entry_.error = e.message;
  SendResponse(e.status, ErrorJson(e), "application/json", close, std::move(headers));
}

// The deadline of the write about to start (server.write_timeout_s): on expiry the connection is
// reset and the write fails, which ends the request as a client that left. Reset, not closed: after
// a close the kernel would go on sending what it holds for this client (up to its send buffer,
// megabytes on loopback) at the reader's pace, with the connection open in FIN-WAIT-1 for as long as
// the reader keeps taking a little; the slow reader would not even see the cut (the soak's slow
// readers read on for minutes). SO_LINGER 0 makes the close an RST, which drops those bytes at once.
void Session::ArmWriteDeadline() {
  stream_.expires_never();
  const uint64_t gen = ++write_deadline_gen_;
  write_timer_.cancel();
  const double s = srv_->cfg.server.write_timeout_s;
  if (s <= 0) return;
  write_timer_.expires_after(std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s)));
  write_timer_.async_wait([self = shared_from_this(), gen](beast::error_code ec) {
    if (ec || gen != self->write_deadline_gen_) return;
    self->srv_->m.write_timeouts.Inc();
    beast::error_code ignored;
    self->stream_.socket().set_option(net::socket_base::linger(true, 0), ignored);
    self->stream_.socket().close(ignored);  // the pending write ends with operation_aborted
  });
}

// The write it guarded has ended: its timer lets go of the session (as EndReadDeadline).
void Session::EndWriteDeadline() {
  ++write_deadline_gen_;
  write_timer_.cancel();
}

void Session::WriteRaw(std::string data) {
  if (closed_) return;
  outq_.push_back(std::move(data));
  if (!writing_) DoWrite();
}

void Session::EndStream() {
  Record();
  if (!http10_) {
    WriteRaw("0\r\n\r\n");
    end_after_write_ = true;
    return;
  }
  end_after_write_ = true;  // HTTP/1.0: closing the connection ends the body
  if (!writing_ && !closed_) DoWrite();
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
  ArmWriteDeadline();
  net::async_write(stream_, net::buffer(outq_.front()),
                   [self = shared_from_this()](beast::error_code ec, size_t) {
                     self->EndWriteDeadline();
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
  if (!refused_) {
    srv_->m.http_requests.Inc({MetricsPath(entry_.path), code});
    if (entry_.status >= 400) srv_->m.errors.Inc({code});
  }
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
    if (ec) {
      // Out of descriptors (EMFILE / ENFILE) or memory: the connection stays in the backlog and
      // an immediate retry would fail again at once, spinning a core. Retry a little later.
      accept_retry.expires_after(std::chrono::milliseconds(100));
      accept_retry.async_wait([this](beast::error_code tec) {
        if (!tec && acceptor.is_open() && !draining) DoAccept();
      });
      return;
    }
    beast::error_code ig;
    socket.set_option(tcp::no_delay(true), ig);
    std::make_shared<Session>(std::move(socket), this)->Run();
    DoAccept();
  });
}

void HttpServer::Impl::DoHealthAccept() {
  health_acceptor.async_accept(net::make_strand(ioc), [this](beast::error_code ec, tcp::socket socket) {
    if (!health_acceptor.is_open()) return;
    if (ec) {  // as DoAccept
      health_retry.expires_after(std::chrono::milliseconds(100));
      health_retry.async_wait([this](beast::error_code tec) {
        if (!tec && health_acceptor.is_open()) DoHealthAccept();
      });
      return;
    }
    beast::error_code ig;
    socket.set_option(tcp::no_delay(true), ig);
    std::make_shared<Session>(std::move(socket), this, /*health_only=*/true)->Run();
    DoHealthAccept();
  });
}

// Opens, binds and listens on host:port (Error naming what failed).
static void Listen(tcp::acceptor& a, net::io_context& ioc, const std::string& host, int64_t port,
                   const char* key) {
  beast::error_code ec;
  tcp::resolver resolver(ioc);
  auto results = resolver.resolve(host, std::to_string(port), ec);
  if (ec || results.empty())
    Fail(ErrorKind::kInvalidArgument, "cannot resolve server.host '{}': {}", host, ec.message());
  tcp::endpoint ep = results.begin()->endpoint();
  a.open(ep.protocol(), ec);
  if (!ec) a.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) a.bind(ep, ec);
  if (!ec) a.listen(net::socket_base::max_listen_connections, ec);
  if (ec) Fail(ErrorKind::kInvalidArgument, "cannot listen on {}:{} ({}): {}", host, port, key, ec.message());
}

HttpServer::HttpServer(ServerConfig config, EngineApi& engine, PromptBuilder& prompts)
    : impl_(std::make_shared<Impl>(std::move(config), engine, prompts)) {}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::Start() {
  Impl& s = *impl_;
  if (s.started.exchange(true)) return;
  Listen(s.acceptor, s.ioc, s.cfg.server.host, s.cfg.server.port, "server.port");
  s.bound_port = s.acceptor.local_endpoint().port();
  if (s.cfg.server.health_port != 0) {
    if (s.cfg.server.health_port == s.bound_port)
      Fail(ErrorKind::kInvalidArgument, "server.health_port {} is the main port", s.cfg.server.health_port);
    Listen(s.health_acceptor, s.ioc, s.cfg.server.host, s.cfg.server.health_port, "server.health_port");
    s.health_bound_port = s.health_acceptor.local_endpoint().port();
    net::post(s.health_acceptor.get_executor(), [impl = &s] { impl->DoHealthAccept(); });
  }
  // The first accepts hold no reference to impl_: a server stopped before its threads ran them (a
  // model that fails to load at once) leaves them queued in impl_'s own io_context, and a reference
  // there would keep impl_ alive for ever (LeakSanitizer: CliLoadErrors under load). Stop joins the
  // threads before impl_ can go.
  net::post(s.acceptor.get_executor(), [impl = &s] { impl->DoAccept(); });
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
    s.accept_retry.cancel();
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
  // A prompt being built finishes (its answer is posted to the stopped io_context and never runs);
  // queued ones are dropped.
  s.prompt_pool.stop();
  s.prompt_pool.join();
  // No thread touches a socket now. Close the listeners and every connection's socket: idle
  // keep-alive connections and requests still being read would otherwise stay open (their clients
  // waiting) until the server object is destroyed. The drain (WaitForIdle) ran before Stop.
  beast::error_code ec;
  s.acceptor.close(ec);
  s.health_acceptor.close(ec);
  {
    std::lock_guard<std::mutex> l(s.sessions_mu);
    for (Session* session : s.sessions) session->CloseSocket();
  }
  // Sessions still referenced by queued handlers are destroyed with the io_context (in ~Impl).
}

int HttpServer::port() const { return impl_->bound_port; }

int HttpServer::health_port() const { return impl_->health_bound_port; }

int64_t HttpServer::in_flight() const {
  std::lock_guard<std::mutex> l(impl_->mu);
  return impl_->in_flight;
}

MetricsRegistry& HttpServer::metrics() { return impl_->registry; }

ServerMetrics& HttpServer::server_metrics() { return impl_->m; }

}  // namespace tessera
