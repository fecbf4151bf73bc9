// tessera tests: the grammar core: UTF-8 expressions accept exactly the valid encodings (checked
// against an RFC 3629 validator written here), the vocabulary trie holds every token once in
// sorted order, and grammars the matcher cannot run are refused with errors that say why.
#include <gtest/gtest.h>

#include <random>

#include "expect_error.h"
#include "grammar/grammar.h"
#include "grammar/pda.h"
#include "grammar/unicode_sets.h"
#include "grammar_test_util.h"

namespace tessera {
namespace {

using grammar::CodepointSet;
using grammar::Grammar;

bool ValidUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    auto c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    uint32_t cp = n == 1 ? c : c & (0x7F >> n);
    for (size_t k = 1; k < n; ++k) {
      auto d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3F);
    }
    static const uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n;
  }
  return true;
}

uint32_t DecodeOne(std::string_view s) {
  auto c = static_cast<unsigned char>(s[0]);
  size_t n = s.size();
  uint32_t cp = n == 1 ? c : c & (0x7F >> n);
  for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[k]) & 0x3F);
  return cp;
}

TEST(GrammarCore, Utf8ExpressionsMatchExactlyTheValidEncodings) {
  // Any one character, and a set of ranges crossing every encoding length and the surrogates.
  auto any = testing::Regex("[^\\n]|\\n");
  auto ranges = testing::Regex("[\\u007f-\\u0081\\u07ff-\\u0800\\ud7ff-\\ue000\\uffff-\\u{10000}\\u{10FFFF}]");
  auto in_ranges = [](uint32_t cp) {
    return (cp >= 0x7F && cp <= 0x81) || (cp >= 0x7FF && cp <= 0x800) || (cp >= 0xD7FF && cp <= 0xE000) ||
           (cp >= 0xFFFF && cp <= 0x10000) || cp == 0x10FFFF;
  };
  auto check = [&](const std::string& s) {
    bool valid_char = ValidUtf8(s) && (s.size() == 1 || (static_cast<unsigned char>(s[0]) >= 0xC0));
    bool one_char = valid_char && [&] {
      auto c = static_cast<unsigned char>(s[0]);
      size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : 4;
      return n == s.size();
    }();
    ASSERT_EQ(testing::Accepts(any, s), one_char) << ::testing::PrintToString(s);
    ASSERT_EQ(testing::Accepts(ranges, s), one_char && in_ranges(DecodeOne(s))) << ::testing::PrintToString(s);
  };
  std::string s;
  for (int a = 0; a < 256; ++a) {
    check(std::string(1, static_cast<char>(a)));
    for (int b = 0; b < 256; ++b) check(std::string{static_cast<char>(a), static_cast<char>(b)});
  }
  std::mt19937 rng(9);
  const std::vector<std::string> edges = {"\xE0\xA0\x80",     "\xE0\x9F\xBF",     "\xED\x9F\xBF",
                                          "\xED\xA0\x80",     "\xEF\xBF\xBF",     "\xF0\x90\x80\x80",
                                          "\xF0\x8F\xBF\xBF", "\xF4\x8F\xBF\xBF", "\xF4\x90\x80\x80",
                                          "\xF5\x80\x80\x80", "\xEE\x80\x80"};
  for (const auto& e : edges) check(e);
  for (int i = 0; i < 200000; ++i) {
    // Lead bytes of 3- and 4-byte forms with random (mostly continuation) bytes after them.
    size_t n = 3 + rng() % 2;
    std::string t(1, static_cast<char>((n == 3 ? 0xE0 : 0xF0) + rng() % (n == 3 ? 16 : 8)));
    for (size_t k = 1; k < n; ++k) t += static_cast<char>(rng() % 4 == 0 ? rng() % 256 : 0x80 + rng() % 64);
    check(t);
  }
}

