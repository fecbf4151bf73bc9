// tessera tests: hostile or malformed client input over real sockets with a fake engine. Each
// bad request must get OpenAI's error object with the right status (400, 405, 431...), reach no
// engine, and leave the server serving the next client: JSON nested deep enough to exhaust a
// thread's stack, wrong types inside nested fields, integers at and beyond the int64 range,
// invalid UTF-8 / lone surrogates, oversized headers, wrong methods, HEAD, absolute-form targets,
// Expect: 100-continue, HTTP/1.0 streams, streams the engine refuses, made-up paths in /metrics,
// clients that stop reading (reset at the write deadline), and clients that take every file descriptor.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/resource.h>

#include <cstring>
#include <filesystem>
#include <memory>

#include "server/http_server.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"
#include "unit/server_http_fakes.h"
#include "unit/server_test_fixture.h"
#include "unit/server_metrics_checker.h"

namespace tessera {
namespace {

using namespace testing_server;

class ServerBadInput : public FakeServerTest {
 protected:
  HttpResponse PostText(const std::string& path, const std::string& body) { return Call(port, "POST", path, body); }
  static std::string ChatText(const std::string& extra = "") {
    return R"({"model": "fake-moe", "messages": [{"role": "user", "content": "Hi"}])" +
           (extra.empty() ? "" : ", " + extra) + "}";
  }
  static std::string Nested(int depth) { return std::string(depth, '[') + std::string(depth, ']'); }
  // A loopback connection with a 4 KiB receive buffer that has sent a streaming chat request and reads
  // nothing yet (so the server's writes back up at once); -1 when the connection or the send failed.
  static int SendStreamingChatWithoutReading(int port) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    int small = 4096;
    ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const std::string body = ChatText(R"("stream": true)");
    const std::string req = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " +
                            std::to_string(body.size()) + "\r\n\r\n" + body;
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::send(fd, req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size())) {
      ::close(fd);
      return -1;
    }
    return fd;
  }
};

// Copying, dumping or rendering a JSON value recurses once a level, so a body nested 100k deep
// (200 KB) could overflow an I/O thread's stack (with the real template it did: next test). Such
// bodies are refused before they are parsed; ordinary nesting still passes.
TEST_F(ServerBadInput, DeeplyNestedJsonIs400AndTheServerKeepsServing) {
  Start();
  const std::string chat = "/v1/chat/completions";
  const std::string deep = Nested(100000);
  std::string msg = ExpectApiError(PostText(chat, ChatText(R"("chat_template_kwargs": {"a": )" + deep + "}")), 400, "");
  EXPECT_NE(msg.find("nest"), std::string::npos) << msg;
  ExpectApiError(PostText(chat, ChatText(R"("tools": [{"type": "function", "function": {"name": "f", )"
                                         R"("parameters": {"type": "object", "x": )" +
                                         deep + "}}}]")),
                 400, "");
  ExpectApiError(PostText(chat, ChatText(R"("unknown_field": )" + deep)), 400, "");
  // Deep JSON inside a JSON string: a tool call's arguments, parsed by the server.
  ojson body = {
      {"messages",
       {{{"role", "user"}, {"content", "x"}},
        {{"role", "assistant"},
         {"tool_calls", {{{"id", "c1"}, {"function", {{"name", "f"}, {"arguments", "{\"a\": " + deep + "}"}}}}}}}}}};
  ExpectApiError(PostText(chat, body.dump()), 400, "messages[1].tool_calls[0].function.arguments");
  EXPECT_EQ(engine.num_submitted(), 0u);
  // Ordinary nesting (a tool schema a few levels deep) is still accepted, and the server lives.
  std::string schema = R"({"type": "object", "properties": {"a": {"type": "array", "items": )"
                       R"({"type": "object", "properties": {"b": {"type": "array", "items": {"type": "string"}}}}}}})";
  auto r = PostText(chat, ChatText(R"("tools": [{"type": "function", "function": {"name": "f", "parameters": )" +
                                   schema + "}}], " + R"("chat_template_kwargs": {"k": )" + Nested(40) + "}"));
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(PostText(chat, ChatText()).status, 200);
}

