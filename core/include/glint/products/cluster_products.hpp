#pragma once
// What one cluster adds to the products of a run, written once for the CPU accumulator
// (ProductSums) and the GPU's kernel: the energy and its window, the spectrum's bin, the eta2 and
// eta3 bins and the sub-pixel position through the eta calibration, each from the shared
// host-and-device arithmetic (cluster_quantities.hpp, accumulate.hpp, eta_calibration.hpp).
// Where the counts go is the caller's: a sink (plain increments on the CPU, integer atomics on
// the GPU), so both count the same clusters in the same bins.
#include <cstddef>
#include <cstdint>

#include "glint/detail/hd.hpp"
#include "glint/products/accumulate.hpp"
#include "glint/products/cluster_quantities.hpp"
#include "glint/products/eta_calibration.hpp"

namespace glint::products {

/// A BinTable as the per-cluster code reads it (its edges in host or device memory).
struct BinsView {
  const double* edges = nullptr;  ///< bins + 1
  double lo = 0.0, hi = 1.0, scale = 1.0;
  int64_t bins = 1;
  bool closed = false;
  GLINT_HD int64_t bin(double v) const {
    return detail::table_bin(v, lo, hi, scale, bins, closed, edges);
  }
};

/// The settings and lookup tables one cluster's products need (pointers into host or device
/// memory).
struct ClusterProductsView {
  uint32_t rows = 0, cols = 0;
  bool quadrant = false;  ///< energy: the largest 2 x 2 sum (else the S x S sum)
  double emin = 0.0, emax = 0.0;
  BinsView spectrum;
  bool eta = false;
  BinsView eta2, eta3;
  int64_t eta_bins = 0;
  bool subpixel = false;  ///< with the eta calibration below
  detail::AxisView cal_x, cal_y, cal_e;
  const double* ietax = nullptr;
  const double* ietay = nullptr;
};

/// Adds the cluster at column x, row y with values v (size x size, as T) to `sink`; false when
/// it is not counted (off the frame, or outside the energy window). The sink's calls:
///   counted(pixel, energy)   the cluster counts: clusters, hit map, energy image (fixed_energy),
///                            slice
///   spectrum_bin(bin, pixel) spectrum bin (and the pixel's spectrum); underflow(), overflow()
///   eta2_bin(index), eta2_outside(), eta3_bin(index), eta3_outside()
///                            (index: y bin * eta_bins + x bin)
///   photon(x, y)             the sub-pixel position (pixel units); subpixel_outside() when the
///                            eta or the 2 x 2 sum falls outside the calibration
template <typename T, typename Sink>
GLINT_HD bool add_cluster(const ClusterProductsView& p, const T* v, int size, uint32_t x,
                          uint32_t y, Sink& sink) {
  if (x >= p.cols || y >= p.rows) return false;  // not a pixel of these frames: never counted
  const bool need_eta2 = p.eta || p.subpixel;
  Eta<T> e2{};
  if (need_eta2) e2 = eta2(v, size);
  T e;
  if (p.quadrant) e = need_eta2 ? e2.sum : max_quadrant(v, size).sum;
  else e = cluster_sum(v, size);
  const double ed = static_cast<double>(e);
  if (!(ed >= p.emin && ed <= p.emax)) return false;
  const std::size_t pixel = static_cast<std::size_t>(y) * p.cols + x;
  sink.counted(pixel, detail::fixed_energy(e));
  const int64_t b = p.spectrum.bin(ed);
  if (b < 0) sink.underflow();
  else if (b >= p.spectrum.bins) sink.overflow();
  else sink.spectrum_bin(static_cast<std::size_t>(b), pixel);
  if (p.eta) {
    const int64_t n = p.eta_bins;
    const int64_t bx = p.eta2.bin(e2.x), by = p.eta2.bin(e2.y);
    if (bx < 0 || by < 0 || bx >= n || by >= n) sink.eta2_outside();
    else sink.eta2_bin(static_cast<std::size_t>(by * n + bx));
    const Eta<T> e3 = eta3(v, size);
    const int64_t cx = p.eta3.bin(e3.x), cy = p.eta3.bin(e3.y);
    if (cx < 0 || cy < 0 || cx >= n || cy >= n) sink.eta3_outside();
    else sink.eta3_bin(static_cast<std::size_t>(cy * n + cx));
  }
  if (p.subpixel) {
    // EtaCalibration::position (Interpolator::interpolate<calculate_eta2>).
    std::size_t t = 0;
    if (detail::calibration_index(p.cal_x, p.cal_y, p.cal_e, e2.x, e2.y,
                                  static_cast<double>(e2.sum), t)) {
      double dx = 0.0, dy = 0.0;
      detail::corner_offset(e2.corner, dx, dy);
      sink.photon(detail::eta2_coordinate(static_cast<uint16_t>(x), p.ietax[t], dx),
                  detail::eta2_coordinate(static_cast<uint16_t>(y), p.ietay[t], dy));
    } else {
      sink.subpixel_outside();
    }
  }
  return true;
}

}  // namespace glint::products
