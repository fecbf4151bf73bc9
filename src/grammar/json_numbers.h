// tessera grammar: JSON numbers as grammar expressions, including exact ranges (JSON Schema
// minimum / maximum / exclusiveMinimum / exclusiveMaximum) built digit by digit, the way a
// "numeric range to regex" construction does, and intersected as automata when both ends are set.
//
// Bounded numbers are written without an exponent and with at most 15 digits in all: every such
// decimal converts to a distinct double, so the range checked on the decimal text is the range a
// validator checks on the parsed double (no rounding at the bounds). Integers are exact at any size.
#pragma once

#include <optional>
#include <string>

#include "grammar/automaton.h"
#include "grammar/grammar.h"

namespace tessera::grammar {

// A bound as an exact decimal: value = (negative ? -1 : 1) * int_digits.frac_digits.
struct Decimal {
  bool negative = false;
  std::string int_digits = "0";  // no leading zeros
  std::string frac_digits;       // no trailing zeros
  // The shortest decimal that reads back as v (finite v).
  static Decimal FromDouble(double v);
  // Exact digits of an integer value.
  static Decimal FromInt(long long v);
  static Decimal FromUint(unsigned long long v);
  bool IsZero() const { return int_digits == "0" && frac_digits.empty(); }
  bool IsInteger() const { return frac_digits.empty(); }
  std::string ToString() const;
};

// Three-way comparison of exact decimals.
int CompareDecimals(const Decimal& a, const Decimal& b);

struct NumberBound {
  Decimal value;
  bool exclusive = false;
};

// `-?(0|[1-9][0-9]*)`: any JSON integer, canonical form.
ExprId JsonIntegerExpr(Grammar* g);
// `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`: any JSON number.
ExprId JsonNumberExpr(Grammar* g);

// Integers in [lo, hi] (either side optional; bounds need not be integers). Throws
// Error(kInvalidArgument) "<what>: ..." when the range holds no integer.
ExprId IntegerRangeExpr(Grammar* g, const std::optional<NumberBound>& lo, const std::optional<NumberBound>& hi,
                        const AutomatonLimits& limits, const std::string& what);
// Numbers in [lo, hi] (see the header comment for the form they are written in).
ExprId NumberRangeExpr(Grammar* g, const std::optional<NumberBound>& lo, const std::optional<NumberBound>& hi,
                       const AutomatonLimits& limits, const std::string& what);

}  // namespace tessera::grammar
