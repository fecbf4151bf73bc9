// tessera core: dtype names, sizes and conversions (see dtype.h).
#include "core/dtype.h"

#include <cmath>

#include "core/error.h"

namespace tessera {

size_t DTypeSize(DType t) {
  switch (t) {
    case DType::kF32: case DType::kI32: return 4;
    case DType::kF16: case DType::kBF16: return 2;
    case DType::kI64: case DType::kF64: return 8;
    case DType::kU8: case DType::kI8: case DType::kBool: case DType::kF8E4M3: return 1;
  }
  return 0;
}

const char* DTypeName(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    case DType::kI32: return "i32";
    case DType::kI64: return "i64";
    case DType::kU8: return "u8";
    case DType::kI8: return "i8";
    case DType::kBool: return "bool";
    case DType::kF64: return "f64";
    case DType::kF8E4M3: return "f8_e4m3";
  }
  return "?";
}

bool ParseSafetensorsDType(const std::string& tag, DType* out) {
  static const struct { const char* tag; DType t; } kTags[] = {
      {"F32", DType::kF32}, {"F16", DType::kF16}, {"BF16", DType::kBF16}, {"I32", DType::kI32},
      {"I64", DType::kI64}, {"U8", DType::kU8},   {"I8", DType::kI8},     {"BOOL", DType::kBool},
      {"F64", DType::kF64}, {"F8_E4M3", DType::kF8E4M3}};
  for (const auto& e : kTags)
    if (tag == e.tag) { *out = e.t; return true; }
  return false;
}

float F16ToF32(uint16_t h) {
  uint32_t sign = (h >> 15) & 1, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  float v;
  if (exp == 0) v = std::ldexp(static_cast<float>(man), -24);
  else if (exp == 31) v = man ? NAN : INFINITY;
  else v = std::ldexp(static_cast<float>(man | 0x400), static_cast<int>(exp) - 25);
  return sign ? -v : v;
}

uint16_t F32ToF16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000;
  int32_t exp = static_cast<int32_t>((x >> 23) & 0xff) - 127 + 15;
  uint32_t man = x & 0x7fffff;
  if (((x >> 23) & 0xff) == 0xff) return static_cast<uint16_t>(sign | 0x7c00 | (man ? 0x200 : 0));
  if (exp >= 31) return static_cast<uint16_t>(sign | 0x7c00);
  if (exp <= 0) {
    if (exp < -10) return static_cast<uint16_t>(sign);
    man |= 0x800000;
    uint32_t shift = static_cast<uint32_t>(14 - exp);
    uint32_t half = man >> shift;
    uint32_t rem = man & ((1u << shift) - 1), mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1))) half++;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t h = sign | (static_cast<uint32_t>(exp) << 10) | (man >> 13);
  uint32_t rem = man & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++;
  return static_cast<uint16_t>(h);
}

float Fp8E4M3ToF32(uint8_t v) {
  const int exp = (v >> 3) & 0xf, man = v & 7;
  float f;
  if (exp == 0xf && man == 7) {
    f = NAN;
  } else if (exp == 0) {
    f = std::ldexp(static_cast<float>(man), -9);  // subnormal: man / 8 * 2^-6
  } else {
    f = std::ldexp(static_cast<float>(8 + man), exp - 10);  // (1 + man / 8) * 2^(exp - 7)
  }
  return (v & 0x80) ? -f : f;
}

uint8_t F32ToFp8E4M3(float f) {
  const uint8_t sign = std::signbit(f) ? 0x80 : 0;
  if (std::isnan(f)) return sign | 0x7f;
  const double a = std::fabs(static_cast<double>(f));
  if (a >= 448.0) return sign | 0x7e;  // saturate
  // The grid spacing below 2^-6 is 2^-9 (subnormals); above, 2^(e - 3) in [2^e, 2^(e+1)).
  int e = a > 0 ? static_cast<int>(std::floor(std::log2(a))) : -10;
  if (e < -6) e = -6;
  const double step = std::ldexp(1.0, e - 3);
  double q = std::nearbyint(a / step);  // ties to even under the default rounding mode
  double r = q * step;
  if (r >= 448.0) return sign | 0x7e;
  // r is exactly representable; encode it.
  if (r < std::ldexp(1.0, -6)) return sign | static_cast<uint8_t>(std::lround(r / std::ldexp(1.0, -9)));
  int re = static_cast<int>(std::floor(std::log2(r)));
  const int man = static_cast<int>(std::lround(r / std::ldexp(1.0, re - 3))) - 8;
  return sign | static_cast<uint8_t>(((re + 7) << 3) | man);
}

void ConvertToF32(DType t, const void* src, float* dst, size_t n) {
  switch (t) {
    case DType::kF32: std::memcpy(dst, src, n * 4); return;
    case DType::kBF16: {
      auto* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = Bf16ToF32(s[i]);
      return;
    }
    case DType::kF16: {
      auto* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = F16ToF32(s[i]);
      return;
    }
    case DType::kF8E4M3: {
      auto* s = static_cast<const uint8_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = Fp8E4M3ToF32(s[i]);
      return;
    }
    case DType::kF64: {
      auto* s = static_cast<const double*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = static_cast<float>(s[i]);
      return;
    }
    default:
      Fail(ErrorKind::kUnsupported, "cannot convert {} to f32", DTypeName(t));
  }
}

}  // namespace tessera
