// tessera cpu backend: the per-sequence ops: paged attention (causal / block-causal / sliding, with
// DiffusionGemma's bidirectional canvas rows) and the Gated DeltaNet pieces (causal depthwise
// conv1d, gated delta rule in chunked and recurrent form).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_op_profile.h"
#include "backend/cpu/gemm.h"
#include "core/error.h"
#include "core/thread_pool.h"

namespace tessera {

namespace {

inline float Silu(float x) { return x / (1.0f + std::exp(-x)); }

// Eight floats as one value (GCC vector extension): ymm registers in the AVX2 copy below, SSE pairs
// in the baseline one. Loads and stores are unaligned. The helpers are always inlined into those two
// copies, so no call passes the type (GCC's -Wpsabi note about its ABI does not apply).
#pragma GCC diagnostic ignored "-Wpsabi"
typedef float F8 __attribute__((vector_size(32), aligned(4)));
__attribute__((always_inline)) inline F8 LoadF8(const float* p) {
  F8 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
__attribute__((always_inline)) inline float Reduce8(F8 s) {
  return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
}

// Dot product with 8 independent partial sums (a single running sum is a serial dependency chain of
// n floating-point adds), reduced in a fixed tree.
__attribute__((always_inline)) inline float Dot(const float* a, const float* b, int64_t n) {
  float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t d = 0;
  for (; d + 8 <= n; d += 8)
    for (int i = 0; i < 8; ++i) s[i] += a[d + i] * b[d + i];
  float tail = 0;
  for (; d < n; ++d) tail += a[d] * b[d];
  return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7])) + tail;
}

// Dot(a, b[i], n) for four b rows at once (n % 8 == 0): the same sums in the same order (+ 0.0f is
// Dot's empty tail), four independent chains in flight instead of one.
__attribute__((always_inline)) inline void Dot4(const float* a, const float* const b[4], int64_t n, float out[4]) {
  F8 s0 = {}, s1 = {}, s2 = {}, s3 = {};
  for (int64_t d = 0; d < n; d += 8) {
    const F8 x = LoadF8(a + d);
    s0 += x * LoadF8(b[0] + d);
    s1 += x * LoadF8(b[1] + d);
    s2 += x * LoadF8(b[2] + d);
    s3 += x * LoadF8(b[3] + d);
  }
  out[0] = Reduce8(s0) + 0.0f, out[1] = Reduce8(s1) + 0.0f, out[2] = Reduce8(s2) + 0.0f, out[3] = Reduce8(s3) + 0.0f;
}

// out[d0 .. d0 + 8R) = sum over the keys j of p[j] * rows[j][d0 ..], each element from zero in key
// order, the 8R sums held in registers across the keys.
template <int R>
__attribute__((always_inline)) inline void PvDims(const float* p, const float* const* rows, int64_t len, int64_t d0,
                                                  float* out) {
  F8 r[R] = {};
  for (int64_t j = 0; j < len; ++j) {
    const F8 pj = F8{} + p[j];
    const float* vr = rows[j] + d0;
    for (int i = 0; i < R; ++i) r[i] += pj * LoadF8(vr + 8 * i);
  }
  std::memcpy(out + d0, r, sizeof r);
}

// The keys query row t of `a` sees: [*j0, *n). Last: itself (causal) or its block's end; a canvas
// row sees every key. First: the sliding window's (p - W, p] (causal rows only), for a canvas row the
// last W-1 keys before the canvas (AttentionArgs::canvas_begin), else 0.
void VisibleKeys(const AttentionArgs& a, int64_t t, int64_t* j0, int64_t* n) {
  const int64_t total_keys = a.first_pos + a.T;
  const int64_t p = a.first_pos + t;
  const bool canvas = a.canvas_begin >= 0 && t >= a.canvas_begin;
  *n = canvas ? total_keys
              : (a.block_size <= 0 ? p : std::min(total_keys - 1, (p / a.block_size + 1) * a.block_size - 1)) + 1;
  const int64_t W = a.sliding_window;
  *j0 = W <= 0 ? 0 : std::max<int64_t>(0, canvas ? a.first_pos + a.canvas_begin - (W - 1) : p - W + 1);
}

// One work item of AttentionBatch: keys [js, je) of query row t for the `group` query heads sharing kv
// head kvh of entry `entry`. A row's keys are one item, or (few-row calls) spans of kSpanKeys keys
// whose partial results land in the plan's partial buffers at `partial`, merged afterwards.
struct AttentionItem {
  int32_t entry, kvh;
  int64_t t, js, je;
  int64_t partial;  // -1: the row's only item (writes the output)
};

