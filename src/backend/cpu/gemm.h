// tessera cpu backend: the matrix products every layer spends its time in. Weights are HF Linear
// weights as stored in the checkpoint (bf16, row-major [n, k], read in place from the mmap);
// activations are f32; accumulation is f32. The implementation picks AVX-512, AVX2+FMA or
// portable code at run time from cpuid, so one binary runs on any x86-64 processor.
//
// Kernels (GemmKernelName / ForceGemmKernel):
//   "avx512"     AVX-512F/BW/VL/DQ: bf16 weights widened to f32 by a shift, f32 FMA. Default where
//                the processor has AVX-512.
//   "avx2"       AVX2+FMA, same arithmetic on 256-bit vectors. Default on AVX2-only processors.
//   "generic"    portable C++ (any x86-64).
//   "avx512bf16" AVX512-BF16 dot products (vdpbf16ps): activations are ROUNDED TO BF16 before the
//                product (relative error up to 2^-9 per activation), so logits drift by ~1e-3 and
//                the golden tests do not hold. Never chosen by default; opt in with
//                ForceGemmKernel("avx512bf16") or TESSERA_CPU_BF16_ACTIVATIONS=1 in the environment
//                (read when the automatic choice is made: first use, or ForceGemmKernel("")).
// Every kernel computes each output as the same sequence of operations whatever the thread count,
// so results are bitwise identical with and without a pool.
#pragma once

#include <cstdint>

#include "core/quant.h"

