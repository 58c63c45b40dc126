#pragma once
// The FGP kernel variants and the FISTA element-wise kernels (docs/tv-solver.md). Every variant
// calls the same per-voxel functions of glint/tv/fgp_math.hpp in the same order, so all of them
// (and the CPU reference) produce the same bits; they differ only in how data moves.
//
// Layout: volumes x-fastest with rows padded to px floats, nx rounded up to 128 bytes, so that
// rows start on cache lines (the transforms run out of place, into and from cuFFT's natural
// layout). Only x < nx is ever read or written by the kernels. A dual is three such volumes.
#include <cuda_runtime.h>

#include <type_traits>

#include "glint/gpu/tv_solver.hpp"
#include "glint/tv/fgp_math.hpp"
#include "tv_launch.hpp"

namespace glint::gpu::tvk {

namespace m = glint::tv::math;
using m::Vec3;

/// Stores one voxel's three dual components.
__device__ __forceinline__ void store(const Dual& d, long long i, const Vec3& v) {
  d.x[i] = v.x;
  d.y[i] = v.y;
  d.z[i] = v.z;
}

__device__ __forceinline__ long long at(const Geom& g, int x, int y, int z) {
  return (static_cast<long long>(z) * g.ny + y) * g.px + x;
}
__device__ __forceinline__ float ld(const float* __restrict__ p, long long i) { return __ldg(p + i); }

/// 8-byte loads and stores of an x-neighbour pair (rows have an even length, so pairs at even x
/// are aligned).
__device__ __forceinline__ float2 ld2(const float* __restrict__ p, long long i) {
  return __ldg(reinterpret_cast<const float2*>(p + i));
}
__device__ __forceinline__ void st2(float* p, long long i, float a, float b) {
  *reinterpret_cast<float2*>(p + i) = make_float2(a, b);
}
/// Stores the pair (a, b) at i, or only a where the right voxel is past the row's end (!both).
__device__ __forceinline__ void st_pair(float* p, long long i, bool both, float a, float b) {
  if (both)
    st2(p, i, a, b);
  else
    p[i] = a;
}

// ---------------------------------------------------------------------------------------------
// One voxel per thread: block (32, 8, 1), grid (ceil(nx/32), ceil(ny/8), nz).

/// z = primal(b, r): the separate variant's first kernel.
__global__ void primal_kernel(Geom g, const float* __restrict__ b, CDual r, float w, bool nonneg,
                              float* __restrict__ out) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  const int y = blockIdx.y * blockDim.y + threadIdx.y;
  const int z = blockIdx.z;
  if (x >= g.nx || y >= g.ny) return;
  const long long i = at(g, x, y, z);
  const Vec3 ri{ld(r.x, i), ld(r.y, i), ld(r.z, i)};
  const float rxm = x > 0 ? ld(r.x, i - 1) : 0.0f;
  const float rym = y > 0 ? ld(r.y, i - g.px) : 0.0f;
  const float rzm = z > 0 ? ld(r.z, i - g.plane) : 0.0f;
  out[i] = m::primal(ld(b, i), ri, rxm, rym, rzm, w, nonneg);
}

/// A voxel pair's three dual components (x: the left voxel, y: the right one).
struct Vec3x2 {
  float2 x, y, z;
};

/// Operation 1 for an x-neighbour pair: b and r of the pair, r_x left of it (the right voxel's is
/// the left voxel's own), r_y below and r_z before the pair.
__device__ __forceinline__ float2 pair_primal(float2 b, const Vec3x2& r, float rxm, float2 rym,
                                              float2 rzm, float w, bool nonneg) {
  return make_float2(m::primal(b.x, Vec3{r.x.x, r.y.x, r.z.x}, rxm, rym.x, rzm.x, w, nonneg),
                     m::primal(b.y, Vec3{r.x.y, r.y.y, r.z.y}, r.x.x, rym.y, rzm.y, w, nonneg));
}

/// The final x' = primal(b, p) of a proximal step with two x-neighbours per thread (8-byte
/// loads and stores, as fused_pair_kernel): block (32, 8) covers 64 x 8 voxels of plane
/// blockIdx.z; the right voxel's lower-x r is the left voxel's own. Same values, same bits.
__global__ void primal_pair_kernel(Geom g, const float* __restrict__ b, CDual r, float w,
                                   bool nonneg, float* __restrict__ out) {
  const int x = 2 * (blockIdx.x * blockDim.x + threadIdx.x);
  const int y = blockIdx.y * blockDim.y + threadIdx.y;
  const int z = blockIdx.z;
  if (x >= g.nx || y >= g.ny) return;
  const long long i = at(g, x, y, z);
  const float2 rx = ld2(r.x, i), ry = ld2(r.y, i), rz = ld2(r.z, i), bb = ld2(b, i);
  const float rxm = x > 0 ? ld(r.x, i - 1) : 0.0f;
  const float2 rym = y > 0 ? ld2(r.y, i - g.px) : make_float2(0.f, 0.f);
  const float2 rzm = z > 0 ? ld2(r.z, i - g.plane) : make_float2(0.f, 0.f);
  const float2 zp = pair_primal(bb, Vec3x2{rx, ry, rz}, rxm, rym, rzm, w, nonneg);
  st_pair(out, i, x + 1 < g.nx, zp.x, zp.y);
}

/// Separate variant, second kernel: gradient of z, projection, momentum. p updated in place (own
/// voxel only), r_out written (r_in is read at the own voxel only, so r_in may equal r_out).
__global__ void dual_kernel(Geom g, const float* __restrict__ zb, Dual rin, Dual p, Dual rout,
                            float cst, float mom) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  const int y = blockIdx.y * blockDim.y + threadIdx.y;
  const int z = blockIdx.z;
  if (x >= g.nx || y >= g.ny) return;
  const long long i = at(g, x, y, z);
  const Vec3 ri{rin.x[i], rin.y[i], rin.z[i]};
  const Vec3 po{p.x[i], p.y[i], p.z[i]};
  const bool lx = x == g.nx - 1, ly = y == g.ny - 1, lz = z == g.nz - 1;
  const float zc = ld(zb, i);
  const float zx = lx ? 0.0f : ld(zb, i + 1);
  const float zy = ly ? 0.0f : ld(zb, i + g.px);
  const float zz = lz ? 0.0f : ld(zb, i + g.plane);
  const Vec3 pn = m::project(ri, m::gradient(zc, zx, zy, zz, lx, ly, lz), cst);
  const Vec3 rn = m::momentum(pn, po, mom);
  store(p, i, pn);
  store(rout, i, rn);
}

/// Where a fused kernel gets r from: a stored buffer (fused) or p_k + m (p_k - p_{k-1}) computed
/// on the fly from two stored duals (two-state).
struct StoredR {
  CDual r;
  __device__ __forceinline__ float2 x2(long long i) const { return ld2(r.x, i); }
  __device__ __forceinline__ float2 y2(long long i) const { return ld2(r.y, i); }
  __device__ __forceinline__ float2 z2(long long i) const { return ld2(r.z, i); }
  __device__ __forceinline__ float x(long long i) const { return ld(r.x, i); }
  __device__ __forceinline__ float y(long long i) const { return ld(r.y, i); }
  __device__ __forceinline__ float z(long long i) const { return ld(r.z, i); }
};
struct TwoStateR {
  CDual cur, prev;
  float m;
  __device__ __forceinline__ float2 mo2(float2 c, float2 p) const {
    return make_float2(m::momentum(c.x, p.x, m), m::momentum(c.y, p.y, m));
  }
  __device__ __forceinline__ float2 x2(long long i) const { return mo2(ld2(cur.x, i), ld2(prev.x, i)); }
  __device__ __forceinline__ float2 y2(long long i) const { return mo2(ld2(cur.y, i), ld2(prev.y, i)); }
  __device__ __forceinline__ float2 z2(long long i) const { return mo2(ld2(cur.z, i), ld2(prev.z, i)); }
  __device__ __forceinline__ float x(long long i) const {
    return m::momentum(ld(cur.x, i), ld(prev.x, i), m);
  }
  __device__ __forceinline__ float y(long long i) const {
    return m::momentum(ld(cur.y, i), ld(prev.y, i), m);
  }
  __device__ __forceinline__ float z(long long i) const {
    return m::momentum(ld(cur.z, i), ld(prev.z, i), m);
  }
};

/// Warp shuffles by one lane (every lane of the warp must call them).
__device__ __forceinline__ float shfl_up1(float v) { return __shfl_up_sync(0xffffffffu, v, 1); }
__device__ __forceinline__ float shfl_down1(float v) {
  return __shfl_down_sync(0xffffffffu, v, 1);
}

/// Which faces a voxel pair's gradient stops at, and whether its right voxel exists.
struct PairFaces {
  bool lx0, lx1, ly, lz, has1;
};

/// Operations 2 and 3 for an x-neighbour pair: p' = project(r, gradient of z) of the left voxel
/// (r0) and, if has1, of the right one (r1; else 0). zc: z of the pair, zx1: z right of it, zy: z
/// of the row above, za: z of the plane above.
template <bool kSelect = false>
__device__ __forceinline__ void pair_project(const Vec3& r0, const Vec3& r1, float2 zc, float zx1,
                                             float2 zy, float2 za, PairFaces f, float cst,
                                             Vec3& p0, Vec3& p1) {
  p0 = m::project<kSelect>(r0, m::gradient(zc.x, zc.y, zy.x, za.x, f.lx0, f.ly, f.lz), cst);
  p1 = Vec3{0.f, 0.f, 0.f};
  if (f.has1)
    p1 = m::project<kSelect>(r1, m::gradient(zc.y, zx1, zy.y, za.y, f.lx1, f.ly, f.lz), cst);
}