// The same through the real chat template (Qwen3's), whose conversion of the request's JSON into
// template values recursed once a level: a 200 KB body ended the process with SIGSEGV.
TEST_F(ServerBadInput, DeeplyNestedJsonNeverReachesTheTemplate) {
  std::string dir = testing::NpmTokenizerDir("tokenizer-qwen3");
  if (!std::filesystem::exists(dir + "/tokenizer.json"))
    GTEST_SKIP() << "no Qwen3 tokenizer at " << dir << " (run scripts/fetch_test_data.sh)";
  auto tok = Tokenizer::FromDir(dir);
  TokenizerPromptBuilder qwen(*tok);
  engine.info.vocab_size = 200000;
  server = std::make_unique<HttpServer>(cfg, engine, qwen);
  server->Start();
  port = server->port();
  const std::string chat = "/v1/chat/completions", deep = Nested(100000);
  ExpectApiError(PostText(chat, ChatText(R"("chat_template_kwargs": {"a": )" + deep + "}")), 400, "");
  ExpectApiError(PostText(chat, ChatText(R"("tools": [{"type": "function", "function": {"name": "f", )"
                                         R"("parameters": {"type": "object", "x": )" +
                                         deep + "}}}]")),
                 400, "");
  EXPECT_EQ(PostText(chat, ChatText()).status, 200);
  server.reset();  // before `qwen`
}

// nlohmann's value("type", "") throws type_error for a non-string "type": it came back as 500.
TEST_F(ServerBadInput, WrongTypesInNestedFieldsAre400) {
  Start();
  const std::string chat = "/v1/chat/completions";
  const std::string tools = R"("tools": [{"type": "function", "function": {"name": "f"}}])";
  ExpectApiError(PostText(chat, ChatText(R"("tools": [{"type": 5, "function": {"name": "f"}}])")), 400,
                 "tools[0].type");
  ExpectApiError(PostText(chat, ChatText(tools + R"(, "tool_choice": {"type": 5, "function": {"name": "f"}})")), 400,
                 "tool_choice");
  ExpectApiError(PostText(chat, ChatText(tools + R"(, "tool_choice": {"type": "function", "function": "f"})")), 400,
                 "tool_choice");
  ExpectApiError(PostText(chat, ChatText(R"("response_format": {"type": 5})")), 400, "response_format.type");
  ExpectApiError(PostText(chat, ChatText(R"("response_format": {"type": ["text"]})")), 400, "response_format.type");
  ExpectApiError(PostText(chat, ChatText(R"("stream": true, "stream_options": {"include_usage": "yes"})")), 400,
                 "stream_options.include_usage");
  EXPECT_EQ(engine.num_submitted(), 0u);
  // The valid forms still pass.
  EXPECT_EQ(PostText(chat, ChatText(R"("response_format": {"type": "text"})")).status, 200);
}

// OpenAI answers 400 to a function name outside ^[a-zA-Z0-9_-]{1,64}$; any string was taken, and
// the name goes into the prompt: a tool_choice naming "f>\n<parameter=x" wrote that into the forced
// "<function=NAME>" opening. tools[] and tool_choice are checked; the names in an assistant
// message's past tool_calls (the model's own output) are not.
TEST_F(ServerBadInput, ToolFunctionNamesFollowOpenAIsPattern) {
  Start();
  const std::string chat = "/v1/chat/completions";
  auto tools = [](const std::string& name) {
    return R"("tools": [{"type": "function", "function": {"name": "ok_1"}}, )"
           R"({"type": "function", "function": {"name": )" +
           ojson(name).dump() + "}}]";
  };
  for (const std::string& bad :
       std::vector<std::string>{"get weather", "weather.get", "f>\n<parameter=x", "caf\u00e9", std::string(65, 'a')}) {
    SCOPED_TRACE(bad);
    std::string msg = ExpectApiError(PostText(chat, ChatText(tools(bad))), 400, "tools[1].function.name");
    EXPECT_NE(msg.find("^[a-zA-Z0-9_-]{1,64}$"), std::string::npos) << msg;
  }
  std::string named = R"(, "tool_choice": {"type": "function", "function": {"name": "f>\n<parameter=x"}})";
  ExpectApiError(PostText(chat, ChatText(tools("f") + named)), 400, "tool_choice.function.name");
  EXPECT_EQ(engine.num_submitted(), 0u);
  // At the edges of the pattern, and names in the history, pass.
  const std::string longest(64, 'Z');
  auto r = PostText(chat, ChatText(tools(longest) + R"(, "tool_choice": {"type": "function", "function": {"name": ")" +
                                   longest + R"("}})"));
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(PostText(chat, ChatText(tools("A-b_9"))).status, 200);
  ojson history = {{"messages",
                    {{{"role", "user"}, {"content", "x"}},
                     {{"role", "assistant"},
                      {"tool_calls", {{{"id", "c1"}, {"function", {{"name", "my tool!"}, {"arguments", "{}"}}}}}}},
                     {{"role", "tool"}, {"tool_call_id", "c1"}, {"content", "done"}}}}};
  r = PostText(chat, history.dump());
  EXPECT_EQ(r.status, 200) << r.body;
}

