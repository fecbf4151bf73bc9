// tessera cuda backend: device memory (caching allocator, pinned staging for uploads), step
// recording, and the ops of backend.h mapped onto the kernels of cuda_kernels.h (the dense products
// in cuda_backend_gemm.cpp, the attention layer's ops in cuda_backend_attention.cpp, MoE in
// cuda_backend_moe.cpp, sampling in cuda_backend_sampling.cpp).
#include "backend/cuda/cuda_backend.h"

#include <cublasLt.h>
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <unistd.h>  // environ

#include "backend/cuda/cuda_gemm_plan.h"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuda_switches.h"
#include "core/error.h"

namespace tessera {

namespace {

constexpr size_t kWorkspaceBytes = 32u << 20;
constexpr size_t kStagingBytes = 64u << 20;
constexpr size_t kRingBytes = 8u << 20;  // two halves of 4 MiB: a forward's metadata many times over
// Step graphs kept: the chunks of the decode steps of the batch sizes and context lengths in use,
// of denoise steps.
constexpr size_t kMaxStepGraphs = 512;
// A step's first chunk is short: the GPU idles while it is recorded (~0.5 us a command). The host
// records the later ones faster than the GPU runs the chunks before them (a decode step's ~900
// commands take ~4 us each on the GPU at batch 1), and each chunk costs a graph launch.
constexpr size_t kFirstChunkCommands = 24;
constexpr size_t kNextChunkCommands = 256;

size_t RoundSize(size_t bytes) {
  if (bytes <= 256) return 256;
  if (bytes <= (1u << 20)) {
    size_t r = 256;
    while (r < bytes) r <<= 1;
    return r;
  }
  const size_t unit = 2u << 20;
  return (bytes + unit - 1) / unit * unit;
}

// Stream copies as launchers that Enqueue can record (errors are read with cudaGetLastError).
void CopyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t s) {
  cudaMemcpyAsync(dst, src, bytes, kind, s);
}
void Copy2DAsync(float* dst, size_t dst_pitch, const float* src, size_t src_pitch, size_t width, size_t rows,
                 cudaStream_t s) {
  cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, rows, cudaMemcpyDeviceToDevice, s);
}
void ZeroAsync(void* dst, size_t bytes, cudaStream_t s) { cudaMemsetAsync(dst, 0, bytes, s); }

// Scratch copies are rounded up to powers of two (at least 256 bytes): a page table that grows by
// a page keeps its copy size, and so the step's fingerprint (cuda_step_graph.h), most of the time.
size_t ScratchBytes(size_t bytes) {
  size_t n = 256;
  while (n < bytes) n <<= 1;
  return n;
}

}  // namespace

int CudaDeviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
    return 0;
  }
  return n;
}

std::unique_ptr<Backend> MakeCudaBackend() {
  if (CudaDeviceCount() == 0)
    Fail(ErrorKind::kUnsupported, "no CUDA device is visible (cudaGetDeviceCount reports none or fails)");
  return std::make_unique<CudaBackend>(0);
}

