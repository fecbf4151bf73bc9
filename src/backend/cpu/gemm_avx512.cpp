// tessera cpu backend: AVX-512 GEMM column kernels (see gemm.h). Built with -mavx512* flags and
// called only after gemm.cpp has checked cpuid, so nothing here may run at static-init time.
//
// Layout trick for bf16 weights: a 512-bit load of 32 bf16 holds, in each 32-bit lane, the pair
// (w[2i] in the low half, w[2i+1] in the high half). A left shift by 16 gives w[2i] as f32 and a
// mask of the high half gives w[2i+1], so widening costs one ALU op per 16 weights and no
// shuffles. The activations are pre-permuted to match (XLayout::kEvenOdd32, done once per call).
//
// Register tiles: MR rows of x times NR rows of w, one 16-lane f32 accumulator each, reduced
// horizontally at the end of k. The weight block is reused from L2 across the m tiles.
// GCC 12's AVX-512 intrinsics build their "don't care" operands from _mm512_undefined_*(), which
// -Wuninitialized reports at every use (a known false positive of the compiler's own headers).
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)  // a GCC-only warning (clang warns about the unknown group)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstdint>

#include "backend/cpu/gemm.h"

namespace tessera::gemm_internal {

namespace {

// How far ahead of the current chunk each weight row is prefetched.
constexpr int kPrefetchBytes = 512;  // best of 0, 512, 1024, 2048 measured (see bench/gemm_bench.cpp)

// Mask of the first `rem` (< 32) 16-bit lanes.
inline __mmask32 Mask32(int rem) { return static_cast<__mmask32>((uint64_t{1} << rem) - 1); }
// Mask of the first `count` 32-bit lanes, count clamped to [0, 16].
inline __mmask16 Mask16(int count) {
  if (count <= 0) return 0;
  if (count >= 16) return 0xffff;
  return static_cast<__mmask16>((1u << count) - 1);
}

// bf16 weights, f32 activations in kEvenOdd32 order.
struct Bf16Policy {
  using XT = float;
  using WT = uint16_t;
  static constexpr int kChunk = 32;
  struct XV {
    __m512 e, o;
  };
  using WV = XV;
  static XV LoadX(const float* p) { return {_mm512_loadu_ps(p), _mm512_loadu_ps(p + 16)}; }
  static XV LoadXTail(const float* p, int) { return LoadX(p); }  // packed rows are zero padded
  static WV Widen(__m512i v) {
    return {_mm512_castsi512_ps(_mm512_slli_epi32(v, 16)),
            _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32(static_cast<int>(0xffff0000u))))};
  }
  static WV LoadW(const uint16_t* p) { return Widen(_mm512_loadu_si512(p)); }
  // Masked load: lanes past the row are neither read (no fault) nor non-zero.
  static WV LoadWTail(const uint16_t* p, int rem) {
    return Widen(_mm512_maskz_loadu_epi16(Mask32(rem), p));
  }
  static __m512 Fma(__m512 acc, const WV& w, const XV& x) {
    acc = _mm512_fmadd_ps(w.e, x.e, acc);
    return _mm512_fmadd_ps(w.o, x.o, acc);
  }
};

// f32 weights, plain f32 activations (tails masked on both sides).
struct F32Policy {
  using XT = float;
  using WT = float;
  static constexpr int kChunk = 32;
  struct XV {
    __m512 a, b;
  };
  using WV = XV;
  static XV LoadX(const float* p) { return {_mm512_loadu_ps(p), _mm512_loadu_ps(p + 16)}; }
  static XV LoadXTail(const float* p, int rem) {
    return {_mm512_maskz_loadu_ps(Mask16(rem), p), _mm512_maskz_loadu_ps(Mask16(rem - 16), p + 16)};
  }
  static WV LoadW(const float* p) { return LoadX(p); }
  static WV LoadWTail(const float* p, int rem) { return LoadXTail(p, rem); }
  static __m512 Fma(__m512 acc, const WV& w, const XV& x) {
    acc = _mm512_fmadd_ps(w.a, x.a, acc);
    return _mm512_fmadd_ps(w.b, x.b, acc);
  }
};

// bf16 weights, activations rounded to bf16 (kBf16Pad32): one vdpbf16ps per 32 products.
struct Bf16DotPolicy {
  using XT = uint16_t;
  using WT = uint16_t;
  static constexpr int kChunk = 32;
  using XV = __m512bh;
  using WV = __m512bh;
  static XV LoadX(const uint16_t* p) { return (__m512bh)_mm512_loadu_si512(p); }
  static XV LoadXTail(const uint16_t* p, int) { return LoadX(p); }
  static WV LoadW(const uint16_t* p) { return (__m512bh)_mm512_loadu_si512(p); }
  static WV LoadWTail(const uint16_t* p, int rem) {
    return (__m512bh)_mm512_maskz_loadu_epi16(Mask32(rem), p);
  }
  static __m512 Fma(__m512 acc, const WV& w, const XV& x) { return _mm512_dpbf16_ps(acc, w, x); }
};

