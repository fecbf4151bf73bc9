// tessera tests: the MoE ops that fuse others on the CUDA backend, each against the ops it replaces
// on the same device (bit for bit) and against the CPU: the routing inside the few-token expert
// kernels (MoeRouteExperts), the residual add and norm after the experts (its ResidualNorm), the
// shared expert's activation and gate (SiluMulScaleRows). Skipped without a device.
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "backend/backend.h"
#include "unit/backend_cuda_conformance.h"

namespace tessera::cuda_conformance {
namespace {

// Expert counts for each form of the kernel's routing (up to 64, 128, 256, 512 experts: 2, 4, 8, 16
// logits a lane), top-8 and top-10, one and two rows (8-16 pairs: fused; 20 pairs: the two ops),
// with and without renormalised weights; in a step graph too (eager, captured, replayed).
TEST_F(CudaConformance, MoeRouteExpertsEqualsTwoOps) {
  for (const auto& [E, k, I, H] : {std::tuple<int64_t, int64_t, int64_t, int64_t>{24, 8, 768, 2048},
                                   {128, 8, 64, 256}, {256, 8, 64, 256}, {512, 10, 64, 256}}) {
    const RandomExperts experts = MakeExperts(E, I, H, 3000 + E);
    for (const auto& [R, renormalize] : {std::pair<int64_t, bool>{1, true}, {2, false}}) {
      const std::string what = " E=" + std::to_string(E) + " k=" + std::to_string(k) + " rows=" + std::to_string(R) +
                                (renormalize ? " renormalised" : "");
      const auto x = Rand(R * H, -1, 1, 90 + R);
      const auto logits = Rand(R * E, -4, 4, 91 + R + E);
      // CPU reference.
      std::vector<int32_t> idx_want(R * k);
      std::vector<float> w_want(R * k), want(R * H);
      cpu_->MoeRoute(logits.data(), R, E, k, renormalize, idx_want.data(), w_want.data());
      cpu_->MoeExperts(x.data(), R, H, idx_want.data(), w_want.data(), k, experts.host, want.data());
      // The two ops on the device.
      const float *dx = Dev(x), *dl = Dev(logits);
      int32_t* idx_two = Dev(std::vector<int32_t>(R * k, -1));
      float* w_two = Dev(std::vector<float>(R * k, 7.0f));
      float* out_two = Dev(std::vector<float>(R * H, 7.0f));
      gpu_->MoeRoute(dl, R, E, k, renormalize, idx_two, w_two);
      gpu_->MoeExperts(dx, R, H, idx_two, w_two, k, experts.dev, out_two);
      // The fused op, alone and in a step three times.
      int32_t* idx_one = Dev(std::vector<int32_t>(R * k, -1));
      float* w_one = Dev(std::vector<float>(R * k, 7.0f));
      float* out_one = Dev(std::vector<float>(R * H, 7.0f));
      for (int round = 0; round < 4; ++round) {
        gpu_->Zero(idx_one, R * k * sizeof(int32_t));
        gpu_->Zero(out_one, R * H * sizeof(float));
        if (round > 0) gpu_->BeginStep();
        gpu_->MoeRouteExperts(dl, dx, R, H, k, renormalize, idx_one, w_one, experts.dev, out_one);
        if (round > 0) gpu_->EndStep();
        const std::string at = what + " r" + std::to_string(round);
        EXPECT_EQ(Host(idx_one, R * k), Host(idx_two, R * k)) << "ids" << at;
        EXPECT_EQ(Host(w_one, R * k), Host(w_two, R * k)) << "weights" << at;
        EXPECT_EQ(Host(out_one, R * H), Host(out_two, R * H)) << "output" << at;
      }
      EXPECT_EQ(Host(idx_one, R * k), idx_want) << "ids against the CPU" << what;
      Report(("MoeRouteExperts weights" + what).c_str(), RelErr(Host(w_one, R * k), w_want), 1e-6);
      Report(("MoeRouteExperts" + what).c_str(), RelErr(Host(out_one, R * H), want), 1e-3);
    }
  }
}

// MoeRouteExperts with the residual add and norm (Backend::ResidualNorm) against the separate ops
// on the same device: MoeRouteExperts, Add of the shared expert's output, AddRmsNorm. h and y bit
// for bit, y aliasing the MoE input x as in the model, with and without `extra`, both norm styles,
// on every expert path: routed few-token kernels (1-2 rows), the two ops past 16 pairs (3 rows), the
// device-grouped kernels (64 rows), and a width the row-in-registers norm cannot hold (258: the
// slots are summed apart first). In a step graph too. Against the CPU backend's default op (1e-4).
TEST_F(CudaConformance, MoeRouteExpertsResidualNormEqualsSeparateOps) {
  for (const auto& [E, k, I, H] : {std::tuple<int64_t, int64_t, int64_t, int64_t>{128, 8, 64, 256}, {24, 8, 64, 258}}) {
    const RandomExperts experts = MakeExperts(E, I, H, 5000 + E);
    const auto norm_w = Rand(H, -0.5f, 1.5f, 77);
    for (int64_t R : {1, 2, 3, 64}) {
      for (const bool with_extra : {false, true}) {
        const bool one_plus = R % 2 == 1;
        const std::string what = " E=" + std::to_string(E) + " H=" + std::to_string(H) + " rows=" +
                                 std::to_string(R) + (with_extra ? " extra" : "") + (one_plus ? " 1+w" : "");
        const auto x = Rand(R * H, -1, 1, 400 + R), h0 = Rand(R * H, -2, 2, 401 + R), extra = Rand(R * H, -1, 1, 402);
        const auto logits = Rand(R * E, -4, 4, 403 + R);
        const float *dl = Dev(logits), *dw = Dev(norm_w), *dextra = with_extra ? Dev(extra) : nullptr;
        auto run = [&, k = k, H = H](bool fused, bool step) {  // copies: clang 14 cannot capture bindings
          float *xy = Dev(x), *h = Dev(h0), *out = Dev(std::vector<float>(R * H, 7.0f));
          int32_t* idx = Dev(std::vector<int32_t>(R * k, -1));
          float* wts = Dev(std::vector<float>(R * k, 7.0f));
          Backend::ResidualNorm rn;
          rn.h = h, rn.extra = dextra, rn.w = dw, rn.eps = 1e-6f, rn.one_plus = one_plus, rn.y = xy;
          if (step) gpu_->BeginStep();
          if (fused) {
            gpu_->MoeRouteExperts(dl, xy, R, H, k, true, idx, wts, experts.dev, out, &rn);
          } else {
            gpu_->MoeRouteExperts(dl, xy, R, H, k, true, idx, wts, experts.dev, out);
            if (dextra) gpu_->Add(dextra, R * H, out);
            gpu_->AddRmsNorm(out, h, R, H, dw, rn.eps, one_plus, xy);
          }
          if (step) gpu_->EndStep();
          return std::make_pair(Host(h, R * H), Host(xy, R * H));
        };
        const auto want = run(false, false);
        EXPECT_EQ(run(true, false), want) << "eager" << what;
        for (int round = 0; round < 3; ++round) EXPECT_EQ(run(true, true), want) << "step " << round << what;
        // The CPU backend's default op.
        std::vector<float> cx = x, ch = h0, cout(R * H);
        std::vector<int32_t> cidx(R * k);
        std::vector<float> cw(R * k);
        Backend::ResidualNorm rn;
        rn.h = ch.data(), rn.extra = with_extra ? extra.data() : nullptr, rn.w = norm_w.data(), rn.eps = 1e-6f;
        rn.one_plus = one_plus, rn.y = cx.data();
        cpu_->MoeRouteExperts(logits.data(), cx.data(), R, H, k, true, cidx.data(), cw.data(), experts.host,
                              cout.data(), &rn);
        Report(("MoeRouteExperts residual h" + what).c_str(), RelErr(want.first, ch));
        Report(("MoeRouteExperts residual y" + what).c_str(), RelErr(want.second, cx));
      }
    }
  }
}

// The shared expert's activation and gate in one op: bit for bit SiluMul then SigmoidScaleRows on
// the device (in place, as MoeForward calls it), and within 1e-6 of the CPU.
TEST_F(CudaConformance, SiluMulScaleRowsEqualsTwoOps) {
  for (const auto& [rows, dim] : {std::pair<int64_t, int64_t>{1, 512}, {64, 512}, {3, 77}}) {
    const auto g = Rand(rows * dim, -6, 6, 600 + rows), u = Rand(rows * dim, -2, 2, 601), sc = Rand(rows, -5, 5, 602);
    float* one = Dev(g);
    float* two = Dev(g);
    const float *du = Dev(u), *ds = Dev(sc);
    gpu_->SiluMulScaleRows(one, du, rows, dim, ds, one);
    gpu_->SiluMul(two, du, rows * dim, two);
    gpu_->SigmoidScaleRows(two, rows, dim, ds);
    const std::string what = " rows=" + std::to_string(rows) + " dim=" + std::to_string(dim);
    EXPECT_EQ(Host(one, rows * dim), Host(two, rows * dim)) << what;
    std::vector<float> want(rows * dim);
    cpu_->SiluMulScaleRows(g.data(), u.data(), rows, dim, sc.data(), want.data());
    Report(("SiluMulScaleRows" + what).c_str(), RelErr(Host(one, rows * dim), want), 1e-6);
  }
}

}  // namespace
}  // namespace tessera::cuda_conformance
