// tessera grammar: token classes per automaton state, and the trie walks that compute masks.
//
// The mask of a parse position depends on the whole stack, but most of it does not: for a config
// {s, stack}, a token either (a) can be read entirely while staying at or above that stack level
// (accepted whatever lies below), (b) dies before leaving the level (rejected), or (c) ends the
// level's rule part-way and then needs the stack below (uncertain). Classes (a)-(c) depend on s
// alone, so they are computed once per state by walking the vocabulary trie from {s, empty stack}
// (a byte after the rule ends must be in the rule's FOLLOW set, or the token is rejected there too).
// At run time a mask is the union of the accepted sets of the position's root configs, plus the
// uncertain tokens checked one by one against the real stack (few: e.g. `",` after a string).
// This is the scheme of XGrammar's adaptive token mask cache, written from its description.
#pragma once

#include <cstdint>
#include <vector>

#include "grammar/pda_stack.h"
#include "grammar/vocabulary.h"

namespace tessera::grammar {

struct StateTokenClasses {
  enum class Mode : uint8_t { kAcceptList, kRejectList, kBitset };
  Mode mode = Mode::kAcceptList;
  std::vector<int32_t> ids;        // kAcceptList: accepted ids; kRejectList: grammar tokens NOT accepted
  std::vector<uint32_t> bits;      // kBitset: accepted ids
  std::vector<int32_t> uncertain;  // trie positions, increasing
  int32_t max_push = 0;            // deepest stack (above the config) the walk used
  int32_t num_accepted = 0;

  // words |= accepted. `scratch` holds BitmaskWords(vocab) words (used by kRejectList).
  void OrAccepted(const TokenVocabulary& vocab, uint32_t* words, std::vector<uint32_t>* scratch) const;
  size_t MemoryBytes() const { return sizeof(*this) + 4 * (ids.capacity() + bits.capacity() + uncertain.capacity()); }
};

// Walks the vocabulary trie from a set of parse configs, stepping the automaton byte by byte and
// pruning a subtree at the first byte no config can read. Scratch space is reused between walks;
// not thread-safe (one per thread or per matcher).
class TrieWalker {
 public:
  TrieWalker(const Pda& pda, const TokenVocabulary& vocab, int32_t max_configs);

  // The token classes of state s (a fresh local stack; the arena is cleared and used as scratch).
  StateTokenClasses Classify(int32_t state, StackArena* scratch_arena);
  // Sets the bit of every grammar token readable from `kernels` on `arena` (exact, any depth).
  void FillExact(StackArena* arena, const std::vector<Config>& kernels, uint32_t* words);
  // Sets the bit of each token at the given trie positions (increasing) readable from config
  // `root` on `arena`, skipping tokens whose bit is already set; shares work between tokens with a
  // common prefix.
  void CheckPositions(StackArena* arena, Config root, const std::vector<int32_t>& positions, uint32_t* words);

 private:
  struct Level {
    std::vector<Config> scan;
    ByteSet allowed;
    bool exit = false;  // the bottom of the stack can end here
  };
  // levels_[depth + 1] = the position after reading byte b from levels_[depth]; false if dead.
  bool Step(StackArena* arena, int32_t depth, uint8_t b);
  void SetLevel(int32_t depth, StackArena* arena, const Config* kernels, size_t n);
  void Walk(StackArena* arena, int32_t node, int32_t depth);
  // Walk for a state of a call-free rule at the bottom of the local stack: a plain DFA walk.
  void WalkDfa(int32_t node, int32_t depth, int32_t state);

  const Pda& pda_;
  const TokenVocabulary& vocab_;
  PdaStepper stepper_;
  std::vector<Level> levels_;
  std::vector<Config> kernels_;
  // Walk outputs.
  bool classify_ = false;
  ByteSet follow_;
  std::vector<int32_t> accepted_;                       // positions
  std::vector<std::pair<int32_t, int32_t>> uncertain_;  // position ranges
  uint32_t* words_ = nullptr;
};

}  // namespace tessera::grammar
