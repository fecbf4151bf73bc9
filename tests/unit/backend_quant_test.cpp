// Quantized weights on the CPU backend: the e4m3 conversions against the format's definition, the
// vectorised dequantizers against the portable one (bit for bit), and GemmF32xQuant against a naive
// double-precision product of the layout's formula (core/quant.h), with act-order permutations and
// W8A8 input rounding; quantization at load against the documented rounding.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/gemm.h"
#include "core/dtype.h"
#include "core/quant.h"
#include "core/thread_pool.h"
#include "io/quant_formats.h"

namespace tessera {
namespace {

TEST(Fp8E4M3, DecodesTheFormatsValues) {
  EXPECT_EQ(Fp8E4M3ToF32(0x00), 0.0f);
  EXPECT_EQ(Fp8E4M3ToF32(0x38), 1.0f);       // exponent 7 = bias
  EXPECT_EQ(Fp8E4M3ToF32(0xb8), -1.0f);
  EXPECT_EQ(Fp8E4M3ToF32(0x7e), 448.0f);     // the largest finite value: 1.75 * 2^8
  EXPECT_EQ(Fp8E4M3ToF32(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_EQ(Fp8E4M3ToF32(0x08), std::ldexp(1.0f, -6));  // smallest normal
  EXPECT_EQ(Fp8E4M3ToF32(0x07), 7 * std::ldexp(1.0f, -9));
  EXPECT_EQ(Fp8E4M3ToF32(0x3c), 1.5f);
  EXPECT_TRUE(std::isnan(Fp8E4M3ToF32(0x7f)));
  EXPECT_TRUE(std::isnan(Fp8E4M3ToF32(0xff)));
}

TEST(Fp8E4M3, EncodesEveryValueBackAndRoundsToNearestEven) {
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7f) == 0x7f) continue;  // NaN
    const float v = Fp8E4M3ToF32(static_cast<uint8_t>(c));
    if (c == 0x80) continue;  // -0 encodes as 0x80 too, checked below
    EXPECT_EQ(F32ToFp8E4M3(v), c) << "code " << c;
  }
  EXPECT_EQ(F32ToFp8E4M3(-0.0f), 0x80);
  // 1.0 and 1.125 are neighbours; their midpoint goes to the even mantissa (1.0), 1.1875 to 1.25.
  EXPECT_EQ(F32ToFp8E4M3(1.0625f), 0x38);
  EXPECT_EQ(F32ToFp8E4M3(1.1875f), 0x3a);
  EXPECT_EQ(F32ToFp8E4M3(1.07f), 0x39);
  EXPECT_EQ(F32ToFp8E4M3(1000.f), 0x7e);  // saturates
  EXPECT_EQ(F32ToFp8E4M3(-1000.f), 0xfe);
  EXPECT_EQ(F32ToFp8E4M3(std::ldexp(1.0f, -11)), 0x00);  // below half the smallest subnormal
  EXPECT_EQ(F32ToFp8E4M3(std::ldexp(3.0f, -11)), 0x01);  // 0.75 of the smallest subnormal: up to it
  EXPECT_EQ(F32ToFp8E4M3(std::ldexp(3.0f, -10)), 0x02);  // 1.5 subnormal steps: the even 2
}

struct RandomQuant {
  std::vector<uint8_t> codes;
  std::vector<float> scales, zeros;
  std::vector<int32_t> perm;
  WeightQuant q;
};

RandomQuant MakeQuant(QuantKind kind, int64_t n, int64_t k, int64_t group, bool zeros, bool perm, uint64_t seed) {
  std::mt19937_64 rng(seed);
  RandomQuant r;
  r.q.kind = kind;
  r.q.group = group;
  r.codes.resize(static_cast<size_t>(n * QuantRowBytes(kind, k)));
  for (uint8_t& b : r.codes) {
    b = static_cast<uint8_t>(rng());
    if (kind == QuantKind::kFp8 && (b & 0x7f) == 0x7f) b = 0x3f;  // no NaN codes
  }
  const int64_t G = r.q.Groups(k);
  std::uniform_real_distribution<float> u(0.01f, 0.2f);
  for (int64_t i = 0; i < n * G; ++i) r.scales.push_back(u(rng));
  if (zeros)
    for (int64_t i = 0; i < n * G; ++i) r.zeros.push_back(static_cast<float>(static_cast<int>(rng() % 9) - 4));
  if (perm) {
    for (int32_t i = 0; i < k; ++i) r.perm.push_back(i);
    std::shuffle(r.perm.begin(), r.perm.end(), rng);
  }
  r.q.scales = r.scales.data();
  r.q.zeros = zeros ? r.zeros.data() : nullptr;
  r.q.perm = perm ? r.perm.data() : nullptr;
  return r;
}

struct DequantCase {
  QuantKind kind;
  int64_t k, group;
  bool zeros;
};

class DequantKernels : public ::testing::TestWithParam<DequantCase> {};

TEST_P(DequantKernels, VectorisedEqualsPortableBitForBit) {
  const DequantCase c = GetParam();
  const int64_t n = 7;
  RandomQuant r = MakeQuant(c.kind, n, c.k, c.group, c.zeros, false, 11);
  std::vector<float> want(n * c.k), got(n * c.k);
  gemm_internal::DequantRowsGeneric(r.codes.data(), r.q, c.k, 0, n, want.data());
  // The formula itself, element by element.
  for (int64_t row = 0; row < n; ++row)
    for (int64_t col = 0; col < c.k; ++col) {
      const int64_t g = row * r.q.Groups(c.k) + col / c.group;
      const double code = QuantCodeValue(c.kind, r.codes.data() + row * QuantRowBytes(c.kind, c.k), col);
      const double w = r.scales[g] * (code - (c.zeros ? r.zeros[g] : 0.0));
      ASSERT_NEAR(want[row * c.k + col], w, std::fabs(w) * 1e-6 + 1e-12);
    }
  int tried = 0;
  if (CpuHasAvx512()) {
    gemm_internal::DequantRowsAvx512(r.codes.data(), r.q, c.k, 0, n, got.data());
    EXPECT_EQ(want, got) << "avx512";
    ++tried;
  }
  if (CpuHasAvx2Fma()) {
    std::fill(got.begin(), got.end(), 0.f);
    gemm_internal::DequantRowsAvx2(r.codes.data(), r.q, c.k, 0, n, got.data());
    EXPECT_EQ(want, got) << "avx2";
    ++tried;
  }
  EXPECT_GT(tried, 0) << "this processor has neither AVX2 nor AVX-512: nothing vectorised was checked";
}

INSTANTIATE_TEST_SUITE_P(Kinds, DequantKernels,
                         ::testing::Values(DequantCase{QuantKind::kInt4, 128, 32, true},
                                           DequantCase{QuantKind::kInt4, 100, 50, false},  // tails, odd groups
                                           DequantCase{QuantKind::kInt4, 96, 96, false},
                                           DequantCase{QuantKind::kInt8, 130, 130, false},
                                           DequantCase{QuantKind::kInt8, 128, 24, true},
                                           DequantCase{QuantKind::kFp8, 256, 128, false},
                                           DequantCase{QuantKind::kFp8, 70, 35, false}));

// The naive product: y = round_act(x)[perm] . dequantized(w), in double.
std::vector<double> NaiveProduct(const std::vector<float>& x, int64_t m, int64_t k, const RandomQuant& r, int64_t n) {
  std::vector<double> y(m * n, 0.0);
  const double qmax = r.q.kind == QuantKind::kFp8 ? 448.0 : 127.0;
  for (int64_t i = 0; i < m; ++i) {
    std::vector<float> row(x.begin() + i * k, x.begin() + (i + 1) * k);
    if (r.q.act != ActQuant::kNone) {
      float s = r.q.act_scale;
      if (r.q.act == ActQuant::kDynamicPerToken) {
        float amax = 0;
        for (float v : row) amax = std::max(amax, std::fabs(v));
        s = static_cast<float>(amax / qmax);
      }
      for (float& v : row)
        v = r.q.kind == QuantKind::kFp8 ? Fp8E4M3ToF32(F32ToFp8E4M3(v / s)) * s
                                        : std::clamp(std::nearbyint(v / s), -127.f, 127.f) * s;
    }
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (int64_t c = 0; c < k; ++c) {
        const int64_t g = j * r.q.Groups(k) + c / r.q.group;
        const double code = QuantCodeValue(r.q.kind, r.codes.data() + j * QuantRowBytes(r.q.kind, k), c);
        const double w = r.scales[g] * (code - (r.q.zeros ? r.zeros[g] : 0.0));
        acc += w * row[r.q.perm ? r.perm[c] : c];
      }
      y[i * n + j] = acc;
    }
  }
  return y;
}

