// tessera cpu backend: the row-dequantization loop shared by the AVX-512 and AVX2 dequantizers
// (gemm_quant_avx512.cpp DequantRowsAvx512, gemm_quant_avx2.cpp DequantRowsAvx2). The two walked
// rows and groups the same way, took the same vector steps under the same int4 rule and finished a
// group's tail per element the same way; only the vector width and the code conversions differ, and
// those come from the including file as V.
//
// Include it only from a file built with its instruction set's -m flags. Everything here is in an
// unnamed namespace on purpose: each including file gets its own copy, compiled with its own flags
// (a definition with external linkage could be merged by the linker into the AVX-512 copy, which
// would then run on an AVX2-only processor).
//
// V provides: Vec (an f32 vector of kWidth lanes), Set1, Sub, Mul, Store (unaligned), and the code
// conversions of kWidth columns Int4 (from kWidth / 2 bytes), Int8 and Fp8 (the e4m3 value / 2^8).
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/quant.h"

namespace tessera::gemm_internal {
namespace {

// Rows [r0, r1) of the quantized weight into out ([r1 - r0, k] f32): (code - zero) * scale per group.
// Forced inline into the one caller of each file: GCC inlines it anyway, and forced it allocates
// registers as it did for the loop written out in that function (same vector loops, checked with
// objdump), so the fold costs nothing in the tile-filling path of every quantized product.
template <class V>
[[gnu::always_inline]] inline void DequantRowsWith(const void* codes, const WeightQuant& q, int64_t k, int64_t r0, int64_t r1, float* out) {
  const int64_t rb = QuantRowBytes(q.kind, k), G = q.Groups(k);
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* row = static_cast<const uint8_t*>(codes) + r * rb;
    float* dst = out + (r - r0) * k;
    for (int64_t g = 0; g < G; ++g) {
      const int64_t c0 = g * q.group, c1 = std::min(k, c0 + q.group);
      const float s = q.scales[r * G + g], z = q.zeros ? q.zeros[r * G + g] : 0.f;
      int64_t c = c0;
      // Vector steps need kWidth whole columns; int4 also needs an even start (a byte boundary).
      if (q.kind != QuantKind::kInt4 || (c0 & 1) == 0) {
        if (q.kind == QuantKind::kFp8) {
          const typename V::Vec vs = V::Set1(s * 256.f);
          for (; c + V::kWidth <= c1; c += V::kWidth) V::Store(dst + c, V::Mul(V::Fp8(row + c), vs));
        } else {
          // (v - z) * s: the subtraction is exact (integer codes and zero points), so each value is
          // rounded once, as the portable path rounds it.
          const typename V::Vec vs = V::Set1(s), vz = V::Set1(z);
          for (; c + V::kWidth <= c1; c += V::kWidth) {
            const typename V::Vec v = q.kind == QuantKind::kInt4 ? V::Int4(row + c / 2) : V::Int8(row + c);
            V::Store(dst + c, V::Mul(V::Sub(v, vz), vs));
          }
        }
      }
      // Tails (columns past the last full vector of a group) per element, so any group size works.
      for (; c < c1; ++c) dst[c] = s * (QuantCodeValue(q.kind, row, c) - z);
    }
  }
}

}  // namespace
}  // namespace tessera::gemm_internal