/// The end of a pair kernel's step at one plane: the projections of r plus the gradients of z (z
/// of the pair, of the voxel right of it, of the row above and of the plane above), then p' to
/// `out` (two-state) or p' to p in place and r' = momentum(p', p_old) to `out` (fused).
template <bool kTwoState>
__device__ __forceinline__ void pair_update(const Vec3x2& r, float2 zc, float zx1, float2 zy,
                                            float2 zz, PairFaces f, float cst,
                                            const Vec3x2& pold, float mom, const Dual& p,
                                            const Dual& out, long long i) {
  Vec3 p0, p1;
  pair_project(Vec3{r.x.x, r.y.x, r.z.x}, Vec3{r.x.y, r.y.y, r.z.y}, zc, zx1, zy, zz, f, cst, p0,
               p1);
  if constexpr (kTwoState) {
    st2(out.x, i, p0.x, p1.x);
    st2(out.y, i, p0.y, p1.y);
    st2(out.z, i, p0.z, p1.z);
  } else {
    st2(p.x, i, p0.x, p1.x);
    st2(p.y, i, p0.y, p1.y);
    st2(p.z, i, p0.z, p1.z);
    st2(out.x, i, m::momentum(p0.x, pold.x.x, mom), m::momentum(p1.x, pold.x.y, mom));
    st2(out.y, i, m::momentum(p0.y, pold.y.x, mom), m::momentum(p1.y, pold.y.y, mom));
    st2(out.z, i, m::momentum(p0.z, pold.z.x, mom), m::momentum(p1.z, pold.z.y, mom));
  }
}

/// Fused (13 volumes) and two-state (10 volumes) step: z recomputed at the voxel and its three
/// upper neighbours. Fused: p in place, r_out = momentum(p', p); two-state: p' to p_out only.
/// Two x-neighbours per thread (8-byte loads and stores; rows are padded to an even length, so
/// pairs are aligned). Within the pair, the left voxel's upper-x z is the right voxel's own z,
/// and the right voxel's lower-x r is the left voxel's own r. Block (32, 8) covers 64 x 8 voxels.
/// A thread walks ZR consecutive planes; the z and r it computed at (i + e_z) are the z and r of
/// the next plane's voxel (the same values, so the same bits as ZR = 1).
template <class R, bool kTwoState, int ZR>
__global__ void __launch_bounds__(256) fused_pair_kernel(Geom g, const float* __restrict__ b,
                                                         R r, Dual p, Dual out, float w,
                                                         bool nonneg, float cst, float mom) {
  const int x = 2 * (blockIdx.x * blockDim.x + threadIdx.x);  // left voxel of the pair
  const int y = blockIdx.y * blockDim.y + threadIdx.y;
  const int z0 = blockIdx.z * ZR;
  if (x >= g.nx || y >= g.ny) return;
  long long i = at(g, x, y, z0);
  const bool has1 = x + 1 < g.nx;             // the right voxel exists
  const bool lx0 = !has1, lx1 = x + 2 >= g.nx;  // last face in x
  const bool ly = y == g.ny - 1;
  float2 rx = r.x2(i), ry = r.y2(i), rz = r.z2(i);
  float2 zc;
  {
    const float2 bb = ld2(b, i);
    const float rxm = x > 0 ? r.x(i - 1) : 0.0f;
    const float2 rym = y > 0 ? r.y2(i - g.px) : make_float2(0.f, 0.f);
    const float2 rzm = z0 > 0 ? r.z2(i - g.plane) : make_float2(0.f, 0.f);
    zc = pair_primal(bb, Vec3x2{rx, ry, rz}, rxm, rym, rzm, w, nonneg);
  }
#pragma unroll
  for (int k = 0; k < ZR; ++k) {
    const int z = z0 + k;
    if (z >= g.nz) break;
    const bool lz = z == g.nz - 1;
    float2 pox = make_float2(0.f, 0.f), poy = pox, poz = pox;
    if constexpr (!kTwoState) {
      pox = ld2(p.x, i);
      poy = ld2(p.y, i);
      poz = ld2(p.z, i);
    }
    // z at the plane above (becomes the next plane's own z).
    float2 ux = make_float2(0.f, 0.f), uy = ux, uz = ux, zz = ux;
    if (!lz) {
      const long long j = i + g.plane;
      ux = r.x2(j);
      uy = r.y2(j);
      uz = r.z2(j);
      const float2 bb = ld2(b, j);
      const float rxm = x > 0 ? r.x(j - 1) : 0.0f;
      const float2 rym = y > 0 ? r.y2(j - g.px) : make_float2(0.f, 0.f);
      zz = pair_primal(bb, Vec3x2{ux, uy, uz}, rxm, rym, rz, w, nonneg);
    }
    // z at the row above.
    float2 zy = make_float2(0.f, 0.f);
    if (!ly) {
      const long long j = i + g.px;
      const float2 bb = ld2(b, j), vx = r.x2(j), vy = r.y2(j), vz = r.z2(j);
      const float rxm = x > 0 ? r.x(j - 1) : 0.0f;
      const float2 rzm = z > 0 ? r.z2(j - g.plane) : make_float2(0.f, 0.f);
      zy = pair_primal(bb, Vec3x2{vx, vy, vz}, rxm, ry, rzm, w, nonneg);
    }
    // z right of the pair.
    float zx1 = 0.f;
    if (!lx1) {
      const long long j = i + 2;
      zx1 = m::primal(ld(b, j), Vec3{r.x(j), r.y(j), r.z(j)}, rx.y,
                      y > 0 ? r.y(j - g.px) : 0.0f, z > 0 ? r.z(j - g.plane) : 0.0f, w, nonneg);
    }
    pair_update<kTwoState>(Vec3x2{rx, ry, rz}, zc, zx1, zy, zz,
                           PairFaces{lx0, lx1, ly, lz, has1}, cst, Vec3x2{pox, poy, poz}, mom, p,
                           out, i);
    zc = zz;
    rx = ux;
    ry = uy;
    rz = uz;
    i += g.plane;
  }
}

/// The pair kernel with the neighbours across pairs taken from the neighbouring lanes (a warp is
/// one row of 64 voxels): the r_x left of the pair is lane - 1's right r_x, and the z right of the
/// pair is lane + 1's own left z (the same values, computed by the lane that owns them); only
/// lane 0 and lane 31 load them across the warp's edge, issuing those loads before anything
/// waits on them. Fewer loads and registers, one more shuffle per value: faster for fused (13
/// volumes), slower for two-state, whose r costs two loads (docs/performance.md).
template <class R, bool kTwoState, int ZR>
__global__ void __launch_bounds__(256)
    fused_pair_shfl_kernel(Geom g, const float* __restrict__ b, R r, Dual p, Dual out, float w,
                           bool nonneg, float cst, float mom) {
  const int lane = threadIdx.x;
  const int x = 2 * (blockIdx.x * blockDim.x + lane);  // left voxel of the pair
  const int y = blockIdx.y * blockDim.y + threadIdx.y;
  const int z0 = blockIdx.z * ZR;
  if (y >= g.ny) return;  // a whole warp: the lanes below exchange values by shuffles
  const bool in = x < g.nx;  // lanes past the row take part in the shuffles only
  long long i = at(g, in ? x : 0, y, z0);
  const bool has1 = x + 1 < g.nx;             // the right voxel exists
  const bool lx0 = !has1, lx1 = x + 2 >= g.nx;  // last face in x
  const bool ly = y == g.ny - 1;
  const float2 zero2 = make_float2(0.f, 0.f);
  // Lane 0 loads the r_x left of the warp's row segment, lane 31 the values of the z right of
  // it; all loads of a plane are issued before the arithmetic that waits on them.
  const bool edge0 = lane == 0 && x > 0 && in, edge31 = lane == 31 && in && !lx1;
  float2 rx = in ? r.x2(i) : zero2, ry = in ? r.y2(i) : zero2, rz = in ? r.z2(i) : zero2;
  float2 zc;
  {
    const float2 bb = in ? ld2(b, i) : zero2;
    const float rxm0 = edge0 ? r.x(i - 1) : 0.0f;
    const float2 rym = y > 0 && in ? r.y2(i - g.px) : zero2;
    const float2 rzm = z0 > 0 && in ? r.z2(i - g.plane) : zero2;
    const float v = shfl_up1(rx.y);
    const float rxm = lane > 0 ? v : rxm0;
    zc = pair_primal(bb, Vec3x2{rx, ry, rz}, rxm, rym, rzm, w, nonneg);
  }
#pragma unroll
  for (int k = 0; k < ZR; ++k) {
    const int z = z0 + k;
    if (z >= g.nz) break;
    const bool lz = z == g.nz - 1;
    float2 pox = zero2, poy = zero2, poz = zero2;
    if constexpr (!kTwoState) {
      if (in) {
        pox = ld2(p.x, i);
        poy = ld2(p.y, i);
        poz = ld2(p.z, i);
      }
    }
    // Lane 31's loads for the z right of the pair, issued before anything waits on them.
    float eb = 0.f, erx = 0.f, ery = 0.f, erz = 0.f, erym = 0.f, erzm = 0.f;
    if (edge31) {
      const long long j = i + 2;
      eb = ld(b, j);
      erx = r.x(j);
      ery = r.y(j);
      erz = r.z(j);
      if (y > 0) erym = r.y(j - g.px);
      if (z > 0) erzm = r.z(j - g.plane);
    }
    // z at the plane above (becomes the next plane's own z).
    float2 ux = zero2, uy = zero2, uz = zero2, zz = zero2;
    if (!lz) {
      const long long j = i + g.plane;
      if (in) {
        ux = r.x2(j);
        uy = r.y2(j);
        uz = r.z2(j);
      }
      const float2 bb = in ? ld2(b, j) : zero2;
      const float rxm0 = edge0 ? r.x(j - 1) : 0.0f;
      const float2 rym = y > 0 && in ? r.y2(j - g.px) : zero2;
      const float v = shfl_up1(ux.y);
      const float rxm = lane > 0 ? v : rxm0;
      zz = pair_primal(bb, Vec3x2{ux, uy, uz}, rxm, rym, rz, w, nonneg);
    }
    // z at the row above.
    float2 zy = zero2;
    if (!ly) {
      const long long j = i + g.px;
      float2 bb = zero2, vx = zero2, vy = zero2, vz = zero2;
      if (in) {
        bb = ld2(b, j);
        vx = r.x2(j);
        vy = r.y2(j);
        vz = r.z2(j);
      }
      const float rxm0 = edge0 ? r.x(j - 1) : 0.0f;
      const float2 rzm = z > 0 && in ? r.z2(j - g.plane) : zero2;
      const float v = shfl_up1(vx.y);
      const float rxm = lane > 0 ? v : rxm0;
      zy = pair_primal(bb, Vec3x2{vx, vy, vz}, rxm, ry, rzm, w, nonneg);
    }
    // z right of the pair: lane + 1's own left z; lane 31 computes it.
    float zx1 = shfl_down1(zc.x);
    if (edge31) zx1 = m::primal(eb, Vec3{erx, ery, erz}, rx.y, erym, erzm, w, nonneg);
    if (in)
      pair_update<kTwoState>(Vec3x2{rx, ry, rz}, zc, zx1, zy, zz,
                             PairFaces{lx0, lx1, ly, lz, has1}, cst, Vec3x2{pox, poy, poz}, mom,
                             p, out, i);
    zc = zz;
    rx = ux;
    ry = uy;
    rz = uz;
    i += g.plane;
  }
}

