// tessera tests: faults under a running `tessera serve` of the demo model (models/demo), each with the
// behaviour docs/RELIABILITY.md ("Faults") promises: the model directory removed (answers go on from
// memory) or its weights truncated (no SIGBUS: every request a 503 naming the file, /health 503), the
// access log on a full disk (/dev/full: requests served, the failure logged once and counted), stderr a
// pipe whose reader is gone (no SIGPIPE), SIGKILL (a streaming client sees the connection end at once;
// a restart takes the same port at once) and SIGTERM during streaming (the stream finishes, then exit
// 0; past --drain-timeout the stream is cut, not left hanging).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "test_util.h"
#include "unit/server_http_fakes.h"

namespace tessera {
namespace {

using nlohmann::json;
using testing::ReadFile;
using testing::RunCommand;
using testing_server::Call;
using testing_server::Client;
using testing_server::HttpResponse;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::string Quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string DemoModel() { return std::string(TESSERA_SOURCE_DIR) + "/models/demo"; }

// A copy of the demo model the test may damage.
std::string DemoCopy(const std::string& scratch) {
  const std::string dir = scratch + "/model";
  fs::copy(DemoModel(), dir, fs::copy_options::recursive);
  return dir;
}

// A port that was free a moment ago (bound, read, closed).
int FreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// One `tessera serve` run in the background by a launcher script that records its pid and, once it
// exits, its exit status: `rc` (-1 while it runs).
class Served {
 public:
  // `output`: where serve's stdout and stderr go ("" : the log file; "| CMD": a pipe into CMD).
  Served(const std::string& scratch, int port, const std::string& args, const std::string& output = "")
      : dir_(scratch), port_(port) {
    const std::string script = dir_ + "/serve.sh";
    const std::string log = dir_ + "/log";
    fs::remove(dir_ + "/rc");
    fs::remove(dir_ + "/pid");
    auto file = [&](const char* name) { return Quote(dir_ + "/" + name); };
    testing::WriteFile(script, "(" + testing::TesseraBinary() + " serve --port " + std::to_string(port) + " " + args +
                                   " </dev/null & echo $! >" + file("pid.tmp") + "; mv " + file("pid.tmp") + " " +
                                   file("pid") + "; wait $!; echo $? >" + file("rc.tmp") + "; mv " + file("rc.tmp") +
                                   " " + file("rc") + ") " + (output.empty() ? ">>" + Quote(log) + " 2>&1" : "2>&1 " + output) +
                                   "\n");
    RunCommand("sh " + Quote(script) + " >/dev/null 2>&1 &");
    for (int i = 0; i < 300 && !fs::exists(dir_ + "/pid"); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    pid_ = fs::exists(dir_ + "/pid") ? std::atoi(ReadFile(dir_ + "/pid").c_str()) : 0;
  }
  ~Served() {
    if (pid_ > 0 && rc() < 0) {
      ::kill(pid_, SIGKILL);
      WaitExit(30);
    }
  }
  // Waits until /health answers 200 (the model loaded and warm).
  bool WaitReady(double seconds = 120) {
    const auto t0 = Clock::now();
    while (Since(t0) < seconds && rc() < 0) {
      if (Call(port_, "GET", "/health").status == 200) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ADD_FAILURE() << "serve did not get ready on port " << port_ << ": rc " << rc() << "\n" << log();
    return false;
  }
  int rc() const {
    if (!fs::exists(dir_ + "/rc")) return -1;
    return std::atoi(ReadFile(dir_ + "/rc").c_str());
  }
  bool Alive() const { return pid_ > 0 && rc() < 0 && ::kill(pid_, 0) == 0; }
  int WaitExit(double seconds) {
    const auto t0 = Clock::now();
    while (rc() < 0 && Since(t0) < seconds) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    return rc();
  }
  void Signal(int sig) const { ::kill(pid_, sig); }
  std::string log() const { return fs::exists(dir_ + "/log") ? ReadFile(dir_ + "/log") : ""; }
  int port() const { return port_; }

 private:
  std::string dir_;
  int port_;
  int pid_ = 0;
};

std::string ServeArgs(const std::string& model, const std::string& extra = "--access-log ''") {
  return "--model " + Quote(model) + " " + extra;
}

// A streamed completion of `max_tokens` tokens (the demo model: about 30 a second on this machine's
// load), head read.
std::unique_ptr<Client> StartStream(int port, int max_tokens) {
  auto c = std::make_unique<Client>(port);
  json body = {{"prompt", "Once upon a time"}, {"max_tokens", max_tokens}, {"ignore_eos", true}, {"stream", true}};
  EXPECT_TRUE(c->connected());
  EXPECT_TRUE(c->Send("POST", "/v1/completions", body.dump()));
  HttpResponse head;
  EXPECT_TRUE(c->ReadHead(head));
  EXPECT_EQ(head.status, 200);
  return c;
}

// Reads the stream's chunks until its end (or the connection's): their text; *clean: the terminating
// chunk came (a whole HTTP response).
std::string ReadRest(Client& c, bool* clean) {
  std::string all, chunk;
  *clean = false;
  for (;;) {
    try {
      if (!c.ReadChunk(chunk)) {
        *clean = chunk.empty() && all.find("data: [DONE]") != std::string::npos;
        return all;
      }
    } catch (const std::exception&) {  // a cut chunk-size line
      return all;
    }
    all += chunk;
  }
}

json Completion(int port, int* status, int max_tokens = 8) {
  HttpResponse r = Call(port, "POST", "/v1/completions", json({{"prompt", "Hello"}, {"max_tokens", max_tokens}}).dump());
  *status = r.status;
  return json::parse(r.body, nullptr, false);
}

double MetricValue(const std::string& metrics, const std::string& name) {
  size_t at = metrics.find("\n" + name + " ");
  if (at == std::string::npos) return -1;
  return std::atof(metrics.c_str() + at + name.size() + 2);
}

// rm -rf of the model directory under the server: the weights stay mapped (the files' inodes live
// on), so the stream in flight and later requests are answered as before.
TEST(CliFaults, ModelDirectoryRemovedKeepsServingFromMemory) {
  const std::string scratch = testing::ScratchDir("cli-faults-removed");
  const std::string model = DemoCopy(scratch);
  Served s(scratch, 0 + FreePort(), ServeArgs(model));
  ASSERT_TRUE(s.WaitReady());
  auto stream = StartStream(s.port(), 96);
  std::string first;
  ASSERT_TRUE(stream->ReadChunk(first));
  fs::remove_all(model);
  bool clean = false;
  std::string rest = ReadRest(*stream, &clean);
  EXPECT_TRUE(clean) << rest;
  EXPECT_NE(rest.find("\"finish_reason\":\"length\""), std::string::npos) << rest;
  int status = 0;
  json r = Completion(s.port(), &status);
  EXPECT_EQ(status, 200) << r.dump();
  EXPECT_EQ(Call(s.port(), "GET", "/health").status, 200);
  EXPECT_TRUE(s.Alive()) << s.log();
  s.Signal(SIGTERM);
  EXPECT_EQ(s.WaitExit(60), 0) << s.log();
}

// The weights file truncated under the server (what `cp new model.safetensors` does first): a read of
// the lost pages was a SIGBUS that killed the server. Now the stream in flight ends with a 503 error
// event naming the file, every later request is a 503 naming it, /health answers 503 (a liveness
// probe restarts the server), and the process stays up and exits 0 on SIGTERM.
TEST(CliFaults, TruncatedWeightsAreA503NamingTheFileNotACrash) {
  const std::string scratch = testing::ScratchDir("cli-faults-truncated");
  const std::string model = DemoCopy(scratch);
  Served s(scratch, FreePort(), ServeArgs(model));
  ASSERT_TRUE(s.WaitReady());
  auto stream = StartStream(s.port(), 2000);
  std::string first;
  ASSERT_TRUE(stream->ReadChunk(first));
  fs::resize_file(model + "/model.safetensors", 64 * 1024);  // the header and a little more stay
  bool clean = false;
  std::string rest = ReadRest(*stream, &clean);
  EXPECT_TRUE(clean) << rest;  // the error event, then [DONE] and the stream's proper end
  EXPECT_NE(rest.find("service_unavailable"), std::string::npos) << rest;
  EXPECT_NE(rest.find("model.safetensors was truncated"), std::string::npos) << rest;
  int status = 0;
  json r = Completion(s.port(), &status);
  EXPECT_EQ(status, 503) << r.dump();
  EXPECT_NE(r.dump().find("model.safetensors was truncated"), std::string::npos) << r.dump();
  HttpResponse health = Call(s.port(), "GET", "/health");
  EXPECT_EQ(health.status, 503) << health.body;
  EXPECT_NE(health.body.find("\"status\":\"failed\""), std::string::npos) << health.body;
  HttpResponse metrics = Call(s.port(), "GET", "/metrics");
  EXPECT_EQ(MetricValue(metrics.body, "tessera_ready"), 0) << metrics.body;
  // As while loading or draining, a generation request is refused before its body is read; the
  // other endpoints answer as ever.
  EXPECT_EQ(Call(s.port(), "POST", "/v1/completions", "{").status, 503);
  EXPECT_EQ(Call(s.port(), "GET", "/v1/models").status, 200);
  ASSERT_TRUE(s.Alive()) << s.log();
  EXPECT_NE(s.log().find("model.safetensors was truncated"), std::string::npos) << s.log();
  s.Signal(SIGTERM);
  EXPECT_EQ(s.WaitExit(60), 0) << s.log();
}

// The access log on a full disk (/dev/full: every write ENOSPC): requests are answered as ever, the
// failure is logged once, and every lost line is counted on /metrics.
TEST(CliFaults, AccessLogOnAFullDiskLosesLinesNotRequests) {
  const std::string scratch = testing::ScratchDir("cli-faults-full");
  Served s(scratch, FreePort(), ServeArgs(DemoModel(), "--access-log /dev/full"));
  ASSERT_TRUE(s.WaitReady());
  for (int i = 0; i < 5; ++i) {
    int status = 0;
    json r = Completion(s.port(), &status);
    EXPECT_EQ(status, 200) << r.dump();
  }
  auto stream = StartStream(s.port(), 40);
  bool clean = false;
  std::string rest = ReadRest(*stream, &clean);
  EXPECT_TRUE(clean) << rest;
  HttpResponse metrics = Call(s.port(), "GET", "/metrics");
  // 5 completions, the stream, and the /health polls before them: each line lost and counted.
  EXPECT_GE(MetricValue(metrics.body, "tessera_access_log_errors_total"), 6) << metrics.body;
  const std::string log = s.log();
  size_t n = 0;
  for (size_t at = log.find("access log '/dev/full': cannot write"); at != std::string::npos;
       at = log.find("access log '/dev/full': cannot write", at + 1))
    ++n;
  EXPECT_EQ(n, 1u) << log;
  EXPECT_NE(log.find("No space left on device"), std::string::npos) << log;
  EXPECT_TRUE(s.Alive());
  s.Signal(SIGTERM);
  EXPECT_EQ(s.WaitExit(60), 0) << log;
}

// stderr (the start-up log and an access log on '-') a pipe whose reader has exited: every write is
// EPIPE. SIGPIPE used to end the server at its first log line.
TEST(CliFaults, StderrPipeWithoutAReaderDoesNotKillTheServer) {
  const std::string scratch = testing::ScratchDir("cli-faults-pipe");
  Served s(scratch, FreePort(), ServeArgs(DemoModel(), "--access-log -"), "| true");
  ASSERT_TRUE(s.WaitReady());
  int status = 0;
  json r = Completion(s.port(), &status);
  EXPECT_EQ(status, 200) << r.dump();
  HttpResponse metrics = Call(s.port(), "GET", "/metrics");
  EXPECT_GE(MetricValue(metrics.body, "tessera_access_log_errors_total"), 1) << metrics.body;
  EXPECT_TRUE(s.Alive());
  s.Signal(SIGTERM);
  EXPECT_EQ(s.WaitExit(60), 0);
}

// SIGKILL mid-stream: the client's next read sees the connection end at once (no hang until a
// timeout, no [DONE]); a new server binds the same port at once (SO_REUSEADDR: the old connections
// linger in TIME_WAIT) and serves.
TEST(CliFaults, SigkillEndsStreamsAtOnceAndARestartTakesThePort) {
  const std::string scratch = testing::ScratchDir("cli-faults-kill");
  const int port = FreePort();
  std::string log;
  {
    Served s(scratch, port, ServeArgs(DemoModel()));
    ASSERT_TRUE(s.WaitReady());
    auto stream = StartStream(port, 2000);
    std::string first;
    ASSERT_TRUE(stream->ReadChunk(first));
    s.Signal(SIGKILL);
    const auto t0 = Clock::now();
    bool clean = true;
    std::string rest = ReadRest(*stream, &clean);
    EXPECT_FALSE(clean) << rest;
    EXPECT_EQ(rest.find("[DONE]"), std::string::npos) << rest;
    EXPECT_LT(Since(t0), 5.0) << "the client waited for its read timeout: the connection was left open";
    EXPECT_EQ(s.WaitExit(10), 128 + SIGKILL);
    log = s.log();
  }
  const auto t0 = Clock::now();
  Served again(scratch, port, ServeArgs(DemoModel()));
  ASSERT_TRUE(again.WaitReady());
  EXPECT_NE(again.log().find("listening on http://127.0.0.1:" + std::to_string(port)), std::string::npos)
      << again.log();
  EXPECT_EQ(again.log().find("cannot listen"), std::string::npos) << again.log();
  int status = 0;
  json r = Completion(port, &status);
  EXPECT_EQ(status, 200) << r.dump();
  again.Signal(SIGTERM);
  EXPECT_EQ(again.WaitExit(60), 0);
  RecordProperty("restart_to_ready_s", std::to_string(Since(t0)));
}

// SIGTERM during a stream (README: the listener closes, requests in flight finish up to
// --drain-timeout, exit 0): the stream finishes whole, new connections are refused, the health port
// says "draining"; past the drain timeout a stream is cut (the client sees the end, not a hang).
TEST(CliFaults, SigtermFinishesStreamsThenExitsZero) {
  const std::string scratch = testing::ScratchDir("cli-faults-term");
  const int health = FreePort();
  // A drain timeout far past the stream's time: under the sanitizers on a loaded machine the 64 tokens
  // took longer than the 30 s default (the cut past a deadline is the second half's check).
  Served s(scratch, FreePort(),
           ServeArgs(DemoModel(), "--access-log '' --drain-timeout 600 --health-port " + std::to_string(health)));
  ASSERT_TRUE(s.WaitReady());
  auto stream = StartStream(s.port(), 64);
  std::string first;
  ASSERT_TRUE(stream->ReadChunk(first));
  s.Signal(SIGTERM);
  // The health port keeps answering while the drain lasts; the main port stops accepting.
  HttpResponse h;
  for (int i = 0; i < 50 && h.body.find("draining") == std::string::npos; ++i) {
    h = Call(health, "GET", "/health");
    if (h.body.find("draining") == std::string::npos) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(h.status, 503) << h.body;
  EXPECT_NE(h.body.find("draining"), std::string::npos) << h.body;
  Client late(s.port());
  if (late.connected()) {  // accepted by the kernel before the listener closed: a 503 at most
    late.Send("GET", "/v1/models");
    HttpResponse r = late.Read();
    EXPECT_TRUE(!r.ok || r.status == 503) << r.status << r.body;
  }
  bool clean = false;
  std::string rest = ReadRest(*stream, &clean);
  EXPECT_TRUE(clean) << rest;
  EXPECT_NE(rest.find("\"finish_reason\":\"length\""), std::string::npos) << rest;
  EXPECT_EQ(s.WaitExit(60), 0) << s.log();
  EXPECT_NE(s.log().find("received SIGTERM: draining"), std::string::npos) << s.log();

  // A stream longer than the drain timeout is cut when it passes.
  Served t(scratch, FreePort(), ServeArgs(DemoModel(), "--access-log '' --drain-timeout 1"));
  ASSERT_TRUE(t.WaitReady());
  auto longer = StartStream(t.port(), 2000);
  ASSERT_TRUE(longer->ReadChunk(first));
  t.Signal(SIGTERM);
  const auto t0 = Clock::now();
  rest = ReadRest(*longer, &clean);
  EXPECT_FALSE(clean) << rest;
  EXPECT_LT(Since(t0), 8.0) << "the cut stream's client waited for its read timeout";
  EXPECT_EQ(t.WaitExit(60), 0) << t.log();
  EXPECT_NE(t.log().find("drain deadline passed with 1 request(s) in flight"), std::string::npos) << t.log();
}

}  // namespace
}  // namespace tessera
