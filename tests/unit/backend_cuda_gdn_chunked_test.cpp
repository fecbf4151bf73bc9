// The GPU's chunked gated delta rule (cuda_gdn_chunked.cu) against the CPU backend: runs of several
// lengths in one batch (one token, within a chunk, exactly a chunk, a chunk and one, several chunks),
// asked for with GdnMode::kChunked, against the CPU's recurrent form (token by token) and its chunked
// form (double inside); the single-run op too. Qwen3.5-35B-A3B's shapes (16 key / 32 value
// heads of 128), decays and betas over their whole range.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "unit/backend_cuda_conformance.h"
#include "unit/gdn_test_args.h"

namespace tessera::cuda_conformance {
namespace {

TEST_F(CudaConformance, GatedDeltaRuleChunkedMatchesCpu) {
  const int64_t kh = 16, vh = 32, dk = 128, dv = 128, qkv = 2 * kh * dk + vh * dv;
  const testing::GdnShape shape{kh, vh, dk, dv};
  const std::vector<int64_t> lengths = {1, 5, 64, 65, 150, 1, 300};
  int64_t R = 0;
  for (int64_t T : lengths) R += T;
  const auto x = Rand(R * qkv, -1, 1, 240);
  const auto g = Rand(R * vh, -2, -0.01f, 241), beta = Rand(R * vh, 0.05f, 0.95f, 242);
  const int64_t rec = vh * dk * dv, n = static_cast<int64_t>(lengths.size());
  const auto states0 = Rand(n * rec, -0.2f, 0.2f, 243);
  const float* dx = Dev(x);
  const float* dg = Dev(g);
  const float* dbeta = Dev(beta);
  for (GdnMode cpu_mode : {GdnMode::kRecurrent, GdnMode::kChunked}) {
    std::vector<float> states = states0, out(R * vh * dv, 0.0f);
    float* dstates = Dev(states0);
    float* dout = Dev(out);
    std::vector<GatedDeltaArgs> cpu_runs, gpu_runs;
    int64_t r0 = 0;
    for (int64_t i = 0; i < n; ++i) {
      cpu_runs.push_back(testing::GdnRunArgs(shape, x.data() + r0 * qkv, qkv, lengths[i], g.data() + r0 * vh,
                                             beta.data() + r0 * vh, states.data() + i * rec, out.data() + r0 * vh * dv));
      gpu_runs.push_back(testing::GdnRunArgs(shape, dx + r0 * qkv, qkv, lengths[i], dg + r0 * vh, dbeta + r0 * vh,
                                             dstates + i * rec, dout + r0 * vh * dv));
      r0 += lengths[i];
    }
    cpu_->GatedDeltaRuleBatch(cpu_runs, cpu_mode);
    gpu_->GatedDeltaRuleBatch(gpu_runs, GdnMode::kChunked);
    const std::string vs = cpu_mode == GdnMode::kRecurrent ? " vs recurrent" : " vs chunked";
    Report(("GdnChunked batch out" + vs).c_str(), RelErr(Host(dout, out.size()), out));
    Report(("GdnChunked batch states" + vs).c_str(), RelErr(Host(dstates, states.size()), states));
  }
  // The single-run op takes the same path.
  const int64_t T = 200;
  std::vector<float> state(states0.begin(), states0.begin() + rec), out(T * vh * dv, 0.0f);
  const GatedDeltaArgs a = testing::GdnRunArgs(shape, x.data(), qkv, T, g.data(), beta.data(), state.data(), out.data());
  const GatedDeltaArgs d = testing::GdnRunArgs(shape, dx, qkv, T, dg, dbeta, Dev(state), Dev(out));
  cpu_->GatedDeltaRule(a, GdnMode::kRecurrent);
  gpu_->GatedDeltaRule(d, GdnMode::kChunked);
  Report("GdnChunked single run out", RelErr(Host(d.out, out.size()), out));
  Report("GdnChunked single run state", RelErr(Host(d.state, state.size()), state));
}

}  // namespace
}  // namespace tessera::cuda_conformance
