// tessera backend tests: each CPU op against a naive double-precision reference loop written from
// the HF definitions, on random (never zero) inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/gemm.h"
#include "core/dtype.h"
#include "core/quant.h"
#include "io/quant_formats.h"
#include "core/thread_pool.h"
#include "test_util.h"

namespace tessera {
namespace {

std::vector<float> Rand(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(gen);
  return v;
}

double MaxDiff(const std::vector<float>& a, const std::vector<double>& b) {
  return testing::MaxAbsDiff(a.data(), b.data(), a.size());
}

Tensor F32Weight(const std::vector<float>& w, int64_t n, int64_t k) {
  Tensor t;
  t.data = w.data();
  t.dtype = DType::kF32;
  t.shape = {n, k};
  return t;
}

// The difference every comparison here (and the golden tests') rests on: NaN must not vanish from
// the maximum, as it does from std::max.
TEST(BackendOps, MaxAbsDiffCountsNanAndUnmatchedInfinity) {
  const std::vector<float> want = {1.0f, -2.0f, 3.0f};
  EXPECT_DOUBLE_EQ(testing::MaxAbsDiff(std::vector<float>{1.0f, -2.5f, 3.25f}.data(), want.data(), 3), 0.5);
  EXPECT_EQ(testing::MaxAbsDiff(std::vector<float>{NAN, NAN, NAN}.data(), want.data(), 3), INFINITY);
  EXPECT_EQ(testing::MaxAbsDiff(std::vector<float>{1.0f, -2.0f, NAN}.data(), want.data(), 3), INFINITY);
  EXPECT_EQ(testing::MaxAbsDiff(std::vector<float>{1.0f, INFINITY, 3.0f}.data(), want.data(), 3), INFINITY);
  const std::vector<float> masked = {-INFINITY, 0.5f};  // the same infinity on both sides is no difference
  EXPECT_DOUBLE_EQ(testing::MaxAbsDiff(std::vector<float>{-INFINITY, 0.75f}.data(), masked.data(), 2), 0.25);
  const std::vector<double> wd = {1.0, NAN};
  EXPECT_EQ(testing::MaxAbsDiff(std::vector<float>{1.0f, 2.0f}.data(), wd.data(), 2), INFINITY);
}

TEST(BackendOps, RmsNormPlainAndOnePlus) {
  CpuBackend be;
  const int64_t rows = 5, dim = 24;
  auto x = Rand(rows * dim, 1, -3, 3), w = Rand(dim, 2);
  for (bool one_plus : {false, true}) {
    std::vector<float> y(rows * dim);
    be.RmsNorm(x.data(), rows, dim, dim, w.data(), 1e-6f, one_plus, y.data(), dim);
    std::vector<double> ref(rows * dim);
    for (int64_t r = 0; r < rows; ++r) {
      double ss = 0;
      for (int64_t j = 0; j < dim; ++j) ss += double(x[r * dim + j]) * x[r * dim + j];
      const double inv = 1 / std::sqrt(ss / dim + 1e-6);
      for (int64_t j = 0; j < dim; ++j) ref[r * dim + j] = x[r * dim + j] * inv * (one_plus ? 1 + w[j] : w[j]);
    }
    EXPECT_LT(MaxDiff(y, ref), 1e-5) << one_plus;
  }
}

TEST(BackendOps, GatedRmsNorm) {
  CpuBackend be;
  const int64_t rows = 6, dim = 16;
  auto x = Rand(rows * dim, 3), z = Rand(rows * dim, 4, -4, 4), w = Rand(dim, 5);
  std::vector<float> y(rows * dim);
  be.GatedRmsNorm(x.data(), z.data(), rows, dim, w.data(), 1e-6f, y.data());
  std::vector<double> ref(rows * dim);
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (int64_t j = 0; j < dim; ++j) ss += double(x[r * dim + j]) * x[r * dim + j];
    const double inv = 1 / std::sqrt(ss / dim + 1e-6);
    for (int64_t j = 0; j < dim; ++j) {
      const double zz = z[r * dim + j];
      ref[r * dim + j] = w[j] * x[r * dim + j] * inv * zz / (1 + std::exp(-zz));
    }
  }
  EXPECT_LT(MaxDiff(y, ref), 1e-5);
}

TEST(BackendOps, PartialRopeRotatesOnlyLeadingDims) {
  CpuBackend be;
  const int64_t rows = 4, heads = 3, hd = 16, rot = 4;
  const double theta = 10000;
  auto x = Rand(rows * heads * hd, 6);
  std::vector<int64_t> pos = {0, 5, 17, 123};
  std::vector<float> y = x;
  be.Rope(y.data(), rows, heads * hd, heads, hd, rot, pos.data(), theta);
  std::vector<double> ref(x.begin(), x.end());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < rot / 2; ++i) {
        const double f = pos[r] / std::pow(theta, 2.0 * i / rot);
        const size_t o = (r * heads + h) * hd;
        const double a = x[o + i], b = x[o + i + rot / 2];
        ref[o + i] = a * std::cos(f) - b * std::sin(f);
        ref[o + i + rot / 2] = b * std::cos(f) + a * std::sin(f);
      }
  EXPECT_LT(MaxDiff(y, ref), 1e-4);
}