CudaBackend::CudaBackend(int device) : device_(device) {
  // A misspelt TESSERA_CUDA_* switch would otherwise run (and benchmark) the default kernels.
  if (const std::string bad = cuda::CheckSwitches(environ); !bad.empty())
    Fail(ErrorKind::kInvalidArgument, "TESSERA_CUDA_* environment:\n{}", bad);
  Check(cudaSetDevice(device_), "cudaSetDevice");
  Check(cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, device_), "cudaDeviceGetAttribute");
  Check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  profiler_ = std::make_unique<cuda::OpProfiler>(stream_);
  graphs_ = std::make_unique<cuda::StepGraphs>(stream_, kMaxStepGraphs);
  // TESSERA_CUDA_GRAPHS=0 queues every op at once (comparisons, tests).
  using cuda::SwitchValue;
  if (const std::string v = SwitchValue("TESSERA_CUDA_GRAPHS"); !v.empty()) step_graphs_ = v != "0";
  first_chunk_commands_ = kFirstChunkCommands;
  next_chunk_commands_ = kNextChunkCommands;
  // TESSERA_CUDA_GRAPH_CHUNK=N: chunks of N commands (tests); 0: one graph a step (comparisons).
  if (const std::string v = SwitchValue("TESSERA_CUDA_GRAPH_CHUNK"); !v.empty()) {
    const long long n = std::atoll(v.c_str());
    first_chunk_commands_ = next_chunk_commands_ = n > 0 ? static_cast<size_t>(n) : SIZE_MAX;
  }
  // TESSERA_CUDA_MOE_KERNEL=simt keeps the device-grouped experts on CUDA cores (the kernels of shapes
  // that are not multiples of 32; the conformance tests run them at the models' widths through it).
  moe_tensor_cores_ = SwitchValue("TESSERA_CUDA_MOE_KERNEL") != "simt";
  moe_device_max_slots_ = moe_tensor_cores_ ? kMoeMmaMaxSlots : kMoeSimtMaxSlots;
  // The MMA kernel takes bf16 products of 9..64 rows, and small ones of 65..256 rows (see
  // UseSkinnyGemm). TESSERA_CUDA_SKINNY_MAX_ROWS / _MAX_WORK move the limits (tests, and
  // CudaBench.MatMulRows, which measures the bounds; _MAX_ROWS=0 keeps every product of more than 8
  // rows on cuBLASLt).
  skinny_max_rows_ = cuda::kSkinnyGemmDefaultRows;
  skinny_tiled_max_work_ = cuda::kSkinnyGemmTiledMaxWork;
  if (const std::string v = SwitchValue("TESSERA_CUDA_SKINNY_MAX_ROWS"); !v.empty())
    skinny_max_rows_ = std::clamp<int64_t>(std::atoll(v.c_str()), 0, cuda::kSkinnyGemmRowLimit);
  if (const std::string v = SwitchValue("TESSERA_CUDA_SKINNY_MAX_WORK"); !v.empty())
    skinny_tiled_max_work_ = std::atoll(v.c_str());
  // TESSERA_CUDA_ATTENTION_FLASH=0 sends every attention call to the per-(row, head) kernel (the
  // kernel of the shapes the tensor-core ones do not take; the attention tests run it at the models'
  // shapes through it).
  flash_attention_ = SwitchValue("TESSERA_CUDA_ATTENTION_FLASH") != "0";
  // TESSERA_CUDA_ATTENTION_DECODE=0 gives decode calls the flash kernel's few-row shape instead (the
  // shape of 2-4-row calls; the attention tests run it on decode calls through it).
  decode_attention_ = SwitchValue("TESSERA_CUDA_ATTENTION_DECODE") != "0";
  // TESSERA_CUDA_ATTENTION_WGMMA=0 gives prompts and diffusion blocks of 128-dim heads the flash
  // kernel's many-row shape (the shape of other head sizes and of builds without sm_90a code; the
  // attention tests run it at the models' shapes through it).
  wgmma_attention_ = SwitchValue("TESSERA_CUDA_ATTENTION_WGMMA") != "0";
  // TESSERA_CUDA_MOE_GROUPED_MAX_SLOTS moves the switch to the host-grouped path (tests use it).
  if (const std::string v = SwitchValue("TESSERA_CUDA_MOE_GROUPED_MAX_SLOTS"); !v.empty())
    moe_device_max_slots_ = std::atoll(v.c_str());
  cublasLtHandle_t h = nullptr;
  cuda::CheckLt(cublasLtCreate(&h), "cublasLtCreate");
  lt_ = h;
  workspace_bytes_ = kWorkspaceBytes;
  workspace_ = DeviceBuffer(*this, workspace_bytes_);
  Check(cudaHostAlloc(&staging_, kStagingBytes, cudaHostAllocDefault), "cudaHostAlloc (staging)");
  staging_bytes_ = kStagingBytes;
  Check(cudaHostAlloc(reinterpret_cast<void**>(&ring_host_), kRingBytes, cudaHostAllocDefault), "cudaHostAlloc (ring)");
  Check(cudaMalloc(reinterpret_cast<void**>(&ring_dev_), kRingBytes), "cudaMalloc (ring)");
  for (auto& ev : ring_half_done_) Check(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cudaEventCreate");
}

CudaBackend::~CudaBackend() {
  graphs_.reset();  // a step still being recorded is dropped (the backend is going away)
  cudaStreamSynchronize(stream_);
  profiler_.reset();  // prints its table when enabled
  // Buffers owned by members go back to the allocator before it is torn down (a member destroyed
  // after live_ would Free into a destroyed map: the quantized expert tables did, and every
  // quantized MoE model ended in std::terminate at exit).
  workspace_ = DeviceBuffer();
  expert_tables_.clear();
  quant_expert_tables_.clear();
  rope_inv_freq_.clear();
  plans_.clear();
  for (auto& [p, n] : live_) cudaFree(p);
  for (auto& [n, v] : cached_)
    for (void* p : v) cudaFree(p);
  if (staging_) cudaFreeHost(staging_);
  if (ring_host_) cudaFreeHost(ring_host_);
  if (ring_dev_) cudaFree(ring_dev_);
  for (auto& ev : ring_half_done_)
    if (ev) cudaEventDestroy(ev);
  if (lt_) cublasLtDestroy(static_cast<cublasLtHandle_t>(lt_));
  if (stream_) cudaStreamDestroy(stream_);
}

