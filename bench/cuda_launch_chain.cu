// cuda_launch_chain: what a kernel boundary costs in a batch-1 decode step (docs/PERFORMANCE.md, "What limits each
// H200 row now"; the seventeenth session's runs: `git show 5cf9cf6:docs/PERFORMANCE.md`). Streams the weights of a
// Qwen3-30B-A3B batch-1 layer (q/k/v 21.0 MB, o 16.8 MB, router 0.5 MB, experts gate/up 50.3 MB, down 25.2 MB; 48
// layers) through GEMV-like kernels (16-byte bf16 loads, 8 in flight a lane, each kernel's x the previous kernel's
// output) launched as the engine launches them (LaunchKernel: PDL, the first step's weight loads before
// GridDependencyWait), captured in one graph:
//   one   - a single kernel over all the bytes (what streaming alone takes: the reference);
//   chain - one kernel a product (240), optionally with the layer's small latency-bound kernels between
//           (--small: 1 before q/k/v, 3 between q/k/v and o, 1 before the router; 1 block each);
//   grid  - one persistent kernel, a grid-wide barrier between products (--persistent; 256 x 4 or 1024 x 1
//           threads an SM, arrivals by fence + atomicAdd or by red.release, the next product's first
//           loads issued before the barrier or not).
// Prints ms a step, TB/s and microseconds a boundary ((chain - one) / kernels). TESSERA_CUDA_PDL=0 launches
// plainly. Needs a CUDA device (built with TESSERA_CUDA and TESSERA_BENCH).
//   sms   - (--sm-sweep) the one kernel and a chain of q/k/v-sized products (21.0 MB) on a grid of N blocks
//           of 1,024 threads (one an SM) for N from 16 to every SM: how many SMs one product needs to
//           stream at the full rate (a product that owns whole attention heads has only 40 blocks).
//   cuda_launch_chain [--layers 48] [--blocks-per-sm 4] [--small] [--persistent] [--sm-sweep]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_device_util.cuh"
#include "backend/cuda/cuda_launch.cuh"

