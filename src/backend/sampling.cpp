// tessera backend: SampleRowReference and CanvasRowReference (sampling.h), and the host-memory defaults
// of Backend::SampleRows and Backend::CanvasSampleRows.
#include "backend/sampling.h"

#include "core/dtype.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace tessera {
namespace {

// Greedy: the largest logit other than `exclude` (ties: lowest id) and softmax(row) there, summed in
// double over the whole row (the mask token included: it is the model's probability).
int32_t GreedyPick(const float* row, int64_t vocab, int32_t exclude, float* prob) {
  int64_t best = exclude == 0 ? 1 : 0;
  for (int64_t i = best + 1; i < vocab; ++i)
    if (i != exclude && row[i] > row[best]) best = i;
  double sum = 0;
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const bool finite_best = row[best] != kNegInf;
  for (int64_t i = 0; i < vocab; ++i)  // a grammar-masked (-inf) logit adds exp(-inf) = 0: skipped
    if (row[i] != kNegInf || !finite_best) sum += std::exp(static_cast<double>(row[i] - row[best]));
  *prob = static_cast<float>(1.0 / sum);
  return static_cast<int32_t>(best);
}

void Renormalize(SamplingCandidates& c) {
  double sum = 0;
  for (const auto& x : c) sum += x.first;
  for (auto& x : c) x.first = static_cast<float>(x.first / sum);
}

}  // namespace

int32_t SampleRowReference(const float* row, int64_t vocab, const RowSampling& p, float* prob,
                           SamplingCandidates* scratch) {
  if (p.temperature <= 0.f) return GreedyPick(row, vocab, p.exclude, prob);
  SamplingCandidates local;
  SamplingCandidates& cand = scratch ? *scratch : local;
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  auto logit = [&](int64_t i) { return i == p.exclude ? kNegInf : row[i]; };
  float mx = kNegInf;
  for (int64_t i = 0; i < vocab; ++i) mx = std::max(mx, logit(i));
  const float inv_t = 1.0f / p.temperature;
  cand.clear();
  cand.reserve(static_cast<size_t>(vocab));
  // Tokens of probability exactly 0 (grammar-masked, excluded, underflowed) are left out: they sort last,
  // add nothing to any sum, and no cut or draw can take them while a positive one exists; without them
  // a masked row sorts its allowed tokens, not the whole vocabulary (152K pairs: ~10 ms).
  for (int64_t i = 0; i < vocab; ++i) {
    const float e = std::exp((logit(i) - mx) * inv_t);
    if (e > 0.f) cand.emplace_back(e, static_cast<int32_t>(i));
  }
  if (cand.empty())  // no positive probability at all (every logit -inf): the whole row, as it was
    for (int64_t i = 0; i < vocab; ++i) cand.emplace_back(std::exp((logit(i) - mx) * inv_t), static_cast<int32_t>(i));
  // Highest probability first; ties by lower id so results do not depend on sort stability.
  auto by_prob = [](const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  size_t keep = cand.size();
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < keep) {
    keep = static_cast<size_t>(p.top_k);
    std::partial_sort(cand.begin(), cand.begin() + static_cast<std::ptrdiff_t>(keep), cand.end(), by_prob);
  } else {
    std::sort(cand.begin(), cand.end(), by_prob);
  }
  cand.resize(keep);
  Renormalize(cand);
  if (p.top_p < 1.0f) {
    double cum = 0;
    size_t n = 0;
    while (n < cand.size()) {
      cum += cand[n].first;
      ++n;
      if (cum >= p.top_p) break;
    }
    cand.resize(std::max<size_t>(n, 1));
  }
  if (p.min_p > 0.f) {
    const float cut = cand.front().first * p.min_p;
    size_t n = 1;
    while (n < cand.size() && cand[n].first >= cut) ++n;
    cand.resize(n);
  }
  Renormalize(cand);
  double cum = 0;
  for (const auto& c : cand) {
    cum += c.first;
    if (p.uniform < cum) {
      *prob = c.first;
      return c.second;
    }
  }
  // `uniform` at or above the total (its rounding): the last token with a positive probability (never
  // a zero-probability tail such as the excluded id).
  for (auto it = cand.rbegin(); it != cand.rend(); ++it)
    if (it->first > 0.f) {
      *prob = it->first;
      return it->second;
    }
  *prob = cand.back().first;
  return cand.back().second;
}

void Backend::SampleRows(const float* logits, int64_t rows, int64_t vocab, const RowSampling* params,
                         int32_t* tokens, float* probs) {
  SamplingCandidates scratch;
  for (int64_t r = 0; r < rows; ++r)
    tokens[r] = SampleRowReference(logits + r * vocab, vocab, params[r], &probs[r], &scratch);
}

void Backend::MaskLogitsRows(float* logits, int64_t vocab, const int64_t* rows, int64_t n, const uint32_t* words) {
  const int64_t W = (vocab + 31) / 32;
  for (int64_t i = 0; i < n; ++i) {
    float* row = logits + rows[i] * vocab;
    const uint32_t* w = words + i * W;
    for (int64_t t = 0; t < vocab; ++t)
      if (!((w[t / 32] >> (t % 32)) & 1u)) row[t] = -std::numeric_limits<float>::infinity();
  }
}

CanvasRowPick CanvasRowReference(const float* z, int64_t vocab, double uniform) {
  CanvasRowPick pick;
  const float* top = std::max_element(z, z + vocab);
  pick.argmax = static_cast<int32_t>(top - z);
  const double m = *top;
  // Entropy as log(sum e) - sum p (z - m): a 262K-entry row summed in f32 loses digits. The e are kept
  // for the inverse CDF below (the exp in double is most of a row's time; the draw reads half a row on
  // average).
  thread_local std::vector<double> es;
  es.resize(static_cast<size_t>(vocab));
  double total = 0, weighted = 0;
  for (int64_t i = 0; i < vocab; ++i) {
    const double d = static_cast<double>(z[i]) - m;
    const double e = es[static_cast<size_t>(i)] = std::exp(d);
    total += e;
    if (e > 0) weighted += e * d;  // a masked (-inf) token adds nothing (0 * -inf would be NaN)
  }
  pick.entropy = std::log(total) - weighted / total;
  pick.argmax_prob = static_cast<float>(1.0 / total);
  const double target = uniform * total;
  double running = 0;
  pick.sampled = -1;
  int64_t last_positive = 0;
  for (int64_t i = 0; i < vocab; ++i) {
    const double e = es[static_cast<size_t>(i)];
    if (e > 0) last_positive = i;
    running += e;
    if (running > target) {
      pick.sampled = static_cast<int32_t>(i);
      break;
    }
  }
  if (pick.sampled < 0) pick.sampled = static_cast<int32_t>(last_positive);
  return pick;
}

void CanvasSampleRowInPlace(float* row, int64_t vocab, const CanvasRowRule& rule, bool round_z_to_bf16,
                            CanvasRowPick* pick) {
  for (int64_t i = 0; i < vocab; ++i) row[i] /= rule.temperature;
  *pick = CanvasRowReference(row, vocab, rule.uniform);
  if (round_z_to_bf16)
    for (int64_t i = 0; i < vocab; ++i) row[i] = Bf16ToF32(F32ToBf16(row[i]));
}

void Backend::CanvasSampleRows(float* logits, int64_t rows, int64_t vocab, const CanvasRowRule* rules,
                               bool round_z_to_bf16, CanvasRowPick* picks) {
  for (int64_t r = 0; r < rows; ++r) CanvasSampleRowInPlace(logits + r * vocab, vocab, rules[r], round_z_to_bf16, &picks[r]);
}

}  // namespace tessera
