// tessera cpu backend: AVX-512 dequantization of quantized weight rows into f32 (gemm.h
// DequantRowsAvx512), 16 columns per step. Built with -mavx512* -mf16c and called only after gemm.cpp
// checked cpuid. Codes to f32:
//   int8: sign-extended bytes converted to f32;
//   int4: the 8 bytes of 16 columns split into low / high nibbles, interleaved back into column order,
//         sign-extended as (v ^ 8) - 8;
//   fp8:  e4m3 bits moved into an f16 (sign to bit 15, exponent and mantissa shifted left by 7), whose
//         value is the e4m3 value / 2^8 for normal and subnormal codes alike (the exponent biases differ
//         by 8), converted by vcvtph2ps; the 2^8 goes into the scale.
// Then (v - zero) * scale per group. Tails (columns past the last full 16 of a group) take the portable
// per-element path, so any group size works.
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)  // a GCC-only warning (clang warns about the unknown group)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <algorithm>

#include "backend/cpu/gemm.h"

namespace tessera::gemm_internal {

namespace {

inline __m512 Int4x16(const uint8_t* p) {
  const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  const __m128i low = _mm_and_si128(b, _mm_set1_epi8(0x0f));
  const __m128i high = _mm_and_si128(_mm_srli_epi16(b, 4), _mm_set1_epi8(0x0f));
  const __m128i v = _mm_sub_epi8(_mm_xor_si128(_mm_unpacklo_epi8(low, high), _mm_set1_epi8(8)), _mm_set1_epi8(8));
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(v));
}

inline __m512 Int8x16(const uint8_t* p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}

// e4m3 codes as f32 / 2^8.
inline __m512 Fp8x16(const uint8_t* p) {
  const __m256i v = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  const __m256i sign = _mm256_slli_epi16(_mm256_and_si256(v, _mm256_set1_epi16(0x80)), 8);
  const __m256i rest = _mm256_slli_epi16(_mm256_and_si256(v, _mm256_set1_epi16(0x7f)), 7);
  return _mm512_cvtph_ps(_mm256_or_si256(sign, rest));
}

}  // namespace

void DequantRowsAvx512(const void* codes, const WeightQuant& q, int64_t k, int64_t r0, int64_t r1, float* out) {
  const int64_t rb = QuantRowBytes(q.kind, k), G = q.Groups(k);
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* row = static_cast<const uint8_t*>(codes) + r * rb;
    float* dst = out + (r - r0) * k;
    for (int64_t g = 0; g < G; ++g) {
      const int64_t c0 = g * q.group, c1 = std::min(k, c0 + q.group);
      const float s = q.scales[r * G + g], z = q.zeros ? q.zeros[r * G + g] : 0.f;
      int64_t c = c0;
      // Vector steps need 16 whole columns; int4 also needs an even start (a byte boundary).
      if (q.kind != QuantKind::kInt4 || (c0 & 1) == 0) {
        if (q.kind == QuantKind::kFp8) {
          const __m512 vs = _mm512_set1_ps(s * 256.f);
          for (; c + 16 <= c1; c += 16) _mm512_storeu_ps(dst + c, _mm512_mul_ps(Fp8x16(row + c), vs));
        } else {
          // (v - z) * s: the subtraction is exact (integer codes and zero points), so each value is
          // rounded once, as the portable path rounds it.
          const __m512 vs = _mm512_set1_ps(s), vz = _mm512_set1_ps(z);
          for (; c + 16 <= c1; c += 16) {
            const __m512 v = q.kind == QuantKind::kInt4 ? Int4x16(row + c / 2) : Int8x16(row + c);
            _mm512_storeu_ps(dst + c, _mm512_mul_ps(_mm512_sub_ps(v, vz), vs));
          }
        }
      }
      for (; c < c1; ++c) dst[c] = s * (QuantCodeValue(q.kind, row, c) - z);
    }
  }
}

void QuantDotRowsAvx512(const float* x, int64_t m, int64_t k, const void* codes, const WeightQuant& q, int64_t j0,
                        int64_t j1, float* y, int64_t n, bool accumulate) {
  const int64_t rb = QuantRowBytes(q.kind, k), G = q.Groups(k);
  for (int64_t j = j0; j < j1; ++j) {
    const uint8_t* row = static_cast<const uint8_t*>(codes) + j * rb;
    __m512 acc[kQuantDotMaxRows];
    float tail[kQuantDotMaxRows] = {};
    for (int64_t i = 0; i < m; ++i) acc[i] = _mm512_setzero_ps();
    for (int64_t g = 0; g < G; ++g) {
      const int64_t c0 = g * q.group, c1 = std::min(k, c0 + q.group);
      const float s = q.scales[j * G + g], z = q.zeros ? q.zeros[j * G + g] : 0.f;
      int64_t c = c0;
      if (q.kind != QuantKind::kInt4 || (c0 & 1) == 0) {
        const __m512 vs = _mm512_set1_ps(q.kind == QuantKind::kFp8 ? s * 256.f : s), vz = _mm512_set1_ps(z);
        for (; c + 16 <= c1; c += 16) {
          __m512 w;
          if (q.kind == QuantKind::kFp8)
            w = _mm512_mul_ps(Fp8x16(row + c), vs);
          else
            w = _mm512_mul_ps(_mm512_sub_ps(q.kind == QuantKind::kInt4 ? Int4x16(row + c / 2) : Int8x16(row + c), vz), vs);
          for (int64_t i = 0; i < m; ++i) acc[i] = _mm512_fmadd_ps(w, _mm512_loadu_ps(x + i * k + c), acc[i]);
        }
      }
      for (; c < c1; ++c) {
        const float w = s * (QuantCodeValue(q.kind, row, c) - z);
        for (int64_t i = 0; i < m; ++i) tail[i] += w * x[i * k + c];
      }
    }
    for (int64_t i = 0; i < m; ++i) {
      const float v = _mm512_reduce_add_ps(acc[i]) + tail[i];
      y[i * n + j] = accumulate ? y[i * n + j] + v : v;
    }
  }
}

}  // namespace tessera::gemm_internal
