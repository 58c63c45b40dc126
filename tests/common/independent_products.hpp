#pragma once
// The products of a run computed plainly from its clusters, one cluster at a time, for the
// tests to compare glint's accumulators and files against: every sum written out, every bin
// found by scanning the edges (edge i = lo + (hi - lo) * i / bins, v in [edge i, edge i+1)).
// Only the eta values themselves come from cluster_quantities.hpp (aare's definitions, checked
// against aare in their own tests).
#include <bit>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "glint/cluster_table.hpp"
#include "glint/products/cluster_quantities.hpp"
#include "glint/products/eta_calibration.hpp"

namespace glint::testing {

struct PlainProductParams {
  uint32_t rows = 0, cols = 0;
  bool calibrated = false;
  bool quadrant = false;  ///< the energy is the largest 2 x 2 sum (else the 3 x 3 sum)
  double emin = -INFINITY, emax = INFINITY;
  double spectrum_lo = 0, spectrum_hi = 2000;
  uint32_t spectrum_bins = 500;
  uint32_t eta_bins = 100;
  uint32_t slice_frames = 0;
  /// The sub-pixel image's calibration (null: none) and sub-pixels per pixel and axis.
  const products::EtaCalibration* calibration = nullptr;
  uint32_t subpixel_factor = 5;
};

struct PlainProducts {
  uint64_t clusters = 0, frames = 0;
  std::vector<uint64_t> hitmap;
  std::vector<double> energy_image;  ///< sums of exact integers (ADU, micro-keV) / scale
  std::vector<uint64_t> spectrum;
  uint64_t underflow = 0, overflow = 0;
  std::vector<uint32_t> pixel_spectra;
  std::vector<uint64_t> eta2, eta3;
  uint64_t eta2_outside = 0, eta3_outside = 0;
  std::map<uint64_t, std::vector<uint32_t>> slices;  ///< slice index -> rows x cols
  std::vector<uint64_t> subpixel;  ///< (rows f) x (cols f), with a calibration
  uint64_t subpixel_outside = 0;       ///< eta outside the calibration
  uint64_t subpixel_off_detector = 0;  ///< positions off the detector
};

/// The bin of v over [lo, hi) (closed: [lo, hi]) by scanning: -1 below, bins above.
inline int64_t plain_bin(double v, double lo, double hi, uint32_t bins, bool closed) {
  if (closed && v == hi) return bins - 1;
  for (uint32_t i = 0; i < bins; ++i) {
    const double a = lo + (hi - lo) * i / bins;
    const double b = i + 1 == bins ? hi : lo + (hi - lo) * (i + 1) / bins;
    if (v >= a && v < b) return i;
  }
  return v < lo ? int64_t{-1} : int64_t{bins};
}

/// 3 x 3 clusters only. `origin`: the first data frame number (slices).
inline PlainProducts plain_products(const ClusterTable& t, const PlainProductParams& p,
                                    uint64_t origin) {
  PlainProducts out;
  const std::size_t pixels = std::size_t{p.rows} * p.cols;
  out.hitmap.assign(pixels, 0);
  std::vector<int64_t> energy(pixels, 0);
  out.spectrum.assign(p.spectrum_bins, 0);
  out.pixel_spectra.assign(pixels * p.spectrum_bins, 0);
  out.eta2.assign(std::size_t{p.eta_bins} * p.eta_bins, 0);
  out.eta3.assign(std::size_t{p.eta_bins} * p.eta_bins, 0);
  out.frames = t.n_frames();
  if (p.calibration) out.subpixel.assign(pixels * p.subpixel_factor * p.subpixel_factor, 0);
  for (const FrameRecord& r : t.frames()) {
    for (uint64_t i = r.first_cluster; i < r.first_cluster + r.n_clusters; ++i) {
      const auto d = t.cluster_data(i);
      double e = 0;
      int64_t fixed = 0;
      double e2x = 0, e2y = 0, e3x = 0, e3y = 0;
      std::optional<products::Photon> photon;  // with a calibration: the eta2 position
      bool have_photon = false;
      if (p.calibrated) {
        float v[9];
        for (int k = 0; k < 9; ++k) v[k] = std::bit_cast<float>(d[k]);
        float sum = 0.0f;
        for (int k = 0; k < 9; ++k) sum = sum + v[k];
        const float q[4] = {((v[0] + v[1]) + v[3]) + v[4], ((v[1] + v[2]) + v[4]) + v[5],
                            ((v[3] + v[4]) + v[6]) + v[7], ((v[4] + v[5]) + v[7]) + v[8]};
        float best = q[0];
        for (int k = 1; k < 4; ++k) best = best < q[k] ? q[k] : best;
        const float ef = p.quadrant ? best : sum;
        e = ef;
        fixed = std::llround(static_cast<double>(ef) * 1e6);
        const auto a = products::eta2(v, 3);
        const auto b = products::eta3(v, 3);
        e2x = a.x, e2y = a.y, e3x = b.x, e3y = b.y;
        if (p.calibration) photon = p.calibration->position(t.x()[i], t.y()[i], a);
      } else {
        const int32_t* v = d.data();
        int32_t sum = 0;
        for (int k = 0; k < 9; ++k) sum += v[k];
        const int32_t q[4] = {v[0] + v[1] + v[3] + v[4], v[1] + v[2] + v[4] + v[5],
                              v[3] + v[4] + v[6] + v[7], v[4] + v[5] + v[7] + v[8]};
        int32_t best = q[0];
        for (int k = 1; k < 4; ++k) best = best < q[k] ? q[k] : best;
        const int32_t ei = p.quadrant ? best : sum;
        e = ei;
        fixed = ei;
        const auto a = products::eta2(v, 3);
        const auto b = products::eta3(v, 3);
        e2x = a.x, e2y = a.y, e3x = b.x, e3y = b.y;
        if (p.calibration) photon = p.calibration->position(t.x()[i], t.y()[i], a);
      }
      have_photon = photon.has_value();
      if (e < p.emin || e > p.emax) continue;
      ++out.clusters;
      const std::size_t px = std::size_t{t.y()[i]} * p.cols + t.x()[i];
      ++out.hitmap[px];
      energy[px] += fixed;
      if (p.slice_frames > 0) {
        auto& s = out.slices[(r.frame_number - origin) / p.slice_frames];
        if (s.empty()) s.assign(pixels, 0);
        ++s[px];
      }
      const int64_t b = plain_bin(e, p.spectrum_lo, p.spectrum_hi, p.spectrum_bins, false);
      if (b < 0) {
        ++out.underflow;
      } else if (b >= p.spectrum_bins) {
        ++out.overflow;
      } else {
        ++out.spectrum[b];
        ++out.pixel_spectra[px * p.spectrum_bins + b];
      }
      const int64_t x2 = plain_bin(e2x, 0, 1, p.eta_bins, true);
      const int64_t y2 = plain_bin(e2y, 0, 1, p.eta_bins, true);
      if (x2 < 0 || y2 < 0 || x2 >= p.eta_bins || y2 >= p.eta_bins) ++out.eta2_outside;
      else ++out.eta2[y2 * p.eta_bins + x2];
      const int64_t x3 = plain_bin(e3x, -1, 1, p.eta_bins, true);
      const int64_t y3 = plain_bin(e3y, -1, 1, p.eta_bins, true);
      if (x3 < 0 || y3 < 0 || x3 >= p.eta_bins || y3 >= p.eta_bins) ++out.eta3_outside;
      else ++out.eta3[y3 * p.eta_bins + x3];
      if (p.calibration) {
        if (!have_photon) {
          ++out.subpixel_outside;
          continue;
        }
        // Sub-pixel (r, c) spans [c / f, (c + 1) / f) x [r / f, (r + 1) / f) in pixel units.
        const double f = p.subpixel_factor;
        const double sc = std::floor(photon->x * f), sr = std::floor(photon->y * f);
        const double w = static_cast<double>(p.cols) * f, h = static_cast<double>(p.rows) * f;
        if (!(sc >= 0 && sc < w && sr >= 0 && sr < h)) {
          ++out.subpixel_off_detector;
          continue;
        }
        ++out.subpixel[static_cast<std::size_t>(sr) * static_cast<std::size_t>(w) +
                       static_cast<std::size_t>(sc)];
      }
    }
  }
  out.energy_image.resize(pixels);
  for (std::size_t i = 0; i < pixels; ++i)
    out.energy_image[i] = static_cast<double>(energy[i]) / (p.calibrated ? 1e6 : 1.0);
  return out;
}

}  // namespace glint::testing
