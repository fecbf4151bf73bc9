// tessera engine: GrammarConstraint implementation (see grammar_constraint.h).
#include "engine/grammar_constraint.h"

#include <algorithm>

#include "backend/sampling.h"

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
                                     std::vector<int32_t> request_stop_ids, bool ignore_eos,
                                     std::shared_ptr<const GrammarTrigger> trigger)
    : grammar_(grammar),
      matcher_(std::move(grammar)),
      trigger_(std::move(trigger)),
      phase_(trigger_ ? Phase::kFree : Phase::kCall),
      request_stops_(std::move(request_stop_ids)),
      ignore_eos_(ignore_eos) {
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
  MaskRowByWords(logits, vocab, words.data(), words.size());
}

const std::vector<uint32_t>* GrammarConstraint::CurrentMask() {
  if (trigger_) {
    // Free text is the model's own: nothing masked, and an end token ends the output there.
    last_complete_ = last_free_ = phase_ == Phase::kFree;
    if (last_complete_) return nullptr;
    if (!cached_) {
      FillLazy(phase_, forced_, matcher_, &words_);
      cached_ = true;
    }
    return &words_;
  }
  if (!cached_) {
    Fill(nullptr, 0, false, &words_, &cached_complete_);
    cached_ = true;
  }
  last_complete_ = cached_complete_;
  return &words_;
}

bool GrammarConstraint::MaskLogits(float* logits, int64_t vocab) {
  const std::vector<uint32_t>* words = CurrentMask();
  if (!words) return true;
  Apply(*words, logits, vocab);
  return std::any_of(words->begin(), words->end(), [](uint32_t w) { return w != 0; });
}

bool GrammarConstraint::MaskWords(int64_t vocab, std::vector<uint32_t>* words) {
  words->clear();
  const std::vector<uint32_t>* current = CurrentMask();
  if (!current) return true;
  // The grammar's words cover its vocabulary; ids past it are not allowed.
  words->assign(static_cast<size_t>((vocab + 31) / 32), 0u);
  for (size_t i = 0; i < words->size() && i < current->size(); ++i) (*words)[i] = (*current)[i];
  if (vocab % 32 != 0) words->back() &= (1u << (vocab % 32)) - 1u;
  return std::any_of(words->begin(), words->end(), [](uint32_t w) { return w != 0; });
}

bool GrammarConstraint::MaskLogitsAfter(const int32_t* prefix, size_t n, float* logits, int64_t vocab) {
  if (n == 0) return MaskLogits(logits, vocab);
  if (trigger_) return MaskLazyAfter(prefix, n, logits, vocab);
  if (!Fill(prefix, n, true, &scratch_, &last_complete_)) return false;
  Apply(scratch_, logits, vocab);
  for (uint32_t w : scratch_)
    if (w != 0) return true;
  return false;
}

bool GrammarConstraint::Accept(int32_t token) {
  if (trigger_) {
    cached_ = false;  // the phase may change even where the matcher does not move
    return Step(&phase_, &forced_, &matcher_, token);
  }
  if (!matcher_.AcceptToken(token)) return false;
  cached_ = false;
  return true;
}

