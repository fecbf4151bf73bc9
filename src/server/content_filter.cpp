// tessera server: content-safety rules (compilation to PCRE2) and the stream filter that applies
// them with the hold-back a phrase split across pieces needs. See content_filter.h.
#include "server/content_filter.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <set>

#include "core/error.h"
#include "server/moderation_client.h"

namespace tessera {
namespace {

size_t CodePoints(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// Words become literals: ASCII punctuation is escaped (PCRE2 treats an escaped non-alphanumeric
// as itself); letters, digits and non-ASCII bytes stay as they are (an escaped letter is a class).
std::string EscapeLiteral(std::string_view w) {
  std::string out;
  for (char c : w) {
    unsigned char u = static_cast<unsigned char>(c);
    if (u < 0x80 && !std::isalnum(u)) out += '\\';
    out += c;
  }
  return out;
}

// The end of the longest prefix of `s` that holds no incomplete UTF-8 sequence at its end: a
// stream piece may end inside a character, which must neither be sent alone nor hide a match.
size_t CompleteUtf8Prefix(std::string_view s) {
  size_t n = s.size();
  for (size_t back = 1; back <= 4 && back <= n; ++back) {
    unsigned char c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation: look further back for the lead byte
    size_t len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
    return back < len ? n - back : n;
  }
  return n;  // invalid bytes: nothing to wait for
}

size_t NextCharStart(std::string_view s, size_t i) {
  ++i;
  while (i < s.size() && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) ++i;
  return i;
}

void* CompileOrFail(const std::string& pattern, bool caseless, const std::string& rule_name, const std::string& what) {
  uint32_t opts = PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF | (caseless ? PCRE2_CASELESS : 0);
  int err = 0;
  PCRE2_SIZE off = 0;
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), opts, &err, &off, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR buf[256];
    pcre2_get_error_message(err, buf, sizeof(buf));
    Fail(ErrorKind::kInvalidArgument, "content_safety rule '{}': {} does not compile at offset {}: {}", rule_name,
         what, static_cast<size_t>(off), reinterpret_cast<const char*>(buf));
  }
  // JIT for both kinds of match the filter runs; without JIT (some builds) the interpreter works.
  (void)pcre2_jit_compile(code, PCRE2_JIT_COMPLETE | PCRE2_JIT_PARTIAL_HARD);
  return code;
}

}  // namespace

const char* ContentActionName(ContentAction a) {
  switch (a) {
    case ContentAction::kBlock:
      return "block";
    case ContentAction::kMask:
      return "mask";
    case ContentAction::kFlag:
      return "flag";
  }
  return "flag";
}

ContentRuleSet::~ContentRuleSet() {
  for (Matcher& m : matchers_) pcre2_code_free(static_cast<pcre2_code*>(m.code));
}