// ---------------------------------------------------------------------------------------------
// Fused with 16x8x4 shared-memory cube tiles: r over the tile plus one voxel below and above on
// every axis, z over the tile plus one above; 512 threads, one per voxel of the tile.
__global__ void __launch_bounds__(kCX* kCY* kCZ)
    fused_cube_kernel(Geom g, const float* __restrict__ b, CDual r, Dual p, Dual rout, float w,
                      bool nonneg, float cst, float mom) {
  constexpr int RX = kCX + 2, RY = kCY + 2, RZ = kCZ + 2;  // r tile: origin (-1,-1,-1)
  constexpr int ZX = kCX + 1, ZY = kCY + 1, ZZ = kCZ + 1;  // z tile: origin (0,0,0)
  __shared__ float rs[3][RZ * RY * RX];
  __shared__ float zs[ZZ * ZY * ZX];
  const int x0 = blockIdx.x * kCX, y0 = blockIdx.y * kCY, z0 = blockIdx.z * kCZ;
  const int tid = threadIdx.x + kCX * (threadIdx.y + kCY * threadIdx.z);
  constexpr int nthreads = kCX * kCY * kCZ;
  for (int s = tid; s < RX * RY * RZ; s += nthreads) {
    const int lx = s % RX, ly = (s / RX) % RY, lz = s / (RX * RY);
    const int x = x0 - 1 + lx, y = y0 - 1 + ly, z = z0 - 1 + lz;
    float vx = 0.f, vy = 0.f, vz = 0.f;
    if (x >= 0 && x < g.nx && y >= 0 && y < g.ny && z >= 0 && z < g.nz) {
      const long long i = at(g, x, y, z);
      vx = ld(r.x, i);
      vy = ld(r.y, i);
      vz = ld(r.z, i);
    }
    rs[0][s] = vx;
    rs[1][s] = vy;
    rs[2][s] = vz;
  }
  __syncthreads();
  for (int s = tid; s < ZX * ZY * ZZ; s += nthreads) {
    const int lx = s % ZX, ly = (s / ZX) % ZY, lz = s / (ZX * ZY);
    const int x = x0 + lx, y = y0 + ly, z = z0 + lz;
    float v = 0.f;
    if (x < g.nx && y < g.ny && z < g.nz) {
      const int t = (lx + 1) + RX * ((ly + 1) + RY * (lz + 1));
      v = m::primal(ld(b, at(g, x, y, z)), Vec3{rs[0][t], rs[1][t], rs[2][t]}, rs[0][t - 1],
                    rs[1][t - RX], rs[2][t - RX * RY], w, nonneg);
    }
    zs[s] = v;
  }
  __syncthreads();
  const int x = x0 + threadIdx.x, y = y0 + threadIdx.y, z = z0 + threadIdx.z;
  if (x >= g.nx || y >= g.ny || z >= g.nz) return;
  const long long i = at(g, x, y, z);
  const Vec3 po{p.x[i], p.y[i], p.z[i]};
  const bool lx = x == g.nx - 1, ly = y == g.ny - 1, lz = z == g.nz - 1;
  const int s = threadIdx.x + ZX * (threadIdx.y + ZY * threadIdx.z);
  const int t = (threadIdx.x + 1) + RX * ((threadIdx.y + 1) + RY * (threadIdx.z + 1));
  const Vec3 ri{rs[0][t], rs[1][t], rs[2][t]};
  const Vec3 gr = m::gradient(zs[s], zs[s + 1], zs[s + ZX], zs[s + ZX * ZY], lx, ly, lz);
  const Vec3 pn = m::project(ri, gr, cst);
  const Vec3 rn = m::momentum(pn, po, mom);
  store(p, i, pn);
  store(rout, i, rn);
}

// ---------------------------------------------------------------------------------------------
// Register-marching kernels. A block of 8 warps owns a 32-column x-y region (lane = column) of
// which warp w holds K consecutive rows, and walks a chunk of planes along z. Every value of a
// point (r, z, p, and for two steps per pass the second r and z) is computed once per point of
// the region, by the thread that owns the point, and kept in its registers as long as the point
// itself still needs it (one or two planes). Neighbours: x through warp shuffles, y from the
// thread's own rows or, across warps, from one shared-memory row per warp. Global loads run D
// planes ahead of their use (D = 1 or 2; with 2, two register sets alternate). Addresses are a
// per-plane base pointer plus the point's 32-bit in-plane offset. The outputs are the region less
// a halo of H columns and rows on each side (H = number of steps per pass): 32 - 2H columns and
// 8K - 2H rows.

template <int K, int H, int W = kWarps>
struct MarchPoints {
  static constexpr int kRows = W * K;
  static constexpr int kOutX = 32 - 2 * H, kOutY = kRows - 2 * H;
  int off[K];                          // in-plane offset (0 for points outside the volume)
  bool ok[K], hasym[K], lasty[K], tile[K];
  bool hasxm, lastx;
  __device__ __forceinline__ MarchPoints(const Geom& g, int px) {
    const int lane = threadIdx.x, w = threadIdx.y;
    const int gx = blockIdx.x * kOutX - H + lane;
    const int y0 = blockIdx.y * kOutY - H;
    const bool okx = gx >= 0 && gx < g.nx;
    hasxm = gx > 0;
    lastx = gx == g.nx - 1;
    const bool tilex = lane >= H && lane < 32 - H;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int ly = w * K + k, gy = y0 + ly;
      ok[k] = okx && gy >= 0 && gy < g.ny;
      off[k] = ok[k] ? gy * px + gx : 0;
      hasym[k] = gy > 0;
      lasty[k] = gy == g.ny - 1;
      tile[k] = ok[k] && tilex && ly >= H && ly < kRows - H;
    }
  }
};

/// p, opaque to the compiler: keeps a per-plane base pointer in a register so that each access
/// is that base plus a 32-bit offset (instead of recomputing a 64-bit index per point).
template <class T>
__device__ __forceinline__ T* opaque(T* p) {
  asm("" : "+l"(p));
  return p;
}


/// Stores one voxel's dual components at a plane base plus a 32-bit in-plane offset.
__device__ __forceinline__ void store_at(const Dual& d, long long base, int o, const Vec3& v) {
  const unsigned u = static_cast<unsigned>(o);
  opaque(d.x + base)[u] = v.x;
  opaque(d.y + base)[u] = v.y;
  opaque(d.z + base)[u] = v.z;
}

/// Where the one-step marching kernel gets r, and what it keeps beside it: two-state computes r
/// from p_k and p_{k-1}; fused reads the stored r and the old p (at output points only).
struct MarchTwoState {
  CDual cur, prev;
  float m;
  static constexpr bool kTwoState = true;
};
struct MarchStored {
  CDual r;
  Dual pold;  // the p written in place: plain loads, read before the same thread writes it
  static constexpr bool kTwoState = false;
};

