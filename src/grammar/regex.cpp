// tessera grammar: the regex parser and its translation to grammar expressions (see regex.h).
#include "grammar/regex.h"

#include <fmt/format.h>

#include <string>
#include <vector>

#include "core/error.h"

namespace tessera::grammar {
namespace {

constexpr int kMaxNesting = 200;
constexpr int kMaxRepeat = 10000;

// A character class with the two readings regex.h describes: `narrow` (what every dialect
// accepts as a member) and `wide` (what some dialect might accept).
struct ClassSets {
  CodepointSet narrow, wide;
};

CodepointSet AsciiWhitespace() {
  CodepointSet s;
  s.Add('\t', '\r');
  s.Add(' ');
  return s;
}
CodepointSet AsciiWord() {
  CodepointSet s;
  s.Add('0', '9');
  s.Add('A', 'Z');
  s.Add('a', 'z');
  s.Add('_');
  return s;
}

struct Node {
  enum Kind { kSet, kSeq, kAlt, kRepeat, kStart, kEnd } kind = kSeq;
  CodepointSet set;
  std::vector<int> children;
  int min = 0, max = 0;
};

class Parser {
 public:
  Parser(std::string_view pattern, std::string_view what) : what_(what) {
    for (size_t i = 0; i < pattern.size();) {
      auto c = static_cast<unsigned char>(pattern[i]);
      int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
      if (n == 0 || i + static_cast<size_t>(n) > pattern.size()) Error("the pattern is not valid UTF-8");
      char32_t cp = n == 1 ? c : c & (0x7F >> n);
      for (int k = 1; k < n; ++k)
        cp = (cp << 6) | (static_cast<unsigned char>(pattern[i + static_cast<size_t>(k)]) & 0x3F);
      text_.push_back(cp);
      i += static_cast<size_t>(n);
    }
  }

  int ParseAll() {
    int root = ParseAlt(0);
    if (pos_ < text_.size()) Error(fmt::format("unmatched ')' at offset {}", pos_));
    return root;
  }
  std::vector<Node> nodes;

  [[noreturn]] void Error(const std::string& msg) const { Fail(ErrorKind::kInvalidArgument, "{}: {}", what_, msg); }

 private:
  bool AtEnd() const { return pos_ >= text_.size(); }
  char32_t Peek(size_t k = 0) const { return pos_ + k < text_.size() ? text_[pos_ + k] : 0; }
  char32_t Take() {
    if (AtEnd()) Error("unexpected end of pattern");
    return text_[pos_++];
  }
  int Add(Node n) {
    nodes.push_back(std::move(n));
    return static_cast<int>(nodes.size()) - 1;
  }
  int SetNode(CodepointSet s) {
    Node n;
    n.kind = Node::kSet;
    n.set = std::move(s);
    return Add(std::move(n));
  }

  int ParseAlt(int depth) {
    if (depth > kMaxNesting) Error("groups nested too deeply");
    std::vector<int> alts{ParseSeq(depth)};
    while (!AtEnd() && Peek() == '|') {
      ++pos_;
      alts.push_back(ParseSeq(depth));
    }
    if (alts.size() == 1) return alts[0];
    Node n;
    n.kind = Node::kAlt;
    n.children = std::move(alts);
    return Add(std::move(n));
  }

  int ParseSeq(int depth) {
    Node n;
    n.kind = Node::kSeq;
    while (!AtEnd() && Peek() != '|' && Peek() != ')') n.children.push_back(ParseQuantified(depth));
    return Add(std::move(n));
  }

  // {n}, {n,}, {n,m} at pos_; false (pos_ unchanged) when the text is not a quantifier.
  bool ParseBraces(int* min, int* max) {
    size_t p = pos_ + 1;
    auto digits = [&](int* out) {
      size_t start = p;
      long v = 0;
      while (p < text_.size() && text_[p] >= '0' && text_[p] <= '9') {
        v = v * 10 + (text_[p] - '0');
        if (v > kMaxRepeat) Error(fmt::format("repetition count above {}", kMaxRepeat));
        ++p;
      }
      *out = static_cast<int>(v);
      return p > start;
    };
    if (!digits(min)) return false;
    if (p < text_.size() && text_[p] == '}') {
      *max = *min;
    } else if (p < text_.size() && text_[p] == ',') {
      ++p;
      if (!digits(max)) *max = Grammar::kUnbounded;
      if (p >= text_.size() || text_[p] != '}') return false;
    } else {
      return false;
    }
    pos_ = p + 1;
    if (*max != Grammar::kUnbounded && *max < *min) Error("repetition {n,m} with m < n");
    return true;
  }

