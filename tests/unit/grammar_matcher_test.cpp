// tessera tests: GrammarMatcher over a small multi-byte vocabulary (so tokens cross rule ends, which
// is where precomputed token classes are uncertain): masks equal brute force at every step of
// random walks, rollback, stop tokens, excluded tokens, masks after a hypothetical prefix (block
// diffusion), the depth and ambiguity limits, and sharing compiled grammars between threads.
#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "expect_error.h"
#include "grammar_test_util.h"

namespace tessera {
namespace {

using grammar::GrammarFormat;
using grammar::GrammarMatcher;
using testing::BitSet;

// Multi-byte tokens that cross rule ends (`",` `"}` `1}` ...), then every printable ASCII byte
// not yet there (so no grammar position is a dead end for lack of a token), a special and a stop.
const std::vector<std::string>& SmallTokens() {
  static const std::vector<std::string> t = [] {
    std::vector<std::string> v = {
        "{",  "}",  "[",   "]",     "\"",       "\",",  "\"}",    "\"]",  "\":",   "\": \"", ",",
        ":",  " ",  "  ",  "\n",    "\n  ",     "a",    "ab",     "abc",  "b",     "x",      "1",
        "12", "0",  "-",   ".",     "5e",       "e",    "+",      "true", "null",  "false",  "}}",
        "]}", "}]", "},",  "\"a\"", "\"a\":",   "{\"",  "\"name", "name", "\":\"", "\"}}",   "1}",
        "2,", "\\", "\\n", "\\\"",  "\xC3\xA9", "\xC3", "\xA9",   "yes",  "no",    "y"};
    for (int c = 0x20; c < 0x7F; ++c)
      if (std::find(v.begin(), v.end(), std::string(1, static_cast<char>(c))) == v.end())
        v.emplace_back(1, static_cast<char>(c));
    v.emplace_back("<|special|>");
    v.emplace_back("</s>");
    return v;
  }();
  return t;
}
int32_t SmallStop() { return static_cast<int32_t>(SmallTokens().size()) - 1; }
int32_t SmallSpecial() { return static_cast<int32_t>(SmallTokens().size()) - 2; }

grammar::GrammarCompiler& SmallCompiler() {
  static grammar::GrammarCompiler c(
      grammar::TokenVocabulary::FromTokenBytes(SmallTokens(), {SmallStop()}, {SmallSpecial()}));
  return c;
}

// The allowed set by brute force: each token tried with AcceptToken on the same position.
std::vector<uint32_t> BruteForce(GrammarMatcher* m) {
  std::vector<uint32_t> w(grammar::BitmaskWords(m->vocab_size()), 0);
  for (int32_t id = 0; id < m->vocab_size(); ++id) {
    if (m->AcceptToken(id)) {
      w[static_cast<size_t>(id) >> 5] |= 1u << (id & 31);
      m->Rollback(1);
    }
  }
  return w;
}

const std::vector<std::pair<GrammarFormat, std::string>>& Grammars() {
  static const std::vector<std::pair<GrammarFormat, std::string>> g = {
      {GrammarFormat::kJson, R"({"type":"object","properties":{"name":{"type":"string"},"a":{"type":"array",
         "items":{"type":"integer"}},"b":{"anyOf":[{"type":"boolean"},{"type":"null"},{"type":"number"}]}},
         "required":["name"]})"},
      {GrammarFormat::kJsonObject, ""},
      {GrammarFormat::kJson, R"({"$defs":{"t":{"type":"array","items":{"anyOf":[{"$ref":"#/$defs/t"},{"const":"a"}]}}},
         "$ref":"#/$defs/t"})"},
      {GrammarFormat::kRegex, "(ab|a)*(b|x)?[0-9]{1,3}"},
      {GrammarFormat::kChoice, R"(["yes","no","y","abc"])"},
      {GrammarFormat::kGrammar,
       "start: \"{\" (item (\",\" item)*)? \"}\"\nitem: \"\\\"\" /[a-c]*/ \"\\\"\" | NUMBER | start\n%import "
       "common.INT -> NUMBER"},
  };
  return g;
}

