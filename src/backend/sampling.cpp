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
  // (e, id) with e = exp((logit - max) / T). Tokens of e exactly 0 (grammar-masked, excluded,
  // underflowed) are left out: they come last in the order, add nothing to any sum, and no cut or draw
  // can take them while a positive one exists.
  for (int64_t i = 0; i < vocab; ++i) {
    const float e = std::exp((logit(i) - mx) * inv_t);
    if (e > 0.f) cand.emplace_back(e, static_cast<int32_t>(i));
  }
  if (cand.empty())  // no positive probability at all (every logit -inf): the whole row
    for (int64_t i = 0; i < vocab; ++i) cand.emplace_back(std::exp((logit(i) - mx) * inv_t), static_cast<int32_t>(i));
  const size_t n = cand.size();
  // The order: e descending, ties by lower id. It is built only as far as the cuts and the draw read
  // it (a 152K-token row sorted whole took ~14 ms): cand[0, sorted) is in that order and every later
  // element comes after all of them.
  auto by_prob = [](const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  size_t sorted = 0;
  auto sort_through = [&](size_t i) {
    if (i < sorted) return;
    const size_t m = std::min(n, std::max({i + 1, sorted * 4, size_t{256}}));
    const auto from = cand.begin() + static_cast<std::ptrdiff_t>(sorted), to = cand.begin() + static_cast<std::ptrdiff_t>(m);
    if (m < n) std::nth_element(from, to - 1, cand.end(), by_prob);  // cand[sorted, m): the next m - sorted
    std::sort(from, to, by_prob);
    sorted = m;
  };
  // The kept candidates: the first `keep` of the order. Their distribution is renormalised twice (after
  // top_k, and after top_p / min_p): v = e / s1, w = v / s2, each rounded to float. A sum over the
  // whole row is taken in id order (before any sorting), over a cut prefix in the order.
  size_t keep = n;
  double s1 = 0, s2 = 0;
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < n) {
    keep = static_cast<size_t>(p.top_k);
    sort_through(keep - 1);
    for (size_t i = 0; i < keep; ++i) s1 += cand[i].first;
  } else {
    for (const auto& c : cand) s1 += c.first;
    for (const auto& c : cand) s2 += static_cast<float>(c.first / s1);
  }
  auto v = [&](size_t i) { return static_cast<float>(cand[i].first / s1); };
  if (p.top_p < 1.0f) {
    double cum = 0;
    size_t m = 0;
    while (m < keep) {
      sort_through(m);
      cum += v(m);
      ++m;
      if (cum >= p.top_p) break;
    }
    keep = std::max<size_t>(m, 1);
  }
  if (p.min_p > 0.f) {
    sort_through(0);
    const float cut = v(0) * p.min_p;
    size_t m = 1;
    while (m < keep) {
      sort_through(m);
      if (!(v(m) >= cut)) break;
      ++m;
    }
    keep = m;
  }
  if (keep < n) {  // a cut prefix (top_k, top_p or min_p): its sum in the order
    s2 = 0;
    for (size_t i = 0; i < keep; ++i) s2 += v(i);
  }
  auto w = [&](size_t i) { return static_cast<float>(v(i) / s2); };
  double cum = 0;
  for (size_t i = 0; i < keep; ++i) {
    sort_through(i);
    const float wi = w(i);
    cum += wi;
    if (p.uniform < cum) {
      *prob = wi;
      return cand[i].second;
    }
  }
  // `uniform` at or above the total (its rounding): the last token with a positive probability (never
  // a zero-probability tail such as the excluded id).
  sort_through(keep - 1);
  for (size_t i = keep; i-- > 0;)
    if (w(i) > 0.f) {
      *prob = w(i);
      return cand[i].second;
    }
  *prob = w(keep - 1);
  return cand[keep - 1].second;
}

void Backend::SampleRows(const float* logits, int64_t rows, int64_t vocab, const RowSampling* params,
                         int32_t* tokens, float* probs) {
  SamplingCandidates scratch;
  for (int64_t r = 0; r < rows; ++r)
    tokens[r] = SampleRowReference(logits + r * vocab, vocab, params[r], &probs[r], &scratch);
}

void MaskRowByWords(float* logits, int64_t vocab, const uint32_t* words, size_t num_words) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  for (int64_t w = 0; w * 32 < vocab; ++w) {
    const int64_t base = w * 32, n = std::min<int64_t>(32, vocab - base);
    const uint32_t bits = static_cast<size_t>(w) < num_words ? words[w] : 0u;
    if (bits == ~0u) continue;
    if (bits == 0u) {
      std::fill(logits + base, logits + base + n, kNegInf);
      continue;
    }
    for (int64_t i = 0; i < n; ++i)
      if (!((bits >> i) & 1u)) logits[base + i] = kNegInf;
  }
}

void Backend::MaskLogitsRows(float* logits, int64_t vocab, const int64_t* rows, int64_t n, const uint32_t* words) {
  const int64_t W = (vocab + 31) / 32;
  for (int64_t i = 0; i < n; ++i) MaskRowByWords(logits + rows[i] * vocab, vocab, words + i * W, static_cast<size_t>(W));
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