  bool IsQuantifierStart() {
    if (AtEnd()) return false;
    char32_t c = Peek();
    if (c == '*' || c == '+' || c == '?') return true;
    if (c != '{') return false;
    size_t save = pos_;
    int a, b;
    bool q = ParseBraces(&a, &b);
    pos_ = save;
    return q;
  }

  int ParseQuantified(int depth) {
    int atom = ParseAtom(depth);
    if (!IsQuantifierStart()) return atom;
    const Node& a = nodes[static_cast<size_t>(atom)];
    if (a.kind == Node::kStart || a.kind == Node::kEnd) Error("a quantifier after an anchor");
    int min = 0, max = 0;
    char32_t c = Peek();
    if (c == '*') {
      ++pos_, min = 0, max = Grammar::kUnbounded;
    } else if (c == '+') {
      ++pos_, min = 1, max = Grammar::kUnbounded;
    } else if (c == '?') {
      ++pos_, min = 0, max = 1;
    } else {
      ParseBraces(&min, &max);
    }
    if (!AtEnd() && Peek() == '?') {
      ++pos_;  // lazy: the same language
    } else if (!AtEnd() && Peek() == '+') {
      Error("possessive quantifiers are not supported");
    }
    if (IsQuantifierStart()) Error("multiple repeat (a quantifier after a quantifier)");
    Node n;
    n.kind = Node::kRepeat;
    n.children = {atom};
    n.min = min;
    n.max = max;
    return Add(std::move(n));
  }

  int ParseAtom(int depth) {
    char32_t c = Take();
    switch (c) {
      case '(':
        return ParseGroup(depth);
      case '[':
        return SetNode(ParseClass());
      case '.': {
        CodepointSet s = CodepointSet::Range(0, kMaxCodepoint);
        CodepointSet nl;
        nl.Add('\n');
        nl.Add('\r');
        nl.Add(0x2028, 0x2029);
        return SetNode(s.Minus(nl));
      }
      case '^': {
        Node n;
        n.kind = Node::kStart;
        return Add(std::move(n));
      }
      case '$': {
        Node n;
        n.kind = Node::kEnd;
        return Add(std::move(n));
      }
      case '\\':
        return SetNode(ParseEscape(false).narrow);
      case '*':
      case '+':
      case '?':
        Error(fmt::format("nothing to repeat at offset {}", pos_ - 1));
      case '{': {
        --pos_;
        if (IsQuantifierStart()) Error(fmt::format("nothing to repeat at offset {}", pos_));
        ++pos_;
        return SetNode(CodepointSet::Range('{', '{'));
      }
      default:
        return SetNode(CodepointSet::Range(c, c));
    }
  }

  int ParseGroup(int depth) {
    if (Peek() == '?') {
      char32_t k = Peek(1);
      if (k == ':') {
        pos_ += 2;
      } else if (k == 'P' && Peek(2) == '<') {
        pos_ += 3;
        SkipGroupName();
      } else if (k == '<' && Peek(2) != '=' && Peek(2) != '!') {
        pos_ += 2;
        SkipGroupName();
      } else if (k == '=' || k == '!' || k == '<') {
        Error("lookaround assertions ((?=, (?!, (?<=, (?<!) are not supported");
      } else if (k == 'P' && Peek(2) == '=') {
        Error("backreferences are not supported");
      } else if (k == '>') {
        Error("atomic groups are not supported");
      } else {
        Error("inline flags and other (?...) groups are not supported");
      }
    }
    int inner = ParseAlt(depth + 1);
    if (AtEnd() || Peek() != ')') Error("missing ')'");
    ++pos_;
    return inner;
  }

  void SkipGroupName() {
    while (!AtEnd() && Peek() != '>') ++pos_;
    if (AtEnd()) Error("unterminated group name");
    ++pos_;
  }

  uint32_t Hex(int digits) {
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      char32_t h = Take();
      int d = h >= '0' && h <= '9'   ? static_cast<int>(h - '0')
              : h >= 'a' && h <= 'f' ? static_cast<int>(h - 'a' + 10)
              : h >= 'A' && h <= 'F' ? static_cast<int>(h - 'A' + 10)
                                     : -1;
      if (d < 0) Error("bad hexadecimal escape");
      v = v * 16 + static_cast<uint32_t>(d);
    }
    return v;
  }

