// tessera grammar: grammars written as text, in a Lark-like EBNF (vLLM's `grammar` field):
//
//   start: greeting name ("," name)* "!"?      // rules: `name: alternatives`; `start` is the root
//   greeting: "hello" | "hi"i                  // string literals; "..."i is case-insensitive ASCII
//   name: /[A-Z][a-z]+/                        // regex terminals (regex.h), whole-match
//   list: "[" [item ("," item)*] "]"           // [x] is optional, like x?
//   item: NUMBER ~ 1..3                        // x ~ n and x ~ n..m repeat
//   %import common.NUMBER                      // common.{NUMBER, INT, SIGNED_NUMBER, DIGIT, LETTER,
//                                              //  WORD, CNAME, WS, WS_INLINE, NEWLINE, ESCAPED_STRING}
//
// Rule modifiers (?rule, !rule, rule.2) are accepted and change nothing here. GBNF-style text
// (`root ::= ...`) works too: there `[a-z]` is a character class, `{m,n}` a repetition and
// `root` the start rule. Terminals are sub-languages of the same byte-level grammar: there is no
// lexer, so no maximal munch and no %ignore (refused: write the whitespace into the rules).
// Direct left recursion (expr: expr "+" term | term) is rewritten into a repetition; indirect left
// recursion is an error.
#pragma once

#include <string_view>

#include "grammar/grammar.h"

namespace tessera::grammar {

// Throws Error(kInvalidArgument) "grammar: line L: ..." for a syntax error, an unknown rule or an
// unsupported construct.
Grammar EbnfGrammar(std::string_view text);

}  // namespace tessera::grammar
