// tessera engine: the GPU memory budget (engine.gpu_memory_utilization, as in vLLM). Of
// utilization x the device's memory, what is in use once the weights are loaded comes first
// (weights, CUDA context, anything else on the device), then the recurrent-state slots of hybrid
// models, then a reserve for the activations of the largest step; the KV page pool gets the rest.
// `tessera serve --device cuda` plans from the device's numbers after loading; `tessera inspect
// --gpu-memory SIZE` from a device size, the bf16 weights and kCudaContextBytes, with the same code.
#pragma once

#include <cstdint>
#include <string>

#include "engine/engine.h"
#include "model/model_config.h"

namespace tessera {

// What a CUDA context and the backend's fixed buffers (cuBLASLt workspace, scratch ring) take on a
// device before any tensor: an estimate for planning without a device (inspect).
constexpr int64_t kCudaContextBytes = int64_t{768} << 20;

struct GpuMemoryPlan {
  int64_t total_bytes = 0;        // the device's memory
  double utilization = 0;         // share of it tessera may use
  int64_t budget_bytes = 0;       // utilization x total
  int64_t in_use_bytes = 0;       // after loading: weights, context, other processes
  int64_t state_bytes = 0;        // recurrent-state slots (hybrid models)
  int64_t reserve_bytes = 0;      // activations of the largest step
  int64_t kv_pool_bytes = 0;      // what is left for KV pages (<= 0: does not fit)
  int64_t kv_bytes_per_token = 0;
  int64_t kv_tokens = 0;          // kv_pool_bytes / kv_bytes_per_token
};

// The recurrent-state slots the engine allocates (all 0 for a model without recurrent state): one
// per running sequence (max_num_seqs), then the prefix cache's snapshot slots (num_state_snapshots;
// 0 = max_num_seqs / 4, at least 1; none with prefix caching off).
struct StatePlan {
  int64_t sequence_slots = 0;
  int64_t snapshots = 0;
  int64_t bytes_per_slot = 0;  // one sequence's recurrent state, as one rank holds it
  int64_t slots() const { return sequence_slots + snapshots; }
  int64_t bytes() const { return slots() * bytes_per_slot; }
  int64_t snapshot_bytes() const { return snapshots * bytes_per_slot; }
};
StatePlan PlanState(const EngineConfig& ec, const ModelConfig& mc, int64_t bytes_per_slot);

// "64 sequence slots + 16 prefix-cache snapshots x 62.81 MiB = 4.91 GiB (snapshots 1004.94 MiB)";
// "none (no Gated DeltaNet layers)" for a model without recurrent state.
std::string DescribeStatePlan(const StatePlan& s);

// "62.81 MiB": bytes in B / KiB / MiB / GiB / TiB with two decimals (a minus sign before negatives).
std::string HumanBytes(double bytes);

// Activation reserve of a step of max_num_batched_tokens rows: the per-row buffers of the largest
// layer kind (attention, Gated DeltaNet, the feed-forward's slots and their grouped-path copies), the
// logits rows of a step (one a sequence for autoregressive models, a block of up to 32 for block
// diffusion, a canvas for canvas models), twice over for the caching allocator's rounding and reuse,
// plus 256 MiB. block_diffusion: the engine runs the model as a block-diffusion model though its
// config does not declare one (EngineConfig::force_diffusion).
int64_t ActivationReserveBytes(const ModelConfig& mc, int64_t max_num_batched_tokens, int64_t max_num_seqs,
                               bool block_diffusion = false);

// The plan for one device (one rank): per-token KV and per-slot state bytes as that rank holds them.
GpuMemoryPlan PlanGpuMemory(int64_t total_bytes, double utilization, int64_t in_use_bytes, int64_t kv_bytes_per_token,
                            int64_t state_bytes, int64_t reserve_bytes);

// One line: "gpu memory: 0.90 x 139.8 GiB = 125.8 GiB: in use 57.2 GiB, state 0 B, reserve 1.3 GiB,
// KV pool 67.3 GiB (367,001 tokens at 196,608 B)".
std::string DescribeGpuMemoryPlan(const GpuMemoryPlan& p);

}  // namespace tessera
