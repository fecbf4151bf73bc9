// tessera tests: the Gated DeltaNet conv and its state shift in one op (Backend::
// CausalConv1dSiluUpdateBatch) on the CUDA backend against CausalConv1dSiluBatch then
// CausalConv1dUpdateStateBatch on the same device (bit for bit: outputs and states) and on the CPU.
// Skipped without a device.
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "backend/backend.h"
#include "unit/backend_cuda_conformance.h"

namespace tessera::cuda_conformance {
namespace {

// One-row segments (decode: the fused kernel) at K 4 and 2 with a channel count past a whole block,
// rows with a gap and a stride wider than the channels; segments of two rows take the two ops.
TEST_F(CudaConformance, ConvSiluUpdateEqualsTwoOps) {
  for (const auto& [segments, T, K, C] : {std::tuple<int64_t, int64_t, int64_t, int64_t>{64, 1, 4, 1000},
                                         {3, 1, 2, 300}, {5, 2, 4, 260}}) {
    const std::string what = " segments=" + std::to_string(segments) + " T=" + std::to_string(T) +
                             " K=" + std::to_string(K) + " C=" + std::to_string(C);
    const int64_t xs = C + 24, S = K - 1, rows = segments * (T + 1);  // a row of gap after each segment
    const auto x = Rand(rows * xs, -1, 1, 500 + C), w = Rand(C * K, -1, 1, 501 + C);
    const auto states = Rand(segments * C * S, -1, 1, 502 + C);
    // CPU reference.
    auto cpu_states = states;
    std::vector<float> want(rows * C, 3.0f);
    std::vector<Backend::ConvSegment> cpu_segs;
    for (int64_t i = 0; i < segments; ++i) cpu_segs.push_back({i * (T + 1), T, cpu_states.data() + i * C * S});
    cpu_->CausalConv1dSiluUpdateBatch(x.data(), xs, C, w.data(), K, cpu_segs, want.data());
    // The two ops and the fused op on the device, each on its own copy of the states.
    const float *dx = Dev(x), *dw = Dev(w);
    float* st_two = Dev(states);
    float* st_one = Dev(states);
    float* y_two = Dev(std::vector<float>(rows * C, 3.0f));
    float* y_one = Dev(std::vector<float>(rows * C, 3.0f));
    std::vector<Backend::ConvSegment> two, one;
    for (int64_t i = 0; i < segments; ++i) {
      two.push_back({i * (T + 1), T, st_two + i * C * S});
      one.push_back({i * (T + 1), T, st_one + i * C * S});
    }
    gpu_->CausalConv1dSiluBatch(dx, xs, C, dw, K, two, y_two);
    gpu_->CausalConv1dUpdateStateBatch(dx, xs, C, K, two);
    gpu_->CausalConv1dSiluUpdateBatch(dx, xs, C, dw, K, one, y_one);
    EXPECT_EQ(Host(y_one, rows * C), Host(y_two, rows * C)) << "outputs" << what;
    EXPECT_EQ(Host(st_one, states.size()), Host(st_two, states.size())) << "states" << what;
    Report(("ConvSiluUpdate y" + what).c_str(), RelErr(Host(y_one, rows * C), want), 1e-5);
    Report(("ConvSiluUpdate state" + what).c_str(), RelErr(Host(st_one, states.size()), cpu_states), 0);
  }
}

}  // namespace
}  // namespace tessera::cuda_conformance