TEST(GrammarMatcher, MaskEqualsBruteForceAlongRandomWalks) {
  std::mt19937 rng(5);
  int checked = 0, with_uncertain = 0;
  for (const auto& [format, text] : Grammars()) {
    SCOPED_TRACE(text);
    auto g = SmallCompiler().Compile(format, text);
    for (int walk = 0; walk < 12; ++walk) {
      GrammarMatcher m(g);
      std::vector<uint32_t> mask(grammar::BitmaskWords(m.vocab_size()));
      for (int step = 0; step < 40 && !m.IsTerminated(); ++step) {
        m.FillNextTokenBitmask(mask.data());
        ASSERT_EQ(mask, BruteForce(&m)) << "walk " << walk << " step " << step;
        ++checked;
        for (const auto& c : SmallTokens())
          with_uncertain += c.size() > 1 && c[0] == '"' && BitSet(mask, static_cast<int32_t>(&c - &SmallTokens()[0]));
        EXPECT_FALSE(BitSet(mask, SmallSpecial()));
        EXPECT_EQ(BitSet(mask, SmallStop()), m.CanTerminate());
        std::vector<int32_t> allowed;
        for (int32_t id = 0; id < m.vocab_size(); ++id)
          if (BitSet(mask, id)) allowed.push_back(id);
        ASSERT_FALSE(allowed.empty());
        // Prefer ending once possible in later steps, so walks also reach complete structures.
        int32_t pick = allowed[rng() % allowed.size()];
        if (step > 25 && m.CanTerminate()) pick = SmallStop();
        ASSERT_TRUE(m.AcceptToken(pick));
      }
    }
  }
  EXPECT_GT(checked, 300);
  EXPECT_GT(with_uncertain, 0);
}

TEST(GrammarMatcher, RollbackRestoresEveryPosition) {
  auto g = SmallCompiler().Compile(Grammars()[0].first, Grammars()[0].second);
  GrammarMatcher m(g);
  std::vector<std::vector<uint32_t>> masks;
  std::vector<uint32_t> mask(grammar::BitmaskWords(m.vocab_size()));
  const std::vector<std::string> path = {"{\"", "name", "\": \"", "ab", "\",", "\"a\":", "[", "12", ",", "0", "]}"};
  for (const auto& t : path) {
    m.FillNextTokenBitmask(mask.data());
    masks.push_back(mask);
    auto id = static_cast<int32_t>(std::find(SmallTokens().begin(), SmallTokens().end(), t) - SmallTokens().begin());
    ASSERT_TRUE(m.AcceptToken(id)) << t;
  }
  EXPECT_TRUE(m.CanTerminate());
  for (size_t i = path.size(); i-- > 0;) {
    m.Rollback(1);
    m.FillNextTokenBitmask(mask.data());
    EXPECT_EQ(mask, masks[i]) << i;
  }
  EXPECT_EQ(m.num_steps_kept(), 0);
  testing::ExpectError([&] { m.Rollback(1); }, ErrorKind::kInvalidArgument, {"roll back"});
}

