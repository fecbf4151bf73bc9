// tessera tests: the regex front-end (vLLM `regex`): strings each construct must accept and reject,
// written from the ECMAScript / Python regex definitions, unsupported constructs as errors, and a
// differential check against PCRE2 on random strings.
#include <gtest/gtest.h>

#include <random>

#include "expect_error.h"
#include "grammar_test_util.h"

namespace tessera {
namespace {

using testing::Accepts;
using testing::Regex;

struct Case {
  const char* pattern;
  std::vector<std::string> accept, reject;
};

void RunCases(const std::vector<Case>& cases) {
  for (const Case& c : cases) {
    SCOPED_TRACE(c.pattern);
    auto g = Regex(c.pattern);
    for (const auto& s : c.accept) EXPECT_ACCEPTS(g, s);
    for (const auto& s : c.reject) EXPECT_REJECTS(g, s);
  }
}

TEST(GrammarRegex, LiteralsAndEscapes) {
  RunCases({
      {"abc", {"abc"}, {"", "ab", "abcd", "abd", "ABC"}},
      {"a\\.b", {"a.b"}, {"axb", "ab"}},
      {"\\\\", {"\\"}, {"\\\\", ""}},
      {"\\t\\n\\r\\f\\v", {"\t\n\r\f\v"}, {"tnrfv"}},
      {"\\x41\\x7e", {"A~"}, {"\\x41"}},
      {"\\u00e9", {"\xC3\xA9"}, {"e"}},
      {"\\u{1F600}", {"\xF0\x9F\x98\x80"}, {"\\u{1F600}"}},
      {"\\(\\)\\[\\]\\{\\}\\*\\+\\?\\|\\^\\$\\/", {"()[]{}*+?|^$/"}, {}},
      {"caf\xC3\xA9", {"caf\xC3\xA9"}, {"cafe", "caf\xC3"}},
      {"a{", {"a{"}, {"a"}},
      {"x}", {"x}"}, {}},
  });
}

TEST(GrammarRegex, CharacterClasses) {
  RunCases({
      {"[abc]", {"a", "b", "c"}, {"d", "", "ab"}},
      {"[a-z]+", {"a", "hello"}, {"", "Hello", "a1"}},
      {"[^a-z]", {"A", "1", "\n", "\xC3\xA9", "\xF0\x9F\x98\x80"}, {"a", "q", ""}},
      {"[-a]", {"-", "a"}, {"b"}},
      {"[a-]", {"-", "a"}, {"b"}},
      {"[\\d_]", {"0", "9", "_"}, {"a"}},
      {"[\\]\\\\]", {"]", "\\"}, {"["}},
      {"[\xC3\xA9-\xC3\xAB]", {"\xC3\xAA"}, {"\xC3\xAC", "e"}},
      {"[\\b]", {"\b"}, {"b"}},
      // Outside the one- and two-byte ranges: every UTF-8 length.
      {"[\\u0400-\\uFFFF]", {"\xD0\x80", "\xE4\xB8\xAD", "\xEF\xBF\xBF"}, {"\xF0\x9F\x98\x80", "A"}},
      {"[^\\n]", {"\xF0\x9F\x98\x80", "a"}, {"\n"}},
  });
}

TEST(GrammarRegex, ClassEscapesKeepToWhatBothDialectsAgreeOn) {
  RunCases({
      // \d: ASCII digits; U+0663 ARABIC-INDIC DIGIT THREE is a digit to Python, not to ECMAScript.
      {"\\d", {"0", "5", "9"}, {"a", "\xD9\xA3", ""}},
      {"\\D", {"a", " ", "\xC3\xA9"}, {"5", "\xD9\xA3"}},
      // \w: ASCII word characters; é is a word character to Python, not to ECMAScript.
      {"\\w", {"a", "Z", "0", "_"}, {"-", " ", "\xC3\xA9"}},
      {"\\W", {"-", " ", "!"}, {"a", "_", "\xC3\xA9"}},
      {"\\s", {" ", "\t", "\n", "\r", "\f", "\v"}, {"a", "_"}},
      // U+00A0 NO-BREAK SPACE is whitespace in both dialects, so \S never produces it.
      {"\\S", {"a", "\xC3\xA9"}, {" ", "\t", "\xC2\xA0"}},
      {"[^\\d]", {"a"}, {"7", "\xD9\xA3"}},
      {"[^\\W]", {"a", "_"}, {"-"}},
      // `.`: any character but line terminators.
      {".", {"a", "\xC3\xA9", "\xF0\x9F\x98\x80", "\t"}, {"\n", "\r", "\xE2\x80\xA8", ""}},
  });
}

TEST(GrammarRegex, QuantifiersGroupsAlternation) {
  RunCases({
      {"a*", {"", "a", "aaaa"}, {"b", "aab"}},
      {"a+", {"a", "aaa"}, {""}},
      {"a?", {"", "a"}, {"aa"}},
      {"a{3}", {"aaa"}, {"aa", "aaaa"}},
      {"a{2,}", {"aa", "aaaaaa"}, {"a"}},
      {"a{2,4}", {"aa", "aaa", "aaaa"}, {"a", "aaaaa"}},
      {"a{0,0}b", {"b"}, {"ab"}},
      {"(ab){2}", {"abab"}, {"ab", "ababab"}},
      {"a+?b*?", {"a", "aab", "abbb"}, {"b"}},
      {"cat|dog", {"cat", "dog"}, {"cog", "catdog"}},
      {"(a|b)c", {"ac", "bc"}, {"c", "abc"}},
      {"a|", {"a", ""}, {"aa"}},
      {"(?:ab)+", {"ab", "abab"}, {"a", "aba"}},
      {"(?<x>a)b", {"ab"}, {"a"}},
      {"(?P<y>a)b", {"ab"}, {"b"}},
      {"((a|b)(c|d))*", {"", "ac", "bdac"}, {"ab", "a"}},
      {"\\d{3}-\\d{4}", {"555-1234"}, {"5551234", "55-1234"}},
      {"[A-Z][a-z]*( [A-Z][a-z]*)*", {"Hello World", "A"}, {"hello", "Hello  World"}},
  });
}

TEST(GrammarRegex, AnchorsAtTheEnds) {
  RunCases({
      {"^abc$", {"abc"}, {"abcd", "xabc"}},
      {"^a|b$", {"a", "b"}, {"ab"}},
      {"^(yes|no)$", {"yes", "no"}, {"yesno"}},
  });
}

TEST(GrammarRegex, UnsupportedConstructsAreErrors) {
  using testing::ExpectError;
  const std::vector<std::pair<const char*, const char*>> bad = {
      {"(a)\\1", "backreference"}, {"(?P<n>a)(?P=n)", "backreference"},
      {"\\k<n>", "backreference"}, {"(?=a)a", "lookaround"},
      {"(?!a)b", "lookaround"},    {"(?<=a)b", "lookaround"},
      {"(?<!a)b", "lookaround"},   {"\\bfoo", "word boundar"},
      {"\\p{L}", "property"},      {"(?i)abc", "flags"},
      {"a{2,1}", "m < n"},         {"(abc", "missing ')'"},
      {"abc)", "unmatched ')'"},   {"[abc", "missing ']'"},
      {"*a", "nothing to repeat"}, {"a**", "multiple repeat"},
      {"a++", "possessive"},       {"(?>a)", "atomic"},
      {"[[:alpha:]]", "POSIX"},    {"a^b", "anchors"},
      {"\\q", "unknown escape"},   {"\xC3", "UTF-8"},
      {"[z-a]", "out of order"},   {"\\Aabc", "anchor"},
  };
  for (const auto& [pattern, part] : bad) {
    SCOPED_TRACE(pattern);
    ExpectError([&, p = pattern] { Regex(p); }, ErrorKind::kInvalidArgument, {"regex", part});  // clang 14: no captured bindings
  }
}

// Random strings over an alphabet where the dialects agree, checked against PCRE2's full match.
TEST(GrammarRegex, AgreesWithPcre2OnRandomStrings) {
  const std::vector<const char*> patterns = {
      "[a-c]+x?",
      "(ab|a)(bc|c)*",
      "\\d{1,3}(\\.\\d{1,3}){0,2}",
      "[^x]*x[^x]*",
      "(a|b)*abb",
      "\\w+@\\w+\\.com",
      "\xC3\xA9*[\xE4\xB8\xAD-\xE4\xB8\xB0]?",
      "(\\s*\\d\\s*,)*\\s*\\d",
      ".{2,5}",
      "x|y|(xy)+|z{2}",
      "[A-Fa-f0-9]{4}",
      "(?:a|b|c){3,}",
  };
  const std::vector<std::string> alphabet = {"a",
                                             "b",
                                             "c",
                                             "x",
                                             "y",
                                             "z",
                                             "A",
                                             "F",
                                             "0",
                                             "1",
                                             "5",
                                             "9",
                                             "_",
                                             ".",
                                             ",",
                                             "@",
                                             "-",
                                             " ",
                                             "\t",
                                             "\n",
                                             "\xC3\xA9",
                                             "\xE4\xB8\xAD",
                                             "\xF0\x9F\x98\x80",
                                             "com",
                                             "ab",
                                             "abb"};
  std::mt19937 rng(7);
  int agreed_true = 0;
  for (const char* p : patterns) {
    SCOPED_TRACE(p);
    auto g = Regex(p);
    testing::Pcre2 ref(p);
    for (int i = 0; i < 400; ++i) {
      std::string s;
      int len = static_cast<int>(rng() % 8);
      for (int k = 0; k < len; ++k) s += alphabet[rng() % alphabet.size()];
      bool want = ref.Match(s, testing::Pcre2::kFull);
      ASSERT_EQ(Accepts(g, s), want) << "string: '" << s << "'";
      // Every prefix of an accepted string is a viable prefix.
      if (want) {
        ++agreed_true;
        for (size_t k = 0; k <= s.size(); ++k) ASSERT_TRUE(testing::AcceptsPrefix(g, s.substr(0, k)));
      }
    }
  }
  EXPECT_GT(agreed_true, 200);  // the check saw many matches, not only rejections
}

}  // namespace
}  // namespace tessera