TEST(GrammarCore, VocabularyTrieHoldsEveryTokenOnceInOrder) {
  std::vector<std::string> tokens = {"b", "ab", "a", "abc", "", "\xFF", "abd", "b", "z", "</s>"};
  auto v = grammar::TokenVocabulary::FromTokenBytes(tokens, {9}, {8});
  // Grammar tokens: not empty, not excluded (8), not stop (9).
  std::vector<std::pair<std::string, int32_t>> want;
  for (int32_t i = 0; i < static_cast<int32_t>(tokens.size()); ++i)
    if (!tokens[static_cast<size_t>(i)].empty() && i != 8 && i != 9)
      want.emplace_back(tokens[static_cast<size_t>(i)], i);
  std::sort(want.begin(), want.end());
  ASSERT_EQ(v->num_positions(), static_cast<int32_t>(want.size()));
  // Rebuild each position's string from the trie: the path of bytes from the root.
  std::vector<std::string> at(static_cast<size_t>(v->num_positions()));
  std::string path;
  std::vector<int32_t> ends;
  const auto& trie = v->trie();
  for (int32_t n = 1; n < static_cast<int32_t>(trie.size()); ++n) {
    while (!ends.empty() && n >= ends.back()) ends.pop_back(), path.pop_back();
    path += static_cast<char>(trie[static_cast<size_t>(n)].byte);
    ends.push_back(trie[static_cast<size_t>(n)].subtree_end);
    ASSERT_EQ(trie[static_cast<size_t>(n)].depth, path.size());
    for (int32_t k = 0; k < trie[static_cast<size_t>(n)].pos_here; ++k)
      at[static_cast<size_t>(trie[static_cast<size_t>(n)].pos_begin + k)] = path;
    // The subtree's positions are contiguous.
    EXPECT_LE(trie[static_cast<size_t>(n)].pos_begin, v->pos_end(n));
  }
  for (size_t p = 0; p < want.size(); ++p) {
    EXPECT_EQ(at[p], want[p].first);
    EXPECT_EQ(v->pos_to_id(static_cast<int32_t>(p)), want[p].second);
  }
  EXPECT_FALSE(v->is_grammar_token(8));
  EXPECT_FALSE(v->is_grammar_token(9));
  EXPECT_TRUE(v->is_stop(9));
  EXPECT_EQ(v->max_token_bytes(), 3);  // "abc", "abd" ("</s>" is the stop token)
}

TEST(GrammarCore, RefusedGrammars) {
  using testing::ExpectError;
  {
    Grammar g;  // left recursion through a nullable prefix
    int32_t a = g.AddRule("a"), n = g.AddRule("n");
    g.SetBody(n, g.Optional(g.Literal("x")));
    g.SetBody(a, g.Alt({g.Seq({g.Call(n), g.Call(a), g.Literal("y")}), g.Literal("z")}));
    g.set_root(a);
    ExpectError([&] { grammar::Pda::Build(g, {}); }, ErrorKind::kInvalidArgument, {"left-recursive", "'a'"});
  }
  {
    Grammar g;  // a rule used but never defined
    int32_t a = g.AddRule("a"), b = g.AddRule("b");
    g.SetBody(a, g.Call(b));
    g.set_root(a);
    ExpectError([&] { grammar::Pda::Build(g, {}); }, ErrorKind::kInvalidArgument, {"'b'", "not defined"});
  }
  {
    Grammar g;  // no finite string
    int32_t a = g.AddRule("a");
    g.SetBody(a, g.Seq({g.Literal("x"), g.Call(a)}));
    g.set_root(a);
    ExpectError([&] { grammar::Pda::Build(g, {}); }, ErrorKind::kInvalidArgument, {"accepts no string"});
  }
  {
    Grammar g;  // an unproductive alternative is dropped, the rest works
    int32_t a = g.AddRule("a"), dead = g.AddRule("dead");
    g.SetBody(dead, g.Seq({g.Literal("d"), g.Call(dead)}));
    g.SetBody(a, g.Alt({g.Literal("ok"), g.Call(dead)}));
    g.set_root(a);
    auto pda = grammar::Pda::Build(g, {});
    EXPECT_EQ(pda->Next(pda->root_start(), 'd'), -1);
    EXPECT_GE(pda->Next(pda->root_start(), 'o'), 0);
  }
}

}  // namespace
}  // namespace tessera
