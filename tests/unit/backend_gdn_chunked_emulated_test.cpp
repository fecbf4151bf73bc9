// The chunked gated delta rule's GPU block code (src/backend/cuda/cuda_gdn_chunked.cuh) run on the
// host under an emulation of CUDA blocks (cuda_block_emulation.h), against the CPU backend's
// recurrent form: the prep blocks of every (chunk, value head), then the state blocks of every
// (value head, column tile), for runs of one token, of one whole chunk and one past it (kept to
// three: the emulation runs every thread of every block, and this test was CI's longest).
// Runs on every machine (no GPU needed): it pins the kernels' indexing and algebra; the GPU test
// (CudaConformance.GatedDeltaRuleChunkedMatchesCpu) covers the real launches.
#include "unit/cuda_block_emulation.h"
// (the emulation first: it defines what the device header uses)
#include "backend/cuda/cuda_gdn_chunked.cuh"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "test_util.h"
#include "unit/backend_cuda_conformance.h"
#include "unit/gdn_test_args.h"

namespace tessera {
namespace {

namespace gc = cuda::gdn_chunked;

using cuda_conformance::RelErr;  // NaN-aware, as the GPU conformance tests measure

TEST(GdnChunkedEmulated, BlocksMatchCpuRecurrent) {
  const int64_t kh = 2, vh = 4, dk = gc::kDk, dv = 128, width = 2 * kh * dk + vh * dv;
  auto cpu = MakeCpuBackend();
  for (int64_t T : {1, 64, 65}) {  // one token, a whole chunk, one past it (two chained chunks)
    const auto x = testing::NonZeroUniform(T * width, -1, 1, 300 + T);
    const auto g = testing::NonZeroUniform(T * vh, -2, -0.01f, 400 + T);
    const auto beta = testing::NonZeroUniform(T * vh, 0.05f, 0.95f, 500 + T);
    const auto state0 = testing::NonZeroUniform(vh * dk * dv, -0.2f, 0.2f, 600 + T);
    // Reference: the CPU backend's recurrent form (it normalises q and k itself).
    std::vector<float> state_ref = state0, out_ref(T * vh * dv);
    const GatedDeltaArgs a = testing::GdnRunArgs({kh, vh, dk, dv}, x.data(), width, T, g.data(), beta.data(),
                                                 state_ref.data(), out_ref.data());
    cpu->GatedDeltaRule(a, GdnMode::kRecurrent);
    // The kernels' input: q and k L2-normalised into compact rows (q scaled by 1/sqrt(dk)), as the
    // GPU's normalisation kernel writes them.
    std::vector<float> qn(T * kh * dk), kn(T * kh * dk);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < kh; ++h) {
        const float* q = a.q + t * width + h * dk;
        const float* k = a.k + t * width + h * dk;
        float sq = 0, sk = 0;
        for (int64_t d = 0; d < dk; ++d) sq += q[d] * q[d], sk += k[d] * k[d];
        const float iq = 1.0f / std::sqrt(sq + 1e-6f) / std::sqrt(static_cast<float>(dk));
        const float ik = 1.0f / std::sqrt(sk + 1e-6f);
        for (int64_t d = 0; d < dk; ++d) qn[(t * kh + h) * dk + d] = q[d] * iq, kn[(t * kh + h) * dk + d] = k[d] * ik;
      }
    std::vector<float> state = state0, out(T * vh * dv, std::nanf(""));
    const int64_t chunks = (T + gc::kC - 1) / gc::kC, rec = gc::RecordFloats(dv);
    std::vector<float> records(chunks * vh * rec, std::nanf(""));
    const gc::Run run{qn.data(), kn.data(), a.v, width, g.data(), beta.data(), T, state.data(), out.data()};
    std::vector<float> smem(std::max(gc::kPrepSmemBytes, gc::kStateSmemBytes) / sizeof(float), std::nanf(""));
    for (int64_t c = 0; c < chunks; ++c)
      for (int64_t hv = 0; hv < vh; ++hv)
        cuda_emulation::RunBlock(gc::kPrepThreads, [&] {
          gc::PrepBlock(run, c * gc::kC, hv, kh, vh, dv, records.data() + (c * vh + hv) * rec, smem.data());
        });
    for (int64_t hv = 0; hv < vh; ++hv)
      for (int64_t col0 = 0; col0 < dv; col0 += gc::kCols)
        cuda_emulation::RunBlock(gc::kStateThreads,
                                 [&] { gc::StateBlock(run, records.data(), hv, kh, vh, dv, col0, smem.data()); });
    const double eo = RelErr(out, out_ref), es = RelErr(state, state_ref);
    std::printf("gdn chunked (emulated) T=%lld: out rel err %.3e, state rel err %.3e\n", static_cast<long long>(T), eo,
                es);
    EXPECT_LE(eo, 1e-4) << "T=" << T;
    EXPECT_LE(es, 1e-4) << "T=" << T;
  }
}

}  // namespace
}  // namespace tessera
