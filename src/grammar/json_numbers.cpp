// tessera grammar: JSON number expressions and exact digit-wise ranges (see json_numbers.h).
//
// Unsigned integers are canonical digit strings (0 | [1-9][0-9]*). For a bound I with n digits,
// "greater than I" is: more digits than n, or n digits agreeing with I up to some position i and
// larger there; "less than" mirrors it. Fractions compare digit by digit with the shorter side
// padded with zeros. Signed comparisons split into the non-negative and negative halves.
#include "grammar/json_numbers.h"

#include <charconv>
#include <cmath>
#include <vector>

#include "core/error.h"

namespace tessera::grammar {
namespace {

constexpr int kMaxDigits = 15;

ExprId Digit(Grammar* g, int lo, int hi) { return g->Bytes(ByteSet::Range('0' + lo, '0' + hi)); }
ExprId AnyDigits(Grammar* g, int min, int max) { return g->Repeat(Digit(g, 0, 9), min, max); }

// ---- unsigned canonical integers ----

ExprId UAny(Grammar* g) {
  return g->Alt({g->Literal("0"), g->Seq({Digit(g, 1, 9), AnyDigits(g, 0, Grammar::kUnbounded)})});
}

ExprId UGreater(Grammar* g, const std::string& I) {
  const int n = static_cast<int>(I.size());
  std::vector<ExprId> alts{g->Seq({Digit(g, 1, 9), AnyDigits(g, n, Grammar::kUnbounded)})};
  for (int i = 0; i < n; ++i) {
    int d = I[static_cast<size_t>(i)] - '0';
    if (d == 9) continue;
    alts.push_back(g->Seq(
        {g->Literal(I.substr(0, static_cast<size_t>(i))), Digit(g, d + 1, 9), AnyDigits(g, n - i - 1, n - i - 1)}));
  }
  return g->Alt(std::move(alts));
}

// allow_zero: whether "0" itself is in the set.
ExprId ULess(Grammar* g, const std::string& I, bool allow_zero) {
  const int n = static_cast<int>(I.size());
  std::vector<ExprId> alts;
  if (I == "0") return g->Nothing();
  if (n > 1) {
    if (allow_zero) alts.push_back(g->Literal("0"));
    alts.push_back(g->Seq({Digit(g, 1, 9), AnyDigits(g, 0, n - 2)}));
  }
  for (int i = 0; i < n; ++i) {
    int d = I[static_cast<size_t>(i)] - '0';
    int lo = (i == 0 && (n > 1 || !allow_zero)) ? 1 : 0;
    if (d - 1 < lo) continue;
    alts.push_back(g->Seq(
        {g->Literal(I.substr(0, static_cast<size_t>(i))), Digit(g, lo, d - 1), AnyDigits(g, n - i - 1, n - i - 1)}));
  }
  return g->Alt(std::move(alts));
}

// ---- fractions (absent, or '.' digits) compared with 0.F ----

ExprId FracAny(Grammar* g) { return g->Optional(g->Seq({g->Literal("."), AnyDigits(g, 1, Grammar::kUnbounded)})); }

// Digit strings that first differ from F at some i < |F| with a larger (greater) or smaller digit.
ExprId FracDiverge(Grammar* g, const std::string& F, bool greater) {
  std::vector<ExprId> alts;
  for (size_t i = 0; i < F.size(); ++i) {
    int d = F[i] - '0';
    if (greater ? d == 9 : d == 0) continue;
    alts.push_back(g->Seq({g->Literal(F.substr(0, i)), greater ? Digit(g, d + 1, 9) : Digit(g, 0, d - 1),
                           AnyDigits(g, 0, Grammar::kUnbounded)}));
  }
  return g->Alt(std::move(alts));
}

ExprId FracCompare(Grammar* g, const std::string& F, bool greater, bool strict) {
  ExprId dot = g->Literal(".");
  ExprId star = AnyDigits(g, 0, Grammar::kUnbounded);
  ExprId nonzero_tail = g->Seq({star, Digit(g, 1, 9), AnyDigits(g, 0, Grammar::kUnbounded)});
  if (greater) {
    if (F.empty()) return strict ? g->Seq({dot, nonzero_tail}) : FracAny(g);
    // Equal on all of F, then anything (>=) or something non-zero (>).
    ExprId tail = g->Seq({g->Literal(F), strict ? nonzero_tail : star});
    return g->Seq({dot, g->Alt({FracDiverge(g, F, true), tail})});
  }
  if (F.empty()) return strict ? g->Nothing() : g->Optional(g->Seq({dot, g->Plus(g->Literal("0"))}));
  // Smaller: absent, diverging lower, or a proper prefix of F (F has no trailing zeros, so the
  // rest of F is non-zero); <= also takes F itself followed by zeros.
  std::vector<ExprId> body{FracDiverge(g, F, false)};
  for (size_t k = 1; k < F.size(); ++k) body.push_back(g->Literal(F.substr(0, k)));
  if (!strict) body.push_back(g->Seq({g->Literal(F), g->Star(g->Literal("0"))}));
  return g->Optional(g->Seq({dot, g->Alt(std::move(body))}));
}

// Non-negative decimals (unsigned text) compared with |b|.
ExprId NonNegCompare(Grammar* g, const Decimal& b, bool greater, bool strict, bool fractions) {
  const std::string& I = b.int_digits;
  ExprId frac_any = fractions ? FracAny(g) : g->Empty();
  // Integer ranges pass inclusive integer bounds only, so an equal integer part is in range.
  ExprId same_int = fractions ? FracCompare(g, b.frac_digits, greater, strict) : g->Empty();
  ExprId other = greater ? UGreater(g, I) : ULess(g, I, true);
  return g->Alt({g->Seq({other, frac_any}), g->Seq({g->Literal(I), same_int})});
}

// Signed JSON numbers x with x > b (greater, strict), x >= b, x < b, x <= b.
ExprId SignedCompare(Grammar* g, const Decimal& b, bool greater, bool strict, bool fractions) {
  Decimal mag = b;
  mag.negative = false;
  ExprId minus = g->Literal("-");
  ExprId nonneg_any = fractions ? g->Seq({UAny(g), FracAny(g)}) : UAny(g);
  if (greater) {
    if (!b.negative || b.IsZero()) {
      if (b.IsZero() && !strict) return nonneg_any;  // "-0" left out: not needed
      return NonNegCompare(g, mag, true, strict, fractions);
    }
    // x >= -m: every non-negative x, and -y with y <= m (y > m is the strict case's "<").
    return g->Alt({nonneg_any, g->Seq({minus, NonNegCompare(g, mag, false, strict, fractions)})});
  }
  if (b.negative && !b.IsZero()) return g->Seq({minus, NonNegCompare(g, mag, true, strict, fractions)});
  if (b.IsZero() && strict) return g->Seq({minus, NonNegCompare(g, mag, true, true, fractions)});
  return g->Alt({NonNegCompare(g, mag, false, strict, fractions), g->Seq({minus, nonneg_any})});
}

// Digit-string arithmetic for integer bounds.
std::string IncrementDigits(std::string s) {
  int i = static_cast<int>(s.size()) - 1;
  while (i >= 0 && s[static_cast<size_t>(i)] == '9') s[static_cast<size_t>(i--)] = '0';
  if (i < 0) return "1" + s;
  ++s[static_cast<size_t>(i)];
  return s;
}
std::string DecrementDigits(std::string s) {  // s > 0
  int i = static_cast<int>(s.size()) - 1;
  while (s[static_cast<size_t>(i)] == '0') s[static_cast<size_t>(i--)] = '9';
  --s[static_cast<size_t>(i)];
  size_t nz = s.find_first_not_of('0');
  return nz == std::string::npos ? "0" : s.substr(nz);
}
Decimal AddOne(Decimal x) {
  if (!x.negative) return Decimal{false, IncrementDigits(x.int_digits), ""};
  std::string m = DecrementDigits(x.int_digits);
  return Decimal{m != "0", m, ""};
}
Decimal SubOne(Decimal x) {
  if (x.negative || x.IsZero()) return Decimal{true, IncrementDigits(x.int_digits), ""};
  return Decimal{false, DecrementDigits(x.int_digits), ""};
}

// The least integer >= lo (or > lo), the greatest <= hi (or < hi).
Decimal IntegerAtLeast(const NumberBound& b) {
  Decimal x = b.value;
  if (!x.IsInteger()) {
    x.frac_digits.clear();
    return x.negative ? (x.int_digits == "0" ? Decimal{} : x) : AddOne(x);  // ceil
  }
  return b.exclusive ? AddOne(x) : x;
}
Decimal IntegerAtMost(const NumberBound& b) {
  Decimal x = b.value;
  if (!x.IsInteger()) {
    x.frac_digits.clear();
    if (!x.negative) return x;  // floor of a positive non-integer
    return x.int_digits == "0" ? Decimal{true, "1", ""} : SubOne(x);
  }
  return b.exclusive ? SubOne(x) : x;
}

}  // namespace

Decimal Decimal::FromDouble(double v) {
  if (!std::isfinite(v)) Fail(ErrorKind::kInvalidArgument, "a numeric bound is not finite");
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), v);
  std::string s(buf, res.ptr);
  Decimal d;
  size_t i = 0;
  if (s[i] == '-') d.negative = true, ++i;
  std::string mant;
  int point = -1, exp = 0;
  for (; i < s.size() && s[i] != 'e'; ++i) {
    if (s[i] == '.') {
      point = static_cast<int>(mant.size());
    } else {
      mant += s[i];
    }
  }
  if (i < s.size()) exp = std::stoi(s.substr(i + 1));
  if (point < 0) point = static_cast<int>(mant.size());
  point += exp;  // the decimal point sits after `point` digits of mant
  std::string ip, fp;
  if (point <= 0) {
    ip = "0";
    fp = std::string(static_cast<size_t>(-point), '0') + mant;
  } else if (point >= static_cast<int>(mant.size())) {
    ip = mant + std::string(static_cast<size_t>(point) - mant.size(), '0');
  } else {
    ip = mant.substr(0, static_cast<size_t>(point));
    fp = mant.substr(static_cast<size_t>(point));
  }
  size_t nz = ip.find_first_not_of('0');
  d.int_digits = nz == std::string::npos ? "0" : ip.substr(nz);
  while (!fp.empty() && fp.back() == '0') fp.pop_back();
  d.frac_digits = fp;
  if (d.IsZero()) d.negative = false;
  return d;
}

