// tessera tests: fakes and a raw-socket HTTP/1.1 client for the server tests. FakeEngine plays a
// scripted generation on its own thread per request (like the real engine thread: events arrive
// off the I/O threads), once per choice (n), choice c > 0 with "#c" after each piece;
// FakePromptBuilder renders messages to one token per byte, with a BOS id first when `bos` is set
// (as a tokenizer that adds one, and a template that writes it).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "engine/engine_api.h"
#include "server/prompt_builder.h"

namespace tessera::testing_server {

using ojson = nlohmann::ordered_json;

class FakeEngine : public EngineApi {
 public:
  FakeEngine() {
    info.name = "fake-moe";
    info.max_model_len = 4096;
    info.vocab_size = 1000;
  }
  ~FakeEngine() override { JoinThreads(); }
  // Waits for every request's thread (a hanging one ends when its request is cancelled).
  void JoinThreads() {
    std::vector<std::thread> ts;
    {
      std::lock_guard<std::mutex> l(mu);
      ts.swap(threads);
    }
    for (auto& t : ts) t.join();
  }

  void Submit(GenerationRequest req) override {
    std::lock_guard<std::mutex> l(mu);
    GenerationRequest copy = req;
    copy.on_event = nullptr;
    submitted.push_back(copy);
    cancels.push_back(req.cancelled);
    threads.emplace_back([this, r = std::move(req)]() mutable { Play(std::move(r)); });
  }
  EngineSnapshot Snapshot() const override {
    EngineSnapshot s;
    s.ready = ready.load();
    s.kv_pages_used = 5;
    s.kv_pages_total = 100;
    s.state_slots_used = 3;
    s.state_slots_total = 8;
    s.prefix_cache_queries = 40;
    s.prefix_cache_hits = 12;
    return s;
  }
  const EngineModelInfo& ModelInfo() const override { return info; }
  // Structured output over a byte vocabulary (token i = byte i, 256 = the stop id), as the real
  // engine's over its tokenizer; `compiles` counts the calls.
  std::shared_ptr<const grammar::CompiledGrammar> CompileGrammar(grammar::GrammarFormat format,
                                                                 std::string_view text) override {
    static grammar::GrammarCompiler compiler([] {
      std::vector<std::string> tokens;
      for (int b = 0; b < 256; ++b) tokens.emplace_back(1, static_cast<char>(b));
      tokens.emplace_back("</s>");
      return grammar::TokenVocabulary::FromTokenBytes(tokens, {256}, {});
    }());
    ++compiles;
    if (!structured_output) return EngineApi::CompileGrammar(format, text);
    return compiler.Compile(format, text);
  }
  std::atomic<int> compiles{0};
  bool structured_output = true;  // false: the EngineApi default (not available)

