// tessera CLI: `tessera serve`: the OpenAI-compatible server. Order of start-up, so that operators
// can watch it: config (file, then flags, then TESSERA_API_KEY) -> validate -> bind the listener and
// print "tessera: listening on http://HOST:PORT" (/health answers 503 "loading") -> load the model ->
// engine thread -> one warm-up request through the whole engine -> /health 200. SIGTERM / SIGINT:
// stop accepting, let in-flight requests finish up to --drain-timeout seconds, exit 0. SIGPIPE is
// ignored; a SIGBUS from a checkpoint file truncated under the server is absorbed by the fault guard
// of io/mapped_file.h and fails every request after it with a 503 naming the file.
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include <spdlog/spdlog.h>

#include "cli_common.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/diffusion_defaults.h"
#include "engine/engine.h"
#include "engine/memory_plan.h"
#include "io/hf_config.h"
#include "io/mapped_file.h"
#include "model/model.h"
#include "server/http_server.h"
#include "server/prompt_builder.h"
#include "server/server_config.h"
#include "tokenizer/tokenizer.h"

namespace tessera {

namespace {

struct ServeFlags {
  std::string config_file;
  ConfigFlagValues values;
  bool check_config = false;
  double drain_timeout_s = 30;
};

// The server is up (and answering /health with 503) before the model exists, so it talks to this
// stand-in, which forwards to the engine once it is built. Until then it is "not ready", and the
// server refuses generation requests with 503 before they reach Submit.
class DeferredEngine : public EngineApi {
 public:
  explicit DeferredEngine(std::string name) { loading_info_.name = std::move(name); }
  void Attach(Engine* engine) { engine_.store(engine, std::memory_order_release); }
  void Submit(GenerationRequest req) override {
    Engine* e = engine_.load(std::memory_order_acquire);
    if (e != nullptr) return e->Submit(std::move(req));
    GenerationEvent ev;
    ev.kind = GenerationEvent::Kind::kError;
    ev.error = "the model is still loading";
    if (req.on_event) req.on_event(ev);
  }
  EngineSnapshot Snapshot() const override {
    Engine* e = engine_.load(std::memory_order_acquire);
    return e != nullptr ? e->Snapshot() : EngineSnapshot{};
  }
  const EngineModelInfo& ModelInfo() const override {
    Engine* e = engine_.load(std::memory_order_acquire);
    return e != nullptr ? e->ModelInfo() : loading_info_;
  }
  std::shared_ptr<const grammar::CompiledGrammar> CompileGrammar(grammar::GrammarFormat format,
                                                                 std::string_view text) override {
    Engine* e = engine_.load(std::memory_order_acquire);
    if (e == nullptr) Fail(ErrorKind::kUnsupported, "the model is still loading");
    return e->CompileGrammar(format, text);
  }

 private:
  std::atomic<Engine*> engine_{nullptr};
  EngineModelInfo loading_info_;
};

// SIGTERM / SIGINT are blocked in every thread (set before any thread starts) and taken here.
class SignalWaiter {
 public:
  SignalWaiter() {
    sigemptyset(&set_);
    sigaddset(&set_, SIGTERM);
    sigaddset(&set_, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set_, nullptr);
    thread_ = std::thread([this] {
      int sig = 0;
      sigwait(&set_, &sig);
      std::lock_guard<std::mutex> lock(mu_);
      signal_ = sig;
      cv_.notify_all();
    });
  }
  ~SignalWaiter() {
    if (thread_.joinable()) {
      if (Received() == 0) pthread_kill(thread_.native_handle(), SIGTERM);  // wake sigwait
      thread_.join();
    }
  }
  int Received() {
    std::lock_guard<std::mutex> lock(mu_);
    return signal_;
  }
  int Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return signal_ != 0; });
    return signal_;
  }

 private:
  sigset_t set_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  int signal_ = 0;
};

