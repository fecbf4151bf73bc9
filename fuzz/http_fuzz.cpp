// tessera fuzz: HTTP request parsing and routing, end to end: the real HttpServer (Boost.Beast
// parser, router, auth, body limits, the OpenAI endpoints, SSE streaming) on a loopback port over
// the fakes of tests/unit/server_http_fakes.h, started once. Each input is sent as raw bytes on a
// fresh connection, the write side is shut (so a half-sent request ends at EOF instead of waiting
// for the server's timeouts), and the answer is read until the server closes or a short timeout.
//
// The server must survive anything a client sends: a crash or a sanitizer report in any server
// thread ends the fuzzer; and every 64 inputs (and at start) GET /health must still answer 200,
// so a wedged I/O thread or a lost strand is a finding too (abort).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "server/http_server.h"
#include "server/server_config.h"
#include "unit/server_http_fakes.h"

namespace {

using tessera::testing_server::FakeEngine;
using tessera::testing_server::FakePromptBuilder;

// The fake engine keeps every request and its playback thread until it is destroyed; over
// millions of inputs that is unbounded. This one joins the finished threads now and then (they
// post events to the sessions' strands and never wait on them, so joining cannot deadlock).
class FuzzEngine : public FakeEngine {
 public:
  void Submit(tessera::GenerationRequest req) override {
    FakeEngine::Submit(std::move(req));
    std::vector<std::thread> done;
    {
      std::lock_guard<std::mutex> l(mu);
      if (threads.size() < 32) return;
      done.swap(threads);
      submitted.clear();
      cancels.clear();
    }
    for (auto& t : done) t.join();
  }
};

struct Server {
  tessera::ServerConfig cfg;
  FuzzEngine engine;
  FakePromptBuilder prompts;
  std::unique_ptr<tessera::HttpServer> http;
  int port = 0;
};

Server* g_server = nullptr;

int Connect(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Sends `bytes`, shuts the write side, reads until EOF / error / `timeout_ms` without data.
std::string Exchange(int port, const uint8_t* bytes, size_t n, int timeout_ms) {
  int fd = Connect(port);
  if (fd < 0) return "";
  for (size_t off = 0; off < n;) {
    ssize_t w = send(fd, bytes + off, n - off, MSG_NOSIGNAL);
    if (w <= 0) break;  // the server may close early (a bad request line): not an error
    off += static_cast<size_t>(w);
  }
  shutdown(fd, SHUT_WR);
  std::string out;
  char buf[4096];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, timeout_ms) <= 0) break;
    ssize_t r = recv(fd, buf, sizeof buf, 0);
    if (r <= 0) break;
    out.append(buf, static_cast<size_t>(r));
  }
  close(fd);
  return out;
}

void CheckHealth() {
  static const std::string kGet = "GET /health HTTP/1.1\r\nHost: fuzz\r\nConnection: close\r\n\r\n";
  std::string r = Exchange(g_server->port, reinterpret_cast<const uint8_t*>(kGet.data()), kGet.size(), 5000);
  if (r.rfind("HTTP/1.1 200", 0) != 0) {
    fprintf(stderr, "http_fuzz: GET /health no longer answers 200; got: %.200s\n", r.c_str());
    abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  g_server = new Server();  // never destroyed: the server lives as long as the fuzzer
  g_server->cfg.server.port = 0;
  g_server->cfg.server.threads = 2;
  g_server->cfg.server.access_log = "";
  g_server->cfg.server.request_timeout_s = 5;
  g_server->cfg.server.write_timeout_s = 2;
  g_server->cfg.server.max_body_bytes = 1 << 20;
  g_server->http = std::make_unique<tessera::HttpServer>(g_server->cfg, g_server->engine, g_server->prompts);
  g_server->http->Start();
  g_server->port = g_server->http->port();
  CheckHealth();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static uint64_t n = 0;
  (void)Exchange(g_server->port, data, size, 1000);
  if (++n % 64 == 0) CheckHealth();
  return 0;
}