// QkNormRope's default is the layer's former four ops (RmsNorm q, RmsNorm k, Rope q, Rope k); rows
// laid out with gaps (q and k in one [rows, q | k | pad] buffer) give the same values as contiguous.
TEST(BackendOps, QkNormRopeEqualsNormsThenRopeAnyStride) {
  CpuBackend be;
  const int64_t rows = 3, qh = 4, kh = 2, hd = 16, rot = 8, qd = qh * hd, kd = kh * hd, stride = qd + kd + 5;
  const auto q = Rand(rows * qd, 21), k = Rand(rows * kd, 22), qn = Rand(hd, 23), kn = Rand(hd, 24);
  const std::vector<int64_t> pos = {0, 7, 300};
  for (bool one_plus : {false, true}) {
    std::vector<float> want_q = q, want_k = k;
    be.RmsNorm(want_q.data(), rows * qh, hd, hd, qn.data(), 1e-6f, one_plus, want_q.data(), hd);
    be.RmsNorm(want_k.data(), rows * kh, hd, hd, kn.data(), 1e-6f, one_plus, want_k.data(), hd);
    be.Rope(want_q.data(), rows, qd, qh, hd, rot, pos.data(), 1e6);
    be.Rope(want_k.data(), rows, kd, kh, hd, rot, pos.data(), 1e6);
    std::vector<float> got_q = q, got_k = k, packed(rows * stride, 9.0f);
    be.QkNormRope(got_q.data(), qd, qh, got_k.data(), kd, kh, rows, hd, qn.data(), kn.data(), 1e-6f, one_plus, rot,
                  pos.data(), 1e6);
    EXPECT_EQ(got_q, want_q);
    EXPECT_EQ(got_k, want_k);
    for (int64_t r = 0; r < rows; ++r) {
      std::copy(q.begin() + r * qd, q.begin() + (r + 1) * qd, packed.begin() + r * stride);
      std::copy(k.begin() + r * kd, k.begin() + (r + 1) * kd, packed.begin() + r * stride + qd);
    }
    be.QkNormRope(packed.data(), stride, qh, packed.data() + qd, stride, kh, rows, hd, qn.data(), kn.data(), 1e-6f,
                  one_plus, rot, pos.data(), 1e6);
    for (int64_t r = 0; r < rows; ++r) {
      EXPECT_TRUE(std::equal(want_q.begin() + r * qd, want_q.begin() + (r + 1) * qd, packed.begin() + r * stride));
      EXPECT_TRUE(std::equal(want_k.begin() + r * kd, want_k.begin() + (r + 1) * kd, packed.begin() + r * stride + qd));
      EXPECT_EQ(packed[r * stride + qd + kd], 9.0f);  // the gap is left alone
    }
  }
}