// prompt_tokens + max_tokens overflowed int64 for max_tokens = 2^63-1, so the request passed the
// context check; OpenAI answers 400 context_length_exceeded.
TEST_F(ServerBadInput, MaxTokensAtTheInt64LimitIs400) {
  Start();
  for (const char* path : {"/v1/chat/completions", "/v1/completions"}) {
    SCOPED_TRACE(path);
    std::string body = std::string(path) == "/v1/completions" ? R"({"prompt": "Hi", "max_tokens": 9223372036854775807})"
                                                              : ChatText(R"("max_tokens": 9223372036854775807)");
    auto r = PostText(path, body);
    ExpectApiError(r, 400, "max_tokens");
    ojson j = ojson::parse(r.body, nullptr, false);
    if (j.is_object()) {
      EXPECT_EQ(j["error"]["code"], "context_length_exceeded") << r.body;
    }
  }
  ExpectApiError(PostText("/v1/chat/completions", ChatText(R"("max_completion_tokens": 9223372036854775807)")), 400,
                 "max_tokens");
  EXPECT_EQ(engine.num_submitted(), 0u);
}

// Integers above 2^63-1 were read as negative numbers: top_k 2^64-1 became -1 ("off") and was
// accepted, max_tokens 2^64-1 was reported as "got -1".
TEST_F(ServerBadInput, IntegersBeyondInt64AreRejectedWithTheirValue) {
  Start();
  const std::string chat = "/v1/chat/completions";
  ExpectApiError(PostText(chat, ChatText(R"("top_k": 18446744073709551615)")), 400, "top_k");
  std::string msg =
      ExpectApiError(PostText(chat, ChatText(R"("max_tokens": 18446744073709551615)")), 400, "max_tokens");
  EXPECT_NE(msg.find("18446744073709551615"), std::string::npos) << msg;
  ExpectApiError(PostText(chat, ChatText(R"("top_logprobs": 18446744073709551615, "logprobs": true)")), 400,
                 "top_logprobs");
  ExpectApiError(PostText("/v1/completions", R"({"prompt": "Hi", "logprobs": 18446744073709551615})"), 400, "logprobs");
  EXPECT_EQ(engine.num_submitted(), 0u);
}

// A number beyond a double's range fails inside the JSON parser, before any field check: it is still
// a 400 naming the field (it was a 500 "internal error: number overflow").
TEST_F(ServerBadInput, NumbersThatOverflowADoubleAre400NamingTheField) {
  Start();
  const std::string chat = "/v1/chat/completions";
  std::string msg = ExpectApiError(PostText(chat, ChatText(R"("max_tokens": 1e999)")), 400, "max_tokens");
  EXPECT_NE(msg.find("1e999"), std::string::npos) << msg;
  ExpectApiError(PostText(chat, ChatText(R"("temperature": 1e999)")), 400, "temperature");
  ExpectApiError(PostText(chat, ChatText(R"("temperature": -1e999)")), 400, "temperature");
  ExpectApiError(PostText(chat, ChatText(R"("logit_bias": {"12": 1e400})")), 400, "logit_bias.12");
  ExpectApiError(PostText(chat, R"({"messages": [{"role": "user", "content": "a"}, {"role": "user", "x": [1, {"y": 2e308}]}]})"),
                 400, "messages[1].x[1].y");
  ExpectApiError(PostText("/v1/completions", R"({"prompt": "Hi", "top_p": 1E+999})"), 400, "top_p");
  EXPECT_EQ(engine.num_submitted(), 0u);
  EXPECT_EQ(PostText(chat, ChatText(R"("temperature": 1e-999)")).status, 200);  // underflow is 0
}

