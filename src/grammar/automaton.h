// tessera grammar: from a rule's body expression to a finite automaton. Thompson's construction
// gives an NFA with epsilon moves; the subset construction makes it deterministic in bytes (calls
// of other rules stay symbols of the automaton, grouped by callee). Also the call-free byte DFAs
// that intersection and subtraction of regular languages (number ranges, pattern + length) need.
#pragma once

#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "grammar/grammar.h"

namespace tessera::grammar {

// Size limits that turn an exploding grammar (a huge repetition count, a regex whose DFA blows
// up) into a clear error instead of exhausted memory.
struct AutomatonLimits {
  int32_t max_nfa_states = 400000;  // per rule, before determinisation
  int32_t max_dfa_states = 100000;  // per rule
};

// One rule's automaton: deterministic in bytes; state 0 is the start.
struct RuleAutomaton {
  struct State {
    std::vector<std::pair<ByteSet, int32_t>> byte_edges;  // disjoint byte sets
    std::vector<std::pair<int32_t, int32_t>> calls;       // (callee rule, state after the call)
    bool final = false;
  };
  std::vector<State> states;
};

// Throws Error(kInvalidArgument) naming `what` when a limit is exceeded.
RuleAutomaton BuildRuleAutomaton(const Grammar& g, ExprId body, const AutomatonLimits& limits, std::string_view what);

// The DFA of a call-free expression (Error(kInternal) if it calls a rule).
ByteDfa BuildByteDfa(const Grammar& g, ExprId expr, const AutomatonLimits& limits, std::string_view what);
// a ∩ b, or a \ b when `subtract`: product construction, trimmed of states that cannot reach an
// accepting state (so an empty language gives a DFA whose start has no edges and is not final).
ByteDfa ProductDfa(const ByteDfa& a, const ByteDfa& b, bool subtract, const AutomatonLimits& limits,
                   std::string_view what);
// True when the DFA accepts no string at all.
bool DfaIsEmpty(const ByteDfa& d);

// Convenience for front-ends: the expression for L(a) ∩ L(b) / L(a) \ L(b) (both call-free).
ExprId IntersectExprs(Grammar* g, ExprId a, ExprId b, const AutomatonLimits& limits, std::string_view what);
ExprId SubtractExprs(Grammar* g, ExprId a, ExprId b, const AutomatonLimits& limits, std::string_view what);

}  // namespace tessera::grammar
