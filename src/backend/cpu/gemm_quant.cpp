// tessera cpu backend: products with quantized weights (gemm.h GemmF32xQuant): the W8A8 input
// rounding and act-order gather done once per call, then column blocks of the weight dequantized into
// a per-thread f32 tile and multiplied by the f32 column kernel of the instruction set (on AVX-512,
// products of up to 4 rows skip the tile and decode codes straight into registers). The tile is a
// few hundred KB (it stays in L2), so memory traffic is the compressed codes; the portable dequantizer
// here is also the reference the vectorised ones are tested against.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/gemm.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/thread_pool.h"

namespace tessera {

namespace gemm_internal {

void DequantRowsGeneric(const void* codes, const WeightQuant& q, int64_t k, int64_t r0, int64_t r1, float* out) {
  const int64_t rb = QuantRowBytes(q.kind, k), G = q.Groups(k);
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* row = static_cast<const uint8_t*>(codes) + r * rb;
    float* dst = out + (r - r0) * k;
    for (int64_t c = 0; c < k; ++c) {
      const int64_t g = r * G + c / q.group;
      const float z = q.zeros ? q.zeros[g] : 0.f;
      dst[c] = q.scales[g] * (QuantCodeValue(q.kind, row, c) - z);
    }
  }
}

}  // namespace gemm_internal

namespace {

// Weight bytes of f32 tile per thread: stays in L2 while the m rows pass over it.
constexpr int64_t kTileBytes = 256 << 10;
constexpr int64_t kMinParallelMacs = int64_t{1} << 16;

thread_local std::vector<float> t_tile;
thread_local std::vector<float> t_input;
thread_local std::vector<float> t_split;

// x rounded to the weight's code type row by row (W8A8), then gathered by the act-order permutation.
const float* PrepareInput(const float* x, int64_t m, int64_t k, const WeightQuant& q) {
  if (q.act == ActQuant::kNone && !q.perm) return x;
  t_input.resize(static_cast<size_t>(m * k));
  const float qmax = q.kind == QuantKind::kFp8 ? 448.f : 127.f;
  std::vector<float> row(static_cast<size_t>(k));
  for (int64_t i = 0; i < m; ++i) {
    const float* src = x + i * k;
    std::copy(src, src + k, row.begin());
    if (q.act != ActQuant::kNone) {
      float s = q.act_scale;
      if (q.act == ActQuant::kDynamicPerToken) {
        float amax = 0.f;
        for (float v : row) amax = std::max(amax, std::fabs(v));
        s = amax / qmax;
      }
      for (float& v : row) {
        if (s <= 0.f) {
          v = 0.f;
        } else if (q.kind == QuantKind::kFp8) {
          v = Fp8E4M3ToF32(F32ToFp8E4M3(v / s)) * s;
        } else {
          v = std::clamp(std::nearbyint(v / s), -127.f, 127.f) * s;
        }
      }
    }
    float* dst = t_input.data() + i * k;
    for (int64_t c = 0; c < k; ++c) dst[c] = q.perm ? row[q.perm[c]] : row[c];
  }
  return t_input.data();
}

}  // namespace

void GemmF32xQuant(const float* x, int64_t m, int64_t k, const void* codes, const WeightQuant& q, int64_t n,
                   float* y, ThreadPool* pool, bool accumulate) {
  if (m < 0 || n < 0 || k < 0) Fail(ErrorKind::kInvalidArgument, "gemm: negative shape m={} n={} k={}", m, n, k);
  if (q.kind == QuantKind::kNone || !q.scales || q.group <= 0)
    Fail(ErrorKind::kInternal, "gemm: quantized weight without its scales");
  if (m == 0 || n == 0) return;
  if (k == 0) {
    if (!accumulate) std::fill(y, y + m * n, 0.f);
    return;
  }
  gemm_internal::GemmArgs args;
  args.x = PrepareInput(x, m, k, q);
  args.ldx = k;
  args.m = m;
  args.k = k;
  args.n = n;
  args.accumulate = accumulate;
  const gemm_internal::ColumnsFn columns = gemm_internal::CurrentF32Columns();
  const gemm_internal::DequantRowsFn dequant = gemm_internal::CurrentDequantRows();
  const int threads = pool && m * n * k >= kMinParallelMacs ? pool->size() : 1;
  int64_t block = std::max<int64_t>(8, kTileBytes / (k * 4) / 8 * 8);
  if (threads > 1) block = std::min(block, std::max<int64_t>(8, (n + 2 * threads - 1) / (2 * threads) / 8 * 8));
  const int64_t blocks = (n + block - 1) / block;
  const bool dot = m <= gemm_internal::kQuantDotMaxRows && gemm_internal::CurrentHasQuantDot();
  const float* dot_x = static_cast<const float*>(args.x);
  if (dot && q.kind == QuantKind::kInt4 && gemm_internal::QuantDotFast(q, k)) {
    t_split.resize(static_cast<size_t>(m * k));
    gemm_internal::QuantDotSplitInput(dot_x, m, k, t_split.data());
    dot_x = t_split.data();
  }
  auto body = [&](size_t b0, size_t b1, int) {
    if (dot) {  // few rows: codes decoded into registers, no tile
      for (size_t b = b0; b < b1; ++b) {
        const int64_t j0 = static_cast<int64_t>(b) * block, j1 = std::min(n, j0 + block);
        gemm_internal::QuantDotRowsAvx512(dot_x, m, k, codes, q, j0, j1, y, n, accumulate);
      }
      return;
    }
    std::vector<float>& tile = t_tile;
    tile.resize(static_cast<size_t>(block * k));
    for (size_t b = b0; b < b1; ++b) {
      const int64_t j0 = static_cast<int64_t>(b) * block, j1 = std::min(n, j0 + block);
      dequant(codes, q, k, j0, j1, tile.data());
      gemm_internal::GemmArgs a = args;
      a.w = tile.data();
      a.y = y + j0;  // column j of the tile is output column j0 + j (rows of y keep stride n)
      columns(a, 0, j1 - j0);
    }
  };
  if (threads > 1 && blocks > 1)
    pool->ParallelFor(static_cast<size_t>(blocks), body, 1);
  else
    body(0, static_cast<size_t>(blocks), 0);
}

}  // namespace tessera