// Paged, GQA, block-causal attention of T new rows after a cached prefix of P positions.
TEST(BackendOps, PagedBlockCausalAttention) {
  CpuBackend be;
  const int64_t nh = 4, kvh = 2, hd = 8, P = 10, T = 7, page = 3, kvd = kvh * hd;
  for (int64_t block : {0, 4}) {
    auto q = Rand(T * nh * hd, 7, -2, 2), k = Rand((P + T) * kvd, 8, -2, 2), v = Rand((P + T) * kvd, 9);
    std::vector<int32_t> pages = {5, 0, 3, 1, 4, 2};  // scattered page ids
    std::vector<float> kc(6 * page * kvd, 7.0f), vc(6 * page * kvd, 7.0f);
    be.KvWrite(k.data(), v.data(), kvd, P, kvd, 0, pages.data(), page, kc.data(), vc.data());
    std::vector<float> out(T * nh * hd);
    AttentionArgs a;
    a.q = q.data();
    a.q_stride = nh * hd;
    a.k = k.data() + P * kvd;
    a.v = v.data() + P * kvd;
    a.kv_stride = kvd;
    a.T = T;
    a.num_heads = nh;
    a.num_kv_heads = kvh;
    a.head_dim = hd;
    a.first_pos = P;
    a.k_cache = kc.data();
    a.v_cache = vc.data();
    a.pages = pages.data();
    a.page_size = page;
    a.block_size = block;
    a.scale = 0.3f;
    a.out = out.data();
    a.out_stride = nh * hd;
    be.Attention(a);
    std::vector<double> ref(out.size());
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < nh; ++h) {
        const int64_t p = P + t, g = h / (nh / kvh);
        std::vector<double> s;
        for (int64_t j = 0; j < P + T; ++j) {
          const bool vis = block ? (j / block <= p / block) : (j <= p);
          double d = 0;
          for (int64_t e = 0; e < hd; ++e) d += double(q[(t * nh + h) * hd + e]) * k[j * kvd + g * hd + e];
          s.push_back(vis ? d * 0.3 : -INFINITY);
        }
        const double mx = *std::max_element(s.begin(), s.end());
        double sum = 0;
        for (auto& x : s) sum += (x = std::exp(x - mx));
        for (int64_t e = 0; e < hd; ++e) {
          double acc = 0;
          for (int64_t j = 0; j < P + T; ++j) acc += s[j] / sum * v[j * kvd + g * hd + e];
          ref[(t * nh + h) * hd + e] = acc;
        }
      }
    EXPECT_LT(MaxDiff(out, ref), 1e-5) << "block " << block;
  }
}

