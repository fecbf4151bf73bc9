// tessera engine: Sampler implementation (see sampler.h).
#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "backend/sampling.h"

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

uint64_t ChoiceSeed(uint64_t seed, int64_t index) {
  if (index == 0) return seed;
  // SplitMix64 of the seed and the index: neighbouring seeds and indices give unrelated streams.
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(index);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
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
  // OpenAI's logit_bias: added to the model's logits before anything else (-100 / 100 in effect
  // ban / force a token); ids were checked against the vocabulary at intake.
  for (const auto& [t, bias] : params_.logit_bias)
    if (t >= 0 && t < vocab) logits[t] += bias;
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

RowSampling Sampler::RowRule(int32_t exclude) {
  RowSampling r;
  r.temperature = params_.temperature;
  r.top_k = params_.top_k;
  r.top_p = params_.top_p;
  r.min_p = params_.min_p;
  r.exclude = exclude;
  if (!greedy()) r.uniform = NextUniform();
  return r;
}

double Sampler::NextUniform() {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  return u(rng_);
}

bool Sampler::NextIsPlainRule() const {
  const bool suppressing_end = generated_ < params_.min_tokens && !end_ids_.empty();
  return !suppressing_end && params_.repetition_penalty == 1.0f && params_.presence_penalty == 0.f &&
         params_.frequency_penalty == 0.f && params_.logit_bias.empty();
}

int32_t Sampler::Sample(float* logits, int64_t vocab) {
  ApplyPenalties(logits, vocab);
  if (greedy()) return ArgMax(logits, vocab);
  float prob = 0.f;
  return SampleRowReference(logits, vocab, RowRule(), &prob, &candidates_);
}

int32_t Sampler::SampleWithConfidence(const float* logits, int64_t vocab, float* confidence, int32_t exclude) {
  if (!params_.logit_bias.empty()) {
    biased_.assign(logits, logits + vocab);
    for (const auto& [t, bias] : params_.logit_bias)
      if (t >= 0 && t < vocab) biased_[t] += bias;
    logits = biased_.data();
  }
  return SampleRowReference(logits, vocab, RowRule(exclude), confidence, &candidates_);
}

}  // namespace tessera
