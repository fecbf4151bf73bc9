// tessera tests: the operational side of the HTTP server over real sockets: API keys (401),
// IP allow-list (403), body limit (413), rate limits and the concurrency cap (429 + Retry-After),
// the admission queue, request timeout (504, engine cancelled), client disconnect mid-stream
// (engine cancelled), connection limits (503 / 429 at connect, their access-log lines), the health
// port under a connection flood, slow clients (slowloris: 408 at the header / body deadline while
// others are served), and graceful shutdown (Stop closes what is still open).
#include <gtest/gtest.h>
#include <poll.h>

#include <cerrno>
#include <future>

#include "server/http_server.h"
#include "unit/server_http_fakes.h"
#include "unit/server_test_fixture.h"
#include "test_util.h"

namespace tessera {
namespace {

using namespace testing_server;

class ServerOps : public FakeServerTest {
 protected:
  static std::string ChatBody(bool stream = false) {
    return ojson({{"messages", ojson::array({{{"role", "user"}, {"content", "Hi"}}})}, {"stream", stream}})
        .dump();
  }
  static std::string ErrorType(const HttpResponse& r) {
    ojson j = ojson::parse(r.body, nullptr, false);
    return j.is_object() && j.contains("error") ? j["error"]["type"].get<std::string>() : "<none>";
  }
  // A connection that the server counts: a keep-alive request answered on it (the accept loop
  // counts connections in the order they come, so earlier ones are counted too).
  static void Hold(Client& c) {
    ASSERT_TRUE(c.Send("GET", "/health", "", {}, /*keep_alive=*/true));
    EXPECT_EQ(c.Read().status, 200);
  }
  // Whether a new connection is served again within 5 s (a closed connection's place comes back
  // once its session is gone).
  bool ServedAgain() {
    for (int i = 0; i < 500; ++i) {
      if (Call(port, "GET", "/health").status == 200) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }
  // The access log's lines, parsed.
  static std::vector<ojson> LogLines(const std::string& path) {
    std::vector<ojson> out;
    std::string log = testing::ReadFile(path);
    for (size_t pos = 0; pos < log.size();) {
      size_t nl = log.find('\n', pos);
      if (nl == std::string::npos) nl = log.size();
      out.push_back(ojson::parse(log.substr(pos, nl - pos)));
      pos = nl + 1;
    }
    return out;
  }
  // A loopback port free a moment ago (the health port needs a number: 0 turns it off).
  static int FreePort() {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    int port = 0;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
      port = ntohs(a.sin_port);
    ::close(fd);
    return port;
  }
  // Whether the server ends the connection within `ms`: EOF, or a reset.
  static bool ClosedWithin(Client& c, int ms) {
    pollfd p{c.fd(), POLLIN, 0};
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (std::chrono::steady_clock::now() < until) {
      if (::poll(&p, 1, 50) <= 0) continue;
      char buf[4096];
      ssize_t n = ::recv(c.fd(), buf, sizeof buf, MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno == ECONNRESET)) return true;
    }
    return false;
  }
  // A refused connection: the error, Retry-After, Connection: close, then the server's close. The
  // answer comes whether or not the client has sent its request (`send`).
  static void ExpectRefused(Client& c, int status, const std::string& type, bool send) {
    if (send) {
      ASSERT_TRUE(c.Send("GET", "/health", "", {}, /*keep_alive=*/true));
    }
    HttpResponse r = c.Read();
    ExpectApiError(r, status, "", type);
    EXPECT_EQ(r.headers["retry-after"], "1");
    EXPECT_EQ(r.headers["connection"], "close");
    EXPECT_EQ(c.ReadToEnd(), "");
    char ch;
    EXPECT_EQ(::recv(c.fd(), &ch, 1, MSG_DONTWAIT), 0) << "the server did not close the connection";
  }
};

TEST_F(ServerOps, ApiKeys) {
  cfg.security.api_keys = {"sk-good"};
  Start();
  auto r = Call(port, "POST", "/v1/chat/completions", ChatBody());
  EXPECT_EQ(r.status, 401);
  EXPECT_EQ(ErrorType(r), "invalid_request_error");
  EXPECT_EQ(ojson::parse(r.body)["error"]["code"], "invalid_api_key");
  EXPECT_EQ(r.headers["www-authenticate"], "Bearer");
  EXPECT_EQ(
      Call(port, "POST", "/v1/chat/completions", ChatBody(), {{"Authorization", "Bearer sk-bad"}}).status,
      401);
  EXPECT_EQ(
      Call(port, "POST", "/v1/chat/completions", ChatBody(), {{"Authorization", "Basic sk-good"}}).status,
      401);
  EXPECT_EQ(Call(port, "GET", "/v1/models").status, 401);
  EXPECT_EQ(Call(port, "GET", "/v1/unknown").status, 401);  // no route discovery without a key
  EXPECT_EQ(
      Call(port, "POST", "/v1/chat/completions", ChatBody(), {{"Authorization", "Bearer sk-good"}}).status,
      200);
  EXPECT_EQ(Call(port, "GET", "/health").status, 200);            // always open
  EXPECT_EQ(Call(port, "GET", "/metrics").status, 200);           // open unless metrics_require_key
  EXPECT_EQ(engine.last().cache_namespace.rfind("key-", 0), 0u);  // prefix cache isolated per key
}

TEST_F(ServerOps, MetricsCanRequireKey) {
  cfg.security.api_keys = {"sk-good"};
  cfg.server.metrics_require_key = true;
  Start();
  EXPECT_EQ(Call(port, "GET", "/metrics").status, 401);
  EXPECT_EQ(Call(port, "GET", "/metrics", "", {{"Authorization", "Bearer sk-good"}}).status, 200);
  EXPECT_EQ(Call(port, "GET", "/health").status, 200);
}

TEST_F(ServerOps, IpAllowList) {
  cfg.security.allow_cidrs = {"10.0.0.0/8", "2001:db8::/32"};
  Start();
  auto r = Call(port, "POST", "/v1/chat/completions", ChatBody());
  EXPECT_EQ(r.status, 403);
  EXPECT_EQ(ErrorType(r), "permission_error");
  EXPECT_EQ(Call(port, "GET", "/health").status, 200);
  server.reset();
  cfg.security.allow_cidrs = {"127.0.0.0/8"};
  Start();
  EXPECT_EQ(Call(port, "POST", "/v1/chat/completions", ChatBody()).status, 200);
}

TEST_F(ServerOps, BodyLimit) {
  cfg.server.max_body_bytes = 2048;
  Start();
  std::string big =
      ojson({{"messages", ojson::array({{{"role", "user"}, {"content", std::string(8000, 'x')}}})}}).dump();
  auto r = Call(port, "POST", "/v1/chat/completions", big);
  EXPECT_EQ(r.status, 413);
  EXPECT_EQ(ErrorType(r), "invalid_request_error");
  EXPECT_EQ(Call(port, "POST", "/v1/chat/completions", ChatBody()).status, 200);  // still serving
}

// Each open connection may hold up to max_body_bytes for the 75 s idle timeout, and nothing capped
// how many were open: slow uploads could take the memory and the descriptors. Over
// server.max_connections a connection gets one 503 with Retry-After, without its request being
// read, and is closed; a closed connection gives its place back.
TEST_F(ServerOps, ConnectionLimit) {
  const std::string dir = testing::ScratchDir("server_refused_log");
  cfg.server.access_log = dir + "/access.log";
  cfg.server.max_connections = 2;
  Start();
  Client upload(port), idle(port);
  Hold(upload);
  ASSERT_TRUE(upload.SendRaw("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n{\"me"));
  Hold(idle);
  Client third(port);
  ExpectRefused(third, 503, "service_unavailable", /*send=*/false);
  // The open connections are a gauge; the refused one is not among them.
  ASSERT_TRUE(idle.Send("GET", "/metrics", "", {}, true));
  HttpResponse m = idle.Read();
  EXPECT_NE(m.body.find("\ntessera_http_connections_open 2\n"), std::string::npos) << m.body;
  // Refusals have their own counter; no request was read, so the request counters do not have them.
  EXPECT_NE(m.body.find("tessera_http_connections_refused_total{limit=\"total\"} 1\n"), std::string::npos)
      << m.body;
  EXPECT_EQ(m.body.find("tessera_request_errors_total{code=\"503\"}"), std::string::npos) << m.body;
  // The refusal has one access-log line (written before its answer went out): status, address and
  // reason, no request (none was read). Read now: ServedAgain below may be refused again while the
  // closed connection's session is going away.
  std::vector<ojson> refused;
  for (const ojson& line : LogLines(dir + "/access.log"))
    if (line.contains("refused")) refused.push_back(line);
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_EQ(refused[0]["status"], 503);
  EXPECT_EQ(refused[0]["remote"], "127.0.0.1");
  EXPECT_EQ(refused[0]["refused"], "max_connections");
  EXPECT_FALSE(refused[0].contains("method"));
  EXPECT_FALSE(refused[0].contains("path"));
  upload.Close();
  EXPECT_TRUE(ServedAgain());
  EXPECT_EQ(engine.num_submitted(), 0u);
}

// server.max_connections_per_client: one address over its share gets 429 and is closed; other
// addresses are still served. By default there is no per-address cap, only the total; 0 lifts both.
TEST_F(ServerOps, PerClientConnectionLimit) {
  const std::string dir = testing::ScratchDir("server_refused_log2");
  cfg.server.access_log = dir + "/access.log";
  cfg.server.max_connections_per_client = 2;
  Start();
  Client a(port), b(port);
  Hold(a);
  Hold(b);
  Client c(port);
  ExpectRefused(c, 429, "rate_limit_error", /*send=*/true);
  Client other(port, "127.0.0.2");
  ASSERT_TRUE(other.connected());
  Hold(other);
  ASSERT_TRUE(other.Send("GET", "/metrics", "", {}, true));
  const HttpResponse m = other.Read();
  EXPECT_NE(m.body.find("tessera_http_connections_refused_total{limit=\"per_client\"} 1\n"), std::string::npos)
      << m.body;
  int refusals = 0;
  for (const ojson& line : LogLines(dir + "/access.log")) {
    if (!line.contains("refused")) continue;
    ++refusals;
    EXPECT_EQ(line["status"], 429);
    EXPECT_EQ(line["remote"], "127.0.0.1");
    EXPECT_EQ(line["refused"], "max_connections_per_client");
  }
  EXPECT_EQ(refusals, 1);
  a.Close();
  EXPECT_TRUE(ServedAgain());

  server.reset();
  cfg = ServerConfig{};
  SetUp();
  // By default one address may hold as many as the total allows (a batch client, a proxy).
  EXPECT_EQ(cfg.server.max_connections_per_client, 0);
  cfg.server.max_connections = 100;
  Start();
  std::vector<std::unique_ptr<Client>> held;
  for (int i = 0; i < 100; ++i) {
    held.push_back(std::make_unique<Client>(port));
    Hold(*held.back());
  }
  Client over(port);
  ExpectRefused(over, 503, "service_unavailable", /*send=*/true);
  held.clear();

  server.reset();
  cfg.server.max_connections = 0;
  cfg.server.max_connections_per_client = 0;
  Start();
  for (int i = 0; i < 80; ++i) {
    held.push_back(std::make_unique<Client>(port));
    Hold(*held.back());
  }
}

// server.health_port: a kubelet probe still gets /health while the main port is full (its
// connections are outside max_connections), and that port serves nothing else.
TEST_F(ServerOps, HealthPortAnswersWhileTheMainPortIsFull) {
  cfg.server.max_connections = 2;
  cfg.server.health_port = FreePort();
  ASSERT_GT(cfg.server.health_port, 0);
  Start();
  ASSERT_EQ(server->health_port(), cfg.server.health_port);
  Client a(port), b(port);
  Hold(a);
  Hold(b);
  Client refused(port);
  ExpectRefused(refused, 503, "service_unavailable", /*send=*/true);
  const int hp = server->health_port();
  std::vector<std::unique_ptr<Client>> probes;  // held open: still no limit on this port
  for (int i = 0; i < 4; ++i) {
    probes.push_back(std::make_unique<Client>(hp));
    Hold(*probes.back());
  }
  EXPECT_EQ(Call(hp, "GET", "/health").status, 200);
  EXPECT_EQ(Call(hp, "HEAD", "/health").status, 200);
  HttpResponse m = Call(hp, "GET", "/metrics");
  EXPECT_EQ(m.status, 200);
  EXPECT_NE(m.body.find("tessera_http_connections_refused_total{limit=\"total\"} 1\n"), std::string::npos)
      << m.body;
  EXPECT_NE(m.body.find("\ntessera_http_connections_open 2\n"), std::string::npos) << m.body;
  ExpectApiError(Call(hp, "GET", "/v1/models"), 404, "");
  ExpectApiError(Call(hp, "POST", "/v1/chat/completions", ChatBody()), 404, "");
  EXPECT_EQ(Call(hp, "GET", "/").status, 404);  // not the chat page either
  EXPECT_EQ(engine.num_submitted(), 0u);
  // Draining: the main listener is gone, the probe sees 503 "draining".
  server->StopAccepting();
  HttpResponse d = Call(hp, "GET", "/health");
  EXPECT_EQ(d.status, 503);
  EXPECT_NE(d.body.find("draining"), std::string::npos);
}

// Slowloris: a client that trickles its header a byte at a time, one whose body stops short of its
// Content-Length and one that connects and sends nothing. Each used to hold its connection (and a
// slot of max_connections) for the one fixed 75 s deadline that header and body shared (another 75 s
// for the body after a 100 Continue), then lose it without an answer, a log line or a count. Now the
// header and the body each have a configurable whole-phase deadline: 408 naming the key, an
// access-log line, the request counters' 408, the close; the silent one is closed without an answer.
// Meanwhile, on one I/O thread, other clients are served at once, and a keep-alive connection idle
// past the header deadline is not cut (that wait is the idle timeout's, until the next request's first byte).
TEST_F(ServerOps, SlowClientsGet408AtTheDeadlineWhileOthersAreServed) {
  const std::string dir = testing::ScratchDir("server_slowloris");
  cfg.server.access_log = dir + "/access.log";
  cfg.server.threads = 1;
  cfg.server.header_timeout_s = 1;
  cfg.server.body_timeout_s = 1;
  Start();
  using SteadyClock = std::chrono::steady_clock;
  auto seconds_since = [](SteadyClock::time_point t) {
    return std::chrono::duration<double>(SteadyClock::now() - t).count();
  };
  auto short_reads = [](Client& c) {  // a failure shows in 4 s, not the fixture's 10
    timeval tv{4, 0};
    ::setsockopt(c.fd(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  };
  Client idle(port);
  Hold(idle);
  const auto t0 = SteadyClock::now();
  Client trickle(port), body(port), silent(port);
  for (Client* c : {&trickle, &body, &silent}) {
    ASSERT_TRUE(c->connected());
    short_reads(*c);
  }
  std::atomic<bool> stop{false};
  std::thread trickler([&] {
    const std::string head = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Pad: ";
    for (size_t i = 0; !stop; ++i) {
      if (!trickle.SendRaw(std::string(1, i < head.size() ? head[i] : 'a'))) return;  // the server closed
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  ASSERT_TRUE(body.SendRaw("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                           "Content-Length: 5000\r\n\r\n{\"messages\": "));
  // Served while the three hold their connections, each at once.
  int served = 0;
  while (seconds_since(t0) < 0.8) {
    const auto t = SteadyClock::now();
    EXPECT_EQ(Call(port, "POST", "/v1/chat/completions", ChatBody()).status, 200);
    EXPECT_LT(seconds_since(t), 0.5);
    ++served;
  }
  EXPECT_GE(served, 2);

  HttpResponse r = trickle.Read();
  const double header_s = seconds_since(t0);
  stop = true;
  trickler.join();
  std::string msg = ExpectApiError(r, 408, "");
  EXPECT_NE(msg.find("server.header_timeout_s"), std::string::npos) << msg;
  EXPECT_EQ(ojson::parse(r.body)["error"]["code"], "request_timeout");
  EXPECT_EQ(r.headers["connection"], "close");
  EXPECT_GE(header_s, 0.9);
  EXPECT_LT(header_s, 2.5);
  r = body.Read();
  msg = ExpectApiError(r, 408, "");
  EXPECT_NE(msg.find("server.body_timeout_s"), std::string::npos) << msg;
  EXPECT_LT(seconds_since(t0), 2.5);
  EXPECT_TRUE(ClosedWithin(trickle, 3000)) << "the 408's connection was left open";
  EXPECT_TRUE(ClosedWithin(body, 3000)) << "the 408's connection was left open";
  EXPECT_EQ(silent.ReadToEnd(), "") << "a connection that asked nothing got an answer";
  char ch;
  EXPECT_EQ(::recv(silent.fd(), &ch, 1, MSG_DONTWAIT), 0) << "the silent connection was left open";

  // The keep-alive connection idled past the header deadline and is still served.
  ASSERT_TRUE(idle.Send("GET", "/metrics", "", {}, true));
  HttpResponse m = idle.Read();
  EXPECT_EQ(m.status, 200);
  EXPECT_NE(m.body.find("tessera_request_errors_total{code=\"408\"} 2\n"), std::string::npos) << m.body;
  std::vector<ojson> timeouts;
  for (const ojson& line : LogLines(dir + "/access.log"))
    if (line["status"] == 408) timeouts.push_back(line);
  ASSERT_EQ(timeouts.size(), 2u);
  int with_path = 0;
  for (const ojson& line : timeouts) {
    EXPECT_EQ(line["remote"], "127.0.0.1");
    EXPECT_NE(line["error"].get<std::string>().find("did not arrive within 1 s"), std::string::npos) << line.dump();
    // The body's line has its request line; the header's has none (it never came whole).
    if (line["path"] != "") {
      ++with_path;
      EXPECT_EQ(line["path"], "/v1/chat/completions");
      EXPECT_EQ(line["method"], "POST");
    }
  }
  EXPECT_EQ(with_path, 1);
  EXPECT_EQ(engine.num_submitted(), static_cast<size_t>(served));
}

TEST_F(ServerOps, MalformedHttpIs400) {
  Start();
  Client c(port);
  ASSERT_TRUE(c.SendRaw("GARBAGE\r\n\r\n"));
  HttpResponse r = c.Read();
  EXPECT_EQ(r.status, 400);
}

TEST_F(ServerOps, RequestsPerMinute) {
  cfg.limits.requests_per_minute = 2;
  Start();
  EXPECT_EQ(Call(port, "POST", "/v1/chat/completions", ChatBody()).status, 200);
  EXPECT_EQ(Call(port, "POST", "/v1/chat/completions", ChatBody()).status, 200);
  auto r = Call(port, "POST", "/v1/chat/completions", ChatBody());
  EXPECT_EQ(r.status, 429);
  EXPECT_EQ(ojson::parse(r.body)["error"]["code"], "rate_limit_exceeded");
  ASSERT_TRUE(r.headers.count("retry-after"));
  int retry = std::stoi(r.headers["retry-after"]);
  EXPECT_GE(retry, 29);  // 2/min: the next slot is ~30 s away
  EXPECT_LE(retry, 30);
  EXPECT_EQ(engine.num_submitted(), 2u);
}

// Issue 34 item 4: per-key rate limits hold under concurrency (48 requests at once from two keys,
// 5 a minute each: exactly 5 of each key's pass, none over-admitted), and what a request carries
// never leaks: neither the API key nor the prompt is in the access log (log_requests off) or in
// /metrics.
TEST_F(ServerOps, RateLimitsHoldUnderConcurrencyAndNothingLeaks) {
  const std::string log = testing::ScratchDir("server-ops-ratelimit") + "/access.log";
  cfg.security.api_keys = {"sk-alpha-0123456789", "sk-beta-0123456789"};
  cfg.limits.requests_per_minute = 5;
  cfg.server.threads = 4;
  cfg.server.access_log = log;
  Start();
  const std::string marker = "prompt-marker-7f3a9c";
  const std::string body =
      ojson({{"messages", ojson::array({{{"role", "user"}, {"content", marker}}})}}).dump();
  std::vector<std::future<int>> calls;
  for (int i = 0; i < 48; ++i)
    calls.push_back(std::async(std::launch::async, [&, i] {
      return Call(port, "POST", "/v1/chat/completions", body,
                  {{"Authorization", "Bearer " + cfg.security.api_keys[i % 2]}})
          .status;
    }));
  std::map<int, int> ok, limited;  // per key index
  for (int i = 0; i < 48; ++i) {
    const int status = calls[i].get();
    if (status == 200) ++ok[i % 2];
    else if (status == 429) ++limited[i % 2];
    else ADD_FAILURE() << "status " << status;
  }
  for (int k = 0; k < 2; ++k) {
    EXPECT_EQ(ok[k], 5) << "key " << k;
    EXPECT_EQ(limited[k], 19) << "key " << k;
  }
  EXPECT_EQ(engine.num_submitted(), 10u);
  const std::string metrics = Call(port, "GET", "/metrics").body;
  server->Stop();  // flushes the access log
  const std::string logged = testing::ReadFile(log);
  EXPECT_EQ(LogLines(log).size(), 48u + 1u);  // every request, and the /metrics call
  for (const std::string& secret : {cfg.security.api_keys[0], cfg.security.api_keys[1], marker}) {
    EXPECT_EQ(logged.find(secret), std::string::npos) << secret;
    EXPECT_EQ(metrics.find(secret), std::string::npos) << secret;
  }
}

TEST_F(ServerOps, TokensPerMinute) {
  cfg.limits.tokens_per_minute = 30;  // the fake prompt is 18 tokens
  Start();
  EXPECT_EQ(Call(port, "POST", "/v1/chat/completions", ChatBody()).status, 200);  // 18 + 4 charged
  auto r = Call(port, "POST", "/v1/chat/completions", ChatBody());
  EXPECT_EQ(r.status, 429);
  EXPECT_GE(std::stoi(r.headers["retry-after"]), 1);
}

TEST_F(ServerOps, ConcurrencyCapAndQueue) {
  cfg.limits.max_concurrent_requests = 1;
  cfg.limits.max_queue = 1;
  engine.delay_ms = 60;  // ~240 ms a request
  Start();
  auto a =
      std::async(std::launch::async, [&] { return Call(port, "POST", "/v1/chat/completions", ChatBody()); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  auto b =
      std::async(std::launch::async, [&] { return Call(port, "POST", "/v1/chat/completions", ChatBody()); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  auto c = Call(port, "POST", "/v1/chat/completions", ChatBody());  // one running, one queued: full
  EXPECT_EQ(c.status, 429);
  EXPECT_EQ(c.headers["retry-after"], "1");
  EXPECT_EQ(a.get().status, 200);
  HttpResponse rb = b.get();
  EXPECT_EQ(rb.status, 200);
  EXPECT_EQ(ojson::parse(rb.body)["choices"][0]["message"]["content"], "Hello, world!");
  EXPECT_EQ(engine.num_submitted(), 2u);
  EXPECT_EQ(Call(port, "POST", "/v1/chat/completions", ChatBody()).status, 200);  // slots came back
}

// Building a prompt (template + tokenizer: seconds for a body of megabytes) does not hold an I/O
// thread: with one I/O thread and two requests building, /health and /v1/models still answer while
// they build, and both requests then complete.
TEST_F(ServerOps, PromptBuildingDoesNotStallOtherConnections) {
  cfg.server.threads = 1;
  cfg.server.prompt_threads = 2;
  prompts.build_delay_ms = 2500;
  Start();
  auto post = [&] { return Call(port, "POST", "/v1/chat/completions", ChatBody()); };
  auto a = std::async(std::launch::async, post), b = std::async(std::launch::async, post);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // both are building now
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(Call(port, "GET", "/health").status, 200);
  EXPECT_EQ(Call(port, "GET", "/v1/models").status, 200);
  // Not a timing benchmark: with the builds on the I/O thread these answers wait for both (~5 s).
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(1500));
  EXPECT_EQ(a.wait_for(std::chrono::seconds(0)), std::future_status::timeout);  // still building
  EXPECT_EQ(a.get().status, 200);
  EXPECT_EQ(b.get().status, 200);
  EXPECT_EQ(engine.num_submitted(), 2u);
}

// A prompt the template refuses, built on the prompt pool, is still answered 400 on its connection,
// and the connection serves its next request.
TEST_F(ServerOps, PromptPoolFailuresAreAnsweredOnTheirConnection) {
  Start();
  Client c(port);
  const std::string bad =
      ojson({{"messages", ojson::array({{{"role", "user"}, {"content", "TEMPLATE_ERROR"}}})}}).dump();
  ASSERT_TRUE(c.Send("POST", "/v1/chat/completions", bad, {}, /*keep_alive=*/true));
  ExpectApiError(c.Read(), 400, "messages");
  ASSERT_TRUE(c.Send("POST", "/v1/chat/completions", ChatBody(), {}, /*keep_alive=*/true));
  EXPECT_EQ(c.Read().status, 200);
  ASSERT_TRUE(c.Send("POST", "/v1/chat/completions", "{not json", {}, /*keep_alive=*/true));
  ExpectApiError(c.Read(), 400, "");
}

TEST_F(ServerOps, TimeoutCancelsTheEngineRequest) {
  cfg.server.request_timeout_s = 0.2;
  engine.hang = true;
  Start();
  auto r = Call(port, "POST", "/v1/chat/completions", ChatBody());
  EXPECT_EQ(r.status, 504);
  EXPECT_EQ(ErrorType(r), "timeout_error");
  EXPECT_TRUE(engine.WaitCancelled(0));
  // Streaming: the error arrives inside the stream, then [DONE].
  auto s = Call(port, "POST", "/v1/chat/completions", ChatBody(true));
  EXPECT_EQ(s.status, 200);
  std::vector<SseEvent> evs;
  ASSERT_TRUE(ParseSse(s.body, evs)) << s.body;
  EXPECT_EQ(evs.back().data, "[DONE]");
  EXPECT_EQ(ojson::parse(evs[evs.size() - 2].data)["error"]["type"], "timeout_error");
  EXPECT_TRUE(engine.WaitCancelled(1));
}

TEST_F(ServerOps, DisconnectMidStreamCancels) {
  engine.hang = true;
  Start();
  {
    Client c(port);
    ASSERT_TRUE(c.Send("POST", "/v1/chat/completions", ChatBody(true)));
    HttpResponse head;
    ASSERT_TRUE(c.ReadHead(head));
    EXPECT_EQ(head.status, 200);
    std::string chunk;
    ASSERT_TRUE(c.ReadChunk(chunk));  // the role chunk
    EXPECT_NE(chunk.find("\"role\":\"assistant\""), std::string::npos);
  }  // client closes
  EXPECT_TRUE(engine.WaitCancelled(0));
  EXPECT_TRUE(server->WaitForIdle(std::chrono::steady_clock::now() + std::chrono::seconds(5)));
}

TEST_F(ServerOps, DisconnectWhileWaitingNonStreamingCancels) {
  engine.hang = true;
  Start();
  {
    Client c(port);
    ASSERT_TRUE(c.Send("POST", "/v1/chat/completions", ChatBody(false)));
    for (int i = 0; i < 200 && engine.num_submitted() == 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_TRUE(engine.WaitCancelled(0));
}

TEST_F(ServerOps, GracefulShutdown) {
  engine.delay_ms = 100;  // ~400 ms
  Start();
  auto a =
      std::async(std::launch::async, [&] { return Call(port, "POST", "/v1/chat/completions", ChatBody()); });
  for (int i = 0; i < 200 && engine.num_submitted() == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(server->in_flight(), 1);
  server->StopAccepting();
  EXPECT_FALSE(Client(port).connected());  // the listener is gone
  EXPECT_TRUE(server->WaitForIdle(std::chrono::steady_clock::now() + std::chrono::seconds(5)));
  EXPECT_EQ(a.get().status, 200);  // the in-flight request completed
  server->Stop();
}

TEST_F(ServerOps, WaitForIdleTimesOutAndStopCancels) {
  engine.hang = true;
  Start();
  auto a =
      std::async(std::launch::async, [&] { return Call(port, "POST", "/v1/chat/completions", ChatBody()); });
  for (int i = 0; i < 200 && engine.num_submitted() == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  server->StopAccepting();
  EXPECT_FALSE(server->WaitForIdle(std::chrono::steady_clock::now() + std::chrono::milliseconds(100)));
  server->Stop();
  EXPECT_TRUE(engine.WaitCancelled(0));
  EXPECT_FALSE(a.get().ok);  // the connection was closed without an answer
}

// Stop closes what is still open after the drain: an idle keep-alive connection and one whose
// request is still being read get the connection's end at once, and Stop returns promptly.
TEST_F(ServerOps, StopClosesIdleAndHalfReadConnections) {
  Start();
  Client idle(port), partial(port);
  Hold(idle);
  ASSERT_TRUE(partial.SendRaw("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n{"));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the server is reading its body
  server->StopAccepting();
  EXPECT_TRUE(server->WaitForIdle(std::chrono::steady_clock::now() + std::chrono::seconds(5)));
  const auto t0 = std::chrono::steady_clock::now();
  server->Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
  // The server object is still alive: before, the sockets stayed open until it was destroyed.
  EXPECT_TRUE(ClosedWithin(idle, 2000)) << "the idle keep-alive connection was left open";
  EXPECT_TRUE(ClosedWithin(partial, 2000)) << "the half-read request's connection was left open";
}

}  // namespace
}  // namespace tessera