// "the request body is not valid JSON" alone does not tell a client which byte was wrong.
TEST_F(ServerBadInput, InvalidJsonSaysWhy) {
  Start();
  const std::string chat = "/v1/chat/completions";
  auto with_content = [](const std::string& raw) {
    return R"({"messages": [{"role": "user", "content": ")" + raw + R"("}]})";
  };
  std::string msg = ExpectApiError(PostText(chat, with_content("\xff\xfe")), 400, "");
  EXPECT_NE(msg.find("UTF-8"), std::string::npos) << msg;
  msg = ExpectApiError(PostText(chat, with_content("\\ud800")), 400, "");
  EXPECT_NE(msg.find("surrogate"), std::string::npos) << msg;
  msg = ExpectApiError(PostText(chat, R"({"messages": [}")"), 400, "");
  EXPECT_NE(msg.find("column"), std::string::npos) << msg;
  EXPECT_EQ(engine.num_submitted(), 0u);
  EXPECT_EQ(PostText(chat, ChatText()).status, 200);
}

// RFC 6585: header fields over the server's limit are 431, not a generic 400.
TEST_F(ServerBadInput, OversizedHeadersAre431) {
  Start();
  auto r = Call(port, "POST", "/v1/chat/completions", ChatText(), {{"X-Big", std::string(70000, 'a')}});
  ExpectApiError(r, 431, "");
  EXPECT_EQ(PostText("/v1/chat/completions", ChatText()).status, 200);
}

// Each distinct unknown path used to become a label value of tessera_http_requests_total, kept
// forever: a client walking /a1, /a2... grew the registry and every /metrics scrape without bound.
TEST_F(ServerBadInput, UnknownPathsShareOneMetricsLabel) {
  Start();
  for (int i = 0; i < 40; ++i) EXPECT_EQ(Call(port, "GET", "/probe-" + std::to_string(i)).status, 404);
  EXPECT_EQ(Call(port, "POST", "/v1/nothing", "{}").status, 404);
  EXPECT_EQ(Call(port, "GET", "/v1/chat/completions").status, 405);
  auto r = Call(port, "GET", "/metrics");
  ASSERT_EQ(r.status, 200);
  testing_metrics::Exposition e;
  std::string err;
  ASSERT_TRUE(testing_metrics::CheckExposition(r.body, &e, &err)) << err;
  int series = 0;
  for (const auto& s : e.samples) series += s.name == "tessera_http_requests_total";
  EXPECT_EQ(series, 2) << r.body;  // {other, 404} and {/v1/chat/completions, 405}
  EXPECT_EQ(e.Value("tessera_http_requests_total", {{"path", "other"}, {"code", "404"}}), 41);
  EXPECT_EQ(e.Value("tessera_http_requests_total", {{"path", "/v1/chat/completions"}, {"code", "405"}}), 1);
}

// Clients holding every file descriptor the process may open: accept() fails with EMFILE while
// the connection waits in the backlog, and the accept loop retried at once, burning a core until
// a descriptor came free. It must back off, and accept again once descriptors are free.
TEST_F(ServerBadInput, RunningOutOfDescriptorsDoesNotSpin) {
#if defined(TESSERA_SANITIZED)  // (GCC's __SANITIZE_ADDRESS__ is not defined by clang)
  // UBSan's dynamic type check reads memory through a pipe; with the descriptors gone it reports
  // every vptr as invalid (seen in CI: basic_parser, _Sp_counted_base). The release build runs it.
  GTEST_SKIP() << "skipped under the sanitizers: their checks need file descriptors, which this test exhausts";
#endif
  Start();
  rlimit old{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &old), 0);
  size_t open_fds = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++open_fds;
  rlimit low = old;
  low.rlim_cur = open_fds + 16;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
  std::vector<std::unique_ptr<Client>> clients;
  while (clients.size() < 64) {
    auto c = std::make_unique<Client>(port);
    if (!c->connected()) break;
    clients.push_back(std::move(c));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  rusage before{}, after{};
  ::getrusage(RUSAGE_SELF, &before);
  std::this_thread::sleep_for(std::chrono::seconds(1));
  ::getrusage(RUSAGE_SELF, &after);
  auto cpu_s = [](const rusage& u) {
    return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
           static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
  };
  double used = cpu_s(after) - cpu_s(before);
  clients.clear();
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &old), 0);
  EXPECT_LT(used, 0.3) << "CPU seconds spent in one idle second with descriptors exhausted";
  EXPECT_EQ(Call(port, "GET", "/health").status, 200);
}