// Decode-sized calls (few query rows) walk a long prefix in key spans merged afterwards: a row past
// the span size, in a batch of two sequences, against the naive reference, with and without a
// sliding window; the batch equals each sequence alone, and 1 thread equals 4, bit for bit.
TEST(BackendOps, AttentionOfFewRowsOverLongPrefixesMatchesNaive) {
  const int64_t nh = 8, kvh = 2, hd = 16, page = 16, kvd = kvh * hd;
  struct Seq {
    int64_t P, T;
    std::vector<float> q, k, v, kc, vc, out;
    std::vector<int32_t> pages;
  };
  for (int64_t window : {0, 100}) {
    std::vector<Seq> seqs(2);
    seqs[0].P = 300, seqs[0].T = 1;  // five spans of 64 keys, the last of 45
    seqs[1].P = 129, seqs[1].T = 8;  // rows of 130-137 keys: with seqs[0], 18 split rows (merged on 2 threads)
    for (size_t i = 0; i < seqs.size(); ++i) {
      Seq& s = seqs[i];
      const int64_t n = s.P + s.T, npages = (n + page - 1) / page;
      s.q = Rand(s.T * nh * hd, static_cast<uint32_t>(30 + i), -2, 2);
      s.k = Rand(n * kvd, static_cast<uint32_t>(40 + i), -2, 2);
      s.v = Rand(n * kvd, static_cast<uint32_t>(50 + i));
      for (int64_t p = 0; p < npages; ++p) s.pages.push_back(static_cast<int32_t>((p * 7) % npages));  // scattered
      s.kc.assign(npages * page * kvd, 7.0f), s.vc.assign(npages * page * kvd, 7.0f);
      CpuBackend be;
      be.KvWrite(s.k.data(), s.v.data(), kvd, s.P, kvd, 0, s.pages.data(), page, s.kc.data(), s.vc.data());
    }
    auto args_of = [&](Seq& s, float* out) {
      AttentionArgs a;
      a.q = s.q.data(), a.q_stride = nh * hd;
      a.k = s.k.data() + s.P * kvd, a.v = s.v.data() + s.P * kvd, a.kv_stride = kvd;
      a.T = s.T, a.num_heads = nh, a.num_kv_heads = kvh, a.head_dim = hd, a.first_pos = s.P;
      a.k_cache = s.kc.data(), a.v_cache = s.vc.data(), a.pages = s.pages.data(), a.page_size = page;
      a.sliding_window = window, a.scale = 0.25f, a.out = out, a.out_stride = nh * hd;
      return a;
    };
    std::vector<std::vector<float>> batched(2), alone(2), one_thread(2);
    for (int threads : {4, 1}) {
      ThreadPool::SetGlobalThreads(threads);
      CpuBackend be;
      auto& outs = threads == 1 ? one_thread : batched;
      std::vector<AttentionArgs> args;
      for (size_t i = 0; i < 2; ++i) {
        outs[i].assign(seqs[i].T * nh * hd, 0.0f);
        args.push_back(args_of(seqs[i], outs[i].data()));
      }
      be.AttentionBatch(args);
      if (threads == 4)
        for (size_t i = 0; i < 2; ++i) {
          alone[i].assign(seqs[i].T * nh * hd, 0.0f);
          be.Attention(args_of(seqs[i], alone[i].data()));
        }
    }
    ThreadPool::SetGlobalThreads(static_cast<int>(std::thread::hardware_concurrency()));
    for (size_t i = 0; i < 2; ++i) {
      const Seq& s = seqs[i];
      EXPECT_EQ(batched[i], alone[i]) << "sequence " << i << " window " << window;
      EXPECT_EQ(batched[i], one_thread[i]) << "sequence " << i << " window " << window;
      std::vector<double> ref(batched[i].size());
      for (int64_t t = 0; t < s.T; ++t)
        for (int64_t h = 0; h < nh; ++h) {
          const int64_t p = s.P + t, g = h / (nh / kvh);
          std::vector<double> sc;
          for (int64_t j = 0; j <= p; ++j) {
            double d = 0;
            for (int64_t e = 0; e < hd; ++e) d += double(s.q[(t * nh + h) * hd + e]) * s.k[j * kvd + g * hd + e];
            sc.push_back(window > 0 && j <= p - window ? -INFINITY : d * 0.25);
          }
          const double mx = *std::max_element(sc.begin(), sc.end());
          double sum = 0;
          for (auto& x : sc) sum += (x = std::exp(x - mx));
          for (int64_t e = 0; e < hd; ++e) {
            double acc = 0;
            for (int64_t j = 0; j <= p; ++j) acc += sc[j] / sum * s.v[j * kvd + g * hd + e];
            ref[(t * nh + h) * hd + e] = acc;
          }
        }
      EXPECT_LT(MaxDiff(batched[i], ref), 1e-5) << "sequence " << i << " window " << window;
    }
  }
}

TEST(BackendOps, CausalConv1dContinuesFromState) {
  CpuBackend be;
  const int64_t T = 9, C = 5, K = 4;
  auto x = Rand(T * C, 10), w = Rand(C * K, 11), state = Rand(C * (K - 1), 12);
  std::vector<float> y(T * C);
  be.CausalConv1dSilu(x.data(), T, C, C, w.data(), K, state.data(), y.data());
  std::vector<double> ref(T * C);
  for (int64_t c = 0; c < C; ++c)
    for (int64_t t = 0; t < T; ++t) {
      double s = 0;
      for (int64_t j = 0; j < K; ++j) {
        const int64_t src = t - (K - 1) + j;
        s += w[c * K + j] * (src >= 0 ? x[src * C + c] : state[c * (K - 1) + (K - 1) + src]);
      }
      ref[t * C + c] = s / (1 + std::exp(-s));
    }
  EXPECT_LT(MaxDiff(y, ref), 1e-5);
  // Feeding the rows in two pieces with a state update in between gives the same outputs.
  std::vector<float> st = state, y1(4 * C), y2(5 * C);
  be.CausalConv1dSilu(x.data(), 4, C, C, w.data(), K, st.data(), y1.data());
  be.CausalConv1dUpdateState(x.data(), 4, C, C, K, st.data());
  be.CausalConv1dSilu(x.data() + 4 * C, 5, C, C, w.data(), K, st.data(), y2.data());
  y1.insert(y1.end(), y2.begin(), y2.end());
  EXPECT_LT(MaxDiff(y1, ref), 1e-6);
}