void CudaBackend::Check(cudaError_t e, const char* what) const {
  if (e != cudaSuccess) Fail(ErrorKind::kInternal, "CUDA error in {}: {}", what, cudaGetErrorString(e));
}

void CudaBackend::CheckLaunch(const char* what) const { Check(cudaGetLastError(), what); }

// --- Memory ----------------------------------------------------------------------------------

void* CudaBackend::Allocate(size_t bytes) {
  const size_t size = RoundSize(bytes);
  auto it = cached_.find(size);
  if (it != cached_.end() && !it->second.empty()) {
    void* p = *it->second.begin();
    it->second.erase(it->second.begin());
    live_[p] = size;
    return p;
  }
  void* p = nullptr;
  cudaError_t e = cudaMalloc(&p, size);
  if (e != cudaSuccess) {
    cudaGetLastError();
    // Give the cached blocks back to the driver and try once more. Recorded work may use them: queue
    // it first; graphs may point into them: drop those.
    FlushStep();
    graphs_->Clear();
    cudaStreamSynchronize(stream_);
    for (auto& [n, v] : cached_) {
      for (void* q : v) cudaFree(q), reserved_ -= n;
      v.clear();
    }
    e = cudaMalloc(&p, size);
    if (e != cudaSuccess) {
      cudaGetLastError();
      size_t free_b = 0, total_b = 0;
      cudaMemGetInfo(&free_b, &total_b);
      Fail(ErrorKind::kInvalidArgument,
           "CUDA out of memory allocating {:.1f} MiB (tessera holds {:.1f} MiB, device free {:.1f} of {:.1f} MiB)",
           size / 1048576.0, reserved_ / 1048576.0, free_b / 1048576.0, total_b / 1048576.0);
    }
  }
  reserved_ += size;
  live_[p] = size;
  return p;
}

void CudaBackend::Free(void* p) {
  if (!p) return;
  auto it = live_.find(p);
  if (it == live_.end()) Fail(ErrorKind::kInternal, "CudaBackend::Free of a pointer it did not allocate");
  cached_[it->second].insert(p);  // reused in stream order: later work queues after earlier work
  live_.erase(it);
}

void CudaBackend::Upload(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  FlushStep();  // the copy reads `src` now (driver staging, or a synchronous chunked copy)
  if (bytes <= (1u << 20)) {
    Check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_), "upload");
    return;
  }
  // Large uploads go through the pinned staging buffer in two halves, so the host copy of one
  // chunk overlaps the DMA of the other.
  static thread_local cudaEvent_t events[2] = {nullptr, nullptr};
  for (auto& ev : events)
    if (!ev) Check(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cudaEventCreate");
  const size_t half = staging_bytes_ / 2;
  size_t done = 0;
  for (int i = 0; done < bytes; ++i) {
    const int b = i & 1;
    const size_t n = std::min(half, bytes - done);
    char* buf = static_cast<char*>(staging_) + b * half;
    Check(cudaEventSynchronize(events[b]), "staging wait");
    std::memcpy(buf, static_cast<const char*>(src) + done, n);
    Check(cudaMemcpyAsync(static_cast<char*>(dst) + done, buf, n, cudaMemcpyHostToDevice, stream_), "upload");
    Check(cudaEventRecord(events[b], stream_), "cudaEventRecord");
    done += n;
  }
  Check(cudaStreamSynchronize(stream_), "upload sync");
}

void CudaBackend::Download(void* dst, const void* src, size_t bytes) {
  FlushStep();
  if (bytes == 0) return;
  profiler_->Mark("Download");
  Check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_), "download");
  Check(cudaStreamSynchronize(stream_), "download sync");
  profiler_->Collect();
}

void CudaBackend::CopyBuffer(void* dst, const void* src, size_t bytes) {
  if (bytes) Enqueue("device copy", CopyAsync, dst, src, bytes, cudaMemcpyDeviceToDevice, stream_);
}

void CudaBackend::Zero(void* dst, size_t bytes) {
  if (bytes) Enqueue("memset", ZeroAsync, dst, bytes, stream_);
}

void CudaBackend::Synchronize() {
  FlushStep();
  Check(cudaStreamSynchronize(stream_), "synchronize");
  profiler_->Collect();
}

void CudaBackend::FlushStep() {
  if (!graphs_ || !graphs_->recording()) return;
  // The chunk's scratch arrays were written to the ring from its start: one copy, first, brings them
  // all to the device (a replayed graph copies what the host wrote for this step).
  if (ring_head_ > chunk_ring_start_)
    graphs_->AddFirst("step scratch upload", CopyAsync, static_cast<void*>(ring_dev_ + chunk_ring_start_),
                      static_cast<const void*>(ring_host_ + chunk_ring_start_), ring_head_ - chunk_ring_start_,
                      cudaMemcpyHostToDevice, stream_);
  graphs_->Flush();
}