bool GrammarConstraint::Done() {
  if (trigger_ || !matcher_.CanTerminate()) return false;
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

// ---- lazy (trigger-activated) grammars ----

void GrammarConstraint::EnterCall(Phase* phase, grammar::GrammarMatcher* m) const {
  m->Reset();  // each structure is parsed from the grammar's start
  *phase = Phase::kCall;
}

void GrammarConstraint::EnterClosing(Phase* phase, size_t* forced, size_t from) const {
  *forced = from;
  *phase = from < trigger_->closing.size() ? Phase::kClosing : Phase::kFree;
}

bool GrammarConstraint::StructureDone(grammar::GrammarMatcher& m) {
  if (!m.CanTerminate()) return false;
  scratch_.assign(grammar::BitmaskWords(m.vocab_size()), 0u);
  m.FillNextTokenBitmask(scratch_.data());
  for (size_t w = 0; w < scratch_.size(); ++w) {
    uint32_t bits = scratch_[w];
    while (bits != 0) {
      const int32_t id = static_cast<int32_t>(w * 32) + __builtin_ctz(bits);
      bits &= bits - 1;
      if (std::find(eos_.begin(), eos_.end(), id) == eos_.end()) return false;
    }
  }
  return true;
}

bool GrammarConstraint::Step(Phase* phase, size_t* forced, grammar::GrammarMatcher* m, int32_t token) {
  const GrammarTrigger& t = *trigger_;
  switch (*phase) {
    case Phase::kFree:
      if (std::find(t.trigger_ids.begin(), t.trigger_ids.end(), token) != t.trigger_ids.end()) {
        *forced = 0;
        if (t.opening.empty()) EnterCall(phase, m);
        else *phase = Phase::kOpening;
      }
      return true;
    case Phase::kOpening:
      if (token != t.opening[*forced]) return false;
      if (++*forced == t.opening.size()) EnterCall(phase, m);
      return true;
    case Phase::kCall:
      // A structure that is complete but could go on (a number, a regex's repetition) ends where
      // the model writes the closing's first token.
      if (m->CanTerminate() && !t.closing.empty() && token == t.closing[0]) {
        EnterClosing(phase, forced, 1);
        return true;
      }
      if (m->AcceptToken(token)) {
        if (StructureDone(*m)) EnterClosing(phase, forced, 0);
        return true;
      }
      // The structure's last bytes and the closing's first token in one token.
      BuildMerge();
      if (const std::string* x = MergePrefix(token); x != nullptr && m->AcceptBytes(*x)) {
        if (m->CanTerminate()) {
          EnterClosing(phase, forced, 1);
          return true;
        }
        m->Rollback(1);
      }
      return false;
    case Phase::kClosing:
      if (token != t.closing[*forced]) return false;
      EnterClosing(phase, forced, *forced + 1);
      return true;
  }
  return false;
}

void GrammarConstraint::FillLazy(Phase phase, size_t forced, grammar::GrammarMatcher& m,
                                 std::vector<uint32_t>* words) {
  words->assign(grammar::BitmaskWords(m.vocab_size()), 0u);
  if (phase == Phase::kOpening || phase == Phase::kClosing) {
    SetBit(*words, phase == Phase::kOpening ? trigger_->opening[forced] : trigger_->closing[forced], true);
    return;
  }
  m.FillNextTokenBitmask(words->data());
  // Inside a structure nothing ends the output: where it may end, the closing follows instead.
  const bool complete = m.CanTerminate();
  for (int32_t e : eos_) SetBit(*words, e, false);
  if (trigger_->closing.empty()) return;
  if (complete) SetBit(*words, trigger_->closing[0], true);
  // Merged tokens are tried only where the structure can end within the longest of them.
  BuildMerge();
  const int64_t need = m.MinBytesToComplete();
  if (need > static_cast<int64_t>(merge_longest_)) return;
  for (const auto& [id, bytes] : merge_)
    if (static_cast<int64_t>(bytes.size()) >= need && !Bit(*words, id) && MergeEnds(m, bytes)) SetBit(*words, id, true);
}

// The most bytes of a structure a merged token may carry before the closing: BPE merges the last
// few bytes ("}}", "\"}}") with the newline. The bound keeps the candidates few (a 151K vocabulary
// has thousands of tokens ending in "\n") and the check to the last positions of a structure.
constexpr size_t kMaxMergeBytes = 8;

void GrammarConstraint::BuildMerge() {
  if (merge_longest_ > 0 || trigger_->closing.empty()) return;
  merge_longest_ = 1;  // built (possibly empty)
  const grammar::TokenVocabulary& v = grammar_->vocab();
  const int32_t first = trigger_->closing[0];
  if (first < 0 || first >= v.vocab_size() || !v.is_grammar_token(first)) return;
  const std::string_view tail = v.token_bytes(first);
  if (tail.empty()) return;
  for (int32_t id = 0; id < v.vocab_size(); ++id) {
    if (!v.is_grammar_token(id) || v.is_stop(id)) continue;
    const std::string_view b = v.token_bytes(id);
    if (b.size() <= tail.size() || b.size() > tail.size() + kMaxMergeBytes ||
        b.substr(b.size() - tail.size()) != tail)
      continue;
    merge_.emplace_back(id, std::string(b.substr(0, b.size() - tail.size())));
    merge_longest_ = std::max(merge_longest_, b.size() - tail.size());
  }
}

const std::string* GrammarConstraint::MergePrefix(int32_t token) const {
  auto it = std::lower_bound(merge_.begin(), merge_.end(), token,
                             [](const std::pair<int32_t, std::string>& e, int32_t id) { return e.first < id; });
  return it != merge_.end() && it->first == token ? &it->second : nullptr;
}

bool GrammarConstraint::MergeEnds(grammar::GrammarMatcher& m, const std::string& bytes) const {
  if (!m.IsValidContinuation(bytes) || !m.AcceptBytes(bytes)) return false;
  const bool ends = m.CanTerminate();
  m.Rollback(1);
  return ends;
}

bool GrammarConstraint::MaskLazyAfter(const int32_t* prefix, size_t n, float* logits, int64_t vocab) {
  // Replays the prefix on a copy of the phase: tokens of the structure open now go into matcher_
  // (rolled back afterwards), a structure opened inside the prefix into a scratch matcher.
  Phase phase = phase_;
  size_t forced = forced_;
  grammar::GrammarMatcher* m = &matcher_;
  int32_t main_steps = 0;
  bool ok = true;
  try {
    for (size_t i = 0; i < n && ok; ++i) {
      if (phase != Phase::kCall && m == &matcher_) {
        // Outside the structure open now: a structure opening from here on is the scratch's.
        if (!scratch_matcher_) scratch_matcher_.emplace(grammar_);
        m = &*scratch_matcher_;
      }
      const size_t before = m == &matcher_ ? static_cast<size_t>(matcher_.num_steps_kept()) : 0;
      ok = Step(&phase, &forced, m, prefix[i]);
      if (m == &matcher_) main_steps += matcher_.num_steps_kept() - static_cast<int32_t>(before);
    }
    if (ok) {
      last_complete_ = last_free_ = phase == Phase::kFree;
      if (phase != Phase::kFree) {
        FillLazy(phase, forced, *m, &scratch_);
        Apply(scratch_, logits, vocab);
      }
    }
  } catch (...) {
    if (main_steps > 0) matcher_.Rollback(main_steps);
    throw;
  }
  if (main_steps > 0) matcher_.Rollback(main_steps);
  if (!ok) return false;
  if (phase == Phase::kFree) return true;
  for (uint32_t w : scratch_)
    if (w != 0) return true;
  return false;
}

}  // namespace tessera
