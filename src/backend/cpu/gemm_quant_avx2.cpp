// tessera cpu backend: AVX2 dequantization of quantized weight rows into f32 (gemm.h DequantRowsAvx2),
// 8 columns per step; the same conversions as gemm_quant_avx512.cpp (see there) on 256-bit vectors, in
// gemm_dequant.h's loop (shared with that file). Built with -mavx2 -mfma -mf16c and called only after
// gemm.cpp checked cpuid.
#include <immintrin.h>

#include <cstring>

#include "backend/cpu/gemm.h"
#include "backend/cpu/gemm_dequant.h"

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

// 8 columns a step, for gemm_dequant.h's loop.
struct Lanes8 {
  using Vec = __m256;
  static constexpr int kWidth = 8;
  static __m256 Set1(float v) { return _mm256_set1_ps(v); }
  static __m256 Sub(__m256 a, __m256 b) { return _mm256_sub_ps(a, b); }
  static __m256 Mul(__m256 a, __m256 b) { return _mm256_mul_ps(a, b); }
  static void Store(float* p, __m256 v) { _mm256_storeu_ps(p, v); }
  static __m256 Int4(const uint8_t* p) { return Int4x8(p); }
  static __m256 Int8(const uint8_t* p) { return Int8x8(p); }
  static __m256 Fp8(const uint8_t* p) { return Fp8x8(p); }
};

}  // namespace

void DequantRowsAvx2(const void* codes, const WeightQuant& q, int64_t k, int64_t r0, int64_t r1, float* out) {
  DequantRowsWith<Lanes8>(codes, q, k, r0, r1, out);
}

}  // namespace tessera::gemm_internal
