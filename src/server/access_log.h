// tessera server: the access log, one JSON object a line, to stderr or a file. It carries the key
// id (never the key), and prompts/completions only when the config's log_requests is on.
#pragma once

#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

namespace tessera {

struct AccessLogEntry {
  // Content-safety matches (never the matched text): stage input / output, source rule /
  // classifier, the rule's name (or the classifier's category), category, action, and how often.
  // Identical ones are counted in one (a mask rule may match every line of a long answer).
  struct SafetyHit {
    std::string stage, source, name, category, action;
    int64_t count = 1;
  };
  std::vector<SafetyHit> content_safety;
  void AddSafetyHit(SafetyHit h);
  std::string request_id, key_id, remote, method, path;
  int status = 0;
  int64_t prompt_tokens = -1, completion_tokens = -1;  // -1: not a generation
  double ttft_s = -1, e2e_s = 0;
  bool stream = false;
  std::string finish_reason;
  std::string error;               // message of an error answer
  // A connection refused over a limit ("max_connections", "max_connections_per_client"): no
  // request was read, so the line has no method or path.
  std::string refused;
  std::string prompt, completion;  // only written when log_requests
};

class AccessLog {
 public:
  // target: "-" or "stderr" = stderr, "" = off, else a file opened for append (Error when not).
  AccessLog(const std::string& target, bool log_requests);
  ~AccessLog();
  AccessLog(const AccessLog&) = delete;
  AccessLog& operator=(const AccessLog&) = delete;
  void Write(const AccessLogEntry& e);
  bool log_requests() const { return log_requests_; }
  static std::string Format(const AccessLogEntry& e, bool log_requests);  // without the newline

 private:
  std::mutex mu_;
  FILE* file_ = nullptr;
  bool owned_ = false;
  bool log_requests_;
};

}  // namespace tessera
