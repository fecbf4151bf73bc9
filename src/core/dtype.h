// tessera core: element types of checkpoint tensors and device buffers, and scalar conversions.
// bf16 -> f32 is exact (a shift); f32 -> bf16 rounds to nearest even, as torch does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace tessera {

// kF8E4M3: float8_e4m3fn (1 sign, 4 exponent bits biased by 7, 3 mantissa bits; no infinity, max 448),
// the element of FP8 checkpoints.
enum class DType : uint8_t { kF32, kF16, kBF16, kI32, kI64, kU8, kI8, kBool, kF64, kF8E4M3 };

size_t DTypeSize(DType t);
const char* DTypeName(DType t);  // "bf16", "f32", ...

// Parses a safetensors dtype tag ("BF16", "F32", ...); returns false when unknown.
bool ParseSafetensorsDType(const std::string& tag, DType* out);

inline float Bf16ToF32(uint16_t v) {
  uint32_t bits = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline uint16_t F32ToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);  // NaN
  uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

float F16ToF32(uint16_t h);
uint16_t F32ToF16(float f);

// float8_e4m3fn <-> f32. Decoding is exact (every e4m3 value is an f32); encoding rounds to nearest
// even and saturates to +-448 (as torch's float8_e4m3fn cast of a finite value within range does, and
// as quantizers clamp before casting); NaN stays NaN (0x7f / 0xff).
float Fp8E4M3ToF32(uint8_t v);
uint8_t F32ToFp8E4M3(float f);

// Converts n elements of `src` (of type t) to f32.
void ConvertToF32(DType t, const void* src, float* dst, size_t n);

}  // namespace tessera
