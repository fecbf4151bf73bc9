// tessera engine: the structured-output constraint of one sequence (docs/STRUCTURED_OUTPUT.md,
// "Engine integration"). It wraps the request's GrammarMatcher with the sequence's end tokens:
// the model's eos ids (the grammar vocabulary's stop ids) and the request's stop_token_ids end the
// output, so they are allowed where the text so far is complete (eos never under ignore_eos);
// every other id is allowed when the grammar allows it next. Inside a structure a request stop id
// that the grammar allows (an ordinary byte, say) is text like any other token. Masks are applied to host logits
// (-inf where not allowed), so a constrained row never takes the backend's RowSampling path.
//
// With a GrammarTrigger the grammar is lazy: the output is free (nothing masked, end tokens end it)
// until a trigger token is drawn; then the trigger's opening tokens are forced, the structure
// follows the grammar with a fresh matcher, the closing tokens are forced once it is complete, and
// the output is free again. Only while !Active() may a row take the backend's sampling path.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/request.h"
#include "grammar/matcher.h"

namespace tessera {

class GrammarConstraint {
 public:
  // `request_stop_ids`: the request's stop_token_ids; `ignore_eos`: the model's eos ids never end it;
  // `trigger`: null for a grammar over the whole output.
  GrammarConstraint(std::shared_ptr<const grammar::CompiledGrammar> grammar, std::vector<int32_t> request_stop_ids,
                    bool ignore_eos, std::shared_ptr<const GrammarTrigger> trigger = nullptr);

  // Whether the next token is constrained: always for a whole-output grammar; for a lazy one inside
  // a structure or while a forced token is due.
  bool Active() const { return phase_ != Phase::kFree; }

  // Sets logits[i] = -inf for every token not allowed next (ids past the grammar's vocabulary too).
  // False when no token at all is allowed (the structure is complete and no end token may come).
  bool MaskLogits(float* logits, int64_t vocab);
  // The same mask as words for `vocab` tokens, to be applied where the logits are (Segment::sample_masks:
  // bit t % 32 of word t / 32 set where token t is allowed), with MaskLogits' effect on the state; empty
  // when nothing is masked (a lazy grammar's free text). False when no token at all is allowed.
  bool MaskWords(int64_t vocab, std::vector<uint32_t>* words);
  // The same after the hypothetical tokens `prefix` (not kept): block diffusion. False also when the
  // prefix itself is not allowed.
  bool MaskLogitsAfter(const int32_t* prefix, size_t n, float* logits, int64_t vocab);

  // Whether `token` is an end token (an eos id unless ignore_eos, or a request stop id).
  bool IsEnd(int32_t token) const;
  // Whether `token`, drawn under the last mask computed (MaskLogits, MaskLogitsAfter, Done), ends
  // the output there: an end token where the text is complete.
  bool EndsAtLastMask(int32_t token) const { return last_complete_ && IsEnd(token); }
  // Advances by a token that is not an end token; false when the grammar does not allow it.
  bool Accept(int32_t token);
  // The text so far is complete and nothing but an end token may follow (or nothing at all): the
  // request is done. Computes the next mask, kept for the next MaskLogits. Never for a lazy grammar
  // (its output ends with an end token in free text).
  bool Done();
  // An end token may come next: the whole-output structure is complete, or a lazy one is in free text.
  bool CanTerminate() const { return trigger_ ? phase_ == Phase::kFree : matcher_.CanTerminate(); }
  // Whether the last mask computed (MaskLogits, MaskLogitsAfter) was of a lazy grammar's free text.
  bool LastMaskFree() const { return last_free_; }
  // A token to fill a diffusion block's positions after the output ended (never output).
  int32_t filler() const { return filler_; }

 private:
  // kCall: the matcher decides; kFree: nothing is masked; kOpening / kClosing: trigger_'s
  // opening[forced_] / closing[forced_] is the only token allowed.
  enum class Phase { kFree, kOpening, kCall, kClosing };

  // Mask words after `prefix` (or of the current position when n == 0 and !hypothetical) with the
  // end-token rule applied; false when the prefix is invalid.
  bool Fill(const int32_t* prefix, size_t n, bool hypothetical, std::vector<uint32_t>* words, bool* complete);
  void Apply(const std::vector<uint32_t>& words, float* logits, int64_t vocab) const;
  // The current position's mask words (cached), with last_complete_ / last_free_ set as every mask of it
  // sets them; null: nothing is masked (a lazy grammar's free text).
  const std::vector<uint32_t>* CurrentMask();

  // Lazy grammars. The state (phase, forced, matcher) after `token`; false when it is not allowed.
  bool Step(Phase* phase, size_t* forced, grammar::GrammarMatcher* m, int32_t token);
  // Enters a structure (a fresh matcher) or the closing from `forced` on.
  void EnterCall(Phase* phase, grammar::GrammarMatcher* m) const;
  void EnterClosing(Phase* phase, size_t* forced, size_t from) const;
  // The structure in `m` is complete and nothing but a stop id may follow.
  bool StructureDone(grammar::GrammarMatcher& m);
  // The mask of a constrained phase (not kFree).
  void FillLazy(Phase phase, size_t forced, grammar::GrammarMatcher& m, std::vector<uint32_t>* words);
  bool MaskLazyAfter(const int32_t* prefix, size_t n, float* logits, int64_t vocab);
  // Tokens that end a structure and begin its closing in one piece ("}}\n" before "</tool_call>",
  // where the closing starts with the "\n" token): a BPE model writes the structure's last bytes so,
  // and refusing them pushes it into whitespace. merge_: (id, the bytes before the closing's start).
  void BuildMerge();
  const std::string* MergePrefix(int32_t token) const;
  bool MergeEnds(grammar::GrammarMatcher& m, const std::string& bytes) const;

  std::shared_ptr<const grammar::CompiledGrammar> grammar_;
  grammar::GrammarMatcher matcher_;
  std::shared_ptr<const GrammarTrigger> trigger_;
  Phase phase_ = Phase::kCall;
  size_t forced_ = 0;
  // Block diffusion: a structure that opens inside a hypothetical prefix is followed here.
  std::optional<grammar::GrammarMatcher> scratch_matcher_;
  std::vector<int32_t> request_stops_, eos_;
  bool ignore_eos_ = false;
  int32_t filler_ = 0;
  std::vector<uint32_t> words_;  // the current position's mask when cached_
  bool cached_ = false;
  bool cached_complete_ = false;  // the cached position is complete
  bool last_complete_ = false;    // the position of the last mask computed is complete
  bool last_free_ = false;        // ... is a lazy grammar's free text
  std::vector<uint32_t> scratch_;
  std::vector<std::pair<int32_t, std::string>> merge_;  // by id
  size_t merge_longest_ = 0;
};

}  // namespace tessera