namespace {

using tessera::cuda::DotBf16x8;
using tessera::cuda::GridDependencyWait;
using tessera::cuda::LaunchKernel;
using tessera::cuda::LoadStream16Early;
using tessera::cuda::WarpSum;

constexpr int kLoads = 8;     // 16-byte loads in flight a lane
constexpr int kXDim = 2048;   // x of every product (hidden)
constexpr double kLayerMb[] = {21.0, 16.8, 0.5, 50.3, 25.2};
constexpr int kProducts = 5;

// The first step's weight loads of a product (weights: no kernel writes them, so before any wait).
__device__ __forceinline__ void FirstLoads(const uint16_t* w, int64_t n16, uint4 (&v)[kLoads]) {
  const int64_t tid = blockIdx.x * int64_t{blockDim.x} + threadIdx.x, threads = gridDim.x * int64_t{blockDim.x};
#pragma unroll
  for (int i = 0; i < kLoads; ++i) {
    const int64_t u = tid + i * threads;
    v[i] = u < n16 ? LoadStream16Early(w + u * 8) : make_uint4(0, 0, 0, 0);
  }
}

// y[warp] = the warp's share of w . x (x repeats every kXDim values), w of n16 16-byte units; v holds the
// first step's loads when `loaded`, else they are issued here (before the wait when `wait`).
__device__ __forceinline__ void StreamProduct(const uint16_t* w, int64_t n16, const float* x, float* y, bool wait,
                                              uint4 (&v)[kLoads], bool loaded) {
  const int64_t tid = blockIdx.x * int64_t{blockDim.x} + threadIdx.x, threads = gridDim.x * int64_t{blockDim.x};
  if (!loaded) FirstLoads(w, n16, v);
  if (wait) GridDependencyWait();
  float acc = 0;
  for (int64_t base = 0; base < n16; base += kLoads * threads) {
    if (base > 0) {
#pragma unroll
      for (int i = 0; i < kLoads; ++i) {
        const int64_t u = base + tid + i * threads;
        v[i] = u < n16 ? LoadStream16Early(w + u * 8) : make_uint4(0, 0, 0, 0);
      }
    }
#pragma unroll
    for (int i = 0; i < kLoads; ++i) {
      const int64_t u = base + tid + i * threads;
      if (u < n16) {
        const float4* xp = reinterpret_cast<const float4*>(x + (u * 8) % kXDim);
        acc = DotBf16x8(v[i], xp[0], xp[1], acc);
      }
    }
  }
  acc = WarpSum(acc);
  if ((threadIdx.x & 31) == 0) y[tid >> 5] = acc;
}

template <int kThreads = 256, int kBlocks = 4>
__global__ void __launch_bounds__(kThreads, kBlocks) ProductKernel(const uint16_t* w, int64_t n16, const float* x, float* y) {
  uint4 v[kLoads];
  StreamProduct(w, n16, x, y, true, v, false);
}

// A norm-like latency kernel: reads x, writes y (kXDim values).
__device__ __forceinline__ void SmallWork(const float* x, float* y) {
  __shared__ float part[32];
  float s = 0;
  for (int i = threadIdx.x; i < kXDim; i += blockDim.x) s += x[i] * x[i];
  s = WarpSum(s);
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = s;
  __syncthreads();
  float t = 0;
  for (int i = 0; i < static_cast<int>(blockDim.x) / 32; ++i) t += part[i];
  for (int i = threadIdx.x; i < kXDim; i += blockDim.x) y[i] = x[i] * rsqrtf(t / kXDim + 1e-6f);
  __syncthreads();
}

__global__ void SmallKernel(const float* x, float* y) {
  GridDependencyWait();
  SmallWork(x, y);
}

// The persistent form: phase j streams w[j] (n16[j] > 0) or is a small one done by block 0; a grid barrier
// (one counter, target = blocks x phases done) after each. kThreads x kBlocks an SM: 256 x 4 (as the chain)
// or 1024 x 1 (a quarter of the arrivals at the counter). kRed: a block arrives with one fire-and-forget
// red.release (no fence, no returned value) instead of __threadfence + atomicAdd. kPrefetch: every warp but
// the first (whose thread 0 fences and arrives: a fence waits for its own warp's loads) issues the next
// product's first loads before the barrier, so they stream while the block waits.
template <int kThreads, int kBlocks, bool kRed, bool kPrefetch = false>
__global__ void __launch_bounds__(kThreads, kBlocks)
    PersistentKernel(const uint16_t* const* w, const int64_t* n16, int phases, float* xa, float* xb, unsigned* counter) {
  GridDependencyWait();
  float* x = xa;
  float* y = xb;
  uint4 v[kLoads];
  bool loaded = false;
  for (int j = 0; j < phases; ++j) {
    if (n16[j] > 0)
      StreamProduct(w[j], n16[j], x, y, false, v, loaded);
    else if (blockIdx.x == 0)
      SmallWork(x, y);
    loaded = false;
    if (kPrefetch && threadIdx.x >= 32 && j + 1 < phases && n16[j + 1] > 0) {
      FirstLoads(w[j + 1], n16[j + 1], v);
      loaded = true;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      if constexpr (kRed) {
        asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(counter) : "memory");
      } else {
        __threadfence();
        atomicAdd(counter, 1u);
      }
      const unsigned target = gridDim.x * (j + 1u);
      unsigned seen;
      do {
        asm volatile("ld.acquire.gpu.u32 %0, [%1];" : "=r"(seen) : "l"(counter));
      } while (seen < target);
    }
    __syncthreads();
    float* t = x;
    x = y;
    y = t;
  }
}

