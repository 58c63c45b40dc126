#include "glint/recon/forward_model.hpp"

#include <cmath>
#include <numbers>
#include <stdexcept>
#include <string>

#include <fmt/format.h>

#include "glint/recon/fftw.hpp"
#include "glint/tv/forward_spec.hpp"
#include "glint/recon/volume_io.hpp"

namespace glint::recon {

namespace {

/// Signed frequency in cycles per voxel of index k on an axis of n samples.
double freq(int k, int n) { return (k <= n / 2 ? k : k - n) / double(n); }

}  // namespace

tv::TransferFunction gaussian_transfer(const tv::Dims& d, double sx, double sy, double sz) {
  tv::TransferFunction H;
  const int hx = d.nx / 2 + 1;
  H.h.resize(d.spectrum_size());
  const double c = 2.0 * std::numbers::pi * std::numbers::pi;
  for (int z = 0; z < d.nz; ++z)
    for (int y = 0; y < d.ny; ++y)
      for (int x = 0; x < hx; ++x) {
        const double fx = x / double(d.nx), fy = freq(y, d.ny), fz = freq(z, d.nz);
        const double e = c * (sx * sx * fx * fx + sy * sy * fy * fy + sz * sz * fz * fz);
        H.h[(std::size_t(z) * d.ny + y) * hx + x] = static_cast<float>(std::exp(-e));
      }
  return H;
}

ForwardModel make_forward_model(std::string_view spec, const tv::Dims& d) {
  ForwardModel fm;
  fm.spec = std::string(spec);
  const tv::ForwardSpec f = tv::parse_forward_spec(spec);
  switch (f.kind) {
    case tv::ForwardSpec::Kind::identity: return fm;
    case tv::ForwardSpec::Kind::gaussian:
      fm.H = gaussian_transfer(d, f.sigma[0], f.sigma[1], f.sigma[2]);
      return fm;
    case tv::ForwardSpec::Kind::mask: break;
  }
  const std::string& file = f.file;
  const std::string& dataset = f.dataset;
  Volume a;
  try {
    a = read_array3(file, dataset);
  } catch (const std::exception& e) {
    throw std::invalid_argument(fmt::format("forward model '{}': {}", spec, e.what()));
  }
  const int hx = d.nx / 2 + 1;
  if (a.dims.nz != d.nz || a.dims.ny != d.ny || (a.dims.nx != hx && a.dims.nx != d.nx))
    throw std::invalid_argument(fmt::format(
        "{}:{}: shape ({}, {}, {}) does not fit the volume ({}, {}, {}): expected ({}, {}, {}) "
        "(half spectrum) or ({}, {}, {})",
        file, dataset, a.dims.nz, a.dims.ny, a.dims.nx, d.nz, d.ny, d.nx, d.nz, d.ny, hx, d.nz,
        d.ny, d.nx));
  fm.H.h.resize(d.spectrum_size());
  for (int z = 0; z < d.nz; ++z)
    for (int y = 0; y < d.ny; ++y)
      for (int x = 0; x < hx; ++x) {
        const float v = a.data[(std::size_t(z) * d.ny + y) * a.dims.nx + x];
        if (!std::isfinite(v) || v < 0)
          throw std::invalid_argument(fmt::format(
              "{}:{}: value {} at (z={}, y={}, x={}) is not a finite number >= 0", file,
              dataset, v, z, y, x));
        fm.H.h[(std::size_t(z) * d.ny + y) * hx + x] = v;
      }
  if (tv::max_h2(fm.H) <= 0)
    throw std::invalid_argument(fmt::format("{}:{}: the mask is zero everywhere", file, dataset));
  return fm;
}

std::vector<float> apply_forward(const tv::TransferFunction& H, const tv::Dims& d,
                                 const std::vector<float>& x, int threads) {
  if (H.identity()) return x;
  AlignedFloats buf(d.padded_voxels());
  FftPair fft(d, buf.data(), threads);
  pad(d, x.data(), buf.data());
  fft.forward();
  const double inv_n = 1.0 / double(d.voxels());
  for (std::size_t k = 0; k < d.spectrum_size(); ++k) {
    const float s = static_cast<float>(H.h[k] * inv_n);
    buf[2 * k] *= s;
    buf[2 * k + 1] *= s;
  }
  fft.inverse();
  std::vector<float> out(d.voxels());
  unpad(d, buf.data(), out.data());
  return out;
}

double total_variation(const tv::Dims& d, const std::vector<float>& x) {
  double tv = 0;
  auto at = [&](int i, int j, int k) { return double(x[(std::size_t(k) * d.ny + j) * d.nx + i]); };
  for (int k = 0; k < d.nz; ++k)
    for (int j = 0; j < d.ny; ++j)
      for (int i = 0; i < d.nx; ++i) {
        const double c = at(i, j, k);
        const double gx = i + 1 < d.nx ? at(i + 1, j, k) - c : 0.0;
        const double gy = j + 1 < d.ny ? at(i, j + 1, k) - c : 0.0;
        const double gz = k + 1 < d.nz ? at(i, j, k + 1) - c : 0.0;
        tv += std::sqrt(gx * gx + gy * gy + gz * gz);
      }
  return tv;
}

double objective(const tv::TransferFunction& H, const tv::Dims& d, const std::vector<float>& y,
                 const std::vector<float>& x, double lambda, int threads) {
  const std::vector<float> ax = apply_forward(H, d, x, threads);
  double data = 0;
  for (std::size_t i = 0; i < ax.size(); ++i) {
    const double r = double(ax[i]) - y[i];
    data += r * r;
  }
  return 0.5 * data + lambda * total_variation(d, x);
}

}  // namespace glint::recon
