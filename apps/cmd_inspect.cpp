// tessera CLI: `tessera inspect`: what a model is and what it needs, from config.json alone:
// layers by type, total / active parameters, weight bytes in bf16 / int8 / int4, KV bytes per
// token (of --kv-cache-dtype), recurrent-state bytes per sequence and the state slots serve allocates
// (running sequences and prefix-cache snapshots), the memory a context x concurrency needs, and the
// GPU memory plan.
#include <cstdio>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli_common.h"
#include "core/dtype.h"
#include "engine/memory_plan.h"
#include "io/hf_config.h"
#include "model/model.h"
#include "model/model_config.h"
#include "model/weight_census.h"
#include "server/server_config.h"

namespace tessera {

namespace {

struct InspectFlags {
  std::string model;
  int64_t context = 4096, concurrency = 1;
  bool json = false;
  // The GPU memory plan (as `tessera serve --device cuda` makes it), when --gpu-memory is given.
  std::string gpu_memory;
  double gpu_memory_utilization = 0.9;
  int64_t max_num_seqs = 64, max_num_batched_tokens = 4096;
  int64_t num_state_snapshots = 0;     // 0 = max_num_seqs / 4, as serve
  std::string kv_cache_dtype = "f32";  // as serve's --kv-cache-dtype: bf16 halves the KV bytes per token
  std::string quantization = "none";   // as serve's --quantization: the weights quantized at load
};

std::string HumanCount(double n) {
  if (n >= 1e9) return fmt::format("{:.2f}B", n / 1e9);
  if (n >= 1e6) return fmt::format("{:.2f}M", n / 1e6);
  if (n >= 1e3) return fmt::format("{:.2f}K", n / 1e3);
  return fmt::format("{:.0f}", n);
}

int RunInspect(const InspectFlags& f) {
  if (f.context <= 0 || f.concurrency <= 0) throw UsageError("--context and --concurrency must be positive");
  if (f.max_num_seqs <= 0 || f.max_num_batched_tokens <= 0)
    throw UsageError("--max-num-seqs and --max-num-batched-tokens must be positive");
  if (f.num_state_snapshots < 0) throw UsageError("--num-state-snapshots must be >= 0 (0 = max-num-seqs / 4)");
  HfModelDir dir = LoadHfModelDir(f.model);
  ModelConfig cfg = ModelConfig::FromHf(dir);
  cfg.load_quant = ParseLoadQuantization(f.quantization);
  if (cfg.quant.quantized() && cfg.load_quant != QuantKind::kNone)
    throw UsageError("--quantization: " + f.model + " is already quantized (" + cfg.quant.Describe() + ")");
  // The weights in each format quantization at load offers (what the loader would hold).
  auto bytes_as = [&](QuantKind kind) {
    ModelConfig c = cfg;
    c.quant = QuantConfig{};
    c.load_quant = kind;
    return WeightCensus::Of(c).weight_bytes;
  };
  const double bytes_bf16 = bytes_as(QuantKind::kNone), bytes_fp8 = bytes_as(QuantKind::kFp8),
               bytes_int8 = bytes_as(QuantKind::kInt8), bytes_int4 = bytes_as(QuantKind::kInt4);
  // Active parameters as model cards count them (the whole embedding table among them); the bytes a
  // token reads are the benchmarks' count (one embedding row, the lm_head, top-k experts).
  const WeightCensus census = WeightCensus::Of(cfg);
  const double total = census.total, active = census.ActiveParams(), embed = census.embedding;
  const double read_per_token = census.FormatTokenBytes();
  const int64_t full = cfg.NumLayersOf(LayerKind::kFullAttention);
  const int64_t linear = cfg.NumLayersOf(LayerKind::kLinearAttention);
  // Of the attention layers, those with a sliding window (Gemma 4's local layers); the rest are global.
  int64_t sliding = 0;
  for (const AttentionLayerSpec& a : cfg.attention_layers) sliding += a.sliding_window > 0 ? 1 : 0;
  int64_t moe = 0;
  for (int64_t l = 0; l < cfg.num_layers; ++l) moe += cfg.IsMoeLayer(l);
  // KV and recurrent state as tessera's caches hold them: K / V of the chosen element type, the state f32.
  const DType kv_dtype = ParseKvCacheDType(f.kv_cache_dtype);
  const int64_t kv_per_token = Model::KvBytesPerToken(cfg, kv_dtype);
  const int64_t state_per_seq = Model::StateBytesPerSequence(cfg);
  const double weights = census.weight_bytes;  // in the model's format
  const double kv = static_cast<double>(kv_per_token) * f.context * f.concurrency;
  const double state = static_cast<double>(state_per_seq) * f.concurrency;
  const double need = weights + kv + state;
  EngineConfig ec;  // the engine's defaults for what the flags do not set, as serve has them
  ec.max_num_seqs = f.max_num_seqs;
  ec.max_num_batched_tokens = f.max_num_batched_tokens;
  ec.enable_prefix_caching = true;
  ec.num_state_snapshots = f.num_state_snapshots;
  const StatePlan slots = PlanState(ec, cfg, state_per_seq);

  nlohmann::ordered_json j;
  j["architecture"] = cfg.architecture;
  j["model_type"] = cfg.model_type;
  j["family"] = FamilyName(cfg.family);
  j["diffusion"] = cfg.diffusion;  // masked block diffusion (SDAR / Clover)
  j["canvas_length"] = cfg.canvas_length;  // uniform-state canvas diffusion (DiffusionGemma); 0: none
  j["layers"] = {{"total", cfg.num_layers}, {"full_attention", full}, {"sliding_window", sliding}, {"linear_attention", linear},
                 {"moe", moe}, {"dense", cfg.num_layers - moe}};
  j["hidden_size"] = cfg.hidden_size;
  j["vocab_size"] = cfg.vocab_size;
  j["num_experts"] = cfg.num_experts;
  j["num_experts_per_tok"] = cfg.num_experts_per_tok;
  j["total_params"] = static_cast<int64_t>(total);
  j["active_params"] = static_cast<int64_t>(active);
  j["active_params_no_embedding"] = static_cast<int64_t>(active - embed);
  j["weight_format"] = census.format;
  j["weight_bytes"] = {{"format", static_cast<int64_t>(weights)}, {"bf16", static_cast<int64_t>(bytes_bf16)},
                       {"fp8", static_cast<int64_t>(bytes_fp8)}, {"int8", static_cast<int64_t>(bytes_int8)},
                       {"int4", static_cast<int64_t>(bytes_int4)}};
  j["read_bytes_per_token"] = static_cast<int64_t>(read_per_token);
  j["read_bytes_per_token_bf16"] = static_cast<int64_t>(census.TokenBytes());
  j["kv_cache_dtype"] = DTypeName(kv_dtype);
  j["kv_bytes_per_token"] = kv_per_token;
  j["state_bytes_per_sequence"] = state_per_seq;
  j["memory"] = {{"context", f.context}, {"concurrency", f.concurrency},
                 {"weights_bytes", static_cast<int64_t>(weights)}, {"kv_bytes", static_cast<int64_t>(kv)},
                 {"state_bytes", static_cast<int64_t>(state)}, {"total_bytes", static_cast<int64_t>(need)}};
  j["state_slots"] = {{"sequences", slots.sequence_slots},
                      {"snapshots", slots.snapshots},
                      {"snapshot_bytes", slots.snapshot_bytes()},
                      {"total_bytes", slots.bytes()}};
  std::string plan_line;
  if (!f.gpu_memory.empty()) {
    if (!(f.gpu_memory_utilization > 0 && f.gpu_memory_utilization <= 1))
      throw UsageError("--gpu-memory-utilization must be in (0, 1]");
    const GpuMemoryPlan plan =
        PlanGpuMemory(ParseByteSize(f.gpu_memory, "--gpu-memory"), f.gpu_memory_utilization,
                      static_cast<int64_t>(weights) + kCudaContextBytes, kv_per_token, slots.bytes(),
                      ActivationReserveBytes(cfg, ec.max_num_batched_tokens, ec.max_num_seqs));
    j["gpu_plan"] = {{"total_bytes", plan.total_bytes},   {"utilization", plan.utilization},
                     {"budget_bytes", plan.budget_bytes}, {"in_use_bytes", plan.in_use_bytes},
                     {"state_bytes", plan.state_bytes},   {"reserve_bytes", plan.reserve_bytes},
                     {"kv_pool_bytes", plan.kv_pool_bytes}, {"kv_tokens", plan.kv_tokens}};
    plan_line = fmt::format("{}, {} KV cache", DescribeGpuMemoryPlan(plan), DTypeName(kv_dtype));
    if (plan.kv_pool_bytes <= 0) {
      std::fprintf(stderr, "tessera inspect: the model does not fit: %s\n", plan_line.c_str());
      if (f.json) std::printf("%s\n", j.dump(2).c_str());
      return 1;
    }
  }
  if (f.json) {
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  const std::string writes = cfg.diffusion           ? ", block diffusion"
                             : cfg.canvas_length > 0 ? fmt::format(", canvas diffusion ({}-token canvases)", cfg.canvas_length)
                                                     : "";
  std::printf("model:            %s (%s, family %s)%s\n", cfg.architecture.c_str(), cfg.model_type.c_str(),
              FamilyName(cfg.family), writes.c_str());
  const std::string attention =
      sliding > 0 ? fmt::format("{} attention: {} sliding-window, {} global", full, sliding, full - sliding)
                  : fmt::format("{} full attention", full);
  std::printf("layers:           %lld (%s, %lld Gated DeltaNet; %lld MoE, %lld dense)\n", (long long)cfg.num_layers,
              attention.c_str(), (long long)linear, (long long)moe, (long long)(cfg.num_layers - moe));
  if (cfg.num_experts > 0)
    std::printf("experts:          %lld routed, top-%lld%s\n", (long long)cfg.num_experts,
                (long long)cfg.num_experts_per_tok, cfg.shared_expert_intermediate_size > 0 ? " + shared expert" : "");
  std::printf("parameters:       %s total, %s active per token (%s without the input embedding)\n",
              HumanCount(total).c_str(), HumanCount(active).c_str(), HumanCount(active - embed).c_str());
  std::printf("weights:          %s as %s (bf16 %s, fp8 %s, int8 %s, int4 %s with --quantization; "
              "embeddings, lm_head, routers bf16)\n",
              HumanBytes(weights).c_str(), census.format.c_str(), HumanBytes(bytes_bf16).c_str(),
              HumanBytes(bytes_fp8).c_str(), HumanBytes(bytes_int8).c_str(), HumanBytes(bytes_int4).c_str());
  const std::string read_what =
      census.experts_per_token > 0 ? fmt::format("one embedding row, lm_head, top-{} experts", census.experts_per_token)
                                   : std::string("one embedding row, lm_head");
  std::printf("read per token:   %s of weights as %s (%s: the decode floor's numerator)\n",
              HumanBytes(read_per_token).c_str(), census.format.c_str(), read_what.c_str());
  std::printf("KV cache:         %s per token (%s, %lld attention layers)\n", HumanBytes(kv_per_token).c_str(),
              DTypeName(kv_dtype), (long long)full);
  std::printf("recurrent state:  %s per sequence (f32)\n", HumanBytes(state_per_seq).c_str());
  std::printf("state slots:      %s\n", DescribeStatePlan(slots).c_str());
  std::printf("memory for %lld tokens x %lld sequences: %s = weights %s + KV %s + state %s\n", (long long)f.context,
              (long long)f.concurrency, HumanBytes(need).c_str(), HumanBytes(weights).c_str(),
              HumanBytes(kv).c_str(), HumanBytes(state).c_str());
  if (!plan_line.empty())
    std::printf("%s (in use: the weights + %s CUDA context estimate)\n", plan_line.c_str(),
                HumanBytes(static_cast<double>(kCudaContextBytes)).c_str());
  return 0;
}

}  // namespace

Subcommand AddInspectCommand(CLI::App& root) {
  auto f = std::make_shared<InspectFlags>();
  CLI::App* app = root.add_subcommand("inspect", "Describe a model and its memory needs (config.json is enough)");
  app->add_option("--model", f->model, "Model directory")->required()->check(CLI::ExistingDirectory);
  app->add_option("--context", f->context, "Context length for the memory estimate")->check(kPositiveNumber);
  app->add_option("--concurrency", f->concurrency, "Concurrent sequences for the memory estimate")
      ->check(kPositiveNumber);
  app->add_option("--gpu-memory", f->gpu_memory,
                  "GPU memory size (e.g. 141GB, 80GiB): print the memory plan serve --device cuda makes on it");
  app->add_option("--gpu-memory-utilization", f->gpu_memory_utilization, "Share of the GPU for tessera (0..1]");
  app->add_option("--max-num-seqs", f->max_num_seqs, "Sequences per step, for the plan's state and reserve");
  app->add_option("--max-num-batched-tokens", f->max_num_batched_tokens, "Tokens per step, for the plan's reserve");
  app->add_option("--num-state-snapshots", f->num_state_snapshots,
                  "Hybrid models: prefix-cache state snapshots, for the state slots and the plan "
                  "(0 = max-num-seqs / 4)");
  app->add_option("--kv-cache-dtype", f->kv_cache_dtype,
                  "KV cache element type: f32 (default) or bf16: half the KV bytes, twice the tokens; needs "
                  "--device cuda to serve")
      ->check(CLI::IsMember({"f32", "bf16"}));
  app->add_option("--quantization", f->quantization,
                  "Size the weights as serve --quantization would hold them: none (default), fp8, int8 or int4")
      ->check(CLI::IsMember({"none", "fp8", "int8", "int4"}));
  app->add_flag("--json", f->json, "Print JSON for scripts");
  return {app, [f] { return RunInspect(*f); }};
}

}  // namespace tessera
