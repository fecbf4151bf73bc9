// tessera core: code decoding of the quantized weight layout (see quant.h).
#include "core/quant.h"

#include "core/dtype.h"

namespace tessera {

float QuantCodeValue(QuantKind kind, const void* row_codes, int64_t c) {
  switch (kind) {
    case QuantKind::kFp8: return Fp8E4M3ToF32(static_cast<const uint8_t*>(row_codes)[c]);
    case QuantKind::kInt8: return static_cast<float>(static_cast<const int8_t*>(row_codes)[c]);
    case QuantKind::kInt4: {
      const uint8_t b = static_cast<const uint8_t*>(row_codes)[c / 2];
      const int nibble = (c & 1) ? (b >> 4) : (b & 0xf);
      return static_cast<float>(nibble >= 8 ? nibble - 16 : nibble);
    }
    case QuantKind::kNone: break;
  }
  return 0.f;
}

int64_t QuantRowBytes(QuantKind kind, int64_t k) {
  switch (kind) {
    case QuantKind::kFp8:
    case QuantKind::kInt8: return k;
    case QuantKind::kInt4: return (k + 1) / 2;
    case QuantKind::kNone: break;
  }
  return 0;
}

const char* QuantKindName(QuantKind kind) {
  switch (kind) {
    case QuantKind::kNone: return "none";
    case QuantKind::kFp8: return "fp8";
    case QuantKind::kInt8: return "int8";
    case QuantKind::kInt4: return "int4";
  }
  return "?";
}

}  // namespace tessera