// 16 lanes -> 4 partial sums (lane l holds the sum of lanes l, l+4, l+8, l+12).
inline __m128 Fold(__m512 v) {
  __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}
// Horizontal sums of 4 accumulators -> [s0, s1, s2, s3], cheaper than four full reductions.
inline __m128 Reduce4(__m512 a0, __m512 a1, __m512 a2, __m512 a3) {
  return _mm_hadd_ps(_mm_hadd_ps(Fold(a0), Fold(a1)), _mm_hadd_ps(Fold(a2), Fold(a3)));
}
// One sum, added in exactly the order Reduce4 uses, so a column's result does not depend on
// whether it fell in a full tile or a tail (tails move with the thread count's block split).
inline float Reduce1(__m512 a) {
  __m128 f = Fold(a);
  f = _mm_hadd_ps(f, f);
  return _mm_cvtss_f32(_mm_hadd_ps(f, f));
}

template <int NR>
inline void StoreRow(const __m512 (&acc)[NR], float* y, bool accumulate) {
  int j = 0;
  for (; j + 4 <= NR; j += 4) {
    __m128 s = Reduce4(acc[j], acc[j + 1], acc[j + 2], acc[j + 3]);
    if (accumulate) s = _mm_add_ps(s, _mm_loadu_ps(y + j));
    _mm_storeu_ps(y + j, s);
  }
  for (; j < NR; ++j) {
    float s = Reduce1(acc[j]);
    y[j] = accumulate ? y[j] + s : s;
  }
}

// y[i0 : i0+MR, j0 : j0+NR] over the whole k.
template <class P, int MR, int NR>
inline void Tile(const GemmArgs& a, int64_t i0, int64_t j0) {
  using XT = typename P::XT;
  using WT = typename P::WT;
  const XT* x = static_cast<const XT*>(a.x) + i0 * a.ldx;
  const WT* w = static_cast<const WT*>(a.w) + j0 * a.k;
  __m512 acc[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_setzero_ps();
  const int64_t k_full = a.k - a.k % P::kChunk;
  for (int64_t p = 0; p < k_full; p += P::kChunk) {
    typename P::XV xv[MR];
    for (int i = 0; i < MR; ++i) xv[i] = P::LoadX(x + i * a.ldx + p);
    for (int j = 0; j < NR; ++j) {
      // Weight rows are streamed from DRAM once: ask for them ahead of the hardware prefetcher,
      // which ramps up too slowly on the short (k of a few KB) rows. Past the row's end this
      // lands on the next row, which is next in memory; a prefetch never faults.
      _mm_prefetch(reinterpret_cast<const char*>(w + j * a.k + p) + kPrefetchBytes, _MM_HINT_T0);
      const typename P::WV wv = P::LoadW(w + j * a.k + p);
      for (int i = 0; i < MR; ++i) acc[i][j] = P::Fma(acc[i][j], wv, xv[i]);
    }
  }
  if (const int rem = static_cast<int>(a.k - k_full); rem > 0) {
    typename P::XV xv[MR];
    for (int i = 0; i < MR; ++i) xv[i] = P::LoadXTail(x + i * a.ldx + k_full, rem);
    for (int j = 0; j < NR; ++j) {
      const typename P::WV wv = P::LoadWTail(w + j * a.k + k_full, rem);
      for (int i = 0; i < MR; ++i) acc[i][j] = P::Fma(acc[i][j], wv, xv[i]);
    }
  }
  for (int i = 0; i < MR; ++i) StoreRow<NR>(acc[i], a.y + (i0 + i) * a.n + j0, a.accumulate);
}

template <class P, int MR, int NR>
void RowTile(const GemmArgs& a, int64_t i0, int64_t j0, int64_t j1) {
  int64_t j = j0;
  for (; j + NR <= j1; j += NR) Tile<P, MR, NR>(a, i0, j);
  for (; j < j1; ++j) Tile<P, MR, 1>(a, i0, j);
}

// Tile shapes keep MR*NR accumulators + the x and w vectors within the 32 zmm registers.
template <class P>
void Columns(const GemmArgs& a, int64_t j0, int64_t j1) {
  int64_t i0 = 0;
  for (; i0 + 4 <= a.m; i0 += 4) RowTile<P, 4, 4>(a, i0, j0, j1);
  switch (a.m - i0) {
    case 3: RowTile<P, 3, 6>(a, i0, j0, j1); break;
    case 2: RowTile<P, 2, 8>(a, i0, j0, j1); break;
    case 1: RowTile<P, 1, 8>(a, i0, j0, j1); break;
    default: break;
  }
}

}  // namespace

void Bf16ColumnsAvx512(const GemmArgs& args, int64_t j0, int64_t j1) {
  Columns<Bf16Policy>(args, j0, j1);
}
void Bf16DotColumnsAvx512(const GemmArgs& args, int64_t j0, int64_t j1) {
  Columns<Bf16DotPolicy>(args, j0, j1);
}
void F32ColumnsAvx512(const GemmArgs& args, int64_t j0, int64_t j1) {
  Columns<F32Policy>(args, j0, j1);
}

}  // namespace tessera::gemm_internal