// Equal steps cut at equal command counts, so their chunks (and the chunks' ring offsets) are equal
// and each chunk keeps its graph.
void CudaBackend::FlushChunk() {
  FlushStep();
  chunk_ring_start_ = ring_head_;
  step_chunk_commands_ = next_chunk_commands_;
  graphs_->Begin();
}

void CudaBackend::BeginStep() {
  FlushStep();
  if (!step_graphs_ || profiler_->enabled()) return;
  // The step's scratch starts at the ring's start, so equal steps copy from equal offsets; the ring
  // is free once the work queued before has run (a forward ends with a download: no wait).
  Check(cudaStreamSynchronize(stream_), "step start");
  ring_half_ = 0;
  ring_head_ = 0;
  chunk_ring_start_ = 0;
  step_chunk_commands_ = first_chunk_commands_;
  graphs_->Begin();
}

void CudaBackend::EndStep() { FlushStep(); }

std::string CudaBackend::StepSummary() {
  const cuda::StepGraphs::Stats& st = graphs_->stats();
  std::string chunks = "; one graph a step";
  if (!step_graphs_) {
    chunks = ", graphs off";
  } else if (first_chunk_commands_ != SIZE_MAX) {
    chunks = "; a step is cut into chunks of " + std::to_string(first_chunk_commands_) + ", then " +
             std::to_string(next_chunk_commands_) + " commands, each counted";
  }
  return std::string("steps: ") + std::to_string(st.replayed) + " replayed as CUDA graphs, " +
         std::to_string(st.captured) + " captured, " + std::to_string(st.eager) + " queued op by op (" +
         std::to_string(graphs_->graphs()) + " graphs cached" + chunks + "), host recording " +
         std::to_string(st.recording_seconds * 1e3) + " ms in all";
}

bool CudaBackend::MemoryInfo(int64_t* free_bytes, int64_t* total_bytes) {
  size_t f = 0, t = 0;
  Check(cudaSetDevice(device_), "cudaSetDevice");
  Check(cudaMemGetInfo(&f, &t), "cudaMemGetInfo");
  *free_bytes = static_cast<int64_t>(f);
  *total_bytes = static_cast<int64_t>(t);
  return true;
}

// TESSERA_CUDA_PROFILER_RANGE=1: the interval between ProfileReset and ProfileReport (a benchmark
// row's timed steps) is also the profiler's capture range, so `ncu --profile-from-start off` or
// `nsys --capture-range=cudaProfilerApi` see those kernels and no set-up ones.
namespace {
bool ProfilerRangeRequested() {
  return cuda::SwitchValue("TESSERA_CUDA_PROFILER_RANGE") == "1";
}
}  // namespace

void CudaBackend::ProfileReset() {
  Synchronize();
  profiler_->Reset();
  if (ProfilerRangeRequested()) cudaProfilerStart();
}

std::string CudaBackend::ProfileReport() {
  Synchronize();
  if (ProfilerRangeRequested()) cudaProfilerStop();
  profiler_->Mark("(end)");  // closes the last op's interval
  Synchronize();
  return profiler_->Report();
}

void CudaBackend::FillRandom(void* dst, DType dtype, int64_t n, float scale, float offset, uint64_t seed) {
  if (dtype != DType::kBF16 && dtype != DType::kF32)
    Fail(ErrorKind::kUnsupported, "FillRandom: dtype {} is not supported", DTypeName(dtype));
  Enqueue("FillRandom", cuda::FillRandom, dst, dtype == DType::kBF16, n, scale, offset, seed, stream_);
}

CudaBackend::ScratchArray CudaBackend::UploadScratch(const void* src, size_t bytes) {
  ScratchArray out;
  const size_t half = kRingBytes / 2, n = ScratchBytes(bytes);
  if (bytes == 0) return out;
  if (n > half) {
    out.owned = DeviceBuffer(*this, bytes);
    Upload(out.owned.data(), src, bytes);
    out.data = out.owned.data();
    return out;
  }
  // The half in use is tracked explicitly: a half filled to its last byte leaves ring_head_ at the
  // start of the next one, which must still count as a switch (and record the event).
  if (ring_head_ + n > (ring_half_ + 1) * half) {
    FlushStep();  // switching halves waits for the GPU: not within a recorded step
    // Leave this half; before reusing the other one, wait until the copies out of it have run.
    Check(cudaEventRecord(ring_half_done_[ring_half_], stream_), "cudaEventRecord (ring)");
    ring_half_ = 1 - ring_half_;
    Check(cudaEventSynchronize(ring_half_done_[ring_half_]), "ring wait");
    ring_head_ = ring_half_ * half;
  }
  std::memcpy(ring_host_ + ring_head_, src, bytes);
  // A recorded step copies its whole scratch at once when it ends (FlushStep).
  if (!graphs_->recording())
    Check(cudaMemcpyAsync(ring_dev_ + ring_head_, ring_host_ + ring_head_, bytes, cudaMemcpyHostToDevice, stream_),
          "scratch upload");
  out.data = ring_dev_ + ring_head_;
  ring_head_ += n;
  return out;
}