// Naive gated delta rule (HF's recurrent definition) in double, with l2-normalised q, k.
std::vector<double> NaiveGdn(const GatedDeltaArgs& a, std::vector<double>* state) {
  std::vector<double> out(a.T * a.value_heads * a.value_dim);
  const int64_t rep = a.value_heads / a.key_heads, dk = a.key_dim, dv = a.value_dim;
  for (int64_t h = 0; h < a.value_heads; ++h) {
    double* S = state->data() + h * dk * dv;
    for (int64_t t = 0; t < a.T; ++t) {
      std::vector<double> q(dk), k(dk);
      double nq = 0, nk = 0;
      for (int64_t d = 0; d < dk; ++d) {
        q[d] = a.q[t * a.qk_stride + (h / rep) * dk + d];
        k[d] = a.k[t * a.qk_stride + (h / rep) * dk + d];
        nq += q[d] * q[d];
        nk += k[d] * k[d];
      }
      for (int64_t d = 0; d < dk; ++d) {
        q[d] /= std::sqrt(nq + 1e-6) * std::sqrt(double(dk));
        k[d] /= std::sqrt(nk + 1e-6);
      }
      const double decay = std::exp(a.g[t * a.value_heads + h]), beta = a.beta[t * a.value_heads + h];
      for (int64_t i = 0; i < dk * dv; ++i) S[i] *= decay;
      for (int64_t e = 0; e < dv; ++e) {
        double mem = 0;
        for (int64_t d = 0; d < dk; ++d) mem += S[d * dv + e] * k[d];
        const double delta = (a.v[t * a.v_stride + h * dv + e] - mem) * beta;
        for (int64_t d = 0; d < dk; ++d) S[d * dv + e] += k[d] * delta;
      }
      for (int64_t e = 0; e < dv; ++e) {
        double o = 0;
        for (int64_t d = 0; d < dk; ++d) o += S[d * dv + e] * q[d];
        out[(t * a.value_heads + h) * dv + e] = o;
      }
    }
  }
  return out;
}

TEST(BackendOps, GatedDeltaRuleChunkedAndRecurrentMatchNaive) {
  CpuBackend be;
  const int64_t T = 150, kh = 2, vh = 4, dk = 8, dv = 6;  // T spans three chunks of 64
  auto q = Rand(T * kh * dk, 13), k = Rand(T * kh * dk, 14), v = Rand(T * vh * dv, 15);
  auto g = Rand(T * vh, 16, -0.5f, -0.01f), beta = Rand(T * vh, 17, 0.05f, 0.95f);
  auto init = Rand(vh * dk * dv, 18);
  GatedDeltaArgs a;
  a.q = q.data();
  a.k = k.data();
  a.qk_stride = kh * dk;
  a.v = v.data();
  a.v_stride = vh * dv;
  a.g = g.data();
  a.beta = beta.data();
  a.T = T;
  a.key_heads = kh;
  a.value_heads = vh;
  a.key_dim = dk;
  a.value_dim = dv;
  std::vector<double> ref_state(init.begin(), init.end());
  auto ref = NaiveGdn(a, &ref_state);
  for (GdnMode mode : {GdnMode::kChunked, GdnMode::kRecurrent}) {
    std::vector<float> state = init, out(T * vh * dv);
    a.state = state.data();
    a.out = out.data();
    be.GatedDeltaRule(a, mode);
    EXPECT_LT(MaxDiff(out, ref), 1e-4) << int(mode);
    EXPECT_LT(MaxDiff(state, ref_state), 1e-4) << int(mode);
  }
}

// The router temperature's op: rows divided by their own divisor, a true division (the same float
// as x / d), so that a divisor of 1 leaves a row's bits as they are.
TEST(BackendOps, DivideRowsDividesEachRowByItsOwn) {
  CpuBackend be;
  const int64_t rows = 5, dim = 13;
  auto x = Rand(rows * dim, 41, -5, 5);
  const std::vector<float> d = {1.f, 0.3f, 2.5f, 1.f, 0.05f};
  std::vector<float> y = x;
  be.DivideRows(y.data(), rows, dim, d.data());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < dim; ++j) {
      const float want = x[r * dim + j] / d[r];
      EXPECT_EQ(y[r * dim + j], want) << r << "," << j;
      if (d[r] == 1.f) {
        EXPECT_EQ(std::memcmp(&y[r * dim + j], &x[r * dim + j], sizeof(float)), 0);
      }
    }
  EXPECT_NE(y[dim], x[dim]);  // the 0.3 row changed
}

