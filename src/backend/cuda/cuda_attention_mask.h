// tessera cuda backend: which keys one query row of an attention call sees, for every mask of
// AttentionArgs (causal, block-causal, a sliding window, DiffusionGemma's canvas rows), as one
// contiguous range [first, last]: every mask the CPU backend implements is an interval, so a kernel
// walks [first, last] and needs no per-key test. Host and device code alike (no CUDA types): the
// kernels call it through cuda_device_util.cuh, and an every-build test (CudaAttentionMask.*) holds it
// to the masks' definitions, so the indexing is checked on machines without a GPU.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define TESSERA_CUDA_HD __host__ __device__ __forceinline__
#else
#define TESSERA_CUDA_HD inline
#endif

namespace tessera::cuda {

struct KeyRange {
  int64_t first = 0;  // first visible key (absolute position)
  int64_t last = 0;   // last visible key, inclusive
};

// Row t (absolute position first_pos + t) of a call of T rows:
// - causal: keys [0, pos]; block-causal (block_size > 0): up to the end of pos's block, never past the
//   call's last row;
// - sliding window W > 0 (causal rows): keys (pos - W, pos];
// - canvas rows (canvas_begin >= 0, t >= canvas_begin; docs/DIFFUSION_GEMMA.md 3.2): every key of the
//   call (the whole canvas, bidirectional) and every key before the canvas, or with W only the last
//   W - 1 of those: the same set for every canvas row (transformers' cached generation path).
TESSERA_CUDA_HD KeyRange AttentionKeyRange(int64_t first_pos, int64_t T, int64_t block_size, int64_t window,
                                           int64_t canvas_begin, int64_t t) {
  const int64_t pos = first_pos + t, total = first_pos + T;
  const bool canvas = canvas_begin >= 0 && t >= canvas_begin;
  KeyRange r;
  if (canvas) {
    r.last = total - 1;
  } else if (block_size > 0) {
    const int64_t block_end = (pos / block_size + 1) * block_size - 1;
    r.last = block_end < total - 1 ? block_end : total - 1;
  } else {
    r.last = pos;
  }
  if (window > 0) {
    const int64_t from = canvas ? first_pos + canvas_begin - (window - 1) : pos - window + 1;
    r.first = from > 0 ? from : 0;
  }
  return r;
}

}  // namespace tessera::cuda
