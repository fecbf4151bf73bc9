// tessera grammar: code point sets and their UTF-8 byte expressions (see unicode_sets.h).
#include "grammar/unicode_sets.h"

#include <utf8proc.h>

#include <algorithm>
#include <array>

namespace tessera::grammar {

void CodepointSet::Add(uint32_t lo, uint32_t hi) {
  if (lo > hi) return;
  hi = std::min(hi, kMaxCodepoint);
  if (lo > hi) return;
  std::vector<std::pair<uint32_t, uint32_t>> out;
  out.reserve(ranges_.size() + 1);
  bool placed = false;
  for (const auto& r : ranges_) {
    if (r.second + 1 < lo) {
      out.push_back(r);
    } else if (hi + 1 < r.first) {
      if (!placed) out.emplace_back(lo, hi), placed = true;
      out.push_back(r);
    } else {  // overlaps or touches: merge into [lo, hi]
      lo = std::min(lo, r.first);
      hi = std::max(hi, r.second);
    }
  }
  if (!placed) out.emplace_back(lo, hi);
  ranges_ = std::move(out);
}

void CodepointSet::AddSet(const CodepointSet& other) {
  for (const auto& r : other.ranges_) Add(r.first, r.second);
}

CodepointSet CodepointSet::Complement() const {
  CodepointSet out;
  uint32_t next = 0;
  for (const auto& r : ranges_) {
    if (r.first > next) out.ranges_.emplace_back(next, r.first - 1);
    next = r.second + 1;
  }
  if (next <= kMaxCodepoint) out.ranges_.emplace_back(next, kMaxCodepoint);
  return out;
}

CodepointSet CodepointSet::Minus(const CodepointSet& other) const { return Intersect(other.Complement()); }

CodepointSet CodepointSet::Intersect(const CodepointSet& other) const {
  CodepointSet out;
  size_t i = 0, j = 0;
  while (i < ranges_.size() && j < other.ranges_.size()) {
    uint32_t lo = std::max(ranges_[i].first, other.ranges_[j].first);
    uint32_t hi = std::min(ranges_[i].second, other.ranges_[j].second);
    if (lo <= hi) out.ranges_.emplace_back(lo, hi);
    if (ranges_[i].second < other.ranges_[j].second) {
      ++i;
    } else {
      ++j;
    }
  }
  return out;
}

bool CodepointSet::Contains(uint32_t cp) const {
  auto it = std::upper_bound(ranges_.begin(), ranges_.end(), cp,
                             [](uint32_t v, const std::pair<uint32_t, uint32_t>& r) { return v < r.first; });
  return it != ranges_.begin() && std::prev(it)->second >= cp;
}

namespace {

int EncodedLength(uint32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

std::array<uint8_t, 4> Encode(uint32_t cp, int n) {
  std::array<uint8_t, 4> b{};
  if (n == 1) {
    b[0] = static_cast<uint8_t>(cp);
  } else {
    static const uint8_t kLead[] = {0, 0, 0xC0, 0xE0, 0xF0};
    for (int i = n - 1; i > 0; --i) {
      b[static_cast<size_t>(i)] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
      cp >>= 6;
    }
    b[0] = static_cast<uint8_t>(kLead[n] | cp);
  }
  return b;
}

// Splits [lo, hi] (same encoded length n) until each piece's encodings are a product of byte
// ranges: bytes k of lo's and hi's encodings bound byte k of every member. The classic split: a
// piece whose low 6*i bits do not span their full range at a boundary is cut there.
void SplitRange(uint32_t lo, uint32_t hi, int n, std::vector<std::pair<uint32_t, uint32_t>>* out) {
  for (int i = 1; i < n; ++i) {
    uint32_t m = (uint32_t{1} << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        SplitRange(lo, lo | m, n, out);
        SplitRange((lo | m) + 1, hi, n, out);
        return;
      }
      if ((hi & m) != m) {
        SplitRange(lo, (hi & ~m) - 1, n, out);
        SplitRange(hi & ~m, hi, n, out);
        return;
      }
    }
  }
  out->emplace_back(lo, hi);
}

}  // namespace

ExprId Utf8Expr(Grammar* g, const CodepointSet& set) {
  // Surrogates (U+D800..U+DFFF) cannot be encoded in valid UTF-8.
  CodepointSet valid = set.Minus(CodepointSet::Range(0xD800, 0xDFFF));
  std::vector<ExprId> alts;
  ByteSet ascii;
  static const uint32_t kLengthStart[] = {0, 0x80, 0x800, 0x10000, 0x110000};
  for (const auto& r : valid.ranges()) {
    for (int n = EncodedLength(r.first); n <= 4 && kLengthStart[n - 1] <= r.second; ++n) {
      uint32_t lo = std::max(r.first, kLengthStart[n - 1]);
      uint32_t hi = std::min(r.second, kLengthStart[n] - 1);
      if (lo > hi) continue;
      if (n == 1) {
        ascii.AddRange(static_cast<int>(lo), static_cast<int>(hi));
        continue;
      }
      std::vector<std::pair<uint32_t, uint32_t>> pieces;
      SplitRange(lo, hi, n, &pieces);
      for (const auto& p : pieces) {
        auto a = Encode(p.first, n), b = Encode(p.second, n);
        std::vector<ExprId> seq;
        for (int k = 0; k < n; ++k)
          seq.push_back(g->Bytes(ByteSet::Range(a[static_cast<size_t>(k)], b[static_cast<size_t>(k)])));
        alts.push_back(g->Seq(std::move(seq)));
      }
    }
  }
  if (!ascii.Empty()) alts.insert(alts.begin(), g->Bytes(ascii));
  return g->Alt(std::move(alts));
}

namespace {

// Every code point whose utf8proc category satisfies `pred`, plus the unassigned ones.
template <typename Pred>
CodepointSet CategorySet(Pred pred) {
  CodepointSet s;
  uint32_t run_start = 0;
  bool in_run = false;
  for (uint32_t cp = 0; cp <= kMaxCodepoint + 1; ++cp) {
    bool member = false;
    if (cp <= kMaxCodepoint) {
      auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
      member = cat == UTF8PROC_CATEGORY_CN || pred(cat);
    }
    if (member && !in_run) run_start = cp, in_run = true;
    if (!member && in_run) s.Add(run_start, cp - 1), in_run = false;
  }
  return s;
}

}  // namespace

const CodepointSet& WideDigits() {
  static const CodepointSet s = [] {
    CodepointSet d = CategorySet([](utf8proc_category_t c) { return c == UTF8PROC_CATEGORY_ND; });
    d.Add('0', '9');
    return d;
  }();
  return s;
}

const CodepointSet& WideWordChars() {
  static const CodepointSet s = [] {
    CodepointSet w = CategorySet([](utf8proc_category_t c) {
      return (c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO) ||
             (c >= UTF8PROC_CATEGORY_ND && c <= UTF8PROC_CATEGORY_NO);
    });
    w.Add('0', '9');
    w.Add('A', 'Z');
    w.Add('a', 'z');
    w.Add('_');
    return w;
  }();
  return s;
}

const CodepointSet& WideWhitespace() {
  static const CodepointSet s = [] {
    // ECMAScript's WhiteSpace + LineTerminator and Python's str.isspace(), together.
    CodepointSet w = CategorySet([](utf8proc_category_t c) {
      return c == UTF8PROC_CATEGORY_ZS || c == UTF8PROC_CATEGORY_ZL || c == UTF8PROC_CATEGORY_ZP;
    });
    w.Add('\t', '\r');
    w.Add(0x1C, 0x20);
    w.Add(0x85);
    w.Add(0xA0);
    w.Add(0xFEFF);
    return w;
  }();
  return s;
}

}  // namespace tessera::grammar
