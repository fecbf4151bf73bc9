// tessera io: the `quantization_config` of a Hugging Face config.json, for the formats tessera reads
// as published: FP8 block-wise or per-tensor (`quant_method: fp8`, the official Qwen / DeepSeek FP8
// releases), GPTQ 4/8-bit (`gptq`, checkpoint_format gptq or gptq_v2), AWQ 4-bit GEMM (`awq`), and
// compressed-tensors (`pack-quantized` int4/int8 weight-only, `float-quantized` FP8,
// `int-quantized` / `naive-quantized` int8, with per-token or static activation quantization).
// Anything else is refused with one line naming the method, format or key (ErrorKind::kUnsupported).
// Also the `--quantization` choice of quantization at load.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/quant.h"

namespace tessera {

enum class QuantMethod { kNone, kFp8, kGptq, kAwq, kCompressedTensors };

// How one Linear's weights (and, for W8A8, its inputs) are quantized in the checkpoint.
struct QuantScheme {
  QuantKind kind = QuantKind::kNone;  // the canonical code type the weights become
  int bits = 0;
  // Weight scale granularity: "tensor", "channel", "group" (group_size columns) or "block"
  // (block_rows x block_cols, FP8).
  std::string strategy;
  int64_t group_size = 0;
  int64_t block_rows = 0, block_cols = 0;
  bool symmetric = true;
  ActQuant act = ActQuant::kNone;  // kDynamicPerToken or kStatic for W8A8 schemes
  // compressed-tensors: the storage format of this scheme's tensors and the module names it targets
  // ("Linear", exact names or "re:" regexes).
  std::string format;
  std::vector<std::string> targets;
  // Activation quantization declared by the checkpoint that tessera runs at full precision instead
  // (per-group or dynamic per-tensor: the latter would make one request's result depend on the other
  // rows of its batch). Said in Describe().
  std::string act_note;
};

struct QuantConfig {
  QuantMethod method = QuantMethod::kNone;
  std::vector<QuantScheme> schemes;  // one, or compressed-tensors' config_groups in order
  bool gptq_v1_zeros = false;        // GPTQ checkpoint_format "gptq": zero points stored minus one
  std::vector<std::string> ignore;   // as declared (informational: modules are found by their tensors)

  bool quantized() const { return method != QuantMethod::kNone; }
  // The scheme for a checkpoint module name ("model.layers.0.mlp.experts.3.gate_proj"): the first
  // whose targets match (compressed-tensors), else the only one. Throws kUnsupported when none does.
  const QuantScheme& SchemeFor(const std::string& module) const;
  // One line for logs, /v1/models and inspect: "gptq int4 group 128 (asymmetric, act-order)".
  std::string Describe() const;
};

// Parses config.json's quantization_config (at the top level or in text_config); a config without one
// gives method kNone. Throws Error(kUnsupported) naming what is not supported, kCorrupt for a malformed
// value.
QuantConfig ParseQuantConfig(const nlohmann::json& config);

// Quantization at load (`--quantization`): "" / "none" (keep the checkpoint's weights), "fp8" (e4m3,
// one scale per row), "int8" (symmetric, one scale per row), "int4" (symmetric, one scale per 128
// columns). Throws kInvalidArgument for another name.
QuantKind ParseLoadQuantization(const std::string& name);
inline constexpr int64_t kLoadInt4Group = 128;

}  // namespace tessera