TEST(BackendOps, MoeRouteAndExpertsMatchNaive) {
  CpuBackend be;
  const int64_t rows = 9, E = 6, k = 2, H = 8, I = 5;
  auto logits = Rand(rows * E, 19, -3, 3), x = Rand(rows * H, 20);
  std::vector<std::vector<float>> wg, wu, wd;
  std::vector<ExpertWeights> experts(E);
  for (int64_t e = 0; e < E; ++e) {
    wg.push_back(Rand(I * H, 100 + e));
    wu.push_back(Rand(I * H, 200 + e));
    wd.push_back(Rand(H * I, 300 + e));
  }
  for (int64_t e = 0; e < E; ++e)
    experts[e] = {F32Weight(wg[e], I, H), F32Weight(wu[e], I, H), F32Weight(wd[e], H, I)};
  std::vector<int32_t> idx(rows * k);
  std::vector<float> w(rows * k), out(rows * H);
  be.MoeRoute(logits.data(), rows, E, k, true, idx.data(), w.data());
  be.MoeExperts(x.data(), rows, H, idx.data(), w.data(), k, experts, out.data());
  std::vector<double> ref(rows * H, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<double> p(E);
    for (int64_t e = 0; e < E; ++e) p[e] = std::exp(double(logits[r * E + e]));
    std::vector<int> order(E);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int a, int b) { return p[a] > p[b]; });
    const double top = p[order[0]] + p[order[1]];
    for (int j = 0; j < k; ++j) {
      const int e = order[j];
      EXPECT_EQ(idx[r * k + j], e);
      EXPECT_NEAR(w[r * k + j], p[e] / top, 1e-6);
      std::vector<double> act(I);
      for (int64_t i = 0; i < I; ++i) {
        double gs = 0, us = 0;
        for (int64_t c = 0; c < H; ++c) {
          gs += double(wg[e][i * H + c]) * x[r * H + c];
          us += double(wu[e][i * H + c]) * x[r * H + c];
        }
        act[i] = gs / (1 + std::exp(-gs)) * us;
      }
      for (int64_t c = 0; c < H; ++c) {
        double d = 0;
        for (int64_t i = 0; i < I; ++i) d += double(wd[e][c * I + i]) * act[i];
        ref[r * H + c] += p[e] / top * d;
      }
    }
  }
  EXPECT_LT(MaxDiff(out, ref), 1e-5);
}

// Routed experts of 2 rows x top-4 over 16 experts (hidden 256, intermediate 96): bit for bit the same
// on 1 and 16 threads, and near the double product of the weights' values (value(m, i): element i of
// matrix m = 3 * expert + {gate, up, down}).
void CheckMoeOnManyThreads(const std::vector<ExpertWeights>& experts, const std::function<double(int64_t, int64_t)>& value,
                           uint32_t seed) {
  const int64_t rows = 2, E = 16, k = 4, H = 256, I = 96;
  auto logits = Rand(rows * E, seed, -3, 3), x = Rand(rows * H, seed + 1);
  auto run = [&](int threads) {
    ThreadPool::SetGlobalThreads(threads);
    CpuBackend be;
    std::vector<int32_t> idx(rows * k);
    std::vector<float> w(rows * k), out(rows * H);
    be.MoeRoute(logits.data(), rows, E, k, true, idx.data(), w.data());
    be.MoeExperts(x.data(), rows, H, idx.data(), w.data(), k, experts, out.data());
    return out;
  };
  const std::vector<float> one = run(1);
  const std::vector<float> many = run(16);
  ThreadPool::SetGlobalThreads(static_cast<int>(std::thread::hardware_concurrency()));
  ASSERT_EQ(one.size(), many.size());
  EXPECT_EQ(std::memcmp(one.data(), many.data(), one.size() * sizeof(float)), 0);
  // The double reference of the routed pairs (the routing weights as computed above).
  std::vector<double> ref(rows * H, 0.0);
  CpuBackend be;
  std::vector<int32_t> idx(rows * k);
  std::vector<float> w(rows * k);
  be.MoeRoute(logits.data(), rows, E, k, true, idx.data(), w.data());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < k; ++j) {
      const int64_t e = idx[r * k + j];
      std::vector<double> act(I);
      for (int64_t i = 0; i < I; ++i) {
        double gs = 0, us = 0;
        for (int64_t c = 0; c < H; ++c) {
          gs += value(3 * e, i * H + c) * x[r * H + c];
          us += value(3 * e + 1, i * H + c) * x[r * H + c];
        }
        act[i] = gs / (1 + std::exp(-gs)) * us;
      }
      for (int64_t c = 0; c < H; ++c) {
        double d = 0;
        for (int64_t i = 0; i < I; ++i) d += value(3 * e + 2, c * I + i) * act[i];
        ref[r * H + c] += w[r * k + j] * d;
      }
    }
  EXPECT_LT(MaxDiff(one, ref), 1e-4);
}

