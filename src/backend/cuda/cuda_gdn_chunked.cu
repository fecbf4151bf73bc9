// tessera cuda backend: the chunked gated delta rule's two kernels and their launcher (the block code
// and the algebra: cuda_gdn_chunked.cuh). Runs of the batch marked chunked (GdnRunParams::first_chunk
// >= 0) take this path; the column kernel skips them. See cuda_kernels.h.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "backend/cuda/cuda_gdn_chunked.cuh"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuda_launch.cuh"
#include "backend/cuda/cuda_mma_util.cuh"
#include "backend/cuda/cuda_switches.h"

namespace tessera::cuda {

namespace {

using gdn_chunked::kC;
using gdn_chunked::kCols;
using gdn_chunked::kDk;
using gdn_chunked::kPrepSmemBytes;
using gdn_chunked::kPrepThreads;
using gdn_chunked::kStateSmemBytes;
using gdn_chunked::kStateThreads;
using gdn_chunked::RecordFloats;

__device__ gdn_chunked::Run RunOf(const GdnRunParams& p, const float* qn, const float* kn, int64_t kh) {
  const int64_t row0 = p.compact_row0 * kh * kDk;
  return {qn + row0, kn + row0, p.v, p.v_stride, p.g, p.beta, p.T, p.state, p.out};
}

// Block (chunk, value head): chunks[blockIdx.x] = (run, first row of the chunk).
__global__ void __launch_bounds__(kPrepThreads) GdnChunkPrepKernel(const GdnRunParams* runs, const int2* chunks,
                                                                   const float* qn, const float* kn, int64_t kh,
                                                                   int64_t vh, int64_t dv, float* records) {
  GridDependencyWait();
  extern __shared__ float smem[];
  const int2 c = chunks[blockIdx.x];
  const int64_t hv = blockIdx.y;
  gdn_chunked::PrepBlock(RunOf(runs[c.x], qn, kn, kh), c.y, hv, kh, vh, dv,
                         records + (static_cast<int64_t>(blockIdx.x) * vh + hv) * RecordFloats(dv), smem);
}

// Block (value head, column tile, run); runs not chunked return at once.
__global__ void __launch_bounds__(kStateThreads, 1) GdnChunkStateKernel(const GdnRunParams* runs, const float* qn,
                                                                     const float* kn, int64_t kh, int64_t vh,
                                                                     int64_t dv, const float* records) {
  GridDependencyWait();
  extern __shared__ float smem[];
  const GdnRunParams& p = runs[blockIdx.z];
  if (p.first_chunk < 0 || p.T <= 0) return;
  gdn_chunked::StateBlock(RunOf(p, qn, kn, kh), records + p.first_chunk * vh * RecordFloats(dv), blockIdx.x, kh, vh,
                          dv, static_cast<int64_t>(blockIdx.y) * kCols, smem);
}

}  // namespace

bool GdnChunkedFits(int64_t dk, int64_t dv) { return dk == kDk && dv > 0 && dv % kCols == 0 && dv + dk <= kPrepThreads; }

int64_t GdnChunkRecordFloats(int64_t dv) { return RecordFloats(dv); }

int64_t GdnChunkTokens() { return kC; }

bool GdnChunkedRequested() {
  static const bool on = SwitchValue("TESSERA_CUDA_GDN") == "chunked";
  return on;
}

void GatedDeltaChunkedRuns(const GdnRunParams* runs, int64_t n, const int2* chunks, int64_t nchunks, const float* qn,
                           const float* kn, int64_t key_heads, int64_t value_heads, int64_t dv, float* records,
                           cudaStream_t s) {
  if (n <= 0 || nchunks <= 0) return;
  // Both kernels take more than the default 48 KiB of dynamic shared memory.
  KernelResidency(GdnChunkPrepKernel, kPrepSmemBytes, kPrepThreads);
  KernelResidency(GdnChunkStateKernel, kStateSmemBytes, kStateThreads);
  LaunchKernel(GdnChunkPrepKernel, dim3(static_cast<unsigned>(nchunks), static_cast<unsigned>(value_heads)),
               kPrepThreads, kPrepSmemBytes, s)(runs, chunks, qn, kn, key_heads, value_heads, dv, records);
  LaunchKernel(GdnChunkStateKernel,
               dim3(static_cast<unsigned>(value_heads), static_cast<unsigned>(dv / kCols), static_cast<unsigned>(n)),
               kStateThreads, kStateSmemBytes, s)(runs, qn, kn, key_heads, value_heads, dv, records);
}

}  // namespace tessera::cuda
