// tessera tests: token masks over the real Qwen3 vocabulary (151,669 ids) against brute force:
// at sampled positions of random walks every token's bytes are tried on a fresh matcher, and for
// regexes every token is also checked with PCRE2's partial matching, which knows nothing of our
// automata (there only tokens that end on a whole character: PCRE2 calls any text ending inside a
// character a partial match). Exactly equal bitmasks are required.
#include <gtest/gtest.h>

#include <random>

#include "grammar_test_util.h"

namespace tessera {
namespace {

using grammar::GrammarFormat;
using grammar::GrammarMatcher;
using testing::BitSet;

grammar::GrammarCompiler& Qwen3Compiler() {
  static grammar::GrammarCompiler c(testing::Qwen3Vocabulary());
  return c;
}

// Brute force on a fresh matcher that read the same bytes: each token tried, then undone.
std::vector<uint32_t> BruteForce(const std::shared_ptr<const grammar::CompiledGrammar>& g, const std::string& prefix) {
  GrammarMatcher m(g);
  EXPECT_TRUE(m.AcceptBytes(prefix));
  std::vector<uint32_t> w(grammar::BitmaskWords(m.vocab_size()), 0);
  for (int32_t id = 0; id < m.vocab_size(); ++id) {
    if (m.AcceptToken(id)) {
      w[static_cast<size_t>(id) >> 5] |= 1u << (id & 31);
      m.Rollback(1);
    }
  }
  return w;
}

// True when s is valid UTF-8 (RFC 3629), written here so the test does not trust the code under test.
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

// Random walk; calls check(matcher, mask, text) at the steps in `sample`. With whole_chars the
// walk only takes tokens that leave the text valid UTF-8.
template <typename Check>
void Walk(const std::shared_ptr<const grammar::CompiledGrammar>& g, uint32_t seed, const std::vector<int>& sample,
          Check check, bool whole_chars = false) {
  const auto& vocab = g->vocab();
  std::mt19937 rng(seed);
  GrammarMatcher m(g);
  std::vector<uint32_t> mask(grammar::BitmaskWords(vocab.vocab_size()));
  std::string text;
  for (int step = 0; step <= sample.back(); ++step) {
    m.FillNextTokenBitmask(mask.data());
    if (std::find(sample.begin(), sample.end(), step) != sample.end()) check(m, mask, text);
    std::vector<int32_t> allowed;
    for (int32_t id = 0; id < vocab.vocab_size(); ++id)
      if (BitSet(mask, id) && !vocab.is_stop(id) &&
          (!whole_chars || ValidUtf8(text + std::string(vocab.token_bytes(id)))))
        allowed.push_back(id);
    if (allowed.empty()) return;
    // Half the time a short token: walks then also visit the middle of strings and numbers.
    int32_t pick = allowed[rng() % allowed.size()];
    for (int tries = 0; rng() % 2 && tries < 20 && vocab.token_bytes(pick).size() > 2; ++tries)
      pick = allowed[rng() % allowed.size()];
    ASSERT_TRUE(m.AcceptToken(pick));
    text += vocab.token_bytes(pick);
  }
}

// Under the sanitizers one walk per grammar, not two: each sampled state tries all 151,669 tokens on
// a fresh matcher, and the 80 states took 34 s there (45-70 s in ctest -j2 runs). 40 states of the
// same five grammars at the same depths are still compared token for token; the release build
// compares all 80.
#ifdef TESSERA_SANITIZED
const std::vector<uint32_t> kBruteForceSeeds = {1u};
#else
const std::vector<uint32_t> kBruteForceSeeds = {1u, 2u};
#endif

TEST(GrammarQwen3Masks, EqualBruteForce) {
  QWEN3_OR_SKIP(vocab);
  const std::vector<std::pair<GrammarFormat, std::string>> grammars = {
      {GrammarFormat::kJson, R"({"type":"object","properties":{
         "id":{"type":"string","pattern":"^[A-Z]{2}-[0-9]{3,5}$"},
         "name":{"type":"string","minLength":1,"maxLength":20},
         "score":{"type":"number","minimum":0,"maximum":100},
         "tags":{"type":"array","items":{"enum":["red","green","blue"]},"maxItems":3},
         "owner":{"anyOf":[{"type":"null"},{"type":"object","properties":{"email":{"type":"string","format":"email"},
                  "age":{"type":"integer","minimum":18}},"required":["email"]}]},
         "notes":{"type":"string"}},
         "required":["id","name","score","tags","owner"],"additionalProperties":false})"},
      {GrammarFormat::kJsonObject, ""},
      // A long counted repetition: its far-from-the-end states share token classes (compiled_grammar.cpp).
      {GrammarFormat::kJson, R"({"type":"array","items":{"type":"string","minLength":3,"maxLength":40},"maxItems":2})"},
      {GrammarFormat::kRegex, "(\\+|-)?[0-9]+(\\.[0-9]+)? (apples|pears)"},
      {GrammarFormat::kGrammar,
       "start: call (\";\" \" \"? call)*\ncall: NAME \"(\" (arg (\", \" arg)*)? \")\"\n"
       "arg: NUMBER | ESCAPED_STRING | call\n%import common.CNAME -> NAME\n"
       "%import common.INT -> NUMBER\n%import common.ESCAPED_STRING"},
  };
  int states = 0;
  for (size_t i = 0; i < grammars.size(); ++i) {
    SCOPED_TRACE(grammars[i].second);
    auto g = Qwen3Compiler().Compile(grammars[i].first, grammars[i].second);
    for (uint32_t seed : kBruteForceSeeds) {
      Walk(g, seed + static_cast<uint32_t>(i) * 10, {0, 1, 2, 4, 7, 11, 16, 24},
           [&](GrammarMatcher& m, const std::vector<uint32_t>& mask, const std::string& text) {
             SCOPED_TRACE("after '" + text + "'");
             std::vector<uint32_t> want = BruteForce(g, text);
             size_t n_want = 0, n_got = 0;
             for (int32_t id = 0; id < m.vocab_size(); ++id) n_want += BitSet(want, id), n_got += BitSet(mask, id);
             EXPECT_EQ(n_got, n_want);
             for (int32_t id = 0; id < m.vocab_size(); ++id)
               if (BitSet(want, id) != BitSet(mask, id)) {
                 ADD_FAILURE() << "token " << id << " '" << g->vocab().token_bytes(id) << "': mask " << BitSet(mask, id)
                               << ", brute force " << BitSet(want, id);
                 break;
               }
             ++states;
           });
    }
  }
  EXPECT_GE(states, 20 * static_cast<int>(kBruteForceSeeds.size()));
}

