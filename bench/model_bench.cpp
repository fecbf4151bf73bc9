// tessera bench: prefill and decode speed of a whole model on the CPU backend, next to what the
// machine allows. For each thread count it loads the checkpoint, runs a P-token prompt as the engine
// would (512-token chunks over the paged KV cache) and then D greedy decode steps at batch 1, best of
// --reps runs after one warm-up run, and reports:
//   decode:  bytes a step must read (non-expert weights, one embedding row, lm_head, the experts
//            actually routed (ForwardOptions.collect_expert_stats), KV cache rows, recurrent state
//            read + written) over the measured memcpy bandwidth = the memory floor; ratio = floor /
//            measured time (1.0 = at the floor). The floor over streaming-read bandwidth is shown too.
//   prefill: FLOPs (2 * active matmul params per token, lm_head for the logits rows only, plus
//            attention q.k and p.v over the causal triangle and an estimate for the delta rule) over
//            the GEMM rate measured at m = 128 on this model's expert shapes = the compute floor;
//            ratio = floor / measured time.
// Weights count 2 bytes per element for matrices (bf16 read in place) and 4 for vectors and conv
// kernels (converted to f32 at load); the checkpoint must be bf16.
//
// Multi-thread rows also say where a decode step's time goes: inside the pool's parallel loops (of
// it, waiting for the last thread) and outside them; --profile adds one more run with the CPU
// backend's per-op timer (backend/cpu/cpu_op_profile.h): each op's time a step, and the model's
// own time between ops.
//
// Usage: model_bench --model DIR [--threads 1,2] [--prompt 512] [--decode 64] [--chunk 512]
//                    [--reps 3] [--seed 1] [--quantization Q] [--json FILE] [--profile]
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "backend/cpu/cpu_op_profile.h"
#include "backend/cpu/gemm.h"
#include "core/thread_pool.h"
#include "io/hf_config.h"
#include "model/model.h"
#include "model/weight_census.h"

namespace {

using namespace tessera;
using Clock = std::chrono::steady_clock;
using json = nlohmann::json;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

struct Options {
  std::string quantization;  // --quantization none|fp8|int8|int4: weights quantized at load
  std::string model, json_path;
  std::vector<int> threads = {1, 2};
  int64_t prompt = 512, decode = 64, chunk = 512, reps = 3;
  uint64_t seed = 1;
  bool profile = false;  // --profile: one more run with the per-op timer on
};

[[noreturn]] void Usage(const std::string& why) {
  fmt::print(stderr,
             "model_bench: {}\nusage: model_bench --model DIR [--threads 1,2] [--prompt 512] [--decode 64]\n"
             "  [--chunk 512] [--reps 3] [--seed 1] [--quantization none|fp8|int8|int4] [--json FILE] [--profile]\n",
             why);
  std::exit(2);
}

int64_t ParsePositive(std::string_view flag, const std::string& text) {
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || v <= 0)
    Usage(fmt::format("{} needs a positive integer, got \"{}\"", flag, text));
  return v;
}

Options ParseArgs(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "-h" || a == "--help") Usage("help");
    if (a == "--profile") {
      o.profile = true;
      continue;
    }
    if (i + 1 >= argc) Usage(fmt::format("{} needs a value (or is unknown)", a));
    const std::string v = argv[++i];
    if (a == "--model") {
      o.model = v;
    } else if (a == "--json") {
      o.json_path = v;
    } else if (a == "--threads") {
      o.threads.clear();
      std::stringstream ss(v);
      for (std::string t; std::getline(ss, t, ',');) o.threads.push_back(static_cast<int>(ParsePositive(a, t)));
      if (o.threads.empty()) Usage("--threads needs a list such as 1,2");
    } else if (a == "--prompt") {
      o.prompt = ParsePositive(a, v);
    } else if (a == "--decode") {
      o.decode = ParsePositive(a, v);
    } else if (a == "--chunk") {
      o.chunk = ParsePositive(a, v);
    } else if (a == "--reps") {
      o.reps = ParsePositive(a, v);
    } else if (a == "--quantization") {
      o.quantization = v;
    } else if (a == "--seed") {
      o.seed = static_cast<uint64_t>(ParsePositive(a, v));
    } else {
      Usage(fmt::format("unknown option {}", a));
    }
  }
  if (o.model.empty()) Usage("--model DIR is required");
  return o;
}

// ---- The machine: copy and read bandwidth, GEMM rate. ----

