// The GPU's chunked gated delta rule (cuda_gdn_chunked.cu) against the CPU backend: runs of several
// lengths in one batch (one token, within a chunk, exactly a chunk, a chunk and one, several chunks:
// the 300-token run takes several passes of the records), asked for with GdnMode::kChunked, against the
// CPU's recurrent form (token by token) and its chunked form (double inside); more chunked runs than
// the records have slots (several groups of passes); kAuto's mix of both forms; the single-run op too.
// Qwen3.5-35B-A3B's shapes (16 key / 32 value heads of 128), decays and betas over their whole range.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "unit/backend_cuda_conformance.h"
#include "unit/gdn_test_args.h"

namespace tessera::cuda_conformance {
namespace {

class CudaGdnChunked : public CudaConformance {
 protected:
  // One batch of runs of these lengths on both backends (the GPU in gpu_mode) from the same states,
  // against the CPU's recurrent and chunked forms.
  void CompareBatch(const std::vector<int64_t>& lengths, GdnMode gpu_mode, const std::string& what);
};

void CudaGdnChunked::CompareBatch(const std::vector<int64_t>& lengths, GdnMode gpu_mode, const std::string& what) {
  const int64_t kh = 16, vh = 32, dk = 128, dv = 128, qkv = 2 * kh * dk + vh * dv;
  const testing::GdnShape shape{kh, vh, dk, dv};
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
    gpu_->GatedDeltaRuleBatch(gpu_runs, gpu_mode);
    const std::string vs = cpu_mode == GdnMode::kRecurrent ? " vs recurrent" : " vs chunked";
    Report((what + " out" + vs).c_str(), RelErr(Host(dout, out.size()), out));
    Report((what + " states" + vs).c_str(), RelErr(Host(dstates, states.size()), states));
  }
}

TEST_F(CudaGdnChunked, MatchesCpu) {
  CompareBatch({1, 5, 64, 65, 150, 1, 300}, GdnMode::kChunked, "GdnChunked batch");
  // 18 chunked runs: groups of kGdnChunkSlots runs (and the rest), one chunk each a pass.
  CompareBatch({2, 70, 9, 64, 33, 130, 3, 17, 66, 2, 40, 129, 5, 63, 12, 80, 7, 100}, GdnMode::kChunked,
               "GdnChunked 18 runs");
  // kAuto: the long runs chunked, the short ones recurrent, in one batch.
  CompareBatch({1, 40, 500, 3, 200}, GdnMode::kAuto, "GdnAuto batch");
  const int64_t kh = 16, vh = 32, dk = 128, dv = 128, qkv = 2 * kh * dk + vh * dv;
  const testing::GdnShape shape{kh, vh, dk, dv};
  const int64_t rec = vh * dk * dv;
  const auto x = Rand(200 * qkv, -1, 1, 250);
  const auto g = Rand(200 * vh, -2, -0.01f, 251), beta = Rand(200 * vh, 0.05f, 0.95f, 252);
  const auto states0 = Rand(rec, -0.2f, 0.2f, 253);
  const float* dx = Dev(x);
  const float* dg = Dev(g);
  const float* dbeta = Dev(beta);
  // The single-run op takes the same path.
  const int64_t T = 200;
  std::vector<float> state(states0), out(T * vh * dv, 0.0f);
  const GatedDeltaArgs a = testing::GdnRunArgs(shape, x.data(), qkv, T, g.data(), beta.data(), state.data(), out.data());
  const GatedDeltaArgs d = testing::GdnRunArgs(shape, dx, qkv, T, dg, dbeta, Dev(state), Dev(out));
  cpu_->GatedDeltaRule(a, GdnMode::kRecurrent);
  gpu_->GatedDeltaRule(d, GdnMode::kChunked);
  Report("GdnChunked single run out", RelErr(Host(d.out, out.size()), out));
  Report("GdnChunked single run state", RelErr(Host(d.state, state.size()), state));
}

}  // namespace
}  // namespace tessera::cuda_conformance
