// tessera io: quantized Linear weights read from a checkpoint in their published layout (FP8 +
// weight_scale_inv, GPTQ qweight / qzeros / scales / g_idx, AWQ GEMM, compressed-tensors
// weight_packed / weight / weight_scale / weight_zero_point / weight_g_idx) and repacked into the one
// canonical layout of core/quant.h; and quantization at load of a float weight into that layout.
// Every tensor read is checked (dtype, shape) and reported as consumed, so the loader's accounting
// stays exact.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/quant.h"
#include "io/quant_config.h"
#include "io/safetensors.h"

namespace tessera {

// A quantized [n, k] weight in the canonical layout, in host memory.
struct QuantizedMatrix {
  int64_t n = 0, k = 0;
  WeightQuant meta;  // kind, group, act, act_scale (pointers unset: the owner places the arrays)
  // Codes, [n, QuantRowBytes(kind, k)]: `codes` when repacked, else `codes_in_place` (FP8 / int8
  // checkpoints already store [n, k] row-major codes: used from the mapping without a copy).
  std::vector<uint8_t> codes;
  const uint8_t* codes_in_place = nullptr;
  std::vector<float> scales;  // [n, G]
  std::vector<float> zeros;   // [n, G] or empty (symmetric)
  std::vector<int32_t> perm;  // [k] or empty
  const uint8_t* code_data() const { return codes_in_place ? codes_in_place : codes.data(); }
  int64_t row_bytes() const { return QuantRowBytes(meta.kind, k); }
  // w[r, c] in f32, c in the codes' column order (input column perm[c] when perm is set).
  float Dequantized(int64_t r, int64_t c) const;
};

class QuantizedLinearReader {
 public:
  QuantizedLinearReader(const QuantConfig& cfg, const CheckpointReader& reader) : cfg_(cfg), reader_(reader) {}

  // Whether the checkpoint stores `module` (a checkpoint module name without ".weight", e.g.
  // "model.layers.0.mlp.experts.3.gate_proj") in a quantized form: the tensors of its format are
  // present (a float `weight` means it was left unquantized).
  bool IsQuantized(const std::string& module) const;
  // Reads and repacks `module` of logical shape [n, k]; appends the names of the tensors used to
  // *consumed. Throws Error(kCorrupt) naming the tensor for a missing tensor, a wrong dtype or shape,
  // or inconsistent metadata (g_idx that is not a grouping, a weight_shape that disagrees).
  QuantizedMatrix Read(const std::string& module, int64_t n, int64_t k, std::vector<std::string>* consumed) const;

 private:
  QuantizedMatrix ReadFp8(const std::string& m, int64_t n, int64_t k, const QuantScheme& s,
                          std::vector<std::string>* consumed) const;
  QuantizedMatrix ReadGptq(const std::string& m, int64_t n, int64_t k, const QuantScheme& s,
                           std::vector<std::string>* consumed) const;
  QuantizedMatrix ReadAwq(const std::string& m, int64_t n, int64_t k, const QuantScheme& s,
                          std::vector<std::string>* consumed) const;
  QuantizedMatrix ReadCtPacked(const std::string& m, int64_t n, int64_t k, const QuantScheme& s,
                               std::vector<std::string>* consumed) const;
  QuantizedMatrix ReadCtUnpacked(const std::string& m, int64_t n, int64_t k, const QuantScheme& s,
                                 std::vector<std::string>* consumed) const;
  const TensorView& Need(const std::string& name, std::vector<std::string>* consumed) const;

  const QuantConfig& cfg_;
  const CheckpointReader& reader_;
};

// Quantization at load: a float [n, k] weight (bf16 / f16 / f32 `data` of `dtype`) to `kind` with
// symmetric scales: fp8 and int8 one per row (scale = max|row| / 448 or / 127), int4 one per
// kLoadInt4Group columns (scale = max|group| / 7). Codes are round(w / scale) to nearest even, clamped
// to the code range (int8 [-127, 127], int4 [-8, 7]; fp8 by F32ToFp8E4M3); an all-zero row or group
// gets scale 1 and zero codes. Deterministic: the same weights always give the same bytes.
QuantizedMatrix QuantizeMatrix(QuantKind kind, DType dtype, const void* data, int64_t n, int64_t k);

// Rows of several quantized matrices of the same k, kind, group and activation rule stacked into one
// (fused projections); zero points are materialised as 0 for parts without them. Parts with a column
// permutation cannot be stacked (Error kUnsupported).
QuantizedMatrix StackQuantized(const std::vector<const QuantizedMatrix*>& parts,
                               const std::vector<std::vector<int64_t>>& rows);

}  // namespace tessera