struct AttentionPlan {
  const std::vector<AttentionArgs>* args = nullptr;
  std::vector<std::vector<int64_t>> cache_rows;  // per entry: cache row of each cached key
  std::vector<AttentionItem> items;
  int64_t group = 0, head_dim = 0, max_keys = 0;  // max_keys: the longest item
  // Per span of a split row: the group's maxima, sums of exp (double) and unnormalised outputs.
  std::vector<float> part_max, part_acc;
  std::vector<double> part_sum;
  // The split rows: each one's first item (its spans are consecutive items, their partials too) and
  // how many spans it has.
  struct SplitRow {
    size_t first;
    int64_t spans;
  };
  std::vector<SplitRow> split_rows;
};

// Items [begin, end) of the plan; scratch holds group * max_keys scores, group * head_dim
// accumulators and max_keys value-row pointers. Per item, the softmax over its keys: scores, their
// maximum, exp and the sum in double, then the value rows weighted; a whole row is normalised into
// the output, a span stores its maxima, sums and unnormalised outputs. Inlined into a baseline and an AVX2+FMA copy: this file is
// built for baseline x86-64, where the vectorised loops below get 4-wide SSE only.
__attribute__((always_inline)) inline void AttentionItems(AttentionPlan& plan, size_t begin, size_t end,
                                                          float* scores, float* acc, const float** vrows) {
  const int64_t group = plan.group, hd = plan.head_dim, stride = plan.max_keys;
  double sums[64];  // group <= 64 (checked by the caller)
  float maxima[64];
  for (size_t w = begin; w < end; ++w) {
    const AttentionItem& it = plan.items[w];
    const AttentionArgs& a = (*plan.args)[it.entry];
    const int64_t* cache_row = plan.cache_rows[it.entry].data();
    const int64_t kv_dim = a.num_kv_heads * hd, kvh = it.kvh, t = it.t, j0 = it.js, n = it.je;
    const float* q0 = a.q + t * a.q_stride + kvh * group * hd;  // the group's query heads are adjacent
    auto key_row = [&](int64_t j, const float* cache, const float* fresh) -> const float* {
      if (j >= a.first_pos) return fresh + (j - a.first_pos) * a.kv_stride + kvh * hd;
      return cache + cache_row[j] * kv_dim + kvh * hd;
    };
    const auto* k_cache = static_cast<const float*>(a.k_cache);
    int64_t j = j0;
    if (hd % 8 == 0)
      for (; j + 4 <= n; j += 4) {
        const float* kr[4] = {key_row(j, k_cache, a.k), key_row(j + 1, k_cache, a.k), key_row(j + 2, k_cache, a.k),
                              key_row(j + 3, k_cache, a.k)};
        for (int64_t g = 0; g < group; ++g) {
          float d[4];
          Dot4(q0 + g * hd, kr, hd, d);
          for (int i = 0; i < 4; ++i) scores[g * stride + j + i - j0] = d[i] * a.scale;
        }
      }
    for (; j < n; ++j) {
      const float* kr = key_row(j, k_cache, a.k);
      for (int64_t g = 0; g < group; ++g) scores[g * stride + j - j0] = Dot(q0 + g * hd, kr, hd) * a.scale;
    }
    for (int64_t g = 0; g < group; ++g) {
      float* sc = scores + g * stride;
      const int64_t len = n - j0;
      float mx = sc[0];
      for (int64_t j = 1; j < len; ++j) mx = std::max(mx, sc[j]);
      // The exps, then their sum (in double, in key order): summed in the same loop, the running sum
      // went through memory around every expf call.
      for (int64_t j = 0; j < len; ++j) sc[j] = std::exp(sc[j] - mx);
      double sum = 0;
      for (int64_t j = 0; j < len; ++j) sum += sc[j];
      sums[g] = sum;
      maxima[g] = mx;
    }
    float* out_acc = it.partial < 0 ? acc : plan.part_acc.data() + it.partial * group * hd;
    // Each output element: its products added in key order from zero. A head's dims stay in
    // registers over all the keys, 64 at a time, then 32, 16, 8 (through memory they were a
    // store-to-load chain a key); the value rows are located once for all the heads.
    const auto* v_cache = static_cast<const float*>(a.v_cache);
    for (int64_t jj = j0; jj < n; ++jj) vrows[jj - j0] = key_row(jj, v_cache, a.v);
    for (int64_t g = 0; g < group; ++g) {
      const float* pg = scores + g * stride;
      float* ag = out_acc + g * hd;
      int64_t d0 = 0;
      for (; d0 + 64 <= hd; d0 += 64) PvDims<8>(pg, vrows, n - j0, d0, ag);
      if (d0 + 32 <= hd) PvDims<4>(pg, vrows, n - j0, d0, ag), d0 += 32;
      if (d0 + 16 <= hd) PvDims<2>(pg, vrows, n - j0, d0, ag), d0 += 16;
      if (d0 + 8 <= hd) PvDims<1>(pg, vrows, n - j0, d0, ag), d0 += 8;
      for (; d0 < hd; ++d0) {
        float r = 0.0f;
        for (int64_t j = 0; j < n - j0; ++j) r += pg[j] * vrows[j][d0];
        ag[d0] = r;
      }
    }
    if (it.partial >= 0) {
      for (int64_t g = 0; g < group; ++g) {
        plan.part_max[it.partial * group + g] = maxima[g];
        plan.part_sum[it.partial * group + g] = sums[g];
      }
      continue;
    }
    for (int64_t g = 0; g < group; ++g) {
      float* o = a.out + t * a.out_stride + (kvh * group + g) * hd;
      const float inv = static_cast<float>(1.0 / sums[g]);
      for (int64_t d = 0; d < hd; ++d) o[d] = acc[g * hd + d] * inv;
    }
  }
}

