// tessera cuda backend: Hopper's warpgroup MMA (wgmma) and TMA helpers shared by the kernels that
// use them (cuda_skinny_wgmma.cu, cuda_quant_wgmma.cu, cuda_attention_wgmma.cu): the shared-memory
// matrix descriptors of the 128-byte-swizzled K-major and MN-major layouts, mbarriers, TMA box loads,
// the wgmma fences, the m64n128k16 bf16 wgmma with A from registers (B K-major or MN-major) or shared
// memory, the m64n64k16 one from shared memory, and the m64n128k32 s8 one with A from registers.
// Header-only; the device functions exist in sm_90a code only (__CUDA_ARCH_FEAT_SM90_ALL), the host
// tensor-map encoder everywhere.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace tessera::cuda {

constexpr int kWgmmaN128Accs = 64;  // f32 accumulators a thread holds of an m64n128 wgmma

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// Shared-memory matrix descriptor of a K-major operand in the 128-byte-swizzled layout TMA writes
// (atoms of 8 rows of 128 bytes, 16-byte chunk c of row r at c ^ (r & 7); the tile 1024-aligned):
// start address, leading byte offset unused (1), the next 8 rows 1024 bytes on, swizzle mode 1;
// the address fields in 16-byte units. The k step j of a 64-wide stage starts 32 j bytes in.
__device__ __forceinline__ uint64_t WgmmaDescriptor(uint32_t smem_addr) {
  return static_cast<uint64_t>((smem_addr & 0x3FFFF) >> 4) | (uint64_t{1} << 16) |
         (static_cast<uint64_t>(1024 >> 4) << 32) | (uint64_t{1} << 62);
}

__device__ __forceinline__ void MbarInit(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void MbarExpectTx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void MbarWait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done)
                 : "r"(bar), "r"(parity)
                 : "memory");
  } while (!done);
}
// Box (c0 = k, c1 = column) of a 2-D tensor map into shared memory, completing on mbarrier bar.
__device__ __forceinline__ void TmaLoad2d(uint32_t dst, const CUtensorMap* map, int c0, int c1, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
          dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
}

// Box (c0 = k, c1 = row, c2 = 0 hi / 1 lo) of the split activations, completing on mbarrier bar.
__device__ __forceinline__ void TmaLoad3d(uint32_t dst, const CUtensorMap* map, int c0, int c1, int c2, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], "
      "[%5];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
      : "memory");
}

__device__ __forceinline__ void WgmmaFence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void WgmmaCommit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void WgmmaWait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Makes this thread's shared-memory writes (mbarrier initialisation, stores, cp.async copies) visible
// to the async proxy (TMA copies that complete on the mbarriers, wgmma's operand reads).
__device__ __forceinline__ void FenceProxyAsync() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// The 64 accumulators a thread holds of an m64n128 wgmma: the asm operand list (outputs %0..%63,
// constraint c: "+f" for f32 sums, "+r" for s32) and its register braces, shared by the forms below.
#define TESSERA_WGMMA_ACCS_AS(d, c)                                                                        \
  c(d[0]), c(d[1]), c(d[2]), c(d[3]), c(d[4]), c(d[5]), c(d[6]), c(d[7]), c(d[8]), c(d[9]), c(d[10]),       \
      c(d[11]), c(d[12]), c(d[13]), c(d[14]), c(d[15]), c(d[16]), c(d[17]), c(d[18]), c(d[19]), c(d[20]),   \
      c(d[21]), c(d[22]), c(d[23]), c(d[24]), c(d[25]), c(d[26]), c(d[27]), c(d[28]), c(d[29]), c(d[30]),   \
      c(d[31]), c(d[32]), c(d[33]), c(d[34]), c(d[35]), c(d[36]), c(d[37]), c(d[38]), c(d[39]), c(d[40]),   \
      c(d[41]), c(d[42]), c(d[43]), c(d[44]), c(d[45]), c(d[46]), c(d[47]), c(d[48]), c(d[49]), c(d[50]),   \
      c(d[51]), c(d[52]), c(d[53]), c(d[54]), c(d[55]), c(d[56]), c(d[57]), c(d[58]), c(d[59]), c(d[60]),   \
      c(d[61]), c(d[62]), c(d[63])
#define TESSERA_WGMMA_ACCS(d) TESSERA_WGMMA_ACCS_AS(d, "+f")
#define TESSERA_WGMMA_ACC_REGS                                                                                  \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, "   \
  "%23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, "    \
  "%44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"