/// Runs body(q, L) for q = q0 .. q1, where L holds plane q's loads on entry (load(L, q) fills
/// it); body refills L with plane q + D. D = 2: two register sets alternate, unrolled by two.
template <int D, class Load, class Body, class Buf>
__device__ __forceinline__ void march_planes(int q0, int q1, Buf& A, Buf& B, Load&& load,
                                             Body&& body) {
  load(A, q0);
  if constexpr (D == 2) {
    load(B, q0 + 1);
    for (int q = q0; q <= q1; q += 2) {
      body(q, A);
      if (q + 1 <= q1) body(q + 1, B);
    }
  } else {
    for (int q = q0; q <= q1; ++q) body(q, A);
  }
}

/// As march_planes, with body(q, L, interior): interior is std::true_type for the planes q0i ..
/// q1i (where the caller knows that no range check on q can fail, so that the compiler drops
/// them) and std::false_type elsewhere. D = 2 keeps every check (false_type throughout).
template <int D, class Load, class Body, class Buf>
__device__ __forceinline__ void march_planes_split(int q0, int q1, int q0i, int q1i, Buf& A,
                                                   Buf& B, Load&& load, Body&& body) {
  if constexpr (D == 2) {
    march_planes<2>(
        q0, q1, A, B, [&](Buf& L, int q) { load(L, q, std::false_type{}); },
        [&](int q, Buf& L) { body(q, L, std::false_type{}); });
  } else {
    load(A, q0, std::false_type{});
    for (int q = q0; q <= q1; ++q) {
      if (q >= q0i && q <= q1i)
        body(q, A, std::true_type{});
      else
        body(q, A, std::false_type{});
    }
  }
}

/// Plane loads of the two-state marching kernels for a thread's K points (zeros outside the
/// volume or where `in` is false): p_k in [0..2], p_{k-1} in [3..5], b in [6].
template <int K, class P>
__device__ __forceinline__ void load_two_state(float (&L)[K][7], bool in, long long qb,
                                               const CDual& cur, const CDual& prev,
                                               const float* b, const P& pt) {
  const float *__restrict__ cx = opaque(cur.x + qb), *__restrict__ cy = opaque(cur.y + qb),
              *__restrict__ cz = opaque(cur.z + qb);
  const float *__restrict__ px_ = opaque(prev.x + qb), *__restrict__ py = opaque(prev.y + qb),
              *__restrict__ pz = opaque(prev.z + qb);
  const float* __restrict__ bq = opaque(b + qb);
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const bool ok = in && pt.ok[k];
    const unsigned o = static_cast<unsigned>(pt.off[k]);
    L[k][0] = ok ? __ldg(cx + o) : 0.f;
    L[k][1] = ok ? __ldg(cy + o) : 0.f;
    L[k][2] = ok ? __ldg(cz + o) : 0.f;
    L[k][3] = ok ? __ldg(px_ + o) : 0.f;
    L[k][4] = ok ? __ldg(py + o) : 0.f;
    L[k][5] = ok ? __ldg(pz + o) : 0.f;
    L[k][6] = ok ? __ldg(bq + o) : 0.f;
  }
}

/// z at one plane for a thread's K points (a column of rows): the primal update from b and r at
/// the plane, with r_x of the left neighbour (shuffle), r_y of the row before (the thread's own,
/// or the warp before's last row in `row_before`), and r_z of the plane before (`r_before`,
/// absent at the first plane). Points outside `in` get 0. Every lane must call it (shuffles).
template <int K, class P>
__device__ __forceinline__ void column_primal(float (&z)[K], bool in, const float (&b)[K],
                                              const float (&r)[K][3],
                                              const float (&r_before)[K][3], bool has_before,
                                              const float* row_before, const P& pt, float w,
                                              bool nonneg) {
  float rxm[K];
#pragma unroll
  for (int k = 0; k < K; ++k) rxm[k] = shfl_up1(r[k][0]);
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const float rym = k > 0 ? r[k > 0 ? k - 1 : 0][1] : row_before[threadIdx.x];
    z[k] = in ? m::primal(b[k], Vec3{r[k][0], r[k][1], r[k][2]}, pt.hasxm ? rxm[k] : 0.0f,
                          pt.hasym[k] ? rym : 0.0f, has_before ? r_before[k][2] : 0.0f, w, nonneg)
              : 0.0f;
  }
}

/// p' at one plane for a thread's K points where `active`: the projection of r plus the gradient
/// of z, with z of the right neighbour (shuffle), of the row after (the thread's own, or the warp
/// after's first row in `row_after`) and of the plane after (`z_after`); emit(k, p') takes each.
/// Every lane must call it (shuffles).
template <int K, class P, class Emit>
__device__ __forceinline__ void column_dual(bool active, const float (&r)[K][3], const float (&z)[K],
                                            const float (&z_after)[K], const float* row_after,
                                            bool last_plane, const P& pt, float cst,
                                            Emit&& emit) {
  float zxp[K];
#pragma unroll
  for (int k = 0; k < K; ++k) zxp[k] = shfl_down1(z[k]);
  if (!active) return;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const float zyp = k < K - 1 ? z[k < K - 1 ? k + 1 : k] : row_after[threadIdx.x];
    emit(k, m::project(Vec3{r[k][0], r[k][1], r[k][2]},
                       m::gradient(z[k], zxp[k], zyp, z_after[k], pt.lastx, pt.lasty[k],
                                   last_plane),
                       cst));
  }
}

/// One FGP step (two-state: 10 volumes; fused: 13), register marching, halo 1. p' to `out`
/// (two-state) or p' to p in place and r' = momentum(p', p) to `out` (fused). W warps per block
/// (K W rows), at least MinBlocks blocks resident per SM.
template <class S, int K, int D, int W = kWarps, int MinBlocks = 0>
__global__ void __launch_bounds__(32 * W, MinBlocks)
    march_step_kernel(Geom g, const float* __restrict__ b, S src, Dual p, Dual out, float w,
                      bool nonneg, float cst, float mom, int chunk) {
  using P = MarchPoints<K, 1, W>;
  __shared__ float sry[2][W][32];  // r_y of each warp's last row
  __shared__ float szz[2][W][32];  // z of each warp's first row
  const int lane = threadIdx.x, wp = threadIdx.y;
  const int wdn = wp > 0 ? wp - 1 : 0, wup = wp < W - 1 ? wp + 1 : wp;
  const P pt(g, static_cast<int>(g.px));
  const int z0 = blockIdx.z * chunk, zend = min(z0 + chunk, g.nz);
  using Buf = float[K][7];
  // Interior planes (march_planes_split): q >= z0 + 1 and q + D <= min(zend, nz - 1), where
  // every plane index below is inside the volume and the chunk's ranges, and none is the last.
  const int q0i = z0 + 1, q1i = min(zend, g.nz - 1) - D;
  // The base of plane q, kept up to date by the body; used at interior planes.
  long long qbase = static_cast<long long>(z0 - 1) * g.plane;
  // Plane q's loads (zeros outside the volume): r sources in [0..5], b in [6].
  auto load = [&](Buf& L, int q, auto interior) {
    constexpr bool I = decltype(interior)::value;
    const bool in = I || (q >= 0 && q < g.nz && q <= zend);
    const long long qb = I ? qbase + D * g.plane : static_cast<long long>(in ? q : 0) * g.plane;
    if constexpr (S::kTwoState) {
      load_two_state<K>(L, in, qb, src.cur, src.prev, b, pt);
    } else {
      const float* __restrict__ bq = opaque(b + qb);
      const float *__restrict__ rx = opaque(src.r.x + qb), *__restrict__ ry = opaque(src.r.y + qb),
                  *__restrict__ rz = opaque(src.r.z + qb);
      const float *ox = opaque(src.pold.x + qb), *oy = opaque(src.pold.y + qb), *oz = opaque(src.pold.z + qb);
#pragma unroll
      for (int k = 0; k < K; ++k) {
        const bool ok = in && pt.ok[k], t = in && pt.tile[k];
        const unsigned o = static_cast<unsigned>(pt.off[k]);
        L[k][0] = ok ? __ldg(rx + o) : 0.f;
        L[k][1] = ok ? __ldg(ry + o) : 0.f;
        L[k][2] = ok ? __ldg(rz + o) : 0.f;
        L[k][3] = t ? ox[o] : 0.f;
        L[k][4] = t ? oy[o] : 0.f;
        L[k][5] = t ? oz[o] : 0.f;
        L[k][6] = ok ? __ldg(bq + o) : 0.f;
      }
    }
  };
  float ru[K][3], zu[K], pu[K][3];  // plane u = q - 1: r, z, old p (fused)
#pragma unroll
  for (int k = 0; k < K; ++k) {
    ru[k][0] = ru[k][1] = ru[k][2] = zu[k] = 0.f;
    pu[k][0] = pu[k][1] = pu[k][2] = 0.f;
  }
  auto body = [&](int q, Buf& L, auto interior) {
    constexpr bool I = decltype(interior)::value;
    // r at plane q (zero outside the volume), then the loads of plane q + D.
    float rq[K][3], bq[K];
    [[maybe_unused]] float pq[K][3];
#pragma unroll
    for (int k = 0; k < K; ++k) {
      if constexpr (S::kTwoState) {
        rq[k][0] = m::momentum(L[k][0], L[k][3], src.m);
        rq[k][1] = m::momentum(L[k][1], L[k][4], src.m);
        rq[k][2] = m::momentum(L[k][2], L[k][5], src.m);
      } else {
        rq[k][0] = L[k][0];
        rq[k][1] = L[k][1];
        rq[k][2] = L[k][2];
        pq[k][0] = L[k][3];
        pq[k][1] = L[k][4];
        pq[k][2] = L[k][5];
      }
      bq[k] = L[k][6];
    }
    if (I || q + D <= zend) load(L, q + D, interior);
    sry[q & 1][wp][lane] = rq[K - 1][1];
    __syncthreads();
    // z at plane q.
    float zq[K];
    column_primal<K>(zq, I || (q >= z0 && q < g.nz), bq, rq, ru, I || q > 0, sry[q & 1][wdn], pt,
                     w, nonneg);
    szz[q & 1][wp][lane] = zq[0];
    // p at plane u = q - 1.
    const int u = q - 1;
    const long long ub = I ? qbase - g.plane : static_cast<long long>(u) * g.plane;
    column_dual<K>(I || (u >= z0 && u < zend), ru, zu, zq, szz[u & 1][wup], !I && u == g.nz - 1,
                   pt, cst,
                   [&](int k, const Vec3& pn) {
                     if (!pt.tile[k]) return;
                     const int o = pt.off[k];
                     if constexpr (S::kTwoState) {
                       store_at(out, ub, o, pn);
                     } else {
                       store_at(p, ub, o, pn);
                       store_at(out, ub, o,
                                m::momentum(pn, Vec3{pu[k][0], pu[k][1], pu[k][2]}, mom));
                     }
                   });
#pragma unroll
    for (int k = 0; k < K; ++k) {
      ru[k][0] = rq[k][0];
      ru[k][1] = rq[k][1];
      ru[k][2] = rq[k][2];
      zu[k] = zq[k];
      if constexpr (!S::kTwoState) {
        pu[k][0] = pq[k][0];
        pu[k][1] = pq[k][1];
        pu[k][2] = pq[k][2];
      }
    }
    qbase += g.plane;
  };
  Buf A, B;
  march_planes_split<D>(z0 - 1, zend, q0i, q1i, A, B, load, body);
}