namespace tessera {

class ThreadPool;

// y[m, n] = x[m, k] * w[n, k]^T  (+ y when accumulate). x, y row-major with leading dims k, n.
// Threads split n across `pool` (nullptr = run on the calling thread). Any m, n, k >= 0 and any
// pointer alignment; w is never read past its last element (safe at the end of a mapping).
void GemmF32xBf16(const float* x, int64_t m, int64_t k, const uint16_t* w, int64_t n, float* y,
                  ThreadPool* pool, bool accumulate = false);

// Several bf16 products as one parallel loop over all their column blocks: the experts of a decode
// step are a few small products a layer, and as separate calls each paid the pool's hand-off and
// split its few columns over every thread. Each product's x is packed once (storage of the call),
// then blocks of whole tiles of every product are dealt to the threads in one ParallelFor. Each
// output is the same sequence of operations as GemmF32xBf16 makes it (accumulate is off).
struct GemmBf16Job {
  const float* x;  // [m, k]
  int64_t m, k;
  const uint16_t* w;  // [n, k]
  int64_t n;
  float* y;  // [m, n]
};
void GemmF32xBf16Batch(const GemmBf16Job* jobs, int count, ThreadPool* pool);
// Same with f32 weights (used for the few tensors converted at load time and by tests).
void GemmF32xF32(const float* x, int64_t m, int64_t k, const float* w, int64_t n, float* y,
                 ThreadPool* pool, bool accumulate = false);

// Same with a quantized w (core/quant.h: `codes` [n, k] in q.kind's storage, scales, zero points,
// act-order permutation, W8A8 input rounding): the input is permuted / rounded once per call, then
// each thread dequantizes a block of w's rows into an f32 tile (vectorised for the instruction set)
// and runs the f32 column kernel over it, so the weights cross memory in their compressed size. Every
// output is the same sequence of operations whatever the thread count.
void GemmF32xQuant(const float* x, int64_t m, int64_t k, const void* codes, const WeightQuant& q, int64_t n,
                   float* y, ThreadPool* pool, bool accumulate = false);
// Several quantized products as one parallel loop over all their row blocks (the experts of a decode
// step, as GemmF32xBf16Batch); each output the same sequence of operations as GemmF32xQuant makes it.
struct GemmQuantJob {
  const float* x;  // [m, k]
  int64_t m, k;
  const void* codes;
  const WeightQuant* q;
  int64_t n;
  float* y;  // [m, n]
  bool accumulate = false;
};
void GemmF32xQuantBatch(const GemmQuantJob* jobs, int count, ThreadPool* pool);

// Which kernel GemmF32xBf16 runs on this machine: "avx512bf16", "avx512", "avx2" or "generic".
// (GemmF32xF32 runs the f32 kernel of the same instruction set; "avx512bf16" uses "avx512" there.)
const char* GemmKernelName();

// Forces a kernel (for tests and benchmarks comparing paths); returns false (and changes nothing)
// when the processor cannot run it or the name is unknown. "" restores automatic choice.
bool ForceGemmKernel(const char* name);

// What the processor offers, from cpuid + xgetbv (the OS must also save the vector state).
bool CpuHasAvx2Fma();
bool CpuHasAvx512();      // F, BW, VL, DQ
bool CpuHasAvx512Bf16();  // CpuHasAvx512() and AVX512_BF16 (cpuid leaf 7 subleaf 1 EAX bit 5)

namespace gemm_internal {

// How a kernel wants the activations laid out before it runs (the driver in gemm.cpp packs them
// once per call, outside the threaded part; the cost is m*k, negligible next to m*n*k).
enum class XLayout {
  kPlain,       // x as given, row stride k
  kEvenOdd16,   // per 16 values of k: the 8 even-indexed then the 8 odd-indexed; zero padded
  kEvenOdd32,   // per 32 values of k: the 16 even-indexed then the 16 odd-indexed; zero padded
  kBf16Pad32,   // rounded to bf16 (nearest even), natural order, zero padded to a multiple of 32
};

// Arguments of one product as the per-ISA column kernels see them.
struct GemmArgs {
  const void* x = nullptr;  // [m, ldx] in the kernel's XLayout (float, or uint16 for kBf16Pad32)
  int64_t ldx = 0;
  int64_t m = 0, k = 0;
  const void* w = nullptr;  // [n, k] bf16 or f32
  float* y = nullptr;       // [m, n]
  int64_t n = 0;
  bool accumulate = false;
};

// Computes y[:, j0:j1] for all m rows (the driver calls it on cache-sized column blocks).
using ColumnsFn = void (*)(const GemmArgs& args, int64_t j0, int64_t j1);

// gemm_avx512.cpp (call only when CpuHasAvx512(); the Bf16Dot one only when CpuHasAvx512Bf16()).
void Bf16ColumnsAvx512(const GemmArgs& args, int64_t j0, int64_t j1);      // XLayout::kEvenOdd32
void Bf16DotColumnsAvx512(const GemmArgs& args, int64_t j0, int64_t j1);   // XLayout::kBf16Pad32
void F32ColumnsAvx512(const GemmArgs& args, int64_t j0, int64_t j1);       // XLayout::kPlain
// gemm_avx2.cpp (call only when CpuHasAvx2Fma()).
void Bf16ColumnsAvx2(const GemmArgs& args, int64_t j0, int64_t j1);        // XLayout::kEvenOdd16
void F32ColumnsAvx2(const GemmArgs& args, int64_t j0, int64_t j1);         // XLayout::kPlain

// Dequantizes rows [r0, r1) of a quantized weight into out ([r1 - r0, k] f32, in the codes' column
// order): gemm_quant.cpp (portable), gemm_quant_avx512.cpp, gemm_quant_avx2.cpp.
using DequantRowsFn = void (*)(const void* codes, const WeightQuant& q, int64_t k, int64_t r0, int64_t r1,
                               float* out);
void DequantRowsGeneric(const void* codes, const WeightQuant& q, int64_t k, int64_t r0, int64_t r1, float* out);
void DequantRowsAvx512(const void* codes, const WeightQuant& q, int64_t k, int64_t r0, int64_t r1, float* out);
void DequantRowsAvx2(const void* codes, const WeightQuant& q, int64_t k, int64_t r0, int64_t r1, float* out);
// Few-row products without the tile (AVX-512): each weight row's codes decoded into registers and
// multiplied into up to kQuantDotMaxRows input rows at once; y[:, j0:j1] (+)=. The decode regime, where
// writing and re-reading an f32 tile costs more than the compressed read.
constexpr int64_t kQuantDotMaxRows = 4;
// k and the group size multiples of 32 take a faster path (several weight rows at a time, int4 codes
// looked up in a per-group table); for int4 it wants x split by QuantDotSplitInput (each 32 columns
// as their 16 even then their 16 odd values).
void QuantDotRowsAvx512(const float* x, int64_t m, int64_t k, const void* codes, const WeightQuant& q, int64_t j0,
                        int64_t j1, float* y, int64_t n, bool accumulate);
bool QuantDotFast(const WeightQuant& q, int64_t k);
void QuantDotSplitInput(const float* x, int64_t m, int64_t k, float* out);
bool CurrentHasQuantDot();
// The ISA's f32 column kernel (gemm.cpp's choice for GemmF32xF32) and dequantizer.
ColumnsFn CurrentF32Columns();
DequantRowsFn CurrentDequantRows();

}  // namespace gemm_internal

}  // namespace tessera
