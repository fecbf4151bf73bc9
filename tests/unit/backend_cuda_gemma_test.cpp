// tessera tests: the CUDA backend's ops for the Gemma family (DiffusionGemma, docs/DIFFUSION_GEMMA.md)
// against the CPU backend on the same random non-zero inputs, at the published 26B-A4B's shapes where
// host memory allows (hidden 2816, heads of 256 and 512, top-8 experts of width 704) and at the tiny
// fixtures' (heads of 16 and 32): GeluTanhMul, Scale, SoftCap, ScaleByIndex, RopePairs (default and
// proportional RoPE), MatMulNoTrans (the self-conditioning product, bf16 and f32 tables, few and many
// rows) and gelu-tanh experts (MoeExpertsAct) on every expert path of MoeExperts. Held to the
// conformance tolerance (1e-4; the experts 1e-3 as MoeRouteAndExperts). Skipped without a device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/dtype.h"
#include "test_util.h"
#include "unit/backend_cuda_conformance.h"

namespace tessera::cuda_conformance {
namespace {

TEST_F(CudaConformance, GemmaElementwiseOps) {
  const int64_t n = 13 * 2816 + 5;  // not a multiple of a block
  const auto g = Rand(n, -6, 6, 900), u = Rand(n, -2, 2, 901);
  std::vector<float> want(n);
  cpu_->GeluTanhMul(g.data(), u.data(), n, want.data());
  float* dout = Dev(std::vector<float>(n));
  gpu_->GeluTanhMul(Dev(g), Dev(u), n, dout);
  Report("GeluTanhMul", RelErr(Host(dout, n), want), 1e-5);
  // In place, as the MLP calls it (out = gate).
  float* dg = Dev(g);
  gpu_->GeluTanhMul(dg, Dev(u), n, dg);
  Report("GeluTanhMul in place", RelErr(Host(dg, n), want), 1e-5);

  auto x = Rand(n, -200, 200, 902);
  float* dx = Dev(x);
  cpu_->Scale(x.data(), n, 53.0f);  // bf16(sqrt(2816)): the embedding scale
  gpu_->Scale(dx, n, 53.0f);
  Report("Scale", RelErr(Host(dx, n), x), 1e-6);
  cpu_->SoftCap(x.data(), n, 30.0f);
  gpu_->SoftCap(dx, n, 30.0f);
  Report("SoftCap 30", RelErr(Host(dx, n), x), 1e-5);

  const int64_t E = 128, R = 37, k = 8;
  const auto table = Rand(E, 0.5f, 1.5f, 903);
  auto w = Rand(R * k, 0.01f, 1, 904);
  std::vector<int32_t> idx(R * k);
  for (int64_t i = 0; i < R * k; ++i) idx[i] = static_cast<int32_t>((i * 37 + i / k) % E);
  float* dw = Dev(w);
  cpu_->ScaleByIndex(w.data(), idx.data(), R * k, table.data());
  gpu_->ScaleByIndex(dw, Dev(idx), R * k, Dev(table));
  Report("ScaleByIndex", RelErr(Host(dw, w.size()), w), 1e-6);
}

// The RoPE of each DiffusionGemma layer kind as SpecAttentionForward calls it: sliding layers (default,
// every pair (i, i + d/2) of a 256-dim head, theta 1e4), global layers (proportional: 64 of the 256 pairs
// of a 512-dim head turn, theta 1e6 over the whole head dim), the tiny fixtures' heads of 16 and 32
// (partial 0.25: 4 of 16 pairs), rows with a stride wider than the heads, positions up to 200,000.
TEST_F(CudaConformance, RopePairsMatchesCpu) {
  struct Case {
    int64_t heads, hd, pairs;
    double theta;
  };
  for (const Case& c : {Case{16, 256, 128, 1e4}, Case{16, 512, 64, 1e6}, Case{8, 512, 64, 1e6}, Case{4, 16, 8, 1e4},
                        Case{4, 32, 4, 1e6}}) {
    const int64_t R = 11, stride = c.heads * c.hd + 8, offset = c.hd / 2;
    std::vector<float> inv_freq(c.pairs);
    for (int64_t i = 0; i < c.pairs; ++i)
      inv_freq[i] = static_cast<float>(1.0 / std::pow(c.theta, static_cast<double>(2 * i) / c.hd));
    std::vector<int64_t> pos(R);
    for (int64_t i = 0; i < R; ++i) pos[i] = i * 19997 + i % 3;
    auto x = Rand(R * stride, -2, 2, 910 + c.hd + c.pairs);
    float* dx = Dev(x);
    cpu_->RopePairs(x.data(), R, stride, c.heads, c.hd, offset, c.pairs, inv_freq.data(), pos.data());
    gpu_->RopePairs(dx, R, stride, c.heads, c.hd, offset, c.pairs, inv_freq.data(), pos.data());
    Report(("RopePairs hd=" + std::to_string(c.hd) + " pairs=" + std::to_string(c.pairs)).c_str(),
           RelErr(Host(dx, x.size()), x), 1e-4);
  }
}

// y = x W with W [V, H] as stored: probabilities (a softmax of random logits, as the self-conditioning
// input is) times a bf16 embedding table; also an f32 table and row counts from 1 to a canvas of 256.
// V 20,011 (no multiple of a tile) and H 2816 (the published hidden size) keep the CPU reference quick.
TEST_F(CudaConformance, MatMulNoTransMatchesCpu) {
  const int64_t V = 20011, H = 2816;
  const auto table = Bf16s(Rand(V * H, -0.05f, 0.05f, 920));
  const auto table_f32 = Rand(V * 64, -0.05f, 0.05f, 921);
  for (int64_t m : {1, 16, 256}) {
    auto p = Rand(m * V, -8, 8, 922 + m);
    cpu_->Softmax(p.data(), m, V);
    std::vector<float> want(m * H);
    cpu_->MatMulNoTrans(p.data(), m, HostBf16(table, V, H), want.data());
    float* dy = Dev(std::vector<float>(m * H, 7.0f));  // every output written, none accumulated
    gpu_->MatMulNoTrans(Dev(p), m, DevBf16(table, V, H), dy);
    Report(("MatMulNoTrans bf16 rows=" + std::to_string(m)).c_str(), RelErr(Host(dy, want.size()), want));
    std::vector<float> want32(m * 64);
    const Tensor host32{table_f32.data(), DType::kF32, {V, 64}, {}};
    cpu_->MatMulNoTrans(p.data(), m, host32, want32.data());
    const Tensor dev32{Dev(table_f32), DType::kF32, {V, 64}, {}};
    float* dy32 = Dev(std::vector<float>(m * 64, 7.0f));
    gpu_->MatMulNoTrans(Dev(p), m, dev32, dy32);
    Report(("MatMulNoTrans f32 rows=" + std::to_string(m)).c_str(), RelErr(Host(dy32, want32.size()), want32));
  }
}

// Gelu-tanh experts (Gemma 4's top-8 of width 704; 32 experts and hidden 2048 bound host memory and
// the CPU reference's time) on each expert path MoeExperts takes by pair count: the fused per-pair kernels (1-2 rows),
// the pipelined grouped MMA (40, 256 rows: a canvas), the tiled kernels (2048 rows), the CUDA-core
// grouped kernels and the host-grouped GEMMs (environment switches, as MoeRouteAndExperts does).
// Routing as MoeRoutedForward does it: renormalised top-k times per-expert scales.
TEST_F(CudaConformance, GeluTanhExpertsOnEveryPath) {
  const int64_t E = 32, k = 8, H = 2048, I = 704;
  const RandomExperts experts = MakeExperts(E, I, H, 3000);
  const auto scales = Rand(E, 0.5f, 1.5f, 930);
  struct Path {
    const char* name;
    const char* kernel;     // TESSERA_CUDA_MOE_KERNEL
    const char* max_slots;  // TESSERA_CUDA_MOE_GROUPED_MAX_SLOTS
    int64_t rows;
  };
  const Path paths[] = {{"", nullptr, nullptr, 1},      {"", nullptr, nullptr, 2},  {"", nullptr, nullptr, 40},
                        {"", nullptr, nullptr, 256},    {"", nullptr, nullptr, 2048}, {" simt", "simt", nullptr, 40},
                        {" host-grouped", nullptr, "64", 40}};
  for (const Path& path : paths) {
    const int64_t R = path.rows;
    std::unique_ptr<Backend> other = CudaBackendForMoePath(path.kernel, path.max_slots);
    Backend& gpu = other ? *other : *gpu_;
    const auto x = Rand(R * H, -1, 1, 940 + R);
    const auto logits = Rand(R * E, -4, 4, 941 + R);
    std::vector<int32_t> idx(R * k);
    std::vector<float> wts(R * k), want(R * H);
    cpu_->MoeRoute(logits.data(), R, E, k, true, idx.data(), wts.data());
    cpu_->ScaleByIndex(wts.data(), idx.data(), R * k, scales.data());
    cpu_->MoeExpertsAct(x.data(), R, H, idx.data(), wts.data(), k, experts.host, GluAct::kGeluTanh, want.data());
    float* dout = Dev(std::vector<float>(R * H, 7.0f));
    float* dx = Dev(x);
    int32_t* didx = Dev(idx);
    float* dw = Dev(wts);
    gpu_->Synchronize();  // the inputs are on gpu_'s stream; `gpu` may be another backend
    gpu.MoeExpertsAct(dx, R, H, didx, dw, k, experts.dev, GluAct::kGeluTanh, dout);
    gpu.Synchronize();
    Report(("MoeExpertsAct gelu-tanh rows=" + std::to_string(R) + path.name).c_str(),
           RelErr(Host(dout, want.size()), want), 1e-3);
    if (R == 40 && !other) {  // the activation takes effect: SiLU experts differ
      float* dsilu = Dev(std::vector<float>(R * H));
      gpu.MoeExpertsAct(dx, R, H, didx, dw, k, experts.dev, GluAct::kSilu, dsilu);
      EXPECT_GT(RelErr(Host(dsilu, want.size()), want), 1e-2) << "SiLU experts equal gelu-tanh ones";
    }
  }
}

}  // namespace
}  // namespace tessera::cuda_conformance
