// tessera server: the access log, one JSON object a line, to stderr or a file. It carries the key
// id (never the key), and prompts/completions only when the config's log_requests is on.
#pragma once

#include <cstdint>
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

// A line is one write(2) to a descriptor opened with O_APPEND, never buffered: a failed write (a full
// disk: ENOSPC, EIO...) loses that line only, the request it describes is served regardless. The
// first failure after a good write is logged once (spdlog, naming the target and the error), the
// return to writing once more, and every lost line is counted (lines_lost(): the server's
// tessera_access_log_errors_total).
class AccessLog {
 public:
  // target: "-" or "stderr" = stderr, "" = off, else a file opened for append (Error when not).
  AccessLog(const std::string& target, bool log_requests);
  ~AccessLog();
  AccessLog(const AccessLog&) = delete;
  AccessLog& operator=(const AccessLog&) = delete;
  void Write(const AccessLogEntry& e);
  bool log_requests() const { return log_requests_; }
  int64_t lines_lost() const;
  static std::string Format(const AccessLogEntry& e, bool log_requests);  // without the newline

 private:
  mutable std::mutex mu_;
  std::string target_;
  int fd_ = -1;
  bool owned_ = false;
  bool log_requests_;
  bool failing_ = false;  // the last write failed
  int64_t lines_lost_ = 0;
};

}  // namespace tessera
