#pragma once
// The arithmetic of pedestal tracking and photon cluster finding, written once and used by the
// CPU reference, the multi-threaded CPU backend and the GPU kernels, so that all of them compute
// the same bits (docs/cluster-finding.md).
//
// Every operation is an explicit IEEE double multiply, divide, add or subtract (glint/rounded.hpp)
// in the order the specification gives; no two are ever fused.
#include <cmath>
#include <cstdint>

#include "glint/rounded.hpp"

namespace glint::cluster_math {

using rounded::add;
using rounded::div;
using rounded::mul;
using rounded::sub;
/// Correctly rounded square root (double).
GLINT_HD double root(double a) { return rounded::sqrt(a); }

/// Pedestal window length N of the reference (aare's Pedestal default).
inline constexpr uint32_t kDefaultPedestalWindow = 1000;

/// Dark-frame push: accumulate until the window is full, then a running update.
/// Returns the new cached mean (sum / count).
GLINT_HD double dark_push(double& sum, double& sum2, uint32_t& count, double v, uint32_t window) {
  const double n = static_cast<double>(window);
  if (count < window) {
    sum = add(sum, v);
    sum2 = add(sum2, mul(v, v));
    ++count;
  } else {
    sum = add(sum, sub(v, div(sum, n)));
    sum2 = add(sum2, sub(mul(v, v), div(sum2, n)));
  }
  return div(sum, static_cast<double>(count));
}

/// Fast push during data frames: running update, count unchanged. Returns the new mean (sum / N).
GLINT_HD double fast_push(double& sum, double& sum2, double v, uint32_t window) {
  const double n = static_cast<double>(window);
  sum = add(sum, sub(v, div(sum, n)));
  sum2 = add(sum2, sub(mul(v, v), div(sum2, n)));
  return div(sum, n);
}

/// Mean as cached by the reference after a dark push (sum / count, 0 for an empty pixel).
GLINT_HD double mean_of(double sum, uint32_t count) {
  return count == 0 ? 0.0 : div(sum, static_cast<double>(count));
}

/// variance = sum2/count - mean*mean with the cached mean; 0 when count == 0.
GLINT_HD double variance_of(double sum2, uint32_t count, double mean) {
  if (count == 0) return 0.0;
  return sub(div(sum2, static_cast<double>(count)), mul(mean, mean));
}

/// rms noise; NaN for a (slightly) negative variance, as in the reference.
GLINT_HD double noise_of(double sum2, uint32_t count, double mean) {
  return root(variance_of(sum2, count, mean));
}

/// What the finder does with one pixel of a data frame (docs/cluster-finding.md, steps 2 and 4).
enum class PixelAction : uint8_t {
  skip_negative = 0,  ///< v < -n*rms: no pedestal update
  update = 1,         ///< not a photon: fast push of the pixel's value
  skip_not_max = 2,   ///< a window pixel exceeds n*rms and is larger than this one: no update
  candidate = 3,      ///< photon candidate: no update; stored when v == max
};

/// Thresholds of one finder configuration, precomputed exactly as the reference forms them.
struct Thresholds {
  double neg_n;    ///< (-n)
  double n;        ///< n
  double c3_n;     ///< (c3 * n), c3 = sqrt(S*S)
};

GLINT_HD Thresholds make_thresholds(double n_sigma, int cluster_size) {
  const double c3 = root(static_cast<double>(cluster_size * cluster_size));
  return Thresholds{-n_sigma, n_sigma, mul(c3, n_sigma)};
}

/// Step 2: true when the pixel is a negative outlier (no update, no cluster).
GLINT_HD bool is_negative_outlier(double v, double rms, const Thresholds& t) {
  return v < mul(t.neg_n, rms);
}

/// Step 4, given the window's total and max (max starts at 0.0, total at 0.0, summed row-major
/// over the in-frame window pixels).
GLINT_HD PixelAction classify(double v, double rms, double total, double max, const Thresholds& t) {
  if (max > mul(t.n, rms)) {
    if (v < max) return PixelAction::skip_not_max;
    return PixelAction::candidate;
  }
  if (total > mul(t.c3_n, rms)) return PixelAction::candidate;
  return PixelAction::update;
}

/// Cluster entry: lround(double(f) - mean), halves away from zero, as int32.
GLINT_HD int32_t cluster_value(double d) {
#if defined(__CUDA_ARCH__)
  return static_cast<int32_t>(llround(d));
#else
  return static_cast<int32_t>(std::lround(d));
#endif
}

}  // namespace glint::cluster_math
