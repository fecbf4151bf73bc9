// tessera tokenizer internals: pre-tokenizers (see pre_tokenizer.h). The split behaviours follow
// HF tokenizers' NormalizedString::split exactly, since they decide where BPE words start.
#include "tokenizer/pre_tokenizer.h"

#include <algorithm>
#include <functional>

#include "core/error.h"
#include "tokenizer/text_util.h"

namespace tessera::tok {
namespace {

using nlohmann::json;

enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

Behavior ParseBehavior(const json& j, const char* what) {
  std::string b = j.is_string() ? j.get<std::string>() : "Isolated";
  if (b == "Removed") return Behavior::kRemoved;
  if (b == "Isolated") return Behavior::kIsolated;
  if (b == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return Behavior::kMergedWithNext;
  if (b == "Contiguous") return Behavior::kContiguous;
  Fail(ErrorKind::kUnsupported, "tokenizer.json: pre_tokenizer {}: unknown behavior '{}'", what, b);
}

struct Span {
  size_t start, end;
  bool is_match;
};

// Turns the matches of a piece into covering spans, applies `invert` and the behaviour, and appends
// the non-empty resulting substrings to *out.
void ApplySplit(const std::string& s, const std::vector<std::pair<size_t, size_t>>& matches,
                Behavior behavior, bool invert, std::vector<std::string>* out) {
  std::vector<Span> spans;
  size_t prev = 0;
  for (auto [a, b] : matches) {
    if (a > prev) spans.push_back({prev, a, false});
    spans.push_back({a, b, true});
    prev = b;
  }
  if (prev < s.size()) spans.push_back({prev, s.size(), false});
  if (invert)
    for (auto& sp : spans) sp.is_match = !sp.is_match;

  std::vector<std::pair<size_t, size_t>> res;
  bool previous_match = false;
  switch (behavior) {
    case Behavior::kIsolated:
      for (auto& sp : spans) res.emplace_back(sp.start, sp.end);
      break;
    case Behavior::kRemoved:
      for (auto& sp : spans)
        if (!sp.is_match) res.emplace_back(sp.start, sp.end);
      break;
    case Behavior::kMergedWithPrevious:
      for (auto& sp : spans) {
        if (sp.is_match && !previous_match && !res.empty()) res.back().second = sp.end;
        else res.emplace_back(sp.start, sp.end);
        previous_match = sp.is_match;
      }
      break;
    case Behavior::kMergedWithNext:
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->is_match && !previous_match && !res.empty()) res.back().first = it->start;
        else res.emplace_back(it->start, it->end);
        previous_match = it->is_match;
      }
      std::reverse(res.begin(), res.end());
      break;
    case Behavior::kContiguous:
      for (auto& sp : spans) {
        if (sp.is_match == previous_match && !res.empty()) res.back().second = sp.end;
        else res.emplace_back(sp.start, sp.end);
        previous_match = sp.is_match;
      }
      break;
  }
  for (auto [a, b] : res)
    if (b > a) out->push_back(s.substr(a, b - a));
}

// Matches of single characters satisfying pred.
void CharMatches(const std::string& s, const std::function<bool(char32_t)>& pred,
                 std::vector<std::pair<size_t, size_t>>* m) {
  for (size_t i = 0; i < s.size();) {
    char32_t cp;
    size_t n = DecodeUtf8(s, i, &cp);
    if (pred(cp)) m->emplace_back(i, i + n);
    i += n;
  }
}

template <typename F>
void SplitEach(std::vector<std::string>* pieces, F&& f) {
  std::vector<std::string> out;
  out.reserve(pieces->size());
  std::vector<std::pair<size_t, size_t>> m;
  for (const auto& p : *pieces) {
    m.clear();
    f(p, &m, &out);
  }
  *pieces = std::move(out);
}

class Split : public PreTokenizer {
 public:
  explicit Split(const json& j) {
    const json& p = j.at("pattern");
    if (p.contains("Regex")) {
      regex_ = std::make_unique<Regex>(p["Regex"].get<std::string>(), "pre_tokenizer Split");
    } else if (p.contains("String")) {
      literal_ = p["String"].get<std::string>();
    } else {
      Fail(ErrorKind::kCorrupt, "tokenizer.json: pre_tokenizer Split has no String/Regex pattern");
    }
    behavior_ = ParseBehavior(j.value("behavior", json()), "Split");
    invert_ = j.value("invert", false);
  }
  void PreTokenize(std::vector<std::string>* pieces, bool) const override {
    SplitEach(pieces, [&](const std::string& s, auto* m, auto* out) {
      if (regex_) {
        regex_->FindAll(s, m);
      } else if (!literal_.empty()) {
        for (size_t p = s.find(literal_); p != std::string::npos; p = s.find(literal_, p + literal_.size()))
          m->emplace_back(p, p + literal_.size());
      }
      ApplySplit(s, *m, behavior_, invert_, out);
    });
  }