// A client that sends a streaming request and then stops reading: once the socket buffers are
// full the write never completes. Without a write deadline the connection, the request and its
// engine sequence were held for good; now the client is dropped and the engine request cancelled.
TEST_F(ServerBadInput, ClientThatStopsReadingIsDropped) {
  cfg.server.write_timeout_s = 0.5;
  engine.script.assign(96, std::string(128 * 1024, 'x'));  // 12 MiB of SSE, more than the buffers
  engine.hang = true;                                      // then wait until cancelled
  Start();
  const int fd = SendStreamingChatWithoutReading(port);
  ASSERT_GE(fd, 0);
  // Never read. The request must be cancelled and no longer count as in flight.
  EXPECT_TRUE(engine.WaitCancelled(0, 10));
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (server->in_flight() > 0 && std::chrono::steady_clock::now() < end)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(server->in_flight(), 0);
  ::close(fd);
  EXPECT_EQ(Call(port, "GET", "/health").status, 200);
}

// A client that stops reading after the whole answer was produced (the engine done, the stream's
// last bytes queued): at the write deadline the connection is reset, so the kernel drops what it still
// held for the client and the client learns at once that it was cut off. Before, beast's timeout
// closed the socket: the megabytes already in the send buffer went on at the reader's pace, then a
// FIN, so a slow reader read on for minutes and never saw the cut (tools/soak.sh's slow readers), and
// nothing counted it.
TEST_F(ServerBadInput, WriteTimeoutResetsTheConnectionAndCountsIt) {
  cfg.server.write_timeout_s = 0.5;
  engine.script.assign(64, std::string(128 * 1024, 'x'));  // 8 MiB of SSE, more than the buffers
  Start();
  const int fd = SendStreamingChatWithoutReading(port);
  ASSERT_GE(fd, 0);
  timeval five{5, 0};  // a read that hangs fails the test instead of blocking it
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &five, sizeof five);
  // Nothing read until the deadline has passed and the server has counted it.
  const std::string counted = "tessera_http_write_timeouts_total 1\n";
  bool seen = false;
  for (auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
       !seen && std::chrono::steady_clock::now() < end; std::this_thread::sleep_for(std::chrono::milliseconds(20)))
    seen = Call(port, "GET", "/metrics").body.find(counted) != std::string::npos;
  EXPECT_TRUE(seen) << Call(port, "GET", "/metrics").body;
  // Now read: at most what the client's own buffer held, then the reset (not megabytes, then the end).
  size_t got = 0;
  int err = 0;
  std::vector<char> buf(64 * 1024);
  for (;;) {
    ssize_t n = ::recv(fd, buf.data(), buf.size(), 0);
    if (n > 0) {
      got += static_cast<size_t>(n);
      continue;
    }
    err = n == 0 ? 0 : errno;
    break;
  }
  ::close(fd);
  EXPECT_EQ(err, ECONNRESET) << got << " bytes read, then " << (err == 0 ? "the end of the stream" : std::strerror(err));
  EXPECT_LT(got, 1u << 20);
  EXPECT_EQ(server->in_flight(), 0);
  EXPECT_EQ(Call(port, "GET", "/health").status, 200);
}

