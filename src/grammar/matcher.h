// tessera grammar: GrammarMatcher, the per-request state of constrained decoding. It follows the
// tokens a request has committed through the compiled grammar and answers which tokens may come
// next (a bitmask over the vocabulary), whether the structure is complete, and, for block-
// diffusion decoding and speculation, which tokens may come after a hypothetical prefix. Every
// accepted token's parse position is kept (positions are small and share persistent stacks), so
// Rollback is exact and cheap. Not thread-safe: one matcher per request, used by one thread.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string_view>
#include <vector>

#include "grammar/compiled_grammar.h"
#include "grammar/pda_stack.h"
#include "grammar/token_masks.h"

namespace tessera::grammar {

struct MatcherOptions {
  // Deepest nesting followed (JSON objects in arrays in ...); deeper parses are not allowed, so
  // the mask never offers a token that would need them. Bounds memory per request.
  int32_t max_stack_depth = 256;
  // Positions kept for Rollback (-1: all since the start).
  int32_t max_rollback_tokens = -1;
};

class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar, MatcherOptions options = {});

  const CompiledGrammar& grammar() const { return *grammar_; }
  int64_t vocab_size() const { return grammar_->vocab().vocab_size(); }

  // Writes the allowed next tokens into words[0, BitmaskWords(vocab_size())): bit i of word i/32 =
  // token i (ids past vocab_size(), such as a padded lm_head's, are the caller's to mask). Stop tokens are allowed
  // exactly when CanTerminate(); added tokens never. Returns false when no token at all is allowed (after termination;
  // otherwise only for a grammar whose every continuation exceeds max_stack_depth).
  bool FillNextTokenBitmask(uint32_t* words);
  // Advances by one token; false (and no change) when the grammar does not allow it here. A stop
  // token is accepted when CanTerminate() and terminates the matcher. Throws Error(kInvalidArgument)
  // when the token would keep more parses alive than GrammarCompilerOptions::max_parses (a grammar
  // too ambiguous to follow: the request should fail with that message); so can the mask calls.
  bool AcceptToken(int32_t id);
  // Advances by raw bytes (all or nothing; counts as one step for Rollback). For tests and for
  // forcing text that is not a whole token sequence.
  bool AcceptBytes(std::string_view bytes);
  // Would AcceptToken(id) / AcceptBytes(bytes) succeed? (No change to the state.)
  bool IsTokenAllowed(int32_t id);
  bool IsValidContinuation(std::string_view bytes);

  // The text so far is a complete structure (a stop token may come next).
  bool CanTerminate() const { return cur().accepting && !cur().terminated; }
  // A stop token has been accepted; nothing more is allowed.
  bool IsTerminated() const { return cur().terminated; }

  // Undoes the last n accepted steps (tokens or AcceptBytes calls). Throws Error(kInvalidArgument)
  // when fewer steps are kept (num_steps_kept()).
  void Rollback(int32_t n);
  int32_t num_steps_kept() const { return static_cast<int32_t>(history_.size()) - 1; }
  void Reset();

  // Block diffusion and speculation: the mask after the tokens `prefix` (which are not kept), or
  // false when the prefix itself is not allowed (words then untouched).
  bool FillBitmaskAfter(const int32_t* prefix, size_t n, uint32_t* words);
  // Whether `token` may follow the hypothetical `prefix` (false too when the prefix is invalid).
  bool IsValidAfter(const int32_t* prefix, size_t n, int32_t token);

  // Fewest bytes that complete the structure from here (0 when CanTerminate()).
  int64_t MinBytesToComplete() const;

 private:
  struct Position {
    std::vector<Config> scan;   // configs that can read a byte next
    std::vector<Config> roots;  // configs whose token classes make up the mask (pda_stack.h)
    bool accepting = false;
    bool terminated = false;
  };
  const Position& cur() const { return history_.back(); }
  // Reads bytes from the current position into `out`; false if some byte cannot be read.
  bool Advance(std::string_view bytes, Position* out);
  void Push(Position p);
  void BuildKey(const Position& p);
  void ComputeMask(const Position& p, uint32_t* words);

  std::shared_ptr<const CompiledGrammar> grammar_;
  MatcherOptions options_;
  StackArena arena_;
  PdaStepper stepper_;
  TrieWalker walker_;
  std::deque<Position> history_;  // history_.front() is the oldest kept position
  int32_t pinned_ = 0;            // steps Push must keep even beyond max_rollback_tokens (FillBitmaskAfter)
  size_t live_nodes_after_compact_ = 0;
  // Scratch.
  std::vector<Config> kernels_, scan_a_, scan_b_;
  std::vector<int32_t> key_;
  std::vector<uint32_t> scratch_words_;
};

}  // namespace tessera::grammar
