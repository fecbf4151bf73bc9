// tessera backend tests: MatMulNoTrans (y = x w, w [n, k] not transposed: DiffusionGemma's
// self-conditioning input, probabilities times the embedding table) on the CPU against a double loop,
// with bf16 and f32 weights and widths that are not a multiple of the kernel's column block; and the
// base class's refusal, which is what a backend without it (CUDA today) answers.
#include <gtest/gtest.h>

#include <random>
#include <tuple>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "expect_error.h"
#include "test_util.h"

namespace tessera {
namespace {

std::vector<float> Rand(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(gen);
  return v;
}

// x [m, n] times w [n, k] in double.
std::vector<double> Naive(const std::vector<float>& x, int64_t m, const std::vector<float>& w, int64_t n, int64_t k) {
  std::vector<double> y(static_cast<size_t>(m * k), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t r = 0; r < n; ++r)
      for (int64_t j = 0; j < k; ++j) y[i * k + j] += double(x[i * n + r]) * w[r * k + j];
  return y;
}

TEST(BackendMatMulNoTrans, F32AndBf16WeightsMatchDoubleLoop) {
  CpuBackend be;
  const std::vector<std::tuple<int64_t, int64_t, int64_t>> shapes = {{1, 5, 3}, {5, 33, 70}, {3, 200, 129}};
  for (const auto& [m, n, k] : shapes) {
    auto x = Rand(m * n, 31 + m), wf = Rand(n * k, 32 + k);
    std::vector<uint16_t> wb(wf.size());
    std::vector<float> wr(wf.size());  // the bf16 values as f32
    for (size_t i = 0; i < wf.size(); ++i) wb[i] = F32ToBf16(wf[i]), wr[i] = Bf16ToF32(wb[i]);
    Tensor tf;
    tf.data = wf.data();
    tf.dtype = DType::kF32;
    tf.shape = {n, k};
    Tensor tb;
    tb.data = wb.data();
    tb.dtype = DType::kBF16;
    tb.shape = {n, k};
    std::vector<float> yf(m * k, 7.f), yb(m * k, 7.f);  // overwritten, not accumulated
    be.MatMulNoTrans(x.data(), m, tf, yf.data());
    be.MatMulNoTrans(x.data(), m, tb, yb.data());
    const auto ref_f = Naive(x, m, wf, n, k), ref_b = Naive(x, m, wr, n, k);
    EXPECT_LT(testing::MaxAbsDiff(yf.data(), ref_f.data(), yf.size()), 1e-4) << m << "x" << n << "x" << k;
    EXPECT_LT(testing::MaxAbsDiff(yb.data(), ref_b.data(), yb.size()), 1e-4) << m << "x" << n << "x" << k;
  }
}

TEST(BackendMatMulNoTrans, RowsAreIndependentOfTheBatch) {
  // A canvas's soft input must not depend on the other canvases computed with it.
  CpuBackend be;
  const int64_t m = 4, n = 50, k = 80;
  auto x = Rand(m * n, 41), w = Rand(n * k, 42);
  Tensor t;
  t.data = w.data();
  t.dtype = DType::kF32;
  t.shape = {n, k};
  std::vector<float> all(m * k), one(k);
  be.MatMulNoTrans(x.data(), m, t, all.data());
  for (int64_t i = 0; i < m; ++i) {
    be.MatMulNoTrans(x.data() + i * n, 1, t, one.data());
    EXPECT_EQ(std::vector<float>(all.begin() + i * k, all.begin() + (i + 1) * k), one) << "row " << i;
  }
}

TEST(BackendMatMulNoTrans, BaseClassAndQuantizedWeightsRefuse) {
  CpuBackend be;
  std::vector<float> x(4, 1.f), w(8, 1.f), y(2);
  Tensor t;
  t.data = w.data();
  t.dtype = DType::kF32;
  t.shape = {4, 2};
  // What a backend that does not override it (CUDA today) answers: a clear refusal naming the op.
  testing::ExpectError([&] { be.Backend::MatMulNoTrans(x.data(), 1, t, y.data()); }, ErrorKind::kUnsupported,
                       {"MatMulNoTrans"});
  t.dtype = DType::kF16;
  testing::ExpectError([&] { be.MatMulNoTrans(x.data(), 1, t, y.data()); }, ErrorKind::kUnsupported,
                       {"MatMulNoTrans"});
}

}  // namespace
}  // namespace tessera
