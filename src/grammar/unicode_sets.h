// tessera grammar: sets of Unicode code points (regex classes, JSON string characters) and their
// translation into byte-level grammar expressions that match exactly the UTF-8 encodings of the set.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "grammar/grammar.h"

namespace tessera::grammar {

constexpr uint32_t kMaxCodepoint = 0x10FFFF;

// Sorted, disjoint, non-adjacent closed ranges of code points.
class CodepointSet {
 public:
  CodepointSet() = default;
  static CodepointSet Range(uint32_t lo, uint32_t hi) {
    CodepointSet s;
    s.Add(lo, hi);
    return s;
  }
  void Add(uint32_t lo, uint32_t hi);
  void Add(uint32_t cp) { Add(cp, cp); }
  void AddSet(const CodepointSet& other);
  CodepointSet Complement() const;  // within [0, kMaxCodepoint]
  CodepointSet Minus(const CodepointSet& other) const;
  CodepointSet Intersect(const CodepointSet& other) const;
  bool Contains(uint32_t cp) const;
  bool Empty() const { return ranges_.empty(); }
  const std::vector<std::pair<uint32_t, uint32_t>>& ranges() const { return ranges_; }

 private:
  std::vector<std::pair<uint32_t, uint32_t>> ranges_;
};

// An expression matching the UTF-8 encoding of any one code point of `set` (surrogates, which have
// no valid UTF-8 encoding, are left out). Nothing() for an empty set.
ExprId Utf8Expr(Grammar* g, const CodepointSet& set);

// Sets for the regex escapes whose meaning differs between ECMAScript (JSON Schema's dialect) and
// Python's `re` (vLLM's): the widest reading of each, so that a complement built from them only
// holds characters every dialect agrees on. Unassigned code points are in every set for the same
// reason (a newer Unicode version may assign them).
const CodepointSet& WideDigits();      // \d: general category Nd (Python) plus unassigned
const CodepointSet& WideWordChars();   // \w: letters, numbers, '_' (Python) plus unassigned
const CodepointSet& WideWhitespace();  // \s: ECMAScript's and Python's whitespace plus unassigned

}  // namespace tessera::grammar