std::string ReadTextFile(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) Fail(ErrorKind::kNotFound, "cannot read the {} {}", what, path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string DefaultServedName(const std::string& path) {
  std::filesystem::path p = std::filesystem::path(path).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  return p.filename().string();
}

// The KV cache budget (total over ranks). On a GPU the memory plan of engine/memory_plan.h decides
// what is left after the loaded weights, the state slots and the activation reserve; an explicit
// engine.kv_cache_memory must fit in it. On the CPU: engine.kv_cache_memory, else 4 GiB.
int64_t KvCacheBudget(const ServerConfig& cfg, Model& model, const tessera::EngineConfig& ec) {
  int64_t free_bytes = 0, total_bytes = 0;
  // Host memory, or a model without attention layers (no KV at all): the configured size.
  if (!model.backend().MemoryInfo(&free_bytes, &total_bytes) || model.KvBytesPerTokenPerRank() <= 0)
    return cfg.engine.kv_cache_memory > 0 ? cfg.engine.kv_cache_memory : int64_t{4} << 30;
  const tessera::ModelConfig& mc = model.config();
  const int ranks = model.tensor_parallel_size();
  // Rank 0's device stands for every rank (the same GPUs, the same share of the weights).
  const GpuMemoryPlan plan =
      PlanGpuMemory(total_bytes, cfg.engine.gpu_memory_utilization, total_bytes - free_bytes,
                    model.KvBytesPerTokenPerRank(), PlanState(ec, mc, model.StateBytesPerSequencePerRank()).bytes(),
                    ActivationReserveBytes(mc, ec.max_num_batched_tokens, ec.max_num_seqs, ec.force_diffusion));
  spdlog::info("{}, {} KV cache{}", DescribeGpuMemoryPlan(plan), DTypeName(model.KvCacheDType()),
               ranks > 1 ? fmt::format(", per GPU, {} GPUs", ranks) : "");
  if (plan.kv_pool_bytes < model.KvBytesPerTokenPerRank() * ec.page_size)
    Fail(ErrorKind::kInvalidArgument,
         "config key 'engine.gpu_memory_utilization': {:.2f} of the GPU leaves no room for the KV cache ({}); raise "
         "it, lower engine.max_num_seqs / engine.max_num_batched_tokens / engine.num_state_snapshots, or add GPUs "
         "(--tensor-parallel-size)",
         cfg.engine.gpu_memory_utilization, DescribeGpuMemoryPlan(plan));
  // Pool bytes per rank -> tokens -> the engine's total over ranks (bytes of the same element type).
  const int64_t pool_total =
      plan.kv_pool_bytes / model.KvBytesPerTokenPerRank() * Model::KvBytesPerToken(mc, model.KvCacheDType());
  if (cfg.engine.kv_cache_memory > pool_total)
    Fail(ErrorKind::kInvalidArgument,
         "config key 'engine.kv_cache_memory': {:.1f} GiB does not fit; the GPU memory plan leaves {:.1f} GiB ({})",
         cfg.engine.kv_cache_memory / 1073741824.0, pool_total / 1073741824.0, DescribeGpuMemoryPlan(plan));
  return cfg.engine.kv_cache_memory > 0 ? cfg.engine.kv_cache_memory : pool_total;
}

// On the CPU nothing else sizes memory: the KV pool and the recurrent-state slots are allocated up
// front, so sizes beyond the machine would fail deep in an allocation (or get the process killed).
// Refuse them here, naming the keys. On a GPU the memory plan (KvCacheBudget) has checked already.
void CheckHostMemory(Model& model, const tessera::EngineConfig& ec) {
  int64_t free_bytes = 0, total_bytes = 0;
  if (model.backend().MemoryInfo(&free_bytes, &total_bytes)) return;
  const long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page_size <= 0) return;
  const double host = static_cast<double>(pages) * static_cast<double>(page_size);
  // Every rank holds its share of each slot; kv_cache_bytes is the total over ranks. In double: no overflow.
  const StatePlan slots = PlanState(ec, model.config(), model.StateBytesPerSequencePerRank());
  const double state = static_cast<double>(slots.slots()) * static_cast<double>(slots.bytes_per_slot) *
                       static_cast<double>(model.tensor_parallel_size());
  const double kv = static_cast<double>(ec.kv_cache_bytes);
  if (kv + state > host)
    Fail(ErrorKind::kInvalidArgument,
         "the KV cache ({}) and the recurrent-state slots ({}) need more than this machine's {} of memory: lower "
         "engine.kv_cache_memory, engine.num_state_snapshots or engine.max_num_seqs",
         HumanBytes(kv), HumanBytes(state), HumanBytes(host));
}

