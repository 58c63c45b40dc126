#pragma once
// The median of measured samples, one definition for the benchmarks and the measured floors.
#include <algorithm>
#include <vector>

namespace glint::detail {

/// The median of `samples` (the mean of the middle two for an even count); 0 if empty.
inline double median(std::vector<double> samples) {
  if (samples.empty()) return 0.0;
  std::sort(samples.begin(), samples.end());
  const std::size_t m = samples.size() / 2;
  return samples.size() % 2 ? samples[m] : 0.5 * (samples[m - 1] + samples[m]);
}

}  // namespace glint::detail
