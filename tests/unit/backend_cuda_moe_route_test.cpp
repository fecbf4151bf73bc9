// tessera tests: the MoE routing fused into the few-token expert kernels (Backend::MoeRouteExperts
// on the CUDA backend) against MoeRoute then MoeExperts on the same device (bit for bit: ids,
// weights, output) and on the CPU. Skipped without a device.
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

}  // namespace
}  // namespace tessera::cuda_conformance