struct GemmCase {
  QuantKind kind;
  int64_t m, n, k, group;
  bool zeros, perm;
  ActQuant act;
};

class QuantGemm : public ::testing::TestWithParam<GemmCase> {};

TEST_P(QuantGemm, MatchesTheNaiveProductOnEveryKernel) {
  const GemmCase c = GetParam();
  RandomQuant r = MakeQuant(c.kind, c.n, c.k, c.group, c.zeros, c.perm, 5);
  r.q.act = c.act;
  r.q.act_scale = 0.02f;
  std::mt19937_64 rng(9);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> x(c.m * c.k);
  for (float& v : x) v = nd(rng);
  const std::vector<double> want = NaiveProduct(x, c.m, c.k, r, c.n);
  for (const char* kernel : {"generic", "avx2", "avx512"}) {
    if (!ForceGemmKernel(kernel)) continue;
    std::vector<float> y(c.m * c.n, 1.0f);
    GemmF32xQuant(x.data(), c.m, c.k, r.codes.data(), r.q, c.n, y.data(), nullptr);
    for (int64_t i = 0; i < c.m * c.n; ++i)
      ASSERT_NEAR(y[i], want[i], 1e-4 * (1 + std::fabs(want[i]))) << kernel << " element " << i;
    // accumulate adds to what is there
    std::vector<float> y2 = y;
    GemmF32xQuant(x.data(), c.m, c.k, r.codes.data(), r.q, c.n, y2.data(), nullptr, true);
    for (int64_t i = 0; i < c.m * c.n; ++i) ASSERT_NEAR(y2[i], 2 * y[i], 1e-5 * (1 + std::fabs(y[i])));
  }
  ForceGemmKernel("");
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, QuantGemm,
    ::testing::Values(GemmCase{QuantKind::kInt4, 1, 40, 128, 32, true, false, ActQuant::kNone},
                      GemmCase{QuantKind::kInt4, 5, 33, 96, 32, false, true, ActQuant::kNone},
                      GemmCase{QuantKind::kInt4, 17, 64, 256, 128, true, true, ActQuant::kNone},
                      GemmCase{QuantKind::kInt8, 3, 50, 100, 100, false, false, ActQuant::kNone},
                      GemmCase{QuantKind::kInt8, 4, 24, 64, 64, false, false, ActQuant::kDynamicPerToken},
                      GemmCase{QuantKind::kInt8, 2, 24, 64, 64, false, false, ActQuant::kStatic},
                      GemmCase{QuantKind::kFp8, 1, 70, 256, 128, false, false, ActQuant::kNone},
                      GemmCase{QuantKind::kFp8, 9, 31, 64, 64, false, false, ActQuant::kDynamicPerToken},
                      GemmCase{QuantKind::kFp8, 2, 16, 64, 64, false, false, ActQuant::kStatic},
                      // The AVX-512 dot's 32-column path: every row count up to 4, weight rows not a
                      // multiple of its tiles, zero points, act order, several groups a row.
                      GemmCase{QuantKind::kInt4, 2, 37, 512, 128, false, false, ActQuant::kNone},
                      GemmCase{QuantKind::kInt4, 3, 9, 64, 64, true, true, ActQuant::kNone},
                      GemmCase{QuantKind::kInt4, 4, 11, 256, 32, true, false, ActQuant::kNone},
                      GemmCase{QuantKind::kInt8, 4, 29, 192, 64, true, false, ActQuant::kNone},
                      GemmCase{QuantKind::kInt8, 1, 7, 96, 96, false, false, ActQuant::kNone},
                      GemmCase{QuantKind::kFp8, 3, 13, 96, 32, false, false, ActQuant::kNone},
                      GemmCase{QuantKind::kFp8, 1, 6, 160, 128, false, false, ActQuant::kNone},  // short last group
                      GemmCase{QuantKind::kInt4, 2, 5, 224, 64, true, false, ActQuant::kNone}));

