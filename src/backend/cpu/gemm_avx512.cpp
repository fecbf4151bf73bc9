// tessera cpu backend: AVX-512 GEMM column kernels (see gemm.h). Built with -mavx512* flags and
// called only after gemm.cpp has checked cpuid, so nothing here may run at static-init time.
//
// Layout trick for bf16 weights: a 512-bit load of 32 bf16 holds, in each 32-bit lane, the pair
// (w[2i] in the low half, w[2i+1] in the high half). A left shift by 16 gives w[2i] as f32 and a
// mask of the high half gives w[2i+1], so widening costs one ALU op per 16 weights and no
// shuffles. The activations are pre-permuted to match (XLayout::kEvenOdd32, done once per call).
//
// Register tiles: MR rows of x times NR rows of w, one 16-lane f32 accumulator each, reduced
// horizontally at the end of k (the loop is gemm_tile.h's, shared with the AVX2 file; this file gives
// it 512-bit loads and sums, and the tile shapes).
// GCC 12's AVX-512 intrinsics build their "don't care" operands from _mm512_undefined_*(), which
// -Wuninitialized reports at every use (a known false positive of the compiler's own headers).
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)  // a GCC-only warning (clang warns about the unknown group)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstdint>

#include "backend/cpu/gemm.h"
#include "backend/cpu/gemm_tile.h"

namespace tessera::gemm_internal {

namespace {

// Mask of the first `rem` (< 32) 16-bit lanes.
inline __mmask32 Mask32(int rem) { return static_cast<__mmask32>((uint64_t{1} << rem) - 1); }
// Mask of the first `count` 32-bit lanes, count clamped to [0, 16].
inline __mmask16 Mask16(int count) {
  if (count <= 0) return 0;
  if (count >= 16) return 0xffff;
  return static_cast<__mmask16>((1u << count) - 1);
}

// The 512-bit accumulator of gemm_tile.h's loop and its horizontal sums.
struct Zmm {
  using Acc = __m512;
  // How far ahead of the current chunk each weight row is prefetched: the best of 0, 512, 1024 and
  // 2048 measured (see bench/gemm_bench.cpp).
  static constexpr int kPrefetchBytes = 512;
  static __m512 Zero() { return _mm512_setzero_ps(); }
  // 16 lanes -> 4 partial sums (lane l holds the sum of lanes l, l+4, l+8, l+12).
  static __m128 Fold(__m512 v) {
    __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  }
  // Horizontal sums of 4 accumulators -> [s0, s1, s2, s3], cheaper than four full reductions.
  static __m128 Reduce4(__m512 a0, __m512 a1, __m512 a2, __m512 a3) {
    return _mm_hadd_ps(_mm_hadd_ps(Fold(a0), Fold(a1)), _mm_hadd_ps(Fold(a2), Fold(a3)));
  }
  // One sum, added in exactly the order Reduce4 uses (see StoreRow in gemm_tile.h).
  static float Reduce1(__m512 a) {
    __m128 f = Fold(a);
    f = _mm_hadd_ps(f, f);
    return _mm_cvtss_f32(_mm_hadd_ps(f, f));
  }
};

// bf16 weights, f32 activations in kEvenOdd32 order.
struct Bf16Policy : Zmm {
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
struct F32Policy : Zmm {
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
struct Bf16DotPolicy : Zmm {
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
