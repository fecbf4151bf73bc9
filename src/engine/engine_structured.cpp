// tessera engine: structured output in the engine (docs/STRUCTURED_OUTPUT.md, "Engine
// integration"): the process-wide grammar compiler over the tokenizer's vocabulary, and the steps of
// a constrained sequence: its logits row masked before the host sampler draws, each drawn token fed
// to its matcher, a completed diffusion block's tokens likewise, and the end of the output once the
// structure is complete. A lazy grammar (GenerationRequest::grammar_trigger) goes through the same
// steps; its GrammarConstraint leaves free text unmasked and on the backend's sampling path.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "core/error.h"
#include "engine/engine.h"
#include "engine/sequence.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace tessera {

std::shared_ptr<const grammar::CompiledGrammar> EngineApi::CompileGrammar(grammar::GrammarFormat, std::string_view) {
  Fail(ErrorKind::kUnsupported, "structured output is not available on this server");
}

std::shared_ptr<const grammar::CompiledGrammar> Engine::CompileGrammar(grammar::GrammarFormat format,
                                                                       std::string_view text) {
  if (tokenizer_ == nullptr) Fail(ErrorKind::kUnsupported, "structured output needs the model's tokenizer");
  std::call_once(grammar_once_, [this] {
    // The model's eos ids end a structure (the tokenizer's eos when the model names none the
    // tokenizer has); ids of a padded embedding past the tokenizer are never allowed.
    std::vector<int32_t> stops;
    for (int32_t e : eos_ids_)
      if (e >= 0 && e < tokenizer_->vocab_size()) stops.push_back(e);
    auto vocab = grammar::TokenVocabulary::FromTokenizer(*tokenizer_, stops);
    spdlog::info("structured output: vocabulary of {} tokens, {} stop ids", vocab->vocab_size(),
                 vocab->stop_ids().size());
    grammar_compiler_ = std::make_unique<grammar::GrammarCompiler>(std::move(vocab));
  });
  return grammar_compiler_->Compile(format, text);
}

bool Engine::ValidTrigger(const GenerationRequest& r, std::string* error) const {
  const GrammarTrigger& t = *r.grammar_trigger;
  if (!r.grammar) return *error = "a grammar trigger needs a grammar", false;
  if (t.trigger_ids.empty()) return *error = "a grammar trigger needs at least one trigger id", false;
  const int64_t vocab = info_.vocab_size;
  for (const auto* ids : {&t.trigger_ids, &t.opening, &t.closing})
    for (int32_t id : *ids) {
      if (id < 0 || id >= vocab)
        return *error = fmt::format("grammar trigger token id {} is out of range [0, {})", id, vocab), false;
      // A forced end token would end the output in the middle of a structure's frame.
      if (ids != &t.trigger_ids && std::find(eos_ids_.begin(), eos_ids_.end(), id) != eos_ids_.end())
        return *error = fmt::format("grammar trigger forces the eos token {}", id), false;
    }
  return true;
}

void Engine::FailOnGrammar(Sequence& seq, const Error& e) {
  Finish(seq, FinishReason::kError, e.what(), e.kind() == ErrorKind::kInvalidArgument);
}

bool Engine::MaskForSampling(Sequence& seq, float* logits, int64_t vocab) {
  try {
    if (seq.constraint->MaskLogits(logits, vocab)) return true;
    // Complete, and no end token may come (ignore_eos): the output is over.
    Finish(seq, FinishReason::kStop);
  } catch (const Error& e) {
    FailOnGrammar(seq, e);
  }
  return false;
}

bool Engine::MaskForDeviceSampling(Sequence& seq, std::vector<uint32_t>* words) {
  words->clear();
  if (!seq.constraint || !seq.constraint->Active()) return true;  // a lazy grammar's free text: no mask
  try {
    return seq.constraint->MaskWords(model_->config().vocab_size, words);
  } catch (const Error&) {
    return false;
  }
}

bool Engine::AdvanceGrammar(Sequence& seq, int32_t token) {
  try {
    GrammarConstraint& c = *seq.constraint;
    if (c.CanTerminate() && c.IsEnd(token)) return true;
    // The token was drawn under the mask, so the grammar takes it.
    if (!c.Accept(token)) Fail(ErrorKind::kInternal, "token {} was drawn outside the grammar's mask", token);
    return c.Done();
  } catch (const Error& e) {
    FailOnGrammar(seq, e);
    return true;
  }
}

size_t Engine::AdvanceGrammarBlock(Sequence& seq, const std::vector<int32_t>& fresh, bool* done) {
  GrammarConstraint& c = *seq.constraint;
  *done = false;
  try {
    for (size_t i = 0; i < fresh.size(); ++i) {
      // An end token, or a complete structure: what follows is the block's filler.
      if ((c.CanTerminate() && c.IsEnd(fresh[i])) || c.Done()) {
        *done = true;
        return i;
      }
      if (!c.Accept(fresh[i]))
        Fail(ErrorKind::kInternal, "diffusion committed token {} outside the grammar's mask", fresh[i]);
    }
    *done = c.Done();
  } catch (const Error& e) {
    FailOnGrammar(seq, e);
    *done = true;
    return 0;
  }
  return fresh.size();
}

}  // namespace tessera
