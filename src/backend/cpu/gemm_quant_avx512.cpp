// tessera cpu backend: AVX-512 dequantization of quantized weight rows into f32 (gemm.h
// DequantRowsAvx512), 16 columns per step, and the few-row dot without a tile (QuantDotRowsAvx512: a
// one-row path for any shape, and a 32-column path over several rows described at its code). Built with
// -mavx512* -mf16c and called only after gemm.cpp checked cpuid. Codes to f32:
//   int8: sign-extended bytes converted to f32;
//   int4: the 8 bytes of 16 columns split into low / high nibbles, interleaved back into column order,
//         sign-extended as (v ^ 8) - 8;
//   fp8:  e4m3 bits moved into an f16 (sign to bit 15, exponent and mantissa shifted left by 7), whose
//         value is the e4m3 value / 2^8 for normal and subnormal codes alike (the exponent biases differ
//         by 8), converted by vcvtph2ps; the 2^8 goes into the scale.
// Then (v - zero) * scale per group, in gemm_dequant.h's loop (shared with gemm_quant_avx2.cpp). Tails
// (columns past the last full 16 of a group) take the portable per-element path, so any group size works.
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)  // a GCC-only warning (clang warns about the unknown group)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <algorithm>

#include "backend/cpu/gemm.h"
#include "backend/cpu/gemm_dequant.h"

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

// 16 columns a step, for gemm_dequant.h's loop.
struct Lanes16 {
  using Vec = __m512;
  static constexpr int kWidth = 16;
  static __m512 Set1(float v) { return _mm512_set1_ps(v); }
  static __m512 Sub(__m512 a, __m512 b) { return _mm512_sub_ps(a, b); }
  static __m512 Mul(__m512 a, __m512 b) { return _mm512_mul_ps(a, b); }
  static void Store(float* p, __m512 v) { _mm512_storeu_ps(p, v); }
  static __m512 Int4(const uint8_t* p) { return Int4x16(p); }
  static __m512 Int8(const uint8_t* p) { return Int8x16(p); }
  static __m512 Fp8(const uint8_t* p) { return Fp8x16(p); }
};

}  // namespace

void DequantRowsAvx512(const void* codes, const WeightQuant& q, int64_t k, int64_t r0, int64_t r1, float* out) {
  DequantRowsWith<Lanes16>(codes, q, k, r0, r1, out);
}

namespace {

// Any group size and column count: one weight row at a time, tails per element.
void QuantDotRowsAnyShape(const float* x, int64_t m, int64_t k, const void* codes, const WeightQuant& q, int64_t j0,
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


// --- the fast path: k and the group size multiples of 32 --------------------------------------------
// NR weight rows at a time (independent accumulators, prefetched a few cache lines ahead, as the bf16
// column kernels do), 32 columns a step, each weight value (code - zero) * scale rounded once as the
// path above rounds it:
//   int4: the 16 bytes of 32 columns zero-extended to 16 dwords; a dword's low nibble is an even
//         column's code, its high nibble (after a shift) the odd column's; vpermps looks both up in a
//         16-entry table of the group's (code - zero) * scale (it reads only an index's low 4 bits).
//         The input is pre-split into each 32 columns' 16 even then 16 odd values (QuantDotSplitInput).
//   int8: sign-extended, converted, (v - zero) * scale; fp8: e4m3 bits into an f16 (sign kept by an
//         arithmetic shift), vcvtph2ps, * scale * 2^8.
template <QuantKind K>
struct FastCodes {
  // Per weight row and group: what turns codes into values.
  struct Group {
    __m512 a, b;  // int4: a = the table; int8: a = scale, b = zero; fp8: a = scale * 2^8
  };
  static Group Make(float s, float z) {
    if constexpr (K == QuantKind::kInt4) {
      const __m512 codes = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, -8, -7, -6, -5, -4, -3, -2, -1);
      return {_mm512_mul_ps(_mm512_sub_ps(codes, _mm512_set1_ps(z)), _mm512_set1_ps(s)), _mm512_setzero_ps()};
    } else if constexpr (K == QuantKind::kInt8) {
      return {_mm512_set1_ps(s), _mm512_set1_ps(z)};
    } else {
      return {_mm512_set1_ps(s * 256.f), _mm512_setzero_ps()};
    }
  }
  // The 32 values of the step at `row` (row start + the step's byte offset): w0, w1 multiply the
  // input's first and second 16 values of the step (int4: the even and the odd columns).
  static void Values(const uint8_t* p, const Group& g, __m512* w0, __m512* w1) {
    if constexpr (K == QuantKind::kInt4) {
      const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
      *w0 = _mm512_permutexvar_ps(v, g.a);
      *w1 = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), g.a);
    } else if constexpr (K == QuantKind::kInt8) {
      const __m512 v0 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
      const __m512 v1 =
          _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16))));
      *w0 = _mm512_mul_ps(_mm512_sub_ps(v0, g.b), g.a);
      *w1 = _mm512_mul_ps(_mm512_sub_ps(v1, g.b), g.a);
    } else {
      // byte b in the high half of a word, then an arithmetic shift by 1: sign at bit 15 (and 14,
      // cleared), exponent and mantissa at bits 7..13: the f16 of the e4m3 value / 2^8.
      const __m512i v = _mm512_slli_epi16(_mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 8);
      const __m512i h = _mm512_and_si512(_mm512_srai_epi16(v, 1), _mm512_set1_epi16(static_cast<int16_t>(0xbf80)));
      *w0 = _mm512_mul_ps(_mm512_cvtph_ps(_mm512_castsi512_si256(h)), g.a);
      *w1 = _mm512_mul_ps(_mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1)), g.a);
    }
  }
  static constexpr int64_t kStepBytes = K == QuantKind::kInt4 ? 16 : 32;
};

