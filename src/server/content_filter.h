// tessera server: the content-safety stage's rules (docs/CONTENT_SAFETY.md). Word lists and PCRE2
// patterns per category with an action (block, mask, flag) are compiled once from the config into a
// ContentRuleSet per stage (input prompts, output text); a StreamFilter applies one set to text that
// arrives in pieces (stream chunks, diffusion blocks), holding back only a tail that could still
// become a match, so a blocked or masked phrase never reaches the client in parts.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "server/server_config.h"

namespace tessera {

enum class ContentAction { kBlock, kMask, kFlag };
const char* ContentActionName(ContentAction a);  // "block" "mask" "flag"

// One rule's match.
struct ContentHit {
  std::string rule, category;
  ContentAction action = ContentAction::kFlag;
};

// The compiled rules of one stage. Immutable once built: shared by every request's filters.
class ContentRuleSet {
 public:
  enum class Stage { kInput, kOutput };
  // The rules that apply to `stage`; throws Error(kInvalidArgument) naming the rule (and the
  // pattern) on a bad rule or a regex that does not compile.
  static std::shared_ptr<const ContentRuleSet> Compile(const std::vector<ContentRuleConfig>& rules,
                                                       const std::string& default_mask, Stage stage);
  ~ContentRuleSet();
  ContentRuleSet(const ContentRuleSet&) = delete;
  ContentRuleSet& operator=(const ContentRuleSet&) = delete;

  bool empty() const { return matchers_.empty(); }
  // The most bytes a stream may hold back (the longest max over matchers, less one).
  size_t max_hold_bytes() const { return max_hold_; }

 private:
  ContentRuleSet() = default;
  friend class StreamFilter;
  // One compiled regex: a rule's words in one alternation, or one of its patterns.
  struct Matcher {
    void* code = nullptr;  // pcre2_code_8*
    size_t rule = 0;       // index in rules_
    size_t max_bytes = 0;  // a partial match spanning this much is given up (see StreamFilter)
  };
  struct Rule {
    std::string name, category, replacement;
    ContentAction action = ContentAction::kFlag;
  };
  std::vector<Rule> rules_;
  std::vector<Matcher> matchers_;
  size_t context_bytes_ = 16;  // emitted text kept for lookbehinds (\b, whole_words)
  size_t max_hold_ = 0;
};

// Applies a rule set to one text stream. Push returns what is safe to send now: the text, masked
// where a mask rule matched, less a held-back tail that is a partial match of some rule (PCRE2's
// hard partial matching: a pattern that ran into the end of the text so far could still match) or
// an incomplete UTF-8 sequence. A partial match is held for at most its matcher's max_bytes - 1
// bytes, then released (a match longer than that is found only when it arrives in one piece).
// Finish matches what is held as final text and returns the rest. On a block rule, Push / Finish
// return the text before the match, blocked() turns true and nothing more comes out.
class StreamFilter {
 public:
  explicit StreamFilter(std::shared_ptr<const ContentRuleSet> rules);
  ~StreamFilter();
  StreamFilter(StreamFilter&&) noexcept;  // (a choice's filter lives in a vector's element)
  StreamFilter& operator=(StreamFilter&&) = delete;

  std::string Push(std::string_view text);
  // `last`: text that ends the stream, matched as final at once (a whole prompt).
  std::string Finish(std::string_view last = {});
  bool blocked() const { return blocked_; }
  // Every hit so far, in text order; TakeNewHits: those since its last call (for the metrics).
  const std::vector<ContentHit>& hits() const { return hits_; }
  std::vector<ContentHit> TakeNewHits();
  size_t held_bytes() const { return buf_.size() - start_; }

  // Test hook: without the hold-back (partial matches ignored) a phrase split across pieces leaks.
  void set_hold_back_for_test(bool on) { hold_back_ = on; }

 private:
  std::string Run(bool final);

  std::shared_ptr<const ContentRuleSet> rules_;
  std::vector<void*> match_data_;  // pcre2_match_data_8*, one per matcher
  std::vector<size_t> resume_;     // per matcher: where its next search starts (after a flag)
  std::string buf_;                // context (already emitted) + held text
  size_t start_ = 0;               // first byte of buf_ not emitted yet
  std::vector<ContentHit> hits_;
  size_t reported_ = 0;
  bool blocked_ = false, finished_ = false, hold_back_ = true;
};

// A whole text at once (input prompts): the text masked, whether a block rule matched, the hits.
struct ContentScan {
  std::string text;
  bool blocked = false;
  std::vector<ContentHit> hits;
};
ContentScan ScanContent(const std::shared_ptr<const ContentRuleSet>& rules, std::string_view text);

// The checks of the content_safety section beyond one key's type: every rule compiles, names are
// unique, the classifier URL parses. Throws Error(kInvalidArgument) naming the rule or the key.
void ValidateContentSafety(const ContentSafetySection& cfg);

}  // namespace tessera
