// tessera fuzz: the structured-output grammar compiler (src/grammar): JSON Schema, regex, choice
// and Lark/GBNF-style grammars, as a client's response_format / structured_outputs carry them,
// then a few matcher steps over a small multi-byte vocabulary. The first byte picks the format
// and seeds the walk; the rest is the constraint's text.
//
// Compile may refuse only with tessera::Error (the server's PrepareGeneration turns any Error of
// CompileGrammar into a 400 naming the parameter). On a compiled grammar, the mask must agree with
// AcceptToken: a token the mask allows is accepted, one it forbids is refused (the engine samples
// from the mask and then advances the matcher with the token). The matcher may throw
// Error(kInvalidArgument) when a grammar is too ambiguous to follow; the engine fails the request.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "grammar/grammar_compiler.h"
#include "grammar/matcher.h"

namespace {

using tessera::grammar::GrammarFormat;

// Tokens of one to a few bytes, several spanning JSON punctuation (where token classes are
// hardest), every printable ASCII byte, a UTF-8 character whole and split, and the stop token.
std::vector<std::string> Tokens() {
  std::vector<std::string> t = {"{\"", "\":", "\": ", "\",", "\"}", "}}", "]}", "],", "[{", "true", "false", "null",
                                "12", "-0.5", "e+", "\\u00", "\\n", "\\\"", "\n  ", "  ", "ab", "abc", "\xC3\xA9",
                                "\xC3", "\xA9", "\xE2\x82\xAC", "\t", "\x01", "\x7F"};
  for (int c = 0x20; c < 0x7F; ++c) t.emplace_back(1, static_cast<char>(c));
  t.emplace_back("</s>");  // the stop token, last
  return t;
}

tessera::grammar::GrammarCompiler& Compiler() {
  static tessera::grammar::GrammarCompiler* c = [] {
    std::vector<std::string> tokens = Tokens();
    const int32_t stop = static_cast<int32_t>(tokens.size()) - 1;
    tessera::grammar::GrammarCompilerOptions opt;
    opt.max_cached_grammars = 4;  // every input is new: keep the cache from holding many
    return new tessera::grammar::GrammarCompiler(
        tessera::grammar::TokenVocabulary::FromTokenBytes(std::move(tokens), {stop}, {}), opt);
  }();
  return *c;
}

void Walk(std::shared_ptr<const tessera::grammar::CompiledGrammar> g, uint32_t seed) {
  tessera::grammar::GrammarMatcher m(std::move(g));
  const int32_t vocab = static_cast<int32_t>(m.vocab_size());
  std::vector<uint32_t> words(tessera::grammar::BitmaskWords(vocab));
  for (int step = 0; step < 12 && !m.IsTerminated(); ++step) {
    std::fill(words.begin(), words.end(), 0u);
    if (!m.FillNextTokenBitmask(words.data())) break;
    std::vector<int32_t> allowed;
    for (int32_t id = 0; id < vocab; ++id)
      if (words[id >> 5] >> (id & 31) & 1u) allowed.push_back(id);
    if (allowed.empty()) break;
    // One forbidden token must be refused without changing the state.
    const int32_t probe = static_cast<int32_t>((seed * 2654435761u) % static_cast<uint32_t>(vocab));
    const bool probe_allowed = std::binary_search(allowed.begin(), allowed.end(), probe);
    if (m.IsTokenAllowed(probe) != probe_allowed) abort();
    const int32_t id = allowed[seed % allowed.size()];
    if (!m.AcceptToken(id)) abort();
    seed = seed * 1103515245u + 12345u;
  }
  if (m.num_steps_kept() > 0) m.Rollback(std::min<int32_t>(m.num_steps_kept(), 1 + seed % 3));
  std::fill(words.begin(), words.end(), 0u);
  (void)m.FillNextTokenBitmask(words.data());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  static const GrammarFormat kFormats[] = {GrammarFormat::kJson, GrammarFormat::kRegex, GrammarFormat::kGrammar,
                                           GrammarFormat::kChoice, GrammarFormat::kJsonObject};
  const GrammarFormat format = kFormats[(data[0] & 7) % 5];
  const uint32_t seed = data[0] >> 3;
  std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::shared_ptr<const tessera::grammar::CompiledGrammar> g;
  try {
    g = Compiler().Compile(format, text);
  } catch (const tessera::Error&) {
    return 0;  // a 400 naming response_format / structured_outputs
  }
  try {
    Walk(std::move(g), seed);
  } catch (const tessera::Error& e) {
    if (e.kind() != tessera::ErrorKind::kInvalidArgument) throw;
  }
  return 0;
}