const float* CudaBackend::RopeInvFreq(double theta, int64_t rotary_dim) {
  auto& buf = rope_inv_freq_[{theta, rotary_dim}];
  if (buf.empty()) {
    // Exactly as the CPU backend (and transformers) computes it: in f32, 1 / base ** (2i / dim).
    const int64_t half = rotary_dim / 2;
    std::vector<float> inv_freq(half);
    for (int64_t i = 0; i < half; ++i)
      inv_freq[i] =
          1.0f / std::pow(static_cast<float>(theta), static_cast<float>(2 * i) / static_cast<float>(rotary_dim));
    buf = DeviceBuffer::Floats(*this, std::max<int64_t>(half, 1));
    Upload(buf.data(), inv_freq.data(), half * sizeof(float));
  }
  return buf.f32();
}

// --- Row-wise ops ----------------------------------------------------------------------------

void CudaBackend::Embedding(const Tensor& table, const int32_t* ids, int64_t n, float* out) {
  profiler_->Mark("Embedding");
  const int64_t vocab = table.dim(0), dim = table.dim(1);
  for (int64_t i = 0; i < n; ++i)
    if (ids[i] < 0 || ids[i] >= vocab)
      Fail(ErrorKind::kInvalidArgument, "token id {} is out of range [0, {})", ids[i], vocab);
  if (table.dtype != DType::kBF16 && table.dtype != DType::kF32)
    Fail(ErrorKind::kUnsupported, "embedding: dtype {} is not supported on cuda", DTypeName(table.dtype));
  if (n == 0) return;
  const ScratchArray d = UploadScratch(ids, n * sizeof(int32_t));
  Enqueue("Embedding", cuda::Embedding, table.data, table.dtype == DType::kBF16, d.i32(), n, dim, out, stream_);
}

void CudaBackend::RmsNorm(const float* x, int64_t rows, int64_t dim, int64_t x_stride, const float* w, float eps,
                          bool one_plus, float* y, int64_t y_stride) {
  profiler_->Mark("RmsNorm");
  Enqueue("RmsNorm", cuda::RmsNorm, x, rows, dim, x_stride, w, eps, one_plus, y, y_stride, stream_);
}

void CudaBackend::GatedRmsNorm(const float* x, const float* z, int64_t rows, int64_t dim, const float* w,
                               float eps, float* y) {
  profiler_->Mark("GatedRmsNorm");
  Enqueue("GatedRmsNorm", cuda::GatedRmsNorm, x, z, rows, dim, w, eps, y, stream_);
}

void CudaBackend::Rope(float* x, int64_t rows, int64_t row_stride, int64_t heads, int64_t head_dim,
                       int64_t rotary_dim, const int64_t* positions, double theta) {
  profiler_->Mark("Rope");
  if (rows == 0) return;
  const float* inv_freq = RopeInvFreq(theta, rotary_dim);
  const ScratchArray d = UploadScratch(positions, rows * sizeof(int64_t));
  Enqueue("Rope", cuda::Rope, x, rows, row_stride, heads, head_dim, rotary_dim, static_cast<const int64_t*>(d.data),
          inv_freq, stream_);
}

void CudaBackend::SigmoidGate(float* x, int64_t rows, int64_t dim, int64_t x_stride, const float* gate,
                              int64_t gate_stride) {
  profiler_->Mark("SigmoidGate");
  Enqueue("SigmoidGate", cuda::SigmoidGate, x, rows, dim, x_stride, gate, gate_stride, stream_);
}

void CudaBackend::SigmoidScaleRows(float* x, int64_t rows, int64_t dim, const float* s) {
  profiler_->Mark("SigmoidScaleRows");
  Enqueue("SigmoidScaleRows", cuda::SigmoidScaleRows, x, rows, dim, s, stream_);
}

void CudaBackend::DivideRows(float* x, int64_t rows, int64_t dim, const float* divisors) {
  profiler_->Mark("DivideRows");
  if (rows == 0 || dim == 0) return;
  const ScratchArray d = UploadScratch(divisors, rows * sizeof(float));
  Enqueue("DivideRows", cuda::DivideRows, x, rows, dim, d.f32(), stream_);
}

