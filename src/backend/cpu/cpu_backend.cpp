// tessera cpu backend: row-wise ops (matmul dispatch, embedding, norms, rope, activations, KV
// page writes, MoE routing and the grouped expert FFN, softmax/argmax). See cpu_backend.h.
#include "backend/cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <utility>

#include "backend/cpu/cpu_op_profile.h"
#include "backend/cpu/gemm.h"
#include "backend/sampling.h"
#include "core/error.h"
#include "core/thread_pool.h"

namespace tessera {

namespace {

inline float Silu(float x) { return x / (1.0f + std::exp(-x)); }
inline float Sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
// GELU, tanh approximation (torch's gelu(approximate="tanh"), Gemma's gelu_pytorch_tanh).
inline float GeluTanh(float x) {
  constexpr float kC = 0.7978845608028654f;  // sqrt(2 / pi)
  return 0.5f * x * (1.0f + std::tanh(kC * (x + 0.044715f * x * x * x)));
}

// 1 / sqrt(mean(x^2) + eps) of one row, the sum in double over 8 independent lanes: one running
// sum waited on each add's latency (~1.2 us a 1,024-wide row, ~100 norms a decode step, all on the
// calling thread); lanes vectorize, and the changed order of a double sum moves bits far below the
// f32 factor's rounding.
float InverseRms(const float* x, int64_t n, float eps) {
  double lane[8] = {};
  int64_t j = 0;
  for (; j + 8 <= n; j += 8)
    for (int l = 0; l < 8; ++l) lane[l] += static_cast<double>(x[j + l]) * x[j + l];
  double ss = 0;
  for (; j < n; ++j) ss += static_cast<double>(x[j]) * x[j];
  for (double v : lane) ss += v;
  return static_cast<float>(1.0 / std::sqrt(ss / n + eps));
}

// Whether a weight can join a GemmF32xBf16Batch (plain bf16) or a GemmF32xQuantBatch (quantized).
bool BatchesAsBf16(const Tensor& t) { return !t.quantized() && t.dtype == DType::kBF16 && t.shape.size() == 2; }
bool BatchesAsQuantized(const Tensor& t) { return t.quantized() && t.shape.size() == 2; }

// The same for all three matrices of every active expert.
bool AllExperts(const std::vector<ExpertWeights>& experts, const std::vector<int64_t>& active,
                bool (*batches)(const Tensor&)) {
  for (int64_t e : active)
    for (const Tensor* t : {&experts[e].gate, &experts[e].up, &experts[e].down})
      if (!batches(*t)) return false;
  return true;
}

// One product of a batched loop (a decode step's experts, MatMulMulti's projections): y [m, n] =
// x [m, k] w^T, w [n, k] bf16 or quantized (the whole batch one or the other).
struct BatchedProduct {
  const float* x;
  int64_t m;
  const Tensor* w;
  float* y;
};

void RunProducts(const std::vector<BatchedProduct>& products, ThreadPool* pool) {
  if (products.empty()) return;
  if (products[0].w->quantized()) {
    std::vector<GemmQuantJob> jobs;
    for (const BatchedProduct& p : products)
      jobs.push_back({p.x, p.m, p.w->dim(1), p.w->data, &p.w->quant, p.w->dim(0), p.y});
    GemmF32xQuantBatch(jobs.data(), static_cast<int>(jobs.size()), pool);
    return;
  }
  std::vector<GemmBf16Job> jobs;
  for (const BatchedProduct& p : products)
    jobs.push_back({p.x, p.m, p.w->dim(1), static_cast<const uint16_t*>(p.w->data), p.w->dim(0), p.y});
  GemmF32xBf16Batch(jobs.data(), static_cast<int>(jobs.size()), pool);
}

// Runs a Linear on the calling thread or the pool; w is [n, k].
void MatMulOn(const float* x, int64_t m, const Tensor& w, float* y, bool accumulate, ThreadPool* pool) {
  TESSERA_CHECK(w.shape.size() == 2);
  const int64_t n = w.shape[0], k = w.shape[1];
  if (w.quantized()) {
    GemmF32xQuant(x, m, k, w.data, w.quant, n, y, pool, accumulate);
  } else if (w.dtype == DType::kBF16) {
    GemmF32xBf16(x, m, k, static_cast<const uint16_t*>(w.data), n, y, pool, accumulate);
  } else if (w.dtype == DType::kF32) {
    GemmF32xF32(x, m, k, w.f32(), n, y, pool, accumulate);
  } else {
    Fail(ErrorKind::kUnsupported, "matmul: weight dtype {} is not supported", DTypeName(w.dtype));
  }
}

}  // namespace

CpuBackend::CpuBackend() : pool_(&ThreadPool::Global()) {}

std::unique_ptr<Backend> MakeCpuBackend() { return std::make_unique<CpuBackend>(); }

void CpuBackend::MatMul(const float* x, int64_t m, const Tensor& w, float* y, bool accumulate) {
  TESSERA_CPU_OP("MatMul");
  if (m == 0) return;
  MatMulOn(x, m, w, y, accumulate, pool_);
}

// One parallel loop over every product's column blocks (q / k / v; the router with the shared
// expert's gate / up): as separate MatMuls each paid the pool's hand-off (a barrier a product) and
// split its few columns over every thread, which at 16 threads left decode at half the read floor
// (docs/PERFORMANCE.md, issue 35). Each output is the same sequence of operations as its MatMul's.
void CpuBackend::MatMulMulti(const float* x, int64_t m, const std::vector<MatMulOut>& outs) {
  TESSERA_CPU_OP("MatMulMulti");
  if (m == 0 || outs.empty()) return;
  bool bf16 = true, quantized = true;
  std::vector<BatchedProduct> products;
  for (const MatMulOut& o : outs) {
    bf16 = bf16 && BatchesAsBf16(*o.w);
    quantized = quantized && BatchesAsQuantized(*o.w);
    products.push_back({x, m, o.w, o.y});
  }
  if (!bf16 && !quantized) return Backend::MatMulMulti(x, m, outs);
  RunProducts(products, pool_);
}

void CpuBackend::MatMulNoTrans(const float* x, int64_t m, const Tensor& w, float* y) {
  TESSERA_CPU_OP("MatMulNoTrans");
  TESSERA_CHECK(w.shape.size() == 2);
  if (w.quantized() || (w.dtype != DType::kBF16 && w.dtype != DType::kF32))
    Fail(ErrorKind::kUnsupported, "MatMulNoTrans: weight dtype {} is not supported", DTypeName(w.dtype));
  const int64_t n = w.shape[0], k = w.shape[1];
  if (m == 0 || k == 0) return;
  // Threads split the output columns into blocks of kCols; each block walks w's rows once (widened
  // to f32) and adds x[i, r] * w[r, block] to every output row, in r order: each output is the same
  // sequence of operations whatever the thread count.
  constexpr int64_t kCols = 64;
  const int64_t blocks = (k + kCols - 1) / kCols;
  auto run = [&](size_t b0, size_t b1, int) {
    float wrow[kCols];
    std::vector<float> acc(static_cast<size_t>(m * kCols));
    for (size_t b = b0; b < b1; ++b) {
      const int64_t j0 = static_cast<int64_t>(b) * kCols, cols = std::min(kCols, k - j0);
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t r = 0; r < n; ++r) {
        if (w.dtype == DType::kBF16) {
          const uint16_t* src = static_cast<const uint16_t*>(w.data) + r * k + j0;
          for (int64_t j = 0; j < cols; ++j) wrow[j] = Bf16ToF32(src[j]);
        } else {
          std::memcpy(wrow, w.f32() + r * k + j0, static_cast<size_t>(cols) * sizeof(float));
        }
        for (int64_t i = 0; i < m; ++i) {
          const float a = x[i * n + r];
          float* out = acc.data() + i * kCols;
          for (int64_t j = 0; j < cols; ++j) out[j] += a * wrow[j];
        }
      }
      for (int64_t i = 0; i < m; ++i)
        std::memcpy(y + i * k + j0, acc.data() + i * kCols, static_cast<size_t>(cols) * sizeof(float));
    }
  };
  if (pool_) pool_->ParallelFor(static_cast<size_t>(blocks), run);
  else run(0, static_cast<size_t>(blocks), 0);
}