/// Temporally blocked two-state, register marching, halo 2: two FGP steps per pass. Reads p_k
/// (cur) and p_{k-1} (prev), writes p_{k+1} (n1, unless keep1 is false) and p_{k+2} (n2). Per
/// plane q: r_{k+1} and z_{k+1} at q; p_{k+1} and r_{k+2} at u = q - 1; z_{k+2} at u; p_{k+2}
/// at v = q - 2. Two barriers per plane. W warps per block (K W rows), at least MinBlocks blocks resident per SM
/// (the register limit per thread follows: 65536 / (32 W MinBlocks)).
template <int K, int D, int W = kWarps, int MinBlocks = 2>
__global__ void __launch_bounds__(32 * W, MinBlocks)
    temporal_march_kernel(Geom g, const float* __restrict__ b, CDual cur, CDual prev, Dual n1,
                          Dual n2, float w, bool nonneg, float cst, float ma, float mb,
                          bool keep1, int chunk) {
  using P = MarchPoints<K, 2, W>;
  __shared__ float s1y[2][W][32];  // r_{k+1}.y of each warp's last row
  __shared__ float s1z[2][W][32];  // z_{k+1} of each warp's first row
  __shared__ float s2y[2][W][32];  // r_{k+2}.y of each warp's last row
  __shared__ float s2z[2][W][32];  // z_{k+2} of each warp's first row
  const int lane = threadIdx.x, wp = threadIdx.y;
  const int wdn = wp > 0 ? wp - 1 : 0, wup = wp < W - 1 ? wp + 1 : wp;
  const P pt(g, static_cast<int>(g.px));
  const int z0 = blockIdx.z * chunk, zend = min(z0 + chunk, g.nz);
  using Buf = float[K][7];
  // Interior planes (march_planes_split): q >= z0 + 2 and q + D <= min(zend + 1, nz - 1), where
  // every plane index below is inside the volume and the chunk's ranges, and none is the last.
  const int q0i = z0 + 2, q1i = min(zend + 1, g.nz - 1) - D;
  // The base of plane q, kept up to date by the body (a 64-bit add per plane instead of
  // multiplies); used at interior planes, where it is never negative.
  long long qbase = static_cast<long long>(z0 - 2) * g.plane;
  auto load = [&](Buf& L, int q, auto interior) {
    constexpr bool I = decltype(interior)::value;
    const bool in = I || (q >= 0 && q < g.nz && q <= zend + 1);
    const long long base =
        I ? qbase + D * g.plane : static_cast<long long>(in ? q : 0) * g.plane;
    load_two_state<K>(L, in, base, cur, prev, b, pt);
  };
  // Carried: at u = q - 1: r_{k+1}, p_k, b, z_{k+1}; at v = q - 2: r_{k+2}, z_{k+2}.
  float r1u[K][3], cu[K][3], bu[K], z1u[K], r2v[K][3], z2v[K];
#pragma unroll
  for (int k = 0; k < K; ++k) {
    r1u[k][0] = r1u[k][1] = r1u[k][2] = cu[k][0] = cu[k][1] = cu[k][2] = 0.f;
    r2v[k][0] = r2v[k][1] = r2v[k][2] = 0.f;
    bu[k] = z1u[k] = z2v[k] = 0.f;
  }
  auto body = [&](int q, Buf& L, auto interior) {
    constexpr bool I = decltype(interior)::value;
    // (1) r_{k+1} at q; the loads of plane q + D.
    float r1q[K][3], cq[K][3], bq[K];
#pragma unroll
    for (int k = 0; k < K; ++k) {
#pragma unroll
      for (int a = 0; a < 3; ++a) {
        cq[k][a] = L[k][a];
        r1q[k][a] = m::momentum(L[k][a], L[k][3 + a], ma);
      }
      bq[k] = L[k][6];
    }
    if (I || q + D <= zend + 1) load(L, q + D, interior);
    s1y[q & 1][wp][lane] = r1q[K - 1][1];
    __syncthreads();
    // (2) z_{k+1} at q.
    float z1q[K];
    column_primal<K>(z1q, I || (q >= 0 && q < g.nz && q >= z0 - 1), bq, r1q, r1u, I || q > 0,
                     s1y[q & 1][wdn], pt, w, nonneg);
    s1z[q & 1][wp][lane] = z1q[0];
    // (3) p_{k+1} and r_{k+2} at u = q - 1.
    const int u = q - 1;
    float r2u[K][3];
#pragma unroll
    for (int k = 0; k < K; ++k) r2u[k][0] = r2u[k][1] = r2u[k][2] = 0.f;
    {
      const long long ub = I ? qbase - g.plane : static_cast<long long>(u) * g.plane;
      const bool st = keep1 && (I || (u >= z0 && u < zend));
      column_dual<K>(I || (u >= 0 && u < g.nz && u >= z0 - 1 && u <= zend), r1u, z1u, z1q,
                     s1z[u & 1][wup], !I && u == g.nz - 1, pt, cst, [&](int k, const Vec3& pn) {
                       if (st && pt.tile[k]) store_at(n1, ub, pt.off[k], pn);
                       r2u[k][0] = m::momentum(pn.x, cu[k][0], mb);
                       r2u[k][1] = m::momentum(pn.y, cu[k][1], mb);
                       r2u[k][2] = m::momentum(pn.z, cu[k][2], mb);
                     });
    }
    s2y[u & 1][wp][lane] = r2u[K - 1][1];
    __syncthreads();
    // (4) z_{k+2} at u.
    float z2u[K];
    column_primal<K>(z2u, I || (u >= 0 && u < g.nz && u >= z0 && u <= zend), bu, r2u, r2v,
                     I || u > 0, s2y[u & 1][wdn], pt, w, nonneg);
    s2z[u & 1][wp][lane] = z2u[0];
    // (5) p_{k+2} at v = q - 2.
    const int v = q - 2;
    const long long vb = I ? qbase - 2 * g.plane : static_cast<long long>(v) * g.plane;
    column_dual<K>(I || (v >= z0 && v < zend), r2v, z2v, z2u, s2z[v & 1][wup],
                   !I && v == g.nz - 1, pt, cst,
                   [&](int k, const Vec3& pn) {
                     if (pt.tile[k]) store_at(n2, vb, pt.off[k], pn);
                   });
#pragma unroll
    for (int k = 0; k < K; ++k) {
#pragma unroll
      for (int a = 0; a < 3; ++a) {
        r1u[k][a] = r1q[k][a];
        cu[k][a] = cq[k][a];
        r2v[k][a] = r2u[k][a];
      }
      bu[k] = bq[k];
      z1u[k] = z1q[k];
      z2v[k] = z2u[k];
    }
    qbase += g.plane;
  };
  Buf A, B;
  march_planes_split<D>(z0 - 2, zend + 1, q0i, q1i, A, B, load, body);
}

// Shared-memory and global accesses by explicit address, for the kernel below: shared-space
// addresses are 32-bit values computed once per thread (no generic-to-shared conversion in the
// plane loop), global ones a kernel parameter plus a carried byte offset.

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ float2 lds2(unsigned a) {
  float2 v;
  asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];\n" : "=f"(v.x), "=f"(v.y) : "r"(a) : "memory");
  return v;
}
__device__ __forceinline__ void sts2(unsigned a, float2 v) {
  asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(a), "f"(v.x), "f"(v.y) : "memory");
}
/// The address `byte_offset` bytes past p.
template <class T>
__device__ __forceinline__ T* at_bytes(T* p, long long byte_offset) {
  return reinterpret_cast<T*>(
      reinterpret_cast<std::conditional_t<std::is_const_v<T>, const char, char>*>(p) +
      byte_offset);
}
__device__ __forceinline__ void stg2(float* p, float a, float b) {
  asm volatile("st.global.v2.f32 [%0], {%1, %2};\n" ::"l"(__cvta_generic_to_global(p)), "f"(a),
               "f"(b)
               : "memory");
}
__device__ __forceinline__ void stg1(float* p, float a) {
  asm volatile("st.global.f32 [%0], %1;\n" ::"l"(__cvta_generic_to_global(p)), "f"(a) : "memory");
}

