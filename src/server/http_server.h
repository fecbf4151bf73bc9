// tessera server: the HTTP front end (Boost.Beast over Asio, a few I/O threads, no thread per
// connection): routes, auth, admission (connection limits, rate limits, concurrency cap), the
// OpenAI endpoints with SSE streaming, /health, /metrics, access log and graceful shutdown. Engine
// events arrive on the engine thread and are posted onto the connection's strand.
//
// Routes: POST /v1/chat/completions, POST /v1/completions, GET /v1/models, GET /health,
// GET /metrics, GET of the chat page's files; every GET route also takes HEAD. Extension: a
// diffusion request with "diffusion": {"stream_steps": true} and "stream": true also gets
// `event: diffusion_step` SSE events whose data is
// {"block_start", "step", "block_tokens" (mask id where still masked), "unmasked" (absolute
// positions), "conf"}; OpenAI clients ignore named events.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>

#include "engine/engine_api.h"
#include "server/metrics.h"
#include "server/prompt_builder.h"
#include "server/server_config.h"

namespace tessera {

class HttpServer {
 public:
  // `engine` and `prompts` must outlive the server. The config's security/limits/server sections
  // are read here (API key file, access log file: Error when unreadable).
  HttpServer(ServerConfig config, EngineApi& engine, PromptBuilder& prompts);
  ~HttpServer();  // Stop()s
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  void Start();  // binds host:port (and health_port; Error when it cannot) and starts the I/O threads
  void StopAccepting();  // closes the listener; /health turns 503 "draining"; new requests get 503
  // Waits until no request is in flight (idle keep-alive connections do not count); false when
  // the deadline passed first.
  bool WaitForIdle(std::chrono::steady_clock::time_point deadline);
  // Cancels what is in flight, joins the threads, then closes every socket (listeners, idle
  // keep-alive connections, requests being read or answered): returns without waiting on clients.
  void Stop();
  int port() const;  // the bound port (after Start; useful with port 0)
  // server.health_port's bound port (0 when off): only GET/HEAD /health and /metrics, outside the
  // connection limits, open until Stop (a readiness probe sees "draining").
  int health_port() const;
  int64_t in_flight() const;
  MetricsRegistry& metrics();
  // The server's metric families, e.g. for a collector that copies the engine's per-expert routing
  // counts into expert_routed_tokens ({layer, expert}) before each scrape:
  //   server.metrics().AddCollector([&] { server.server_metrics().expert_routed_tokens.Set(...); });
  ServerMetrics& server_metrics();

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace tessera