void AttentionItemsBaseline(AttentionPlan& plan, size_t begin, size_t end, float* scores, float* acc,
                            const float** vrows) {
  AttentionItems(plan, begin, end, scores, acc, vrows);
}

__attribute__((target("avx2,fma"))) void AttentionItemsAvx2(AttentionPlan& plan, size_t begin, size_t end,
                                                            float* scores, float* acc, const float** vrows) {
  AttentionItems(plan, begin, end, scores, acc, vrows);
}

// A split row's spans merged in order: out = sum_s acc_s e^(m_s - M) / sum_s sum_s e^(m_s - M), M the
// spans' maximum.
void MergeSpans(const AttentionPlan& plan, const AttentionPlan::SplitRow& row) {
  const int64_t group = plan.group, hd = plan.head_dim;
  const AttentionItem& it = plan.items[row.first];
  const AttentionArgs& a = (*plan.args)[it.entry];
  for (int64_t g = 0; g < group; ++g) {
    float M = plan.part_max[it.partial * group + g];
    for (int64_t s = 1; s < row.spans; ++s) M = std::max(M, plan.part_max[(it.partial + s) * group + g]);
    double total = 0;
    float* o = a.out + it.t * a.out_stride + (it.kvh * group + g) * hd;
    std::fill(o, o + hd, 0.0f);
    for (int64_t s = 0; s < row.spans; ++s) {
      const int64_t at = (it.partial + s) * group + g;
      const float scale = std::exp(plan.part_max[at] - M);
      total += plan.part_sum[at] * scale;
      const float* ai = plan.part_acc.data() + at * hd;
      for (int64_t d = 0; d < hd; ++d) o[d] += ai[d] * scale;
    }
    const float inv = static_cast<float>(1.0 / total);
    for (int64_t d = 0; d < hd; ++d) o[d] *= inv;
  }
}

// Calls of at most kSplitMaxRows query rows (decode steps) split each row's keys into spans of
// kSpanKeys, so a batch-1 step's few (kv head, row) pairs still spread over every thread. Fixed
// sizes, not the pool's: a row's result never depends on the thread count.
constexpr int64_t kSplitMaxRows = 8;
constexpr int64_t kSpanKeys = 64;
// Split rows merged a thread at a time in runs of at least this many (a batch-1 step's few rows merge
// on the calling thread, with no hand-off).
constexpr size_t kMergeGrain = 16;

}  // namespace

void CpuBackend::Attention(const AttentionArgs& a) { AttentionBatch({a}); }

