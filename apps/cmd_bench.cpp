// tessera CLI: `tessera bench`: a load generator for a running OpenAI-compatible server (ours or
// any other), in the manner of `vllm bench serve`: N requests of fixed or random input / output
// lengths, at a request rate (Poisson arrivals) with at most C in flight, streamed; reports
// success / failure counts, request and token throughput, and mean / median / std / p90 / p99 of
// TTFT, TPOT, ITL and end-to-end latency as a table on stdout and as JSON (--json; the keys are
// listed in src/loadgen/report.h and in --help). Exit 0 when at least one request succeeded.
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli_common.h"
#include "core/error.h"
#include "loadgen/http_client.h"
#include "loadgen/report.h"
#include "loadgen/runner.h"
#include "loadgen/workload.h"

namespace tessera {

namespace {

using namespace loadgen;
using ojson = nlohmann::ordered_json;

struct BenchFlags {
  std::string base_url = "http://127.0.0.1:8000", host, endpoint = "completions", model, api_key;
  int port = 0;
  int64_t num_prompts = 100, concurrency = 0, input_len = 128, output_len = 128, prefix_len = 0, vocab_size = 0;
  int64_t warmup = 0;
  std::string request_rate = "inf", json_path, extra_body;
  double burstiness = 1.0, range_ratio = 0.0, temperature = 0.0, timeout = 600, wait_ready = 0;
  bool ignore_eos = true, stream = true;
  uint64_t seed = 0;
  int threads = 1;
};

constexpr const char* kJsonKeysHelp =
    "JSON (--json) keys: the settings (date, base_url, endpoint, model, num_prompts, concurrency, "
    "request_rate, burstiness, input_len, output_len, random_range_ratio, prefix_len, stream, ignore_eos, "
    "seed, warmup), completed, failed, failures_by_status, errors, duration_s, total_input_tokens, "
    "total_output_tokens, request_throughput, input_throughput, output_throughput, total_token_throughput, "
    "max_in_flight, connections_opened, without_output_text, {mean,median,std,p90,p99}_{ttft,tpot,itl,e2el}_ms, and per request "
    "input_lens, output_lens, ttfts_ms, e2els_ms, send_times_s, itls_ms, request_errors. "
    "TTFT: send to the first chunk with output; ITL: between output chunks; TPOT: (e2e - ttft) / "
    "(output tokens - 1); tokens from the server's usage.";

double ParseRate(const std::string& s) {
  if (s == "inf" || s == "Inf" || s == "INF") return kInfiniteRate;
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(s, &used);
  } catch (...) {
    used = 0;
  }
  if (used != s.size() || !(v > 0) || std::isnan(v))
    throw UsageError(fmt::format("--request-rate: expected a number > 0 or inf, got '{}'", s));
  return v;
}

std::string UtcNow() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

HttpExchange Get(const HttpUrl& url, const std::string& path, const std::string& key, double timeout_s) {
  HttpExchange ex;
  ex.method = "GET";
  ex.target = url.base_path + path;
  ex.api_key = key;
  ex.deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
  return ex;
}

std::string UrlText(const HttpUrl& u) { return fmt::format("http://{}:{}{}", u.host, u.port, u.base_path); }

void WaitReady(const HttpUrl& url, double seconds) {
  auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  std::string last;
  while (true) {
    HttpReply r = FetchSync(url, Get(url, "/health", "", 5));
    if (r.status == 200) return;
    last = r.status ? fmt::format("HTTP {} {}", r.status, r.body) : r.message;
    if (Clock::now() >= deadline)
      throw std::runtime_error(fmt::format("{} not ready after {} s (last: {})", UrlText(url), seconds, last));
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
}

std::string FirstModel(const HttpUrl& url, const std::string& key) {
  HttpReply r = FetchSync(url, Get(url, "/v1/models", key, 30));
  if (r.status == 0)
    throw std::runtime_error(fmt::format("cannot reach {}: {}", UrlText(url), r.message));
  if (r.status != 200)
    throw std::runtime_error(fmt::format("GET /v1/models: HTTP {}: {}", r.status, ErrorMessageFromBody(r.body)));
  auto j = nlohmann::json::parse(r.body, nullptr, false);
  if (!j.is_object() || !j.contains("data") || !j["data"].is_array() || j["data"].empty() ||
      !j["data"][0].is_object() || !j["data"][0].contains("id") || !j["data"][0]["id"].is_string())
    throw std::runtime_error("GET /v1/models: no model listed (give --model)");
  return j["data"][0]["id"].get<std::string>();
}

int RunBench(const BenchFlags& f) {
  HttpUrl url = ParseBaseUrl(f.base_url);
  if (!f.host.empty()) url.host = f.host;
  if (f.port) url.port = f.port;
  std::string key = f.api_key;
  if (key.empty())
    if (const char* k = std::getenv("TESSERA_API_KEY")) key = k;
  const double rate = ParseRate(f.request_rate);
  if (!(f.timeout > 0)) throw UsageError("--timeout must be > 0");

  WorkloadSpec spec;
  spec.endpoint = f.endpoint == "chat" ? Endpoint::kChat : Endpoint::kCompletions;
  spec.input_len = f.input_len;
  spec.output_len = f.output_len;
  spec.range_ratio = f.range_ratio;
  spec.prefix_len = f.prefix_len;
  spec.vocab_size = f.vocab_size;
  spec.ignore_eos = f.ignore_eos;
  spec.stream = f.stream;
  spec.temperature = f.temperature;
  if (!f.extra_body.empty()) {
    spec.extra_body = ojson::parse(f.extra_body, nullptr, false);
    if (!spec.extra_body.is_object()) throw UsageError("--extra-body must be a JSON object");
  }
  // Validate the workload before touching the network.
  MakeRequests(spec, 1, f.seed);
  auto arrivals = ArrivalTimes(f.num_prompts, rate, f.burstiness, f.seed);

  if (f.wait_ready > 0) WaitReady(url, f.wait_ready);
  spec.model = f.model.empty() ? FirstModel(url, key) : f.model;

  RunOptions opt;
  opt.url = url;
  opt.endpoint = spec.endpoint;
  opt.stream = spec.stream;
  opt.api_key = key;
  opt.concurrency = f.concurrency;
  opt.threads = f.threads;
  opt.timeout_s = f.timeout;

  if (f.warmup > 0) {
    std::fprintf(stderr, "tessera bench: %lld warm-up requests\n", static_cast<long long>(f.warmup));
    RunOutput w = RunRequests(MakeRequests(spec, f.warmup, f.seed ^ 0x5eedull), opt);
    int64_t bad = 0;
    for (const auto& r : w.results) bad += !r.success;
    if (bad) std::fprintf(stderr, "tessera bench: %lld warm-up requests failed\n", static_cast<long long>(bad));
  }
  auto requests = MakeRequests(spec, f.num_prompts, f.seed);
  opt.arrivals = arrivals;
  std::fprintf(stderr, "tessera bench: %lld requests to %s%s (model %s), concurrency %s, rate %s req/s\n",
               static_cast<long long>(f.num_prompts), UrlText(url).c_str(), EndpointPath(spec.endpoint),
               spec.model.c_str(), f.concurrency > 0 ? std::to_string(f.concurrency).c_str() : "unlimited",
               f.request_rate.c_str());
  RunOutput run = RunRequests(requests, opt);

  ojson settings = ojson::object();
  settings["date"] = UtcNow();
  settings["base_url"] = UrlText(url);
  settings["endpoint"] = EndpointPath(spec.endpoint);
  settings["model"] = spec.model;
  settings["num_prompts"] = f.num_prompts;
  settings["concurrency"] = f.concurrency > 0 ? f.concurrency : 0;
  if (std::isinf(rate)) settings["request_rate"] = "inf";
  else settings["request_rate"] = rate;
  settings["burstiness"] = f.burstiness;
  settings["input_len"] = f.input_len;
  settings["output_len"] = f.output_len;
  settings["random_range_ratio"] = f.range_ratio;
  settings["prefix_len"] = f.prefix_len;
  settings["stream"] = f.stream;
  settings["ignore_eos"] = f.ignore_eos;
  settings["seed"] = f.seed;
  settings["warmup"] = f.warmup;
  BenchReport report = BuildReport(run, settings);
  std::fputs(FormatReport(report).c_str(), stdout);
  std::fflush(stdout);
  if (!f.json_path.empty()) {
    std::ofstream out(f.json_path);
    if (!out) throw std::runtime_error("cannot write " + f.json_path);
    out << ReportJson(report, run).dump(1) << "\n";
  }
  if (report.num_requests > 0 && report.completed == 0) {
    std::fprintf(stderr, "tessera: error: all %lld requests failed\n", static_cast<long long>(report.num_requests));
    return kExitFailure;
  }
  return 0;
}

}  // namespace

Subcommand AddBenchCommand(CLI::App& root) {
  auto f = std::make_shared<BenchFlags>();
  CLI::App* app = root.add_subcommand("bench", "Load-test a running OpenAI-compatible server (like vllm bench serve)");
  app->footer(kJsonKeysHelp);
  app->add_option("--base-url", f->base_url, "Server address http://HOST:PORT[/PATH]")->capture_default_str();
  app->add_option("--host", f->host, "Server host (overrides --base-url's)");
  app->add_option("--port", f->port, "Server port (overrides --base-url's)")->check(CLI::Range(1, 65535));
  app->add_option("--endpoint", f->endpoint, "API: completions (token-id prompts) or chat (word prompts)")
      ->check(CLI::IsMember({"completions", "chat"}))
      ->capture_default_str();
  app->add_option("--model", f->model, "Model name to send (default: the first of GET /v1/models)");
  app->add_option("--api-key", f->api_key, "Bearer key (default: $TESSERA_API_KEY)");
  app->add_option("--num-prompts", f->num_prompts, "Requests to send")->check(kPositiveNumber)->capture_default_str();
  app->add_option("--concurrency,--max-concurrency", f->concurrency, "Most requests in flight (0 = unlimited)")
      ->check(kNonNegativeNumber)
      ->capture_default_str();
  app->add_option("--request-rate", f->request_rate, "Requests per second, Poisson arrivals; inf = all at once")
      ->capture_default_str();
  app->add_option("--burstiness", f->burstiness, "Gamma shape of the arrival gaps (1 = Poisson)")->capture_default_str();
  app->add_option("--input-len", f->input_len, "Prompt tokens (words for chat) per request, after the prefix")
      ->check(kPositiveNumber)
      ->capture_default_str();
  app->add_option("--output-len", f->output_len, "Output tokens per request (max_tokens)")
      ->check(kPositiveNumber)
      ->capture_default_str();
  app->add_option("--random-range-ratio", f->range_ratio, "Lengths uniform in [len*(1-r), len*(1+r)]")
      ->check(CLI::Range(0.0, 0.999))
      ->capture_default_str();
  app->add_option("--prefix-len", f->prefix_len, "Tokens of a prefix shared by every prompt (prefix caching)")
      ->check(kNonNegativeNumber)
      ->capture_default_str();
  app->add_option("--vocab-size", f->vocab_size, "Prompt token ids in [10, V) (default: [10, 250], byte tokenizers)");
  app->add_flag("--ignore-eos,!--no-ignore-eos", f->ignore_eos, "Generate exactly the output length (default on)");
  app->add_flag("--stream,!--no-stream", f->stream, "Stream the responses (default on; TTFT/ITL need it)");
  app->add_option("--temperature", f->temperature, "Sampling temperature")->capture_default_str();
  app->add_option("--extra-body", f->extra_body, "JSON object merged into every request, e.g. '{\"top_k\": 1}'");
  app->add_option("--json", f->json_path, "Also write the results as JSON to this file");
  app->add_option("--warmup", f->warmup, "Requests sent (and not counted) before the benchmark")
      ->check(kNonNegativeNumber);
  app->add_option("--timeout", f->timeout, "Seconds a request may take before it counts as failed")->capture_default_str();
  app->add_option("--seed", f->seed, "Seed for lengths, prompts and arrivals")->check(kSeed)->capture_default_str();
  app->add_option("--threads", f->threads, "Client event-loop threads")->check(CLI::Range(1, 64))->capture_default_str();
  app->add_option("--wait-ready", f->wait_ready, "Poll GET /health up to this many seconds until it answers 200");
  return {app, [f] { return RunBench(*f); }};
}

}  // namespace tessera