void CudaBackend::SiluMulScaleRows(const float* gate, const float* up, int64_t rows, int64_t dim, const float* s,
                                   float* out) {
  profiler_->Mark("SiluMulScaleRows");
  Enqueue("SiluMulScaleRows", cuda::SiluMulScaleRows, gate, up, rows, dim, s, out, stream_);
}

void CudaBackend::SiluMul(const float* gate, const float* up, int64_t n, float* out) {
  profiler_->Mark("SiluMul");
  Enqueue("SiluMul", cuda::SiluMul, gate, up, n, out, stream_);
}

void CudaBackend::Add(const float* x, int64_t n, float* y) {
  profiler_->Mark("Add");
  Enqueue("Add", cuda::Add, x, n, y, stream_);
}

void CudaBackend::AddRmsNorm(const float* delta, float* h, int64_t rows, int64_t dim, const float* w, float eps,
                             bool one_plus, float* y) {
  profiler_->Mark("AddRmsNorm");
  Enqueue("AddRmsNorm", cuda::AddRmsNorm, delta, h, rows, dim, w, eps, one_plus, y, stream_);
}

void CudaBackend::Copy2D(const float* src, int64_t rows, int64_t cols, int64_t src_stride, float* dst,
                         int64_t dst_stride) {
  profiler_->Mark("Copy2D");
  if (rows == 0 || cols == 0) return;
  if (rows == 1) {
    Enqueue("Copy2D", CopyAsync, dst, src, static_cast<size_t>(cols) * 4, cudaMemcpyDeviceToDevice, stream_);
    return;
  }
  Enqueue("Copy2D", Copy2DAsync, dst, static_cast<size_t>(dst_stride) * 4, src, static_cast<size_t>(src_stride) * 4,
          static_cast<size_t>(cols) * 4, static_cast<size_t>(rows), stream_);
}

// --- Sequence ops (the attention layer's: cuda_backend_attention.cpp) ----------------------------

void CudaBackend::CausalConv1dSilu(const float* x, int64_t T, int64_t x_stride, int64_t channels, const float* w,
                                   int64_t K, const float* state, float* y) {
  profiler_->Mark("CausalConv1dSilu");
  Enqueue("CausalConv1dSilu", cuda::CausalConv1dSilu, x, T, x_stride, channels, w, K, state, y, stream_);
}

void CudaBackend::CausalConv1dUpdateState(const float* x, int64_t T, int64_t x_stride, int64_t channels,
                                          int64_t K, float* state) {
  profiler_->Mark("CausalConv1dUpdateState");
  if (K - 1 > 8) Fail(ErrorKind::kUnsupported, "cuda conv1d: kernel size {} > 9", K);
  Enqueue("CausalConv1dUpdateState", cuda::CausalConv1dUpdateState, x, T, x_stride, channels, K, state, stream_);
}

// The chunked form for a run of T tokens: long runs under kAuto (kGdnChunkedMinTokens, measured), any
// run of more than one token under kChunked (tests), none under kRecurrent; only at the shapes it has
// (key_dim 128, value_dim a multiple of 32 up to 128).
static bool UseGdnChunked(GdnMode mode, int64_t T, int64_t dk, int64_t dv) {
  if (T <= 1 || mode == GdnMode::kRecurrent || !cuda::GdnChunkedFits(dk, dv)) return false;
  return mode == GdnMode::kChunked || T >= cuda::kGdnChunkedMinTokens;
}

void CudaBackend::GatedDeltaRule(const GatedDeltaArgs& a, GdnMode mode) {
  if (UseGdnChunked(mode, a.T, a.key_dim, a.value_dim)) {
    GatedDeltaRuleBatch({a}, mode);  // the batched launcher holds the chunked form
    return;
  }
  profiler_->Mark("GatedDeltaRule");
  if (a.T == 0) return;
  if (a.key_dim > cuda::kGdnMaxKeyDim) Fail(ErrorKind::kUnsupported, "cuda gated delta rule: key_dim {} > {}", a.key_dim, cuda::kGdnMaxKeyDim);
  if (a.key_heads <= 0 || a.value_heads % a.key_heads != 0)
    Fail(ErrorKind::kInvalidArgument, "gated delta rule: {} value heads over {} key heads", a.value_heads, a.key_heads);
  DeviceBuffer qn = DeviceBuffer::Floats(*this, a.T * a.key_heads * a.key_dim);
  DeviceBuffer kn = DeviceBuffer::Floats(*this, a.T * a.key_heads * a.key_dim);
  Enqueue("GdnNormalizeQk", cuda::GdnNormalizeQk, a.q, a.k, a.qk_stride, a.T, a.key_heads, a.key_dim, qn.f32(),
          kn.f32(), stream_);
  Enqueue("GatedDeltaRecurrent", cuda::GatedDeltaRecurrent, qn.f32(), kn.f32(), a.key_heads, a.v, a.v_stride, a.g,
          a.beta, a.T, a.value_heads, a.key_dim, a.value_dim, a.state, a.out, stream_);
}