// A request the engine refuses before producing anything (its own checks: KV cache too small for
// it, ids...) came back as 200 with the error inside the event stream when stream=true; vLLM
// answers such requests with the HTTP error, as for stream=false.
TEST_F(ServerBadInput, EngineRefusalOfAStreamIsAnHttpError) {
  engine.error = "the KV cache (4 pages of 16 tokens) cannot hold this request";
  Start();
  auto r = PostText("/v1/chat/completions", ChatText(R"("stream": true)"));
  std::string msg = ExpectApiError(r, 400, "");
  EXPECT_NE(msg.find("KV cache"), std::string::npos) << msg;
  EXPECT_EQ(r.headers["content-type"], "application/json");
  // Once output has begun, an engine failure can only go into the stream.
  engine.error_after = 2;
  r = PostText("/v1/chat/completions", ChatText(R"("stream": true)"));
  EXPECT_EQ(r.status, 200);
  std::vector<SseEvent> evs;
  ASSERT_TRUE(ParseSse(r.body, evs)) << r.body;
  ASSERT_GE(evs.size(), 2u);
  EXPECT_EQ(evs.back().data, "[DONE]");
  EXPECT_EQ(ojson::parse(evs[evs.size() - 2].data)["error"]["type"], "internal_error");
}

// A diffusion block larger than the context: the engine refused it after a stream's 200.
TEST_F(ServerBadInput, DiffusionBlockLargerThanTheContextIs400) {
  engine.info.diffusion = true;
  engine.info.max_model_len = 1024;
  engine.info.default_diffusion.block_size = 4;
  engine.info.default_diffusion.steps = 4;
  Start();
  ExpectApiError(
      PostText("/v1/chat/completions", ChatText(R"("stream": true, "diffusion": {"block_size": 2048, "steps": 4})")),
      400, "diffusion.block_size");
  EXPECT_EQ(engine.num_submitted(), 0u);
}

// RFC 9112 3.2.2: a server must accept a request target in absolute form (as proxies send it);
// it was answered 404 "Unknown route: POST http://...".
TEST_F(ServerBadInput, AbsoluteFormTargetIsRouted) {
  Start();
  EXPECT_EQ(PostText("http://127.0.0.1/v1/chat/completions", ChatText()).status, 200);
  EXPECT_EQ(Call(port, "GET", "http://localhost:8000/v1/models?x=1").status, 200);
  EXPECT_EQ(Call(port, "GET", "http://localhost").status, Call(port, "GET", "/").status);  // no path: "/"
}

// RFC 9110 15.5.6: a 405 names the allowed methods in Allow.
TEST_F(ServerBadInput, WrongMethodIs405WithAllow) {
  Start();
  auto r = Call(port, "GET", "/v1/chat/completions");
  ExpectApiError(r, 405, "");
  EXPECT_EQ(r.headers["allow"], "POST");
  r = Call(port, "DELETE", "/v1/completions");
  ExpectApiError(r, 405, "");
  EXPECT_EQ(r.headers["allow"], "POST");
  r = Call(port, "POST", "/v1/models", "{}");
  ExpectApiError(r, 405, "");
  EXPECT_EQ(r.headers["allow"], "GET, HEAD");
  r = Call(port, "PUT", "/health", "{}");
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(r.headers["allow"], "GET, HEAD");
  r = Call(port, "POST", "/metrics", "{}");
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(r.headers["allow"], "GET, HEAD");
  r = Call(port, "POST", "/", "{}");  // the chat page
  ExpectApiError(r, 405, "");
  EXPECT_EQ(r.headers["allow"], "GET, HEAD");
}