TEST(GrammarMatcher, StopAndExcludedTokens) {
  auto g = SmallCompiler().Compile(GrammarFormat::kChoice, R"(["yes","y"])");
  GrammarMatcher m(g);
  EXPECT_FALSE(m.AcceptToken(SmallStop()));     // nothing complete yet
  EXPECT_FALSE(m.AcceptToken(SmallSpecial()));  // never inside a structure
  EXPECT_FALSE(m.AcceptToken(-1));
  EXPECT_FALSE(m.AcceptToken(static_cast<int32_t>(m.vocab_size())));
  ASSERT_TRUE(m.AcceptBytes("y"));
  EXPECT_TRUE(m.CanTerminate());  // "y" is a choice, and a prefix of "yes"
  EXPECT_FALSE(m.IsTerminated());
  ASSERT_TRUE(m.AcceptToken(SmallStop()));
  EXPECT_TRUE(m.IsTerminated());
  EXPECT_FALSE(m.CanTerminate());
  std::vector<uint32_t> mask(grammar::BitmaskWords(m.vocab_size()), ~0u);
  EXPECT_FALSE(m.FillNextTokenBitmask(mask.data()));
  EXPECT_EQ(std::count(mask.begin(), mask.end(), 0u), static_cast<long>(mask.size()));
  EXPECT_FALSE(m.AcceptBytes("es"));
  m.Rollback(1);
  EXPECT_TRUE(m.IsValidContinuation("es"));
  EXPECT_TRUE(m.IsValidContinuation(""));
  EXPECT_FALSE(m.IsValidContinuation("ex"));
  EXPECT_FALSE(m.IsValidContinuation("ess"));
  EXPECT_EQ(m.num_steps_kept(), 1);  // the checks changed nothing
  EXPECT_TRUE(m.AcceptBytes("es"));
}

TEST(GrammarMatcher, MasksAfterAHypotheticalPrefix) {
  auto g = SmallCompiler().Compile(Grammars()[0].first, Grammars()[0].second);
  GrammarMatcher m(g);
  auto id = [](const char* t) {
    return static_cast<int32_t>(std::find(SmallTokens().begin(), SmallTokens().end(), t) - SmallTokens().begin());
  };
  const std::vector<int32_t> prefix = {id("{\""), id("name"), id("\":\""), id("a")};
  std::vector<uint32_t> after(grammar::BitmaskWords(m.vocab_size())), direct(after.size()), before(after.size());
  m.FillNextTokenBitmask(before.data());
  ASSERT_TRUE(m.FillBitmaskAfter(prefix.data(), prefix.size(), after.data()));
  EXPECT_EQ(m.num_steps_kept(), 0);  // nothing kept
  std::vector<uint32_t> again(after.size());
  m.FillNextTokenBitmask(again.data());
  EXPECT_EQ(again, before);
  for (int32_t t : prefix) ASSERT_TRUE(m.AcceptToken(t));
  m.FillNextTokenBitmask(direct.data());
  EXPECT_EQ(after, direct);
  m.Reset();
  for (int32_t t = 0; t < m.vocab_size(); ++t)
    EXPECT_EQ(m.IsValidAfter(prefix.data(), prefix.size(), t), BitSet(direct, t))
        << SmallTokens()[static_cast<size_t>(t)];
  const std::vector<int32_t> bad = {id("{\""), id("}")};
  std::vector<uint32_t> untouched(after.size(), 7u);
  EXPECT_FALSE(m.FillBitmaskAfter(bad.data(), bad.size(), untouched.data()));
  EXPECT_EQ(untouched, std::vector<uint32_t>(after.size(), 7u));
  EXPECT_FALSE(m.IsValidAfter(bad.data(), bad.size(), id("a")));
  EXPECT_EQ(m.num_steps_kept(), 0);
}

TEST(GrammarMatcher, NestingDeeperThanTheLimitIsNeverOffered) {
  auto g = SmallCompiler().Compile(GrammarFormat::kJsonObject, "");
  grammar::MatcherOptions opts;
  opts.max_stack_depth = 12;
  GrammarMatcher m(g, opts);
  std::vector<uint32_t> mask(grammar::BitmaskWords(m.vocab_size()));
  int32_t open =
      static_cast<int32_t>(std::find(SmallTokens().begin(), SmallTokens().end(), "[") - SmallTokens().begin());
  ASSERT_TRUE(m.AcceptBytes("{\"a\":"));
  int depth = 0;
  while (true) {
    m.FillNextTokenBitmask(mask.data());
    ASSERT_EQ(mask, BruteForce(&m)) << "depth " << depth;
    if (!BitSet(mask, open)) break;
    ASSERT_TRUE(m.AcceptToken(open));
    ASSERT_LT(++depth, 100);
  }
  EXPECT_GT(depth, 2);
  EXPECT_FALSE(m.AcceptToken(open));
  // The structure can still be closed from there.
  EXPECT_TRUE(m.AcceptBytes(std::string(static_cast<size_t>(depth), ']') + "}"));
  EXPECT_TRUE(m.CanTerminate());
}