// Engine settings from the config and the model: pages for every sequence at full length at most
// (more would be memory no request can use), fewer when the budget says so.
tessera::EngineConfig MakeEngineConfig(const ServerConfig& cfg, Model& model, const HfModelDir& dir,
                                       const Tokenizer& tokenizer) {
  const tessera::ModelConfig& mc = model.config();
  tessera::EngineConfig ec;
  ec.max_num_seqs = cfg.engine.max_num_seqs;
  ec.max_num_batched_tokens = cfg.engine.max_num_batched_tokens;
  ec.enable_chunked_prefill = cfg.engine.enable_chunked_prefill;
  ec.enable_prefix_caching = cfg.engine.enable_prefix_caching;
  ec.num_state_snapshots = cfg.engine.num_state_snapshots;
  ec.router_temperature = static_cast<float>(cfg.engine.router_temperature);
  const std::string& pol = cfg.engine.scheduling_policy;
  ec.policy = pol == "priority"                ? SchedulingPolicy::kPriority
              : pol == "shortest_prompt_first" ? SchedulingPolicy::kShortestPromptFirst
                                               : SchedulingPolicy::kFcfs;
  ec.served_model_name = cfg.model.name.empty() ? DefaultServedName(cfg.model.path) : cfg.model.name;
  ec.max_model_len = cfg.model.max_model_len > 0 ? cfg.model.max_model_len : mc.max_position_embeddings;
  if (ec.max_model_len > mc.max_position_embeddings)
    Fail(ErrorKind::kInvalidArgument, "config key 'model.max_model_len': {} exceeds the model's {} positions",
         ec.max_model_len, mc.max_position_embeddings);
  ec.force_diffusion = cfg.model.diffusion;
  ec.collect_expert_stats = true;  // feeds tessera_moe_routed_tokens_total
  ec.sampling_defaults = SamplingDefaultsFromHf(dir);
  const int64_t per_token = Model::KvBytesPerToken(mc, model.KvCacheDType());
  const int64_t useful = per_token * ec.page_size * (ec.max_num_seqs * (ec.max_model_len / ec.page_size + 2) + 16);
  ec.kv_cache_bytes = std::max<int64_t>(std::min(KvCacheBudget(cfg, model, ec), useful), per_token * ec.page_size);
  CheckHostMemory(model, ec);
  const bool masked_settings = cfg.diffusion.block_size > 0 || cfg.diffusion.steps > 0 ||
                               !cfg.diffusion.policy.empty() || cfg.diffusion.mask_token_id >= 0;
  if (mc.canvas_length > 0) {  // DiffusionGemma's sampler knobs (generation_config.json; requests override them)
    if (masked_settings)
      Fail(ErrorKind::kInvalidArgument,
           "{} is a canvas-diffusion model: the diffusion section's block_size / steps / policy / mask_token_id "
           "do not apply (its sampler's defaults are generation_config.json's; a request sets its own in "
           "'diffusion')",
           FamilyName(mc.family));
    ec.canvas = CanvasSamplerParams::FromGenerationConfig(dir.generation_config, dir.dir + "/generation_config.json");
  }
  if (mc.diffusion || cfg.model.diffusion) {
    DiffusionOverrides o;
    if (cfg.diffusion.block_size > 0) o.block_size = cfg.diffusion.block_size;
    if (cfg.diffusion.steps > 0) o.steps = cfg.diffusion.steps;
    if (!cfg.diffusion.policy.empty()) {
      o.policy = ParseDiffusionPolicy(cfg.diffusion.policy);
      o.threshold = static_cast<float>(cfg.diffusion.threshold);
    }
    if (cfg.diffusion.mask_token_id >= 0) o.mask_token_id = static_cast<int32_t>(cfg.diffusion.mask_token_id);
    o.block_size_flag = "--diffusion-block-size";
    o.steps_flag = "--diffusion-steps";
    ec.default_diffusion = ResolveDiffusionParams(mc, dir, &tokenizer, o, ec.max_model_len);
  } else if (cfg.diffusion.block_size > 0 || cfg.diffusion.steps > 0 || !cfg.diffusion.policy.empty()) {
    spdlog::warn("diffusion settings ignored: {} is an autoregressive model (add --diffusion to serve it "
                 "as a block-diffusion model)",
                 cfg.model.path);
  }
  return ec;
}