// bf16 experts with fewer active experts than threads (a decode step on many cores) run as one
// parallel loop over all their products' column blocks (GemmF32xBf16Batch): the result is bit for bit
// the one-thread result, where each expert runs whole on the calling thread.
TEST(BackendOps, MoeExpertsOnManyThreadsEqualOneThread) {
  const int64_t E = 16, H = 256, I = 96;
  std::vector<std::vector<uint16_t>> mats;
  for (int64_t e = 0; e < E; ++e)
    for (int m = 0; m < 3; ++m) {
      const auto v = Rand(I * H, static_cast<uint32_t>(400 + 3 * e + m), -0.2f, 0.2f);
      std::vector<uint16_t> b(v.size());
      for (size_t i = 0; i < v.size(); ++i) b[i] = F32ToBf16(v[i]);
      mats.push_back(std::move(b));
    }
  std::vector<ExpertWeights> experts(E);
  for (int64_t e = 0; e < E; ++e)
    experts[e] = {Tensor{mats[3 * e].data(), DType::kBF16, {I, H}, {}},
                  Tensor{mats[3 * e + 1].data(), DType::kBF16, {I, H}, {}},
                  Tensor{mats[3 * e + 2].data(), DType::kBF16, {H, I}, {}}};
  CheckMoeOnManyThreads(experts, [&](int64_t m, int64_t i) { return double(Bf16ToF32(mats[m][i])); }, 31);
}

// The same with int4 experts (GemmF32xQuantBatch); the reference multiplies the dequantized weights.
TEST(BackendOps, QuantizedMoeExpertsOnManyThreadsEqualOneThread) {
  const int64_t E = 16, H = 256, I = 96;
  std::vector<QuantizedMatrix> mats;
  std::vector<std::vector<float>> deq;
  for (int64_t e = 0; e < E; ++e)
    for (int m = 0; m < 3; ++m) {
      const int64_t n = m == 2 ? H : I, kk = m == 2 ? I : H;
      const auto v = Rand(n * kk, static_cast<uint32_t>(500 + 3 * e + m), -0.2f, 0.2f);
      mats.push_back(QuantizeMatrix(QuantKind::kInt4, DType::kF32, v.data(), n, kk));
      WeightQuant q = mats.back().meta;
      q.scales = mats.back().scales.data();
      std::vector<float> f(n * kk);
      gemm_internal::DequantRowsGeneric(mats.back().codes.data(), q, kk, 0, n, f.data());
      deq.push_back(std::move(f));
    }
  auto tensor = [&](int64_t i, int64_t n, int64_t kk) {
    Tensor t{mats[i].codes.data(), DType::kU8, {n, kk}, {}};
    t.quant = mats[i].meta;
    t.quant.scales = mats[i].scales.data();
    return t;
  };
  std::vector<ExpertWeights> experts(E);
  for (int64_t e = 0; e < E; ++e)
    experts[e] = {tensor(3 * e, I, H), tensor(3 * e + 1, I, H), tensor(3 * e + 2, H, I)};
  CheckMoeOnManyThreads(experts, [&](int64_t m, int64_t i) { return double(deq[m][i]); }, 41);
}