 private:
  std::unique_ptr<Regex> regex_;
  std::string literal_;
  Behavior behavior_;
  bool invert_;
};

constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class ByteLevel : public PreTokenizer {
 public:
  explicit ByteLevel(const json& j)
      : add_prefix_space_(j.value("add_prefix_space", true)), use_regex_(j.value("use_regex", true)) {
    if (use_regex_) regex_ = std::make_unique<Regex>(kGpt2Pattern, "pre_tokenizer ByteLevel");
  }
  void PreTokenize(std::vector<std::string>* pieces, bool) const override {
    std::vector<std::string> out;
    std::vector<std::pair<size_t, size_t>> m;
    for (auto& p : *pieces) {
      if (add_prefix_space_ && (p.empty() || p[0] != ' ')) p = " " + p;
      if (use_regex_) {
        m.clear();
        regex_->FindAll(p, &m);
        ApplySplit(p, m, Behavior::kIsolated, false, &out);
      } else {
        out.push_back(std::move(p));
      }
    }
    for (auto& p : out) p = ByteLevelEncode(p);
    *pieces = std::move(out);
  }

 private:
  bool add_prefix_space_, use_regex_;
  std::unique_ptr<Regex> regex_;
};

class Digits : public PreTokenizer {
 public:
  explicit Digits(bool individual) : individual_(individual) {}
  void PreTokenize(std::vector<std::string>* pieces, bool) const override {
    SplitEach(pieces, [&](const std::string& s, auto* m, auto* out) {
      CharMatches(s, IsNumeric, m);
      ApplySplit(s, *m, individual_ ? Behavior::kIsolated : Behavior::kContiguous, false, out);
    });
  }

 private:
  bool individual_;
};

class Punctuation : public PreTokenizer {
 public:
  explicit Punctuation(Behavior b) : b_(b) {}
  void PreTokenize(std::vector<std::string>* pieces, bool) const override {
    SplitEach(pieces, [&](const std::string& s, auto* m, auto* out) {
      CharMatches(s, IsPunctuation, m);
      ApplySplit(s, *m, b_, false, out);
    });
  }

 private:
  Behavior b_;
};

class WhitespaceSplit : public PreTokenizer {
 public:
  void PreTokenize(std::vector<std::string>* pieces, bool) const override {
    SplitEach(pieces, [&](const std::string& s, auto* m, auto* out) {
      CharMatches(s, IsWhitespace, m);
      ApplySplit(s, *m, Behavior::kRemoved, false, out);
    });
  }
};

class Whitespace : public PreTokenizer {
 public:
  // HF's pattern is \w+|[^\w\s]+ in Oniguruma, whose \w also takes marks and connector
  // punctuation (PCRE2 10.42's \w is letters, numbers and "_" only): spell the class out.
  Whitespace()
      : regex_(R"([\w\p{M}\p{Pc}\x{200C}\x{200D}]+|[^\w\p{M}\p{Pc}\x{200C}\x{200D}\s]+)",
               "pre_tokenizer Whitespace") {}
  void PreTokenize(std::vector<std::string>* pieces, bool) const override {
    SplitEach(pieces, [&](const std::string& s, auto* m, auto* out) {
      regex_.FindAll(s, m);
      ApplySplit(s, *m, Behavior::kRemoved, true, out);
    });
  }

