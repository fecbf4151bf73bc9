// tessera engine: the GPU memory budget (see memory_plan.h).
#include "engine/memory_plan.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "model/model.h"

namespace tessera {

StatePlan PlanState(const EngineConfig& ec, const ModelConfig& mc, int64_t bytes_per_slot) {
  StatePlan s;
  s.bytes_per_slot = bytes_per_slot;
  if (mc.NumLayersOf(LayerKind::kLinearAttention) == 0) return s;
  s.sequence_slots = ec.max_num_seqs;
  s.snapshots = !ec.enable_prefix_caching    ? 0
                : ec.num_state_snapshots > 0 ? ec.num_state_snapshots
                                             : std::max<int64_t>(1, (ec.max_num_seqs + 3) / 4);
  return s;
}

std::string DescribeStatePlan(const StatePlan& s) {
  if (s.slots() == 0) return "none (no Gated DeltaNet layers)";
  return fmt::format("{} sequence slots + {} prefix-cache snapshots x {} = {} (snapshots {})", s.sequence_slots,
                     s.snapshots, HumanBytes(static_cast<double>(s.bytes_per_slot)),
                     HumanBytes(static_cast<double>(s.bytes())), HumanBytes(static_cast<double>(s.snapshot_bytes())));
}

std::string HumanBytes(double bytes) {
  // A plan that does not fit has a negative KV pool: the sign, then the magnitude's unit.
  if (bytes < 0) return std::string(1, '-').append(HumanBytes(-bytes));  // not "-" + ...: GCC 12 -Wrestrict
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) bytes /= 1024, ++u;
  return fmt::format("{:.2f} {}", bytes, units[u]);
}

