#pragma once
// An independent solver for constrained isotropic TV denoising, written separately from glint's
// FGP arithmetic: Chambolle-Pock primal-dual iterations in double,
//   min_x 1/2 ||x - b||^2 + w sum_i |(D x)_i|  (subject to x >= 0 when nonneg),
// D the forward differences with zero on the last face. Run to convergence it gives the unique
// minimiser that FGP must reach.
#include <algorithm>
#include <cmath>
#include <vector>

#include "glint/tv/reconstructor.hpp"

namespace glint::testing {

inline std::vector<double> chambolle_pock_tv(const tv::Dims& d, const std::vector<float>& b,
                                             double w, bool nonneg, int iterations) {
  const std::size_t n = d.voxels();
  auto idx = [&](int i, int j, int k) { return (std::size_t(k) * d.ny + j) * d.nx + i; };
  std::vector<double> x(n), xbar(n), px(n, 0.0), py(n, 0.0), pz(n, 0.0), bd(b.begin(), b.end());
  for (std::size_t i = 0; i < n; ++i) x[i] = xbar[i] = nonneg ? std::max(0.0, bd[i]) : bd[i];
  const double L = std::sqrt(12.0);
  const double tau = 0.99 / L, sigma = 0.99 / L;
  for (int it = 0; it < iterations; ++it) {
    // Dual ascent on p, projected onto |p| <= w.
    for (int k = 0; k < d.nz; ++k)
      for (int j = 0; j < d.ny; ++j)
        for (int i = 0; i < d.nx; ++i) {
          const std::size_t c = idx(i, j, k);
          const double gx = i + 1 < d.nx ? xbar[idx(i + 1, j, k)] - xbar[c] : 0.0;
          const double gy = j + 1 < d.ny ? xbar[idx(i, j + 1, k)] - xbar[c] : 0.0;
          const double gz = k + 1 < d.nz ? xbar[idx(i, j, k + 1)] - xbar[c] : 0.0;
          double qx = px[c] + sigma * gx, qy = py[c] + sigma * gy, qz = pz[c] + sigma * gz;
          const double nrm = std::sqrt(qx * qx + qy * qy + qz * qz);
          const double s = nrm > w ? w / nrm : 1.0;
          px[c] = qx * s;
          py[c] = qy * s;
          pz[c] = qz * s;
        }
    // Primal descent: x - tau D^T p, then the prox of 1/2||x-b||^2 (+ x >= 0).
    for (int k = 0; k < d.nz; ++k)
      for (int j = 0; j < d.ny; ++j)
        for (int i = 0; i < d.nx; ++i) {
          const std::size_t c = idx(i, j, k);
          // (D^T p)_c = sum_a p_a(c - e_a) - p_a(c), with p_a = 0 on the last face.
          double dt = 0;
          dt += (i > 0 ? px[idx(i - 1, j, k)] : 0.0) - (i + 1 < d.nx ? px[c] : 0.0);
          dt += (j > 0 ? py[idx(i, j - 1, k)] : 0.0) - (j + 1 < d.ny ? py[c] : 0.0);
          dt += (k > 0 ? pz[idx(i, j, k - 1)] : 0.0) - (k + 1 < d.nz ? pz[c] : 0.0);
          const double v = x[c] - tau * dt;
          double xn = (v + tau * bd[c]) / (1.0 + tau);
          if (nonneg) xn = std::max(0.0, xn);
          xbar[c] = 2.0 * xn - x[c];
          x[c] = xn;
        }
  }
  return x;
}

/// 1/2 ||x - b||^2 + w TV(x) in double.
inline double tv_denoise_objective(const tv::Dims& d, const std::vector<double>& x,
                                   const std::vector<float>& b, double w) {
  auto idx = [&](int i, int j, int k) { return (std::size_t(k) * d.ny + j) * d.nx + i; };
  double f = 0;
  for (int k = 0; k < d.nz; ++k)
    for (int j = 0; j < d.ny; ++j)
      for (int i = 0; i < d.nx; ++i) {
        const std::size_t c = idx(i, j, k);
        const double gx = i + 1 < d.nx ? x[idx(i + 1, j, k)] - x[c] : 0.0;
        const double gy = j + 1 < d.ny ? x[idx(i, j + 1, k)] - x[c] : 0.0;
        const double gz = k + 1 < d.nz ? x[idx(i, j, k + 1)] - x[c] : 0.0;
        f += 0.5 * (x[c] - b[c]) * (x[c] - b[c]) + w * std::sqrt(gx * gx + gy * gy + gz * gz);
      }
  return f;
}

}  // namespace glint::testing
