// tessera tests: CUDA backend conformance of the dense products (MatMul, MatMulMulti) against the
// CPU backend: every path by row count (GEMV, the MMA kernel's row tiles, cuBLASLt's hi + lo GEMMs),
// ragged shapes, several weights in one launch. Skipped without a device.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "unit/backend_cuda_conformance.h"

namespace tessera::cuda_conformance {
namespace {

TEST_F(CudaConformance, MatMulBf16AndF32) {
  const int64_t k = 2048, n = 768;
  const auto w = Bf16s(Rand(n * k, -0.05f, 0.05f, 1));
  // m <= 8: GEMV; 9..64: the MMA kernel's one row tile (32 or 64 rows, partly filled); 65..256: its
  // row tiles of 64 (the last partly filled) while m n k <= 2^31 (100 and 256 rows here), else
  // cuBLASLt's hi + lo GEMMs (257). RowTiledMmaMatchesCpu forces the row tiles for every shape.
  for (int64_t m : {1, 5, 8, 9, 20, 33, 64, 65, 100, 256, 257}) {
    const auto x = Rand(m * k, -1, 1, 10 + m);
    std::vector<float> want(m * n, 0.5f), got;
    auto y = want;
    cpu_->MatMul(x.data(), m, HostBf16(w, n, k), want.data(), /*accumulate=*/true);
    float* dy = Dev(y);
    gpu_->MatMul(Dev(x), m, DevBf16(w, n, k), dy, true);
    got = Host(dy, m * n);
    Report(("MatMul bf16 m=" + std::to_string(m)).c_str(), RelErr(got, want));
  }
  // A wide output (272 column tiles of 128): the few-row kernel runs unsplit (the case above splits k).
  {
    const int64_t wk = 256, wn = 34816, m = 20;
    const auto ww = Bf16s(Rand(wn * wk, -0.05f, 0.05f, 5));
    const auto x = Rand(m * wk, -1, 1, 6);
    std::vector<float> want(m * wn);
    cpu_->MatMul(x.data(), m, HostBf16(ww, wn, wk), want.data(), false);
    float* dy = Dev(std::vector<float>(want.size()));
    gpu_->MatMul(Dev(x), m, DevBf16(ww, wn, wk), dy, false);
    Report("MatMul bf16 m=20 n=34816", RelErr(Host(dy, want.size()), want));
  }
  // Ragged shapes: n not a multiple of a column tile, k a multiple of 32 but not of 64, every
  // kernel family (GEMV, few-row m <= 32 and 33..64, the 256-column variant for very wide outputs).
  for (const auto& [m, rn, rk] : {std::tuple<int64_t, int64_t, int64_t>{1, 517, 2080}, {3, 517, 2080}, {8, 517, 2080},
                                 {9, 517, 2080}, {40, 517, 2080}, {64, 517, 2080}, {48, 34856, 288},
                                 {200, 517, 2080}, {130, 34856, 288}}) {
    const auto rw = Bf16s(Rand(rn * rk, -0.05f, 0.05f, 7 + m));
    const auto x = Rand(m * rk, -1, 1, 20 + m);
    std::vector<float> want(m * rn, -0.25f);
    auto y = want;
    cpu_->MatMul(x.data(), m, HostBf16(rw, rn, rk), want.data(), /*accumulate=*/true);
    float* dy = Dev(y);
    gpu_->MatMul(Dev(x), m, DevBf16(rw, rn, rk), dy, true);
    Report(("MatMul bf16 m=" + std::to_string(m) + " n=" + std::to_string(rn) + " k=" + std::to_string(rk)).c_str(),
           RelErr(Host(dy, m * rn), want));
  }
  const auto wf = Rand(256 * 512, -0.05f, 0.05f, 3);
  const auto x = Rand(16 * 512, -1, 1, 4);
  std::vector<float> want(16 * 256);
  cpu_->MatMul(x.data(), 16, Tensor{wf.data(), DType::kF32, {256, 512}, {}}, want.data(), false);
  float* dy = Dev(std::vector<float>(16 * 256));
  gpu_->MatMul(Dev(x), 16, Tensor{Dev(wf), DType::kF32, {256, 512}, {}}, dy, false);
  Report("MatMul f32 m=16", RelErr(Host(dy, want.size()), want));
}

// The MMA kernel's row tiles of 64 for products the default leaves to cuBLASLt (a backend with
// TESSERA_CUDA_SKINNY_MAX_WORK unbounded): partly filled last tiles, both column widths (128, and
// 256 for outputs that fill the SMs), k split across a cluster (narrow outputs), accumulate.
TEST_F(CudaConformance, RowTiledMmaMatchesCpu) {
  setenv("TESSERA_CUDA_SKINNY_MAX_WORK", "1000000000000000", 1);
  auto tiled = MakeCudaBackend();
  unsetenv("TESSERA_CUDA_SKINNY_MAX_WORK");
  for (const auto& [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{65, 768, 2048}, {130, 517, 2080},
                                {256, 2048, 4096}, {200, 34856, 288}, {256, 12352, 2048}}) {
    const auto w = Bf16s(Rand(n * k, -0.05f, 0.05f, 60 + m));
    const auto x = Rand(m * k, -1, 1, 70 + m);
    std::vector<float> want(m * n, 0.75f);
    auto y = want;
    cpu_->MatMul(x.data(), m, HostBf16(w, n, k), want.data(), /*accumulate=*/true);
    DeviceBuffer dx(*tiled, x.size() * 4), dw(*tiled, w.size() * 2), dy(*tiled, y.size() * 4);
    tiled->Upload(dx.data(), x.data(), x.size() * 4);
    tiled->Upload(dw.data(), w.data(), w.size() * 2);
    tiled->Upload(dy.data(), y.data(), y.size() * 4);
    tiled->MatMul(dx.f32(), m, Tensor{dw.data(), DType::kBF16, {n, k}, {}}, dy.f32(), true);
    std::vector<float> got(y.size());
    tiled->Download(got.data(), dy.data(), got.size() * 4);
    Report(("MatMul row-tiled m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k)).c_str(),
           RelErr(got, want));
  }
}

// Several weights of one input in one launch (q / k / v, router + shared expert). GEMV rows
// (m <= 8): a job splits k as the whole launch does, so its last bits may differ from its own
// MatMul's. MMA-kernel rows (9..64, and 256 for the router + shared expert: the jobs share one k
// split and the row tiles), per weight otherwise (q / k / v at 256 rows, everything at 257). Every
// row of both within tolerance of the CPU and of each other. Shapes: q / k / v of Qwen3-30B-A3B, the router, shared
// gate / up and 1-column output gate of Qwen3.5, ragged widths.
TEST_F(CudaConformance, MatMulMultiEqualsMatMulEach) {
  const int64_t k = 2048;
  for (const std::vector<int64_t>& ns : {std::vector<int64_t>{4096, 512, 512}, {256, 512, 512, 1}, {517, 3, 1000}}) {
    std::vector<std::vector<uint16_t>> ws;
    for (size_t j = 0; j < ns.size(); ++j) ws.push_back(Bf16s(Rand(ns[j] * k, -0.05f, 0.05f, 40 + j)));
    for (int64_t m : {1, 2, 8, 9, 32, 33, 64, 65, 256, 257}) {
      const auto x = Rand(m * k, -1, 1, 50 + m);
      const float* dx = Dev(x);
      std::vector<Tensor> dw;
      std::vector<Backend::MatMulOut> outs;
      std::vector<float*> single;
      for (size_t j = 0; j < ns.size(); ++j) dw.push_back(DevBf16(ws[j], ns[j], k));
      for (size_t j = 0; j < ns.size(); ++j) {
        outs.push_back({&dw[j], Dev(std::vector<float>(m * ns[j], 7.0f))});
        single.push_back(Dev(std::vector<float>(m * ns[j], 7.0f)));
        gpu_->MatMul(dx, m, dw[j], single[j], false);
      }
      gpu_->MatMulMulti(dx, m, outs);
      for (size_t j = 0; j < ns.size(); ++j) {
        const auto got = Host(outs[j].y, m * ns[j]), alone = Host(single[j], m * ns[j]);
        std::vector<float> want(m * ns[j]);
        cpu_->MatMul(x.data(), m, HostBf16(ws[j], ns[j], k), want.data(), false);
        const std::string shape = " m=" + std::to_string(m) + " n=" + std::to_string(ns[j]);
        Report(("MatMulMulti" + shape).c_str(), RelErr(got, want));
        Report(("MatMul alone" + shape).c_str(), RelErr(alone, want));
        EXPECT_LE(RelErr(got, alone), 1e-5) << "multi against alone (f32 sums in another order)" << shape;
      }
    }
  }
}

// bf16 activations (SetActivationPrecision(kBF16), the GPU's serving default): every tensor-core
// product multiplies x rounded to bf16, i.e. the CPU's product of the rounded x up to summation order,
// on each path: the MMA kernel (20 rows), the wgmma kernel splitting x in its blocks (48 x 768) and
// pre-split (48 x 4096: many column tiles), its row tiles (100), cuBLASLt (257, 1024) and MatMulMulti;
// the GEMV (<= 8 rows) keeps f32 x. A kernel that ignored the setting would give the f32 product,
// which is more than 3 kTol from the rounded one (checked). The MoE experts (grouped kernels,
// pipelined at 64 rows and the prompt-chunk ones at 2048) round x and the gate/up output alike: no
// CPU op does that, so they are held to bf16's error (1e-2, issue 5's bound) and must differ from
// the f32 result (> 1e-5: the rounding took effect).
TEST_F(CudaConformance, Bf16ActivationsMultiplyTheRoundedInput) {
  gpu_->SetActivationPrecision(DType::kBF16);
  ASSERT_EQ(gpu_->ActivationPrecision(), DType::kBF16);
  const int64_t k = 2048;
  auto rounded = [](const std::vector<float>& v) {
    std::vector<float> r(v.size());
    for (size_t i = 0; i < v.size(); ++i) r[i] = Bf16ToF32(F32ToBf16(v[i]));
    return r;
  };
  for (const auto& [m, n] : {std::pair<int64_t, int64_t>{5, 768}, {20, 768}, {48, 768}, {48, 4096}, {100, 768},
                             {257, 768}, {1024, 768}}) {
    const auto w = Bf16s(Rand(n * k, -0.05f, 0.05f, 80 + n));
    const auto x = Rand(m * k, -1, 1, 90 + m);
    std::vector<float> exact(m * n), round(m * n);
    cpu_->MatMul(x.data(), m, HostBf16(w, n, k), exact.data(), false);
    cpu_->MatMul(rounded(x).data(), m, HostBf16(w, n, k), round.data(), false);
    float* dy = Dev(std::vector<float>(m * n, 7.0f));
    gpu_->MatMul(Dev(x), m, DevBf16(w, n, k), dy, false);
    const std::string shape = " m=" + std::to_string(m) + " n=" + std::to_string(n);
    const bool gemv = m <= 8;
    Report(("MatMul bf16 activations" + shape).c_str(), RelErr(Host(dy, m * n), gemv ? exact : round));
    if (!gemv) {
      EXPECT_GT(RelErr(exact, round), 3 * kTol) << shape;
    }
  }
  {  // MatMulMulti: the router + shared gate / up widths of one launch
    const int64_t m = 48;
    const std::vector<int64_t> ns = {256, 512, 512};
    const auto x = Rand(m * k, -1, 1, 95);
    const float* dx = Dev(x);
    std::vector<std::vector<uint16_t>> ws;
    std::vector<Tensor> dw;
    std::vector<Backend::MatMulOut> outs;
    for (size_t j = 0; j < ns.size(); ++j) ws.push_back(Bf16s(Rand(ns[j] * k, -0.05f, 0.05f, 96 + j)));
    for (size_t j = 0; j < ns.size(); ++j) dw.push_back(DevBf16(ws[j], ns[j], k));
    for (size_t j = 0; j < ns.size(); ++j) outs.push_back({&dw[j], Dev(std::vector<float>(m * ns[j], 7.0f))});
    gpu_->MatMulMulti(dx, m, outs);
    for (size_t j = 0; j < ns.size(); ++j) {
      std::vector<float> want(m * ns[j]);
      cpu_->MatMul(rounded(x).data(), m, HostBf16(ws[j], ns[j], k), want.data(), false);
      Report(("MatMulMulti bf16 activations n=" + std::to_string(ns[j])).c_str(), RelErr(Host(outs[j].y, m * ns[j]), want));
    }
  }
  const int64_t E = 128, top = 8, H = 2048, I = 128;
  const RandomExperts experts = MakeExperts(E, I, H, 3000);
  for (int64_t R : {64, 2048}) {
    const auto x = Rand(R * H, -1, 1, 97 + R);
    const auto logits = Rand(R * E, -4, 4, 98 + R);
    std::vector<int32_t> idx(R * top);
    std::vector<float> wts(R * top), want(R * H);
    cpu_->MoeRoute(logits.data(), R, E, top, true, idx.data(), wts.data());
    cpu_->MoeExperts(x.data(), R, H, idx.data(), wts.data(), top, experts.host, want.data());
    float* dout = Dev(std::vector<float>(R * H, 7.0f));
    gpu_->MoeExperts(Dev(x), R, H, Dev(idx), Dev(wts), top, experts.dev, dout);
    const double err = RelErr(Host(dout, want.size()), want);
    Report(("MoeExperts bf16 activations rows=" + std::to_string(R)).c_str(), err, 1e-2);
    EXPECT_GT(err, 1e-5) << "rows " << R << ": the bf16 rounding should show";
  }
}

}  // namespace
}  // namespace tessera::cuda_conformance
