// tessera tests: the load generator's statistics and report math. Expected values were computed
// independently with Python's statistics module (quantiles(method="inclusive") is numpy's
// linear percentile; pstdev is numpy's default std) and are checked by hand in the comments.
#include <gtest/gtest.h>

#include "loadgen/report.h"
#include "loadgen/stats.h"

namespace tessera::loadgen {
namespace {

TEST(LoadgenStats, PercentilesLikeNumpyLinear) {
  // sorted: 0.5 3 7.25 12.5 19 41 100 (n - 1 = 6)
  // p50: rank 3 -> 12.5; p90: rank 5.4 -> 41 + 0.4 * 59 = 64.6; p99: rank 5.94 -> 96.46;
  // p25: rank 1.5 -> 3 + 0.5 * 4.25 = 5.125.
  Summary s = Summarize({12.5, 3.0, 7.25, 100.0, 41.0, 0.5, 19.0});
  EXPECT_EQ(s.count, 7);
  EXPECT_NEAR(s.mean, 26.178571428571427, 1e-12);
  EXPECT_NEAR(s.std, 32.65149151201494, 1e-12);
  EXPECT_NEAR(s.median, 12.5, 1e-12);
  EXPECT_NEAR(s.p90, 64.6, 1e-12);
  EXPECT_NEAR(s.p99, 96.46, 1e-12);
  EXPECT_DOUBLE_EQ(s.min, 0.5);
  EXPECT_DOUBLE_EQ(s.max, 100.0);
  std::vector<double> sorted = {0.5, 3.0, 7.25, 12.5, 19.0, 41.0, 100.0};
  EXPECT_NEAR(PercentileSorted(sorted, 25), 5.125, 1e-12);
  EXPECT_DOUBLE_EQ(PercentileSorted(sorted, 0), 0.5);
  EXPECT_DOUBLE_EQ(PercentileSorted(sorted, 100), 100.0);
}

TEST(LoadgenStats, SmallSamples) {
  Summary two = Summarize({5.0, 1.0});  // p90: 1 + 0.9 * 4 = 4.6; pstdev 2
  EXPECT_NEAR(two.p90, 4.6, 1e-12);
  EXPECT_NEAR(two.std, 2.0, 1e-12);
  EXPECT_NEAR(two.median, 3.0, 1e-12);
  Summary one = Summarize({7.0});
  EXPECT_DOUBLE_EQ(one.p99, 7.0);
  EXPECT_DOUBLE_EQ(one.std, 0.0);
  Summary none = Summarize({});
  EXPECT_EQ(none.count, 0);
  EXPECT_DOUBLE_EQ(none.mean, 0.0);
}

TEST(LoadgenReport, CountsThroughputAndTpot) {
  RunOutput run;
  run.duration_s = 2.0;
  RequestResult a;
  a.success = true;
  a.ttft_measured = true;
  a.prompt_tokens = 10;
  a.output_tokens = 5;
  a.ttft_s = 0.1;
  a.e2e_s = 0.5;  // TPOT = (500 - 100) / 4 = 100 ms
  a.itl_s = {0.1, 0.1, 0.1, 0.1};
  RequestResult b = a;
  b.prompt_tokens = 20;
  b.output_tokens = 3;
  b.ttft_s = 0.2;
  b.e2e_s = 0.3;  // TPOT = (300 - 200) / 2 = 50 ms
  b.itl_s = {0.04, 0.06};
  RequestResult one = a;  // a single output token has no TPOT
  one.output_tokens = 1;
  one.itl_s.clear();
  RequestResult silent = a;  // a stream without text: counted, but no TTFT / TPOT / ITL
  silent.ttft_measured = false;
  silent.ttft_s = 0;
  silent.itl_s.clear();
  silent.e2e_s = 0.7;
  RequestResult f429;
  f429.failure = "429";
  f429.error = "rate limited";
  f429.prompt_tokens = 99;
  RequestResult fconn;
  fconn.failure = "connection";
  fconn.error = "connect: Connection refused";
  run.results = {a, b, one, f429, fconn, f429, silent};
  BenchReport r = BuildReport(run, {{"model", "m"}});
  EXPECT_EQ(r.completed, 4);
  EXPECT_EQ(r.without_output_text, 1);
  EXPECT_EQ(r.failed, 3);
  EXPECT_EQ(r.failures_by_status.at("429"), 2);
  EXPECT_EQ(r.failures_by_status.at("connection"), 1);
  EXPECT_EQ(r.total_input_tokens, 50);   // failed requests do not count
  EXPECT_EQ(r.total_output_tokens, 14);
  EXPECT_DOUBLE_EQ(r.request_throughput, 2.0);
  EXPECT_DOUBLE_EQ(r.output_throughput, 7.0);
  EXPECT_DOUBLE_EQ(r.input_throughput, 25.0);
  EXPECT_DOUBLE_EQ(r.total_token_throughput, 32.0);
  EXPECT_EQ(r.ttft_ms.count, 3);
  EXPECT_EQ(r.e2el_ms.count, 4);
  EXPECT_NEAR(r.e2el_ms.max, 700.0, 1e-9);
  EXPECT_EQ(r.tpot_ms.count, 2);
  EXPECT_NEAR(r.tpot_ms.mean, 75.0, 1e-9);
  EXPECT_EQ(r.itl_ms.count, 6);  // pooled over requests
  EXPECT_NEAR(r.itl_ms.mean, (400.0 + 100.0) / 6, 1e-9);
  EXPECT_NEAR(r.ttft_ms.median, 100.0, 1e-9);

  std::string table = FormatReport(r);
  EXPECT_NE(table.find("Successful requests:"), std::string::npos);
  EXPECT_NE(table.find("status 429:"), std::string::npos);
  EXPECT_NE(table.find("rate limited"), std::string::npos);
  EXPECT_NE(table.find("P99 TPOT (ms):"), std::string::npos);

  auto j = ReportJson(r, run);
  EXPECT_EQ(j["model"], "m");
  EXPECT_EQ(j["completed"], 4);
  EXPECT_EQ(j["without_output_text"], 1);
  EXPECT_TRUE(j["ttfts_ms"][6].is_null());
  EXPECT_EQ(j["failures_by_status"]["429"], 2);
  EXPECT_NEAR(j["mean_tpot_ms"].get<double>(), 75.0, 1e-9);
  for (const char* k : {"median_ttft_ms", "p90_itl_ms", "p99_e2el_ms", "std_ttft_ms", "output_throughput",
                        "total_token_throughput", "input_throughput", "request_throughput", "duration_s"})
    EXPECT_TRUE(j.contains(k)) << k;
  EXPECT_EQ(j["itls_ms"].size(), 7u);  // one list per request
  EXPECT_EQ(j["request_errors"][3], "429: rate limited");
}

}  // namespace
}  // namespace tessera::loadgen
