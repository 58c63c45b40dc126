#pragma once
// The eta calibration of sub-pixel positions with aare's Interpolator semantics (ee75030):
// a histogram of eta2 x, eta2 y and the 2 x 2 energy (EtaCube), turned into the tables
// ietax/ietay exactly as aare's Interpolator(etacube, xbins, ybins, ebins) ("cdf") or its
// rosenblatttransform ("rosenblatt") computes them, with the same double operations in the same
// order, and the photon position of a cluster exactly as Interpolator::interpolate.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "glint/detail/hd.hpp"
#include "glint/products/cluster_quantities.hpp"
#include "glint/rounded.hpp"

namespace glint::products {

/// aare's Photon: x (column) and y (row) in pixel units (x = 1.5 is the centre of column 1),
/// and the energy the eta was formed with (the 2 x 2 sum for eta2), as double.
struct Photon {
  double x = 0.0;
  double y = 0.0;
  double energy = 0.0;
};

/// Regular edges over [min, max] in `bins` bins, as numpy.linspace(min, max, bins + 1):
/// edge i = i * ((max - min) / bins) + min for i < bins, edge bins = max. Throws
/// std::invalid_argument unless bins >= 1 and min < max (both finite).
std::vector<double> regular_edges(double min, double max, std::size_t bins);

/// aare's last_smaller(edges, v) (algorithm.hpp), the reference linear scan: the first k >= 1
/// with edges[k] >= v gives k - 1; none gives the last index. So a value at or below edges[1]
/// (also below edges[0]) is bin 0, edges[i] < v <= edges[i + 1] is bin i, and a value above the
/// last edge or NaN gives edges.size() - 1, which aare reports as out of bounds.
std::size_t last_smaller(std::span<const double> edges, double v);

namespace detail {
/// last_smaller for non-decreasing finite edges (n + 1 of them, n >= 1), without the scan: a
/// guess from the regular spacing, then moved to the unique k with (k == 0 || e[k] < v) and
/// v <= e[k + 1], which is what the scan returns for such edges (tests compare both).
/// `scale` is n / (e[n] - e[0]).
GLINT_HD std::size_t last_smaller_fast(const double* e, std::size_t n, double scale, double v) {
  if (!(v <= e[n])) return n;  // above the last edge, or NaN: the scan runs to the end
  const double g = rounded::mul(rounded::sub(v, e[0]), scale);
  std::size_t k = 0;
  if (g >= static_cast<double>(n)) {
    k = n - 1;
  } else if (g > 0.0) {
    k = static_cast<std::size_t>(g);
  }
  while (k > 0 && e[k] >= v) --k;
  while (e[k + 1] < v) ++k;  // stops: v <= e[n]
  return k;
}

/// The bin [e[k], e[k + 1]) holding v (the cube's rule), or n when v is outside [e[0], e[n]) or
/// NaN.
GLINT_HD std::size_t cube_bin(const double* e, std::size_t n, double scale, double v) {
  if (!(v >= e[0] && v < e[n])) return n;
  const double g = rounded::mul(rounded::sub(v, e[0]), scale);
  std::size_t k = g >= static_cast<double>(n) ? n - 1 : static_cast<std::size_t>(g);
  while (k > 0 && e[k] > v) --k;
  while (e[k + 1] <= v) ++k;  // stops: v < e[n]
  return k;
}

/// One axis of a calibration as its lookup reads it: n + 1 edges and n / (e[n] - e[0]).
struct AxisView {
  const double* edges = nullptr;
  std::size_t bins = 0;
  double scale = 0.0;
};

/// EtaCalibration's table index of (eta x, eta y, energy): bins by last_smaller on each axis,
/// (ix * ny + iy) * ne + ie; false when one is out of bounds (aare throws there).
GLINT_HD bool calibration_index(const AxisView& x, const AxisView& y, const AxisView& e,
                                double ex, double ey, double energy, std::size_t& index) {
  const std::size_t ie = last_smaller_fast(e.edges, e.bins, e.scale, energy);
  const std::size_t ix = last_smaller_fast(x.edges, x.bins, x.scale, ex);
  const std::size_t iy = last_smaller_fast(y.edges, y.bins, y.scale, ey);
  if (ix >= x.bins || iy >= y.bins || ie >= e.bins) return false;
  index = (ix * y.bins + iy) * e.bins + ie;
  return true;
}

/// The eta2 position's offset of a corner (top left -1, -1; top right 0, -1; bottom left -1, 0;
/// bottom right 0, 0).
GLINT_HD void corner_offset(Corner c, double& dx, double& dy) {
  dx = (c == Corner::top_left || c == Corner::bottom_left) ? -1.0 : 0.0;
  dy = (c == Corner::top_left || c == Corner::top_right) ? -1.0 : 0.0;
}

/// Interpolator::interpolate<calculate_eta2>'s coordinate: p + 0.5 + table + offset, added in
/// that order.
GLINT_HD double eta2_coordinate(uint16_t p, double table, double offset) {
  return rounded::add(rounded::add(rounded::add(static_cast<double>(p), 0.5), table), offset);
}
}  // namespace detail

/// One axis of bin edges (strictly increasing, finite, at least two) with what the lookups need.
class BinEdges {
 public:
  BinEdges() = default;
  /// Throws std::invalid_argument naming `what` when the edges are not at least two strictly
  /// increasing finite values.
  BinEdges(std::vector<double> edges, const std::string& what);
  std::span<const double> edges() const { return edges_; }
  std::size_t bins() const { return edges_.size() - 1; }
  /// aare's last_smaller (bins() means out of bounds).
  std::size_t last_smaller(double v) const {
    return detail::last_smaller_fast(edges_.data(), bins(), scale_, v);
  }
  /// The cube's bin [e[k], e[k + 1]) of v, bins() when outside.
  std::size_t cube_bin(double v) const {
    return detail::cube_bin(edges_.data(), bins(), scale_, v);
  }
  /// bins() / (last edge - first edge) (0 where that is not finite): the lookups' first guess.
  double scale() const { return scale_; }
  detail::AxisView view() const { return {edges_.data(), bins(), scale_}; }
  bool operator==(const BinEdges& o) const { return edges_ == o.edges_; }

