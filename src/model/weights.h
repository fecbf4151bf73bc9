// tessera model: the weights of a loaded model, as backend Tensor views (bf16 in place in the
// checkpoint mapping; f32 buffers owned here for converted tensors and small vectors).
#pragma once

#include <algorithm>
#include <deque>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "io/safetensors.h"
#include "model/model_config.h"

namespace tessera {

struct AttentionWeights {
  Tensor q_proj, k_proj, v_proj, o_proj;  // q_proj yields [q, gate] per head when gated
  const float* q_norm = nullptr;          // [head_dim]
  const float* k_norm = nullptr;
  // [head_dim]: V's per-head RmsNorm weight (all ones for Gemma's weightless v_norm); null: no norm.
  const float* v_norm = nullptr;
};

// One projection of the GDN input into the combined buffer [q k v | z | b | a]. The architectures
// load one stacked projection covering the whole row (WeightLoader::StackedRows); the layer also
// takes several, each copied to its column.
struct GdnProjection {
  Tensor w;
  int64_t column = 0;  // where its output starts in the combined row
};

struct GdnWeights {
  std::vector<GdnProjection> projections;
  const float* conv = nullptr;     // [conv_dim, K]
  const float* a_log = nullptr;    // [value_heads]
  const float* dt_bias = nullptr;  // [value_heads]
  const float* norm = nullptr;     // [value_dim]
  Tensor out_proj;
};

struct MlpWeights {
  Tensor gate, up, down;
};

struct MoeWeights {
  Tensor router;  // [num_experts, hidden]
  // Gemma's router (MoeRoutedForward): its input is RmsNorm(h) with this weight ([hidden]: the
  // checkpoint's router.scale times hidden^-0.5), and its renormalised top-k weights are multiplied
  // by per_expert_scale[e] ([num_experts]). Null for the Qwen families.
  const float* router_input_norm = nullptr;
  const float* per_expert_scale = nullptr;
  std::vector<ExpertWeights> experts;
  bool has_shared = false;
  MlpWeights shared;
  Tensor shared_gate;  // [1, hidden]
};

struct LayerWeights {
  LayerKind kind = LayerKind::kFullAttention;
  bool is_moe = false;
  const float* input_norm = nullptr;
  const float* post_norm = nullptr;
  AttentionWeights attn;
  GdnWeights gdn;
  MlpWeights mlp;
  MoeWeights moe;
  int64_t cache_index = 0;  // index among the layers of its kind (KV cache or state slot storage)
};

// Weight memory in a backend's memory, carved from large chunks (256-byte aligned pieces), so a
// model of tens of thousands of tensors takes a few allocations.
class WeightArena {
 public:
  void* Alloc(Backend& be, size_t bytes) {
    bytes = (bytes + 255) / 256 * 256;
    if (chunks_.empty() || used_ + bytes > chunks_.back().bytes()) {
      chunks_.emplace_back(be, std::max(bytes, kChunkBytes));
      used_ = 0;
    }
    void* p = static_cast<char*>(chunks_.back().data()) + used_;
    used_ += bytes;
    total_ += bytes;
    return p;
  }
  size_t total_bytes() const { return total_; }

 private:
  static constexpr size_t kChunkBytes = size_t{512} << 20;
  std::deque<DeviceBuffer> chunks_;
  size_t used_ = 0, total_ = 0;
};

struct ModelWeights {
  // Declared first so it is destroyed last: the device copies of every tensor (device backends).
  WeightArena device;
  std::shared_ptr<CheckpointReader> reader;      // keeps the mapping alive (null for dummy weights)
  std::deque<std::vector<float>> owned_f32;      // converted tensors
  std::deque<std::vector<uint16_t>> owned_bf16;  // re-ordered tensors (qwen3_next fused projections)
  std::deque<std::vector<uint8_t>> owned_bytes;  // quantized codes repacked or quantized at load
  std::deque<std::vector<int32_t>> owned_i32;    // act-order column permutations
  Tensor embed, lm_head;
  const float* final_norm = nullptr;
  // Non-null only where a canvas decoder has a stack of its own (an untied DiffusionGemma): the final
  // norm of canvas rows (SegmentRows::canvas); final_norm is then the committed rows'.
  const float* canvas_final_norm = nullptr;
  std::vector<LayerWeights> layers;
  // An architecture that composes its own layers (arch.h ArchBody) keeps its weights here, in a
  // type only its file knows (layers[] then carries only kind / is_moe / cache_index).
  std::shared_ptr<void> arch;
};

}  // namespace tessera