  static ClassSets Single(uint32_t cp) { return {CodepointSet::Range(cp, cp), CodepointSet::Range(cp, cp)}; }

  // After a backslash. in_class: \b is a backspace there, a word boundary outside.
  ClassSets ParseEscape(bool in_class) {
    char32_t c = Take();
    switch (c) {
      case 'd':
        return {CodepointSet::Range('0', '9'), WideDigits()};
      case 'D':
        return {WideDigits().Complement(), CodepointSet::Range('0', '9').Complement()};
      case 'w':
        return {AsciiWord(), WideWordChars()};
      case 'W':
        return {WideWordChars().Complement(), AsciiWord().Complement()};
      case 's':
        return {AsciiWhitespace(), WideWhitespace()};
      case 'S':
        return {WideWhitespace().Complement(), AsciiWhitespace().Complement()};
      case 'n':
        return Single('\n');
      case 'r':
        return Single('\r');
      case 't':
        return Single('\t');
      case 'f':
        return Single('\f');
      case 'v':
        return Single('\v');
      case '0':
        if (Peek() >= '0' && Peek() <= '9') Error("octal escapes are not supported");
        return Single(0);
      case 'x':
        return Single(Hex(2));
      case 'u':
        if (Peek() == '{') {
          ++pos_;
          uint32_t v = 0;
          int n = 0;
          while (!AtEnd() && Peek() != '}') {
            --pos_;
            ++pos_;
            v = v * 16 + Hex(1);
            if (++n > 6 || v > kMaxCodepoint) Error("bad \\u{...} escape");
          }
          if (AtEnd() || n == 0) Error("bad \\u{...} escape");
          ++pos_;
          return Single(v);
        }
        return Single(Hex(4));
      case 'U': {
        uint32_t v = Hex(8);
        if (v > kMaxCodepoint) Error("bad \\U escape");
        return Single(v);
      }
      case 'b':
        if (in_class) return Single(8);
        Error("word boundaries (\\b) are not supported");
      case 'B':
        Error("word boundaries (\\B) are not supported");
      case 'A':
      case 'Z':
      case 'z':
      case 'G':
        Error(fmt::format("the anchor \\{} is not supported (use ^ and $ at the ends)", static_cast<char>(c)));
      case 'p':
      case 'P':
        Error("Unicode property escapes (\\p{...}) are not supported");
      case 'k':
        Error("backreferences are not supported");
      case 'c':
        Error("control escapes (\\cX) are not supported");
      default:
        break;
    }
    if (c >= '1' && c <= '9') Error("backreferences are not supported");
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
      Error(fmt::format("unknown escape \\{}", static_cast<char>(c)));
    return Single(c);  // escaped punctuation or any other character stands for itself
  }

  CodepointSet ParseClass() {
    bool negate = false;
    if (Peek() == '^') ++pos_, negate = true;
    if (Peek() == ']') Error("empty or ambiguous character class ([] or []...])");
    ClassSets acc;
    while (true) {
      if (AtEnd()) Error("missing ']'");
      char32_t c = Take();
      if (c == ']') break;
      if (c == '[' && (Peek() == ':' || Peek() == '=' || Peek() == '.'))
        Error("POSIX classes ([:alpha:]) are not supported");
      ClassSets item;
      bool single = true;
      uint32_t lo = c;
      if (c == '\\') {
        item = ParseEscape(true);
        single = item.narrow.ranges().size() == 1 && item.narrow.ranges()[0].first == item.narrow.ranges()[0].second &&
                 item.wide.ranges().size() == 1;
        lo = single ? item.narrow.ranges()[0].first : 0;
      } else {
        item = Single(c);
      }
      if (Peek() == '-' && Peek(1) != ']' && pos_ + 1 < text_.size()) {
        ++pos_;
        char32_t d = Take();
        ClassSets hi_item = d == '\\' ? ParseEscape(true) : Single(d);
        bool hi_single = hi_item.narrow.ranges().size() == 1 &&
                         hi_item.narrow.ranges()[0].first == hi_item.narrow.ranges()[0].second &&
                         hi_item.wide.ranges().size() == 1;
        if (!single || !hi_single) Error("a range with a class escape as an end");
        uint32_t hi = hi_item.narrow.ranges()[0].first;
        if (hi < lo) Error("a character range out of order");
        item = {CodepointSet::Range(lo, hi), CodepointSet::Range(lo, hi)};
      }
      acc.narrow.AddSet(item.narrow);
      acc.wide.AddSet(item.wide);
    }
    return negate ? acc.wide.Complement() : acc.narrow;
  }

