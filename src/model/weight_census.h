// tessera model: the parameters of a model by what reads them, from its config alone (ExpectedTensors),
// and the weight bytes a forward step reads: one count for `tessera inspect`'s "read per token" and the
// benchmarks' floors (bench/model_bench.cpp, CudaBench), so that the figures cannot drift apart.
#pragma once

#include <cstdint>
#include <string>

#include "model/model_config.h"

namespace tessera {

struct WeightCensus {
  // Parameters over the whole model, by role. "dense" is every tensor a step reads whole whatever its
  // rows: attention / Gated DeltaNet projections, norms, routers, shared experts and their gates,
  // dense FFNs, the final norm; not the input embedding, the lm_head or the routed experts.
  double total = 0;
  double second_stack = 0;  // of total: a second stack other rows read instead (ExpectedTensor::second_stack)
  double embedding = 0;  // the input embedding table (vocab x hidden)
  double lm_head = 0;    // vocab x hidden (the embedding table itself when tied: it is read as the head)
  double dense_matrix = 0;
  double dense_vector = 0;    // norms, conv kernels, A_log, dt_bias (f32 on the CPU backend)
  double routed_experts = 0;  // every routed expert of every MoE layer
  double expert = 0;          // one routed expert of one layer (gate + up + down)
  int64_t embedding_row = 0;  // hidden: what one token's embedding lookup reads
  int64_t moe_layers = 0;
  int64_t experts_per_token = 0;  // top-k
  // Bytes in the model's weight format (ModelConfig::quant / load_quant: quantized Linear weights as
  // the loader holds them, codes + f32 scales + zero points; the embedding, lm_head, routers and
  // shared-expert gates bf16; vectors at 2 bytes a parameter as in the bf16 counts).
  double dense_bytes = 0;   // the dense matrices (quantized where the format quantizes them)
  double expert_bytes = 0;  // one routed expert
  double weight_bytes = 0;  // the whole model
  std::string format;       // ModelConfig::WeightFormat()

  static WeightCensus Of(const ModelConfig& cfg);

  // Parameters active for one token: every non-expert tensor of its stack, the whole embedding table
  // and top-k routed experts a MoE layer (the count model cards publish as "active").
  double ActiveParams() const {
    return total - second_stack - routed_experts + moe_layers * experts_per_token * expert;
  }
  // Parameters a row multiplies: the dense matrices and top-k routed experts a MoE layer (not the
  // lm_head, which multiplies only the logits rows).
  double MatmulParamsPerRow() const { return dense_matrix + moe_layers * experts_per_token * expert; }

  // Weight bytes a step of `rows` tokens reads when its MoE layers touch `experts_touched` distinct
  // routed experts in all (summed over the layers): the dense tensors, lm_head and each touched expert
  // once, one embedding row a token. Matrices of matrix_bytes a parameter, vectors of vector_bytes.
  double StepBytes(double experts_touched, int64_t rows, double matrix_bytes = 2, double vector_bytes = 2) const {
    return matrix_bytes *
               (dense_matrix + lm_head + experts_touched * expert + static_cast<double>(rows) * embedding_row) +
           vector_bytes * dense_vector;
  }
  // StepBytes in the model's weight format.
  double FormatStepBytes(double experts_touched, int64_t rows) const {
    return dense_bytes + 2 * (lm_head + static_cast<double>(rows) * embedding_row) + experts_touched * expert_bytes +
           2 * dense_vector;
  }
  double FormatTokenBytes() const {
    return FormatStepBytes(static_cast<double>(moe_layers * experts_per_token), 1);
  }
  // One token alone (batch-1 decode): top-k routed experts in every MoE layer. In bf16 this is the
  // numerator of the decode floor (docs/PERFORMANCE.md).
  double TokenBytes(double matrix_bytes = 2, double vector_bytes = 2) const {
    return StepBytes(static_cast<double>(moe_layers * experts_per_token), 1, matrix_bytes, vector_bytes);
  }
};

}  // namespace tessera