 private:
  std::vector<double> edges_;
  double scale_ = 0.0;
};

/// The joint histogram of eta x, eta y and energy (aare's etacube: first axis eta x, second eta
/// y, third energy), counts as double, row-major (nx, ny, ne). A value v is in bin i of an axis
/// when edge i <= v < edge i + 1; anything outside any axis (or NaN) is counted as outside.
class EtaCube {
 public:
  EtaCube(BinEdges eta_x, BinEdges eta_y, BinEdges energy);
  /// Regular axes: `bins` eta bins over [eta_min, eta_max] on x and y, `energy_bins` over
  /// [energy_min, energy_max].
  static EtaCube regular(std::size_t bins, double eta_min, double eta_max,
                         std::size_t energy_bins, double energy_min, double energy_max);

  /// Adds one cluster's eta2 (x, y and its 2 x 2 sum as the energy). False when outside.
  template <typename T>
  bool add(const Eta<T>& eta) {
    return add(eta.x, eta.y, static_cast<double>(eta.sum));
  }
  bool add(double eta_x, double eta_y, double energy);
  /// Adds another cube's counts; throws std::invalid_argument when the edges differ.
  void merge(const EtaCube& other);

  const BinEdges& eta_x() const { return x_; }
  const BinEdges& eta_y() const { return y_; }
  const BinEdges& energy() const { return e_; }
  std::size_t nx() const { return x_.bins(); }
  std::size_t ny() const { return y_.bins(); }
  std::size_t ne() const { return e_.bins(); }
  std::span<const double> counts() const { return counts_; }
  std::span<double> counts() { return counts_; }
  double count(std::size_t ix, std::size_t iy, std::size_t ie) const {
    return counts_[(ix * ny() + iy) * ne() + ie];
  }
  /// Values added inside the cube, and outside it.
  uint64_t added() const { return added_; }
  uint64_t outside() const { return outside_; }