TEST(GrammarQwen3Masks, RegexMasksEqualPcre2PartialMatching) {
  QWEN3_OR_SKIP(vocab);
  // (ours, PCRE2's spelling of the same regex: PCRE2 writes \uHHHH as \x{HHHH})
  const std::vector<std::pair<std::string, std::string>> patterns = {
      {"[a-z ]+ (is|are) [0-9]{1,4}( [a-z]+)*\\.", ""},
      {"\\{\"name\": \"[A-Za-z ]{1,12}\", \"age\": [1-9][0-9]?\\}", ""},
      {"[\\u4e00-\\u9fff]{1,6}[a-z]*", "[\\x{4e00}-\\x{9fff}]{1,6}[a-z]*"},
  };
  int states = 0;
  for (size_t i = 0; i < patterns.size(); ++i) {
    SCOPED_TRACE(patterns[i].first);
    auto g = Qwen3Compiler().Compile(GrammarFormat::kRegex, patterns[i].first);
    testing::Pcre2 ref(patterns[i].second.empty() ? patterns[i].first : patterns[i].second);
    Walk(
        g, 100 + static_cast<uint32_t>(i), {0, 1, 3, 6, 10},
        [&](GrammarMatcher& m, const std::vector<uint32_t>& mask, const std::string& text) {
          SCOPED_TRACE("after '" + text + "'");
          int diffs = 0, compared = 0;
          for (int32_t id = 0; id < m.vocab_size() && diffs < 3; ++id) {
            bool want;
            if (vocab->is_grammar_token(id) && !ValidUtf8(text + std::string(vocab->token_bytes(id)))) continue;
            ++compared;
            if (vocab->is_stop(id)) {
              want = ref.Match(text, testing::Pcre2::kFull);
            } else if (!vocab->is_grammar_token(id)) {
              want = false;
            } else {
              want = ref.Match(text + std::string(vocab->token_bytes(id)), testing::Pcre2::kPrefix);
            }
            if (want != BitSet(mask, id)) {
              ++diffs;
              ADD_FAILURE() << "token " << id << " '" << vocab->token_bytes(id) << "': mask " << BitSet(mask, id)
                            << ", pcre2 " << want;
            }
          }
          EXPECT_GT(compared, 100000);
          ++states;
        },
        /*whole_chars=*/true);
  }
  EXPECT_GE(states, 12);
}

}  // namespace
}  // namespace tessera
