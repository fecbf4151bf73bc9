// tessera loadgen: building, printing and serialising the benchmark report (see report.h).
#include "loadgen/report.h"

#include <fmt/format.h>

namespace tessera::loadgen {

namespace {

using ojson = nlohmann::ordered_json;

std::vector<double> Ms(const std::vector<double>& s) {
  std::vector<double> out;
  out.reserve(s.size());
  for (double v : s) out.push_back(v * 1000.0);
  return out;
}

}  // namespace

BenchReport BuildReport(const RunOutput& run, ojson settings) {
  BenchReport r;
  r.settings = std::move(settings);
  r.num_requests = static_cast<int64_t>(run.results.size());
  r.duration_s = run.duration_s;
  r.max_in_flight = run.max_in_flight;
  r.connections_opened = run.connections_opened;
  std::vector<double> ttft, tpot, itl, e2el;
  for (const RequestResult& q : run.results) {
    if (!q.success) {
      ++r.failed;
      ++r.failures_by_status[q.failure];
      r.first_error.emplace(q.failure, q.error);
      continue;
    }
    ++r.completed;
    r.total_input_tokens += q.prompt_tokens;
    r.total_output_tokens += q.output_tokens;
    e2el.push_back(q.e2e_s * 1000.0);
    if (!q.ttft_measured) {
      ++r.without_output_text;
      continue;
    }
    ttft.push_back(q.ttft_s * 1000.0);
    if (q.output_tokens > 1)
      tpot.push_back((q.e2e_s - q.ttft_s) * 1000.0 / static_cast<double>(q.output_tokens - 1));
    for (double v : q.itl_s) itl.push_back(v * 1000.0);
  }
  if (r.duration_s > 0) {
    r.request_throughput = static_cast<double>(r.completed) / r.duration_s;
    r.input_throughput = static_cast<double>(r.total_input_tokens) / r.duration_s;
    r.output_throughput = static_cast<double>(r.total_output_tokens) / r.duration_s;
    r.total_token_throughput = static_cast<double>(r.total_input_tokens + r.total_output_tokens) / r.duration_s;
  }
  r.ttft_ms = Summarize(std::move(ttft));
  r.tpot_ms = Summarize(std::move(tpot));
  r.itl_ms = Summarize(std::move(itl));
  r.e2el_ms = Summarize(std::move(e2el));
  return r;
}

std::string FormatReport(const BenchReport& r) {
  std::string out;
  auto line = [&](const std::string& label, const std::string& value) {
    out += fmt::format("{:<42}{:>14}\n", label, value);
  };
  auto rule = [&](const std::string& title, char fill) {
    int pad = 56 - static_cast<int>(title.size());
    int left = pad > 0 ? pad / 2 : 0, right = pad > 0 ? pad - left : 0;
    out += std::string(left, fill) + title + std::string(right, fill) + "\n";
  };
  auto num = [](double v) { return fmt::format("{:.2f}", v); };
  rule(" tessera bench result ", '=');
  if (r.settings.contains("model")) line("Model:", r.settings["model"].get<std::string>());
  if (r.settings.contains("endpoint")) line("Endpoint:", r.settings["endpoint"].get<std::string>());
  line("Successful requests:", std::to_string(r.completed));
  line("Failed requests:", std::to_string(r.failed));
  for (const auto& [status, n] : r.failures_by_status) line("  status " + status + ":", std::to_string(n));
  if (r.without_output_text)
    line("Successes without streamed text:", std::to_string(r.without_output_text) + " (no TTFT/ITL)");
  line("Max requests in flight:", std::to_string(r.max_in_flight));
  line("Benchmark duration (s):", num(r.duration_s));
  line("Total input tokens:", std::to_string(r.total_input_tokens));
  line("Total generated tokens:", std::to_string(r.total_output_tokens));
  line("Request throughput (req/s):", num(r.request_throughput));
  line("Input token throughput (tok/s):", num(r.input_throughput));
  line("Output token throughput (tok/s):", num(r.output_throughput));
  line("Total token throughput (tok/s):", num(r.total_token_throughput));
  auto section = [&](const std::string& title, const std::string& key, const Summary& s) {
    rule(title, '-');
    line("Mean " + key + " (ms):", num(s.mean));
    line("Median " + key + " (ms):", num(s.median));
    line("Std " + key + " (ms):", num(s.std));
    line("P90 " + key + " (ms):", num(s.p90));
    line("P99 " + key + " (ms):", num(s.p99));
  };
  section("Time to First Token", "TTFT", r.ttft_ms);
  section("Time per Output Token (excl. 1st token)", "TPOT", r.tpot_ms);
  section("Inter-token Latency", "ITL", r.itl_ms);
  section("End-to-end Latency", "E2EL", r.e2el_ms);
  rule("", '=');
  for (const auto& [status, msg] : r.first_error) out += fmt::format("first error ({}): {}\n", status, msg);
  return out;
}

ojson ReportJson(const BenchReport& r, const RunOutput& run) {
  ojson j = r.settings;
  j["completed"] = r.completed;
  j["failed"] = r.failed;
  j["failures_by_status"] = ojson::object();
  for (const auto& [k, v] : r.failures_by_status) j["failures_by_status"][k] = v;
  j["errors"] = ojson::object();
  for (const auto& [k, v] : r.first_error) j["errors"][k] = v;
  j["duration_s"] = r.duration_s;
  j["total_input_tokens"] = r.total_input_tokens;
  j["total_output_tokens"] = r.total_output_tokens;
  j["request_throughput"] = r.request_throughput;
  j["input_throughput"] = r.input_throughput;
  j["output_throughput"] = r.output_throughput;
  j["total_token_throughput"] = r.total_token_throughput;
  j["max_in_flight"] = r.max_in_flight;
  j["connections_opened"] = r.connections_opened;
  j["without_output_text"] = r.without_output_text;
  auto put = [&](const char* m, const Summary& s) {
    j[fmt::format("mean_{}_ms", m)] = s.mean;
    j[fmt::format("median_{}_ms", m)] = s.median;
    j[fmt::format("std_{}_ms", m)] = s.std;
    j[fmt::format("p90_{}_ms", m)] = s.p90;
    j[fmt::format("p99_{}_ms", m)] = s.p99;
  };
  put("ttft", r.ttft_ms);
  put("tpot", r.tpot_ms);
  put("itl", r.itl_ms);
  put("e2el", r.e2el_ms);
  ojson in = ojson::array(), outl = ojson::array(), ttfts = ojson::array(), e2els = ojson::array(),
        sends = ojson::array(), itls = ojson::array(), errs = ojson::array();
  for (const RequestResult& q : run.results) {
    in.push_back(q.prompt_tokens);
    outl.push_back(q.success ? q.output_tokens : 0);
    ttfts.push_back(q.ttft_measured ? ojson(q.ttft_s * 1000.0) : ojson(nullptr));
    e2els.push_back(q.e2e_s * 1000.0);
    sends.push_back(q.send_s);
    itls.push_back(Ms(q.itl_s));
    errs.push_back(q.success ? std::string() : q.failure + ": " + q.error);
  }
  j["input_lens"] = in;
  j["output_lens"] = outl;
  j["ttfts_ms"] = ttfts;
  j["e2els_ms"] = e2els;
  j["send_times_s"] = sends;
  j["itls_ms"] = itls;
  j["request_errors"] = errs;
  return j;
}

}  // namespace tessera::loadgen