Decimal Decimal::FromInt(long long v) {
  if (v >= 0) return FromUint(static_cast<unsigned long long>(v));
  Decimal d = FromUint(static_cast<unsigned long long>(-(v + 1)) + 1);
  d.negative = true;
  return d;
}

Decimal Decimal::FromUint(unsigned long long v) { return Decimal{false, std::to_string(v), ""}; }

std::string Decimal::ToString() const {
  return (negative ? "-" : "") + int_digits + (frac_digits.empty() ? "" : "." + frac_digits);
}

int CompareDecimals(const Decimal& a, const Decimal& b) {
  bool an = a.negative && !a.IsZero(), bn = b.negative && !b.IsZero();
  if (an != bn) return an ? -1 : 1;
  int mag;
  if (a.int_digits.size() != b.int_digits.size()) {
    mag = a.int_digits.size() < b.int_digits.size() ? -1 : 1;
  } else if (a.int_digits != b.int_digits) {
    mag = a.int_digits < b.int_digits ? -1 : 1;
  } else {
    size_t n = std::max(a.frac_digits.size(), b.frac_digits.size());
    std::string fa = a.frac_digits + std::string(n - a.frac_digits.size(), '0');
    std::string fb = b.frac_digits + std::string(n - b.frac_digits.size(), '0');
    mag = fa == fb ? 0 : (fa < fb ? -1 : 1);
  }
  return an ? -mag : mag;
}

