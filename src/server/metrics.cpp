// tessera server: Prometheus text exposition (format 0.0.4) of a small in-process registry.
#include "server/metrics.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "core/error.h"

namespace tessera {

namespace {
// The format's escapes: backslash and newline everywhere, the double quote in label values only.
std::string Escape(const std::string& s, bool quote) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"' && quote)
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}
}  // namespace

std::string EscapeLabelValue(const std::string& s) { return Escape(s, /*quote=*/true); }

std::string EscapeHelp(const std::string& s) { return Escape(s, /*quote=*/false); }

std::string FormatMetricValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) return fmt::format("{}", static_cast<int64_t>(v));
  return fmt::format("{}", v);  // shortest round-trip form
}

MetricFamily::MetricFamily(std::string name, std::string help, Type type,
                           std::vector<std::string> label_names, std::vector<double> buckets)
    : name_(std::move(name)),
      help_(std::move(help)),
      type_(type),
      label_names_(std::move(label_names)),
      bounds_(std::move(buckets)) {}

MetricFamily::Series& MetricFamily::Get(const std::vector<std::string>& lv) {
  TESSERA_CHECK(lv.size() == label_names_.size());
  auto [it, inserted] = series_.try_emplace(lv);
  if (inserted && type_ == Type::kHistogram) it->second.buckets.assign(bounds_.size(), 0);
  return it->second;
}

void MetricFamily::Inc(const std::vector<std::string>& lv, double v) {
  TESSERA_CHECK(type_ != Type::kHistogram);
  std::lock_guard<std::mutex> lock(mu_);
  Get(lv).value += v;
}

void MetricFamily::Set(const std::vector<std::string>& lv, double v) {
  std::lock_guard<std::mutex> lock(mu_);
  Get(lv).value = v;
}

void MetricFamily::Observe(const std::vector<std::string>& lv, double v) {
  TESSERA_CHECK(type_ == Type::kHistogram);
  std::lock_guard<std::mutex> lock(mu_);
  Series& s = Get(lv);
  s.value += v;
  s.count += 1;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    if (v <= bounds_[i]) {
      s.buckets[i] += 1;
      break;
    }
  }
}

double MetricFamily::Value(const std::vector<std::string>& lv) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = series_.find(lv);
  return it == series_.end() ? 0.0 : it->second.value;
}

uint64_t MetricFamily::Count(const std::vector<std::string>& lv) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = series_.find(lv);
  return it == series_.end() ? 0 : it->second.count;
}

namespace {

std::string LabelText(const std::vector<std::string>& names, const std::vector<std::string>& values,
                      const std::string& extra_name = "", const std::string& extra_value = "") {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    out += out.empty() ? "{" : ",";
    out += names[i] + "=\"" + EscapeLabelValue(values[i]) + "\"";
  }
  if (!extra_name.empty()) {
    out += out.empty() ? "{" : ",";
    out += extra_name + "=\"" + EscapeLabelValue(extra_value) + "\"";
  }
  if (!out.empty()) out += "}";
  return out;
}

}  // namespace

void MetricFamily::Render(std::string& out) const {
  static const char* kTypes[] = {"counter", "gauge", "histogram"};
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name_, EscapeHelp(help_), name_,
                     kTypes[static_cast<int>(type_)]);
  std::lock_guard<std::mutex> lock(mu_);
  // A family without labels always shows its one series (0 before anything happened).
  if (series_.empty() && label_names_.empty()) {
    if (type_ == Type::kHistogram) {
      for (double b : bounds_) out += fmt::format("{}_bucket{{le=\"{}\"}} 0\n", name_, FormatMetricValue(b));
      out += fmt::format("{}_bucket{{le=\"+Inf\"}} 0\n{}_sum 0\n{}_count 0\n", name_, name_, name_);
    } else {
      out += name_ + " 0\n";
    }
    return;
  }
  for (const auto& [lv, s] : series_) {
    if (type_ != Type::kHistogram) {
      out += name_ + LabelText(label_names_, lv) + " " + FormatMetricValue(s.value) + "\n";
      continue;
    }
    uint64_t cum = 0;
    for (size_t i = 0; i < bounds_.size(); ++i) {
      cum += s.buckets[i];
      out += name_ + "_bucket" + LabelText(label_names_, lv, "le", FormatMetricValue(bounds_[i])) + " " +
             std::to_string(cum) + "\n";
    }
    out +=
        name_ + "_bucket" + LabelText(label_names_, lv, "le", "+Inf") + " " + std::to_string(s.count) + "\n";
    out += name_ + "_sum" + LabelText(label_names_, lv) + " " + FormatMetricValue(s.value) + "\n";
    out += name_ + "_count" + LabelText(label_names_, lv) + " " + std::to_string(s.count) + "\n";
  }
}

MetricFamily& MetricsRegistry::Add(std::unique_ptr<MetricFamily> f) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& g : families_) TESSERA_CHECK(g->name() != f->name());
  families_.push_back(std::move(f));
  return *families_.back();
}

MetricFamily& MetricsRegistry::Counter(const std::string& name, const std::string& help,
                                       std::vector<std::string> labels) {
  return Add(std::make_unique<MetricFamily>(name, help, MetricFamily::Type::kCounter, std::move(labels)));
}

MetricFamily& MetricsRegistry::Gauge(const std::string& name, const std::string& help,
                                     std::vector<std::string> labels) {
  return Add(std::make_unique<MetricFamily>(name, help, MetricFamily::Type::kGauge, std::move(labels)));
}

