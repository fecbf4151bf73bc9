// tessera tests: grammar text (Lark-like and GBNF) and choice lists: the strings each construct must
// accept and reject, the left-recursion rewrite, and syntax errors that name the line.
#include <gtest/gtest.h>

#include "expect_error.h"
#include "grammar_test_util.h"

namespace tessera {
namespace {

using testing::Ebnf;

TEST(GrammarEbnf, LarkConstructs) {
  auto g = Ebnf(R"g(
    // a greeting
    start: greeting " " name ("," " "? name)* "!"?
    greeting: "hello" | "hi"i
    name: /[A-Z][a-z]+/
  )g");
  for (const char* s : {"hello Ann", "HI Bob!", "Hi Ann,Bob, Cy!", "hello Zed,Al"}) EXPECT_ACCEPTS(g, s);
  for (const char* s : {"hello ann", "hey Ann", "hello Ann,", "hello  Ann", "hello Ann!!", "hello"})
    EXPECT_REJECTS(g, s);
}

TEST(GrammarEbnf, OptionalRepetitionAndModifiers) {
  auto g = Ebnf(R"g(
    ?start: list
    !list: "[" [item ("," item)*] "]"
    item.2: DIGIT ~ 1..3 | "x" ~ 2
    %import common.DIGIT
  )g");
  for (const char* s : {"[]", "[1]", "[12,345,xx]", "[xx]"}) EXPECT_ACCEPTS(g, s);
  for (const char* s : {"[1234]", "[x]", "[xxx]", "[,]", "[1,]"}) EXPECT_REJECTS(g, s);
}

TEST(GrammarEbnf, LeftRecursionBecomesRepetition) {
  auto g = Ebnf(R"g(
    start: expr
    expr: expr "+" term | expr "-" term | term
    term: term "*" factor | factor
    factor: NUMBER | "(" expr ")"
    %import common.INT -> NUMBER
  )g");
  (void)g;
  auto h = Ebnf(R"g(
    start: expr
    expr: expr "+" term | expr "-" term | term
    term: term "*" factor | factor
    factor: INT | "(" expr ")"
    %import common.INT
  )g");
  for (const char* s : {"1", "1+2", "1+2*3-4", "(1+2)*3", "((7))"}) EXPECT_ACCEPTS(h, s);
  for (const char* s : {"", "+1", "1+", "(1", "1**2", "()"}) EXPECT_REJECTS(h, s);
}

TEST(GrammarEbnf, GbnfSyntax) {
  auto g = Ebnf(R"g(
    root ::= "{" ws pair (ws "," ws pair)* ws "}"
    pair ::= key ws ":" ws [0-9]{1,3}
    key  ::= "\"" [a-z-]+ "\""
    ws   ::= [ \t\n]*   # optional whitespace
  )g");
  for (const char* s : {R"({"a":1})", R"({ "a-b" : 12 , "c":999 })"}) EXPECT_ACCEPTS(g, s);
  for (const char* s : {R"({"a":1000})", R"({"A":1})", R"({})", R"({"a":1,})"}) EXPECT_REJECTS(g, s);
}

TEST(GrammarEbnf, StringEscapesAndRegexTerminals) {
  auto g = Ebnf(R"g(
    start: "a\tb" | '\u00e9' | /x\/y/ | "q\"" | /[0-9]+(\.[0-9]+)?/
  )g");
  for (const char* s : {"a\tb", "\xC3\xA9", "x/y", "q\"", "3.14", "42"}) EXPECT_ACCEPTS(g, s);
  for (const char* s : {"a\\tb", "x\\/y", "3.", "q"}) EXPECT_REJECTS(g, s);
}

TEST(GrammarEbnf, Errors) {
  using testing::ExpectError;
  const std::vector<std::pair<const char*, std::vector<std::string>>> bad = {
      {"start: a", {"rule 'a' is not defined", "line 1"}},
      {"foo: \"x\"", {"no 'start' rule"}},
      {"start: \"x\"\n%ignore \" \"", {"%ignore", "line 2"}},
      {"start: /abc/i", {"regex flag", "line 1"}},
      {"start: a\na: b | \"y\"\nb: a \"x\"", {"left-recursive", "'a'", "'b'"}},
      {"start: a\na: b\nb: a \"x\"", {"accepts no string"}},
      {"start: \"x\"\nstart: \"y\"", {"defined twice", "line 2"}},
      {"start: (\"x\"", {"missing ')'"}},
      {"start: \"abc", {"unterminated string"}},
      {"start: start \"x\"", {"only refers to itself"}},
      {"start: \"x\" \n %import other.THING", {"only common.*"}},
      {"start: /a(?=b)/", {"lookaround", "line 1"}},
      {"start: \"x\" @", {"unexpected character"}},
      // Blank repetition counts once reached std::stoi(" ") and left as std::invalid_argument, a
      // 500 (fuzz/corpus/grammar/crash-blank-repeat-count).
      {"root ::= \"x\"{ ,2}", {"bad repetition", "line 1"}},
      {"root ::= [0-9]{1, }{ }", {"bad repetition"}},
      {"root ::= \"x\"{1 2}", {"bad repetition"}},
  };
  for (const auto& [text, parts] : bad) {
    SCOPED_TRACE(text);
    try {
      Ebnf(text);
      ADD_FAILURE() << "expected an error";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
      for (const auto& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
    }
  }
}

TEST(GrammarChoice, ExactlyOneOfTheStrings) {
  auto g = testing::ByteCompiler().CompileChoice({"yes", "no", "maybe so", "n\xC3\xA9"});
  for (const char* s : {"yes", "no", "maybe so", "n\xC3\xA9"}) EXPECT_ACCEPTS(g, s);
  for (const char* s : {"", "ye", "yesno", "Yes", "maybe"}) EXPECT_REJECTS(g, s);
  testing::ExpectError([] { testing::Compile(grammar::GrammarFormat::kChoice, "[]"); }, ErrorKind::kInvalidArgument,
                       {"choice"});
  testing::ExpectError([] { testing::Compile(grammar::GrammarFormat::kChoice, "[1]"); }, ErrorKind::kInvalidArgument,
                       {"choice", "string"});
}

TEST(GrammarFormats, VllmFieldNames) {
  using grammar::GrammarFormat;
  for (auto [name, f] :
       std::vector<std::pair<const char*, GrammarFormat>>{{"json", GrammarFormat::kJson},
                                                          {"regex", GrammarFormat::kRegex},
                                                          {"choice", GrammarFormat::kChoice},
                                                          {"grammar", GrammarFormat::kGrammar},
                                                          {"json_object", GrammarFormat::kJsonObject}}) {
    EXPECT_EQ(grammar::GrammarFormatFromName(name), f);
    EXPECT_EQ(grammar::GrammarFormatName(f), name);
  }
  EXPECT_FALSE(grammar::GrammarFormatFromName("guided_json").has_value());
}

}  // namespace
}  // namespace tessera