/// Asynchronous 8-byte copy global -> shared (cp.async, sm_80 and later): `bytes` (0, 4 or 8) are
/// read from `src`, the rest of the 8 bytes is zero-filled. The copy is in flight until the
/// issuing thread waits for its group (cp_async_wait); it holds no registers meanwhile.
__device__ __forceinline__ void cp_async8(unsigned dst, const float* src, int bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(dst),
               "l"(__cvta_generic_to_global(src)), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
/// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

/// mbarriers in shared memory (sm_80 and later): one arrival (one lane, after the warp's writes)
/// completes a phase; waiting threads are suspended by the hardware instead of spinning.
__device__ __forceinline__ void mbar_init(unsigned a) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(a) : "memory");
}
__device__ __forceinline__ void mbar_arrive(unsigned a) {
  __syncwarp();
  if (threadIdx.x == 0)
    asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];\n" ::"r"(a) : "memory");
}
/// Waits until the phase of parity `parity` of the mbarrier has completed.
__device__ __forceinline__ void mbar_wait(unsigned a, unsigned parity) {
  unsigned ok;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 p, [%1], %2;\n"
        " selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(ok)
        : "r"(a), "r"(parity)
        : "memory");
  } while (!ok);
}

/// Planes in march_pair_kernel's ring of staged inputs: q .. q + D, and q - 1 where a stage
/// reads plane u = q - 1 back (two steps: p_k and b; stored r: the old p).
constexpr int march_pair_slots(int D, int steps, bool stored) {
  return steps == 1 && !stored ? D + 1 : D + 2;
}
/// Whether march_pair_kernel<.., D, steps, ..> stages p_{k-1} (in2) in a ring of its own with
/// two slots, plane q (read by stage 1) and plane q + 1 (in flight), instead of beside p_k and b
/// in every slot of q - 1 .. q + 1: the two-step kernel staging one plane ahead. The 18 KiB this
/// saves at 24 warps lower the SM's shared-memory carve-out from 196 to 164 KiB, so that L1, which
/// the 8-byte cp.async copies pass through, grows from 60 to 92 KiB (3 % faster at 256^3).
constexpr bool march_pair_split(int D, int steps) { return steps == 2 && D == 1; }
/// Volumes in each slot of march_pair_kernel's ring: p_k (3), p_{k-1} (3, unless split) and b,
/// the last.
constexpr int march_pair_slot_volumes(int D, int steps) {
  return march_pair_split(D, steps) ? 4 : 7;
}
/// Dynamic shared memory of march_pair_kernel<W, MinBlocks, D, Steps, kStored>: the exchanged
/// rows (two per step), two planes each, the ring's slots, and (split) p_{k-1}'s two planes of
/// three volumes, one float2 per thread each.
constexpr int march_pair_bytes(int W, int D, int steps, bool stored = false) {
  return (2 * steps * 2 + march_pair_slots(D, steps, stored) * march_pair_slot_volumes(D, steps) +
          (march_pair_split(D, steps) ? 2 * 3 : 0)) *
         W * 32 * 8;
}

