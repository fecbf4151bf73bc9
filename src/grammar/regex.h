// tessera grammar: regular expressions (the common subset of ECMAScript, which JSON Schema's
// `pattern` uses, and Python's `re`, which vLLM's `regex` follows) compiled to grammar expressions.
//
// Supported: literals and escapes (\n \t \r \f \v \0 \xHH \uHHHH \u{H..} \UHHHHHHHH, escaped
// punctuation), `.`, classes [...] with ranges and negation, \d \w \s \D \W \S, groups ( ) (?: )
// (?<name> ) (?P<name> ), alternation, quantifiers ? * + {n} {n,} {n,m} (lazy forms too: same
// language), and ^ / $ at the start / end of the pattern or of a top-level alternative. Refused
// with an error naming the construct: backreferences, lookaround, word boundaries, \p{..},
// inline flags, possessive quantifiers and atomic groups.
//
// Where the dialects disagree the compiled language keeps to strings both accept: \d is [0-9],
// \w is [A-Za-z0-9_], \s is ASCII whitespace, `.` leaves out \n \r U+2028 U+2029, and the
// negations (\D, [^\d], ...) leave out every character either dialect could count in the class.
#pragma once

#include <string_view>

#include "grammar/grammar.h"
#include "grammar/unicode_sets.h"

namespace tessera::grammar {

struct RegexOptions {
  // kText: match the UTF-8 text itself. kJsonString: match the body of a JSON string literal (no
  // quotes) whose decoded value the regex matches, with each character in its one canonical
  // encoding (raw UTF-8, or \" \\ \b \f \n \r \t \u00XX where JSON requires an escape).
  enum class Target { kText, kJsonString } target = Target::kText;
  // JSON Schema `pattern` semantics: the regex may match anywhere in the string unless anchored
  // with ^ / $. Otherwise (vLLM `regex`) the whole text must match.
  bool search = false;
};

// Throws Error(kInvalidArgument) "<what>: ..." for a syntax error or unsupported construct.
ExprId CompileRegex(Grammar* g, std::string_view pattern, const RegexOptions& options, std::string_view what);

// One character of `set` as it appears inside a JSON string literal, canonically encoded.
ExprId JsonCharExpr(Grammar* g, const CodepointSet& set);

}  // namespace tessera::grammar
