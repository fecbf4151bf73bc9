// tessera server: JSON-lines access log.
#include "server/access_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>

#include <spdlog/spdlog.h>

#include "core/error.h"

namespace tessera {

AccessLog::AccessLog(const std::string& target, bool log_requests) : target_(target), log_requests_(log_requests) {
  if (target.empty()) return;
  if (target == "-" || target == "stderr") {
    fd_ = STDERR_FILENO;
    return;
  }
  fd_ = ::open(target.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0666);
  if (fd_ < 0)
    Fail(ErrorKind::kNotFound, "cannot open access log '{}' for append: {}", target, std::strerror(errno));
  owned_ = true;
}

AccessLog::~AccessLog() {
  if (owned_ && fd_ >= 0) ::close(fd_);
}

int64_t AccessLog::lines_lost() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lines_lost_;
}

void AccessLogEntry::AddSafetyHit(SafetyHit h) {
  for (SafetyHit& e : content_safety)
    if (e.stage == h.stage && e.source == h.source && e.name == h.name && e.category == h.category &&
        e.action == h.action) {
      e.count += h.count;
      return;
    }
  content_safety.push_back(std::move(h));
}

std::string AccessLog::Format(const AccessLogEntry& e, bool log_requests) {
  nlohmann::ordered_json j;
  double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  j["ts"] = now;
  j["request_id"] = e.request_id;
  j["key_id"] = e.key_id.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(e.key_id);
  j["remote"] = e.remote;
  if (e.refused.empty()) {
    j["method"] = e.method;
    j["path"] = e.path;
  }
  j["status"] = e.status;
  if (!e.refused.empty()) j["refused"] = e.refused;
  if (e.prompt_tokens >= 0) {
    j["prompt_tokens"] = e.prompt_tokens;
    j["completion_tokens"] = e.completion_tokens;
    j["stream"] = e.stream;
    j["ttft_s"] = e.ttft_s >= 0 ? nlohmann::ordered_json(e.ttft_s) : nlohmann::ordered_json(nullptr);
    if (!e.finish_reason.empty()) j["finish_reason"] = e.finish_reason;
  }
  j["e2e_s"] = e.e2e_s;
  if (!e.error.empty()) j["error"] = e.error;
  if (!e.content_safety.empty()) {
    auto& hits = j["content_safety"] = nlohmann::ordered_json::array();
    for (const auto& h : e.content_safety)
      hits.push_back({{"stage", h.stage}, {"source", h.source}, {"name", h.name}, {"category", h.category},
                      {"action", h.action}, {"count", h.count}});
  }
  if (log_requests) {
    if (!e.prompt.empty()) j["prompt"] = e.prompt;
    if (!e.completion.empty()) j["completion"] = e.completion;
  }
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

void AccessLog::Write(const AccessLogEntry& e) {
  if (fd_ < 0) return;
  std::string line = Format(e, log_requests_) + "\n";
  std::lock_guard<std::mutex> lock(mu_);
  size_t off = 0;
  int err = 0;
  while (off < line.size()) {
    ssize_t n = ::write(fd_, line.data() + off, line.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      err = n < 0 ? errno : EIO;
      break;
    }
    off += static_cast<size_t>(n);
  }
  if (err != 0) {
    ++lines_lost_;
    if (!failing_)
      spdlog::error("access log '{}': cannot write ({}); requests are served, their lines lost and counted in "
                    "tessera_access_log_errors_total until writing works again",
                    target_, std::strerror(err));
    failing_ = true;
  } else if (failing_) {
    failing_ = false;
    spdlog::warn("access log '{}': writing again ({} line(s) lost so far)", target_, lines_lost_);
  }
}

}  // namespace tessera
