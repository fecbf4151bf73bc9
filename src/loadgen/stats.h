// tessera loadgen: the summary statistics of a benchmark's latency samples: mean, population
// standard deviation and percentiles by linear interpolation between order statistics (numpy's
// default `np.percentile(..., method="linear")`, which is what `vllm bench serve` reports).
#pragma once

#include <cstdint>
#include <vector>

namespace tessera::loadgen {

// p in [0, 100]; `sorted` ascending and non-empty. rank = p / 100 * (n - 1), interpolated
// between the neighbouring samples.
double PercentileSorted(const std::vector<double>& sorted, double p);

struct Summary {
  int64_t count = 0;
  double mean = 0, std = 0, median = 0, p90 = 0, p99 = 0, min = 0, max = 0;
};

// All zeros (count 0) for an empty sample.
Summary Summarize(std::vector<double> values);

}  // namespace tessera::loadgen