void CpuBackend::Embedding(const Tensor& table, const int32_t* ids, int64_t n, float* out) {
  TESSERA_CPU_OP("Embedding");
  const int64_t vocab = table.dim(0), dim = table.dim(1);
  for (int64_t i = 0; i < n; ++i) {
    if (ids[i] < 0 || ids[i] >= vocab)
      Fail(ErrorKind::kInvalidArgument, "token id {} is out of range [0, {})", ids[i], vocab);
    const size_t off = static_cast<size_t>(ids[i]) * dim;
    if (table.dtype == DType::kBF16) {
      const uint16_t* src = static_cast<const uint16_t*>(table.data) + off;
      for (int64_t j = 0; j < dim; ++j) out[i * dim + j] = Bf16ToF32(src[j]);
    } else {
      TESSERA_CHECK(table.dtype == DType::kF32);
      std::memcpy(out + i * dim, table.f32() + off, dim * sizeof(float));
    }
  }
}

void CpuBackend::RmsNorm(const float* x, int64_t rows, int64_t dim, int64_t x_stride, const float* w,
                         float eps, bool one_plus, float* y, int64_t y_stride) {
  TESSERA_CPU_OP("RmsNorm");
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * x_stride;
    float* yr = y + r * y_stride;
    const float inv = InverseRms(xr, dim, eps);
    if (one_plus)
      for (int64_t j = 0; j < dim; ++j) yr[j] = xr[j] * inv * (1.0f + w[j]);
    else
      for (int64_t j = 0; j < dim; ++j) yr[j] = xr[j] * inv * w[j];
  }
}

