// tessera server: a small Prometheus registry (counters, gauges, histograms, each a family keyed by
// label values) rendered in the text exposition format 0.0.4, plus the server's own metric set.
// Thread-safe: each family has its own lock; rendering takes them one at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace tessera {

class MetricFamily {
 public:
  enum class Type { kCounter, kGauge, kHistogram };
  MetricFamily(std::string name, std::string help, Type type, std::vector<std::string> label_names,
               std::vector<double> buckets = {});

  // label_values must have one value per label name (else Error(kInternal)).
  void Inc(const std::vector<std::string>& label_values = {}, double v = 1.0);  // counter, gauge
  void Set(const std::vector<std::string>& label_values, double v);             // gauge
  void Set(double v) { Set({}, v); }
  void Observe(const std::vector<std::string>& label_values, double v);  // histogram
  void Observe(double v) { Observe({}, v); }
  double Value(const std::vector<std::string>& label_values = {}) const;    // counter/gauge; sum for hist
  uint64_t Count(const std::vector<std::string>& label_values = {}) const;  // histogram

  void Render(std::string& out) const;
  const std::string& name() const { return name_; }

 private:
  struct Series {
    double value = 0;               // counter / gauge / histogram sum
    uint64_t count = 0;             // histogram
    std::vector<uint64_t> buckets;  // histogram, per bucket (not cumulative)
  };
  Series& Get(const std::vector<std::string>& label_values);

  std::string name_, help_;
  Type type_;
  std::vector<std::string> label_names_;
  std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::map<std::vector<std::string>, Series> series_;
};

class MetricsRegistry {
 public:
  MetricFamily& Counter(const std::string& name, const std::string& help,
                        std::vector<std::string> labels = {});
  MetricFamily& Gauge(const std::string& name, const std::string& help, std::vector<std::string> labels = {});
  MetricFamily& Histogram(const std::string& name, const std::string& help, std::vector<double> buckets,
                          std::vector<std::string> labels = {});
  // Run before each Render (to copy gauges from an engine snapshot, say).
  void AddCollector(std::function<void()> fn);
  std::string Render() const;

 private:
  MetricFamily& Add(std::unique_ptr<MetricFamily> f);
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<MetricFamily>> families_;
  std::vector<std::function<void()>> collectors_;
};

// Escaping of the text format: label values escape \ " and newline; HELP escapes \ and newline.
std::string EscapeLabelValue(const std::string& s);
std::string EscapeHelp(const std::string& s);
// Prometheus number formatting: +Inf, -Inf, NaN, integers without exponent where exact.
std::string FormatMetricValue(double v);

// The metrics the server exports; created in one place so names stay consistent.
struct ServerMetrics {
  explicit ServerMetrics(MetricsRegistry& r);
  MetricFamily& requests_running;              // gauge (engine snapshot)
  MetricFamily& requests_waiting;              // gauge (engine snapshot + server queue)
  MetricFamily& http_requests;                 // counter {path, code}
  MetricFamily& errors;                        // counter {code}
  MetricFamily& connections_open;              // gauge (connections admitted by the connection limits)
  MetricFamily& connections_refused;           // counter {limit}: refused at accept, no request read
  MetricFamily& write_timeouts;                // counter: connections reset at server.write_timeout_s
  MetricFamily& ttft;                          // histogram seconds
  MetricFamily& inter_token;                   // histogram seconds
  MetricFamily& e2e;                           // histogram seconds
  MetricFamily& queue_time;                    // histogram seconds
  MetricFamily& prompt_tokens;                 // counter
  MetricFamily& generation_tokens;             // counter
  MetricFamily& cached_tokens;                 // counter (prompt tokens served from the prefix cache)
  MetricFamily& prefix_cache_queries;          // counter set from the engine's cumulative count (tokens)
  MetricFamily& prefix_cache_hits;             // counter set likewise
  MetricFamily& kv_pages_used;                 // gauge
  MetricFamily& kv_pages_total;                // gauge
  MetricFamily& state_slots_used;              // gauge (recurrent-state slots of running sequences)
  MetricFamily& state_slots_total;             // gauge
  MetricFamily& diffusion_tokens_per_forward;  // histogram
  MetricFamily& diffusion_steps_per_block;     // histogram
  MetricFamily& expert_routed_tokens;          // counter {layer, expert}
  MetricFamily& content_safety_hits;           // counter {source, stage, category, action}
  MetricFamily& content_safety_classifier;     // counter {result}: clean, flagged, error
  MetricFamily& ready;                         // gauge 0/1
  MetricFamily& access_log_errors;             // counter: access-log lines that could not be written
};

}  // namespace tessera