void Check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "cuda_launch_chain: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  int layers = 48, per_sm = 4;
  bool small = false, persistent = false, sm_sweep = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--layers" && i + 1 < argc) {
      layers = std::atoi(argv[++i]);
    } else if (a == "--blocks-per-sm" && i + 1 < argc) {
      per_sm = std::atoi(argv[++i]);
    } else if (a == "--small") {
      small = true;
    } else if (a == "--persistent") {
      persistent = true;
    } else if (a == "--sm-sweep") {
      sm_sweep = true;
    } else {
      std::fprintf(stderr, "usage: cuda_launch_chain [--layers N] [--blocks-per-sm N] [--small] [--persistent] "
                           "[--sm-sweep]\n");
      return 2;
    }
  }
  if (layers < 1 || per_sm < 1 || per_sm > 4) {
    std::fprintf(stderr, "cuda_launch_chain: --layers >= 1, --blocks-per-sm 1..4\n");
    return 2;
  }
  int sms = 0;
  Check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "device");
  const int blocks = per_sm * sms;

  // All weights in one allocation: the single kernel streams it whole, the products their pieces.
  std::vector<int64_t> n16;  // per product, in launch order
  int64_t total16 = 0;
  for (int l = 0; l < layers; ++l)
    for (double mb : kLayerMb) n16.push_back(static_cast<int64_t>(mb * 1e6) / 16), total16 += n16.back();
  uint16_t* w = nullptr;
  float *xa = nullptr, *xb = nullptr;
  unsigned* counter = nullptr;
  Check(cudaMalloc(&w, total16 * 16), "weights");
  Check(cudaMemset(w, 0x3c, total16 * 16), "weights");
  Check(cudaMalloc(&xa, 1 << 20), "x");
  Check(cudaMalloc(&xb, 1 << 20), "x");
  Check(cudaMemset(xa, 0, 1 << 20), "x");
  Check(cudaMemset(xb, 0, 1 << 20), "x");
  Check(cudaMalloc(&counter, sizeof(unsigned)), "counter");
  std::vector<const uint16_t*> ptrs;
  std::vector<int64_t> phase16;  // the persistent kernel's phases (0: small)
  int64_t off = 0;
  for (size_t i = 0; i < n16.size(); ++i) {
    const int p = static_cast<int>(i % kProducts);
    const int smalls = !small ? 0 : p == 0 ? 1 : p == 1 ? 3 : p == 2 ? 1 : 0;
    for (int s = 0; s < smalls; ++s) ptrs.push_back(nullptr), phase16.push_back(0);
    ptrs.push_back(w + off * 8), phase16.push_back(n16[i]);
    off += n16[i];
  }
  const uint16_t** dptrs = nullptr;
  int64_t* dphase = nullptr;
  Check(cudaMalloc(&dptrs, ptrs.size() * sizeof(void*)), "phases");
  Check(cudaMalloc(&dphase, phase16.size() * sizeof(int64_t)), "phases");
  Check(cudaMemcpy(dptrs, ptrs.data(), ptrs.size() * sizeof(void*), cudaMemcpyHostToDevice), "phases");
  Check(cudaMemcpy(dphase, phase16.data(), phase16.size() * sizeof(int64_t), cudaMemcpyHostToDevice), "phases");

  cudaStream_t s;
  Check(cudaStreamCreate(&s), "stream");
  cudaEvent_t e0, e1;
  Check(cudaEventCreate(&e0), "event");
  Check(cudaEventCreate(&e1), "event");
  // ms a run of `record` captured as one graph (best of 10 after 3 warm-up runs).
  auto time_graph = [&](auto record) {
    cudaGraph_t g;
    cudaGraphExec_t ge;
    Check(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), "capture");
    record();
    Check(cudaStreamEndCapture(s, &g), "capture");
    Check(cudaGraphInstantiate(&ge, g, 0), "instantiate");
    float best = 1e30f;
    for (int r = 0; r < 13; ++r) {
      Check(cudaEventRecord(e0, s), "event");
      Check(cudaGraphLaunch(ge, s), "graph launch");
      Check(cudaEventRecord(e1, s), "event");
      Check(cudaEventSynchronize(e1), "run");
      float ms = 0;
      Check(cudaEventElapsedTime(&ms, e0, e1), "event");
      if (r >= 3) best = std::min(best, ms);
    }
    Check(cudaGraphExecDestroy(ge), "graph");
    Check(cudaGraphDestroy(g), "graph");
    return static_cast<double>(best);
  };
  const double bytes = static_cast<double>(total16) * 16;
  const double one = time_graph([&] { LaunchKernel(ProductKernel<>, blocks, 256, 0, s)(w, total16, xa, xb); });
  std::printf("launch-chain | %d layers, %.2f GB, %d blocks (%d an SM), PDL %s | one kernel %.3f ms, %.2f TB/s\n",
              layers, bytes / 1e9, blocks, per_sm, tessera::cuda::ProgrammaticLaunch() ? "on" : "off", one,
              bytes / one / 1e9);
  const int kernels = static_cast<int>(ptrs.size());
  const double chain = time_graph([&] {
    float* x = xa;
    float* y = xb;
    for (size_t i = 0; i < ptrs.size(); ++i) {
      if (ptrs[i] == nullptr)
        LaunchKernel(SmallKernel, 1, 256, 0, s)(x, y);
      else
        LaunchKernel(ProductKernel<>, blocks, 256, 0, s)(ptrs[i], phase16[i], x, y);
      std::swap(x, y);
    }
  });
  std::printf("launch-chain | chain of %d kernels%s | %.3f ms, %.2f TB/s, %.2f us a boundary over one kernel\n", kernels,
              small ? " (5 small a layer)" : "", chain, bytes / chain / 1e9, (chain - one) * 1e3 / kernels);
  // The persistent kernel needs every block resident at once (its barriers spin).
  auto run_persistent = [&](auto kernel, int threads, int grid_blocks, const char* what) {
    int resident = 0;
    Check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, kernel, threads, 0), "occupancy");
    if (resident * sms < grid_blocks) {
      std::printf("launch-chain | persistent kernel of %d x %d (%s) skipped: %d blocks an SM resident\n", grid_blocks,
                  threads, what, resident);
      return;
    }
    const double grid = time_graph([&] {
      Check(cudaMemsetAsync(counter, 0, sizeof(unsigned), s), "counter");
      LaunchKernel(kernel, grid_blocks, threads, 0, s)(dptrs, dphase, kernels, xa, xb, counter);
    });
    std::printf("launch-chain | one persistent kernel of %d blocks x %d, %d grid barriers (%s) | %.3f ms, %.2f TB/s, "
                "%.2f us a barrier\n",
                grid_blocks, threads, kernels, what, grid, bytes / grid / 1e9, (grid - one) * 1e3 / kernels);
  };
  if (persistent) {
    run_persistent(PersistentKernel<256, 4, false>, 256, blocks, "fence + atomicAdd");
    run_persistent(PersistentKernel<1024, 1, false>, 1024, sms, "fence + atomicAdd");
    run_persistent(PersistentKernel<256, 4, true>, 256, blocks, "red.release");
    run_persistent(PersistentKernel<1024, 1, true>, 1024, sms, "red.release");
    run_persistent(PersistentKernel<256, 4, true, true>, 256, blocks, "red.release, next loads in flight");
    run_persistent(PersistentKernel<1024, 1, true, true>, 1024, sms, "red.release, next loads in flight");
  }
  if (sm_sweep) {
    // q/k/v-sized products back to back, each on its own 21 MB of the allocation (L2 holds none of it).
    const int64_t qkv16 = static_cast<int64_t>(kLayerMb[0] * 1e6) / 16;
    const int count = static_cast<int>(std::min<int64_t>(total16 / qkv16, 240));
    for (int grid_sms : {16, 24, 32, 40, 48, 64, 80, 96, 112, sms}) {
      if (grid_sms > sms) continue;
      const auto kernel = ProductKernel<1024, 1>;
      const double all = time_graph([&] { LaunchKernel(kernel, grid_sms, 1024, 0, s)(w, total16, xa, xb); });
      const double qkv = time_graph([&] {
        float* x = xa;
        float* y = xb;
        for (int i = 0; i < count; ++i) {
          LaunchKernel(kernel, grid_sms, 1024, 0, s)(w + i * qkv16 * 8, qkv16, x, y);
          std::swap(x, y);
        }
      });
      std::printf("launch-chain | %3d blocks x 1024 | one kernel %.3f ms, %.2f TB/s | %d products of 21.0 MB: "
                  "%.2f us each, %.2f TB/s\n",
                  grid_sms, all, bytes / all / 1e9, count, qkv * 1e3 / count, qkv16 * 16.0 * count / qkv / 1e9);
    }
  }
  Check(cudaGetLastError(), "launches");
  return 0;
}
