// tessera cpu backend: AVX2+FMA GEMM column kernels (see gemm.h), for processors without
// AVX-512. Built with -mavx2 -mfma and called only after gemm.cpp has checked cpuid.
//
// Same scheme as gemm_avx512.cpp on 256-bit vectors: a load of 16 bf16 is widened to the even
// and the odd weights by a shift and a mask, against activations pre-permuted to match
// (XLayout::kEvenOdd16). AVX2 has no 16-bit masked load, so the last partial chunk of a weight
// row is copied to a zero-padded buffer (never reading past the row). The tile loop itself is
// gemm_tile.h's, shared with the AVX-512 file; this file gives it 256-bit loads and sums.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "backend/cpu/gemm.h"
#include "backend/cpu/gemm_tile.h"

namespace tessera::gemm_internal {

namespace {

// Lane mask of the first `count` 32-bit lanes (count clamped to [0, 8]) for maskload.
inline __m256i LaneMask(int count) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(count), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// The 256-bit accumulator of gemm_tile.h's loop and its horizontal sums.
struct Ymm {
  using Acc = __m256;
  // How far ahead of the current chunk each weight row is prefetched.
  static constexpr int kPrefetchBytes = 512;
  static __m256 Zero() { return _mm256_setzero_ps(); }
  // 8 lanes -> 4 partial sums.
  static __m128 Fold(__m256 v) {
    return _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  }
  static __m128 Reduce4(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
    return _mm_hadd_ps(_mm_hadd_ps(Fold(a0), Fold(a1)), _mm_hadd_ps(Fold(a2), Fold(a3)));
  }
  // Same addition order as Reduce4 (results must not depend on tile boundaries).
  static float Reduce1(__m256 a) {
    __m128 f = Fold(a);
    f = _mm_hadd_ps(f, f);
    return _mm_cvtss_f32(_mm_hadd_ps(f, f));
  }
};

struct Bf16Policy : Ymm {
  using XT = float;
  using WT = uint16_t;
  static constexpr int kChunk = 16;
  struct XV {
    __m256 e, o;
  };
  using WV = XV;
  static XV LoadX(const float* p) { return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
  static XV LoadXTail(const float* p, int) { return LoadX(p); }  // packed rows are zero padded
  static WV Widen(__m256i v) {
    return {_mm256_castsi256_ps(_mm256_slli_epi32(v, 16)),
            _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32(static_cast<int>(0xffff0000u))))};
  }
  static WV LoadW(const uint16_t* p) {
    return Widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static WV LoadWTail(const uint16_t* p, int rem) {
    alignas(32) uint16_t buf[16] = {};
    std::memcpy(buf, p, static_cast<size_t>(rem) * sizeof(uint16_t));
    return Widen(_mm256_load_si256(reinterpret_cast<const __m256i*>(buf)));
  }
  static __m256 Fma(__m256 acc, const WV& w, const XV& x) {
    acc = _mm256_fmadd_ps(w.e, x.e, acc);
    return _mm256_fmadd_ps(w.o, x.o, acc);
  }
};

struct F32Policy : Ymm {
  using XT = float;
  using WT = float;
  static constexpr int kChunk = 16;
  struct XV {
    __m256 a, b;
  };
  using WV = XV;
  static XV LoadX(const float* p) { return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
  // maskload does not touch (or fault on) the masked-off lanes.
  static XV LoadXTail(const float* p, int rem) {
    return {_mm256_maskload_ps(p, LaneMask(rem)), _mm256_maskload_ps(p + 8, LaneMask(rem - 8))};
  }
  static WV LoadW(const float* p) { return LoadX(p); }
  static WV LoadWTail(const float* p, int rem) { return LoadXTail(p, rem); }
  static __m256 Fma(__m256 acc, const WV& w, const XV& x) {
    acc = _mm256_fmadd_ps(w.a, x.a, acc);
    return _mm256_fmadd_ps(w.b, x.b, acc);
  }
};

// 16 ymm registers: 2x4 tile = 8 accumulators + 4 x vectors + 2 widened weights.
template <class P>
void Columns(const GemmArgs& a, int64_t j0, int64_t j1) {
  int64_t i0 = 0;
  for (; i0 + 2 <= a.m; i0 += 2) RowTile<P, 2, 4>(a, i0, j0, j1);
  if (i0 < a.m) RowTile<P, 1, 6>(a, i0, j0, j1);
}

}  // namespace

void Bf16ColumnsAvx2(const GemmArgs& args, int64_t j0, int64_t j1) {
  Columns<Bf16Policy>(args, j0, j1);
}
void F32ColumnsAvx2(const GemmArgs& args, int64_t j0, int64_t j1) {
  Columns<F32Policy>(args, j0, j1);
}

}  // namespace tessera::gemm_internal