void CudaBackend::CausalConv1dSiluBatch(const float* x, int64_t x_stride, int64_t channels, const float* w,
                                        int64_t K, const std::vector<ConvSegment>& segs, float* y) {
  profiler_->Mark("CausalConv1dSiluBatch");
  if (segs.empty()) return;
  // Rows of the batch not covered by a segment keep their y; the kernel runs over the covered ones.
  std::vector<cuda::ConvSegmentParams> params;
  std::vector<int2> rows;
  int64_t R = 0;
  for (const ConvSegment& sg : segs) R = std::max(R, sg.row0 + sg.T);
  rows.assign(R, make_int2(-1, 0));
  for (size_t i = 0; i < segs.size(); ++i) {
    params.push_back({segs[i].row0, segs[i].T, segs[i].state});
    for (int64_t t = 0; t < segs[i].T; ++t) rows[segs[i].row0 + t] = make_int2(static_cast<int>(i), static_cast<int>(t));
  }
  for (const int2& r : rows)
    if (r.x < 0) {  // gaps: fall back to one launch per segment
      Backend::CausalConv1dSiluBatch(x, x_stride, channels, w, K, segs, y);
      return;
    }
  const ScratchArray dp = UploadScratch(params.data(), params.size() * sizeof(cuda::ConvSegmentParams));
  const ScratchArray dr = UploadScratch(rows.data(), rows.size() * sizeof(int2));
  Enqueue("CausalConv1dSiluBatch", cuda::CausalConv1dSiluBatch, x, R, x_stride, channels, w, K,
          static_cast<const int2*>(dr.data), static_cast<const cuda::ConvSegmentParams*>(dp.data), y, stream_);
}

void CudaBackend::CausalConv1dUpdateStateBatch(const float* x, int64_t x_stride, int64_t channels, int64_t K,
                                               const std::vector<ConvSegment>& segs) {
  profiler_->Mark("CausalConv1dUpdateStateBatch");
  if (segs.empty()) return;
  if (K - 1 > 8) Fail(ErrorKind::kUnsupported, "cuda conv1d: kernel size {} > 9", K);
  std::vector<cuda::ConvSegmentParams> params;
  for (const ConvSegment& sg : segs) params.push_back({sg.row0, sg.T, sg.state});
  const ScratchArray dp = UploadScratch(params.data(), params.size() * sizeof(cuda::ConvSegmentParams));
  Enqueue("CausalConv1dUpdateStateBatch", cuda::CausalConv1dUpdateStateBatch, x, x_stride, channels, K,
          static_cast<const cuda::ConvSegmentParams*>(dp.data), static_cast<int64_t>(params.size()), stream_);
}

void CudaBackend::CausalConv1dSiluUpdateBatch(const float* x, int64_t x_stride, int64_t channels, const float* w,
                                              int64_t K, const std::vector<ConvSegment>& segs, float* y) {
  bool rows = !segs.empty() && K >= 1 && K <= cuda::kConvMaxK && channels < (int64_t{1} << 31);
  for (const ConvSegment& sg : segs) rows = rows && sg.T == 1;
  if (!rows) {
    Backend::CausalConv1dSiluUpdateBatch(x, x_stride, channels, w, K, segs, y);
    return;
  }
  profiler_->Mark("CausalConv1dSiluUpdateBatch");
  std::vector<cuda::ConvSegmentParams> params;
  for (const ConvSegment& sg : segs) params.push_back({sg.row0, sg.T, sg.state});
  const ScratchArray dp = UploadScratch(params.data(), params.size() * sizeof(cuda::ConvSegmentParams));
  Enqueue("CausalConv1dSiluUpdateRows", cuda::CausalConv1dSiluUpdateRows, x, x_stride, channels, w, K,
          static_cast<const cuda::ConvSegmentParams*>(dp.data), static_cast<int64_t>(params.size()), y, stream_);
}

