#include "glint/products/eta_calibration.hpp"

#include <cmath>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

namespace glint::products {

std::vector<double> regular_edges(double min, double max, std::size_t bins) {
  if (bins == 0) throw std::invalid_argument("bin edges: the number of bins must be >= 1");
  if (!(std::isfinite(min) && std::isfinite(max) && min < max))
    throw std::invalid_argument(
        fmt::format("bin edges: the range [{}, {}] must be finite with min < max", min, max));
  // numpy.linspace(min, max, bins + 1): arange(bins + 1) * step + min, last set to max.
  const double step = (max - min) / static_cast<double>(bins);
  std::vector<double> e(bins + 1);
  for (std::size_t i = 0; i < bins; ++i) e[i] = static_cast<double>(i) * step + min;
  e[bins] = max;
  return e;
}

std::size_t last_smaller(std::span<const double> edges, double v) {
  for (std::size_t k = 1; k < edges.size(); ++k)
    if (edges[k] >= v) return k - 1;
  return edges.size() - 1;
}

BinEdges::BinEdges(std::vector<double> edges, const std::string& what) : edges_(std::move(edges)) {
  if (edges_.size() < 2)
    throw std::invalid_argument(
        fmt::format("{}: {} bin edges, at least 2 are needed", what, edges_.size()));
  for (std::size_t i = 0; i < edges_.size(); ++i) {
    if (!std::isfinite(edges_[i]))
      throw std::invalid_argument(fmt::format("{}: edge {} is not finite", what, i));
    if (i > 0 && !(edges_[i - 1] < edges_[i]))
      throw std::invalid_argument(
          fmt::format("{}: edges must increase strictly (edge {} = {} after {})", what, i,
                      edges_[i], edges_[i - 1]));
  }
  scale_ = static_cast<double>(bins()) / (edges_.back() - edges_.front());
  if (!std::isfinite(scale_)) scale_ = 0.0;  // a guess of 0; the walk still finds the bin
}

EtaCube::EtaCube(BinEdges eta_x, BinEdges eta_y, BinEdges energy)
    : x_(std::move(eta_x)), y_(std::move(eta_y)), e_(std::move(energy)) {
  if (x_.edges().empty() || y_.edges().empty() || e_.edges().empty())
    throw std::invalid_argument("eta cube: every axis needs bin edges");
  counts_.assign(nx() * ny() * ne(), 0.0);
}

EtaCube EtaCube::regular(std::size_t bins, double eta_min, double eta_max,
                         std::size_t energy_bins, double energy_min, double energy_max) {
  return EtaCube(BinEdges(regular_edges(eta_min, eta_max, bins), "eta x"),
                 BinEdges(regular_edges(eta_min, eta_max, bins), "eta y"),
                 BinEdges(regular_edges(energy_min, energy_max, energy_bins), "energy"));
}

bool EtaCube::add(double eta_x, double eta_y, double energy) {
  const std::size_t ix = x_.cube_bin(eta_x);
  const std::size_t iy = y_.cube_bin(eta_y);
  const std::size_t ie = e_.cube_bin(energy);
  if (ix >= nx() || iy >= ny() || ie >= ne()) {
    ++outside_;
    return false;
  }
  counts_[(ix * ny() + iy) * ne() + ie] += 1.0;
  ++added_;
  return true;
}

void EtaCube::merge(const EtaCube& other) {
  if (!(x_ == other.x_ && y_ == other.y_ && e_ == other.e_))
    throw std::invalid_argument("eta cube: cannot merge cubes with different bin edges");
  for (std::size_t i = 0; i < counts_.size(); ++i) counts_[i] += other.counts_[i];
  added_ += other.added_;
  outside_ += other.outside_;
}

const char* to_string(EtaMethod m) { return m == EtaMethod::cdf ? "cdf" : "rosenblatt"; }

EtaMethod parse_eta_method(const std::string& s) {
  if (s == "cdf") return EtaMethod::cdf;
  if (s == "rosenblatt") return EtaMethod::rosenblatt;
  throw std::invalid_argument("eta calibration method '" + s +
                              "': allowed are cdf, rosenblatt");
}

namespace {

// aare's Interpolator(etacube, xbins, ybins, ebins): cumulative sums along x (ietax) and y
// (ietay), then each shifted by the first bin's count and divided by the total minus it (1 when
// that is 0). The loops, their order and every operation follow src/Interpolator.cpp.
void cdf_tables(const EtaCube& cube, std::vector<double>& ietax, std::vector<double>& ietay) {
  const std::size_t nx = cube.nx(), ny = cube.ny(), ne = cube.ne();
  auto at = [ny, ne](std::size_t i, std::size_t j, std::size_t k) { return (i * ny + j) * ne + k; };
  const std::span<const double> c = cube.counts();
  ietax.assign(c.begin(), c.end());
  ietay.assign(c.begin(), c.end());
  for (std::size_t i = 0; i < nx; i++)
    for (std::size_t j = 0; j < ny; j++)
      for (std::size_t k = 0; k < ne; k++) {
        ietax[at(i, j, k)] += (i == 0) ? 0 : ietax[at(i - 1, j, k)];
        ietay[at(i, j, k)] += (j == 0) ? 0 : ietay[at(i, j - 1, k)];
      }
  for (std::size_t i = 0; i < nx; i++)
    for (std::size_t j = 0; j < ny; j++)
      for (std::size_t k = 0; k < ne; k++) {
        const double shift_x = c[at(0, j, k)];
        const double val_etax = ietax[at(nx - 1, j, k)] - shift_x;
        const double norm_etax = val_etax == 0 ? 1 : val_etax;
        ietax[at(i, j, k)] -= shift_x;
        ietax[at(i, j, k)] /= norm_etax;
        const double shift_y = c[at(i, 0, k)];
        const double val_etay = ietay[at(i, ny - 1, k)] - shift_y;
        const double norm_etay = val_etay == 0 ? 1 : val_etay;
        ietay[at(i, j, k)] -= shift_y;
        ietay[at(i, j, k)] /= norm_etay;
      }
}

// aare's rosenblatttransform(etacube): the marginal CDF of eta x per energy (its first bin set to
// 0, normalised by its last), repeated over eta y, and the conditional CDF of eta y given eta x
// standardised as in the cdf tables. Loops and operations follow src/Interpolator.cpp, including
// that the marginal's first bin is reset only when there are two or more eta x bins.
void rosenblatt_tables(const EtaCube& cube, std::vector<double>& ietax,
                       std::vector<double>& ietay) {
  const std::size_t nx = cube.nx(), ny = cube.ny(), ne = cube.ne();
  auto at = [ny, ne](std::size_t i, std::size_t j, std::size_t k) { return (i * ny + j) * ne + k; };
  const std::span<const double> c = cube.counts();
  std::vector<double> marg(nx * ne, 0.0);
  auto m = [ne](std::size_t i, std::size_t k) { return i * ne + k; };
  std::vector<double> cond(c.begin(), c.end());
  for (std::size_t i = 0; i < nx; ++i)
    for (std::size_t j = 0; j < ny; ++j)
      for (std::size_t k = 0; k < ne; ++k) {
        marg[m(i, k)] += c[at(i, j, k)];
        cond[at(i, j, k)] += (j == 0) ? 0 : cond[at(i, j - 1, k)];
      }
  for (std::size_t i = 1; i < nx; ++i)
    for (std::size_t k = 0; k < ne; ++k) {
      marg[m(0, k)] = 0.0;
      marg[m(i, k)] += marg[m(i - 1, k)];
    }
  for (std::size_t i = 1; i < nx; ++i)
    for (std::size_t k = 0; k < ne; ++k) {
      const double norm = marg[m(nx - 1, k)] == 0 ? 1 : marg[m(nx - 1, k)];
      marg[m(i, k)] /= norm;
    }
  for (std::size_t i = 0; i < nx; ++i)
    for (std::size_t j = 0; j < ny; ++j)
      for (std::size_t k = 0; k < ne; ++k) {
        const double shift = c[at(i, 0, k)];
        const double norm = (cond[at(i, ny - 1, k)] - shift) == 0
                                ? 1
                                : cond[at(i, ny - 1, k)] - shift;
        cond[at(i, j, k)] -= shift;
        cond[at(i, j, k)] /= norm;
      }
  ietay = std::move(cond);
  ietax.assign(nx * ny * ne, 0.0);
  for (std::size_t i = 0; i < nx; ++i)
    for (std::size_t j = 0; j < ny; ++j)
      for (std::size_t k = 0; k < ne; ++k) ietax[at(i, j, k)] = marg[m(i, k)];
}

}  // namespace

EtaCalibration::EtaCalibration(const EtaCube& cube, EtaMethod method)
    : x_(cube.eta_x()), y_(cube.eta_y()), e_(cube.energy()), method_(method) {
  if (method == EtaMethod::cdf)
    cdf_tables(cube, ietax_, ietay_);
  else
    rosenblatt_tables(cube, ietax_, ietay_);
}

EtaCalibration::EtaCalibration(BinEdges eta_x, BinEdges eta_y, BinEdges energy,
                               std::vector<double> ietax, std::vector<double> ietay,
                               EtaMethod method)
    : x_(std::move(eta_x)), y_(std::move(eta_y)), e_(std::move(energy)),
      ietax_(std::move(ietax)), ietay_(std::move(ietay)), method_(method) {
  const std::size_t n = nx() * ny() * ne();
  if (ietax_.size() != n || ietay_.size() != n)
    throw std::invalid_argument(fmt::format(
        "eta calibration: ietax holds {} and ietay {} values, the edges need {} x {} x {} = {}",
        ietax_.size(), ietay_.size(), nx(), ny(), ne(), n));
}

}  // namespace glint::products