TEST(BackendOps, MatMulBf16MatchesF32OfSameValues) {
  CpuBackend be;
  const int64_t m = 3, k = 32, n = 7;
  auto x = Rand(m * k, 21), wf = Rand(n * k, 22);
  std::vector<uint16_t> wb(n * k);
  for (size_t i = 0; i < wb.size(); ++i) {
    wb[i] = F32ToBf16(wf[i]);
    wf[i] = Bf16ToF32(wb[i]);
  }
  Tensor tb;
  tb.data = wb.data();
  tb.dtype = DType::kBF16;
  tb.shape = {n, k};
  std::vector<float> y(m * n);
  be.MatMul(x.data(), m, tb, y.data(), false);
  std::vector<double> ref(m * n);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t c = 0; c < k; ++c) ref[i * n + j] += double(x[i * k + c]) * wf[j * k + c];
  EXPECT_LT(MaxDiff(y, ref), 1e-4);
}

// MatMulMulti runs its products as one parallel loop (bf16 ones, or quantized ones); each output
// must equal its own MatMul bit for bit, on one thread and on 16, for decode and prompt row counts;
// a mix of bf16 and f32 weights takes the default (one MatMul each).
TEST(BackendOps, MatMulMultiEqualsEachMatMulBitForBit) {
  const int64_t k = 256;
  const std::vector<int64_t> widths = {512, 64, 64};
  std::vector<std::vector<uint16_t>> bf16(widths.size());
  std::vector<QuantizedMatrix> quant;
  std::vector<Tensor> tb, tq;
  for (size_t i = 0; i < widths.size(); ++i) {
    const auto v = Rand(widths[i] * k, static_cast<uint32_t>(700 + i), -0.2f, 0.2f);
    bf16[i].resize(v.size());
    for (size_t j = 0; j < v.size(); ++j) bf16[i][j] = F32ToBf16(v[j]);
    quant.push_back(QuantizeMatrix(i == 0 ? QuantKind::kInt4 : QuantKind::kFp8, DType::kF32, v.data(), widths[i], k));
  }
  for (size_t i = 0; i < widths.size(); ++i) {
    tb.push_back(Tensor{bf16[i].data(), DType::kBF16, {widths[i], k}, {}});
    Tensor t{quant[i].codes.data(), DType::kU8, {widths[i], k}, {}};
    t.quant = quant[i].meta;
    t.quant.scales = quant[i].scales.data();
    tq.push_back(t);
  }
  std::vector<float> wf(64 * k);
  const auto wf_src = Rand(64 * k, 710);
  std::copy(wf_src.begin(), wf_src.end(), wf.begin());
  const Tensor tf = F32Weight(wf, 64, k);
  for (const int threads : {1, 16}) {
    ThreadPool::SetGlobalThreads(threads);
    CpuBackend be;
    for (const int64_t m : {1, 5, 64}) {
      const auto x = Rand(m * k, static_cast<uint32_t>(720 + m));
      for (const std::vector<Tensor>* ws : {&tb, &tq}) {
        std::vector<std::vector<float>> multi(ws->size()), single(ws->size());
        std::vector<Backend::MatMulOut> outs;
        for (size_t i = 0; i < ws->size(); ++i) {
          multi[i].assign(m * widths[i], -1.0f);
          single[i].assign(m * widths[i], -2.0f);
          outs.push_back({&(*ws)[i], multi[i].data()});
        }
        be.MatMulMulti(x.data(), m, outs);
        for (size_t i = 0; i < ws->size(); ++i) {
          be.MatMul(x.data(), m, (*ws)[i], single[i].data(), false);
          EXPECT_EQ(std::memcmp(multi[i].data(), single[i].data(), multi[i].size() * sizeof(float)), 0)
              << (ws == &tb ? "bf16" : "quantized") << " product " << i << " m=" << m << " threads=" << threads;
        }
      }
      // bf16 and f32 weights in one call: the default path, still each its MatMul.
      std::vector<float> a(m * 512, -1.0f), b(m * 64, -1.0f), a1(m * 512), b1(m * 64);
      be.MatMulMulti(x.data(), m, {{&tb[0], a.data()}, {&tf, b.data()}});
      be.MatMul(x.data(), m, tb[0], a1.data(), false);
      be.MatMul(x.data(), m, tf, b1.data(), false);
      EXPECT_EQ(a, a1);
      EXPECT_EQ(b, b1);
    }
  }
  ThreadPool::SetGlobalThreads(static_cast<int>(std::thread::hardware_concurrency()));
}

}  // namespace
}  // namespace tessera