ExprId JsonIntegerExpr(Grammar* g) { return g->Seq({g->Optional(g->Literal("-")), UAny(g)}); }

ExprId JsonNumberExpr(Grammar* g) {
  ExprId exp = g->Optional(g->Seq({g->Bytes(ByteSet::Single('e') | ByteSet::Single('E')),
                                   g->Optional(g->Bytes(ByteSet::Single('+') | ByteSet::Single('-'))),
                                   AnyDigits(g, 1, Grammar::kUnbounded)}));
  return g->Seq({g->Optional(g->Literal("-")), UAny(g), FracAny(g), exp});
}

ExprId IntegerRangeExpr(Grammar* g, const std::optional<NumberBound>& lo, const std::optional<NumberBound>& hi,
                        const AutomatonLimits& limits, const std::string& what) {
  std::optional<Decimal> a, b;
  if (lo) a = IntegerAtLeast(*lo);
  if (hi) b = IntegerAtMost(*hi);
  if (a && b && CompareDecimals(*a, *b) > 0)
    Fail(ErrorKind::kInvalidArgument, "{}: no integer lies between the minimum and the maximum", what);
  ExprId ge = a ? SignedCompare(g, *a, true, false, false) : -1;
  ExprId le = b ? SignedCompare(g, *b, false, false, false) : -1;
  if (ge >= 0 && le >= 0) return IntersectExprs(g, ge, le, limits, what);
  if (ge >= 0) return ge;
  if (le >= 0) return le;
  return JsonIntegerExpr(g);
}

ExprId NumberRangeExpr(Grammar* g, const std::optional<NumberBound>& lo, const std::optional<NumberBound>& hi,
                       const AutomatonLimits& limits, const std::string& what) {
  if (!lo && !hi) return JsonNumberExpr(g);
  // At most kMaxDigits digits in all, no exponent.
  std::vector<ExprId> shapes;
  for (int i = 1; i <= kMaxDigits; ++i) {
    ExprId ip = i == 1 ? Digit(g, 0, 9) : g->Seq({Digit(g, 1, 9), AnyDigits(g, i - 1, i - 1)});
    ExprId fp = i < kMaxDigits ? g->Optional(g->Seq({g->Literal("."), AnyDigits(g, 1, kMaxDigits - i)})) : g->Empty();
    shapes.push_back(g->Seq({ip, fp}));
  }
  ExprId acc = g->Seq({g->Optional(g->Literal("-")), g->Alt(std::move(shapes))});
  if (lo) acc = IntersectExprs(g, acc, SignedCompare(g, lo->value, true, lo->exclusive, true), limits, what);
  if (hi) acc = IntersectExprs(g, acc, SignedCompare(g, hi->value, false, hi->exclusive, true), limits, what);
  if (g->expr(acc).kind == ExprKind::kNothing)
    Fail(ErrorKind::kInvalidArgument, "{}: no number lies between the minimum and the maximum", what);
  return acc;
}

}  // namespace tessera::grammar
