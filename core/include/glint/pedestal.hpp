#pragma once
// Per-pixel pedestal state: what the finder carries from frame to frame.
#include <cstdint>
#include <vector>

#include "glint/frame.hpp"

namespace glint {

/// The complete running state of every pixel (sum, sum of squares, sample count), from which
/// mean and noise follow exactly as the reference computes them. Host-side, for snapshots,
/// hand-over between runs and tests; backends keep their own layout.
struct PedestalState {
  FrameShape shape{};
  uint32_t window = 1000;
  std::vector<double> sum;
  std::vector<double> sum2;
  std::vector<uint32_t> count;

  PedestalState() = default;
  PedestalState(FrameShape s, uint32_t window_length);

  /// Cached mean of pixel i (sum / count).
  double mean(std::size_t i) const;
  /// rms noise of pixel i (NaN where rounding made the variance negative, as in the reference).
  double noise(std::size_t i) const;
  std::vector<double> means() const;
  std::vector<double> noises() const;
  /// Smallest count over all pixels: the number of dark frames every pixel has seen, capped at
  /// the window.
  uint32_t min_count() const;

  friend bool operator==(const PedestalState&, const PedestalState&) = default;
};

}  // namespace glint
