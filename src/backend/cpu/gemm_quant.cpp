// tessera cpu backend: products with quantized weights (gemm.h GemmF32xQuant, GemmF32xQuantBatch):
// the W8A8 input rounding and act-order gather done once per product, then row blocks of every
// product of the batch dealt to the threads in one parallel loop; a block is dequantized into a
// per-thread f32 tile and multiplied by the f32 column kernel of the instruction set (on AVX-512,
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

// x rounded to the weight's code type row by row (W8A8), then gathered by the act-order permutation,
// into buf; x itself when the weight asks for neither.
const float* PrepareInput(const float* x, int64_t m, int64_t k, const WeightQuant& q, std::vector<float>& buf) {
  if (q.act == ActQuant::kNone && !q.perm) return x;
  buf.resize(static_cast<size_t>(m * k));
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
    float* dst = buf.data() + i * k;
    for (int64_t c = 0; c < k; ++c) dst[c] = q.perm ? row[q.perm[c]] : row[c];
  }
  return buf.data();
}

// One product of a batch, its input prepared: the few-row dot (codes decoded into registers) or
// row blocks dequantized into a per-thread f32 tile for the ISA's f32 column kernel.
struct PreparedProduct {
  const GemmQuantJob* job;
  const float* x;
  bool dot;
  std::vector<float> input, split;
};

void RunBlock(const PreparedProduct& p, int64_t j0, int64_t j1) {
  const GemmQuantJob& g = *p.job;
  if (p.dot) {
    gemm_internal::QuantDotRowsAvx512(p.x, g.m, g.k, g.codes, *g.q, j0, j1, g.y, g.n, g.accumulate);
    return;
  }
  std::vector<float>& tile = t_tile;
  tile.resize(static_cast<size_t>((j1 - j0) * g.k));
  gemm_internal::CurrentDequantRows()(g.codes, *g.q, g.k, j0, j1, tile.data());
  gemm_internal::GemmArgs a;
  a.x = p.x;
  a.ldx = g.k;
  a.m = g.m;
  a.k = g.k;
  a.n = g.n;
  a.accumulate = g.accumulate;
  a.w = tile.data();
  a.y = g.y + j0;  // column j of the tile is output column j0 + j (rows of y keep stride n)
  gemm_internal::CurrentF32Columns()(a, 0, j1 - j0);
}

}  // namespace

void GemmF32xQuantBatch(const GemmQuantJob* jobs, int count, ThreadPool* pool) {
  std::vector<PreparedProduct> prep;
  prep.reserve(static_cast<size_t>(count));
  int64_t macs = 0, bytes = 0;
  for (int j = 0; j < count; ++j) {
    const GemmQuantJob& g = jobs[j];
    if (g.m < 0 || g.n < 0 || g.k < 0) Fail(ErrorKind::kInvalidArgument, "gemm: negative shape m={} n={} k={}", g.m, g.n, g.k);
    if (g.q->kind == QuantKind::kNone || !g.q->scales || g.q->group <= 0)
      Fail(ErrorKind::kInternal, "gemm: quantized weight without its scales");
    if (g.m == 0 || g.n == 0) continue;
    if (g.k == 0) {
      if (!g.accumulate) std::fill(g.y, g.y + g.m * g.n, 0.f);
      continue;
    }
    PreparedProduct& p = prep.emplace_back();
    p.job = &g;
    p.x = PrepareInput(g.x, g.m, g.k, *g.q, p.input);
    p.dot = g.m <= gemm_internal::kQuantDotMaxRows && gemm_internal::CurrentHasQuantDot();
    if (p.dot && g.q->kind == QuantKind::kInt4 && gemm_internal::QuantDotFast(*g.q, g.k)) {
      // Products of one unprepared input (gate and up, q / k / v) share its split.
      const PreparedProduct* twin = nullptr;
      if (p.x == g.x)
        for (size_t i = 0; i + 1 < prep.size() && !twin; ++i)
          if (prep[i].job->x == g.x && prep[i].job->m == g.m && prep[i].job->k == g.k && !prep[i].split.empty() &&
              prep[i].input.empty())
            twin = &prep[i];
      if (twin) {
        p.x = twin->x;
      } else {
        p.split.resize(static_cast<size_t>(g.m * g.k));
        gemm_internal::QuantDotSplitInput(p.x, g.m, g.k, p.split.data());
        p.x = p.split.data();
      }
    }
    macs += g.m * g.n * g.k;
    bytes += g.n * QuantRowBytes(g.q->kind, g.k);
  }
  const int threads = pool && macs >= kMinParallelMacs ? pool->size() : 1;
  // Blocks of about equal code bytes, two a thread, in multiples of 8 rows; a tile stays in L2.
  struct Block {
    size_t product;
    int64_t j0, j1;
  };
  std::vector<Block> blocks;
  const int64_t target = std::max<int64_t>(1, bytes / (2 * threads));
  for (size_t i = 0; i < prep.size(); ++i) {
    const GemmQuantJob& g = *prep[i].job;
    int64_t block = std::max<int64_t>(8, (target / QuantRowBytes(g.q->kind, g.k) + 7) / 8 * 8);
    if (!prep[i].dot) block = std::min(block, std::max<int64_t>(8, kTileBytes / (g.k * 4) / 8 * 8));
    for (int64_t j0 = 0; j0 < g.n; j0 += block) blocks.push_back({i, j0, std::min(g.n, j0 + block)});
  }
  auto body = [&](size_t b0, size_t b1, int) {
    for (size_t b = b0; b < b1; ++b) RunBlock(prep[blocks[b].product], blocks[b].j0, blocks[b].j1);
  };
  if (threads > 1 && blocks.size() > 1)
    pool->ParallelFor(blocks.size(), body, 1);
  else
    body(0, blocks.size(), 0);
}

void GemmF32xQuant(const float* x, int64_t m, int64_t k, const void* codes, const WeightQuant& q, int64_t n,
                   float* y, ThreadPool* pool, bool accumulate) {
  const GemmQuantJob job{x, m, k, codes, &q, n, y, accumulate};
  GemmF32xQuantBatch(&job, 1, pool);
}

}  // namespace tessera
