// tessera cuda backend: quantized codes staged in shared memory, turned into exact bf16 MMA operand
// fragments (cuda_quant_mma.cu's mma.sync kernels, cuda_quant_wgmma.cu's wgmma kernel). A stage holds
// kQuantStageK codes of each staged weight row; a lane takes the 8 codes 8q..8q+7 of a 32-wide chunk
// of a row and multiplies them as logical k (2q, 2q + 1, 2q + 8, 2q + 9) of the chunk's first k16
// step and the same of its second (int8 / fp8), or as the pairs (0,4) (1,5) (2,6) (3,7) of those
// (int4): the activations follow the same permutation (in registers, or split beforehand by
// PermutedK), so every product meets its weight.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/cuda_quant.h"  // QuantMatrix's kinds (kBf16Rows)

namespace tessera::cuda {

enum : int8_t { kFp8 = 1, kInt8 = 2, kInt4 = 3 };  // core/quant.h QuantKind
constexpr int kQuantStageK = 64;                     // k a stage
template <int8_t KIND>                               // bytes of a staged row a stage
constexpr int kBRowBytes = KIND == kInt4 ? kQuantStageK / 2 : KIND == kBf16Rows ? 2 * kQuantStageK : kQuantStageK;

// 16-byte unit u of weight row w's staged codes, swizzled: a quarter warp's (int4: a warp's) loads
// of one chunk land on distinct banks (row strides of 64 / 32 bytes would put rows g and g + 2 /
// g + 4 on the same ones).
template <int8_t KIND>
__device__ __forceinline__ int QuantUnitOffset(int w, int u) {
  if constexpr (KIND == kInt4) return w * kBRowBytes<KIND> + ((u ^ ((w >> 2) & 1)) << 4);
  // bf16 rows: a quarter warp reads 64 bytes of rows g and g + 1 each; the odd row's half swaps.
  if constexpr (KIND == kBf16Rows) return w * kBRowBytes<KIND> + ((u ^ ((w & 1) << 2)) << 4);
  return w * kBRowBytes<KIND> + ((u ^ (((w >> 1) & 1) << 1)) << 4);
}

__device__ __forceinline__ uint32_t Bf16Pair(float lo, float hi) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

// This lane's 8 codes (physical k 8q..8q+7) of 32-wide chunk kk of staged row `row` as 8 exact bf16,
// the weight operand of both k16 steps of the chunk: (x, y) the first step's register pair, (z, w) the
// second's. bf16 rows, int8 / fp8 in column order; int4 as the pairs (0,4) (1,5) (2,6) (3,7).
template <int8_t KIND>
__device__ __forceinline__ uint4 LoadCodes(const unsigned char* stage, int row, int kk, int q) {
  uint32_t r[4];
  if constexpr (KIND == kBf16Rows) {
    const uint4 v = *reinterpret_cast<const uint4*>(stage + QuantUnitOffset<KIND>(row, 4 * kk + q));  // as stored
    r[0] = v.x, r[1] = v.y, r[2] = v.z, r[3] = v.w;
  } else if constexpr (KIND == kInt4) {
    const uint32_t raw =
        *reinterpret_cast<const uint32_t*>(stage + QuantUnitOffset<KIND>(row, kk) + 4 * q) ^ 0x88888888u;  // n + 8
    const __nv_bfloat162 bias = __float2bfloat162_rn(136.f);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      // 0x4300 | u is the bf16 128 + u (u < 16 < 128 mantissa steps of 1).
      const uint32_t v = ((raw >> (4 * i)) & 0x000F000Fu) | 0x43004300u;
      const __nv_bfloat162 d = __hsub2(*reinterpret_cast<const __nv_bfloat162*>(&v), bias);
      r[i] = *reinterpret_cast<const uint32_t*>(&d);
    }
  } else {
    const uint2 raw =
        *reinterpret_cast<const uint2*>(stage + QuantUnitOffset<KIND>(row, 2 * kk + (q >> 1)) + 8 * (q & 1));
    const uint32_t w[2] = {raw.x, raw.y};
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if constexpr (KIND == kInt8) {
        const uint32_t u = w[h] ^ 0x80808080u;  // n + 128; 0x4B0000uu is the f32 2^23 + u
        float f[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) f[j] = __int_as_float(__byte_perm(u, 0x4B000000u, 0x7650 + j)) - 8388736.f;
        r[2 * h] = Bf16Pair(f[0], f[1]);
        r[2 * h + 1] = Bf16Pair(f[2], f[3]);
      } else {
        // e4m3 s.eeee.mmm -> bf16 s.0000eeee.mmm0000 is the value times 2^-120 (subnormals included);
        // the bf16 multiply by 2^120 is exact.
        const __nv_bfloat162 scale = __float2bfloat162_rn(1.329228e36f);  // 2^120
#pragma unroll
        for (int p = 0; p < 2; ++p) {
          const uint32_t x = __byte_perm(w[h], 0, p == 0 ? 0x4140 : 0x4342);  // bytes 2p, 2p + 1 at 0 and 16
          const uint32_t bits = ((x << 4) & 0x07F007F0u) | ((x << 8) & 0x80008000u);
          const __nv_bfloat162 d = __hmul2(*reinterpret_cast<const __nv_bfloat162*>(&bits), scale);
          r[2 * h + p] = *reinterpret_cast<const uint32_t*>(&d);
        }
      }
    }
  }
  return make_uint4(r[0], r[1], r[2], r[3]);
}

// Where the activation of column p of a 32-wide chunk goes in a split row for `kind`'s fragments
// (LoadCodes' pairing): a plain k16 read of the permuted row gives every lane its codes' activations.
__host__ __device__ __forceinline__ int PermutedK(int8_t kind, int p) {
  const int q = p >> 3, i = p & 7;
  if (kind == kInt4) return 8 * (i & 3) + (i >> 2) + 2 * q;
  return 16 * (i >> 2) + 8 * ((i >> 1) & 1) + (i & 1) + 2 * q;
}

}  // namespace tessera::cuda