  std::vector<char32_t> text_;
  size_t pos_ = 0;
  std::string_view what_;
};

class Translator {
 public:
  Translator(Grammar* g, const Parser& p, const RegexOptions& o) : g_(g), p_(p), o_(o) {}

  ExprId Atom(const CodepointSet& s) {
    return o_.target == RegexOptions::Target::kJsonString ? JsonCharExpr(g_, s) : Utf8Expr(g_, s);
  }

  ExprId Convert(int id) {
    const Node& n = p_.nodes[static_cast<size_t>(id)];
    switch (n.kind) {
      case Node::kSet:
        return Atom(n.set);
      case Node::kSeq: {
        std::vector<ExprId> parts;
        for (int c : n.children) parts.push_back(Convert(c));
        return g_->Seq(std::move(parts));
      }
      case Node::kAlt: {
        std::vector<ExprId> parts;
        for (int c : n.children) parts.push_back(Convert(c));
        return g_->Alt(std::move(parts));
      }
      case Node::kRepeat:
        return g_->Repeat(Convert(n.children[0]), n.min, n.max);
      case Node::kStart:
      case Node::kEnd:
        p_.Error("anchors (^, $) are only supported at the start and end of the pattern");
    }
    return g_->Nothing();
  }

  // One top-level alternative: its leading ^ and trailing $ are the anchors.
  ExprId Alternative(int id) {
    const Node& n = p_.nodes[static_cast<size_t>(id)];
    std::vector<int> items = n.kind == Node::kSeq ? n.children : std::vector<int>{id};
    size_t b = 0, e = items.size();
    bool anchored_start = false, anchored_end = false;
    while (b < e && p_.nodes[static_cast<size_t>(items[b])].kind == Node::kStart) ++b, anchored_start = true;
    while (e > b && p_.nodes[static_cast<size_t>(items[e - 1])].kind == Node::kEnd) --e, anchored_end = true;
    std::vector<ExprId> parts;
    ExprId any = o_.search ? g_->Star(Atom(CodepointSet::Range(0, kMaxCodepoint))) : -1;
    if (o_.search && !anchored_start) parts.push_back(any);
    for (size_t i = b; i < e; ++i) parts.push_back(Convert(items[i]));
    if (o_.search && !anchored_end) parts.push_back(any);
    return g_->Seq(std::move(parts));
  }

 private:
  Grammar* g_;
  const Parser& p_;
  const RegexOptions& o_;
};

}  // namespace

ExprId JsonCharExpr(Grammar* g, const CodepointSet& set) {
  CodepointSet special;
  special.Add(0, 0x1F);
  special.Add('"');
  special.Add('\\');
  std::vector<ExprId> alts{Utf8Expr(g, set.Minus(special))};
  const CodepointSet escaped = set.Intersect(special);
  for (const auto& r : escaped.ranges()) {
    for (uint32_t c = r.first; c <= r.second; ++c) {
      switch (c) {
        case '"':
          alts.push_back(g->Literal("\\\""));
          break;
        case '\\':
          alts.push_back(g->Literal("\\\\"));
          break;
        case '\b':
          alts.push_back(g->Literal("\\b"));
          break;
        case '\f':
          alts.push_back(g->Literal("\\f"));
          break;
        case '\n':
          alts.push_back(g->Literal("\\n"));
          break;
        case '\r':
          alts.push_back(g->Literal("\\r"));
          break;
        case '\t':
          alts.push_back(g->Literal("\\t"));
          break;
        default:
          alts.push_back(g->Literal(fmt::format("\\u{:04x}", c)));
      }
    }
  }
  return g->Alt(std::move(alts));
}

ExprId CompileRegex(Grammar* g, std::string_view pattern, const RegexOptions& options, std::string_view what) {
  Parser p(pattern, what);
  int root = p.ParseAll();
  Translator t(g, p, options);
  const Node& n = p.nodes[static_cast<size_t>(root)];
  if (n.kind != Node::kAlt) return t.Alternative(root);
  std::vector<ExprId> alts;
  for (int c : n.children) alts.push_back(t.Alternative(c));
  return g->Alt(std::move(alts));
}

}  // namespace tessera::grammar
