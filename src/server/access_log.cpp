// tessera server: JSON-lines access log.
#include "server/access_log.h"

#include <chrono>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace tessera {

AccessLog::AccessLog(const std::string& target, bool log_requests) : log_requests_(log_requests) {
  if (target.empty()) return;
  if (target == "-" || target == "stderr") {
    file_ = stderr;
    return;
  }
  file_ = std::fopen(target.c_str(), "a");
  if (file_ == nullptr) Fail(ErrorKind::kNotFound, "cannot open access log '{}' for append", target);
  owned_ = true;
}

AccessLog::~AccessLog() {
  if (owned_ && file_ != nullptr) std::fclose(file_);
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
  if (file_ == nullptr) return;
  std::string line = Format(e, log_requests_) + "\n";
  std::lock_guard<std::mutex> lock(mu_);
  std::fwrite(line.data(), 1, line.size(), file_);
  std::fflush(file_);
}

}  // namespace tessera
