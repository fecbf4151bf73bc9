// tessera loadgen: summary statistics (see stats.h).
#include "loadgen/stats.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace tessera::loadgen {

double PercentileSorted(const std::vector<double>& sorted, double p) {
  TESSERA_CHECK(!sorted.empty() && p >= 0 && p <= 100);
  double rank = p / 100.0 * static_cast<double>(sorted.size() - 1);
  size_t lo = static_cast<size_t>(std::floor(rank));
  size_t hi = std::min(lo + 1, sorted.size() - 1);
  double frac = rank - static_cast<double>(lo);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * frac;
}

Summary Summarize(std::vector<double> values) {
  Summary s;
  if (values.empty()) return s;
  std::sort(values.begin(), values.end());
  s.count = static_cast<int64_t>(values.size());
  double sum = 0;
  for (double v : values) sum += v;
  s.mean = sum / static_cast<double>(values.size());
  double sq = 0;
  for (double v : values) sq += (v - s.mean) * (v - s.mean);
  s.std = std::sqrt(sq / static_cast<double>(values.size()));
  s.median = PercentileSorted(values, 50);
  s.p90 = PercentileSorted(values, 90);
  s.p99 = PercentileSorted(values, 99);
  s.min = values.front();
  s.max = values.back();
  return s;
}

}  // namespace tessera::loadgen
