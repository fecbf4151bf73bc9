// tessera grammar: per-state token classes and the trie walks (see token_masks.h).
#include "grammar/token_masks.h"

#include <algorithm>
#include <climits>

namespace tessera::grammar {

void StateTokenClasses::OrAccepted(const TokenVocabulary& vocab, uint32_t* words,
                                   std::vector<uint32_t>* scratch) const {
  switch (mode) {
    case Mode::kAcceptList:
      for (int32_t id : ids) words[id >> 5] |= 1u << (id & 31);
      return;
    case Mode::kBitset:
      for (size_t i = 0; i < bits.size(); ++i) words[i] |= bits[i];
      return;
    case Mode::kRejectList: {
      const std::vector<uint32_t>& all = vocab.grammar_token_mask();
      scratch->assign(all.begin(), all.end());
      uint32_t* s = scratch->data();
      for (int32_t id : ids) s[id >> 5] &= ~(1u << (id & 31));
      for (size_t i = 0; i < all.size(); ++i) words[i] |= s[i];
      return;
    }
  }
}

TrieWalker::TrieWalker(const Pda& pda, const TokenVocabulary& vocab, int32_t max_configs)
    : pda_(pda), vocab_(vocab), stepper_(pda, max_configs), levels_(258) {
  accepted_.reserve(static_cast<size_t>(vocab.num_positions()));
}

void TrieWalker::SetLevel(int32_t depth, StackArena* arena, const Config* kernels, size_t n) {
  Level& l = levels_[static_cast<size_t>(depth)];
  if (n == 1) {
    // The common case (inside a string, a number, a literal): one config whose state calls
    // nothing and does not pop a real frame. Its closure is itself.
    const PdaState& st = pda_.state(kernels[0].state);
    if (!st.has_calls && (!st.final || kernels[0].node == StackArena::kBottom)) {
      l.scan.clear();
      if (st.has_bytes) l.scan.push_back(kernels[0]);
      l.allowed = st.bytes;
      l.exit = st.final;
      return;
    }
  }
  l.exit = stepper_.Closure(arena, kernels, n, &l.scan, nullptr);
  l.allowed = ByteSet();
  for (const Config& c : l.scan) l.allowed |= pda_.state(c.state).bytes;
}

bool TrieWalker::Step(StackArena* arena, int32_t depth, uint8_t b) {
  const Level& l = levels_[static_cast<size_t>(depth)];
  if (l.scan.size() == 1) {
    int32_t t = pda_.Next(l.scan[0].state, b);
    if (t < 0) return false;
    Config k{t, l.scan[0].node};
    SetLevel(depth + 1, arena, &k, 1);
  } else {
    stepper_.Advance(l.scan, b, &kernels_);
    if (kernels_.empty()) return false;
    SetLevel(depth + 1, arena, kernels_.data(), kernels_.size());
  }
  const Level& next = levels_[static_cast<size_t>(depth) + 1];
  return !next.scan.empty() || next.exit;
}

void TrieWalker::Walk(StackArena* arena, int32_t node, int32_t depth) {
  const auto& trie = vocab_.trie();
  const int32_t end = trie[static_cast<size_t>(node)].subtree_end;
  for (int32_t c = node + 1; c < end; c = trie[static_cast<size_t>(c)].subtree_end) {
    const TokenVocabulary::Node& child = trie[static_cast<size_t>(c)];
    const Level& l = levels_[static_cast<size_t>(depth)];
    // The rule of the walk's start can end after `depth` bytes: tokens going on with a byte that may
    // follow the rule depend on the stack below (uncertain), unless accepted some other way.
    if (classify_ && depth > 0 && l.exit && follow_.Has(child.byte))
      uncertain_.emplace_back(child.pos_begin, vocab_.pos_end(c));
    if (!l.allowed.Has(child.byte)) continue;
    if (!Step(arena, depth, child.byte)) continue;
    for (int32_t p = child.pos_begin; p < child.pos_begin + child.pos_here; ++p) {
      if (classify_) {
        accepted_.push_back(p);
      } else {
        int32_t id = vocab_.pos_to_id(p);
        words_[id >> 5] |= 1u << (id & 31);
      }
    }
    if (child.subtree_end > c + 1) Walk(arena, c, depth + 1);
  }
}

void TrieWalker::WalkDfa(int32_t node, int32_t depth, int32_t state) {
  const auto& trie = vocab_.trie();
  const bool exit = depth > 0 && pda_.state(state).final;
  const int32_t end = trie[static_cast<size_t>(node)].subtree_end;
  for (int32_t c = node + 1; c < end; c = trie[static_cast<size_t>(c)].subtree_end) {
    const TokenVocabulary::Node& child = trie[static_cast<size_t>(c)];
    if (exit && follow_.Has(child.byte)) uncertain_.emplace_back(child.pos_begin, vocab_.pos_end(c));
    const int32_t t = pda_.Next(state, child.byte);
    if (t < 0) continue;
    for (int32_t p = child.pos_begin; p < child.pos_begin + child.pos_here; ++p) accepted_.push_back(p);
    if (child.subtree_end > c + 1) WalkDfa(c, depth + 1, t);
  }
}

StateTokenClasses TrieWalker::Classify(int32_t state, StackArena* scratch_arena) {
  scratch_arena->Clear();
  classify_ = true;
  const PdaRule& rule = pda_.rule(pda_.state(state).rule);
  follow_ = rule.follow;
  accepted_.clear();
  uncertain_.clear();
  if (rule.call_free) {
    WalkDfa(0, 0, state);
  } else {
    Config k{state, StackArena::kBottom};
    SetLevel(0, scratch_arena, &k, 1);
    Walk(scratch_arena, 0, 0);
  }

  StateTokenClasses out;
  out.max_push = scratch_arena->max_depth_seen();
  out.num_accepted = static_cast<int32_t>(accepted_.size());
  // Uncertain = the marked ranges minus the accepted positions (both in increasing order).
  std::sort(uncertain_.begin(), uncertain_.end());
  size_t ai = 0;
  int32_t covered = 0;  // positions below this were already emitted
  for (const auto& [b, e] : uncertain_) {
    for (int32_t p = std::max(b, covered); p < e; ++p) {
      while (ai < accepted_.size() && accepted_[ai] < p) ++ai;
      if (ai < accepted_.size() && accepted_[ai] == p) continue;
      out.uncertain.push_back(p);
    }
    covered = std::max(covered, e);
  }
  // Store whichever of the accepted list, the not-accepted list or a bitset is smallest.
  const int32_t v = vocab_.num_positions();
  const int32_t na = out.num_accepted, nr = v - na;
  const int32_t bitset_words = static_cast<int32_t>(BitmaskWords(vocab_.vocab_size()));
  if (std::min(na, nr) > bitset_words) {
    out.mode = StateTokenClasses::Mode::kBitset;
    out.bits.assign(static_cast<size_t>(bitset_words), 0);
    for (int32_t p : accepted_) {
      int32_t id = vocab_.pos_to_id(p);
      out.bits[static_cast<size_t>(id) >> 5] |= 1u << (id & 31);
    }
  } else if (na <= nr) {
    out.mode = StateTokenClasses::Mode::kAcceptList;
    out.ids.reserve(accepted_.size());
    for (int32_t p : accepted_) out.ids.push_back(vocab_.pos_to_id(p));
  } else {
    out.mode = StateTokenClasses::Mode::kRejectList;
    out.ids.reserve(static_cast<size_t>(nr));
    int32_t next = 0;  // positions between accepted ones are the rejected (or uncertain) ones
    for (int32_t p : accepted_) {
      for (; next < p; ++next) out.ids.push_back(vocab_.pos_to_id(next));
      next = p + 1;
    }
    for (; next < v; ++next) out.ids.push_back(vocab_.pos_to_id(next));
  }
  out.ids.shrink_to_fit();
  out.uncertain.shrink_to_fit();
  return out;
}

void TrieWalker::FillExact(StackArena* arena, const std::vector<Config>& kernels, uint32_t* words) {
  classify_ = false;
  words_ = words;
  SetLevel(0, arena, kernels.data(), kernels.size());
  Walk(arena, 0, 0);
}

void TrieWalker::CheckPositions(StackArena* arena, Config root, const std::vector<int32_t>& positions,
                                uint32_t* words) {
  if (positions.empty()) return;
  classify_ = false;
  SetLevel(0, arena, &root, 1);
  std::string_view prev;
  size_t valid = 0;            // levels_[0..valid] hold the prefixes of prev
  size_t dead_len = SIZE_MAX;  // prev's prefix of this length cannot be read
  for (int32_t pos : positions) {
    int32_t id = vocab_.pos_to_id(pos);
    if (words[id >> 5] & (1u << (id & 31))) continue;
    std::string_view s = vocab_.token_bytes(id);
    size_t l = 0;
    while (l < s.size() && l < prev.size() && s[l] == prev[l]) ++l;
    prev = s;
    if (l >= dead_len) continue;  // shares a prefix already found unreadable
    dead_len = SIZE_MAX;
    size_t d = std::min(l, valid);
    bool ok = true;
    while (d < s.size()) {
      auto b = static_cast<uint8_t>(s[d]);
      if (!levels_[d].allowed.Has(b) || !Step(arena, static_cast<int32_t>(d), b)) {
        ok = false;
        dead_len = d + 1;
        break;
      }
      ++d;
    }
    valid = d;
    if (ok) words[id >> 5] |= 1u << (id & 31);
  }
}

}  // namespace tessera::grammar
