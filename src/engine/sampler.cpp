// tessera engine: Sampler implementation (see sampler.h).
#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace tessera {

int32_t ArgMax(const float* values, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (values[i] > values[best]) best = i;
  return static_cast<int32_t>(best);
}

void LogSoftmax(const float* logits, int64_t n, float* out) {
  float mx = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, logits[i]);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(logits[i] - mx));
  float lse = mx + static_cast<float>(std::log(sum));
  for (int64_t i = 0; i < n; ++i) out[i] = logits[i] - lse;
}

TokenLogprob ComputeLogprobs(const float* logits, int64_t vocab, int32_t chosen, int top_n) {
  std::vector<float> lp(vocab);
  LogSoftmax(logits, vocab, lp.data());
  TokenLogprob r;
  r.token = chosen;
  r.logprob = lp[chosen];
  if (top_n > 0) {
    std::vector<int32_t> idx(vocab);
    for (int64_t i = 0; i < vocab; ++i) idx[i] = static_cast<int32_t>(i);
    int64_t k = std::min<int64_t>(top_n, vocab);
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
      return lp[a] > lp[b] || (lp[a] == lp[b] && a < b);
    });
    for (int64_t i = 0; i < k; ++i) r.top.emplace_back(idx[i], lp[idx[i]]);
  }
  return r;
}

Sampler::Sampler(const SamplingParams& params, const std::vector<int32_t>& prompt, std::vector<int32_t> end_ids)
    : params_(params), end_ids_(std::move(end_ids)), seen_(prompt) {
  if (params.seed) {
    rng_.seed(*params.seed);
  } else {
    std::random_device rd;
    rng_.seed((static_cast<uint64_t>(rd()) << 32) ^ rd());
  }
}

void Sampler::Observe(int32_t token) {
  ++generated_;
  ++output_counts_[token];
  seen_.push_back(token);
}

void Sampler::ApplyPenalties(float* logits, int64_t vocab) const {
  if (generated_ < params_.min_tokens)
    for (int32_t t : end_ids_)
      if (t >= 0 && t < vocab) logits[t] = -std::numeric_limits<float>::infinity();
  if (params_.repetition_penalty != 1.0f) {
    // HF RepetitionPenaltyLogitsProcessor: each distinct token of prompt + output once.
    std::vector<char> done(vocab, 0);
    for (int32_t t : seen_) {
      if (t < 0 || t >= vocab || done[t]) continue;
      done[t] = 1;
      float& l = logits[t];
      l = l > 0 ? l / params_.repetition_penalty : l * params_.repetition_penalty;
    }
  }
  if (params_.presence_penalty != 0.f || params_.frequency_penalty != 0.f) {
    for (const auto& [t, count] : output_counts_) {
      if (t < 0 || t >= vocab) continue;
      logits[t] -= params_.presence_penalty + params_.frequency_penalty * static_cast<float>(count);
    }
  }
}

void Sampler::BuildDistribution(const float* logits, int64_t vocab) {
  candidates_.clear();
  float mx = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < vocab; ++i) mx = std::max(mx, logits[i]);
  const float inv_t = 1.0f / params_.temperature;
  candidates_.reserve(vocab);
  double sum = 0;
  for (int64_t i = 0; i < vocab; ++i) {
    float p = std::exp((logits[i] - mx) * inv_t);
    candidates_.emplace_back(p, static_cast<int32_t>(i));
    sum += p;
  }
  // Highest probability first; ties by lower id so results do not depend on sort stability.
  auto by_prob = [](const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  size_t keep = candidates_.size();
  if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < keep) {
    keep = params_.top_k;
    std::partial_sort(candidates_.begin(), candidates_.begin() + keep, candidates_.end(), by_prob);
  } else {
    std::sort(candidates_.begin(), candidates_.end(), by_prob);
  }
  candidates_.resize(keep);
  sum = 0;
  for (auto& c : candidates_) sum += c.first;
  for (auto& c : candidates_) c.first = static_cast<float>(c.first / sum);
  if (params_.top_p < 1.0f) {
    double cum = 0;
    size_t n = 0;
    while (n < candidates_.size()) {
      cum += candidates_[n].first;
      ++n;
      if (cum >= params_.top_p) break;
    }
    candidates_.resize(std::max<size_t>(n, 1));
  }
  if (params_.min_p > 0.f) {
    float cut = candidates_.front().first * params_.min_p;
    size_t n = 1;
    while (n < candidates_.size() && candidates_[n].first >= cut) ++n;
    candidates_.resize(n);
  }
  sum = 0;
  for (auto& c : candidates_) sum += c.first;
  for (auto& c : candidates_) c.first = static_cast<float>(c.first / sum);
}

int32_t Sampler::Draw() {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  double r = u(rng_), cum = 0;
  for (const auto& c : candidates_) {
    cum += c.first;
    if (r < cum) return c.second;
  }
  return candidates_.back().second;
}

int32_t Sampler::Sample(float* logits, int64_t vocab) {
  ApplyPenalties(logits, vocab);
  if (greedy()) return ArgMax(logits, vocab);
  BuildDistribution(logits, vocab);
  return Draw();
}

int32_t Sampler::SampleWithConfidence(const float* logits, int64_t vocab, float* confidence, int32_t exclude) {
  if (greedy()) {
    int64_t best = exclude == 0 ? 1 : 0;
    for (int64_t i = best + 1; i < vocab; ++i)
      if (i != exclude && logits[i] > logits[best]) best = i;
    double sum = 0;
    for (int64_t i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(logits[i] - logits[best]));
    *confidence = static_cast<float>(1.0 / sum);
    return static_cast<int32_t>(best);
  }
  const float* row = logits;
  if (exclude >= 0 && exclude < vocab) {
    scratch_.assign(logits, logits + vocab);
    scratch_[exclude] = -std::numeric_limits<float>::infinity();
    row = scratch_.data();
  }
  BuildDistribution(row, vocab);
  int32_t t = Draw();
  *confidence = 0.f;
  for (const auto& c : candidates_)
    if (c.second == t) *confidence = c.first;
  return t;
}

}  // namespace tessera