/// The marching kernel with two columns per lane: a block of W warps owns a 64-column, W-row
/// region (lane = a pair of columns, warp = a row), marches along z and makes Steps FGP steps
/// per pass, with 8-byte loads and stores, so that each lane's per-plane overhead (range checks,
/// addressing, shuffles, shared-memory exchange, synchronisation) is shared by two points.
/// Regions across x (TvPairRegions; which block takes which region and planes: TvPairOrder):
/// ox = 56 or 60 output columns (lanes 1 .. ox / 2; lane 0 and the lanes right of the outputs are
/// the halo), x (W - 2 Steps) output rows. Regions start at an even column (rows are padded to an
/// even length), so pairs are aligned; the right point of a pair at x = nx (the first padding
/// column) is read but zeroed.
/// In the two-step kernel a warp computes at each plane only what an output depends on: a row
/// outside the volume nothing, a block's first row r_{k+1} alone, its second and last rows no
/// z_{k+2}, its last no p_{k+1} (its synchronisation stays the same).
/// - Steps = 2 (temporal blocking, two-state): in1 = p_k, in2 = p_{k-1}; writes p_{k+1} to out1
///   (unless keep1 is false: the last pass of a proximal step, whose p_{k+1} nothing reads) and
///   p_{k+2} to out2, with momenta ma and mb; the five stages of temporal_march_kernel (halo 2).
/// - Steps = 1, two-state (10 volumes): in1 = p_k, in2 = p_{k-1}, r = momentum(p_k, p_{k-1}, ma);
///   writes p' to out1.
/// - Steps = 1, kStored (fused, 13 volumes): in1 = r, in2 = p; writes p' to out1 (the same
///   volumes as in2: each voxel's p is read, staged, before the same thread overwrites it) and
///   r' = momentum(p', p, mb) to out2. All global accesses are explicit (cp.async, st.global),
///   so the compiler assumes nothing about in2 and out1 being distinct.
/// The inputs of plane q + D (p_k, p_{k-1}, b) are copied into shared memory by cp.async while
/// plane q is processed (a ring of planes q - 1 .. q + D per thread, each slot read only by the
/// thread that filled it; two-state one-step passes never read plane q - 1 back, so their ring
/// is q .. q + D), so no register waits on a global load, and p_k and b at u = q - 1 are read
/// back from the ring where stages (3) and (4) need them.
template <int W, int MinBlocks, int D = 1, int Steps = 2, bool kStored = false>
__global__ void __launch_bounds__(32 * W, MinBlocks)
    march_pair_kernel(Geom g, const float* b, CDual in1, CDual in2, Dual out1, Dual out2, float w,
                      bool nonneg, float cst, float ma, float mb, bool keep1,
                      TvPairRegions rg, TvPairOrder order) {
  static_assert(Steps == 1 || Steps == 2, "one or two steps per pass");
  static_assert(!kStored || Steps == 1, "stored r: one step per pass");
  constexpr int H = Steps;  // halo rows (and planes) on each side
  // The projection's form (m::project): selecting in the two-step kernel (measured on the H200,
  // docs/performance.md; the one-step kernel gains nothing from it).
  constexpr bool kSelectProject = Steps == 2;
  // Dynamic shared memory: each warp's rows, two planes each (r_{k+1}.y, z_{k+1} and, for two
  // steps, r_{k+2}.y, z_{k+2}: [2 Steps][2][W][32] float2), then the ring of input planes
  // ([kSlots][7][W][32] float2).
  extern __shared__ float2 dyn[];
  constexpr unsigned kRow = W * 32 * 8;  // bytes of one row set [W][32]
  constexpr int kSlots = march_pair_slots(D, Steps, kStored);
  constexpr bool kSplit = march_pair_split(D, Steps);
  // A warp waits only for its two neighbours, not for the whole block: each warp signals the end
  // of its stages A (r_{k+1}.y row written), B (z_{k+1} and, for two steps, r_{k+2}.y rows) and C
  // (two steps: z_{k+2} row) at every plane on an mbarrier of its own, one per stage and plane
  // parity ([stage][parity][W]).
  // A neighbour is never two phases of one such barrier ahead of a waiter, so the phase parity is
  // unambiguous; the rows are double-buffered, and every overwrite of a row waits (through the
  // neighbours' signals) for the read of the value it replaces.
  // Warp wp's mbarriers are [..][wp + 1]: [0] and [W + 1] are guards, initialised and never
  // arrived on, so that a wait for their phase of parity 1 (the one before the first) returns at
  // once. The block's first and last warps wait on them, with that parity, instead of on a
  // neighbour they do not have; so every warp finds its neighbours' mbarriers at fixed offsets.
  __shared__ unsigned long long bars[3][2][W + 2];
  constexpr unsigned kBar = (W + 2) * 8;  // bytes of one [W + 2] set of mbarriers
  const int lane = threadIdx.x, wp = threadIdx.y;
  // The block's region (bx across x, by across y) and planes z0 .. zend - 1 in the launch order
  // (a one-dimensional grid).
  const TvPairBlock blk = tv_pair_block(order, static_cast<int>(blockIdx.x));
  const int bx = blk.bx, by = blk.by, z0 = blk.z0, zend = blk.zend;
  // The region's first output column x0 and its ox outputs.
  const int x0 = 56 * min(bx, rg.n56) + 60 * max(bx - rg.n56, 0), ox = bx < rg.n56 ? 56 : 60;
  const int gx = x0 - 2 + 2 * lane;  // the pair's left column
  const int gy = by * (W - 2 * H) - H + wp;
  const bool oky = gy >= 0 && gy < g.ny;
  const bool ok0 = oky && gx >= 0 && gx < g.nx, ok1 = ok0 && gx + 1 < g.nx;
  const long long off4 = ok0 ? 4LL * (gy * static_cast<int>(g.px) + gx) : 0;  // in-plane bytes
  const int bytes = ok1 ? 8 : (ok0 ? 4 : 0);
  const bool hasxm0 = gx > 0, hasxm1 = gx + 1 > 0, hasym = gy > 0;
  const bool lastx0 = gx == g.nx - 1, lastx1 = gx + 1 == g.nx - 1, lasty = gy == g.ny - 1;
  const bool tile = oky && lane >= 1 && 2 * lane <= ox && wp >= H && wp < W - H;
  // The stages the two-step kernel's warp computes, by its row: 1 (r_{k+1}), 2 (z_{k+1}), 3
  // (p_{k+1} and r_{k+2}), 4 (z_{k+2}), 5 (p_{k+2}). The votes tell the compiler that each is the
  // same in every lane, so that its branches are uniform. The one-step kernel computes every
  // stage in every warp (measured on the H200: skipping gains it nothing).
  auto vote = [](bool c) { return Steps == 1 || __any_sync(~0u, c); };
  const bool need1 = vote(oky), need2 = vote(oky && wp >= 1),
             need3 = vote(oky && wp >= 1 && wp <= W - 2),
             need4 = Steps == 2 && vote(oky && wp >= 2 && wp <= W - 2),
             need5 = Steps == 2 && vote(oky && wp >= H && wp < W - H);
  // The pass: planes z0 - H .. zlast; interior planes q0i .. q1i (every plane index of the body
  // inside the volume and the chunk's range, plane q + D too, none the last plane).
  const int zlast = zend + H - 1;
  const int q0i = z0 + H, q1i = min(zlast, g.nz - 1) - D;
  const long long plane4 = 4 * g.plane;
  // Byte offset of this thread's pair in plane q, kept up to date by the body (used at interior
  // planes, where it is never negative).
  long long qoff = (z0 - H) * plane4 + off4;
  // Shared addresses: this thread's float2 in the rows of its warp and of the warps below and
  // above (one row set apart; the two-step kernel's first and last warps never read the row
  // they lack, the one-step kernel's read their own, and discard what they compute from it);
  // its slot of volume 0 in the ring; the mbarriers of its warp and its neighbours (bown -+ 8),
  // and the parity bits that send the first and last warps' neighbour waits to the guards.
  const unsigned rows = smem_addr(dyn), lane8 = 8u * lane;
  const unsigned own = rows + wp * 256u + lane8;
  const unsigned dn = Steps == 2 || wp > 0 ? own - 256u : own,
                 up = Steps == 2 || wp < W - 1 ? own + 256u : own;
  const unsigned ring = rows + 4 * Steps * kRow + wp * 256u + lane8;
  const unsigned bar0 = smem_addr(&bars[0][0][0]);
  const unsigned bown = bar0 + 8u * (wp + 1), bdn = bown - 8u, bup = bown + 8u;
  const unsigned gdn = wp == 0, gup = wp == W - 1;
  // Row set k of plane parity p: + (2 k + p) kRow.
  auto row = [&](unsigned base, int k, unsigned p) { return base + (2 * k + p) * kRow; };
  // Volume a of a ring slot: + a kRow (p_k: 0 .. 2, p_{k-1}: 3 .. 5, b: 6). kSplit: a slot
  // holds p_k and b (3), and p_{k-1} of plane q is in the second ring, slot q & 1.
  auto vol = [](unsigned slot, int a) { return slot + a * kRow; };
  constexpr int kB = march_pair_slot_volumes(D, Steps) - 1;
  constexpr unsigned kSlot = march_pair_slot_volumes(D, Steps) * kRow, kRingEnd = kSlots * kSlot;
  const unsigned ring2 = ring + kRingEnd;
  auto vol2 = [&](unsigned slot, int q, int c) {
    return kSplit ? ring2 + (q & 1) * 3 * kRow + c * kRow : slot + (3 + c) * kRow;
  };
  // Issues plane q's copies into the ring slot at `slot` (zeros outside the volume), then
  // commits the group (an empty one past the chunk's last plane, so that the group count stays
  // one per plane).
  auto issue = [&](unsigned slot, int q, auto interior) {
    constexpr bool I = decltype(interior)::value;
    const bool in = I || (q >= 0 && q < g.nz && q <= zlast);
    if ((I || q <= zlast) && need1) {
      const long long o = I ? qoff + D * plane4 : (in ? q * plane4 + off4 : 0);
      const int n = in ? bytes : 0;
      cp_async8(vol(slot, 0), at_bytes(in1.x, o), n);
      cp_async8(vol(slot, 1), at_bytes(in1.y, o), n);
      cp_async8(vol(slot, 2), at_bytes(in1.z, o), n);
      cp_async8(vol2(slot, q, 0), at_bytes(in2.x, o), n);
      cp_async8(vol2(slot, q, 1), at_bytes(in2.y, o), n);
      cp_async8(vol2(slot, q, 2), at_bytes(in2.z, o), n);
      cp_async8(vol(slot, kB), at_bytes(b, o), n);
    }
    cp_async_commit();
  };
  // p' of the pair at byte offset o of the dual d.
  auto store_pair = [&](const Dual& d, long long o, const Vec3& a, const Vec3& c) {
    if (ok1) {
      stg2(at_bytes(d.x, o), a.x, c.x);
      stg2(at_bytes(d.y, o), a.y, c.y);
      stg2(at_bytes(d.z, o), a.z, c.z);
    } else if (ok0) {
      stg1(at_bytes(d.x, o), a.x);
      stg1(at_bytes(d.y, o), a.y);
      stg1(at_bytes(d.z, o), a.z);
    }
  };
  // z of the pair at a plane (operation 1) where `in`, else 0: r there and at the plane below
  // (rb, where `below`), r_y of the row below from the shared row at `row_below`, r_x left of the
  // pair from the lane to the left, b from bpair() (read last). Every lane calls it (shuffle).
  auto primal_pair = [&](float(&z)[2], bool in, bool below, const Vec3(&r)[2],
                         const Vec3(&rb)[2], unsigned row_below, auto&& bpair) {
    const float rxm0 = shfl_up1(r[1].x);
    const float2 rym = lds2(row_below);
    const float2 bb = bpair();
    z[0] = in ? m::primal(bb.x, r[0], hasxm0 ? rxm0 : 0.0f, hasym ? rym.x : 0.0f,
                          below ? rb[0].z : 0.0f, w, nonneg)
              : 0.0f;
    z[1] = in ? m::primal(bb.y, r[1], hasxm1 ? r[0].x : 0.0f, hasym ? rym.y : 0.0f,
                          below ? rb[1].z : 0.0f, w, nonneg)
              : 0.0f;
  };
  // Carried (index 0: left point, 1: right point): r_{k+1} and z_{k+1} at u = q - 1; r_{k+2}
  // and z_{k+2} at v = q - 2. Ring slots (addresses): su (plane u), sq (q), sn (q + D).
  Vec3 r1u[2], r2v[2];
  float z1u[2], z2v[2];
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    r1u[j] = r2v[j] = Vec3{0.f, 0.f, 0.f};
    z1u[j] = z2v[j] = 0.f;
  }
  auto next = [&](unsigned s) { return s + kSlot == ring + kRingEnd ? ring : s + kSlot; };
  unsigned su = ring + (kSlots - 1) * kSlot, sq = ring, sn = ring + D * kSlot;
  auto body = [&](int q, auto interior) {
    constexpr bool I = decltype(interior)::value;
    // The plane's index in the pass, j: its mbarriers are [j & 1], the phase (j >> 1) & 1; those
    // of plane j - 1 likewise. Row sets of plane parity: q & 1 (pq) and u & 1 (pu).
    const unsigned j = static_cast<unsigned>(q - (z0 - H)), jp = (j >> 1) & 1,
                   ip = ((j - 1) >> 1) & 1;
    const unsigned bj = (j & 1) * kBar, bi = kBar - bj;
    const unsigned pq = q & 1, pu = pq ^ 1;
    // (1) The copies of plane q + D; r_{k+1} at q from plane q's slot once it has landed.
    issue(sn, q + D, interior);
    cp_async_wait<D>();
    Vec3 r1q[2] = {Vec3{0.f, 0.f, 0.f}, Vec3{0.f, 0.f, 0.f}};
    float bq[2] = {0.f, 0.f};
    if (need1) {
      const float2 c0 = lds2(vol(sq, 0)), c1 = lds2(vol(sq, 1)), c2 = lds2(vol(sq, 2));
      const float2 p0 = lds2(vol2(sq, q, 0)), p1 = lds2(vol2(sq, q, 1)),
                   p2 = lds2(vol2(sq, q, 2));
      const float2 bb = lds2(vol(sq, kB));
      if constexpr (kStored) {
        r1q[0] = Vec3{c0.x, c1.x, c2.x};
        r1q[1] = Vec3{c0.y, c1.y, c2.y};
      } else {
        r1q[0] = m::momentum(Vec3{c0.x, c1.x, c2.x}, Vec3{p0.x, p1.x, p2.x}, ma);
        r1q[1] = m::momentum(Vec3{c0.y, c1.y, c2.y}, Vec3{p0.y, p1.y, p2.y}, ma);
      }
      bq[0] = bb.x;
      bq[1] = bb.y;
    }
    sts2(row(own, 0, pq), make_float2(r1q[0].y, r1q[1].y));
    mbar_arrive(bown + bj);
    mbar_wait(bdn + bj, jp | gdn);                         // r_{k+1}.y of the row below at q
    if (j > 0) mbar_wait(bup + 2 * kBar + bi, ip | gup);   // z_{k+1} of the row above at u
    // (2) z_{k+1} at q.
    float z1q[2] = {0.f, 0.f};
    if (need2) {
      primal_pair(z1q, I || (q >= 0 && q < g.nz && q >= z0 - (H - 1)), I || q > 0, r1q, r1u,
                  row(dn, 0, pq), [&] { return make_float2(bq[0], bq[1]); });
    }
    sts2(row(own, 1, pq), make_float2(z1q[0], z1q[1]));
    if constexpr (Steps == 1) mbar_arrive(bown + 2 * kBar + bj);  // the z row is the last one
    // (3) p_{k+1} (and for two steps r_{k+2}) at u = q - 1.
    const int u = q - 1;
    Vec3 r2u[2] = {Vec3{0.f, 0.f, 0.f}, Vec3{0.f, 0.f, 0.f}};
    if (need3) {
      const float2 zu = make_float2(z1u[0], z1u[1]);
      const float zxp1 = shfl_down1(zu.x);
      if (I || (u >= 0 && u < g.nz && u >= z0 - (H - 1) && u <= zend + H - 2)) {
        Vec3 pn0, pn1;
        pair_project<kSelectProject>(r1u[0], r1u[1], zu, zxp1, lds2(row(up, 1, pu)),
                     make_float2(z1q[0], z1q[1]),
                     PairFaces{lastx0, lastx1, lasty, !I && u == g.nz - 1, true}, cst, pn0, pn1);
        const long long uo = I ? qoff - plane4 : u * plane4 + off4;
        if ((I || (u >= z0 && u < zend)) && tile) {
          if (Steps == 1 || keep1) store_pair(out1, uo, pn0, pn1);
          if constexpr (kStored) {
            const float2 px = lds2(vol(su, 3)), py = lds2(vol(su, 4)), pz = lds2(vol(su, 5));
            store_pair(out2, uo, m::momentum(pn0, Vec3{px.x, py.x, pz.x}, mb),
                m::momentum(pn1, Vec3{px.y, py.y, pz.y}, mb));
          }
        }
        if constexpr (Steps == 2) {
          const float2 cx = lds2(vol(su, 0)), cy = lds2(vol(su, 1)), cz = lds2(vol(su, 2));
          r2u[0] = m::momentum(pn0, Vec3{cx.x, cy.x, cz.x}, mb);
          r2u[1] = m::momentum(pn1, Vec3{cx.y, cy.y, cz.y}, mb);
        }
      }
    }
    if constexpr (Steps == 2) {
      sts2(row(own, 2, pq), make_float2(r2u[0].y, r2u[1].y));
      mbar_arrive(bown + 2 * kBar + bj);
      mbar_wait(bdn + 2 * kBar + bj, jp | gdn);             // r_{k+2}.y of the row below at u
      if (j > 0) mbar_wait(bup + 4 * kBar + bi, ip | gup);  // z_{k+2} of the row above at v
      // (4) z_{k+2} at u.
      float z2u[2] = {0.f, 0.f};
      if (need4) {
        primal_pair(z2u, I || (u >= 0 && u < g.nz && u >= z0 && u <= zend), I || u > 0, r2u,
                    r2v, row(dn, 2, pq), [&] { return lds2(vol(su, kB)); });
      }
      sts2(row(own, 3, pu), make_float2(z2u[0], z2u[1]));
      // (5) p_{k+2} at v = q - 2 (row parity of v: pq).
      const int v = q - 2;
      if (need5) {
        const float2 zv = make_float2(z2v[0], z2v[1]);
        const float zxp1 = shfl_down1(zv.x);
        if ((I || (v >= z0 && v < zend)) && tile) {
          Vec3 pn0, pn1;
          pair_project<kSelectProject>(r2v[0], r2v[1], zv, zxp1, lds2(row(up, 3, pq)),
                       make_float2(z2u[0], z2u[1]),
                       PairFaces{lastx0, lastx1, lasty, !I && v == g.nz - 1, true}, cst, pn0, pn1);
          store_pair(out2, I ? qoff - 2 * plane4 : v * plane4 + off4, pn0, pn1);
        }
      }
      mbar_arrive(bown + 4 * kBar + bj);
#pragma unroll
      for (int k = 0; k < 2; ++k) {
        r2v[k] = r2u[k];
        z2v[k] = z2u[k];
      }
    }
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      r1u[k] = r1q[k];
      z1u[k] = z1q[k];
    }
    qoff += plane4;
    su = sq;
    sq = next(sq);
    sn = next(sn);
  };
  // Planes z0 - H .. z0 - H + D - 1 first; then every plane of the pass, the interior ones
  // through the body without range checks.
  for (int k = 0; k < D; ++k) issue(ring + k * kSlot, z0 - H + k, std::false_type{});
  // Each warp initialises its mbarriers, the first and last warps the guards below and above.
  if (lane < 2 * (Steps + 1)) {
    const unsigned set = (lane >> 1) * 2 * kBar + (lane & 1) * kBar;
    mbar_init(bown + set);
    if (gdn) mbar_init(bdn + set);
    if (gup) mbar_init(bup + set);
  }
  __syncthreads();
  for (int q = z0 - H; q <= zlast; ++q) {
    if (q >= q0i && q <= q1i)
      body(q, std::true_type{});
    else
      body(q, std::false_type{});
  }
  cp_async_wait<0>();
}

