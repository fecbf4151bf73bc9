// tessera engine: GrammarConstraint implementation (see grammar_constraint.h).
#include "engine/grammar_constraint.h"

#include <algorithm>
#include <limits>

namespace tessera {
namespace {

bool Bit(const std::vector<uint32_t>& w, int64_t id) {
  return id >= 0 && static_cast<size_t>(id / 32) < w.size() && ((w[static_cast<size_t>(id / 32)] >> (id % 32)) & 1u);
}
void SetBit(std::vector<uint32_t>& w, int64_t id, bool on) {
  if (id < 0 || static_cast<size_t>(id / 32) >= w.size()) return;
  const uint32_t m = 1u << (id % 32);
  w[static_cast<size_t>(id / 32)] = on ? (w[static_cast<size_t>(id / 32)] | m) : (w[static_cast<size_t>(id / 32)] & ~m);
}

}  // namespace

GrammarConstraint::GrammarConstraint(std::shared_ptr<const grammar::CompiledGrammar> grammar,
                                     std::vector<int32_t> request_stop_ids, bool ignore_eos)
    : matcher_(std::move(grammar)), request_stops_(std::move(request_stop_ids)), ignore_eos_(ignore_eos) {
  eos_ = matcher_.grammar().vocab().stop_ids();
  if (!eos_.empty()) filler_ = eos_.front();
  else if (!request_stops_.empty()) filler_ = request_stops_.front();
}

bool GrammarConstraint::IsEnd(int32_t token) const {
  if (std::find(request_stops_.begin(), request_stops_.end(), token) != request_stops_.end()) return true;
  return !ignore_eos_ && std::find(eos_.begin(), eos_.end(), token) != eos_.end();
}

bool GrammarConstraint::Fill(const int32_t* prefix, size_t n, bool hypothetical, std::vector<uint32_t>* words,
                             bool* complete_out) {
  words->assign(grammar::BitmaskWords(matcher_.vocab_size()), 0u);
  if (hypothetical) {
    if (!matcher_.FillBitmaskAfter(prefix, n, words->data())) return false;
  } else {
    matcher_.FillNextTokenBitmask(words->data());
  }
  // The matcher allows its stop ids (the model's eos) exactly where the text is complete.
  bool complete = false;
  for (int32_t e : eos_) complete = complete || Bit(*words, e);
  if (!hypothetical) complete = complete || matcher_.CanTerminate();
  // The request's own stop ids end the output too where it may end; inside, they are allowed only
  // as the grammar's text (a stop id that is an ordinary byte must not cut a string short).
  if (complete)
    for (int32_t e : request_stops_) SetBit(*words, e, true);
  *complete_out = complete;
  if (ignore_eos_)
    for (int32_t e : eos_)
      if (std::find(request_stops_.begin(), request_stops_.end(), e) == request_stops_.end()) SetBit(*words, e, false);
  return true;
}

void GrammarConstraint::Apply(const std::vector<uint32_t>& words, float* logits, int64_t vocab) const {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < vocab; ++i)
    if (!Bit(words, i)) logits[i] = kNegInf;
}

bool GrammarConstraint::MaskLogits(float* logits, int64_t vocab) {
  if (!cached_) {
    Fill(nullptr, 0, false, &words_, &cached_complete_);
    cached_ = true;
  }
  last_complete_ = cached_complete_;
  Apply(words_, logits, vocab);
  for (uint32_t w : words_)
    if (w != 0) return true;
  return false;
}

bool GrammarConstraint::MaskLogitsAfter(const int32_t* prefix, size_t n, float* logits, int64_t vocab) {
  if (n == 0) return MaskLogits(logits, vocab);
  if (!Fill(prefix, n, true, &scratch_, &last_complete_)) return false;
  Apply(scratch_, logits, vocab);
  for (uint32_t w : scratch_)
    if (w != 0) return true;
  return false;
}

bool GrammarConstraint::Accept(int32_t token) {
  if (!matcher_.AcceptToken(token)) return false;
  cached_ = false;
  return true;
}

bool GrammarConstraint::Done() {
  if (!matcher_.CanTerminate()) return false;
  if (!cached_) {
    Fill(nullptr, 0, false, &words_, &cached_complete_);
    cached_ = true;
  }
  last_complete_ = cached_complete_;
  for (size_t w = 0; w < words_.size(); ++w) {
    uint32_t bits = words_[w];
    while (bits != 0) {
      const int b = __builtin_ctz(bits);
      bits &= bits - 1;
      if (!IsEnd(static_cast<int32_t>(w * 32 + static_cast<size_t>(b)))) return false;
    }
  }
  return true;
}

}  // namespace tessera
