// tessera cpu backend: GEMM dispatch, activation packing, threading and the portable kernel (see
// gemm.h). The vectorised kernels live in gemm_avx512.cpp / gemm_avx2.cpp, compiled with their
// own -m flags and only called after a cpuid + xgetbv check, so the binary still runs on
// processors without them. This file itself is baseline x86-64.
#include "backend/cpu/gemm.h"

#include <cpuid.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/thread_pool.h"

namespace tessera {

namespace {

using gemm_internal::ColumnsFn;
using gemm_internal::GemmArgs;
using gemm_internal::XLayout;

enum class Kernel : int { kGeneric, kAvx2, kAvx512, kAvx512Bf16 };
constexpr const char* kKernelNames[] = {"generic", "avx2", "avx512", "avx512bf16"};

struct CpuFeatures {
  bool avx2_fma = false, avx512 = false, avx512_bf16 = false;
};

CpuFeatures DetectCpu() {
  CpuFeatures f;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool fma = c & (1u << 12), osxsave = c & (1u << 27), avx = c & (1u << 28);
  if (!osxsave || !avx) return f;
  // The OS must save the ymm (XCR0 bits 1-2) and zmm/opmask (bits 5-7) state across switches.
  uint32_t xcr0_lo = 0, xcr0_hi = 0;
  __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  const bool os_ymm = (xcr0_lo & 0x6u) == 0x6u;
  const bool os_zmm = (xcr0_lo & 0xe6u) == 0xe6u;
  if (__get_cpuid_max(0, nullptr) < 7) return f;
  __cpuid_count(7, 0, a, b, c, d);
  const bool avx2 = b & (1u << 5);
  const bool avx512f = b & (1u << 16), avx512dq = b & (1u << 17), avx512bw = b & (1u << 30),
             avx512vl = b & (1u << 31);
  __cpuid_count(7, 1, a, b, c, d);
  const bool bf16 = a & (1u << 5);
  f.avx2_fma = os_ymm && avx2 && fma;
  f.avx512 = f.avx2_fma && os_zmm && avx512f && avx512dq && avx512bw && avx512vl;
  f.avx512_bf16 = f.avx512 && bf16;
  return f;
}

const CpuFeatures& Cpu() {
  static const CpuFeatures features = DetectCpu();
  return features;
}

bool Supported(Kernel kernel) {
  switch (kernel) {
    case Kernel::kGeneric: return true;
    case Kernel::kAvx2: return Cpu().avx2_fma;
    case Kernel::kAvx512: return Cpu().avx512;
    case Kernel::kAvx512Bf16: return Cpu().avx512_bf16;
  }
  return false;
}

Kernel AutoChoice() {
  const char* env = std::getenv("TESSERA_CPU_BF16_ACTIVATIONS");
  if (env && std::string_view(env) == "1" && Supported(Kernel::kAvx512Bf16)) return Kernel::kAvx512Bf16;
  if (Supported(Kernel::kAvx512)) return Kernel::kAvx512;
  if (Supported(Kernel::kAvx2)) return Kernel::kAvx2;
  return Kernel::kGeneric;
}

std::atomic<int> g_kernel{-1};  // -1: not chosen yet

Kernel Current() {
  int k = g_kernel.load(std::memory_order_relaxed);
  if (k < 0) {
    k = static_cast<int>(AutoChoice());
    g_kernel.store(k, std::memory_order_relaxed);
  }
  return static_cast<Kernel>(k);
}

// Portable kernel: one output at a time, summed in k order.
template <typename WT>
void GenericColumns(const GemmArgs& a, int64_t j0, int64_t j1) {
  const float* x = static_cast<const float*>(a.x);
  const WT* w = static_cast<const WT*>(a.w);
  for (int64_t j = j0; j < j1; ++j) {
    const WT* wj = w + j * a.k;
    for (int64_t i = 0; i < a.m; ++i) {
      const float* xi = x + i * a.ldx;
      float acc = 0.f;
      if constexpr (sizeof(WT) == 2) {
        for (int64_t p = 0; p < a.k; ++p) acc += xi[p] * Bf16ToF32(wj[p]);
      } else {
        for (int64_t p = 0; p < a.k; ++p) acc += xi[p] * wj[p];
      }
      float& out = a.y[i * a.n + j];
      out = a.accumulate ? out + acc : acc;
    }
  }
}

// Rounds k up to a multiple of `to`.
int64_t RoundUp(int64_t k, int64_t to) { return (k + to - 1) / to * to; }

// Per calling thread, reused across calls so decode steps do not allocate.
thread_local std::vector<float> t_packed_f32;
thread_local std::vector<uint16_t> t_packed_bf16;

// Lays x out as `layout` wants into the given storage; returns the packed rows and sets *ldx.
const void* PackXInto(const float* x, int64_t m, int64_t k, XLayout layout, int64_t* ldx,
                      std::vector<float>& t_packed_f32, std::vector<uint16_t>& t_packed_bf16) {
  if (layout == XLayout::kPlain) {
    *ldx = k;
    return x;
  }
  if (layout == XLayout::kBf16Pad32) {
    *ldx = RoundUp(k, 32);
    t_packed_bf16.resize(static_cast<size_t>(m * *ldx));
    for (int64_t i = 0; i < m; ++i) {
      uint16_t* dst = t_packed_bf16.data() + i * *ldx;
      for (int64_t p = 0; p < k; ++p) dst[p] = F32ToBf16(x[i * k + p]);
      std::fill(dst + k, dst + *ldx, uint16_t{0});
    }
    return t_packed_bf16.data();
  }
  // Whole chunks with plain loops (no index arithmetic a value: at decode the serial packing of a
  // step's ~25 inputs showed in the 16-thread profile), the partial last chunk zero padded.
  const int64_t chunk = layout == XLayout::kEvenOdd32 ? 32 : 16, half = chunk / 2;
  *ldx = RoundUp(k, chunk);
  t_packed_f32.resize(static_cast<size_t>(m * *ldx));
  for (int64_t i = 0; i < m; ++i) {
    const float* src = x + i * k;
    float* dst = t_packed_f32.data() + i * *ldx;
    const int64_t whole = k / chunk * chunk;
    for (int64_t base = 0; base < whole; base += chunk)
      for (int64_t q = 0; q < half; ++q) {
        dst[base + q] = src[base + 2 * q];
        dst[base + half + q] = src[base + 2 * q + 1];
      }
    if (whole < k) {
      std::fill(dst + whole, dst + *ldx, 0.f);
      for (int64_t p = whole; p < k; ++p) {
        const int64_t q = p - whole;
        dst[whole + (q & 1) * half + q / 2] = src[p];
      }
    }
  }
  return t_packed_f32.data();
}

// The same into this thread's reused storage.
const void* PackX(const float* x, int64_t m, int64_t k, XLayout layout, int64_t* ldx) {
  return PackXInto(x, m, k, layout, ldx, t_packed_f32, t_packed_bf16);
}

// Weight bytes per column block: the block stays in L2 while every m tile passes over it.
constexpr int64_t kBlockBytes = 384 << 10;
// Column blocks are multiples of this (the tile widths 8, 6, 4 all divide it).
constexpr int64_t kBlockAlign = 24;
// Below this many multiply-adds, waking the pool costs more than it saves.
constexpr int64_t kMinParallelMacs = int64_t{1} << 16;

void Run(ColumnsFn columns, XLayout layout, size_t weight_size, const float* x, int64_t m,
         int64_t k, const void* w, int64_t n, float* y, ThreadPool* pool, bool accumulate) {
  if (m < 0 || n < 0 || k < 0)
    Fail(ErrorKind::kInvalidArgument, "gemm: negative shape m={} n={} k={}", m, n, k);
  if (m == 0 || n == 0) return;
  if (k == 0) {
    if (!accumulate) std::fill(y, y + m * n, 0.f);
    return;
  }
  GemmArgs args;
  args.x = PackX(x, m, k, layout, &args.ldx);
  args.m = m;
  args.k = k;
  args.w = w;
  args.n = n;
  args.y = y;
  args.accumulate = accumulate;

  const int threads = pool && m * n * k >= kMinParallelMacs ? pool->size() : 1;
  const int64_t row_bytes = k * static_cast<int64_t>(weight_size);
  int64_t block = std::max(kBlockAlign, kBlockBytes / row_bytes / kBlockAlign * kBlockAlign);
  // Enough blocks that every thread gets a share (two each, so an odd split stays balanced).
  if (threads > 1) {
    const int64_t share = (n + 2 * threads - 1) / (2 * threads);
    block = std::min(block, std::max<int64_t>(8, RoundUp(share, 8)));
  }
  const int64_t blocks = (n + block - 1) / block;
  auto body = [&](size_t b0, size_t b1, int) {
    for (size_t b = b0; b < b1; ++b) {
      const int64_t j0 = static_cast<int64_t>(b) * block;
      columns(args, j0, std::min(n, j0 + block));
    }
  };
  if (threads > 1 && blocks > 1) pool->ParallelFor(static_cast<size_t>(blocks), body, 1);
  else body(0, static_cast<size_t>(blocks), 0);
}

}  // namespace

bool CpuHasAvx2Fma() { return Cpu().avx2_fma; }
bool CpuHasAvx512() { return Cpu().avx512; }
bool CpuHasAvx512Bf16() { return Cpu().avx512_bf16; }

namespace {
// The bf16 column kernel of this machine and the activation layout it wants.
void Bf16Kernel(ColumnsFn* fn, XLayout* layout) {
  *fn = GenericColumns<uint16_t>;
  *layout = XLayout::kPlain;
  switch (Current()) {
    case Kernel::kAvx512Bf16:
      *fn = gemm_internal::Bf16DotColumnsAvx512, *layout = XLayout::kBf16Pad32;
      break;
    case Kernel::kAvx512: *fn = gemm_internal::Bf16ColumnsAvx512, *layout = XLayout::kEvenOdd32; break;
    case Kernel::kAvx2: *fn = gemm_internal::Bf16ColumnsAvx2, *layout = XLayout::kEvenOdd16; break;
    case Kernel::kGeneric: break;
  }
}
}  // namespace

void GemmF32xBf16(const float* x, int64_t m, int64_t k, const uint16_t* w, int64_t n, float* y,
                  ThreadPool* pool, bool accumulate) {
  ColumnsFn fn;
  XLayout layout;
  Bf16Kernel(&fn, &layout);
  Run(fn, layout, sizeof(uint16_t), x, m, k, w, n, y, pool, accumulate);
}

void GemmF32xBf16Batch(const GemmBf16Job* jobs, int count, ThreadPool* pool) {
  ColumnsFn fn;
  XLayout layout;
  Bf16Kernel(&fn, &layout);
  int64_t macs = 0;
  for (int j = 0; j < count; ++j) macs += jobs[j].m * jobs[j].n * jobs[j].k;
  const int threads = pool && macs >= kMinParallelMacs ? pool->size() : 1;  // as Run decides
  std::vector<GemmArgs> args(count);
  std::vector<std::vector<float>> packed_f32(count);
  std::vector<std::vector<uint16_t>> packed_bf16(count);
  int64_t bytes = 0;
  for (int j = 0; j < count; ++j) {
    const GemmBf16Job& g = jobs[j];
    if (g.m < 0 || g.n < 0 || g.k < 0)
      Fail(ErrorKind::kInvalidArgument, "gemm: negative shape m={} n={} k={}", g.m, g.n, g.k);
    GemmArgs& a = args[j];
    // Products of one input (gate and up, q / k / v, a decode step's experts) share its packing.
    int same = 0;
    while (same < j && !(jobs[same].x == g.x && jobs[same].m == g.m && jobs[same].k == g.k)) ++same;
    if (same < j) {
      a.x = args[same].x, a.ldx = args[same].ldx;
    } else {
      a.x = g.m > 0 && g.k > 0 ? PackXInto(g.x, g.m, g.k, layout, &a.ldx, packed_f32[j], packed_bf16[j]) : g.x;
    }
    a.m = g.m, a.k = g.k, a.w = g.w, a.n = g.n, a.y = g.y, a.accumulate = false;
    if (g.k == 0) std::fill(g.y, g.y + g.m * g.n, 0.f);
    bytes += g.m > 0 && g.k > 0 ? g.n * g.k * static_cast<int64_t>(sizeof(uint16_t)) : 0;
  }
  // Blocks of about equal weight bytes, two a thread, in whole tiles of 8 columns, within the L2 size.
  struct Block {
    int job;
    int64_t j0, j1;
  };
  std::vector<Block> blocks;
  const int64_t target = std::max<int64_t>(1, std::min(kBlockBytes, bytes / (2 * threads)));
  for (int j = 0; j < count; ++j) {
    const GemmArgs& a = args[j];
    if (a.m == 0 || a.n == 0 || a.k == 0) continue;
    const int64_t row_bytes = a.k * static_cast<int64_t>(sizeof(uint16_t));
    const int64_t block = std::max<int64_t>(8, RoundUp(std::max<int64_t>(1, target / row_bytes), 8));
    for (int64_t j0 = 0; j0 < a.n; j0 += block) blocks.push_back({j, j0, std::min(a.n, j0 + block)});
  }
  auto body = [&](size_t b0, size_t b1, int) {
    for (size_t b = b0; b < b1; ++b) fn(args[blocks[b].job], blocks[b].j0, blocks[b].j1);
  };
  if (threads > 1 && blocks.size() > 1) pool->ParallelFor(blocks.size(), body, 1);
  else body(0, blocks.size(), 0);
}

void GemmF32xF32(const float* x, int64_t m, int64_t k, const float* w, int64_t n, float* y,
                 ThreadPool* pool, bool accumulate) {
  // The same choice the quantized products make for their dequantized tiles: one switch for both.
  Run(gemm_internal::CurrentF32Columns(), XLayout::kPlain, sizeof(float), x, m, k, w, n, y, pool, accumulate);
}

namespace gemm_internal {

ColumnsFn CurrentF32Columns() {
  switch (Current()) {
    case Kernel::kAvx512Bf16:
    case Kernel::kAvx512: return F32ColumnsAvx512;
    case Kernel::kAvx2: return F32ColumnsAvx2;
    case Kernel::kGeneric: break;
  }
  return GenericColumns<float>;
}

bool CurrentHasQuantDot() { return Current() == Kernel::kAvx512 || Current() == Kernel::kAvx512Bf16; }

DequantRowsFn CurrentDequantRows() {
  switch (Current()) {
    case Kernel::kAvx512Bf16:
    case Kernel::kAvx512: return DequantRowsAvx512;
    case Kernel::kAvx2: return DequantRowsAvx2;
    case Kernel::kGeneric: break;
  }
  return DequantRowsGeneric;
}

}  // namespace gemm_internal

const char* GemmKernelName() { return kKernelNames[static_cast<int>(Current())]; }

bool ForceGemmKernel(const char* name) {
  const std::string_view wanted = name ? name : "";
  if (wanted.empty()) {
    g_kernel.store(static_cast<int>(AutoChoice()), std::memory_order_relaxed);
    return true;
  }
  for (int i = 0; i < 4; ++i) {
    if (wanted != kKernelNames[i]) continue;
    if (!Supported(static_cast<Kernel>(i))) return false;
    g_kernel.store(i, std::memory_order_relaxed);
    return true;
  }
  return false;
}

}  // namespace tessera
