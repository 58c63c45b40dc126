#pragma once
// The per-voxel arithmetic of one FGP step and of the FISTA outer loop (docs/tv-solver.md),
// written once and used by the CPU reference solver and by every GPU kernel variant, so that all
// of them compute the same bits.
//
// Every operation is an explicit IEEE single-precision multiply, add, subtract, divide or square
// root (glint/rounded.hpp) in the order written here; none is ever fused into a multiply-add. Contraction would buy nothing: the step is memory-bound.
//
// Sign conventions (docs/tv-solver.md): L(r)(j) = sum_a [r_a(j) - r_a(j - e_a)],
// g_a = z(i) - z(i+e_a).
#include "glint/rounded.hpp"

namespace glint::tv::math {

using rounded::add;
using rounded::div;
using rounded::mul;
using rounded::sqrt;
using rounded::sub;

/// max(v, 0) as a comparison, identical on host and device (also for -0 and NaN).
GLINT_HD float pos(float v) { return v > 0.0f ? v : 0.0f; }

struct Vec3 {
  float x, y, z;
};

/// Operation 1: z(j) = max(b(j) - w L(r)(j), 0), or without the constraint b(j) - w L(r)(j).
/// r = r(j), rxm = r_x(j - e_x), rym = r_y(j - e_y), rzm = r_z(j - e_z) (0 outside the volume).
GLINT_HD float primal(float b, Vec3 r, float rxm, float rym, float rzm, float w, bool nonneg) {
  const float l = add(add(sub(r.x, rxm), sub(r.y, rym)), sub(r.z, rzm));
  const float v = sub(b, mul(w, l));
  return nonneg ? pos(v) : v;
}

/// Operation 2: g_a = z(i) - z(i + e_a), 0 on the last face of axis a.
GLINT_HD Vec3 gradient(float zc, float zxp, float zyp, float zzp, bool last_x, bool last_y,
                          bool last_z) {
  return {last_x ? 0.0f : sub(zc, zxp), last_y ? 0.0f : sub(zc, zyp),
          last_z ? 0.0f : sub(zc, zzp)};
}

/// Operation 3: q = r + c g with c = 1 / (12 w); p' = q / max(1, |q|).
/// Where |q|^2 <= 1, max(1, |q|) = 1 and q is returned as it is; elsewhere q is scaled by the
/// correctly rounded reciprocal 1 / max(1, |q|) (one division instead of three: within one ulp
/// of dividing each component, and the same bits on every backend).
/// Two forms, the same bits: the default branches and divides; kSelect (for SIMT kernels, where
/// a warp's lanes take both sides of a branch) computes the reciprocal for every voxel and
/// selects. There |q|^2 > 1 makes the correctly rounded |q| at least 1, so the reciprocal is that
/// of |q| itself (rounded::recip_sqrt).
template <bool kSelect = false>
GLINT_HD Vec3 project(Vec3 r, Vec3 g, float c) {
  const float qx = add(r.x, mul(g.x, c));
  const float qy = add(r.y, mul(g.y, c));
  const float qz = add(r.z, mul(g.z, c));
  const float s = add(add(mul(qx, qx), mul(qy, qy)), mul(qz, qz));
  if constexpr (kSelect) {
    const bool scale = s > 1.0f;
    const float inv = rounded::recip_sqrt(scale ? s : 1.0f);
    return {scale ? mul(qx, inv) : qx, scale ? mul(qy, inv) : qy, scale ? mul(qz, inv) : qz};
  } else {
    if (!(s > 1.0f)) return {qx, qy, qz};
    const float n = sqrt(s);
    const float inv = div(1.0f, n > 1.0f ? n : 1.0f);
    return {mul(qx, inv), mul(qy, inv), mul(qz, inv)};
  }
}

/// Operation 4: the momentum copy r = p' + m (p' - p).
GLINT_HD float momentum(float pn, float po, float m) { return add(pn, mul(m, sub(pn, po))); }
GLINT_HD Vec3 momentum(Vec3 pn, Vec3 po, float m) {
  return {momentum(pn.x, po.x, m), momentum(pn.y, po.y, m), momentum(pn.z, po.z, m)};
}

/// FISTA: xbar = x + mom (x - x_prev), the point where the gradient is evaluated.
GLINT_HD float extrapolate(float x, float x_prev, float mom) {
  return add(x, mul(mom, sub(x, x_prev)));
}
/// FISTA gradient step b = xbar + t A^T (y - A xbar), given the back-projected residual.
GLINT_HD float gradient_step(float xbar, float residual, float t) {
  return add(xbar, mul(t, residual));
}

}  // namespace glint::tv::math