std::shared_ptr<const ContentRuleSet> ContentRuleSet::Compile(const std::vector<ContentRuleConfig>& rules,
                                                              const std::string& default_mask, Stage stage) {
  std::shared_ptr<ContentRuleSet> set(new ContentRuleSet());
  std::set<std::string> names;
  for (size_t i = 0; i < rules.size(); ++i) {
    const ContentRuleConfig& r = rules[i];
    const std::string label = r.name.empty() ? fmt::format("#{}", i) : r.name;
    auto bad = [&](const std::string& why) {
      Fail(ErrorKind::kInvalidArgument, "content_safety rule '{}': {}", label, why);
    };
    if (r.name.empty()) bad("has no name");
    if (!names.insert(r.name).second) bad("the name is used by another rule");
    if (r.applies_to != "input" && r.applies_to != "output" && r.applies_to != "both")
      bad(fmt::format("applies_to '{}' is not one of: input, output, both", r.applies_to));
    Rule rule;
    rule.name = r.name;
    rule.category = r.category.empty() ? r.name : r.category;
    if (r.action == "block")
      rule.action = ContentAction::kBlock;
    else if (r.action == "mask")
      rule.action = ContentAction::kMask;
    else if (r.action == "flag")
      rule.action = ContentAction::kFlag;
    else
      bad(fmt::format("action '{}' is not one of: block, mask, flag", r.action));
    if (r.words.empty() && r.patterns.empty()) bad("has neither words nor patterns");
    if (r.max_match_bytes < 1 || r.max_match_bytes > 65536) bad("max_match_bytes must be in 1..65536");
    if (!r.replacement.empty() && rule.action != ContentAction::kMask) bad("replacement is for action mask only");
    rule.replacement = r.replacement.empty() ? default_mask : r.replacement;
    // Compiled for every stage (a bad pattern is an error even where the rule does not apply).
    std::vector<Matcher> ms;
    // A later pattern of the rule that fails to compile throws: the codes compiled before it are
    // freed here (they leaked: fuzz/config_fuzz.cpp's LeakSanitizer report).
    struct FreeOnThrow {
      std::vector<Matcher>* ms;
      ~FreeOnThrow() {
        if (ms)
          for (Matcher& m : *ms) pcre2_code_free(static_cast<pcre2_code*>(m.code));
      }
    } guard{&ms};
    if (!r.words.empty()) {
      std::vector<std::string> words = r.words;
      // Longest first: at one position the alternation then takes the whole phrase, not a prefix.
      std::stable_sort(words.begin(), words.end(), [](const auto& a, const auto& b) { return a.size() > b.size(); });
      std::string alt;
      size_t longest = 0;
      for (const auto& w : words) {
        if (!alt.empty()) alt += '|';  // (appended piecewise: GCC 12 warns on "x" + string here)
        alt += EscapeLiteral(w);
        longest = std::max(longest, CodePoints(w));
      }
      std::string pattern = r.whole_words ? "(?<![\\p{L}\\p{N}_])(?:" + alt + ")(?![\\p{L}\\p{N}_])" : "(?:" + alt + ")";
      // Caseless matching may pair characters of different UTF-8 lengths (k and the Kelvin sign):
      // 4 bytes a character bounds any form, plus one character for the lookahead.
      ms.push_back({CompileOrFail(pattern, r.case_insensitive, r.name, "the word list"), set->rules_.size(),
                    4 * longest + 4});
    }
    for (size_t p = 0; p < r.patterns.size(); ++p)
      ms.push_back({CompileOrFail(r.patterns[p], r.case_insensitive, r.name,
                                  fmt::format("pattern {} '{}'", p + 1, r.patterns[p])),
                    set->rules_.size(), static_cast<size_t>(r.max_match_bytes)});
    guard.ms = nullptr;  // compiled: freed below or owned by the set from here on
    const bool applies = r.applies_to == "both" || (stage == Stage::kInput) == (r.applies_to == "input");
    if (!applies) {
      for (Matcher& m : ms) pcre2_code_free(static_cast<pcre2_code*>(m.code));
      continue;
    }
    for (Matcher& m : ms) {
      uint32_t lookbehind = 0;
      pcre2_pattern_info(static_cast<pcre2_code*>(m.code), PCRE2_INFO_MAXLOOKBEHIND, &lookbehind);
      set->context_bytes_ = std::max<size_t>(set->context_bytes_, 4 * static_cast<size_t>(lookbehind));
      set->max_hold_ = std::max(set->max_hold_, m.max_bytes - 1);
      set->matchers_.push_back(m);
    }
    set->rules_.push_back(std::move(rule));
  }
  return set;
}

StreamFilter::StreamFilter(std::shared_ptr<const ContentRuleSet> rules) : rules_(std::move(rules)) {
  for (const auto& m : rules_->matchers_)
    match_data_.push_back(pcre2_match_data_create_from_pattern(static_cast<pcre2_code*>(m.code), nullptr));
  resume_.assign(rules_->matchers_.size(), 0);
}

StreamFilter::~StreamFilter() {
  for (void* md : match_data_) pcre2_match_data_free(static_cast<pcre2_match_data*>(md));
}

StreamFilter::StreamFilter(StreamFilter&& o) noexcept
    : rules_(std::move(o.rules_)),
      match_data_(std::move(o.match_data_)),
      resume_(std::move(o.resume_)),
      buf_(std::move(o.buf_)),
      start_(o.start_),
      hits_(std::move(o.hits_)),
      reported_(o.reported_),
      blocked_(o.blocked_),
      finished_(o.finished_),
      hold_back_(o.hold_back_) {
  o.match_data_.clear();
}

std::vector<ContentHit> StreamFilter::TakeNewHits() {
  std::vector<ContentHit> out(hits_.begin() + static_cast<std::ptrdiff_t>(reported_), hits_.end());
  reported_ = hits_.size();
  return out;
}

std::string StreamFilter::Push(std::string_view text) {
  if (blocked_ || finished_) return "";
  buf_.append(text);
  return Run(false);
}

std::string StreamFilter::Finish(std::string_view last) {
  if (blocked_ || finished_) return "";
  buf_.append(last);
  std::string out = Run(true);
  finished_ = true;
  return out;
}