// Every run's q / k normalised at once, then the recurrent kernel for the short runs and the chunked
// form for the long ones (UseGdnChunked).
void CudaBackend::GatedDeltaRuleBatch(const std::vector<GatedDeltaArgs>& runs, GdnMode mode) {
  profiler_->Mark("GatedDeltaRuleBatch");
  std::vector<cuda::GdnRunParams> params;
  std::vector<int2> rows;
  std::vector<int64_t> chunked_lengths;
  for (const GatedDeltaArgs& a : runs) {
    if (a.T == 0) continue;
    const GatedDeltaArgs& a0 = runs[0];
    if (a.key_dim > cuda::kGdnMaxKeyDim)
      Fail(ErrorKind::kUnsupported, "cuda gated delta rule: key_dim {} > {}", a.key_dim, cuda::kGdnMaxKeyDim);
    if (a.key_heads <= 0 || a.value_heads % a.key_heads != 0)
      Fail(ErrorKind::kInvalidArgument, "gated delta rule: {} value heads over {} key heads", a.value_heads,
           a.key_heads);
    if (a.key_heads != a0.key_heads || a.value_heads != a0.value_heads || a.key_dim != a0.key_dim ||
        a.value_dim != a0.value_dim)
      Fail(ErrorKind::kInvalidArgument, "gated delta rule batch: runs with different head shapes");
    const int run = static_cast<int>(params.size());
    const bool chunked = UseGdnChunked(mode, a.T, a.key_dim, a.value_dim);
    params.push_back({a.q, a.k, a.qk_stride, a.v, a.v_stride, a.g, a.beta, a.T, a.state, a.out,
                      static_cast<int64_t>(rows.size()), chunked ? static_cast<int64_t>(chunked_lengths.size()) : -1});
    if (chunked) chunked_lengths.push_back(a.T);
    for (int64_t t = 0; t < a.T; ++t) rows.push_back(make_int2(run, static_cast<int>(t)));
  }
  if (params.empty()) return;
  const GatedDeltaArgs& a0 = runs[0];
  const int64_t R = static_cast<int64_t>(rows.size());
  DeviceBuffer qn = DeviceBuffer::Floats(*this, R * a0.key_heads * a0.key_dim);
  DeviceBuffer kn = DeviceBuffer::Floats(*this, R * a0.key_heads * a0.key_dim);
  const ScratchArray dp = UploadScratch(params.data(), params.size() * sizeof(cuda::GdnRunParams));
  const ScratchArray dr = UploadScratch(rows.data(), rows.size() * sizeof(int2));
  Enqueue("GatedDeltaRuleBatch", cuda::GatedDeltaRuleBatch, static_cast<const cuda::GdnRunParams*>(dp.data),
          static_cast<int64_t>(params.size()), static_cast<const int2*>(dr.data), R, a0.key_heads, a0.value_heads,
          a0.key_dim, a0.value_dim, qn.f32(), kn.f32(), stream_);
  if (chunked_lengths.empty()) return;
  // The chunked runs' per-(chunk, value head) records (~144 KB each, at most kGdnChunkSlots chunks a
  // head), filled and consumed pass by pass.
  const int64_t nchunked = static_cast<int64_t>(chunked_lengths.size());
  const cuda::GdnChunkPassShape shape = cuda::GdnChunkPasses(nchunked);
  DeviceBuffer records(*this, static_cast<size_t>(cuda::GdnChunkRecordsBytes(nchunked, a0.value_heads, a0.value_dim)));
  for (int group = 0; int64_t{group} * shape.runs_per_group < nchunked; ++group) {
    const auto begin = chunked_lengths.begin() + int64_t{group} * shape.runs_per_group;
    const auto end = chunked_lengths.begin() + std::min<int64_t>(nchunked, int64_t{group + 1} * shape.runs_per_group);
    const int64_t longest = *std::max_element(begin, end);
    const int64_t chunks = (longest + cuda::kGdnChunkTokens - 1) / cuda::kGdnChunkTokens;
    for (int piece = 0; int64_t{piece} * shape.chunks_per_run < chunks; ++piece)
      Enqueue("GatedDeltaChunkedPass", cuda::GatedDeltaChunkedPass, static_cast<const cuda::GdnRunParams*>(dp.data),
              static_cast<int64_t>(params.size()), group, shape.runs_per_group, shape.chunks_per_run, piece,
              qn.f32(), kn.f32(), a0.key_heads, a0.value_heads, a0.value_dim, records.data(), stream_);
  }
}

void CudaBackend::GdnGates(const float* a, const float* b, int64_t T, int64_t heads, int64_t a_stride,
                           int64_t b_stride, const float* a_log, const float* dt_bias, float* g, float* beta,
                           int64_t out_stride) {
  profiler_->Mark("GdnGates");
  Enqueue("GdnGates", cuda::GdnGates, a, b, T, heads, a_stride, b_stride, a_log, dt_bias, g, beta, out_stride,
          stream_);
}

void CudaBackend::Softmax(float* x, int64_t rows, int64_t n) {
  profiler_->Mark("Softmax");
  Enqueue("Softmax", cuda::Softmax, x, rows, n, stream_);
}

void CudaBackend::Argmax(const float* x, int64_t rows, int64_t n, int32_t* out) {
  profiler_->Mark("Argmax");
  Enqueue("Argmax", cuda::Argmax, x, rows, n, out, stream_);
}

}  // namespace tessera