// One short request through the engine before /health turns 200, so the first client does not pay
// for first-touch page faults, lazily built kernels or allocations.
void WarmUp(Engine& engine, const EngineModelInfo& info) {
  GenerationRequest req;
  req.id = "warm-up";
  req.prompt = {1, 2, 3, 4, 5, 6, 7, 8};
  for (int32_t& t : req.prompt) t = static_cast<int32_t>(t % std::max<int64_t>(info.vocab_size, 1));
  req.sampling.max_tokens = info.diffusion ? std::max<int64_t>(info.default_diffusion.block_size, 1) : 2;
  req.sampling.temperature = 0;
  req.sampling.ignore_eos = true;
  if (info.diffusion) req.diffusion = info.default_diffusion;
  if (info.canvas_length > 0) {
    // A canvas model (DiffusionGemma) anneals its own temperatures and refuses a request's other than 1
    // (greedy 0 failed every `tessera serve` of one here). One canvas of two steps runs what any step does.
    req.sampling.temperature = 1;
    req.canvas = info.canvas_defaults;
    req.canvas->max_denoising_steps = std::min<int64_t>(req.canvas->max_denoising_steps, 2);
  }
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::string error;
  req.on_event = [&](const GenerationEvent& ev) {
    if (ev.kind != GenerationEvent::Kind::kFinished && ev.kind != GenerationEvent::Kind::kError) return;
    std::lock_guard<std::mutex> lock(mu);
    if (ev.kind == GenerationEvent::Kind::kError) error = ev.error;
    done = true;
    cv.notify_all();
  };
  engine.Submit(std::move(req));
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return done; });
  if (!error.empty()) Fail(ErrorKind::kInternal, "warm-up request failed: {}", error);
}