  size_t num_submitted() {
    std::lock_guard<std::mutex> l(mu);
    return submitted.size();
  }
  GenerationRequest last() {
    std::lock_guard<std::mutex> l(mu);
    return submitted.back();
  }
  bool WaitCancelled(size_t i, double seconds = 5) {
    auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < end) {
      {
        std::lock_guard<std::mutex> l(mu);
        if (i < cancels.size() && cancels[i]->load()) return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return false;
  }

  EngineModelInfo info;
  std::atomic<bool> ready{true};
  // Behaviour of each request:
  std::vector<std::string> script = {"Hello", ",", " world", "!"};  // one kTokens event each
  int delay_ms = 0;                                                 // before each event
  bool hang = false;                                                // after the script, wait until cancelled
  FinishReason finish = FinishReason::kStop;
  std::string error;  // non-empty: a kError event after error_after pieces
  size_t error_after = 0;
  bool error_invalid_request = false;  // the kError blames the request (GenerationEvent::invalid_request)
  bool error_unavailable = false;      // GenerationEvent::unavailable (a step out of memory)
  bool error_server_fault = false;     // GenerationEvent::server_fault (a step failed otherwise)
  int diffusion_steps_per_block = 0;  // emit kDiffusionStep events before each piece
  bool with_logprobs = false;

 protected:  // fuzz/http_fuzz.cpp's engine joins the finished playback threads now and then
  void Play(GenerationRequest r) {
    auto sleep = [&] {
      if (delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    };
    const int32_t choices = static_cast<int32_t>(std::max<int64_t>(r.n, 1));
    std::vector<int64_t> n(choices, 0);
    std::vector<RequestStats> st(choices);
    // The choices' pieces interleave, as the real engine's steps do.
    for (size_t i = 0; i < script.size(); ++i) {
      if (!error.empty() && i == error_after) {
        GenerationEvent e;
        e.kind = GenerationEvent::Kind::kError;
        e.error = error;
        e.invalid_request = error_invalid_request;
        e.unavailable = error_unavailable;
        e.server_fault = error_server_fault;
        r.on_event(e);
        return;
      }
      if (r.cancelled->load()) break;
      for (int32_t c = 0; c < choices; ++c) {
        for (int s = 0; s < diffusion_steps_per_block && r.emit_steps; ++s) {
          GenerationEvent e;
          e.index = c;
          e.kind = GenerationEvent::Kind::kDiffusionStep;
          e.step.block_start = static_cast<int64_t>(i) * 4;
          e.step.step = s;
          e.step.block_tokens = {7, 999, 8, 999};
          e.step.unmasked = {e.step.block_start + s};
          e.step.conf = {0.5f};
          r.on_event(e);
        }
        sleep();
        GenerationEvent e;
        e.index = c;
        e.kind = GenerationEvent::Kind::kTokens;
        e.tokens = {static_cast<int32_t>(100 + i)};
        e.text = c == 0 ? script[i] : script[i] + "#" + std::to_string(c);
        if (with_logprobs && r.sampling.top_logprobs >= 0)
          e.logprobs = {{static_cast<int32_t>(100 + i), -0.5f, {{1, -1.0f}}}};
        r.on_event(e);
        ++n[c];
        if (diffusion_steps_per_block > 0) st[c].steps_per_block.push_back(diffusion_steps_per_block);
      }
    }
    while (hang && !r.cancelled->load()) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    for (int32_t c = 0; c < choices; ++c) {
      GenerationEvent f;
      f.index = c;
      f.kind = GenerationEvent::Kind::kFinished;
      f.finish_reason = r.cancelled->load() ? FinishReason::kCancelled : finish;
      st[c].prompt_tokens = static_cast<int64_t>(r.prompt.size());
      st[c].completion_tokens = n[c];
      st[c].cached_tokens = c == 0 ? 3 : 5;  // the response reports the first choice's
      st[c].forwards = std::max<int64_t>(1, n[c]);
      f.stats = st[c];
      r.on_event(f);
    }
  }

  std::mutex mu;
  std::vector<GenerationRequest> submitted;
  std::vector<std::shared_ptr<std::atomic<bool>>> cancels;
  std::vector<std::thread> threads;
};

class FakePromptBuilder : public PromptBuilder {
 public:
  std::vector<int32_t> BuildChat(const ojson& messages, const ojson& tools, const ojson& kwargs) override {
    // A slow template / tokenizer (a body of megabytes): blocks this thread only.
    if (build_delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(build_delay_ms.load()));
    std::lock_guard<std::mutex> l(mu);
    last_tools = tools;
    last_messages = messages;
    std::string text;
    for (const auto& m : messages) {
      if (m["content"].is_string() && m["content"] == "TEMPLATE_ERROR")
        Fail(ErrorKind::kInvalidArgument, "template raised: bad message");
      text += m["role"].get<std::string>() + ":" +
              (m["content"].is_string() ? m["content"].get<std::string>() : "") + "\n";
    }
    text += "assistant:" + generation_suffix;
    std::vector<int32_t> ids = EncodeLocked(text);
    if (bos >= 0) ids.insert(ids.begin(), bos);
    return ids;
  }
  std::vector<int32_t> Encode(const std::string& text) override {
    std::vector<int32_t> ids = EncodeLocked(text);
    if (bos >= 0) ids.insert(ids.begin(), bos);  // add_special_tokens
    return ids;
  }
  std::vector<int32_t> EncodeContinuation(const std::string& text) override { return EncodeLocked(text); }
  std::string Decode(const std::vector<int32_t>& ids) override {
    std::string s;
    for (int32_t id : ids) {  // piece by piece: GCC 12 warns (-Wrestrict) on "<" + to_string(id)
      s += '<';
      s += std::to_string(id);
      s += '>';
    }
    return s;
  }
  ojson last_tools, last_messages;
  int32_t bos = -1;  // >= 0: the id Encode and BuildChat put first (bytes are ids 0..255)
  std::map<std::string, int32_t> added_tokens;  // text encoded as one id (<tool_call>...); set before Start
  bool xml_tool_calls = false;                  // a Qwen3-Coder-like template; set before Start
  bool UsesXmlToolCalls() const override { return xml_tool_calls; }
  bool gemma4 = false;            // a Gemma 4 template (chat_format.h); set before Start
  std::string generation_suffix;  // what the template writes after "assistant:" (an opened channel...)
  ChatFormat chat_format() const override { return gemma4 ? ChatFormat::kGemma4 : PromptBuilder::chat_format(); }
  std::atomic<int> build_delay_ms{0};  // BuildChat takes this long

 private:
  std::vector<int32_t> EncodeLocked(const std::string& text) {
    std::vector<int32_t> ids;
    for (size_t i = 0; i < text.size();) {
      bool added = false;
      for (const auto& [piece, id] : added_tokens)
        if (!added && text.compare(i, piece.size(), piece) == 0) {
          ids.push_back(id);
          i += piece.size();
          added = true;
        }
      if (!added) ids.push_back(static_cast<unsigned char>(text[i++]));
    }
    return ids;
  }
  std::mutex mu;
};

struct HttpResponse {
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;                            // de-chunked
  bool ok = false;                             // a whole response was read
};

// A blocking HTTP/1.1 client on one connection (keep-alive capable). `source` binds the local
// address first: any of 127.0.0.0/8 works on Linux, so a test can be several client addresses.
class Client {
 public:
  explicit Client(int port, const char* source = nullptr) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    // A bound on a hung server, not on speed. Under the sanitizers a real model answers ~10x slower
    // (the demo model's constrained tool calls took over 10 s there); in a release build on a loaded
    // 2-core machine the first strict tool call of CliStrictTools once took over 10 s too (2026-12-07).
#ifdef TESSERA_SANITIZED
    timeval tv{120, 0};
#else
    timeval tv{60, 0};
#endif
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (source != nullptr) {
      sockaddr_in local{};
      local.sin_family = AF_INET;
      ::inet_pton(AF_INET, source, &local.sin_addr);
      if (::bind(fd_, reinterpret_cast<sockaddr*>(&local), sizeof local) != 0) return;
    }
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  ~Client() { Close(); }
  bool connected() const { return connected_; }
  int fd() const { return fd_; }
  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  bool SendRaw(const std::string& data) {
    size_t off = 0;
    while (off < data.size()) {
      ssize_t n = ::send(fd_, data.data() + off, data.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += static_cast<size_t>(n);
    }
    return true;
  }
  bool Send(const std::string& method, const std::string& path, const std::string& body = "",
            const std::map<std::string, std::string>& headers = {}, bool keep_alive = false) {
    std::string req = method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n";
    req += keep_alive ? "Connection: keep-alive\r\n" : "Connection: close\r\n";
    for (const auto& [k, v] : headers) req += k + ": " + v + "\r\n";
    if (!body.empty() || method == "POST")
      req += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
    req += "\r\n" + body;
    return SendRaw(req);
  }
  // Reads the status line and headers only (for streams).
  bool ReadHead(HttpResponse& r) {
    size_t end;
    while ((end = buf_.find("\r\n\r\n")) == std::string::npos)
      if (!Fill()) return false;
    std::string head = buf_.substr(0, end);
    buf_.erase(0, end + 4);
    size_t sp = head.find(' ');
    r.status = std::atoi(head.c_str() + sp + 1);
    size_t pos = head.find("\r\n");
    while (pos != std::string::npos && pos < head.size()) {
      size_t next = head.find("\r\n", pos + 2);
      std::string line = head.substr(pos + 2, next == std::string::npos ? std::string::npos : next - pos - 2);
      size_t colon = line.find(':');
      if (colon != std::string::npos) {
        std::string k = line.substr(0, colon), v = line.substr(colon + 1);
        for (char& c : k) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        while (!v.empty() && v[0] == ' ') v.erase(0, 1);
        r.headers[k] = v;
      }
      pos = next;
    }
    return true;
  }
  // Reads one chunk of a chunked body; false at the last chunk or on error.
  bool ReadChunk(std::string& out) {
    size_t eol;
    while ((eol = buf_.find("\r\n")) == std::string::npos)
      if (!Fill()) return false;
    size_t n = std::stoul(buf_.substr(0, eol), nullptr, 16);
    while (buf_.size() < eol + 2 + n + 2)
      if (!Fill()) return false;
    out = buf_.substr(eol + 2, n);
    buf_.erase(0, eol + 2 + n + 2);
    return n > 0;
  }
  // What is left of the connection until the server closes it (an unframed HTTP/1.0 body).
  std::string ReadToEnd() {
    while (Fill()) {
    }
    std::string out;
    out.swap(buf_);
    return out;
  }
  HttpResponse Read() {
    HttpResponse r;
    if (!ReadHead(r)) return r;
    if (r.headers.count("transfer-encoding") && r.headers["transfer-encoding"] == "chunked") {
      std::string chunk;
      while (ReadChunk(chunk)) r.body += chunk;
      r.ok = true;
      return r;
    }
    size_t len = r.headers.count("content-length") ? std::stoul(r.headers["content-length"]) : 0;
    while (buf_.size() < len)
      if (!Fill()) return r;
    r.body = buf_.substr(0, len);
    buf_.erase(0, len);
    r.ok = true;
    return r;
  }

 private:
  bool Fill() {
    char tmp[8192];
    ssize_t n = ::recv(fd_, tmp, sizeof tmp, 0);
    if (n <= 0) return false;
    buf_.append(tmp, static_cast<size_t>(n));
    return true;
  }
  int fd_ = -1;
  bool connected_ = false;
  std::string buf_;
};

inline HttpResponse Call(int port, const std::string& method, const std::string& path,
                         const std::string& body = "",
                         const std::map<std::string, std::string>& headers = {}) {
  Client c(port);
  if (!c.Send(method, path, body, headers)) return {};
  return c.Read();
}

struct SseEvent {
  std::string event, data;
};
// Splits an SSE body into events; returns false when the framing is wrong (a line that is not
// "event: " / "data: ", or text after the last blank line).
inline bool ParseSse(const std::string& body, std::vector<SseEvent>& out) {
  size_t pos = 0;
  while (pos < body.size()) {
    size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) return false;
    std::string block = body.substr(pos, end - pos);
    SseEvent e;
    size_t lp = 0;
    while (lp <= block.size()) {
      size_t nl = block.find('\n', lp);
      std::string line = block.substr(lp, nl == std::string::npos ? std::string::npos : nl - lp);
      if (line.rfind("data: ", 0) == 0)
        e.data += line.substr(6);
      else if (line.rfind("event: ", 0) == 0)
        e.event = line.substr(7);
      else
        return false;
      if (nl == std::string::npos) break;
      lp = nl + 1;
    }
    out.push_back(e);
    pos = end + 2;
  }
  return true;
}

}  // namespace tessera::testing_server
