// tessera grammar: the entry point of structured output. The engine keeps one GrammarCompiler per
// tokenizer; a request's constraint (format + text, named as vLLM's `structured_outputs` fields)
// compiles to a shared CompiledGrammar (cached by text), and each request drives its own
// GrammarMatcher (matcher.h) over it:
//
//   auto vocab = TokenVocabulary::FromTokenizer(tokenizer, eos_ids);
//   GrammarCompiler compiler(vocab);
//   auto grammar = compiler.Compile(GrammarFormat::kJson, schema_text);   // throws Error -> HTTP 400
//   GrammarMatcher m(grammar);
//   std::vector<uint32_t> mask(BitmaskWords(vocab->vocab_size()));
//   m.FillNextTokenBitmask(mask.data());   // apply to the logits, sample `id`
//   m.AcceptToken(id);                     // ... until m.IsTerminated() (a stop token was taken)
#pragma once

#include <cstdint>
#include <future>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/automaton.h"
#include "grammar/compiled_grammar.h"
#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "grammar/vocabulary.h"

namespace tessera::grammar {

// The kinds of constraint, named as vLLM's `structured_outputs` request fields.
enum class GrammarFormat {
  kJson,        // "json": a JSON Schema (json_schema.h)
  kJsonObject,  // "json_object": any JSON object (text ignored)
  kRegex,       // "regex": the whole output matches the regex (regex.h)
  kChoice,      // "choice": exactly one of a JSON array of strings
  kGrammar,     // "grammar": a Lark-like / GBNF grammar (ebnf.h)
};
std::string_view GrammarFormatName(GrammarFormat f);
std::optional<GrammarFormat> GrammarFormatFromName(std::string_view name);

struct GrammarCompilerOptions {
  JsonGrammarOptions json;
  AutomatonLimits limits;
  int32_t max_parses = 1024;                      // parses alive at one position (ambiguity bound)
  size_t mask_cache_bytes_per_grammar = 8 << 20;  // CompiledGrammar's shared mask cache (~400 Qwen3 masks)
  size_t max_cached_grammars = 64;                // LRU of compiled grammars
  int32_t compile_threads = 1;                    // threads computing token classes at compile time
};

class GrammarCompiler {
 public:
  explicit GrammarCompiler(std::shared_ptr<const TokenVocabulary> vocab, GrammarCompilerOptions options = {});

  // Thread-safe. The same (format, text) returns the same compiled grammar while it is cached;
  // concurrent requests for one text compile it once. Throws Error(kInvalidArgument) with a
  // message naming the problem (bad syntax, unsupported keyword, grammar too large or ambiguous).
  std::shared_ptr<const CompiledGrammar> Compile(GrammarFormat format, std::string_view text);
  std::shared_ptr<const CompiledGrammar> CompileChoice(const std::vector<std::string>& choices);

  // The grammar of a constraint, before automata and token masks (tests, tools).
  static Grammar BuildGrammar(GrammarFormat format, std::string_view text, const GrammarCompilerOptions& options);

  const TokenVocabulary& vocab() const { return *vocab_; }
  const GrammarCompilerOptions& options() const { return options_; }
  size_t num_cached() const;

 private:
  using Future = std::shared_future<std::shared_ptr<const CompiledGrammar>>;
  std::shared_ptr<const TokenVocabulary> vocab_;
  GrammarCompilerOptions options_;
  mutable std::mutex mu_;
  std::list<std::string> lru_;  // most recent first
  std::map<std::string, std::pair<Future, std::list<std::string>::iterator>> cache_;
};

}  // namespace tessera::grammar
