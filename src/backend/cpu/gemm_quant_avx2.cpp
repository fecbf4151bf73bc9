// tessera cpu backend: AVX2 dequantization of quantized weight rows into f32 (gemm.h DequantRowsAvx2),
// 8 columns per step; the same conversions as gemm_quant_avx512.cpp (see there) on 256-bit vectors.
// Built with -mavx2 -mfma -mf16c and called only after gemm.cpp checked cpuid.
#include <immintrin.h>

#include <algorithm>

#include <cstring>

#include "backend/cpu/gemm.h"

namespace tessera::gemm_internal {

namespace {

inline __m256 Int4x8(const uint8_t* p) {
  uint32_t word;
  std::memcpy(&word, p, 4);
  const __m128i b = _mm_cvtsi32_si128(static_cast<int>(word));
  const __m128i low = _mm_and_si128(b, _mm_set1_epi8(0x0f));
  const __m128i high = _mm_and_si128(_mm_srli_epi16(b, 4), _mm_set1_epi8(0x0f));
  const __m128i v = _mm_sub_epi8(_mm_xor_si128(_mm_unpacklo_epi8(low, high), _mm_set1_epi8(8)), _mm_set1_epi8(8));
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v));
}

inline __m256 Int8x8(const uint8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}

// e4m3 codes as f32 / 2^8.
inline __m256 Fp8x8(const uint8_t* p) {
  const __m128i v = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  const __m128i sign = _mm_slli_epi16(_mm_and_si128(v, _mm_set1_epi16(0x80)), 8);
  const __m128i rest = _mm_slli_epi16(_mm_and_si128(v, _mm_set1_epi16(0x7f)), 7);
  return _mm256_cvtph_ps(_mm_or_si128(sign, rest));
}

}  // namespace

void DequantRowsAvx2(const void* codes, const WeightQuant& q, int64_t k, int64_t r0, int64_t r1, float* out) {
  const int64_t rb = QuantRowBytes(q.kind, k), G = q.Groups(k);
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* row = static_cast<const uint8_t*>(codes) + r * rb;
    float* dst = out + (r - r0) * k;
    for (int64_t g = 0; g < G; ++g) {
      const int64_t c0 = g * q.group, c1 = std::min(k, c0 + q.group);
      const float s = q.scales[r * G + g], z = q.zeros ? q.zeros[r * G + g] : 0.f;
      int64_t c = c0;
      if (q.kind != QuantKind::kInt4 || (c0 & 1) == 0) {
        if (q.kind == QuantKind::kFp8) {
          const __m256 vs = _mm256_set1_ps(s * 256.f);
          for (; c + 8 <= c1; c += 8) _mm256_storeu_ps(dst + c, _mm256_mul_ps(Fp8x8(row + c), vs));
        } else {
          const __m256 vs = _mm256_set1_ps(s), vz = _mm256_set1_ps(z);
          for (; c + 8 <= c1; c += 8) {
            const __m256 v = q.kind == QuantKind::kInt4 ? Int4x8(row + c / 2) : Int8x8(row + c);
            _mm256_storeu_ps(dst + c, _mm256_mul_ps(_mm256_sub_ps(v, vz), vs));
          }
        }
      }
      for (; c < c1; ++c) dst[c] = s * (QuantCodeValue(q.kind, row, c) - z);
    }
  }
}

}  // namespace tessera::gemm_internal
