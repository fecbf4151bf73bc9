// tessera grammar: the per-request matcher (see matcher.h).
#include "grammar/matcher.h"

#include <algorithm>

#include "core/error.h"

namespace tessera::grammar {

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar, MatcherOptions options)
    : grammar_(std::move(grammar)),
      options_(options),
      arena_(options.max_stack_depth),
      stepper_(grammar_->pda(), grammar_->max_parses()),
      walker_(grammar_->pda(), grammar_->vocab(), grammar_->max_parses()) {
  if (options_.max_stack_depth < 1)
    Fail(ErrorKind::kInvalidArgument, "grammar matcher: max_stack_depth must be at least 1");
  Reset();
}

void GrammarMatcher::Reset() {
  arena_.Clear();
  history_.clear();
  Position start;
  Config k{grammar_->pda().root_start(), StackArena::kBottom};
  start.accepting = stepper_.Closure(&arena_, &k, 1, &start.scan, &start.roots);
  history_.push_back(std::move(start));
  live_nodes_after_compact_ = arena_.size();
}

bool GrammarMatcher::Advance(std::string_view bytes, Position* out) {
  const Position& p = cur();
  if (p.terminated) return false;
  if (bytes.empty()) {
    *out = p;
    return true;
  }
  const std::vector<Config>* src = &p.scan;
  bool accepting = false;
  for (size_t i = 0; i < bytes.size(); ++i) {
    stepper_.Advance(*src, static_cast<uint8_t>(bytes[i]), &kernels_);
    if (kernels_.empty()) return false;
    const bool last = i + 1 == bytes.size();
    std::vector<Config>* dst = src == &scan_a_ ? &scan_b_ : &scan_a_;
    accepting = stepper_.Closure(&arena_, kernels_.data(), kernels_.size(), dst, last ? &out->roots : nullptr);
    if (dst->empty() && !accepting) return false;
    src = dst;
  }
  out->scan = *src;
  out->accepting = accepting;
  out->terminated = false;
  return true;
}

void GrammarMatcher::Push(Position p) {
  history_.push_back(std::move(p));
  if (options_.max_rollback_tokens >= 0) {
    const size_t keep = static_cast<size_t>(options_.max_rollback_tokens) + 1 + static_cast<size_t>(pinned_);
    while (history_.size() > keep) history_.pop_front();
  }
  // Garbage-collect stack nodes once the arena has grown well past what was live last time
  // (mask checks and failed attempts leave unreachable nodes behind).
  if (arena_.size() > 2 * live_nodes_after_compact_ + 65536) {
    std::vector<std::vector<Config>*> lists;
    for (Position& q : history_) {
      lists.push_back(&q.scan);
      lists.push_back(&q.roots);
    }
    arena_.Compact(lists);
    live_nodes_after_compact_ = arena_.size();
  }
}

bool GrammarMatcher::AcceptToken(int32_t id) {
  const TokenVocabulary& v = grammar_->vocab();
  if (id < 0 || id >= v.vocab_size() || cur().terminated) return false;
  if (v.is_stop(id)) {
    if (!cur().accepting) return false;
    Position p;
    p.accepting = true;
    p.terminated = true;
    Push(std::move(p));
    return true;
  }
  if (!v.is_grammar_token(id)) return false;
  Position p;
  if (!Advance(v.token_bytes(id), &p)) return false;
  Push(std::move(p));
  return true;
}

bool GrammarMatcher::AcceptBytes(std::string_view bytes) {
  Position p;
  if (!Advance(bytes, &p)) return false;
  Push(std::move(p));
  return true;
}

bool GrammarMatcher::IsTokenAllowed(int32_t id) {
  ++pinned_;
  bool ok = AcceptToken(id);
  if (ok) history_.pop_back();
  --pinned_;
  return ok;
}

bool GrammarMatcher::IsValidContinuation(std::string_view bytes) {
  Position p;
  return Advance(bytes, &p);
}

void GrammarMatcher::Rollback(int32_t n) {
  if (n < 0 || n > num_steps_kept())
    Fail(ErrorKind::kInvalidArgument, "grammar matcher: cannot roll back {} steps ({} kept)", n, num_steps_kept());
  for (int32_t i = 0; i < n; ++i) history_.pop_back();
}

