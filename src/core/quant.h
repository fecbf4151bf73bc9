// tessera core: the one layout of quantized Linear weights that every checkpoint format (FP8
// block-wise, GPTQ, AWQ, compressed-tensors) and quantization at load are turned into by io, and that
// every backend kernel multiplies. Kept in core because io produces it and backend consumes it.
#pragma once

#include <cstdint>

namespace tessera {

// A quantized Linear weight in the one layout every checkpoint format is repacked into at load
// (io/quant_formats.h) and every backend multiplies: codes row-major [n, k] in Tensor::data
//   kFp8:  float8_e4m3fn bytes (Tensor::dtype kF8E4M3);
//   kInt8: int8 (kI8);
//   kInt4: signed 4-bit values, two per byte (kU8, [n, k / 2] bytes): column 2c in the low nibble of
//          byte c of its row, column 2c + 1 in the high nibble; k is even;
// and per row one f32 scale (and, for asymmetric schemes, one f32 zero point) for each `group`
// consecutive columns: w[r, c] = scales[r * G + c / group] * (code[r, c] - zeros[r * G + c / group]),
// G = ceil(k / group). Block-wise FP8 scales are repeated down their block's rows, so that rows of
// different weights stack (fused projections) and every kernel sees one scale layout.
enum class QuantKind : uint8_t { kNone, kFp8, kInt8, kInt4 };
// W8A8 schemes also round the product's input: each row x to q(x / s) * s with q the weight's code
// type (int8: round half to even, clamp to +-127; fp8: e4m3 round to nearest even, saturate at 448),
// s = max|x| / qmax per row (kDynamicPerToken) or the checkpoint's static input scale (kStatic).
enum class ActQuant : uint8_t { kNone, kDynamicPerToken, kStatic };
struct WeightQuant {
  QuantKind kind = QuantKind::kNone;
  int64_t group = 0;              // columns per scale (k for one scale per row)
  const float* scales = nullptr;  // [n, G]
  const float* zeros = nullptr;   // [n, G]; null: symmetric (zero point 0)
  // GPTQ act-order: column c of the codes multiplies input column perm[c] ([k]; null: identity), so
  // that each group's columns are contiguous. Host memory on host backends, device memory on devices.
  const int32_t* perm = nullptr;
  ActQuant act = ActQuant::kNone;
  float act_scale = 0.f;  // kStatic
  int64_t Groups(int64_t k) const { return group > 0 ? (k + group - 1) / group : 0; }
};

// The value of code index `c` of row `codes` (a row of [k] codes in `kind`'s storage), before scale
// and zero point: e4m3 decoded, int8 as is, int4 sign-extended from its nibble.
float QuantCodeValue(QuantKind kind, const void* row_codes, int64_t c);
// Bytes of one row of k codes.
int64_t QuantRowBytes(QuantKind kind, int64_t k);
const char* QuantKindName(QuantKind kind);  // "none", "fp8", "int8", "int4"

}  // namespace tessera