MetricFamily& MetricsRegistry::Histogram(const std::string& name, const std::string& help,
                                         std::vector<double> buckets, std::vector<std::string> labels) {
  return Add(std::make_unique<MetricFamily>(name, help, MetricFamily::Type::kHistogram, std::move(labels),
                                            std::move(buckets)));
}

void MetricsRegistry::AddCollector(std::function<void()> fn) {
  std::lock_guard<std::mutex> lock(mu_);
  collectors_.push_back(std::move(fn));
}

std::string MetricsRegistry::Render() const {
  std::vector<std::function<void()>> collectors;
  {
    std::lock_guard<std::mutex> lock(mu_);
    collectors = collectors_;
  }
  for (auto& c : collectors) c();
  std::string out;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& f : families_) f->Render(out);
  return out;
}

namespace {
const std::vector<double> kLatencyBuckets = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
                                             1.0,   2.5,   5.0,  7.5,  10,   20,   40,   80,  160,  640};
const std::vector<double> kCountBuckets = {1, 2, 4, 8, 16, 32, 64, 128, 256};
}  // namespace

ServerMetrics::ServerMetrics(MetricsRegistry& r)
    : requests_running(r.Gauge("tessera_num_requests_running", "Requests in the engine's running batch.")),
      requests_waiting(r.Gauge("tessera_num_requests_waiting",
                               "Requests waiting (engine queue plus the server's admission queue).")),
      http_requests(r.Counter("tessera_http_requests_total", "HTTP requests answered.", {"path", "code"})),
      errors(r.Counter("tessera_request_errors_total", "Requests answered with an error status.", {"code"})),
      connections_open(r.Gauge("tessera_http_connections_open",
                               "Open HTTP connections (those refused by the connection limits not counted).")),
      connections_refused(r.Counter("tessera_http_connections_refused_total",
                                    "Connections refused by a connection limit (total or per_client) before any "
                                    "request was read; not in the request counters.",
                                    {"limit"})),
      write_timeouts(r.Counter("tessera_http_write_timeouts_total",
                               "Connections reset because the client took longer than server.write_timeout_s "
                               "to take one write (a reader too slow or gone).")),
      ttft(r.Histogram("tessera_time_to_first_token_seconds",
                       "Time from request arrival to its first output token.", kLatencyBuckets)),
      inter_token(r.Histogram("tessera_inter_token_latency_seconds",
                              "Time between output tokens (a block of k tokens counts k times).",
                              kLatencyBuckets)),
      e2e(r.Histogram("tessera_e2e_request_latency_seconds", "Time from arrival to the last token.",
                      kLatencyBuckets)),
      queue_time(r.Histogram("tessera_request_queue_time_seconds",
                             "Time waiting for admission and in the engine queue.", kLatencyBuckets)),
      prompt_tokens(r.Counter("tessera_prompt_tokens_total", "Prompt tokens processed.")),
      generation_tokens(r.Counter("tessera_generation_tokens_total", "Output tokens generated.")),
      cached_tokens(
          r.Counter("tessera_prompt_tokens_cached_total", "Prompt tokens served from the prefix cache.")),
      prefix_cache_queries(r.Counter("tessera_prefix_cache_queries_total",
                                     "Prefix cache lookups, in tokens, since start (engine count).")),
      prefix_cache_hits(r.Counter("tessera_prefix_cache_hits_total",
                                  "Prefix cache hits, in tokens, since start (engine count).")),
      kv_pages_used(r.Gauge("tessera_kv_cache_pages_used", "KV cache pages in use.")),
      kv_pages_total(r.Gauge("tessera_kv_cache_pages_total", "KV cache pages in the pool.")),
      state_slots_used(r.Gauge("tessera_state_slots_used",
                               "Recurrent-state slots (Gated DeltaNet) held by running sequences.")),
      state_slots_total(r.Gauge("tessera_state_slots_total",
                                "Recurrent-state slots for sequences (0 without recurrent layers).")),
      diffusion_tokens_per_forward(r.Histogram("tessera_diffusion_tokens_per_forward",
                                               "Output tokens per model forward, per diffusion request.",
                                               {0.5, 1, 1.5, 2, 3, 4, 6, 8, 12, 16, 24, 32})),
      diffusion_steps_per_block(r.Histogram("tessera_diffusion_steps_per_block",
                                            "Denoising steps a diffusion block took.", kCountBuckets)),
      expert_routed_tokens(r.Counter("tessera_moe_routed_tokens_total",
                                     "Tokens routed to each expert of each MoE layer.", {"layer", "expert"})),
      content_safety_hits(r.Counter("tessera_content_safety_hits_total",
                                    "Content-safety matches: source rule or classifier, stage input or output, the "
                                    "rule's or classifier's category, action block, mask or flag.",
                                    {"source", "stage", "category", "action"})),
      content_safety_classifier(r.Counter("tessera_content_safety_classifier_requests_total",
                                          "Calls of the content-safety classifier by result: clean, flagged, or "
                                          "error (unreachable, timed out, bad answer).",
                                          {"result"})),
      ready(r.Gauge("tessera_ready", "1 when the model is loaded and serving.")),
      access_log_errors(r.Counter("tessera_access_log_errors_total",
                                  "Access-log lines lost to a failed write (a full disk...); requests are "
                                  "served regardless.")) {}

}  // namespace tessera
