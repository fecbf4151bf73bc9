// tessera grammar: a grammar compiled for one vocabulary, shared by every request that uses it:
// the pushdown automaton, the token classes of each state (token_masks.h, computed at compile
// time), and a cache of whole masks keyed by parse position, filled by the matchers. Immutable
// apart from that cache, which is locked: safe to share between threads.
#pragma once

#include <atomic>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "grammar/pda.h"
#include "grammar/token_masks.h"
#include "grammar/vocabulary.h"

namespace tessera::grammar {

struct CompiledGrammarStats {
  int32_t num_rules = 0;
  int32_t num_states = 0;
  double build_ms = 0;       // grammar text -> automaton
  double precompute_ms = 0;  // token classes of every state
  size_t classes_bytes = 0;  // memory of the token classes
  int32_t num_walks = 0;     // vocabulary walks the token classes took (equivalent states share one)
};

class CompiledGrammar {
 public:
  // Computes the token classes of every state that can start a mask (eagerly: the compile pays,
  // not the first requests), on `threads` threads. `mask_cache_bytes` bounds the shared mask cache.
  CompiledGrammar(std::shared_ptr<const Pda> pda, std::shared_ptr<const TokenVocabulary> vocab, int32_t max_parses,
                  size_t mask_cache_bytes, int32_t threads = 1);
  ~CompiledGrammar();

  const Pda& pda() const { return *pda_; }
  const TokenVocabulary& vocab() const { return *vocab_; }
  const std::shared_ptr<const TokenVocabulary>& vocab_ptr() const { return vocab_; }
  const CompiledGrammarStats& stats() const { return stats_; }
  CompiledGrammarStats& mutable_stats() { return stats_; }
  int32_t max_parses() const { return max_parses_; }

  // The token classes of a state (computed now if the state was not precomputed; thread-safe).
  const StateTokenClasses& Classes(int32_t state) const;
  // The deepest stack (above a config) the expansion of any single state pushes before a byte is
  // read: what continuing after a rule's end may need beyond the token classes' max_push.
  int32_t max_closure_push() const { return max_closure_push_; }

  // The shared mask cache: a key is a parse position written as integers (matcher.cpp).
  bool LookupMask(const std::vector<int32_t>& key, uint32_t* words) const;
  void StoreMask(const std::vector<int32_t>& key, const uint32_t* words) const;
  struct CacheStats {
    uint64_t hits = 0, misses = 0;
    size_t entries = 0, bytes = 0;
  };
  CacheStats cache_stats() const;

 private:
  struct KeyHash {
    size_t operator()(const std::vector<int32_t>& k) const;
  };
  struct CacheEntry {
    std::vector<int32_t> key;
    std::vector<uint32_t> words;
  };

  std::shared_ptr<const Pda> pda_;
  std::shared_ptr<const TokenVocabulary> vocab_;
  int32_t max_parses_;
  int32_t max_closure_push_ = 0;
  CompiledGrammarStats stats_;
  std::unique_ptr<std::atomic<const StateTokenClasses*>[]> classes_;  // per state; shared by equivalent states
  mutable std::vector<std::unique_ptr<StateTokenClasses>> owned_;     // by representative state
  mutable std::mutex classes_mu_;                                     // lazy Classes() of states not precomputed

  size_t cache_budget_;
  mutable std::mutex cache_mu_;
  mutable std::list<CacheEntry> lru_;  // most recent first
  mutable std::unordered_map<std::vector<int32_t>, std::list<CacheEntry>::iterator, KeyHash> index_;
  mutable size_t cache_bytes_ = 0;
  mutable uint64_t hits_ = 0, misses_ = 0;
};

}  // namespace tessera::grammar
