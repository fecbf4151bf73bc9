// tessera tests: numeric ranges (minimum / maximum / exclusive*) compiled digit by digit, checked
// against plain integer arithmetic on many random bounds and values.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <random>

#include "core/error.h"
#include "grammar_test_util.h"

namespace tessera {
namespace {

using testing::Accepts;

// A decimal with up to 3 fraction digits, as text and as thousandths (exact).
struct Dec {
  long long milli;
  std::string text;
};
Dec RandomDec(std::mt19937& rng, long long range, bool integer) {
  long long whole = static_cast<long long>(rng() % (2 * range + 1)) - range;
  if (integer) return {whole * 1000, std::to_string(whole)};
  int frac = static_cast<int>(rng() % 1000);
  long long milli = whole * 1000 + (whole < 0 ? -frac : frac);
  std::string text = milli < 0 ? "-" : "";
  text += std::to_string(std::llabs(milli) / 1000);
  std::string f = fmt::format("{:03d}", std::llabs(milli) % 1000);
  while (!f.empty() && f.back() == '0') f.pop_back();
  if (!f.empty()) text.append(".").append(f);
  return {milli, text};
}

TEST(GrammarJsonNumbers, IntegerRangesMatchArithmetic) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 40; ++trial) {
    bool has_lo = trial % 4 != 1, has_hi = trial % 4 != 2;
    Dec lo = RandomDec(rng, 1200, trial % 3 == 0 ? false : true),
        hi = RandomDec(rng, 1200, trial % 5 == 0 ? false : true);
    if (has_lo && has_hi && lo.milli > hi.milli) std::swap(lo, hi);
    bool lo_ex = rng() % 2, hi_ex = rng() % 2;
    std::string schema = R"({"type":"integer")";
    if (has_lo) schema += fmt::format(R"(,"{}":{})", lo_ex ? "exclusiveMinimum" : "minimum", lo.text);
    if (has_hi) schema += fmt::format(R"(,"{}":{})", hi_ex ? "exclusiveMaximum" : "maximum", hi.text);
    schema += "}";
    SCOPED_TRACE(schema);
    auto in_range = [&](long long v) {
      long long m = v * 1000;
      return (!has_lo || (lo_ex ? m > lo.milli : m >= lo.milli)) && (!has_hi || (hi_ex ? m < hi.milli : m <= hi.milli));
    };
    bool any = false;
    for (long long v = -1300; v <= 1300; ++v) any = any || in_range(v);
    if (!any) {  // an empty range is an error naming the problem
      EXPECT_THROW(testing::Schema(schema), Error);
      continue;
    }
    auto g = testing::Schema(schema);
    for (long long v = -1300; v <= 1300; ++v) {
      ASSERT_EQ(Accepts(g, std::to_string(v)), in_range(v)) << v;
    }
    // Far outside: many more digits than the bounds.
    EXPECT_EQ(Accepts(g, "123456789012345678901234"), !has_hi);
    EXPECT_EQ(Accepts(g, "-123456789012345678901234"), !has_lo);
  }
}

TEST(GrammarJsonNumbers, DecimalRangesMatchArithmetic) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 30; ++trial) {
    bool has_lo = trial % 3 != 1, has_hi = trial % 3 != 2;
    Dec lo = RandomDec(rng, 20, false), hi = RandomDec(rng, 20, false);
    if (lo.milli > hi.milli) std::swap(lo, hi);
    bool lo_ex = rng() % 2, hi_ex = rng() % 2;
    std::string schema = R"({"type":"number")";
    if (has_lo) schema += fmt::format(R"(,"{}":{})", lo_ex ? "exclusiveMinimum" : "minimum", lo.text);
    if (has_hi) schema += fmt::format(R"(,"{}":{})", hi_ex ? "exclusiveMaximum" : "maximum", hi.text);
    schema += "}";
    SCOPED_TRACE(schema);
    // Bounds parsed back from their text (the ones the schema really holds).
    auto milli_of = [](const std::string& t) { return std::llround(std::stod(t) * 1000); };
    long long a = milli_of(lo.text), b = milli_of(hi.text);
    if (has_lo && has_hi && (a > b || (a == b && (lo_ex || hi_ex)))) continue;
    auto g = testing::Schema(schema);
    int accepted = 0;
    for (int i = 0; i < 3000; ++i) {
      Dec v = RandomDec(rng, 25, false);
      // Also the same value with trailing zeros, and values right at the bounds.
      std::vector<std::pair<long long, std::string>> forms = {{v.milli, v.text}};
      if (v.text.find('.') != std::string::npos) forms.emplace_back(v.milli, v.text + "00");
      if (i % 50 == 0 && has_lo) forms.emplace_back(a, lo.text);
      if (i % 50 == 1 && has_hi) forms.emplace_back(b, hi.text);
      for (const auto& [m, text] : forms) {
        bool want = (!has_lo || (lo_ex ? m > a : m >= a)) && (!has_hi || (hi_ex ? m < b : m <= b));
        ASSERT_EQ(Accepts(g, text), want) << text;
        accepted += want;
      }
    }
    if (has_lo || has_hi) {
      EXPECT_GT(accepted, 0);
    }
  }
}

}  // namespace
}  // namespace tessera