// Work items are (entry, kv head, query row[, key span]): the `group` query heads sharing a kv head
// walk the keys together, so each K and V row is loaded once for all of them. Cached keys are located
// through a row table built once per entry rather than a page lookup per key and head. Every entry's
// items run in one parallel loop (one pool hand-off for the whole batch); split rows are merged after
// it (MergeSpans).
void CpuBackend::AttentionBatch(const std::vector<AttentionArgs>& args) {
  TESSERA_CPU_OP("AttentionBatch");
  if (args.empty()) return;
  AttentionPlan plan;
  plan.args = &args;
  plan.group = args[0].num_heads / args[0].num_kv_heads;
  plan.head_dim = args[0].head_dim;
  for (const AttentionArgs& a : args) {
    const int64_t group = a.num_heads / a.num_kv_heads;
    if (a.sliding_window > 0 && a.block_size > 0)
      Fail(ErrorKind::kUnsupported, "attention: a sliding window with a block-causal mask is not defined");
    if (a.canvas_begin >= 0 && (a.block_size > 0 || a.canvas_begin >= a.T))
      Fail(ErrorKind::kInvalidArgument, "attention: canvas rows from {} of {} with block size {}", a.canvas_begin, a.T,
           a.block_size);
    if (group > 64) Fail(ErrorKind::kUnsupported, "attention: {} query heads per kv head (at most 64 supported)", group);
    if (group != plan.group || a.head_dim != plan.head_dim)
      Fail(ErrorKind::kInternal, "attention batch: entries of different head shapes");
    const int32_t entry = static_cast<int32_t>(plan.cache_rows.size());
    std::vector<int64_t>& rows = plan.cache_rows.emplace_back(a.first_pos);
    // Page by page (a division per key was ~1 us a 1K-key row, every layer, on the calling thread).
    TESSERA_CHECK(a.first_pos == 0 || (a.pages && a.page_size > 0));
    for (int64_t j = 0, page = 0; j < a.first_pos; ++page) {
      const int64_t base = static_cast<int64_t>(a.pages[page]) * a.page_size;
      for (int64_t i = 0; i < a.page_size && j < a.first_pos; ++i, ++j) rows[j] = base + i;
    }
    for (int32_t kvh = 0; kvh < a.num_kv_heads; ++kvh)
      for (int64_t t = 0; t < a.T; ++t) {
        int64_t j0, n;
        VisibleKeys(a, t, &j0, &n);
        if (a.T > kSplitMaxRows || n - j0 <= kSpanKeys) {
          plan.items.push_back({entry, kvh, t, j0, n, -1});
          plan.max_keys = std::max(plan.max_keys, n - j0);
          continue;
        }
        plan.split_rows.push_back({plan.items.size(), (n - j0 + kSpanKeys - 1) / kSpanKeys});
        for (int64_t js = j0; js < n; js += kSpanKeys) {
          const int64_t partial = static_cast<int64_t>(plan.part_max.size()) / plan.group;
          plan.items.push_back({entry, kvh, t, js, std::min(n, js + kSpanKeys), partial});
          plan.part_max.resize(plan.part_max.size() + plan.group);
        }
        plan.max_keys = std::max(plan.max_keys, kSpanKeys);
      }
  }
  const int64_t group = plan.group, hd = plan.head_dim;
  const int64_t partials = static_cast<int64_t>(plan.part_max.size()) / group;
  plan.part_sum.resize(partials * group);
  plan.part_acc.resize(partials * group * hd);
  static const bool avx2 = CpuHasAvx2Fma();
  pool_->ParallelFor(plan.items.size(), [&](size_t begin, size_t end, int) {
    std::vector<float> scores(group * plan.max_keys), acc(group * hd);
    std::vector<const float*> vrows(plan.max_keys);
    if (avx2)
      AttentionItemsAvx2(plan, begin, end, scores.data(), acc.data(), vrows.data());
    else
      AttentionItemsBaseline(plan, begin, end, scores.data(), acc.data(), vrows.data());
  });
  pool_->ParallelFor(
      plan.split_rows.size(),
      [&](size_t begin, size_t end, int) {
        for (size_t r = begin; r < end; ++r) MergeSpans(plan, plan.split_rows[r]);
      },
      kMergeGrain);
}

void CpuBackend::CausalConv1dSilu(const float* x, int64_t T, int64_t x_stride, int64_t channels,
                                  const float* w, int64_t K, const float* state, float* y) {
  TESSERA_CPU_OP("CausalConv1dSilu");
  pool_->ParallelFor(channels, [&](size_t begin, size_t end, int) {
    for (size_t c = begin; c < end; ++c) {
      const float* wc = w + c * K;
      const float* sc = state + c * (K - 1);
      for (int64_t t = 0; t < T; ++t) {
        float s = 0;
        for (int64_t j = 0; j < K; ++j) {
          const int64_t src = t - (K - 1) + j;  // input index; negative reads the state
          const float in = src >= 0 ? x[src * x_stride + c] : sc[(K - 1) + src];
          s += wc[j] * in;
        }
        y[t * channels + c] = Silu(s);
      }
    }
  }, 16);
}

