// The CPU reference solver. Same structure as the GPU solver's separate variant: z written by one
// pass, read by the next; the same per-voxel functions, the same momentum floats.
#include "glint/recon/cpu_solver.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <thread>
#include <vector>

#include "glint/recon/fftw.hpp"
#include "glint/tv/fgp_math.hpp"
#include "glint/detail/worker_pool.hpp"

namespace glint::recon {

namespace m = glint::tv::math;
using m::Vec3;
using tv::Dims;

namespace {

/// Runs f(z_begin, z_end) over [0, n) split between the pool's participants (the caller and
/// its persistent workers): a solve makes a few hundred such passes, so no threads are started
/// per pass.
template <class F>
void parallel_planes(detail::WorkerPool& pool, int n, F&& f) {
  const unsigned t = pool.size();
  if (t == 1) {
    f(0, n);
    return;
  }
  pool.run([&f, n, t](unsigned k) {
    const int b = int(n * std::int64_t(k) / t), e = int(n * std::int64_t(k + 1) / t);
    if (b < e) f(b, e);
  });
}

struct Dual {
  AlignedFloats x, y, z;
  explicit Dual(std::size_t n) : x(n), y(n), z(n) {}
  void zero() {
    std::fill_n(x.data(), x.size(), 0.0f);
    std::fill_n(y.data(), y.size(), 0.0f);
    std::fill_n(z.data(), z.size(), 0.0f);
  }
  void copy_from(const Dual& o) {
    std::copy_n(o.x.data(), x.size(), x.data());
    std::copy_n(o.y.data(), y.size(), y.data());
    std::copy_n(o.z.data(), z.size(), z.data());
  }
};

}  // namespace

struct CpuReconstructor::Impl {
  Dims d;
  int threads;
  std::size_t px, plane, V;
  AlignedFloats x, xprev, buf, yv, hy, h2n, zb;
  Dual p, r;
  std::unique_ptr<FftPair> fft;
  std::vector<float> fgp_m;  ///< FGP momenta m_1.. (tv::fgp_momenta), as many as used so far
  detail::WorkerPool pool;  ///< threads participants, started once per reconstructor

  Impl(const Dims& dims, int t)
      : d(dims),
        threads(t > 0 ? t : std::max(1u, std::thread::hardware_concurrency())),
        px(dims.padded_x()),
        plane(dims.padded_x() * dims.ny),
        V(dims.padded_voxels()),
        x(V), xprev(V), buf(V), zb(V), p(V), r(V),
        pool(unsigned(std::min(threads, dims.nz))) {}

  std::size_t at(int ix, int iy, int iz) const { return (std::size_t(iz) * d.ny + iy) * px + ix; }

  /// z = primal(b, r) over the volume (also x' = primal(b, p)).
  void primal(const float* b, const Dual& rr, float w, bool nonneg, float* out) {
    parallel_planes(pool, d.nz, [&](int z0, int z1) {
      for (int iz = z0; iz < z1; ++iz)
        for (int iy = 0; iy < d.ny; ++iy)
          for (int ix = 0; ix < d.nx; ++ix) {
            const std::size_t i = at(ix, iy, iz);
            out[i] = m::primal(b[i], Vec3{rr.x[i], rr.y[i], rr.z[i]}, ix > 0 ? rr.x[i - 1] : 0.f,
                               iy > 0 ? rr.y[i - px] : 0.f, iz > 0 ? rr.z[i - plane] : 0.f, w,
                               nonneg);
          }
    });
  }

  /// Gradient, projection, momentum: p in place, r = momentum(p', p).
  void dual_update(float cst, float mom) {
    parallel_planes(pool, d.nz, [&](int z0, int z1) {
      for (int iz = z0; iz < z1; ++iz)
        for (int iy = 0; iy < d.ny; ++iy)
          for (int ix = 0; ix < d.nx; ++ix) {
            const std::size_t i = at(ix, iy, iz);
            const bool lx = ix == d.nx - 1, ly = iy == d.ny - 1, lz = iz == d.nz - 1;
            const Vec3 gr = m::gradient(zb[i], lx ? 0.f : zb[i + 1], ly ? 0.f : zb[i + px],
                                        lz ? 0.f : zb[i + plane], lx, ly, lz);
            const Vec3 pn = m::project(Vec3{r.x[i], r.y[i], r.z[i]}, gr, cst);
            const Vec3 rn = m::momentum(pn, Vec3{p.x[i], p.y[i], p.z[i]}, mom);
            p.x[i] = pn.x;
            p.y[i] = pn.y;
            p.z[i] = pn.z;
            r.x[i] = rn.x;
            r.y[i] = rn.y;
            r.z[i] = rn.z;
          }
    });
  }

  /// `steps` FGP steps on b from the dual in p (r holds r_1 = p_0); x' into out.
  void prox(const float* b, float w, int steps, bool nonneg, float* out) {
    if (!(w > 0)) steps = 0;  // no TV term: the proximal step is the projection max(b, 0)
    const float cst = tv::dual_step(w);
    // The momenta are a fixed sequence: computed once, extended when more steps are asked for.
    if (fgp_m.size() < std::size_t(steps)) fgp_m = tv::fgp_momenta(steps);
    for (int k = 1; k <= steps; ++k) {
      primal(b, r, w, nonneg, zb.data());
      // r after the last step is p itself (m = 0): r_1 = p_0 for a warm-started next prox.
      dual_update(cst, k == steps ? 0.0f : fgp_m[k - 1]);
    }
    primal(b, p, w, nonneg, out);
  }