double MemcpyGBps() {  // bytes copied per second, 1 GiB, one thread, best of 3
  const size_t bytes = size_t{1} << 30;
  std::vector<char> src(bytes, 1), dst(bytes, 0);  // both touched: no page faults timed
  double best = 1e30;
  for (int r = 0; r < 3; ++r) {
    const auto t0 = Clock::now();
    std::memcpy(dst.data(), src.data(), bytes);
    best = std::min(best, Seconds(t0, Clock::now()));
    src[r] = dst[bytes - 1 - r];
  }
  return bytes / best / 1e9;
}

double ReadGBps(ThreadPool* pool) {  // streaming read (sum) of 1 GiB split over the pool, best of 3
  const size_t n = (size_t{1} << 30) / sizeof(uint64_t);
  std::vector<uint64_t> data(n);
  for (size_t i = 0; i < n; ++i) data[i] = i;
  std::vector<uint64_t> partial(pool->size() * 8);
  double best = 1e30;
  for (int r = 0; r < 3; ++r) {
    const auto t0 = Clock::now();
    pool->ParallelFor(n, [&](size_t b, size_t e, int ti) {
      uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
      size_t i = b;
      for (; i + 4 <= e; i += 4) {
        s0 += data[i];
        s1 += data[i + 1];
        s2 += data[i + 2];
        s3 += data[i + 3];
      }
      for (; i < e; ++i) s0 += data[i];
      partial[ti * 8] = s0 + s1 + s2 + s3;
    }, 1 << 16);
    best = std::min(best, Seconds(t0, Clock::now()));
  }
  uint64_t total = 0;
  for (uint64_t p : partial) total += p;
  if (total == 42) fmt::print("");  // keep the sums observable
  return n * sizeof(uint64_t) / best / 1e9;
}

// GFLOP/s of the expert FFN's three products (gate, up: [I, H]; down: [H, I]) at m = 128 on `pool`,
// or of [H, H] products for a model without experts.
double GemmGflops(const ModelConfig& c, ThreadPool* pool) {
  const int64_t m = 128, H = c.hidden_size;
  const int64_t I = c.num_experts > 0 ? c.moe_intermediate_size : H;
  std::mt19937 rng(7);
  std::vector<uint16_t> w(static_cast<size_t>(3 * I * H));
  for (auto& v : w) v = static_cast<uint16_t>(0x3c00 + (rng() & 0x3ff)) | (rng() & 0x8000);
  std::vector<float> x(m * std::max(H, I)), y1(m * I), y2(m * I), y3(m * H);
  for (auto& v : x) v = std::uniform_real_distribution<float>(-1, 1)(rng);
  auto call = [&] {
    GemmF32xBf16(x.data(), m, H, w.data(), I, y1.data(), pool);
    GemmF32xBf16(x.data(), m, H, w.data() + I * H, I, y2.data(), pool);
    GemmF32xBf16(y1.data(), m, I, w.data() + 2 * I * H, H, y3.data(), pool);
  };
  call();
  double best = 1e30;
  for (int r = 0; r < 3; ++r) {
    int reps = 0;
    const auto t0 = Clock::now();
    double el = 0;
    do {
      call();
      ++reps;
      el = Seconds(t0, Clock::now());
    } while (el < 0.2);
    best = std::min(best, el / reps);
  }
  return 2.0 * m * 3 * I * H / best / 1e9;
}

// ---- The model: what a step needs. ----

// The weights by role: WeightCensus (model/weight_census.h), the count `tessera inspect` prints. On the
// CPU backend matrices are bf16 read in place (2 bytes a parameter) and vectors f32 (4 bytes).
constexpr double kMatrixBytes = 2, kVectorBytes = 4;

// Attention FLOPs (q.k and p.v) of `T` causal queries after `first` cached positions, all layers.
double AttentionFlops(const ModelConfig& c, int64_t first, int64_t T) {
  const double keys = static_cast<double>(T) * first + static_cast<double>(T) * (T + 1) / 2;
  return c.NumLayersOf(LayerKind::kFullAttention) * 4.0 * c.num_heads * c.head_dim * keys;
}

// Delta-rule FLOPs per token, all GDN layers: decay + k.S, state update, q.S (~6 dk dv per head).
double GdnFlopsPerToken(const ModelConfig& c) {
  return c.NumLayersOf(LayerKind::kLinearAttention) * 6.0 * c.linear_num_value_heads * c.linear_key_head_dim *
         c.linear_value_head_dim;
}