// RFC 9110 9.3.2: HEAD is GET without the content; every GET route answered it 405. Now each one
// answers with the GET's status and headers (Content-Length that of the GET's body) and no body:
// on a keep-alive connection the next answer follows the HEAD's headers directly. Errors to a HEAD
// (401, 404, 405) have no body either.
TEST_F(ServerBadInput, HeadIsGetWithoutTheBody) {
  cfg.security.api_keys = {"sk-head"};
  Start();
  const std::map<std::string, std::string> key = {{"Authorization", "Bearer sk-head"}};
  Client c(port);
  auto head_then_health = [&](const std::string& path, const std::map<std::string, std::string>& headers) {
    HttpResponse head, next;
    EXPECT_TRUE(c.Send("HEAD", path, "", headers, /*keep_alive=*/true));
    EXPECT_TRUE(c.ReadHead(head));
    EXPECT_TRUE(c.Send("GET", "/health", "", {}, true));
    next = c.Read();
    EXPECT_EQ(next.status, 200) << "bytes after the HEAD's headers: " << next.body;
    EXPECT_EQ(next.body, R"({"status":"ok"})");
    return head;
  };
  for (const char* path : {"/health", "/v1/models", "/", "/static/app.js", "/metrics"}) {
    SCOPED_TRACE(path);
    HttpResponse get = Call(port, "GET", path, "", key);
    ASSERT_EQ(get.status, 200);
    HttpResponse head = head_then_health(path, key);
    EXPECT_EQ(head.status, 200);
    EXPECT_EQ(head.headers["content-type"], get.headers["content-type"]);
    EXPECT_EQ(head.headers["etag"], get.headers["etag"]);
    if (std::string(path) != "/metrics")  // its counters move between the two requests
      EXPECT_EQ(head.headers["content-length"], std::to_string(get.body.size()));
    else
      EXPECT_GT(std::stoul(head.headers["content-length"]), 0u);
  }
  HttpResponse r = head_then_health("/v1/models", {});
  EXPECT_EQ(r.status, 401);
  r = head_then_health("/nowhere", key);
  EXPECT_EQ(r.status, 404);
  r = head_then_health("/v1/chat/completions", key);
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(r.headers["allow"], "POST");
  EXPECT_EQ(engine.num_submitted(), 0u);
}

// A client that sends "Expect: 100-continue" (curl does for large bodies) waits for the interim
// response before the body; without it every such request stalled for curl's 1 s timeout.
TEST_F(ServerBadInput, ExpectContinueGetsAnInterimResponse) {
  Start();
  std::string body = ChatText();
  Client c(port);
  ASSERT_TRUE(
      c.SendRaw("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                "Expect: 100-continue\r\nConnection: close\r\nContent-Length: " +
                std::to_string(body.size()) + "\r\n\r\n"));
  HttpResponse interim;
  pollfd p{};
  p.fd = c.fd();
  p.events = POLLIN;
  ASSERT_EQ(::poll(&p, 1, 3000), 1) << "no interim response";
  ASSERT_TRUE(c.ReadHead(interim));
  EXPECT_EQ(interim.status, 100);
  ASSERT_TRUE(c.SendRaw(body));
  HttpResponse r = c.Read();
  EXPECT_EQ(r.status, 200) << r.body;
  // A body over the limit is refused at once, without the 100.
  cfg.server.max_body_bytes = 1024;
  server = std::make_unique<HttpServer>(cfg, engine, prompts);
  server->Start();
  Client c2(server->port());
  ASSERT_TRUE(
      c2.SendRaw("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
                 "Content-Length: 5000\r\n\r\n"));
  HttpResponse big = c2.Read();
  EXPECT_EQ(big.status, 413);
}

// HTTP/1.0 has no chunked transfer coding: a stream to an HTTP/1.0 client must be sent as is and
// end with the connection.
TEST_F(ServerBadInput, Http10StreamIsNotChunked) {
  Start();
  std::string body = ChatText(R"("stream": true)");
  Client c(port);
  ASSERT_TRUE(
      c.SendRaw("POST /v1/chat/completions HTTP/1.0\r\nHost: x\r\nContent-Type: application/json\r\n"
                "Content-Length: " +
                std::to_string(body.size()) + "\r\n\r\n" + body));
  HttpResponse head;
  ASSERT_TRUE(c.ReadHead(head));
  EXPECT_EQ(head.status, 200);
  EXPECT_EQ(head.headers.count("transfer-encoding"), 0u);
  std::string rest = c.ReadToEnd();
  std::vector<SseEvent> evs;
  ASSERT_TRUE(ParseSse(rest, evs)) << rest;
  ASSERT_FALSE(evs.empty());
  EXPECT_EQ(evs.back().data, "[DONE]");
}

}  // namespace
}  // namespace tessera
