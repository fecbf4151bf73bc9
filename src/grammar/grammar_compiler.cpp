// tessera grammar: format dispatch and the compiled-grammar cache (see grammar_compiler.h).
#include "grammar/grammar_compiler.h"

#include <chrono>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "grammar/ebnf.h"
#include "grammar/pda.h"
#include "grammar/regex.h"

namespace tessera::grammar {

std::string_view GrammarFormatName(GrammarFormat f) {
  switch (f) {
    case GrammarFormat::kJson:
      return "json";
    case GrammarFormat::kJsonObject:
      return "json_object";
    case GrammarFormat::kRegex:
      return "regex";
    case GrammarFormat::kChoice:
      return "choice";
    case GrammarFormat::kGrammar:
      return "grammar";
  }
  return "?";
}

std::optional<GrammarFormat> GrammarFormatFromName(std::string_view name) {
  for (GrammarFormat f : {GrammarFormat::kJson, GrammarFormat::kJsonObject, GrammarFormat::kRegex,
                          GrammarFormat::kChoice, GrammarFormat::kGrammar})
    if (GrammarFormatName(f) == name) return f;
  return std::nullopt;
}

GrammarCompiler::GrammarCompiler(std::shared_ptr<const TokenVocabulary> vocab, GrammarCompilerOptions options)
    : vocab_(std::move(vocab)), options_(options) {}

Grammar GrammarCompiler::BuildGrammar(GrammarFormat format, std::string_view text,
                                      const GrammarCompilerOptions& options) {
  switch (format) {
    case GrammarFormat::kJson:
      return JsonSchemaGrammar(text, options.json, options.limits);
    case GrammarFormat::kJsonObject:
      return AnyJsonObjectGrammar(options.json);
    case GrammarFormat::kRegex: {
      Grammar g;
      int32_t r = g.AddRule("root");
      g.set_root(r);
      g.SetBody(r, CompileRegex(&g, text, RegexOptions{}, "regex"));
      return g;
    }
    case GrammarFormat::kChoice: {
      nlohmann::json list;
      try {
        list = nlohmann::json::parse(text);
      } catch (const nlohmann::json::exception& e) {
        Fail(ErrorKind::kInvalidArgument, "choice: not a JSON array of strings: {}", e.what());
      }
      if (!list.is_array() || list.empty())
        Fail(ErrorKind::kInvalidArgument, "choice: expected a non-empty array of strings");
      Grammar g;
      int32_t r = g.AddRule("root");
      g.set_root(r);
      std::vector<ExprId> alts;
      for (const auto& c : list) {
        if (!c.is_string()) Fail(ErrorKind::kInvalidArgument, "choice: every choice must be a string");
        alts.push_back(g.Literal(c.get<std::string>()));
      }
      g.SetBody(r, g.Alt(std::move(alts)));
      return g;
    }
    case GrammarFormat::kGrammar:
      return EbnfGrammar(text);
  }
  Fail(ErrorKind::kInternal, "unknown grammar format");
}

std::shared_ptr<const CompiledGrammar> GrammarCompiler::Compile(GrammarFormat format, std::string_view text) {
  std::string key = std::string(GrammarFormatName(format)) + '\0' + std::string(text);
  std::promise<std::shared_ptr<const CompiledGrammar>> promise;
  Future future;
  bool owner = false;  // this call compiles; others wait on its future
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = cache_.find(key);
    if (it != cache_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second.second);
      future = it->second.first;
    } else {
      owner = true;
      future = promise.get_future().share();
      lru_.push_front(key);
      cache_.emplace(key, std::make_pair(future, lru_.begin()));
      while (cache_.size() > options_.max_cached_grammars) {
        cache_.erase(lru_.back());
        lru_.pop_back();
      }
    }
  }
  if (!owner) return future.get();  // rethrows the compile error of the owner
  try {
    auto t0 = std::chrono::steady_clock::now();
    Grammar g = BuildGrammar(format, text, options_);
    std::shared_ptr<const Pda> pda = Pda::Build(g, options_.limits);
    double build_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    auto compiled = std::make_shared<CompiledGrammar>(pda, vocab_, options_.max_parses,
                                                      options_.mask_cache_bytes_per_grammar, options_.compile_threads);
    compiled->mutable_stats().build_ms = build_ms;
    compiled->mutable_stats().num_rules = g.num_rules();
    promise.set_value(compiled);
    return compiled;
  } catch (...) {
    promise.set_exception(std::current_exception());
    std::lock_guard<std::mutex> lock(mu_);
    auto it = cache_.find(key);
    if (it != cache_.end()) {
      lru_.erase(it->second.second);
      cache_.erase(it);
    }
    throw;
  }
}

std::shared_ptr<const CompiledGrammar> GrammarCompiler::CompileChoice(const std::vector<std::string>& choices) {
  return Compile(GrammarFormat::kChoice, nlohmann::json(choices).dump());
}

size_t GrammarCompiler::num_cached() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cache_.size();
}

}  // namespace tessera::grammar