void CpuBackend::GatedRmsNorm(const float* x, const float* z, int64_t rows, int64_t dim, const float* w,
                              float eps, float* y) {
  TESSERA_CPU_OP("GatedRmsNorm");
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    const float* zr = z + r * dim;
    float* yr = y + r * dim;
    const float inv = InverseRms(xr, dim, eps);
    for (int64_t j = 0; j < dim; ++j) yr[j] = w[j] * (xr[j] * inv) * Silu(zr[j]);
  }
}

void CpuBackend::Rope(float* x, int64_t rows, int64_t row_stride, int64_t heads, int64_t head_dim,
                      int64_t rotary_dim, const int64_t* positions, double theta) {
  TESSERA_CPU_OP("Rope");
  const int64_t half = rotary_dim / 2;
  // inv_freq as transformers computes it: in f32, base ** (2i / dim). Kept for the next call of the
  // same shape (every layer asks for the same one: the pow()s were half of this op's time).
  thread_local int64_t cached_dim = -1;
  thread_local double cached_theta = 0;
  thread_local std::vector<float> inv_freq;
  if (cached_dim != rotary_dim || cached_theta != theta) {
    inv_freq.resize(half);
    for (int64_t i = 0; i < half; ++i) {
      float expo = static_cast<float>(2 * i) / static_cast<float>(rotary_dim);
      inv_freq[i] = 1.0f / std::pow(static_cast<float>(theta), expo);
    }
    cached_dim = rotary_dim, cached_theta = theta;
  }
  // The first rotary_dim of each head rotated as (i, i + half) pairs: RopePairs' case of half pairs.
  RopePairs(x, rows, row_stride, heads, head_dim, half, half, inv_freq.data(), positions);
}