// d[64 x 128] += a[64 x 16] (registers, this warp's 16 rows) b[16 x 128] (shared memory): B K-major,
// or with kMnMajorB MN-major (the 128 columns contiguous, WgmmaDescriptorMn: the attention kernel's
// P V with V's rows, the keys, as stored).
template <bool kMnMajorB = false>
__device__ __forceinline__ void Wgmma64x128(float (&d)[kWgmmaN128Accs], const uint32_t (&a)[4], uint64_t b) {
  // scale-d is a predicate (true: D += A B); the A and B scales +1; imm-trans-b 0 (K-major) or 1.
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " TESSERA_WGMMA_ACC_REGS
               ", {%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n"
               : TESSERA_WGMMA_ACCS(d)
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1), "n"(kMnMajorB ? 1 : 0));
}
// d[64 x 128] += a[64 x 32] (registers: this warp's 16 rows, mma.m16n8k32's 8-bit A fragment)
// b[32 x 128] (shared memory, K-major), signed 8-bit integers: exact s32 sums.
__device__ __forceinline__ void Wgmma64x128S8(int32_t (&d)[kWgmmaN128Accs], const uint32_t (&a)[4], uint64_t b) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n128k32.s32.s8.s8 " TESSERA_WGMMA_ACC_REGS
               ", {%64, %65, %66, %67}, %68, p;\n}\n"
               : TESSERA_WGMMA_ACCS_AS(d, "+r")
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
}
// d[64 x 128] += a[64 x 16] b[16 x 128], both K-major in shared memory (descriptors a, b).
__device__ __forceinline__ void Wgmma64x128(float (&d)[kWgmmaN128Accs], uint64_t a, uint64_t b) {
  // scale-d is a predicate (true: D += A B); the A and B scales +1; neither transposed (K-major).
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " TESSERA_WGMMA_ACC_REGS
               ", %64, %65, p, 1, 1, 0, 0;\n}\n"
               : TESSERA_WGMMA_ACCS(d)
               : "l"(a), "l"(b), "r"(1));
}
#undef TESSERA_WGMMA_ACCS
#undef TESSERA_WGMMA_ACCS_AS
#undef TESSERA_WGMMA_ACC_REGS

constexpr int kWgmmaN64Accs = 32;  // f32 accumulators a thread holds of an m64n64 wgmma
// d[64 x 64] += a[64 x 16] b[16 x 64], both K-major in shared memory (descriptors a, b).
__device__ __forceinline__ void Wgmma64x64(float (&d)[kWgmmaN64Accs], uint64_t a, uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, "
      "%22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(a), "l"(b), "r"(1));
}

// Descriptor of an MN-major operand in the 128-byte-swizzled layout (atoms of 8 k-rows of 128 bytes:
// 64 bf16 of the M or N dimension a row, 16-byte chunk c of row r at c ^ (r & 7), 1024-aligned): the
// next 64 columns `mn_step` bytes on (leading byte offset), the next 8 k-rows 1024 bytes on (stride).
__device__ __forceinline__ uint64_t WgmmaDescriptorMn(uint32_t smem_addr, uint32_t mn_step) {
  return static_cast<uint64_t>((smem_addr & 0x3FFFF) >> 4) | (static_cast<uint64_t>((mn_step >> 4) & 0x3FFF) << 16) |
         (static_cast<uint64_t>(1024 >> 4) << 32) | (uint64_t{1} << 62);
}
#endif

// The driver's cuTensorMapEncodeTiled, looked up once (null where the driver lacks it).
inline PFN_cuTensorMapEncodeTiled_v12000 TensorMapEncoder() {
  static const auto encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
      fn = nullptr;
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  return encode;
}

// Whether the driver has cuTensorMapEncodeTiled (EncodeSwizzled128 can work at all).
inline bool TensorMapEncoderAvailable() { return TensorMapEncoder() != nullptr; }

// A tensor map of `rank` (2 or 3) dimensions, innermost first (dims in elements, strides of the
// outer dimensions in bytes), read in boxes of `box` elements in the 128-byte-swizzled layout
// wgmma reads (box rows of 128 bytes), elements past the tensor as zeros. False when the driver
// lacks cuTensorMapEncodeTiled or refuses the layout (the caller takes v2).
inline bool EncodeSwizzled128(CUtensorMap* out, CUtensorMapDataType type, cuuint32_t rank, const void* base,
                              const cuuint64_t* dims, const cuuint64_t* strides, const cuuint32_t* box) {
  const auto encode = TensorMapEncoder();
  static const cuuint32_t elem[3] = {1, 1, 1};
  return encode && encode(out, type, rank, const_cast<void*>(base), dims, strides, box, elem,
                          CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                          CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

}  // namespace tessera::cuda