void GrammarMatcher::BuildKey(const Position& p) {
  // The mask is a function of the roots (with their whole stacks) alone; sorted, so the same
  // position reached another way gives the same key.
  std::vector<Config> roots = p.roots;
  std::sort(roots.begin(), roots.end());
  key_.clear();
  key_.push_back(options_.max_stack_depth);
  key_.push_back(p.accepting ? 1 : 0);
  for (const Config& r : roots) {
    key_.push_back(r.state);
    for (int32_t n = r.node; n != StackArena::kBottom; n = arena_.parent(n)) key_.push_back(arena_.ret(n));
    key_.push_back(-1);
  }
}

void GrammarMatcher::ComputeMask(const Position& p, uint32_t* words) {
  const TokenVocabulary& v = grammar_->vocab();
  const size_t nw = BitmaskWords(v.vocab_size());
  std::fill(words, words + nw, 0u);
  std::vector<Config> exact;
  for (const Config& r : p.roots) {
    const StateTokenClasses& tc = grammar_->Classes(r.state);
    // Near the depth limit the precomputed classes may offer a token whose parse would need to
    // go deeper than allowed, reading it (max_push) or going on after a rule it ends (the closure
    // of the state returned to, from a lower level): such roots are walked exactly instead.
    if (arena_.depth(r.node) + std::max(tc.max_push, grammar_->max_closure_push()) > options_.max_stack_depth) {
      exact.push_back(r);
      continue;
    }
    tc.OrAccepted(v, words, &scratch_words_);
  }
  for (const Config& r : p.roots) {
    if (std::find(exact.begin(), exact.end(), r) != exact.end()) continue;
    walker_.CheckPositions(&arena_, r, grammar_->Classes(r.state).uncertain, words);
  }
  if (!exact.empty()) walker_.FillExact(&arena_, exact, words);
  const std::vector<uint32_t>& allowed = v.grammar_token_mask();
  for (size_t i = 0; i < nw; ++i) words[i] &= allowed[i];
  if (p.accepting)
    for (int32_t id : v.stop_ids()) words[id >> 5] |= 1u << (id & 31);
}

bool GrammarMatcher::FillNextTokenBitmask(uint32_t* words) {
  const size_t nw = BitmaskWords(vocab_size());
  const Position& p = cur();
  if (p.terminated) {
    std::fill(words, words + nw, 0u);
    return false;
  }
  BuildKey(p);
  if (!grammar_->LookupMask(key_, words)) {
    ComputeMask(p, words);
    grammar_->StoreMask(key_, words);
  }
  for (size_t i = 0; i < nw; ++i)
    if (words[i]) return true;
  return false;
}

bool GrammarMatcher::FillBitmaskAfter(const int32_t* prefix, size_t n, uint32_t* words) {
  int32_t accepted = 0;
  bool ok = true;
  pinned_ = static_cast<int32_t>(n) + 1;  // keep every step of the prefix whatever max_rollback_tokens says
  for (size_t i = 0; i < n && ok; ++i) {
    ok = AcceptToken(prefix[i]);
    if (ok) ++accepted;
  }
  if (ok) FillNextTokenBitmask(words);
  for (int32_t i = 0; i < accepted; ++i) history_.pop_back();
  pinned_ = 0;
  return ok;
}

bool GrammarMatcher::IsValidAfter(const int32_t* prefix, size_t n, int32_t token) {
  int32_t accepted = 0;
  bool ok = true;
  pinned_ = static_cast<int32_t>(n) + 1;
  for (size_t i = 0; i < n && ok; ++i) {
    ok = AcceptToken(prefix[i]);
    if (ok) ++accepted;
  }
  if (ok) ok = IsTokenAllowed(token);
  for (int32_t i = 0; i < accepted; ++i) history_.pop_back();
  pinned_ = 0;
  return ok;
}

int64_t GrammarMatcher::MinBytesToComplete() const {
  const Position& p = cur();
  if (p.accepting || p.terminated) return 0;
  const Pda& pda = grammar_->pda();
  int64_t best = Pda::kInfinite;
  for (const Config& c : p.scan) {
    int64_t d = pda.min_to_final(c.state);
    for (int32_t n = c.node; n != StackArena::kBottom; n = arena_.parent(n)) d += pda.min_to_final(arena_.ret(n));
    best = std::min(best, d);
  }
  return best;
}

}  // namespace tessera::grammar