// A decode step's weight bytes in the model's format (WeightCensus::FormatStepBytes counts vectors at
// 2 bytes; the CPU backend holds them in f32: kVectorBytes).
double StepBytes(const WeightCensus& w, double experts) {
  return w.FormatStepBytes(experts, 1) + (kVectorBytes - 2) * w.dense_vector;
}
double TokenBytes(const WeightCensus& w) {
  return StepBytes(w, static_cast<double>(w.moe_layers * w.experts_per_token));
}

// ---- One run: prefill then decode. ----

struct RunResult {
  double prefill_s = 0, decode_s = 0;
  double decode_bytes = 0;     // sum over decode steps of bytes a step needs
  double prefill_flops = 0;
  double prefill_distinct = 0;  // mean distinct experts per MoE layer per chunk
  double decode_distinct = 0;   // mean distinct experts per MoE layer per step
  ThreadPool::Stats decode_pool;  // the pool's loops during the decode steps
  std::vector<cpu_profile::Entry> decode_ops;  // per-op times of the decode steps (when profiling)
};

RunResult RunOnce(Model& model, const WeightCensus& w, const Options& o, const std::vector<int32_t>& prompt) {
  const ModelConfig& c = model.config();
  RunResult r;
  SequenceCache cache;
  for (int64_t p = 0; p < model.num_pages(); ++p) cache.pages.push_back(static_cast<int32_t>(p));
  if (model.num_state_slots() > 0) {
    cache.state_slot = 0;
    model.ResetStateSlot(0);
  }
  ForwardOptions fo;
  fo.collect_expert_stats = true;
  auto distinct_mean = [](const ForwardResult& f) {
    double s = 0;
    int n = 0;
    for (int32_t d : f.distinct_experts_per_layer)
      if (d >= 0) s += d, ++n;
    return n ? s / n : 0.0;
  };
  const int64_t P = static_cast<int64_t>(prompt.size());
  int32_t next = 0;
  int chunks = 0;
  const auto t0 = Clock::now();
  for (int64_t first = 0; first < P; first += o.chunk) {
    const int64_t T = std::min(o.chunk, P - first);
    Batch b;
    Segment s;
    s.cache = &cache;
    s.first_pos = first;
    s.tokens.assign(prompt.begin() + first, prompt.begin() + first + T);
    s.commit_len = T;
    s.logits_rows = {static_cast<int32_t>(T - 1)};
    b.segments.push_back(std::move(s));
    const ForwardResult f = model.Forward(b, fo);
    next = static_cast<int32_t>(std::max_element(f.logits.begin(), f.logits.end()) - f.logits.begin());
    r.prefill_distinct += distinct_mean(f);
    ++chunks;
    r.prefill_flops +=
        2.0 * w.MatmulParamsPerRow() * T + 2.0 * w.lm_head + AttentionFlops(c, first, T) + GdnFlopsPerToken(c) * T;
  }
  r.prefill_s = Seconds(t0, Clock::now());
  r.prefill_distinct /= chunks;

  // K and V of all attention layers, in the cache's element type.
  const double kv_row = static_cast<double>(Model::KvBytesPerToken(c, model.KvCacheDType()));
  const double state = 2.0 * static_cast<double>(Model::StateBytesPerSequence(c));  // read + written
  ThreadPool::Global().ResetStats();
  cpu_profile::Reset();
  const auto t1 = Clock::now();
  for (int64_t i = 0; i < o.decode; ++i) {
    Batch b;
    Segment s;
    s.cache = &cache;
    s.first_pos = P + i;
    s.tokens = {next};
    s.commit_len = 1;
    s.logits_rows = {0};
    b.segments.push_back(std::move(s));
    const ForwardResult f = model.Forward(b, fo);
    next = static_cast<int32_t>(std::max_element(f.logits.begin(), f.logits.end()) - f.logits.begin());
    double experts = 0;
    for (int32_t d : f.distinct_experts_per_layer)
      if (d > 0) experts += d;
    r.decode_distinct += distinct_mean(f);
    r.decode_bytes +=
        StepBytes(w, experts) + kv_row * static_cast<double>(P + i + 1) + state;
  }
  r.decode_s = Seconds(t1, Clock::now());
  r.decode_pool = ThreadPool::Global().stats();
  r.decode_ops = cpu_profile::Snapshot();
  r.decode_distinct /= static_cast<double>(o.decode);
  return r;
}

std::string Now() {
  const std::time_t t = std::time(nullptr);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S %Z", std::localtime(&t));
  return buf;
}