 private:
  Regex regex_;
};

class Metaspace : public PreTokenizer {
 public:
  explicit Metaspace(const json& j) {
    replacement_ = j.value("replacement", std::string("\xE2\x96\x81"));
    split_ = j.value("split", true);
    std::string scheme = j.value("prepend_scheme", std::string());
    if (scheme.empty()) scheme = j.value("add_prefix_space", true) ? "always" : "never";
    if (scheme != "always" && scheme != "first" && scheme != "never")
      Fail(ErrorKind::kUnsupported, "tokenizer.json: Metaspace prepend_scheme '{}'", scheme);
    scheme_ = scheme;
  }
  void PreTokenize(std::vector<std::string>* pieces, bool first_segment) const override {
    std::vector<std::string> out;
    for (size_t i = 0; i < pieces->size(); ++i) {
      std::string s;
      const std::string& p = (*pieces)[i];
      for (char c : p) {
        if (c == ' ') s += replacement_;
        else s += c;
      }
      bool prepend = scheme_ == "always" || (scheme_ == "first" && first_segment && i == 0);
      if (prepend && s.compare(0, replacement_.size(), replacement_) != 0) s.insert(0, replacement_);
      if (split_) {
        std::vector<std::pair<size_t, size_t>> m;
        for (size_t q = s.find(replacement_); q != std::string::npos;
             q = s.find(replacement_, q + replacement_.size()))
          m.emplace_back(q, q + replacement_.size());
        ApplySplit(s, m, Behavior::kMergedWithNext, false, &out);
      } else if (!s.empty()) {
        out.push_back(std::move(s));
      }
    }
    *pieces = std::move(out);
  }

 private:
  std::string replacement_, scheme_;
  bool split_;
};

class Sequence : public PreTokenizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<PreTokenizer>> v) : v_(std::move(v)) {}
  void PreTokenize(std::vector<std::string>* pieces, bool first_segment) const override {
    for (const auto& p : v_) p->PreTokenize(pieces, first_segment);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> v_;
};

}  // namespace

std::unique_ptr<PreTokenizer> MakePreTokenizer(const json& j) {
  if (j.is_null()) return nullptr;
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string())
    Fail(ErrorKind::kCorrupt, "tokenizer.json: pre_tokenizer entry has no string \"type\"");
  std::string type = j["type"].get<std::string>();
  try {
    if (type == "Split") return std::make_unique<Split>(j);
    if (type == "ByteLevel") return std::make_unique<ByteLevel>(j);
    if (type == "Digits") return std::make_unique<Digits>(j.value("individual_digits", false));
    if (type == "Metaspace") return std::make_unique<Metaspace>(j);
    if (type == "Whitespace") return std::make_unique<Whitespace>();
    if (type == "WhitespaceSplit") return std::make_unique<WhitespaceSplit>();
    if (type == "Punctuation")
      return std::make_unique<Punctuation>(ParseBehavior(j.value("behavior", json()), "Punctuation"));
    if (type == "Sequence") {
      std::vector<std::unique_ptr<PreTokenizer>> v;
      for (const auto& e : j.at("pretokenizers"))
        if (auto p = MakePreTokenizer(e)) v.push_back(std::move(p));
      return std::make_unique<Sequence>(std::move(v));
    }
  } catch (const nlohmann::json::exception& e) {
    Fail(ErrorKind::kCorrupt, "tokenizer.json: pre_tokenizer {}: {}", type, e.what());
  }
  Fail(ErrorKind::kUnsupported, "tokenizer.json: pre_tokenizer type '{}' is not supported", type);
}

}  // namespace tessera::tok