constexpr int kQuantPrefetchBytes = 512;

// y[0:M, j0:j0+NR] over the whole k (x: M rows of k, int4: split).
template <QuantKind K, int M, int NR>
void FastTile(const float* x, int64_t k, const uint8_t* codes, int64_t rb, const WeightQuant& q, int64_t j0,
              float* y, int64_t n, bool accumulate) {
  using F = FastCodes<K>;
  const int64_t G = q.Groups(k);
  __m512 acc[M][NR];
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_setzero_ps();
  for (int64_t g = 0; g < G; ++g) {
    typename F::Group gv[NR];
    for (int j = 0; j < NR; ++j) {
      const int64_t s = (j0 + j) * G + g;
      gv[j] = F::Make(q.scales[s], q.zeros ? q.zeros[s] : 0.f);
    }
    // The last group may be shorter (k a multiple of 32, not of the group: FP8 blocks of 128).
    for (int64_t c = g * q.group, c_end = std::min(k, c + q.group); c < c_end; c += 32) {
      __m512 x0[M], x1[M];
      for (int i = 0; i < M; ++i) {
        x0[i] = _mm512_loadu_ps(x + i * k + c);
        x1[i] = _mm512_loadu_ps(x + i * k + c + 16);
      }
      const int64_t off = c / 32 * F::kStepBytes;
      for (int j = 0; j < NR; ++j) {
        const uint8_t* p = codes + (j0 + j) * rb + off;
        _mm_prefetch(reinterpret_cast<const char*>(p) + kQuantPrefetchBytes, _MM_HINT_T0);
        __m512 w0, w1;
        F::Values(p, gv[j], &w0, &w1);
        for (int i = 0; i < M; ++i) acc[i][j] = _mm512_fmadd_ps(w1, x1[i], _mm512_fmadd_ps(w0, x0[i], acc[i][j]));
      }
    }
  }
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < NR; ++j) {
      const float v = _mm512_reduce_add_ps(acc[i][j]);
      float& o = y[i * n + j0 + j];
      o = accumulate ? o + v : v;
    }
}

template <QuantKind K, int M>
void FastRows(const float* x, int64_t k, const void* codes, const WeightQuant& q, int64_t j0, int64_t j1, float* y,
              int64_t n, bool accumulate) {
  constexpr int NR = M <= 2 ? 4 : 2;  // M x NR accumulators, the inputs and the tables in 32 registers
  const auto* c = static_cast<const uint8_t*>(codes);
  const int64_t rb = QuantRowBytes(K, k);
  int64_t j = j0;
  for (; j + NR <= j1; j += NR) FastTile<K, M, NR>(x, k, c, rb, q, j, y, n, accumulate);
  for (; j < j1; ++j) FastTile<K, M, 1>(x, k, c, rb, q, j, y, n, accumulate);
}

template <QuantKind K>
void FastRowsAnyM(const float* x, int64_t m, int64_t k, const void* codes, const WeightQuant& q, int64_t j0,
                  int64_t j1, float* y, int64_t n, bool accumulate) {
  switch (m) {
    case 1: FastRows<K, 1>(x, k, codes, q, j0, j1, y, n, accumulate); break;
    case 2: FastRows<K, 2>(x, k, codes, q, j0, j1, y, n, accumulate); break;
    case 3: FastRows<K, 3>(x, k, codes, q, j0, j1, y, n, accumulate); break;
    default: FastRows<K, 4>(x, k, codes, q, j0, j1, y, n, accumulate); break;
  }
}

}  // namespace

bool QuantDotFast(const WeightQuant& q, int64_t k) { return k % 32 == 0 && q.group % 32 == 0; }

void QuantDotSplitInput(const float* x, int64_t m, int64_t k, float* out) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t c = 0; c < k; c += 32)
      for (int64_t t = 0; t < 16; ++t) {
        out[i * k + c + t] = x[i * k + c + 2 * t];
        out[i * k + c + 16 + t] = x[i * k + c + 2 * t + 1];
      }
}

void QuantDotRowsAvx512(const float* x, int64_t m, int64_t k, const void* codes, const WeightQuant& q, int64_t j0,
                        int64_t j1, float* y, int64_t n, bool accumulate) {
  if (!QuantDotFast(q, k)) {
    QuantDotRowsAnyShape(x, m, k, codes, q, j0, j1, y, n, accumulate);
    return;
  }
  switch (q.kind) {
    case QuantKind::kInt4: FastRowsAnyM<QuantKind::kInt4>(x, m, k, codes, q, j0, j1, y, n, accumulate); break;
    case QuantKind::kInt8: FastRowsAnyM<QuantKind::kInt8>(x, m, k, codes, q, j0, j1, y, n, accumulate); break;
    default: FastRowsAnyM<QuantKind::kFp8>(x, m, k, codes, q, j0, j1, y, n, accumulate); break;
  }
}

}  // namespace tessera::gemm_internal
