// tessera grammar: the compiled pushdown automaton of a Grammar. Every rule becomes a DFA over
// bytes whose states are numbered globally; a state may also call rules (push a return state,
// continue at the callee's start). A parse position is a Config: the current state plus a stack of
// return states (pda_stack.h). Built here, once per grammar, with the analyses the matcher and the
// token-mask precomputation need: nullable rules, the bytes that may follow a rule (FOLLOW), the
// fewest bytes that complete a state, and the checks that refuse grammars the matcher cannot run
// (left recursion, rules that derive no finite string).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "grammar/automaton.h"
#include "grammar/grammar.h"

namespace tessera::grammar {

struct PdaState {
  int32_t rule = -1;
  bool final = false;      // the rule may end here
  bool has_bytes = false;  // some byte leads on
  bool has_calls = false;
  int32_t call_begin = 0, call_end = 0;  // calls_[call_begin, call_end)
  ByteSet bytes;                         // bytes with a transition
};

struct PdaCall {
  int32_t rule;  // callee
  int32_t ret;   // state of the caller to continue at once the callee ends
};

struct PdaRule {
  std::string name;
  int32_t start = -1;
  bool nullable = false;    // derives ""
  ByteSet follow;           // bytes that can come right after the rule ends, in any context
  bool follow_end = false;  // the rule can end the whole text
  bool call_free = true;    // no state of the rule calls a rule (a plain DFA: strings, numbers)
  int32_t num_states = 0;   // its states are start .. start + num_states - 1
};

class Pda {
 public:
  static constexpr int64_t kInfinite = INT64_MAX / 4;

  // Throws Error(kInvalidArgument) for a grammar that is too large, left-recursive, has an
  // undefined or unproductive rule, or accepts nothing.
  static std::shared_ptr<const Pda> Build(const Grammar& g, const AutomatonLimits& limits);

  int32_t num_states() const { return static_cast<int32_t>(states_.size()); }
  int32_t num_rules() const { return static_cast<int32_t>(rules_.size()); }
  int32_t num_classes() const { return num_classes_; }
  int32_t root_start() const { return rules_[static_cast<size_t>(root_)].start; }
  int32_t root_rule() const { return root_; }
  const PdaState& state(int32_t s) const { return states_[static_cast<size_t>(s)]; }
  const PdaRule& rule(int32_t r) const { return rules_[static_cast<size_t>(r)]; }
  const PdaCall* calls_begin(int32_t s) const { return calls_.data() + states_[static_cast<size_t>(s)].call_begin; }
  const PdaCall* calls_end(int32_t s) const { return calls_.data() + states_[static_cast<size_t>(s)].call_end; }
  // The state after byte b, or -1.
  int32_t Next(int32_t s, uint8_t b) const {
    return trans_[static_cast<size_t>(s) * static_cast<size_t>(num_classes_) + byte_class_[b]];
  }
  // Fewest bytes that take state s to the end of its rule (kInfinite never happens after Build).
  int64_t min_to_final(int32_t s) const { return min_to_final_[static_cast<size_t>(s)]; }
  // A one-line-per-state dump, for debugging.
  std::string ToString() const;

 private:
  void Analyse();

  std::vector<PdaState> states_;
  std::vector<PdaCall> calls_;
  std::vector<PdaRule> rules_;
  std::vector<int32_t> trans_;  // num_states x num_classes, -1 = no transition
  uint8_t byte_class_[256] = {};
  int32_t num_classes_ = 0;
  int32_t root_ = -1;
  std::vector<int64_t> min_to_final_;
};

}  // namespace tessera::grammar
