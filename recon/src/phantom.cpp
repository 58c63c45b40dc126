#include "glint/recon/phantom.hpp"

#include <cmath>
#include <random>
#include <stdexcept>

namespace glint::recon {

namespace {
struct Ellipsoid {
  double cx, cy, cz, ax, ay, az;
  float value;
};
// In the unit cube [-1, 1]^3, painted in this order.
constexpr Ellipsoid kEllipsoids[] = {
    {0.00, 0.00, 0.00, 0.80, 0.90, 0.85, 0.5f},   // body
    {0.00, 0.00, 0.00, 0.72, 0.82, 0.77, 0.2f},   // interior
    {-0.30, 0.10, 0.00, 0.18, 0.30, 0.25, 1.0f},  // large inclusions
    {0.30, 0.10, 0.05, 0.15, 0.35, 0.20, 0.8f},
    {0.00, -0.45, 0.10, 0.25, 0.12, 0.15, 0.6f},
    {0.05, 0.45, -0.20, 0.10, 0.10, 0.10, 1.0f},  // small features
    {-0.10, -0.10, 0.45, 0.08, 0.08, 0.12, 0.9f},
    {0.35, -0.35, -0.35, 0.12, 0.08, 0.10, 0.4f},
    {-0.40, -0.30, -0.40, 0.05, 0.05, 0.05, 0.0f},  // a hole
};
}  // namespace

std::vector<float> make_phantom(int n) { return make_phantom(n, n, n); }

std::vector<float> make_phantom(int nx, int ny, int nz) {
  if (nx < 2 || ny < 2 || nz < 2) throw std::invalid_argument("phantom size must be at least 2");
  std::vector<float> v(std::size_t(nx) * ny * nz, 0.0f);
  for (int k = 0; k < nz; ++k)
    for (int j = 0; j < ny; ++j)
      for (int i = 0; i < nx; ++i) {
        const double x = 2.0 * (i + 0.5) / nx - 1, y = 2.0 * (j + 0.5) / ny - 1,
                     z = 2.0 * (k + 0.5) / nz - 1;
        float val = 0.0f;
        for (const auto& e : kEllipsoids) {
          const double dx = (x - e.cx) / e.ax, dy = (y - e.cy) / e.ay, dz = (z - e.cz) / e.az;
          if (dx * dx + dy * dy + dz * dz <= 1.0) val = e.value;
        }
        v[(std::size_t(k) * ny + j) * nx + i] = val;
      }
  return v;
}

void add_noise(std::vector<float>& v, double sigma, std::uint64_t seed) {
  if (sigma <= 0) return;
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> nd(0.0, sigma);
  for (float& f : v) f = static_cast<float>(f + nd(rng));
}

double rmse(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size() || a.empty()) throw std::invalid_argument("rmse: sizes differ");
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double d = double(a[i]) - b[i];
    s += d * d;
  }
  return std::sqrt(s / double(a.size()));
}

}  // namespace glint::recon