TEST(GrammarMatcher, LimitsAreClearErrors) {
  grammar::GrammarCompilerOptions opts;
  opts.max_parses = 64;
  grammar::GrammarCompiler c(testing::ByteVocabulary(), opts);
  // Ambiguous: after a^n, each of the 2^n ways to owe b's is a parse of its own.
  auto g = c.Compile(GrammarFormat::kGrammar, "start: s\ns: \"a\" s | \"a\" s \"b\" | \"\"");
  GrammarMatcher m(g);
  EXPECT_TRUE(m.AcceptBytes("aaa"));
  testing::ExpectError([&] { m.AcceptBytes(std::string(100, 'a')); }, ErrorKind::kInvalidArgument, {"ambiguous"});
  testing::ExpectError([&] { c.Compile(GrammarFormat::kRegex, "(a{1000}){1000}"); }, ErrorKind::kInvalidArgument,
                       {"too large"});
  testing::ExpectError([&] { c.Compile(GrammarFormat::kRegex, "(a|b)*a(a|b){20}"); }, ErrorKind::kInvalidArgument,
                       {"too large"});
}

TEST(GrammarMatcher, RollbackWindow) {
  auto g = SmallCompiler().Compile(GrammarFormat::kJsonObject, "");
  grammar::MatcherOptions opts;
  opts.max_rollback_tokens = 3;
  GrammarMatcher m(g, opts);
  for (const char* s : {"{", "\"", "a", "b", "\"", ":", "1"}) ASSERT_TRUE(m.AcceptBytes(s));
  EXPECT_EQ(m.num_steps_kept(), 3);
  m.Rollback(3);
  EXPECT_TRUE(m.AcceptBytes("\":1}"));
  EXPECT_TRUE(m.CanTerminate());
}

TEST(GrammarMatcher, CompiledGrammarsAreSharedAcrossThreads) {
  grammar::GrammarCompiler c(grammar::TokenVocabulary::FromTokenBytes(SmallTokens(), {SmallStop()}, {}));
  const std::string schema = Grammars()[0].second;
  std::vector<std::shared_ptr<const grammar::CompiledGrammar>> got(4);
  std::vector<std::vector<uint32_t>> masks(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      got[static_cast<size_t>(t)] = c.Compile(GrammarFormat::kJson, schema);
      GrammarMatcher m(got[static_cast<size_t>(t)]);
      std::vector<uint32_t> all;
      std::vector<uint32_t> mask(grammar::BitmaskWords(m.vocab_size()));
      for (const char* s : {"{", "\"name\"", ":", "\"x", "\"", ",", "\"b\":", "tru"}) {
        EXPECT_TRUE(m.AcceptBytes(s));
        m.FillNextTokenBitmask(mask.data());
        all.insert(all.end(), mask.begin(), mask.end());
      }
      masks[static_cast<size_t>(t)] = all;
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 1; t < 4; ++t) {
    EXPECT_EQ(got[static_cast<size_t>(t)], got[0]);
    EXPECT_EQ(masks[static_cast<size_t>(t)], masks[0]);
  }
  EXPECT_EQ(c.num_cached(), 1u);
  EXPECT_NE(c.Compile(GrammarFormat::kJson, R"({"type":"string"})"), got[0]);
  EXPECT_EQ(c.Compile(GrammarFormat::kJson, schema), got[0]);
}

}  // namespace
}  // namespace tessera