void CpuBackend::CausalConv1dUpdateState(const float* x, int64_t T, int64_t x_stride, int64_t channels,
                                         int64_t K, float* state) {
  TESSERA_CPU_OP("CausalConv1dUpdateState");
  const int64_t S = K - 1;
  std::vector<float> window(S + T);
  for (int64_t c = 0; c < channels; ++c) {
    float* sc = state + c * S;
    for (int64_t i = 0; i < S; ++i) window[i] = sc[i];
    for (int64_t t = 0; t < T; ++t) window[S + t] = x[t * x_stride + c];
    for (int64_t i = 0; i < S; ++i) sc[i] = window[T + i];
  }
}

void GatedDeltaHeadRecurrent(const float* q, const float* k, int64_t qk_stride, const float* v,
                             int64_t v_stride, const float* g, const float* beta, int64_t gb_stride,
                             int64_t T, int64_t dk, int64_t dv, float* S, float* out, int64_t out_stride) {
  std::vector<float> kv(dv);
  for (int64_t t = 0; t < T; ++t) {
    const float* qt = q + t * qk_stride;
    const float* kt = k + t * qk_stride;
    const float* vt = v + t * v_stride;
    const float decay = std::exp(g[t * gb_stride]);
    const float b = beta[t * gb_stride];
    std::fill(kv.begin(), kv.end(), 0.0f);
    for (int64_t i = 0; i < dk; ++i) {
      float* Si = S + i * dv;
      for (int64_t j = 0; j < dv; ++j) {
        Si[j] *= decay;
        kv[j] += Si[j] * kt[i];
      }
    }
    for (int64_t j = 0; j < dv; ++j) kv[j] = (vt[j] - kv[j]) * b;  // delta
    float* o = out + t * out_stride;
    std::fill(o, o + dv, 0.0f);
    for (int64_t i = 0; i < dk; ++i) {
      float* Si = S + i * dv;
      for (int64_t j = 0; j < dv; ++j) {
        Si[j] += kt[i] * kv[j];
        o[j] += Si[j] * qt[i];
      }
    }
  }
}

// WY / UT form per chunk of C tokens: with cum = prefix sums of g inside the chunk and
// L[i][j] = beta_i (k_i . k_j) exp(cum_i - cum_j) (j < i), solve (I + L) U = beta v and
// (I + L) W = beta k exp(cum); then v_new = U - W S, o = (q exp(cum)) S + causal(q k^T decay) v_new,
// S <- exp(cum_last) S + sum_t exp(cum_last - cum_t) k_t v_new_t^T.
void GatedDeltaHeadChunked(const float* q, const float* k, int64_t qk_stride, const float* v,
                           int64_t v_stride, const float* g, const float* beta, int64_t gb_stride,
                           int64_t T, int64_t dk, int64_t dv, float* S, float* out, int64_t out_stride,
                           int64_t chunk) {
  std::vector<double> cum(chunk), kk(chunk * chunk), U(chunk * dv), W(chunk * dk), vnew(chunk * dv);
  std::vector<double> Sd(dk * dv);
  for (int64_t i = 0; i < dk * dv; ++i) Sd[i] = S[i];
  for (int64_t c0 = 0; c0 < T; c0 += chunk) {
    const int64_t C = std::min(chunk, T - c0);
    double run = 0;
    for (int64_t t = 0; t < C; ++t) cum[t] = (run += g[(c0 + t) * gb_stride]);
    auto K = [&](int64_t t) { return k + (c0 + t) * qk_stride; };
    auto Q = [&](int64_t t) { return q + (c0 + t) * qk_stride; };
    for (int64_t i = 0; i < C; ++i)
      for (int64_t j = 0; j <= i; ++j) {
        double s = 0;
        for (int64_t d = 0; d < dk; ++d) s += static_cast<double>(K(i)[d]) * K(j)[d];
        kk[i * chunk + j] = s;
      }
    // Forward substitution for U and W.
    for (int64_t i = 0; i < C; ++i) {
      const double bi = beta[(c0 + i) * gb_stride];
      const float* vi = v + (c0 + i) * v_stride;
      for (int64_t j = 0; j < dv; ++j) U[i * dv + j] = bi * vi[j];
      for (int64_t d = 0; d < dk; ++d) W[i * dk + d] = bi * K(i)[d] * std::exp(cum[i]);
      for (int64_t j = 0; j < i; ++j) {
        const double l = bi * kk[i * chunk + j] * std::exp(cum[i] - cum[j]);
        for (int64_t e = 0; e < dv; ++e) U[i * dv + e] -= l * U[j * dv + e];
        for (int64_t d = 0; d < dk; ++d) W[i * dk + d] -= l * W[j * dk + d];
      }
    }
    // v_new = U - W S
    for (int64_t i = 0; i < C; ++i)
      for (int64_t e = 0; e < dv; ++e) {
        double s = U[i * dv + e];
        for (int64_t d = 0; d < dk; ++d) s -= W[i * dk + d] * Sd[d * dv + e];
        vnew[i * dv + e] = s;
      }
    // Outputs.
    for (int64_t i = 0; i < C; ++i) {
      float* o = out + (c0 + i) * out_stride;
      const double ei = std::exp(cum[i]);
      for (int64_t e = 0; e < dv; ++e) {
        double s = 0;
        for (int64_t d = 0; d < dk; ++d) s += Q(i)[d] * Sd[d * dv + e];
        s *= ei;
        o[e] = static_cast<float>(s);
      }
      for (int64_t j = 0; j <= i; ++j) {
        double qk = 0;
        for (int64_t d = 0; d < dk; ++d) qk += static_cast<double>(Q(i)[d]) * K(j)[d];
        qk *= std::exp(cum[i] - cum[j]);
        for (int64_t e = 0; e < dv; ++e) o[e] += static_cast<float>(qk * vnew[j * dv + e]);
      }
    }
    // State update.
    const double last = cum[C - 1];
    const double el = std::exp(last);
    for (int64_t i = 0; i < dk * dv; ++i) Sd[i] *= el;
    for (int64_t t = 0; t < C; ++t) {
      const double f = std::exp(last - cum[t]);
      for (int64_t d = 0; d < dk; ++d) {
        const double kd = f * K(t)[d];
        for (int64_t e = 0; e < dv; ++e) Sd[d * dv + e] += kd * vnew[t * dv + e];
      }
    }
  }
  for (int64_t i = 0; i < dk * dv; ++i) S[i] = static_cast<float>(Sd[i]);
}