void CpuBackend::SigmoidGate(float* x, int64_t rows, int64_t dim, int64_t x_stride, const float* gate,
                             int64_t gate_stride) {
  TESSERA_CPU_OP("SigmoidGate");
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < dim; ++j) x[r * x_stride + j] *= Sigmoid(gate[r * gate_stride + j]);
}

void CpuBackend::SigmoidScaleRows(float* x, int64_t rows, int64_t dim, const float* s) {
  TESSERA_CPU_OP("SigmoidScaleRows");
  for (int64_t r = 0; r < rows; ++r) {
    const float f = Sigmoid(s[r]);
    for (int64_t j = 0; j < dim; ++j) x[r * dim + j] *= f;
  }
}

void CpuBackend::DivideRows(float* x, int64_t rows, int64_t dim, const float* divisors) {
  TESSERA_CPU_OP("DivideRows");
  for (int64_t r = 0; r < rows; ++r) {
    const float d = divisors[r];
    for (int64_t j = 0; j < dim; ++j) x[r * dim + j] /= d;
  }
}

void CpuBackend::SiluMul(const float* gate, const float* up, int64_t n, float* out) {
  TESSERA_CPU_OP("SiluMul");
  for (int64_t i = 0; i < n; ++i) out[i] = Silu(gate[i]) * up[i];
}

void CpuBackend::GeluTanhMul(const float* gate, const float* up, int64_t n, float* out) {
  TESSERA_CPU_OP("GeluTanhMul");
  for (int64_t i = 0; i < n; ++i) out[i] = GeluTanh(gate[i]) * up[i];
}

void CpuBackend::RopePairs(float* x, int64_t rows, int64_t row_stride, int64_t heads, int64_t head_dim,
                           int64_t pair_offset, int64_t rotated_pairs, const float* inv_freq,
                           const int64_t* positions) {
  TESSERA_CPU_OP("RopePairs");
  TESSERA_CHECK(rotated_pairs <= pair_offset && pair_offset + rotated_pairs <= head_dim);
  thread_local std::vector<float> cs, sn;  // reused: no allocation a call
  cs.resize(rotated_pairs), sn.resize(rotated_pairs);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < rotated_pairs; ++i) {
      const float angle = static_cast<float>(positions[r]) * inv_freq[i];
      cs[i] = std::cos(angle);
      sn[i] = std::sin(angle);
    }
    for (int64_t h = 0; h < heads; ++h) {
      float* v = x + r * row_stride + h * head_dim;
      for (int64_t i = 0; i < rotated_pairs; ++i) {
        const float a = v[i], b = v[i + pair_offset];
        v[i] = a * cs[i] - b * sn[i];
        v[i + pair_offset] = b * cs[i] + a * sn[i];
      }
    }
  }
}

