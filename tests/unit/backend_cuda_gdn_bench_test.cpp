// tessera tests: the gated delta rule alone on the GPU, its two forms timed on the shapes of the
// Qwen3.5-35B-A3B steps: one 4K prompt, 4 prompts of 1K, prompts of 64-512 tokens (where the forms
// cross: kGdnChunkedMinTokens), one 32-token diffusion block, 8 blocks of different sequences, 64
// decode rows. The step benchmarks (CudaBench.DummyDecodeAndPrefill) give
// a layer's whole time; this one gives the recurrence's share and decides which form a kAuto run of
// T tokens takes (kGdnChunkedMinTokens; docs/CUDA.md's GatedDeltaRule rows). Not a timed test: it runs
// only when TESSERA_CUDA_BENCH_GDN=1 and a CUDA device exists (`TESSERA_CUDA_BENCH_GDN=1 test_backend
// --gtest_filter=CudaBench.GatedDeltaRuleForms`), prints its numbers and checks only that the two forms
// agree.
//
// Output, one line a shape (runs x tokens):
//   bench-gdn | <runs>x<T> | recurrent <ms> (<TFLOP/s>) | chunked <ms> (<TFLOP/s>) | chunked/recurrent
//               <ratio> | 30 layers <recurrent ms> / <chunked ms> | rel diff <out> <state>
// TFLOP/s counts the recurrent form's 7 dk dv FLOPs a token and value head for both forms (the
// chunked form does ~1.4x that), so the two rates compare time for the same work.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "test_util.h"
#include "unit/backend_cuda_conformance.h"
#include "unit/gdn_test_args.h"

namespace tessera {
namespace {

TEST(CudaBench, GatedDeltaRuleForms) {
  const char* on = std::getenv("TESSERA_CUDA_BENCH_GDN");
  if (on == nullptr || std::string(on) != "1") GTEST_SKIP() << "skipped: TESSERA_CUDA_BENCH_GDN=1 is not set";
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "skipped: no CUDA device";
  std::unique_ptr<Backend> be = MakeCudaBackend();
  // Qwen3.5-35B-A3B: 16 key heads, 32 value heads, key and value dim 128, 30 Gated DeltaNet layers.
  const testing::GdnShape shape{16, 32, 128, 128};
  constexpr int64_t kLayers = 30;
  const int64_t width = 2 * shape.key_heads * shape.key_dim + shape.value_heads * shape.value_dim;
  const int64_t state_floats = shape.value_heads * shape.key_dim * shape.value_dim;
  const std::vector<std::pair<int64_t, int64_t>> cases = {{1, 4096}, {4, 1024}, {1, 512}, {1, 256}, {1, 128}, {1, 64}, {1, 32}, {8, 32}, {64, 1}};
  for (const auto& [runs, T] : cases) {
    const int64_t R = runs * T;
    const auto x = testing::NonZeroUniform(R * width, -1, 1, 11 + R);
    const auto g = testing::NonZeroUniform(R * shape.value_heads, -2.0f, -0.01f, 12 + R);
    const auto beta = testing::NonZeroUniform(R * shape.value_heads, 0.05f, 0.95f, 13 + R);
    const auto states0 = testing::NonZeroUniform(runs * state_floats, -0.2f, 0.2f, 14 + R);
    DeviceBuffer dx = DeviceBuffer::Floats(*be, R * width), dg = DeviceBuffer::Floats(*be, R * shape.value_heads),
                 dbeta = DeviceBuffer::Floats(*be, R * shape.value_heads),
                 dstate = DeviceBuffer::Floats(*be, runs * state_floats),
                 dout = DeviceBuffer::Floats(*be, R * shape.value_heads * shape.value_dim);
    be->Upload(dx.data(), x.data(), x.size() * 4);
    be->Upload(dg.data(), g.data(), g.size() * 4);
    be->Upload(dbeta.data(), beta.data(), beta.size() * 4);
    std::vector<GatedDeltaArgs> args;
    for (int64_t r = 0; r < runs; ++r)
      args.push_back(testing::GdnRunArgs(shape, dx.f32() + r * T * width, width, T,
                                         dg.f32() + r * T * shape.value_heads, dbeta.f32() + r * T * shape.value_heads,
                                         dstate.f32() + r * state_floats,
                                         dout.f32() + r * T * shape.value_heads * shape.value_dim));
    // A form's output and final states from states0, then its time a call (the states keep
    // evolving while timed: decays < 1 and betas < 1 keep them bounded).
    auto run = [&](GdnMode mode, std::vector<float>& out, std::vector<float>& state) {
      be->Upload(dstate.data(), states0.data(), states0.size() * 4);
      be->GatedDeltaRuleBatch(args, mode);
      be->Synchronize();
      out = dout.ToHost();
      state = dstate.ToHost();
      const int calls = static_cast<int>(std::clamp<int64_t>(200000 / R, 3, 50));
      be->GatedDeltaRuleBatch(args, mode);
      be->Synchronize();
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < calls; ++i) be->GatedDeltaRuleBatch(args, mode);
      be->Synchronize();
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / calls * 1e3;
    };
    std::vector<float> rec_out, rec_state, chk_out, chk_state;
    const double rec_ms = run(GdnMode::kRecurrent, rec_out, rec_state);
    // One token a run is decode: the chunked form does not take it (kChunked falls back to the recurrent form).
    const double chk_ms = run(GdnMode::kChunked, chk_out, chk_state);
    // The conformance suite's measure (NaN-aware): largest |difference| over largest |reference|.
    const double out_diff = cuda_conformance::RelErr(chk_out, rec_out);
    const double state_diff = cuda_conformance::RelErr(chk_state, rec_state);
    EXPECT_LE(out_diff, 1e-4) << runs << "x" << T;
    EXPECT_LE(state_diff, 1e-4) << runs << "x" << T;
    const double flops = 7.0 * shape.key_dim * shape.value_dim * shape.value_heads * R;
    std::printf(
        "bench-gdn | %ldx%ld | recurrent %.3f ms (%.1f TFLOP/s) | chunked %.3f ms (%.1f TFLOP/s) | "
        "chunked/recurrent %.2f | %ld layers %.1f / %.1f ms | rel diff %.1e %.1e\n",
        static_cast<long>(runs), static_cast<long>(T), rec_ms, flops / rec_ms / 1e9, chk_ms, flops / chk_ms / 1e9,
        chk_ms / rec_ms, static_cast<long>(kLayers), rec_ms * kLayers, chk_ms * kLayers, out_diff, state_diff);
  }
}

}  // namespace
}  // namespace tessera
