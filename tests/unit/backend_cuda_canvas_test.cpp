// tessera tests: CudaBackend::CanvasSampleRows (cuda_canvas_sampling.cu) against the CPU backend's
// (CanvasRowReference, backend/sampling.cpp) on the same canvas rows: z in place bit for bit (with
// and without the bf16 rounding), the same argmax, argmax_prob and entropy to rounding, the same draw
// except where uniform * total sits within 1e-9 (relative) of a running-sum edge, where the two
// backends' summation orders may fall on either side (counted and printed). Skipped without a device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "unit/backend_cuda_conformance.h"

namespace tessera::cuda_conformance {
namespace {

// A canvas row of soft-capped logits, 30 tanh(x / 30) with x normal (sd 6) plus a few strong peaks.
// kind 1: its maximum repeated at several ids (the argmax is the first of them); kind 2: ~10% of the
// ids -inf (a grammar's masked tokens), the first and the last among them; kind 3: flat (uniform in
// [-1, 1]: the draw lands deep in the row).
std::vector<float> CanvasRow(int kind, int64_t V, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> nd(0.0, 6.0);
  std::uniform_real_distribution<float> ud(-1.f, 1.f);
  std::vector<float> v(static_cast<size_t>(V));
  for (auto& x : v) x = kind == 3 ? ud(rng) : static_cast<float>(30.0 * std::tanh(nd(rng) / 30.0));
  if (kind != 3)
    for (int j = 0; j < 6; ++j) v[rng() % V] = static_cast<float>(20.0 + j);
  if (kind == 1) {
    const float top = *std::max_element(v.begin(), v.end());
    // Ids in different threads, warps and tiles of the kernel, and neighbours in one thread.
    for (const int64_t i : {V - 1, V / 2 + 5, V / 3 + 1, V / 3}) v[i] = top;
  }
  if (kind == 2) {
    for (auto& x : v)
      if (rng() % 10 == 0) x = -std::numeric_limits<float>::infinity();
    v.front() = v.back() = -std::numeric_limits<float>::infinity();
  }
  return v;
}

// The reference's draw over z's weights e (token order, running sums in double): the first id whose
// running sum exceeds target, else the last id with e > 0.
int64_t InverseCdf(const std::vector<double>& e, double target) {
  double run = 0;
  int64_t last = 0;
  for (size_t i = 0; i < e.size(); ++i) {
    if (e[i] > 0) last = static_cast<int64_t>(i);
    run += e[i];
    if (run > target) return static_cast<int64_t>(i);
  }
  return last;
}

// For a row whose draws differ: whether uniform * total lies within 1e-9 (relative to the total) of a
// running-sum edge, and the device's id between the reference's draws at target -+ 1e-9 total.
bool NearTie(const float* x, int64_t V, const CanvasRowRule& rule, int64_t device_pick) {
  std::vector<float> z(x, x + V);
  for (auto& v : z) v /= rule.temperature;
  const double m = *std::max_element(z.begin(), z.end());
  std::vector<double> e(static_cast<size_t>(V));
  double total = 0;
  for (int64_t i = 0; i < V; ++i) total += (e[i] = std::exp(static_cast<double>(z[i]) - m));
  const double target = rule.uniform * total, slack = 1e-9 * total;
  double run = 0, margin = std::numeric_limits<double>::infinity();
  for (int64_t i = 0; i < V; ++i) margin = std::min(margin, std::fabs((run += e[i]) - target));
  const int64_t lo = InverseCdf(e, target - slack), hi = InverseCdf(e, target + slack);
  std::printf("  draw near-tie? margin %.3e of the total, device %lld, reference range [%lld, %lld]\n", margin / total,
              static_cast<long long>(device_pick), static_cast<long long>(lo), static_cast<long long>(hi));
  return margin <= slack && lo <= device_pick && device_pick <= hi;
}

TEST_F(CudaConformance, CanvasSampleRowsMatchesCpu) {
  struct Case {
    int64_t rows, V;
  };
  // 50001: rows not 16-byte aligned (the kernel's scalar loads).
  const Case cases[] = {{1, 512},   {7, 512},    {256, 512},  {1, 50000},   {7, 50000},
                        {256, 50000}, {7, 50001}, {1, 262144}, {7, 262144}, {24, 262144}};
  int64_t near_ties = 0, draws = 0;
  for (const Case& c : cases) {
    const int64_t R = c.rows, V = c.V;
    std::mt19937_64 rng(1000 + 7 * V + R);
    std::uniform_real_distribution<double> uni(0.0, 1.0);
    std::vector<float> logits;
    std::vector<CanvasRowRule> rules(static_cast<size_t>(R));
    for (int64_t r = 0; r < R; ++r) {
      const auto row = CanvasRow(static_cast<int>(r % 4), V, rng());
      logits.insert(logits.end(), row.begin(), row.end());
      const double draws_of_row[] = {0.0, 0.999999, uni(rng), uni(rng)};
      rules[r].temperature = static_cast<float>(0.4 + 0.4 * uni(rng));
      rules[r].uniform = draws_of_row[(r + r / 4) % 4];
    }
    for (const bool round : {false, true}) {
      std::vector<float> want = logits;
      std::vector<CanvasRowPick> want_picks(static_cast<size_t>(R));
      cpu_->CanvasSampleRows(want.data(), R, V, rules.data(), round, want_picks.data());

      DeviceBuffer dz(*gpu_, logits.size() * sizeof(float));
      DeviceBuffer dp(*gpu_, static_cast<size_t>(R) * sizeof(CanvasRowPick));
      gpu_->Upload(dz.data(), logits.data(), logits.size() * sizeof(float));
      gpu_->CanvasSampleRows(dz.f32(), R, V, rules.data(), round, static_cast<CanvasRowPick*>(dp.data()));
      std::vector<float> got(logits.size());
      std::vector<CanvasRowPick> picks(static_cast<size_t>(R));
      gpu_->Download(got.data(), dz.data(), got.size() * sizeof(float));
      gpu_->Download(picks.data(), dp.data(), picks.size() * sizeof(CanvasRowPick));

      int64_t z_diff = 0, argmax_diff = 0, draw_diff = 0, ties = 0;
      double prob_err = 0, entropy_err = 0;
      for (size_t i = 0; i < got.size(); ++i)
        if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0 && z_diff++ == 0)
          std::printf("  first z mismatch at row %zu id %zu: device %.9g, host %.9g\n", i / V, i % V, got[i], want[i]);
      for (int64_t r = 0; r < R; ++r) {
        const CanvasRowPick& g = picks[r];
        const CanvasRowPick& w = want_picks[r];
        argmax_diff += g.argmax != w.argmax;
        prob_err = std::max(prob_err, std::fabs(static_cast<double>(g.argmax_prob) - w.argmax_prob) / w.argmax_prob);
        entropy_err = std::max(entropy_err, std::fabs(g.entropy - w.entropy));
        if (!(std::isfinite(g.entropy) && std::isfinite(g.argmax_prob))) entropy_err = INFINITY;
        ++draws;
        if (g.sampled == w.sampled) continue;
        std::printf("  row %lld (t=%g u=%.9f): device drew %d, host %d\n", static_cast<long long>(r),
                    rules[r].temperature, rules[r].uniform, g.sampled, w.sampled);
        if (NearTie(logits.data() + r * V, V, rules[r], g.sampled))
          ++ties;
        else
          ++draw_diff;
      }
      near_ties += ties;
      std::printf("conformance CanvasSampleRows V=%-6lld rows=%-3lld round=%d: z mismatches %lld, argmax mismatches %lld, "
                  "argmax_prob rel err %.3e, entropy abs err %.3e, draw mismatches %lld (+%lld near-ties)\n",
                  static_cast<long long>(V), static_cast<long long>(R), round ? 1 : 0, static_cast<long long>(z_diff),
                  static_cast<long long>(argmax_diff), prob_err, entropy_err, static_cast<long long>(draw_diff),
                  static_cast<long long>(ties));
      EXPECT_EQ(z_diff, 0) << "V=" << V << " rows=" << R << " round=" << round;
      EXPECT_EQ(argmax_diff, 0) << "V=" << V << " rows=" << R;
      EXPECT_LE(prob_err, 1e-6) << "V=" << V << " rows=" << R;
      EXPECT_LE(entropy_err, 1e-9) << "V=" << V << " rows=" << R;
      EXPECT_EQ(draw_diff, 0) << "V=" << V << " rows=" << R;
    }
  }
  std::printf("conformance CanvasSampleRows: %lld draws, %lld near-ties\n", static_cast<long long>(draws),
              static_cast<long long>(near_ties));
}

}  // namespace
}  // namespace tessera::cuda_conformance