void CpuBackend::Scale(float* x, int64_t n, float s) {
  TESSERA_CPU_OP("Scale");
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

void CpuBackend::SoftCap(float* x, int64_t n, float cap) {
  TESSERA_CPU_OP("SoftCap");
  for (int64_t i = 0; i < n; ++i) x[i] = cap * std::tanh(x[i] / cap);
}

void CpuBackend::ScaleByIndex(float* x, const int32_t* idx, int64_t n, const float* table) {
  TESSERA_CPU_OP("ScaleByIndex");
  for (int64_t i = 0; i < n; ++i) x[i] *= table[idx[i]];
}

void CpuBackend::Add(const float* x, int64_t n, float* y) {
  TESSERA_CPU_OP("Add");
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

void CpuBackend::Copy2D(const float* src, int64_t rows, int64_t cols, int64_t src_stride, float* dst,
                        int64_t dst_stride) {
  TESSERA_CPU_OP("Copy2D");
  for (int64_t r = 0; r < rows; ++r)
    std::memmove(dst + r * dst_stride, src + r * src_stride, cols * sizeof(float));
}

void CpuBackend::KvWrite(const float* k, const float* v, int64_t kv_stride, int64_t T, int64_t kv_dim,
                         int64_t first_pos, const int32_t* pages, int64_t page_size, void* k_cache_bytes,
                         void* v_cache_bytes) {
  TESSERA_CPU_OP("KvWrite");
  auto* k_cache = static_cast<float*>(k_cache_bytes);  // the CPU keeps f32 (Backend::SetKvCacheDType)
  auto* v_cache = static_cast<float*>(v_cache_bytes);
  for (int64_t t = 0; t < T; ++t) {
    const int64_t pos = first_pos + t;
    const int64_t row = static_cast<int64_t>(pages[pos / page_size]) * page_size + pos % page_size;
    std::memcpy(k_cache + row * kv_dim, k + t * kv_stride, kv_dim * sizeof(float));
    std::memcpy(v_cache + row * kv_dim, v + t * kv_stride, kv_dim * sizeof(float));
  }
}

void CpuBackend::GdnGates(const float* a, const float* b, int64_t T, int64_t heads, int64_t a_stride,
                          int64_t b_stride, const float* a_log, const float* dt_bias, float* g, float* beta,
                          int64_t out_stride) {
  TESSERA_CPU_OP("GdnGates");
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < heads; ++h) {
      const float s = a[t * a_stride + h] + dt_bias[h];
      // softplus with torch's threshold (20): linear above it.
      const float sp = s > 20.0f ? s : std::log1p(std::exp(s));
      const float bv = b[t * b_stride + h];
      g[t * out_stride + h] = -std::exp(a_log[h]) * sp;
      beta[t * out_stride + h] = Sigmoid(bv);
    }
  }
}

void CpuBackend::MoeRoute(const float* logits, int64_t rows, int64_t num_experts, int64_t k,
                          bool renormalize, int32_t* idx, float* weights) {
  TESSERA_CPU_OP("MoeRoute");
  thread_local std::vector<float> p;  // reused: no allocation a call
  thread_local std::vector<int32_t> order;
  p.resize(num_experts), order.resize(num_experts);
  for (int64_t r = 0; r < rows; ++r) {
    const float* l = logits + r * num_experts;
    float mx = *std::max_element(l, l + num_experts);
    double sum = 0;
    for (int64_t e = 0; e < num_experts; ++e) sum += (p[e] = std::exp(l[e] - mx));
    for (int64_t e = 0; e < num_experts; ++e) p[e] = static_cast<float>(p[e] / sum);
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int32_t a, int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    double top = 0;
    for (int64_t j = 0; j < k; ++j) top += p[order[j]];
    for (int64_t j = 0; j < k; ++j) {
      idx[r * k + j] = order[j];
      weights[r * k + j] = renormalize ? static_cast<float>(p[order[j]] / top) : p[order[j]];
    }
  }
}

void CpuBackend::MoeExperts(const float* x, int64_t rows, int64_t hidden, const int32_t* idx,
                            const float* weights, int64_t k, const std::vector<ExpertWeights>& experts,
                            float* out) {
  TESSERA_CPU_OP("MoeExperts");
  MoeExpertsAct(x, rows, hidden, idx, weights, k, experts, GluAct::kSilu, out);
}

