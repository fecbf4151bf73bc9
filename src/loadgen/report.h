// tessera loadgen: the benchmark report: counts, throughputs and latency statistics over the
// successful requests, printed as a table and written as JSON.
//
// JSON keys (stable; times in ms unless the key says _s; throughputs per second of duration):
//   date, base_url, endpoint, model, num_prompts, concurrency (0 = unlimited), request_rate
//   ("inf" or a number), burstiness, input_len, output_len, random_range_ratio, prefix_len,
//   stream, ignore_eos, seed, warmup,
//   completed, failed, failures_by_status {"429": n, "connection": n, ...}, errors (first message
//   per status), duration_s, total_input_tokens, total_output_tokens, request_throughput,
//   input_throughput, output_throughput, total_token_throughput, max_in_flight,
//   connections_opened, without_output_text, and for M in ttft, tpot, itl, e2el: mean_M_ms, median_M_ms, std_M_ms,
//   p90_M_ms, p99_M_ms; per request (in send order): input_lens, output_lens, ttfts_ms,
//   e2els_ms, send_times_s, itls_ms (a list per request), request_errors ("" when it succeeded).
// Definitions: TTFT = send to the first chunk with output; ITL = between output chunks (all
// requests pooled); TPOT = (e2e - ttft) / (output_tokens - 1) per request with >= 2 tokens;
// E2EL = send to the last byte. Token counts come from the server's usage. A successful stream
// that carried no text counts in without_output_text and only in E2EL and the throughputs.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "loadgen/response_tracker.h"
#include "loadgen/runner.h"
#include "loadgen/stats.h"

namespace tessera::loadgen {

struct BenchReport {
  nlohmann::ordered_json settings = nlohmann::ordered_json::object();  // echoed first in the JSON
  int64_t num_requests = 0, completed = 0, failed = 0;
  std::map<std::string, int64_t> failures_by_status;
  std::map<std::string, std::string> first_error;  // per status
  double duration_s = 0;
  int64_t total_input_tokens = 0, total_output_tokens = 0;
  double request_throughput = 0, input_throughput = 0, output_throughput = 0, total_token_throughput = 0;
  int64_t max_in_flight = 0, connections_opened = 0;
  int64_t without_output_text = 0;  // successes whose stream carried no text (no TTFT / ITL / TPOT)
  Summary ttft_ms, tpot_ms, itl_ms, e2el_ms;
};

BenchReport BuildReport(const RunOutput& run, nlohmann::ordered_json settings);

// The human-readable table (ends with a newline).
std::string FormatReport(const BenchReport& r);

// The JSON document described above; the per-request arrays come from `run`.
nlohmann::ordered_json ReportJson(const BenchReport& r, const RunOutput& run);

}  // namespace tessera::loadgen