// ---------------------------------------------------------------------------------------------
// FISTA element-wise kernels (x < nx only; padding is left alone).

__global__ void init_kernel(Geom g, const float* __restrict__ y, bool nonneg, float* __restrict__ x,
                            float* __restrict__ xprev) {
  const int ix = blockIdx.x * blockDim.x + threadIdx.x;
  const int iy = blockIdx.y * blockDim.y + threadIdx.y;
  if (ix >= g.nx || iy >= g.ny) return;
  const long long i = at(g, ix, iy, blockIdx.z);
  const float v = nonneg ? m::pos(y[i]) : y[i];
  x[i] = v;
  xprev[i] = v;
}

/// out = xbar = x + mom (x - xprev), the transform's input; two x-neighbours per thread (8-byte
/// accesses; grid over (nx + 1) / 2 pairs).
__global__ void extrapolate_pair_kernel(Geom g, const float* __restrict__ x,
                                        const float* __restrict__ xprev, float mom,
                                        float* __restrict__ out) {
  const int ix = 2 * (blockIdx.x * blockDim.x + threadIdx.x);
  const int iy = blockIdx.y * blockDim.y + threadIdx.y;
  if (ix >= g.nx || iy >= g.ny) return;
  const long long i = at(g, ix, iy, blockIdx.z);
  const float2 xv = ld2(x, i), pv = ld2(xprev, i);
  st_pair(out, i, ix + 1 < g.nx, m::extrapolate(xv.x, pv.x, mom),
          m::extrapolate(xv.y, pv.y, mom));
}

/// In the Fourier domain: S = HY/N - (H^2/N) S, the back-projected residual's spectrum (n
/// complex values, the transforms' natural layout: rows of nx/2 + 1 without gaps).
__global__ void spectrum_kernel(long long n, const float2* __restrict__ hy,
                                const float* __restrict__ h2n, float2* __restrict__ s) {
  const long long k = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x;
  if (k >= n) return;
  const float2 v = s[k], a = hy[k];
  const float h = h2n[k];
  s[k] = make_float2(m::sub(a.x, m::mul(h, v.x)), m::sub(a.y, m::mul(h, v.y)));
}

/// Set-up: hy = Y * (H / N) from the transform Y of y; then h2n = H^2 / N in place of H.
__global__ void setup_spectrum_kernel(long long n, float inv_n, float2* __restrict__ y_hat,
                                      float* __restrict__ h) {
  const long long k = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x;
  if (k >= n) return;
  const float hv = h[k];
  const float hn = m::mul(hv, inv_n);
  const float2 v = y_hat[k];
  y_hat[k] = make_float2(m::mul(v.x, hn), m::mul(v.y, hn));
  h[k] = m::mul(m::mul(hv, hv), inv_n);
}

/// b = xbar + t * residual, xbar recomputed from x and xprev; in place on the residual.
/// For the identity the residual is y - xbar (y given), else it is already in `res`.
/// Two x-neighbours per thread (8-byte accesses: rows have an even length); block (32, 8)
/// covers 64 x 8 voxels of a plane.
__global__ void gradient_step_kernel(Geom g, const float* __restrict__ x,
                                     const float* __restrict__ xprev, float mom, float t,
                                     const float* __restrict__ y, float* __restrict__ res) {
  const int ix = 2 * (blockIdx.x * blockDim.x + threadIdx.x);
  const int iy = blockIdx.y * blockDim.y + threadIdx.y;
  if (ix >= g.nx || iy >= g.ny) return;
  const long long i = at(g, ix, iy, blockIdx.z);
  const float2 xv = ld2(x, i), pv = ld2(xprev, i);
  const float2 rv = y ? ld2(y, i) : *reinterpret_cast<const float2*>(res + i);
  const float xb0 = m::extrapolate(xv.x, pv.x, mom), xb1 = m::extrapolate(xv.y, pv.y, mom);
  const float r0 = y ? m::sub(rv.x, xb0) : rv.x, r1 = y ? m::sub(rv.y, xb1) : rv.y;
  const float b0 = m::gradient_step(xb0, r0, t), b1 = m::gradient_step(xb1, r1, t);
  st_pair(res, i, ix + 1 < g.nx, b0, b1);
}

}  // namespace glint::gpu::tvk