// One pass over the held text: act on the earliest complete match before any partial one, again
// and again; then emit everything before the earliest partial match (or all of it when final).
std::string StreamFilter::Run(bool final) {
  std::string out;
  const auto& ms = rules_->matchers_;
  for (;;) {
    // Until more arrives, the text ends before an incomplete character: a match must not be
    // decided (nor text sent) across it.
    // (Never before start_: a replacement that is not valid UTF-8 must not move the stream back.)
    const size_t subject = final ? buf_.size() : std::max(start_, CompleteUtf8Prefix(buf_));
    size_t hold = subject;
    size_t best = ms.size(), best_s = 0, best_e = 0;
    for (size_t i = 0; i < ms.size(); ++i) {
      const ContentRuleSet::Matcher& m = ms[i];
      auto* code = static_cast<pcre2_code*>(m.code);
      auto* md = static_cast<pcre2_match_data*>(match_data_[i]);
      size_t from = std::max(start_, resume_[i]);
      const uint32_t opts = PCRE2_NOTEMPTY | (final ? 0 : PCRE2_PARTIAL_HARD);
      while (from <= subject) {
        int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(buf_.data()), subject, from, opts, md, nullptr);
        PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
        if (rc == PCRE2_ERROR_PARTIAL) {
          const size_t p = ov[0];
          // A partial match already as long as the longest this matcher must see will not turn
          // into one the hold-back is promised for: release it and look on from the next char.
          if (!hold_back_ || subject - p >= m.max_bytes) {
            from = NextCharStart(buf_, p);
            continue;
          }
          hold = std::min(hold, p);
          break;
        }
        if (rc < 0) break;  // no match (or a match-limit error: the text is let through)
        const size_t s = ov[0], e = ov[1];
        const auto& rule = rules_->rules_[m.rule];
        const auto& brule = rules_->rules_[best < ms.size() ? ms[best].rule : 0];
        // Earliest first; at one position block beats mask beats flag, then the longer match.
        if (best == ms.size() || s < best_s ||
            (s == best_s && (static_cast<int>(rule.action) < static_cast<int>(brule.action) ||
                             (rule.action == brule.action && e > best_e)))) {
          best = i;
          best_s = s;
          best_e = e;
        }
        break;
      }
    }
    if (best == ms.size() || best_s >= hold) {
      out.append(buf_, start_, hold - start_);
      start_ = hold;
      break;
    }
    const auto& rule = rules_->rules_[ms[best].rule];
    hits_.push_back({rule.name, rule.category, rule.action});
    if (rule.action == ContentAction::kFlag) {
      resume_[best] = best_e;
      continue;
    }
    out.append(buf_, start_, best_s - start_);
    if (rule.action == ContentAction::kBlock) {
      blocked_ = true;
      buf_.clear();
      start_ = 0;
      return out;
    }
    // Mask: the replacement is sent and stays as context (what the client saw) for lookbehinds.
    out += rule.replacement;
    buf_.replace(best_s, best_e - best_s, rule.replacement);
    start_ = best_s + rule.replacement.size();
    const ptrdiff_t delta = static_cast<ptrdiff_t>(rule.replacement.size()) - static_cast<ptrdiff_t>(best_e - best_s);
    for (size_t& r : resume_) r = r >= best_e ? static_cast<size_t>(static_cast<ptrdiff_t>(r) + delta) : start_;
  }
  if (final) {
    out.append(buf_, start_, std::string::npos);
    start_ = buf_.size();
  }
  // Keep a little emitted text (from a character start) for lookbehinds; drop the rest.
  if (start_ > rules_->context_bytes_) {
    size_t cut = start_ - rules_->context_bytes_;
    while (cut < start_ && (static_cast<unsigned char>(buf_[cut]) & 0xC0) == 0x80) ++cut;
    buf_.erase(0, cut);
    start_ -= cut;
    for (size_t& r : resume_) r = r > cut ? r - cut : 0;
  }
  return out;
}

ContentScan ScanContent(const std::shared_ptr<const ContentRuleSet>& rules, std::string_view text) {
  ContentScan scan;
  if (!rules || rules->empty()) {
    scan.text = std::string(text);
    return scan;
  }
  StreamFilter f(rules);
  scan.text = f.Finish(text);
  scan.blocked = f.blocked();
  scan.hits = f.hits();
  return scan;
}

void ValidateContentSafety(const ContentSafetySection& cfg) {
  (void)ContentRuleSet::Compile(cfg.rules, cfg.mask_with, ContentRuleSet::Stage::kInput);
  if (!cfg.classifier_url.empty()) {
    try {
      (void)ParseHttpUrl(cfg.classifier_url);
    } catch (const Error& e) {
      Fail(ErrorKind::kInvalidArgument, "config key 'content_safety.classifier_url': {}", e.what());
    }
  }
}

}  // namespace tessera