void CpuBackend::GatedDeltaRule(const GatedDeltaArgs& a, GdnMode mode) {
  TESSERA_CPU_OP("GatedDeltaRule");
  const int64_t rep = a.value_heads / a.key_heads;
  const bool chunked = mode == GdnMode::kChunked || (mode == GdnMode::kAuto && a.T > 1);
  pool_->ParallelFor(a.value_heads, [&](size_t begin, size_t end, int) {
    std::vector<float> qn(a.T * a.key_dim), kn(a.T * a.key_dim);
    for (size_t hv = begin; hv < end; ++hv) {
      const int64_t hk = static_cast<int64_t>(hv) / rep;
      const float scale = 1.0f / std::sqrt(static_cast<float>(a.key_dim));
      for (int64_t t = 0; t < a.T; ++t) {
        const float* qs = a.q + t * a.qk_stride + hk * a.key_dim;
        const float* ks = a.k + t * a.qk_stride + hk * a.key_dim;
        double sq = 0, sk = 0;
        for (int64_t d = 0; d < a.key_dim; ++d) {
          sq += static_cast<double>(qs[d]) * qs[d];
          sk += static_cast<double>(ks[d]) * ks[d];
        }
        const float iq = static_cast<float>(1.0 / std::sqrt(sq + 1e-6)) * scale;
        const float ik = static_cast<float>(1.0 / std::sqrt(sk + 1e-6));
        for (int64_t d = 0; d < a.key_dim; ++d) {
          qn[t * a.key_dim + d] = qs[d] * iq;
          kn[t * a.key_dim + d] = ks[d] * ik;
        }
      }
      float* S = a.state + hv * a.key_dim * a.value_dim;
      const float* v = a.v + hv * a.value_dim;
      float* o = a.out + hv * a.value_dim;
      const int64_t out_stride = a.value_heads * a.value_dim;
      if (chunked)
        GatedDeltaHeadChunked(qn.data(), kn.data(), a.key_dim, v, a.v_stride, a.g + hv, a.beta + hv,
                              a.value_heads, a.T, a.key_dim, a.value_dim, S, o, out_stride, kGdnChunk);
      else
        GatedDeltaHeadRecurrent(qn.data(), kn.data(), a.key_dim, v, a.v_stride, a.g + hv, a.beta + hv,
                                a.value_heads, a.T, a.key_dim, a.value_dim, S, o, out_stride);
    }
  });
}

}  // namespace tessera
