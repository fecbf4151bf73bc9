// tessera tests: the Prometheus registry. A small checker of the text exposition format 0.0.4
// (written from the format's specification: HELP/TYPE lines, metric and label name grammar, label
// value escapes, histogram bucket rules) parses what the registry renders.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <regex>
#include <sstream>

#include "server/metrics.h"
#include "unit/server_metrics_checker.h"

namespace tessera {
namespace {

using testing_metrics::CheckExposition;
using testing_metrics::Exposition;

TEST(ServerMetrics, CheckerRejectsBadText) {
  std::string err;
  EXPECT_FALSE(CheckExposition("# TYPE a counter\na{x=\"1} 1\n", nullptr, &err));
  EXPECT_FALSE(CheckExposition("# TYPE a counter\na{x=\"\\q\"} 1\n", nullptr, &err));
  EXPECT_FALSE(CheckExposition("# TYPE 1a counter\n1a 1\n", nullptr, &err));
  EXPECT_FALSE(CheckExposition("# TYPE a counter\na one\n", nullptr, &err));
  EXPECT_FALSE(CheckExposition("# TYPE a counter\n# TYPE a counter\na 1\n", nullptr, &err));
  EXPECT_FALSE(CheckExposition(
      "# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n", nullptr,
      &err));
  EXPECT_FALSE(
      CheckExposition("# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_sum 1\nh_count 1\n", nullptr, &err));
  EXPECT_TRUE(
      CheckExposition("# HELP a x\\\\y\n# TYPE a gauge\na{l=\"q\\\"\\n\\\\\"} -1.5e-3\na 2\n", nullptr, &err))
      << err;
}

TEST(ServerMetrics, RendersValidExposition) {
  MetricsRegistry r;
  auto& c = r.Counter("test_requests_total", "Requests.\nSecond line with \\ backslash", {"path", "code"});
  auto& g = r.Gauge("test_pages", "Pages.");
  auto& h = r.Histogram("test_latency_seconds", "Latency.", {0.1, 1, 10});
  auto& hl = r.Histogram("test_steps", "Steps.", {1, 2}, {"model"});
  c.Inc({"/v1/chat/completions", "200"});
  c.Inc({"/v1/chat/completions", "200"}, 2);
  c.Inc({"/we\"ird\\path\n", "404"});
  g.Set(42.5);
  for (double v : {0.05, 0.1, 0.5, 3.0, 100.0}) h.Observe(v);
  hl.Observe({"m\"1"}, 1.5);
  int collected = 0;
  r.AddCollector([&] {
    g.Set(7);
    ++collected;
  });
  std::string text = r.Render();
  EXPECT_EQ(collected, 1);
  Exposition e;
  std::string err;
  ASSERT_TRUE(CheckExposition(text, &e, &err)) << err << "\n" << text;
  EXPECT_EQ(e.types["test_requests_total"], "counter");
  EXPECT_EQ(e.types["test_latency_seconds"], "histogram");
  EXPECT_EQ(e.help["test_requests_total"], "Requests.\nSecond line with \\ backslash");
  EXPECT_EQ(e.Value("test_requests_total", {{"path", "/v1/chat/completions"}, {"code", "200"}}), 3);
  EXPECT_EQ(e.Value("test_requests_total", {{"path", "/we\"ird\\path\n"}, {"code", "404"}}), 1);
  EXPECT_EQ(e.Value("test_pages", {}), 7);
  // Buckets are cumulative: <=0.1 holds 0.05 and 0.1 (le is inclusive).
  EXPECT_EQ(e.Value("test_latency_seconds_bucket", {{"le", "0.1"}}), 2);
  EXPECT_EQ(e.Value("test_latency_seconds_bucket", {{"le", "1"}}), 3);
  EXPECT_EQ(e.Value("test_latency_seconds_bucket", {{"le", "10"}}), 4);
  EXPECT_EQ(e.Value("test_latency_seconds_bucket", {{"le", "+Inf"}}), 5);
  EXPECT_EQ(e.Value("test_latency_seconds_count", {}), 5);
  EXPECT_NEAR(e.Value("test_latency_seconds_sum", {}), 103.65, 1e-9);
  EXPECT_EQ(e.Value("test_steps_bucket", {{"model", "m\"1"}, {"le", "2"}}), 1);
}

TEST(ServerMetrics, ServerMetricSetIsValid) {
  MetricsRegistry r;
  ServerMetrics m(r);
  m.expert_routed_tokens.Inc({"0", "17"}, 5);
  m.errors.Inc({"429"});
  m.ttft.Observe(0.2);
  Exposition e;
  std::string err;
  std::string text = r.Render();
  ASSERT_TRUE(CheckExposition(text, &e, &err)) << err << "\n" << text;
  for (const char* name :
       {"tessera_num_requests_running", "tessera_num_requests_waiting", "tessera_time_to_first_token_seconds",
        "tessera_inter_token_latency_seconds", "tessera_e2e_request_latency_seconds",
        "tessera_request_queue_time_seconds", "tessera_prompt_tokens_total",
        "tessera_generation_tokens_total", "tessera_prefix_cache_queries_total",
        "tessera_prefix_cache_hits_total", "tessera_kv_cache_pages_used", "tessera_kv_cache_pages_total",
        "tessera_state_slots_used", "tessera_state_slots_total",
        "tessera_diffusion_tokens_per_forward", "tessera_diffusion_steps_per_block",
        "tessera_moe_routed_tokens_total", "tessera_request_errors_total", "tessera_http_connections_open",
        "tessera_http_connections_refused_total", "tessera_http_write_timeouts_total"})
    EXPECT_TRUE(e.types.count(name)) << name;
  EXPECT_EQ(e.Value("tessera_moe_routed_tokens_total", {{"layer", "0"}, {"expert", "17"}}), 5);
  EXPECT_EQ(e.Value("tessera_time_to_first_token_seconds_count", {}), 1);
}

TEST(ServerMetrics, ValueFormatting) {
  EXPECT_EQ(FormatMetricValue(3), "3");
  EXPECT_EQ(FormatMetricValue(0.25), "0.25");
  EXPECT_EQ(FormatMetricValue(INFINITY), "+Inf");
  EXPECT_EQ(FormatMetricValue(-INFINITY), "-Inf");
  EXPECT_EQ(FormatMetricValue(NAN), "NaN");
  EXPECT_EQ(EscapeLabelValue("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
}

}  // namespace
}  // namespace tessera