 private:
  BinEdges x_, y_, e_;
  std::vector<double> counts_;
  uint64_t added_ = 0;
  uint64_t outside_ = 0;
};

enum class EtaMethod : uint8_t {
  cdf,         ///< aare's Interpolator(etacube, xbins, ybins, ebins)
  rosenblatt,  ///< aare's Interpolator(xbins, ybins, ebins) + rosenblatttransform(etacube)
};
/// "cdf" | "rosenblatt".
const char* to_string(EtaMethod m);
/// Throws std::invalid_argument naming the allowed values.
EtaMethod parse_eta_method(const std::string& s);

/// The calibration tables and the sub-pixel position of a cluster.
class EtaCalibration {
 public:
  /// aare's tables from a cube (bit-identical to aare's get_ietax()/get_ietay()).
  EtaCalibration(const EtaCube& cube, EtaMethod method);
  /// Tables as stored (a calibration file): ietax, ietay (nx, ny, ne) row-major; throws
  /// std::invalid_argument when their sizes do not match the edges.
  EtaCalibration(BinEdges eta_x, BinEdges eta_y, BinEdges energy, std::vector<double> ietax,
                 std::vector<double> ietay, EtaMethod method);

  /// Interpolator::interpolate<calculate_eta2> for a cluster at column x, row y whose eta2 is
  /// `eta2`: bins by last_smaller on eta x, eta y and the 2 x 2 sum; nullopt where aare throws
  /// (a value above an axis' last edge, or NaN); else x + 0.5 + ietax + dX, y + 0.5 + ietay + dY
  /// with dX, dY from the corner (top left -1, -1; top right 0, -1; bottom left -1, 0; bottom
  /// right 0, 0), in that order of additions.
  template <typename T>
  std::optional<Photon> position(uint16_t x, uint16_t y, const Eta<T>& eta2) const {
    std::size_t i = 0;
    if (!lookup(eta2.x, eta2.y, static_cast<double>(eta2.sum), i)) return std::nullopt;
    double dx = 0.0, dy = 0.0;
    detail::corner_offset(eta2.corner, dx, dy);
    Photon p;
    p.x = detail::eta2_coordinate(x, ietax_[i], dx);
    p.y = detail::eta2_coordinate(y, ietay_[i], dy);
    p.energy = static_cast<double>(eta2.sum);
    return p;
  }
  /// Interpolator::interpolate with any other eta (aare's else branch, e.g. calculate_eta3 with
  /// a cube of eta3): x + ietax, y + ietay.
  template <typename T>
  std::optional<Photon> position_eta3(uint16_t x, uint16_t y, const Eta<T>& eta3) const {
    std::size_t i = 0;
    if (!lookup(eta3.x, eta3.y, static_cast<double>(eta3.sum), i)) return std::nullopt;
    Photon p;
    p.x = static_cast<double>(x) + ietax_[i];
    p.y = static_cast<double>(y) + ietay_[i];
    p.energy = static_cast<double>(eta3.sum);
    return p;
  }

  EtaMethod method() const { return method_; }
  const BinEdges& eta_x() const { return x_; }
  const BinEdges& eta_y() const { return y_; }
  const BinEdges& energy() const { return e_; }
  std::size_t nx() const { return x_.bins(); }
  std::size_t ny() const { return y_.bins(); }
  std::size_t ne() const { return e_.bins(); }
  /// aare's m_ietax / m_ietay, (nx, ny, ne) row-major.
  std::span<const double> ietax() const { return ietax_; }
  std::span<const double> ietay() const { return ietay_; }

 private:
  /// The flat table index of (eta x, eta y, energy) by last_smaller; false when out of bounds.
  bool lookup(double ex, double ey, double energy, std::size_t& index) const {
    return detail::calibration_index(x_.view(), y_.view(), e_.view(), ex, ey, energy, index);
  }

  BinEdges x_, y_, e_;
  std::vector<double> ietax_, ietay_;
  EtaMethod method_ = EtaMethod::cdf;
};

}  // namespace glint::products