int64_t ActivationReserveBytes(const ModelConfig& mc, int64_t max_num_batched_tokens, int64_t max_num_seqs,
                               bool block_diffusion) {
  const int64_t H = mc.hidden_size, k = std::max<int64_t>(1, mc.num_experts_per_tok);
  // The widest attention layer's buffers (families with per-layer shapes: Gemma's 512-dim global heads).
  int64_t q = mc.num_heads * mc.head_dim * (mc.attn_output_gate ? 2 : 1);
  int64_t kv = mc.num_kv_heads * mc.head_dim;
  for (const AttentionLayerSpec& a : mc.attention_layers) {
    q = std::max(q, mc.num_heads * a.head_dim);
    kv = std::max(kv, a.num_kv_heads * a.head_dim);
  }
  const int64_t attention = 2 * q + 2 * kv;
  // Gated DeltaNet: conv in / out and the value-sized buffers, plus the normalised q / k.
  const int64_t vh = mc.linear_num_value_heads, dk = mc.linear_key_head_dim, dv = mc.linear_value_head_dim;
  const int64_t gdn = 2 * (mc.LinearConvDim() + 2 * vh * dv) + 2 * mc.linear_num_key_heads * dk;
  // Feed-forward: the routed slots (slot outputs, activations, the host-grouped path's gathered
  // copies) at the experts' width, the shared expert's gate / up / product, and a dense MLP's where a
  // layer runs one (DiffusionGemma: every layer, beside its experts; the Qwen families: layers off the
  // sparse step or in mlp_only_layers). Counting the dense width for the routed slots (Qwen3 MoE
  // configs carry an unused intermediate_size of 8x the experts') had tripled this term.
  bool dense_mlp = mc.family == ModelFamily::kDiffusionGemma || mc.num_experts <= 0;
  for (int64_t l = 0; l < mc.num_layers && !dense_mlp; ++l) dense_mlp = !mc.IsMoeLayer(l);
  const int64_t moe = (mc.num_experts > 0 ? mc.num_experts + k * (3 * H + 3 * mc.moe_intermediate_size) : 0) +
                      3 * mc.shared_expert_intermediate_size + (dense_mlp ? 3 * mc.intermediate_size : 0);
  const int64_t per_row = 4 * H + std::max({attention, gdn, moe});
  // Logits rows of a step: one a sequence for autoregressive models (its decode row, or its prompt's
  // last), a block of up to 32 for block diffusion, or a whole canvas for canvas models
  // (DiffusionGemma), whose self-conditioning product then takes the same rows again: their softmax
  // reuses the logits' block, the split copy (bf16 hi + lo) is a second one. The forward computes them
  // Model::kLogitsChunkRows at a time.
  const int64_t rows_per_sequence = mc.canvas_length > 0                   ? mc.canvas_length
                                    : mc.diffusion || block_diffusion ? std::max<int64_t>(32, mc.block_size)
                                                                          : 1;
  const int64_t logits_rows =
      std::min({max_num_batched_tokens, max_num_seqs * rows_per_sequence, Model::kLogitsChunkRows});
  const int64_t logits_copies = mc.canvas_length > 0 ? 2 : 1;
  const int64_t floats = max_num_batched_tokens * per_row + logits_copies * logits_rows * mc.vocab_size;
  // Quantized weights (CUDA): products of several rows run on the codes (cuda_quant_mma.cu, k a
  // multiple of 32); a matrix whose k is not dequantizes into f32 scratch first, the largest such
  // matrix at a time.
  int64_t quant_scratch = 0;
  if (mc.quant.quantized() || mc.load_quant != QuantKind::kNone)
    for (const ExpectedTensor& t : ExpectedTensors(mc))
      if (t.shape.size() == 2 && t.shape[1] % 32 != 0 && t.name.find("embed_tokens") == std::string::npos &&
          t.name != "lm_head.weight")
        quant_scratch = std::max(quant_scratch, 4 * t.shape[0] * t.shape[1]);
  // Canvas models: every sequence's next self-conditioning input, kept by the model between steps
  // ([C, hidden] f32, Segment::canvas_state).
  const int64_t kept_inputs = mc.canvas_length > 0 ? max_num_seqs * mc.canvas_length * H * 4 : 0;
  // Hybrid models: the CUDA backend's chunked gated delta rule keeps the records of at most 8 chunks
  // of every value head at once (cuda_gdn_chunked.cu; a 64-token chunk: bf16 hi + lo planes of W,
  // exp(cum) q and exp(last - cum) k^T, A's, U in f32, 256 (3 key dim + 64 + value dim) bytes, in rows
  // padded for shared memory: at most 5/4 of that, + 128).
  const int64_t gdn_records =
      mc.linear_num_value_heads > 0
          ? int64_t{8} * mc.linear_num_value_heads *
                (5 * 256 * (3 * mc.linear_key_head_dim + 64 + mc.linear_value_head_dim) / 4 + 128)
          : 0;
  return 2 * floats * 4 + quant_scratch + kept_inputs + gdn_records + (int64_t{256} << 20);
}

GpuMemoryPlan PlanGpuMemory(int64_t total_bytes, double utilization, int64_t in_use_bytes, int64_t kv_bytes_per_token,
                            int64_t state_bytes, int64_t reserve_bytes) {
  GpuMemoryPlan p;
  p.total_bytes = total_bytes;
  p.utilization = utilization;
  p.budget_bytes = static_cast<int64_t>(std::floor(utilization * static_cast<double>(total_bytes)));
  p.in_use_bytes = in_use_bytes;
  p.state_bytes = state_bytes;
  p.reserve_bytes = reserve_bytes;
  p.kv_pool_bytes = p.budget_bytes - in_use_bytes - state_bytes - reserve_bytes;
  p.kv_bytes_per_token = kv_bytes_per_token;
  p.kv_tokens = kv_bytes_per_token > 0 && p.kv_pool_bytes > 0 ? p.kv_pool_bytes / kv_bytes_per_token : 0;
  return p;
}

std::string DescribeGpuMemoryPlan(const GpuMemoryPlan& p) {
  const auto human = [](int64_t b) { return HumanBytes(static_cast<double>(b)); };
  return fmt::format(
      "gpu memory: {:.2f} x {} = {}: in use {} (weights, context), state {}, activation reserve {}, KV pool {} "
      "({} tokens at {} B)",
      p.utilization, human(p.total_bytes), human(p.budget_bytes), human(p.in_use_bytes), human(p.state_bytes),
      human(p.reserve_bytes), human(p.kv_pool_bytes), p.kv_tokens, p.kv_bytes_per_token);
}

}  // namespace tessera