double LoadAverage() {
  std::ifstream f("/proc/loadavg");
  double l = -1;
  f >> l;
  return l;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options o = ParseArgs(argc, argv);
    spdlog::set_level(spdlog::level::warn);  // the loader's info lines would split the table
    ModelConfig cfg = ModelConfig::FromHf(LoadHfModelDir(o.model));
    cfg.load_quant = ParseLoadQuantization(o.quantization);
    const WeightCensus w = WeightCensus::Of(cfg);
    const int64_t gdn_layers = cfg.NumLayersOf(LayerKind::kLinearAttention);
    fmt::print(
        "model {}: {} {} layers ({} attention, {} delta-rule, {} MoE), hidden {}, experts {} top-{}, "
        "vocab {}\n",
        o.model, FamilyName(cfg.family), cfg.num_layers, cfg.NumLayersOf(LayerKind::kFullAttention), gdn_layers,
        w.moe_layers, cfg.hidden_size, cfg.num_experts, cfg.num_experts_per_tok, cfg.vocab_size);
    fmt::print(
        "weights {:.3f} GB; per decode token (top-k experts, no KV): {:.1f} MB; gemm kernel {}; "
        "load average {:.2f}; {}\n",
        w.weight_bytes / 1e9, TokenBytes(w) / 1e6, GemmKernelName(), LoadAverage(), Now());
    fmt::print("weight format: {}\n", w.format);
    const double copy_gbps = MemcpyGBps();
    fmt::print("memcpy 1 GiB: {:.2f} GB/s copied\n", copy_gbps);

    std::mt19937 rng(static_cast<uint32_t>(o.seed));
    std::vector<int32_t> prompt(o.prompt);
    for (auto& t : prompt) t = static_cast<int32_t>(rng() % cfg.vocab_size);

    json out;
    out["model"] = o.model;
    out["family"] = FamilyName(cfg.family);
    out["date"] = Now();
    out["gemm_kernel"] = GemmKernelName();
    out["memcpy_gbps"] = copy_gbps;
    out["weights_gb"] = 2 * w.total / 1e9;
    out["prompt"] = o.prompt;
    out["decode"] = o.decode;
    out["chunk"] = o.chunk;
    out["reps"] = o.reps;
    json rows = json::array();

    fmt::print("\n{:>3} | {:>9} {:>8} {:>8} {:>9} {:>6} | {:>8} {:>8} {:>8} {:>8} {:>6} {:>8} {:>6} | {:>5}\n",
               "thr", "prefill", "GFLOP/s", "gemm", "floor ms", "ratio", "decode", "MB/tok", "copy", "floor ms",
               "ratio", "read", "ratio", "load");
    fmt::print("{:>3} | {:>9} {:>8} {:>8} {:>9} {:>6} | {:>8} {:>8} {:>8} {:>8} {:>6} {:>8} {:>6} | {:>5}\n", "",
               "tok/s", "achieved", "GFLOP/s", "(FLOP)", "", "tok/s", "", "GB/s", "(copy)", "", "GB/s", "", "");
    for (int threads : o.threads) {
      ThreadPool::SetGlobalThreads(threads);
      // The backend keeps a pointer to the global pool: load after resizing it.
      LoadOptions lo;
      lo.quantization = o.quantization;
      auto model = Model::Load(o.model, lo);
      const int64_t page = 16;
      const int64_t pages = (o.prompt + o.decode + page - 1) / page + 1;
      model->AllocateCaches(pages, page, gdn_layers > 0 ? 1 : 0);
      const double read_gbps = ReadGBps(&ThreadPool::Global());
      const double gemm_gflops = GemmGflops(cfg, &ThreadPool::Global());
      const double load = LoadAverage();
      RunOnce(*model, w, o, prompt);  // warm-up: pages the weights in, sizes the allocator
      RunResult best_p, best_d;
      best_p.prefill_s = best_d.decode_s = 1e30;
      for (int64_t rep = 0; rep < o.reps; ++rep) {
        const RunResult r = RunOnce(*model, w, o, prompt);
        if (r.prefill_s < best_p.prefill_s) best_p = r;
        if (r.decode_s < best_d.decode_s) best_d = r;
      }
      const double prefill_tps = o.prompt / best_p.prefill_s;
      const double prefill_floor = best_p.prefill_flops / (gemm_gflops * 1e9);
      const double decode_tps = o.decode / best_d.decode_s;
      const double bytes_per_tok = best_d.decode_bytes / o.decode;
      const double floor_copy = bytes_per_tok / (copy_gbps * 1e9);
      const double floor_read = bytes_per_tok / (read_gbps * 1e9);
      const double step = best_d.decode_s / o.decode;
      fmt::print("{:>3} | {:>9.1f} {:>8.1f} {:>8.1f} {:>9.1f} {:>6.2f} | {:>8.2f} {:>8.1f} {:>8.2f} {:>8.2f} "
                 "{:>6.2f} {:>8.2f} {:>6.2f} | {:>5.2f}\n",
                 threads, prefill_tps, best_p.prefill_flops / best_p.prefill_s / 1e9, gemm_gflops,
                 prefill_floor * 1e3, prefill_floor / best_p.prefill_s, decode_tps, bytes_per_tok / 1e6, copy_gbps,
                 floor_copy * 1e3, floor_copy / step, read_gbps, floor_read / step, load);
      // Where a decode step's time goes: inside the pool's parallel loops (of it, the caller waiting for
      // the last worker after its own chunk) and outside them (work on the calling thread alone).
      const ThreadPool::Stats& ps = best_d.decode_pool;
      const double loops = static_cast<double>(ps.loops) / o.decode, in_us = ps.loop_ns / 1e3 / o.decode,
                   wait_us = ps.wait_ns / 1e3 / o.decode;
      if (threads > 1)
        fmt::print("    decode step {:.1f} us: {:.0f} parallel loops, {:.1f} us in them ({:.1f} us waiting for "
                   "the last thread), {:.1f} us outside\n",
                   step * 1e6, loops, in_us, wait_us, step * 1e6 - in_us);
      if (o.profile) {
        cpu_profile::Enable(true);
        const RunResult p = RunOnce(*model, w, o, prompt);
        cpu_profile::Enable(false);
        const double step_us = p.decode_s * 1e6 / o.decode;
        double ops_us = 0;
        std::string line;
        for (const cpu_profile::Entry& e : p.decode_ops) {
          const double us = e.ns / 1e3 / o.decode;
          ops_us += us;
          line += fmt::format(" {} {:.0f} ({:.0f}x, {:.0f} serial)", e.op, us, static_cast<double>(e.calls) / o.decode,
                              e.serial_ns / 1e3 / o.decode);
        }
        fmt::print("    profiled decode step {:.1f} us, us a step by op (calls, of it outside the pool's loops):{}; "
                   "between ops {:.0f}\n",
                   step_us, line, step_us - ops_us);
      }
      std::fflush(stdout);
      rows.push_back({{"threads", threads},
                      {"load_average", load},
                      {"read_gbps", read_gbps},
                      {"gemm_gflops_m128", gemm_gflops},
                      {"prefill_tokens_per_s", prefill_tps},
                      {"prefill_s", best_p.prefill_s},
                      {"prefill_gflop", best_p.prefill_flops / 1e9},
                      {"prefill_floor_s", prefill_floor},
                      {"prefill_ratio", prefill_floor / best_p.prefill_s},
                      {"prefill_distinct_experts_per_layer", best_p.prefill_distinct},
                      {"decode_tokens_per_s", decode_tps},
                      {"decode_bytes_per_token", bytes_per_tok},
                      {"decode_distinct_experts_per_layer", best_d.decode_distinct},
                      {"decode_floor_copy_s", floor_copy},
                      {"decode_ratio_copy", floor_copy / step},
                      {"decode_floor_read_s", floor_read},
                      {"decode_ratio_read", floor_read / step},
                      {"decode_parallel_loops_per_step", loops},
                      {"decode_us_in_loops_per_step", in_us},
                      {"decode_us_waiting_per_step", wait_us}});
    }
    fmt::print("\nprefill: {} tokens in {}-token chunks; decode: {} steps at batch 1 after the prompt; best of {} "
               "after a warm-up.\nratio = floor / measured (1.00 = at the floor). decode floor = bytes per step / "
               "bandwidth (copy: 1-thread memcpy; read: streaming sum on the pool).\n",
               o.prompt, o.chunk, o.decode, o.reps);
    out["rows"] = rows;
    if (!o.json_path.empty()) {
      std::ofstream f(o.json_path);
      f << out.dump(2) << "\n";
      if (!f) {
        fmt::print(stderr, "model_bench: cannot write {}\n", o.json_path);
        return 1;
      }
    }
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "model_bench: {}\n", e.what());
    return 1;
  }
}
