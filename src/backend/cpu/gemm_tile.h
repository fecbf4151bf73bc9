// tessera cpu backend: the register-tile loop shared by the AVX-512 and AVX2 column kernels
// (gemm_avx512.cpp, gemm_avx2.cpp). The two ran the same loop over k, the same prefetch and the same
// reduce-and-store, and differed only in vector width, loads and horizontal sums; those come from
// the including file as the policy P, so every instantiation is the loop each file used to spell out.
//
// Include it only from a file built with its instruction set's -m flags (the *_avx512.cpp /
// *_avx2.cpp files). Everything here is in an unnamed namespace on purpose: each including file gets
// its own copy, compiled with its own flags. With external linkage the linker would keep one copy of
// a shared inline definition, and an AVX-512 copy could then run on an AVX2-only processor.
//
// P provides: XT / WT (activation and weight element types), kChunk (k values per step), XV / WV and
// LoadX / LoadXTail / LoadW / LoadWTail / Fma (one step of products), and, from the file's ISA base:
// Acc (the accumulator vector), Zero(), Reduce4 (4 accumulators -> their 4 sums in one __m128),
// Reduce1 (one sum, added in Reduce4's order), kPrefetchBytes.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "backend/cpu/gemm.h"

namespace tessera::gemm_internal {
namespace {

// Stores NR column sums of one output row (+ y when accumulating): four at a time while they last,
// then one at a time. Reduce1 adds in Reduce4's order, so a column's result does not depend on
// whether it fell in a full tile or a tail (tails move with the thread count's block split).
template <class P, int NR>
inline void StoreRow(const typename P::Acc (&acc)[NR], float* y, bool accumulate) {
  int j = 0;
  for (; j + 4 <= NR; j += 4) {
    __m128 s = P::Reduce4(acc[j], acc[j + 1], acc[j + 2], acc[j + 3]);
    if (accumulate) s = _mm_add_ps(s, _mm_loadu_ps(y + j));
    _mm_storeu_ps(y + j, s);
  }
  for (; j < NR; ++j) {
    float s = P::Reduce1(acc[j]);
    y[j] = accumulate ? y[j] + s : s;
  }
}

// y[i0 : i0+MR, j0 : j0+NR] over the whole k: MR rows of x times NR rows of w, one accumulator each,
// reduced horizontally at the end of k. The weight block is reused from L2 across the m tiles.
template <class P, int MR, int NR>
inline void Tile(const GemmArgs& a, int64_t i0, int64_t j0) {
  using XT = typename P::XT;
  using WT = typename P::WT;
  const XT* x = static_cast<const XT*>(a.x) + i0 * a.ldx;
  const WT* w = static_cast<const WT*>(a.w) + j0 * a.k;
  typename P::Acc acc[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) acc[i][j] = P::Zero();
  const int64_t k_full = a.k - a.k % P::kChunk;
  for (int64_t p = 0; p < k_full; p += P::kChunk) {
    typename P::XV xv[MR];
    for (int i = 0; i < MR; ++i) xv[i] = P::LoadX(x + i * a.ldx + p);
    for (int j = 0; j < NR; ++j) {
      // Weight rows are streamed from DRAM once: ask for them ahead of the hardware prefetcher,
      // which ramps up too slowly on the short (k of a few KB) rows. Past the row's end this
      // lands on the next row, which is next in memory; a prefetch never faults.
      _mm_prefetch(reinterpret_cast<const char*>(w + j * a.k + p) + P::kPrefetchBytes, _MM_HINT_T0);
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
  for (int i = 0; i < MR; ++i) StoreRow<P, NR>(acc[i], a.y + (i0 + i) * a.n + j0, a.accumulate);
}

// One band of MR rows across columns [j0, j1): full NR-wide tiles, then single columns.
template <class P, int MR, int NR>
void RowTile(const GemmArgs& a, int64_t i0, int64_t j0, int64_t j1) {
  int64_t j = j0;
  for (; j + NR <= j1; j += NR) Tile<P, MR, NR>(a, i0, j);
  for (; j < j1; ++j) Tile<P, MR, 1>(a, i0, j);
}

}  // namespace
}  // namespace tessera::gemm_internal