void CpuBackend::MoeExpertsAct(const float* x, int64_t rows, int64_t hidden, const int32_t* idx,
                               const float* weights, int64_t k, const std::vector<ExpertWeights>& experts,
                               GluAct act, float* out) {
  TESSERA_CPU_OP("MoeExpertsAct");
  const int64_t num_experts = static_cast<int64_t>(experts.size());
  // Group (row, slot) pairs by expert; each expert's output lands in its own slot row, then the
  // slots of a row are summed in slot order, so a row's result never depends on the other rows.
  std::vector<std::vector<int64_t>> assigned(num_experts);
  for (int64_t i = 0; i < rows * k; ++i) {
    if (idx[i] < 0 || idx[i] >= num_experts) Fail(ErrorKind::kInternal, "expert id {} out of range", idx[i]);
    assigned[idx[i]].push_back(i);
  }
  std::vector<int64_t> active;
  for (int64_t e = 0; e < num_experts; ++e)
    if (!assigned[e].empty()) active.push_back(e);
  // Every (row, slot) pair is written by exactly one expert below: no zero fill needed (at a
  // 512-token prefill this buffer is rows * k * hidden * 4 = 16 MB per layer).
  std::unique_ptr<float[]> slot_out(new float[static_cast<size_t>(rows * k) * hidden]);
  auto run_expert = [&](int64_t e, ThreadPool* pool) {
    const auto& rowsel = assigned[e];
    const int64_t m = static_cast<int64_t>(rowsel.size());
    const int64_t inter = experts[e].gate.dim(0);
    std::vector<float> xs(m * hidden), g(m * inter), u(m * inter), d(m * hidden);
    for (int64_t i = 0; i < m; ++i)
      std::memcpy(xs.data() + i * hidden, x + (rowsel[i] / k) * hidden, hidden * sizeof(float));
    MatMulOn(xs.data(), m, experts[e].gate, g.data(), false, pool);
    MatMulOn(xs.data(), m, experts[e].up, u.data(), false, pool);
    if (act == GluAct::kSilu)
      for (int64_t i = 0; i < m * inter; ++i) g[i] = Silu(g[i]) * u[i];
    else
      for (int64_t i = 0; i < m * inter; ++i) g[i] = GeluTanh(g[i]) * u[i];
    MatMulOn(g.data(), m, experts[e].down, d.data(), false, pool);
    for (int64_t i = 0; i < m; ++i) {
      const float wgt = weights[rowsel[i]];
      float* dst = slot_out.get() + rowsel[i] * hidden;
      for (int64_t j = 0; j < hidden; ++j) dst[j] = d[i * hidden + j] * wgt;
    }
  };
  const int threads = pool_->size();
  if (static_cast<int>(active.size()) >= threads) {
    // Experts run whole on one thread each (the pool is not re-entrant: their products get no
    // pool). Their costs differ by their row counts, so deal them to threads longest first, each to
    // the least loaded thread, and give each thread its own list.
    std::vector<int64_t> by_rows = active;
    std::stable_sort(by_rows.begin(), by_rows.end(),
                     [&](int64_t a, int64_t b) { return assigned[a].size() > assigned[b].size(); });
    std::vector<std::vector<int64_t>> lists(threads);
    std::vector<size_t> load(threads, 0);
    for (int64_t e : by_rows) {
      const int t = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
      lists[t].push_back(e);
      load[t] += assigned[e].size() + 1;  // + 1: a one-row expert still streams all its weights
    }
    pool_->ParallelFor(threads, [&](size_t b, size_t e, int) {
      for (size_t t = b; t < e; ++t)
        for (int64_t ex : lists[t]) run_expert(ex, nullptr);
    });
  } else if (threads > 1 &&
             (AllExperts(experts, active, BatchesAsBf16) || AllExperts(experts, active, BatchesAsQuantized))) {
    // Fewer experts than threads (decode): every expert's gate and up products in one parallel loop
    // over all their column blocks, the activations in a second, every down product in a third: three
    // hand-offs of the pool a layer instead of three an expert, and each thread streams a share of all
    // the experts' weights.
    struct Bufs {
      std::vector<float> xs, g, u, d;
    };
    std::vector<Bufs> bufs(active.size());
    std::vector<BatchedProduct> products;
    for (size_t a = 0; a < active.size(); ++a) {
      const int64_t e = active[a], m = static_cast<int64_t>(assigned[e].size()), inter = experts[e].gate.dim(0);
      Bufs& b = bufs[a];
      b.g.resize(m * inter), b.u.resize(m * inter), b.d.resize(m * hidden);
      // One row (a decode step): the row itself, so every expert's gate and up share one packing of it.
      const float* xs = x + (assigned[e][0] / k) * hidden;
      if (m > 1) {
        b.xs.resize(m * hidden);
        for (int64_t i = 0; i < m; ++i)
          std::memcpy(b.xs.data() + i * hidden, x + (assigned[e][i] / k) * hidden, hidden * sizeof(float));
        xs = b.xs.data();
      }
      products.push_back({xs, m, &experts[e].gate, b.g.data()});
      products.push_back({xs, m, &experts[e].up, b.u.data()});
    }
    RunProducts(products, pool_);
    products.clear();
    // The activations, an expert a thread: ~3K exps a layer at decode, serial work the threads
    // would otherwise wait through.
    pool_->ParallelFor(active.size(), [&](size_t a0, size_t a1, int) {
      for (size_t a = a0; a < a1; ++a) {
        Bufs& b = bufs[a];
        for (size_t i = 0; i < b.g.size(); ++i)
          b.g[i] = (act == GluAct::kSilu ? Silu(b.g[i]) : GeluTanh(b.g[i])) * b.u[i];
      }
    });
    for (size_t a = 0; a < active.size(); ++a) {
      const int64_t e = active[a], m = static_cast<int64_t>(assigned[e].size());
      products.push_back({bufs[a].g.data(), m, &experts[e].down, bufs[a].d.data()});
    }
    RunProducts(products, pool_);
    for (size_t a = 0; a < active.size(); ++a) {
      const auto& rowsel = assigned[active[a]];
      for (size_t i = 0; i < rowsel.size(); ++i) {
        const float wgt = weights[rowsel[i]];
        float* dst = slot_out.get() + rowsel[i] * hidden;
        for (int64_t j = 0; j < hidden; ++j) dst[j] = bufs[a].d[i * hidden + j] * wgt;
      }
    }
  } else {
    for (int64_t e : active) run_expert(e, pool_);
  }
  for (int64_t r = 0; r < rows; ++r) {
    float* o = out + r * hidden;
    std::fill(o, o + hidden, 0.0f);
    for (int64_t j = 0; j < k; ++j) {
      const float* s = slot_out.get() + (r * k + j) * hidden;
      for (int64_t c = 0; c < hidden; ++c) o[c] += s[c];
    }
  }
}

