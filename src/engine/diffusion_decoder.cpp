// tessera engine: DiffusionDecoder implementation (see diffusion_decoder.h).
#include "engine/diffusion_decoder.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"

namespace tessera {

std::vector<int64_t> StaticSchedule(int64_t block_size, int64_t steps) {
  std::vector<int64_t> s(steps, block_size / steps);
  for (int64_t i = 0; i < block_size % steps; ++i) ++s[i];
  return s;
}

DiffusionDecoder::DiffusionDecoder(const DiffusionParams& params, const std::vector<int32_t>& prompt)
    : params_(params), prompt_len_(static_cast<int64_t>(prompt.size())) {
  TESSERA_CHECK(params.block_size > 0 && params.steps > 0 && params.mask_token_id >= 0);
  schedule_ = StaticSchedule(params.block_size, params.steps);
  block_start_ = (prompt_len_ / params.block_size) * params.block_size;
  block_.assign(params.block_size, params.mask_token_id);
  conf_.assign(params.block_size, 0.f);
  for (int64_t p = block_start_; p < prompt_len_; ++p) block_[p - block_start_] = prompt[p];
}

int64_t DiffusionDecoder::masks_left() const {
  return std::count(block_.begin(), block_.end(), params_.mask_token_id);
}

DiffusionStepView DiffusionDecoder::ApplyStep(const float* block_logits, int64_t vocab, Sampler& sampler) {
  const int32_t mask = params_.mask_token_id;
  return Apply([&](int64_t i, float* conf) {
    return sampler.SampleWithConfidence(block_logits + i * vocab, vocab, conf, mask);
  });
}

std::pair<int64_t, int64_t> DiffusionDecoder::ConstrainedRows() const {
  const int64_t b = params_.block_size;
  int64_t first = 0;
  while (first < b && block_[first] != params_.mask_token_id) ++first;
  if (params_.policy != DiffusionPolicy::kStatic) return {first, b};
  const int64_t want = std::max<int64_t>(step_ < static_cast<int64_t>(schedule_.size()) ? schedule_[step_] : b, 1);
  return {first, std::min(b, first + want)};
}

DiffusionStepView DiffusionDecoder::ApplyConstrainedStep(const float* rows_logits, int64_t vocab, Sampler& sampler,
                                                         GrammarConstraint& constraint) {
  TESSERA_CHECK(!done_);
  const int64_t b = params_.block_size;
  const int32_t mask = params_.mask_token_id;
  DiffusionStepView view;
  view.block_start = block_start_;
  view.step = step_;
  const auto [first, last] = ConstrainedRows();
  // The block's new tokens before `first` (the prompt's tail is not the grammar's).
  const int64_t gen_begin = std::clamp<int64_t>(prompt_len_ - block_start_, 0, b);
  std::vector<int32_t> prefix;
  for (int64_t i = gen_begin; i < first; ++i) prefix.push_back(block_[i]);
  // Under the static policy the chain takes `want` = last - first rows (then only filler after an end).
  const int64_t want = params_.policy == DiffusionPolicy::kStatic ? last - first : b;
  std::vector<float> row(static_cast<size_t>(vocab));
  bool ended = false;  // an end token was drawn (or none is allowed): the rest is filler
  bool constrained = false;  // the previous position was drawn under a mask
  for (int64_t k = first, taken = 0; k < b && (taken < want || ended); ++k) {
    int32_t tok = constraint.filler();
    float conf = 1.f;
    if (!ended) {
      TESSERA_CHECK(k < last);
      row.assign(rows_logits + (k - first) * vocab, rows_logits + (k - first + 1) * vocab);
      if (!constraint.MaskLogitsAfter(prefix.data(), prefix.size(), row.data(), vocab)) {
        ended = true;
      } else {
        // A lazy grammar's free text right after a structure closed in this step: this row's logits
        // saw the structure's tail as masks (forced tokens pass any threshold), so the free text
        // resumes from the next forward, which sees the closed structure.
        if (taken > 0 && constrained && constraint.LastMaskFree()) break;
        constrained = !constraint.LastMaskFree();
        tok = sampler.SampleWithConfidence(row.data(), vocab, &conf, mask);
        if (constraint.EndsAtLastMask(tok)) ended = true;
        else prefix.push_back(tok);
        // Threshold policies: the chain stops at the first position below the threshold.
        if (params_.policy != DiffusionPolicy::kStatic && taken > 0 && !(conf > params_.threshold)) break;
      }
    }
    block_[k] = tok;
    conf_[k] = conf;
    view.unmasked.push_back(block_start_ + k);
    view.conf.push_back(conf);
    ++taken;
  }
  ++step_;
  done_ = masks_left() == 0;
  view.block_tokens = block_;
  return view;
}

DiffusionStepView DiffusionDecoder::ApplyPickedStep(const int32_t* tokens, const float* probs) {
  return Apply([&](int64_t i, float* conf) {
    *conf = probs[i];
    return tokens[i];
  });
}

bool DiffusionDecoder::DrawsRow(int64_t i, bool any_masked) const {
  if (any_masked) return block_[i] == params_.mask_token_id;
  return params_.policy == DiffusionPolicy::kEditing && block_start_ + i >= prompt_len_;
}

std::vector<RowSampling> DiffusionDecoder::RulesForRows(Sampler& sampler) const {
  const bool any_masked = masks_left() > 0;
  std::vector<RowSampling> rules(params_.block_size);
  for (int64_t i = 0; i < params_.block_size; ++i) {
    rules[i].exclude = params_.mask_token_id;
    if (DrawsRow(i, any_masked)) rules[i] = sampler.RowRule(params_.mask_token_id);
  }
  return rules;
}

template <typename PickFn>
DiffusionStepView DiffusionDecoder::Apply(PickFn pick) {
  TESSERA_CHECK(!done_);
  const int64_t b = params_.block_size;
  const int32_t mask = params_.mask_token_id;
  DiffusionStepView view;
  view.block_start = block_start_;
  view.step = step_;

  struct Candidate {
    int64_t index;
    int32_t token;
    float conf;
  };
  std::vector<Candidate> masked;
  for (int64_t i = 0; i < b; ++i) {
    if (block_[i] != mask) continue;
    float conf = 0.f;
    int32_t x0 = pick(i, &conf);
    masked.push_back({i, x0, conf});
  }
  // Most confident first; equal confidence -> lower position first.
  std::stable_sort(masked.begin(), masked.end(),
                   [](const Candidate& a, const Candidate& c) { return a.conf > c.conf; });

  std::vector<Candidate> chosen;
  float& margin = view.decision_margin;
  if (!masked.empty()) {
    if (params_.policy == DiffusionPolicy::kStatic) {
      // n = schedule[step]; past the schedule (cannot happen while the schedule covers the block)
      // and never fewer than one, so every step makes progress.
      int64_t n = step_ < static_cast<int64_t>(schedule_.size()) ? schedule_[step_] : masked.size();
      n = std::min<int64_t>(std::max<int64_t>(n, 1), masked.size());
      chosen.assign(masked.begin(), masked.begin() + n);
      if (n < static_cast<int64_t>(masked.size())) margin = masked[n - 1].conf - masked[n].conf;
    } else {
      for (const auto& c : masked)
        if (c.conf > params_.threshold) chosen.push_back(c);
      if (chosen.empty()) {
        chosen.push_back(masked.front());
        // Nothing passed: the most confident is taken, over the runner-up.
        if (masked.size() > 1) margin = masked[0].conf - masked[1].conf;
      }
      for (const auto& c : masked) margin = std::min(margin, std::fabs(c.conf - params_.threshold));
    }
    // Report in position order with their confidences (the fixtures' trace order).
    std::sort(chosen.begin(), chosen.end(), [](const Candidate& a, const Candidate& c) { return a.index < c.index; });
    for (const auto& c : chosen) {
      block_[c.index] = c.token;
      conf_[c.index] = c.conf;
      view.unmasked.push_back(block_start_ + c.index);
      view.conf.push_back(c.conf);
    }
  } else if (params_.policy == DiffusionPolicy::kEditing) {
    // Editing pass: no masks left; replace generated tokens whose argmax changed confidently.
    for (int64_t i = 0; i < b; ++i) {
      if (block_start_ + i < prompt_len_) continue;  // never edit the prompt
      float conf = 0.f;
      int32_t x0 = pick(i, &conf);
      if (x0 != block_[i]) margin = std::min(margin, std::fabs(conf - params_.edit_threshold));
      if (x0 != block_[i] && conf > params_.edit_threshold) {
        block_[i] = x0;
        conf_[i] = conf;
        view.unmasked.push_back(block_start_ + i);
        view.conf.push_back(conf);
      }
    }
    ++edit_steps_;
  }
  ++step_;
  if (masks_left() == 0) {
    if (!masked.empty()) {
      // This step removed the last masks; editing wants at least one pass over the full block.
      done_ = params_.policy != DiffusionPolicy::kEditing || params_.max_edit_steps == 0;
    } else {
      // An editing pass: the block is final once nothing changed or the extra steps ran out.
      done_ = view.unmasked.empty() || edit_steps_ >= params_.max_edit_steps;
    }
  }
  view.block_tokens = block_;
  return view;
}

std::vector<int32_t> DiffusionDecoder::AdvanceBlock(std::vector<float>* confidence) {
  TESSERA_CHECK(done_);
  std::vector<int32_t> finished = block_;
  if (confidence) *confidence = conf_;
  block_start_ += params_.block_size;
  block_.assign(params_.block_size, params_.mask_token_id);
  conf_.assign(params_.block_size, 0.f);
  step_ = 0;
  edit_steps_ = 0;
  done_ = false;
  return finished;
}

}  // namespace tessera