int RunServe(ServeFlags& f) {
  // stdout / stderr a pipe whose reader is gone: a write fails (EPIPE; the access log counts its lost
  // lines) instead of SIGPIPE ending the process at its next log line. Sockets send with MSG_NOSIGNAL.
  ::signal(SIGPIPE, SIG_IGN);
  ServerConfig cfg = f.config_file.empty() ? ServerConfig{} : LoadServerConfigFile(f.config_file);
  ApplyConfigFlags(f.values, cfg);
  if (const char* env_key = std::getenv("TESSERA_API_KEY"); env_key != nullptr && *env_key != '\0')
    cfg.security.api_keys.emplace_back(env_key);
  if (cfg.model.path.empty()) cfg.model.path = DemoModelDir();
  ValidateServerConfig(cfg);
  if (f.check_config) {
    std::printf("%s", EffectiveConfigString(cfg).c_str());
    return 0;
  }
  if (std::getenv("TESSERA_LOG_LEVEL") == nullptr) spdlog::set_level(spdlog::level::info);
  spdlog::info("effective configuration:\n{}", EffectiveConfigString(cfg));

  SignalWaiter signals;  // before any other thread exists, so that all of them inherit the mask
  // A checkpoint truncated under the running server: errors naming it, not a SIGBUS (io/mapped_file.h).
  InstallMappedFileFaultGuard();
  // The model directory's configs first: a path that is not a model directory is named as such, not
  // as a directory without tokenizer.json (the tokenizer is looked for there too).
  HfModelDir dir = LoadHfModelDir(cfg.model.path);
  const std::string tok_dir = cfg.model.tokenizer.empty() ? cfg.model.path : cfg.model.tokenizer;
  std::unique_ptr<Tokenizer> tokenizer = LoadTokenizerRequired(tok_dir, "tessera serve needs a tokenizer");
  const std::string template_source =
      cfg.model.chat_template.empty() ? "" : ReadTextFile(cfg.model.chat_template, "chat template");
  TokenizerPromptBuilder prompts(*tokenizer, template_source);
  DeferredEngine deferred(cfg.model.name.empty() ? DefaultServedName(cfg.model.path) : cfg.model.name);
  HttpServer server(cfg, deferred, prompts);
  server.Start();
  std::printf("tessera: listening on http://%s:%d\n", cfg.server.host.c_str(), server.port());
  if (server.health_port() != 0)
    std::printf("tessera: /health and /metrics also on http://%s:%d\n", cfg.server.host.c_str(), server.health_port());
  std::fflush(stdout);

  if (cfg.model.dtype != "auto")
    spdlog::warn("model.dtype '{}' is not selectable yet: the CPU backend computes in f32 (bf16 weights read in "
                 "place), the CUDA backend in bf16",
                 cfg.model.dtype);
  if (cfg.model.compute_threads > 0) ThreadPool::SetGlobalThreads(static_cast<int>(cfg.model.compute_threads));
  LoadOptions lo;
  lo.device = cfg.model.device;
  lo.load_format = cfg.model.load_format == "safetensors" ? "auto" : cfg.model.load_format;
  lo.tensor_parallel_size = static_cast<int>(cfg.model.tensor_parallel_size);
  lo.kv_cache_dtype = cfg.model.kv_cache_dtype;
  lo.quantization = cfg.model.quantization;
  lo.activation_precision = cfg.model.activation_precision;
  auto model = LoadModelForCli(cfg.model.path, lo);
  if (tokenizer->vocab_size() > model->config().vocab_size)
    spdlog::warn("the tokenizer has {} tokens, the model's vocabulary {}: ids beyond it are refused",
                 tokenizer->vocab_size(), model->config().vocab_size);
  Engine engine(model.get(), tokenizer.get(), MakeEngineConfig(cfg, *model, dir, *tokenizer));
  const EngineModelInfo& info = engine.ModelInfo();
  spdlog::info("engine: {} ({}), max_model_len {}, KV pages {} x {} tokens ({}), max_num_seqs {}", info.name,
               info.diffusion ? "block diffusion" : info.canvas_length > 0 ? "canvas diffusion" : "autoregressive",
               info.max_model_len, engine.Snapshot().kv_pages_total, engine.config().page_size,
               DTypeName(model->KvCacheDType()), engine.config().max_num_seqs);
  const StatePlan state = PlanState(engine.config(), model->config(), model->StateBytesPerSequencePerRank());
  const int ranks = model->tensor_parallel_size();
  spdlog::info("recurrent state: {}{}", DescribeStatePlan(state),
               ranks > 1 && state.slots() > 0 ? fmt::format(" per rank, {} ranks", ranks) : "");
  if (cfg.engine.num_state_snapshots > 0 && state.snapshots == 0)
    spdlog::warn("engine.num_state_snapshots ignored: {}",
                 state.sequence_slots == 0 ? "the model has no recurrent state" : "prefix caching is off");
  server.metrics().AddCollector([&server, &engine, &info] {
    EngineSnapshot s = engine.Snapshot();
    if (s.expert_routed_tokens.empty()) return;
    auto& family = server.server_metrics().expert_routed_tokens;
    for (int64_t l = 0; l < info.num_layers; ++l)
      for (int64_t e = 0; e < info.num_experts; ++e) {
        const int64_t n = s.expert_routed_tokens[static_cast<size_t>(l * info.num_experts + e)];
        if (n > 0) family.Set({std::to_string(l), std::to_string(e)}, static_cast<double>(n));
      }
  });
  engine.Start();
  deferred.Attach(&engine);
  if (signals.Received() == 0) {
    WarmUp(engine, info);
    engine.SetReady(true);
    spdlog::info("ready: serving {} on http://{}:{}", info.name, cfg.server.host, server.port());
  }

  const int sig = signals.Wait();
  spdlog::info("received {}: draining (up to {} s)", sig == SIGTERM ? "SIGTERM" : "SIGINT", f.drain_timeout_s);
  server.StopAccepting();
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(f.drain_timeout_s * 1000));
  if (!server.WaitForIdle(deadline))
    spdlog::warn("drain deadline passed with {} request(s) in flight: cancelling them", server.in_flight());
  server.Stop();
  engine.Stop();
  spdlog::info("stopped");
  return 0;
}

}  // namespace

Subcommand AddServeCommand(CLI::App& root) {
  auto f = std::make_shared<ServeFlags>();
  CLI::App* app = root.add_subcommand(
      "serve", "Serve the OpenAI-compatible API (chat, completions, models, health, metrics)");
  app->add_option("--config", f->config_file, "YAML configuration file (flags override its keys)")
      ->check(CLI::ExistingFile);
  app->add_flag("--check-config", f->check_config, "Print the effective configuration (secrets masked) and exit");
  app->add_option("--drain-timeout", f->drain_timeout_s,
                  "Seconds in-flight requests get to finish after SIGTERM")
      ->check(kNonNegativeNumber);
  RegisterConfigFlags(*app, f->values);
  app->footer(
      "The API key may also come from the environment variable TESSERA_API_KEY. Every flag is also a\n"
      "key of the --config file (section.key, shown in each flag's help).");
  return {app, [f] { return RunServe(*f); }};
}

}  // namespace tessera