void CpuBackend::Softmax(float* x, int64_t rows, int64_t n) {
  TESSERA_CPU_OP("Softmax");
  for (int64_t r = 0; r < rows; ++r) {
    float* v = x + r * n;
    const float mx = *std::max_element(v, v + n);
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += (v[i] = std::exp(v[i] - mx));
    for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(v[i] / sum);
  }
}

void CpuBackend::CanvasSampleRows(float* logits, int64_t rows, int64_t vocab, const CanvasRowRule* rules,
                                  bool round_z_to_bf16, CanvasRowPick* picks) {
  TESSERA_CPU_OP("CanvasSampleRows");
  auto run = [&](size_t b, size_t e, int) {
    for (size_t r = b; r < e; ++r)
      CanvasSampleRowInPlace(logits + r * vocab, vocab, rules[r], round_z_to_bf16, &picks[r]);
  };
  if (pool_) pool_->ParallelFor(static_cast<size_t>(rows), run);
  else run(0, static_cast<size_t>(rows), 0);
}

void CpuBackend::Argmax(const float* x, int64_t rows, int64_t n, int32_t* out) {
  TESSERA_CPU_OP("Argmax");
  for (int64_t r = 0; r < rows; ++r) {
    const float* v = x + r * n;
    out[r] = static_cast<int32_t>(std::max_element(v, v + n) - v);
  }
}

}  // namespace tessera