TEST(QuantGemm, ThreadedEqualsSingleThreaded) {
  RandomQuant r = MakeQuant(QuantKind::kInt4, 300, 512, 128, true, false, 3);
  std::vector<float> x(4 * 512);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.1f * static_cast<float>(i));
  std::vector<float> a(4 * 300), b(4 * 300);
  GemmF32xQuant(x.data(), 4, 512, r.codes.data(), r.q, 300, a.data(), nullptr);
  ThreadPool pool(3);
  GemmF32xQuant(x.data(), 4, 512, r.codes.data(), r.q, 300, b.data(), &pool);
  EXPECT_EQ(a, b);
}

TEST(QuantizeAtLoad, RoundsAsDocumented) {
  // Row 0: amax 2 -> int8 scale 2/127, int4 scale 2/7; a zero row gets scale 1 and zero codes.
  const int64_t n = 2, k = 4;
  const std::vector<float> w = {2.f, -1.f, 0.5f, 0.0079f, 0.f, 0.f, 0.f, 0.f};
  QuantizedMatrix q8 = QuantizeMatrix(QuantKind::kInt8, DType::kF32, w.data(), n, k);
  EXPECT_EQ(q8.scales[0], 2.f / 127.f);
  EXPECT_EQ(q8.scales[1], 1.f);
  EXPECT_EQ(static_cast<int8_t>(q8.codes[0]), 127);
  EXPECT_EQ(static_cast<int8_t>(q8.codes[1]), static_cast<int8_t>(std::nearbyint(-1.f / (2.f / 127.f))));  // -64 (-63.5)
  EXPECT_EQ(static_cast<int8_t>(q8.codes[1]), -64);  // -63.5 rounds to the even -64
  EXPECT_EQ(static_cast<int8_t>(q8.codes[3]), 1);    // 0.50165
  for (int c = 4; c < 8; ++c) EXPECT_EQ(q8.codes[c], 0);
  // int4 on a row whose scale is exact (amax 7 -> scale 1), so the ties are ties in f32 too: codes 7,
  // -4 (-3.5 to even), 2 (2.5 to even), 0 -> nibbles 0x7 | 0xc << 4, 0x2 | 0x0 << 4.
  const std::vector<float> w4 = {7.f, -3.5f, 2.5f, 0.1f};
  QuantizedMatrix q4 = QuantizeMatrix(QuantKind::kInt4, DType::kF32, w4.data(), 1, k);
  EXPECT_EQ(q4.meta.group, 4);  // min(128, k)
  EXPECT_EQ(q4.scales[0], 1.f);
  EXPECT_EQ(q4.codes[0], 0xc7);
  EXPECT_EQ(q4.codes[1], 0x02);
  QuantizedMatrix f8 = QuantizeMatrix(QuantKind::kFp8, DType::kF32, w.data(), n, k);
  EXPECT_EQ(f8.scales[0], 2.f / 448.f);
  EXPECT_EQ(Fp8E4M3ToF32(f8.codes[0]), 448.f);
  EXPECT_EQ(Fp8E4M3ToF32(f8.codes[1]), -224.f);
}

}  // namespace
}  // namespace tessera