  template <class F>
  void for_voxels(F&& f) {
    parallel_planes(pool, d.nz, [&](int z0, int z1) {
      for (int iz = z0; iz < z1; ++iz)
        for (int iy = 0; iy < d.ny; ++iy)
          for (int ix = 0; ix < d.nx; ++ix) f(at(ix, iy, iz));
    });
  }
};

CpuReconstructor::CpuReconstructor(const Dims& dims, int threads) {
  if (dims.nx < 2 || dims.ny < 2 || dims.nz < 2)
    throw std::invalid_argument("TV solver: volume " + std::to_string(dims.nx) + "x" +
                                std::to_string(dims.ny) + "x" + std::to_string(dims.nz) +
                                " is too small (at least 2 voxels per axis)");
  impl_ = std::make_unique<Impl>(dims, threads);
}
CpuReconstructor::~CpuReconstructor() = default;

std::string CpuReconstructor::name() const {
  return "cpu (" + std::to_string(impl_->threads) + " threads)";
}
Dims CpuReconstructor::dims() const { return impl_->d; }

tv::SolveReport CpuReconstructor::solve(std::span<const float> y, const tv::TransferFunction& H,
                                        const tv::SolverOptions& o, std::span<float> xout,
                                        const tv::Progress& progress) {
  auto& s = *impl_;
  const Dims& d = s.d;
  tv::check_solve_arguments(d, y, H, o, xout);
  const auto start = std::chrono::steady_clock::now();
  const bool identity = H.identity();
  const float t = tv::fista_step(H);
  const float w = tv::prox_weight(t, o.lambda);
  const std::vector<float> F = tv::fista_momenta(o.outer);
  const std::size_t S = d.spectrum_size();

  // x_0 = y (clipped when x >= 0), H Y / N and H^2 / N.
  if (identity) {
    if (s.yv.size() != s.V) s.yv = AlignedFloats(s.V);
    pad(d, y.data(), s.yv.data());
  } else {
    if (s.hy.size() != s.V) {
      s.hy = AlignedFloats(s.V);
      s.h2n = AlignedFloats(S);
    }
    if (!s.fft) s.fft = std::make_unique<FftPair>(d, s.buf.data(), s.threads);
    pad(d, y.data(), s.buf.data());
  }
  const float* ysrc = identity ? s.yv.data() : s.buf.data();
  s.for_voxels([&](std::size_t i) {
    const float v = o.nonneg ? m::pos(ysrc[i]) : ysrc[i];
    s.x[i] = v;
    s.xprev[i] = v;
  });
  if (!identity) {
    s.fft->forward();
    const float inv_n = tv::inverse_size(d);
    for (std::size_t k = 0; k < S; ++k) {
      const float hv = H.h[k];
      const float hn = m::mul(hv, inv_n);
      s.hy[2 * k] = m::mul(s.buf[2 * k], hn);
      s.hy[2 * k + 1] = m::mul(s.buf[2 * k + 1], hn);
      s.h2n[k] = m::mul(m::mul(hv, hv), inv_n);
    }
  }
  s.p.zero();
  s.r.zero();

  for (int it = 1; it <= o.outer; ++it) {
    const float mom = it >= 2 ? F[it - 2] : 0.0f;
    if (!identity) {
      // Both passes run on the workers like the FGP steps (each plane's values are independent).
      parallel_planes(s.pool, d.nz, [&](int z0, int z1) {
        for (std::size_t row = std::size_t(z0) * d.ny; row < std::size_t(z1) * d.ny; ++row)
          for (std::size_t ix = 0; ix < s.px; ++ix) {
            const std::size_t i = row * s.px + ix;
            s.buf[i] = ix < std::size_t(d.nx) ? m::extrapolate(s.x[i], s.xprev[i], mom) : 0.0f;
          }
      });
      s.fft->forward();
      const std::size_t splane = S / std::size_t(d.nz);  // coefficients per z plane
      parallel_planes(s.pool, d.nz, [&](int z0, int z1) {
        for (std::size_t k = z0 * splane; k < z1 * splane; ++k) {
          const float h = s.h2n[k];
          s.buf[2 * k] = m::sub(s.hy[2 * k], m::mul(h, s.buf[2 * k]));
          s.buf[2 * k + 1] = m::sub(s.hy[2 * k + 1], m::mul(h, s.buf[2 * k + 1]));
        }
      });
      s.fft->inverse();
    }
    s.for_voxels([&](std::size_t i) {
      const float xb = m::extrapolate(s.x[i], s.xprev[i], mom);
      const float res = identity ? m::sub(s.yv[i], xb) : s.buf[i];
      s.buf[i] = m::gradient_step(xb, res, t);
    });
    if (!o.warm_start && it > 1) {
      s.p.zero();
      s.r.zero();
    }
    s.prox(s.buf.data(), w, o.tv_inner, o.nonneg, s.xprev.data());
    std::swap(s.x, s.xprev);
    if (progress) progress(it, o.outer);
  }
  unpad(d, s.x.data(), xout.data());
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return tv::SolveReport{secs, o.outer, o.tv_inner};
}

void CpuReconstructor::denoise(std::span<const float> b, float w, int steps, bool nonneg,
                               std::span<float> p, std::span<float> x) {
  auto& s = *impl_;
  const Dims& d = s.d;
  const std::size_t n = d.voxels();
  tv::check_denoise_arguments(d, b, p, x);
  pad(d, b.data(), s.buf.data());
  pad(d, p.data(), s.p.x.data());
  pad(d, p.data() + n, s.p.y.data());
  pad(d, p.data() + 2 * n, s.p.z.data());
  s.r.copy_from(s.p);
  s.prox(s.buf.data(), w, steps, nonneg, s.xprev.data());
  unpad(d, s.p.x.data(), p.data());
  unpad(d, s.p.y.data(), p.data() + n);
  unpad(d, s.p.z.data(), p.data() + 2 * n);
  unpad(d, s.xprev.data(), x.data());
}

}  // namespace glint::recon
