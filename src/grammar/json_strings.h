// tessera grammar: the body of a JSON string literal (between the quotes) as a grammar expression,
// for plain strings and for JSON Schema's string keywords: pattern, minLength, maxLength and format
// (date-time, date, time, uuid, email, ipv4, uri; others are refused). Several keywords together
// are intersected as automata, so every generated string satisfies all of them.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "grammar/automaton.h"
#include "grammar/grammar.h"

namespace tessera::grammar {

// Any string body: raw characters, and every escape JSON allows (\" \\ \/ \b \f \n \r \t, \uXXXX
// for a non-surrogate, or a valid surrogate pair), so decoding never yields a lone surrogate.
// One "character" of this expression is one code point of the decoded string. (Strings with a
// pattern, format or length bound use only the canonical encoding of JsonQuote.)
ExprId JsonAnyCharExpr(Grammar* g);

// `s` holds the string keywords of one schema (pattern, minLength, maxLength, format). Returns the
// body expression (call-free). Throws Error(kInvalidArgument) "<path>: ..." for a bad value, an
// unsupported format, or constraints no string satisfies.
ExprId JsonStringBodyExpr(Grammar* g, const nlohmann::ordered_json& s, const std::string& path,
                          const AutomatonLimits& limits);

// The JSON literal of a string value in the one canonical encoding the grammar uses (for property
// names and enum / const strings): raw UTF-8, with \" \\ and \b \f \n \r \t \u00XX escapes.
std::string JsonQuote(const std::string& value);

}  // namespace tessera::grammar
