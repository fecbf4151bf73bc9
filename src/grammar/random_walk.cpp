// tessera grammar: random accepted token sequences (see random_walk.h).
#include "grammar/random_walk.h"

#include <chrono>

#include "grammar/matcher.h"

namespace tessera::grammar {

RandomWalkResult RandomWalk(const std::shared_ptr<const CompiledGrammar>& grammar, const RandomWalkOptions& options,
                            std::mt19937_64* rng) {
  const TokenVocabulary& vocab = grammar->vocab();
  RandomWalkResult out;
  GrammarMatcher m(grammar);
  std::vector<uint32_t> mask(BitmaskWords(vocab.vocab_size()));
  std::vector<int32_t> allowed;
  const int32_t span = std::max(0, options.max_free_steps - options.min_free_steps);
  const int32_t free_steps = options.min_free_steps + static_cast<int32_t>((*rng)() % static_cast<uint64_t>(span + 1));
  for (int32_t step = 0; step < options.max_steps; ++step) {
    auto t0 = std::chrono::steady_clock::now();
    m.FillNextTokenBitmask(mask.data());
    if (options.time_masks)
      out.mask_us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    allowed.clear();
    int32_t stop = -1;
    for (size_t w = 0; w < mask.size(); ++w) {
      for (uint32_t bits = mask[w]; bits; bits &= bits - 1) {
        auto id = static_cast<int32_t>(w * 32 + static_cast<size_t>(__builtin_ctz(bits)));
        if (vocab.is_stop(id)) {
          stop = id;
        } else {
          allowed.push_back(id);
        }
      }
    }
    const bool finishing = step >= free_steps;
    if (stop >= 0 && (allowed.empty() || finishing || (*rng)() % 8 == 0)) {
      out.complete = m.AcceptToken(stop);
      if (!out.complete) out.failure = "the mask offered a stop token the matcher refused";
      return out;
    }
    if (allowed.empty()) {
      out.failure = "no token allowed before the structure is complete";
      return out;
    }
    int32_t pick = allowed[(*rng)() % allowed.size()];
    if (finishing) {
      // The candidate leaving the fewest bytes to complete (single bytes always include one that
      // makes progress; a sample of the others finds shortcuts).
      int64_t best = INT64_MAX;
      auto consider = [&](int32_t id) {
        if (!m.AcceptToken(id)) return;
        int64_t d = m.MinBytesToComplete();
        m.Rollback(1);
        if (d < best) best = d, pick = id;
      };
      for (int32_t id : allowed)
        if (vocab.token_bytes(id).size() == 1) consider(id);
      for (int32_t k = 0; k < options.finish_sample; ++k) consider(allowed[(*rng)() % allowed.size()]);
    }
    if (!m.AcceptToken(pick)) {
      out.failure = "the mask offered token " + std::to_string(pick) + " but the matcher refused it";
      return out;
    }
    out.tokens.push_back(pick);
    out.text += vocab.token_bytes(pick);
  }
  out.failure = "no end after max_steps tokens";
  return out;
}

}  // namespace tessera::grammar
