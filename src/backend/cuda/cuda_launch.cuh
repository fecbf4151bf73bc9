// tessera cuda backend: kernel launches with programmatic dependent launch (PDL, sm_90). A decode
// step is ~900 small dependent kernels; launched plainly, each waits for the one before to finish
// and drain before its blocks are even scheduled, a few microseconds of idle GPU per kernel. With
// PDL a kernel's blocks are scheduled while its predecessor still runs and park in
// GridDependencyWait() until the predecessor has finished and its writes are visible, so the
// launch latency hides behind the predecessor's tail. Inside a captured step graph the launches
// become programmatic edges. Contract: every kernel launched with LaunchKernel calls
// GridDependencyWait() before its first global memory access (read or write), except reads of data
// no kernel writes (model weights: the wgmma few-row GEMM requests its first weight tiles before, the
// GEMV its first step's weight loads).
// Kernels of other libraries (cuBLASLt) are launched their own way and wait for everything before
// them.
// TESSERA_CUDA_PDL=0 launches plainly (A/B and a fallback); TESSERA_CUDA_SKIP_KERNELS leaves kernels
// out (a study tool, below).
#pragma once

#include <cuda_runtime.h>

#include <utility>

namespace tessera::cuda {

// First statement of every kernel launched through LaunchKernel: waits until the kernels this one
// depends on have completed (a no-op for plain launches), then lets the next kernel's blocks be
// scheduled. They can only take SM space left over once every block of this grid has started, so
// they never delay this kernel.
__device__ __forceinline__ void GridDependencyWait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Whether launches use PDL (TESSERA_CUDA_PDL, read once; on unless "0").
bool ProgrammaticLaunch();
// TESSERA_CUDA_SKIP_KERNELS=name,name,...: kernels whose (mangled) name contains one of the parts are
// not launched at all. A what-if study tool only (docs/CUDA.md): the results are wrong, but a step's
// time without a kernel family shows what that family costs inside the step's graph, overlap and
// launch gaps included, which ncu's one-kernel-at-a-time timings do not. Unset: false, at the cost of
// one static check.
bool SkipKernelForStudy(const void* kernel);

// LaunchKernel(kernel, grid, block, smem, stream)(args...): the <<<grid, block, smem, stream>>>
// launch with PDL. A failed launch is left for cudaGetLastError, as with <<<>>>.
template <class... P>
class KernelLaunch {
 public:
  KernelLaunch(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream)
      : kernel_(kernel), grid_(grid), block_(block), smem_(smem), stream_(stream) {}
  template <class... A>
  void operator()(A&&... args) const {
    if (SkipKernelForStudy(reinterpret_cast<const void*>(kernel_))) return;
    cudaLaunchAttribute attr{};
    attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t config{};
    config.gridDim = grid_;
    config.blockDim = block_;
    config.dynamicSmemBytes = smem_;
    config.stream = stream_;
    config.attrs = &attr;
    config.numAttrs = ProgrammaticLaunch() ? 1 : 0;
    cudaLaunchKernelEx(&config, kernel_, std::forward<A>(args)...);
  }

 private:
  void (*kernel_)(P...);
  dim3 grid_, block_;
  size_t smem_;
  cudaStream_t stream_;
};

template <class... P>
KernelLaunch<P...> LaunchKernel(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream) {
  return KernelLaunch<P...>(kernel, grid, block, smem, stream);
}

}  // namespace tessera::cuda
