#pragma once
// Launchers of the TV solver's kernels (tv_launch.cu) and what the solver's host code needs to
// know of them to plan a volume: which kernel shapes are built, how many blocks of one are
// resident per SM, how much shared memory it takes. Internal to glint::gpu. Includes no CUDA
// header, so the host code (tv_solver.cpp) builds as plain C++; every launch goes to the stream
// it is given and checks the launch (CudaError).
#include <cstddef>
#include <string>

#include "glint/detail/ceil_div.hpp"
#include "glint/gpu/tv_solver.hpp"
#include "stream_view.hpp"

namespace glint::gpu::tvk {

using detail::StreamView;

/// The volumes' layout: nx x ny x nz voxels, x fastest, rows of px floats (padded), planes of
/// px * ny floats.
struct Geom {
  int nx, ny, nz;
  long long px;     // padded row length
  long long plane;  // px * ny
};

/// A dual: three volumes of the same layout.
struct Dual {
  float* x;
  float* y;
  float* z;
};
struct CDual {
  const float* __restrict__ x;
  const float* __restrict__ y;
  const float* __restrict__ z;
};
inline CDual c(const Dual& d) { return {d.x, d.y, d.z}; }

/// Block of the one-voxel and element-wise kernels (x, y): 32 x 8 threads.
constexpr int kTX = 32, kTY = 8;
/// Block of fused-cube's kernel (x, y, z).
constexpr int kCX = 16, kCY = 8, kCZ = 4;
/// Warps per block of the one-step register-marching kernel's default shapes.
constexpr int kWarps = 8;

/// The grid of a marching kernel whose blocks output out_x x out_y points of a plane, over nz
/// planes in chunks of `chunk`.
struct MarchGrid {
  unsigned x, y, z;
  /// Blocks across a plane.
  long long tiles() const { return static_cast<long long>(x) * y; }
};
inline MarchGrid march_grid(const Geom& g, int out_x, int out_y, int chunk) {
  using glint::detail::ceil_div;
  return MarchGrid{static_cast<unsigned>(ceil_div(g.nx, out_x)),
                   static_cast<unsigned>(ceil_div(g.ny, out_y)),
                   static_cast<unsigned>(ceil_div(g.nz, chunk))};
}
/// The one-step register kernel's grid (K rows per warp, W warps): 30 x (K W - 2) outputs per
/// block.
inline MarchGrid step_grid(const Geom& g, int rows, int warps, int chunk) {
  return march_grid(g, 30, warps * rows - 2, chunk);
}
/// The one-column two-step kernel's grid (K rows per warp, W warps): 28 x (K W - 4) outputs per
/// block.
inline MarchGrid temporal_grid(const Geom& g, int rows, int warps, int chunk) {
  return march_grid(g, 28, warps * rows - 4, chunk);
}

/// A register-marching kernel's shape: K rows per warp, loads D planes ahead, W warps per block,
/// at least B blocks resident per SM (so at most 65536 / (32 W B) registers per thread), C
/// columns per lane (2: the temporal kernel's pair form, one row per warp, one plane ahead).
struct MarchShape {
  int rows, ahead, warps, blocks, cols = 1;
  bool operator==(const MarchShape&) const = default;
  std::string str() const {
    return "rows " + std::to_string(rows) + ", ahead " + std::to_string(ahead) + ", warps " +
           std::to_string(warps) + ", blocks " + std::to_string(blocks) + ", columns " +
           std::to_string(cols);
  }
};

/// The one-voxel kernels of fused and two-state (two x-neighbours per thread): the neighbours
/// across pairs from the neighbouring lanes (shuffle) or loaded; zrun planes per thread (1, 2, 4
/// or 8; another value runs 2).
struct FusedShape {
  bool shuffle = true;
  int zrun = 4;
};

// ---- FISTA's element-wise kernels (x < nx only; padding is left alone) ----------------------

/// x = xprev = y (max(y, 0) with nonneg).
void launch_init(const Geom& g, const float* y, bool nonneg, float* x, float* xprev,
                 StreamView s);
/// out = x + mom (x - xprev), the transform's input.
void launch_extrapolate(const Geom& g, const float* x, const float* xprev, float mom, float* out,
                        StreamView s);
/// Set-up of n spectrum values (interleaved complex y_hat): y_hat = Y (H / N), h = H^2 / N in
/// place.
void launch_setup_spectrum(long long n, float inv_n, float* y_hat, float* h, StreamView s);
/// spec = HY/N - (H^2/N) spec over n complex values (hy, spec interleaved).
void launch_spectrum(long long n, const float* hy, const float* h2n, float* spec,
                     StreamView s);
/// res = xbar + t * residual (y given: the identity's residual y - xbar; else res holds it).
void launch_gradient_step(const Geom& g, const float* x, const float* xprev, float mom, float t,
                          const float* y, float* res, StreamView s);

// ---- FGP steps ------------------------------------------------------------------------------

/// The separate variant: z = primal(b, r) to zb, then p and r from z.
void launch_primal(const Geom& g, const float* b, CDual r, float w, bool nonneg, float* zb,
                   StreamView s);
void launch_dual(const Geom& g, const float* zb, Dual rin, Dual p, Dual rout, float cst,
                 float mom, StreamView s);
/// The proximal step's result x = primal(b, p) to out.
void launch_primal_pair(const Geom& g, const float* b, CDual p, float w, bool nonneg, float* out,
                        StreamView s);

/// One step of the one-voxel kernels: fused (stored r; p in place, r' to rout) and two-state
/// (r = momentum(p_k = cur, p_{k-1} = prev, mi); p' to out).
void launch_fused_stored(const FusedShape& shape, const Geom& g, const float* b, CDual r, Dual p,
                         Dual rout, float w, bool nonneg, float cst, float mom, StreamView s);
void launch_fused_two_state(const FusedShape& shape, const Geom& g, const float* b, CDual cur,
                            CDual prev, float mi, Dual p, Dual out, float w, bool nonneg,
                            float cst, float mom, StreamView s);
/// One step of fused-cube (shared-memory cubes of kCX x kCY x kCZ).
void launch_fused_cube(const Geom& g, const float* b, CDual r, Dual p, Dual rout, float w,
                       bool nonneg, float cst, float mom, StreamView s);

/// The one-step register-marching kernel: whether `shape` is built; its resident blocks per SM
/// (two-state form; the shape must be built); one step in chunks of `chunk` planes, stored r
/// (fused-march: r and the old p, p' in place, r' to out) or two-state (p' to out).
bool step_shape_built(const MarchShape& shape);
int step_resident_per_sm(const MarchShape& shape);
void launch_march_step_stored(const MarchShape& shape, int chunk, const Geom& g, const float* b,
                              CDual r, Dual pold, Dual p, Dual out, float w, bool nonneg,
                              float cst, float mom, StreamView s);
void launch_march_step_two_state(const MarchShape& shape, int chunk, const Geom& g,
                                 const float* b, CDual cur, CDual prev, float mi, Dual p,
                                 Dual out, float w, bool nonneg, float cst, float mom,
                                 StreamView s);

/// The staged one-step kernel (march_pair_kernel, one step per pass) with `warps` warps per
/// block (16, 24 or 32) staging `ahead` planes ahead (1 or 2): whether that is built; then, for
/// the stored-r (fused) or two-state form, allows it its dynamic shared memory where that fits a
/// block beside its static shared memory in smem_optin bytes (the device's opt-in limit) and
/// returns its resident blocks per SM, or 0 (nothing allowed) where it does not fit.
bool staged_shape_built(int warps, int ahead);
int staged_prepare(bool stored, int warps, int ahead, std::size_t smem_optin);
/// One step of the staged kernel in launch order `order` over regions `rg`: two-state (in1 = p_k,
/// in2 = p_{k-1}, momentum ma, p' to out1) or stored (in1 = r, in2 = p, p' to out1 = p in place,
/// r' = momentum(p', p, mb) to out2).
void launch_staged(bool stored, int warps, int ahead, const TvPairOrder& order,
                   const TvPairRegions& rg, const Geom& g, const float* b, CDual in1, CDual in2,
                   Dual out1, Dual out2, float w, bool nonneg, float cst, float ma, float mb,
                   StreamView s);

/// The two-step (temporal) register-marching kernel: whether `shape` is built; allows it its
/// dynamic shared memory as staged_prepare and returns its resident blocks per SM, or 0.
bool temporal_shape_built(const MarchShape& shape);
int temporal_prepare(const MarchShape& shape, std::size_t smem_optin);
/// Two two-state steps in one pass from p_k (c0) and p_{k-1} (c1), momenta ma and mb: p_{k+1} to
/// n1 (only with keep1) and p_{k+2} to n2. The two-column shape (cols 2) runs in launch order
/// `order` over regions `rg`, the one-column shapes in chunks of `chunk` planes.
void launch_temporal(const MarchShape& shape, const TvPairOrder& order, const TvPairRegions& rg,
                     int chunk, const Geom& g, const float* b, CDual c0, CDual c1, Dual n1,
                     Dual n2, float w, bool nonneg, float cst, float ma, float mb, bool keep1,
                     StreamView s);

/// Adds to *count the floats of bit patterns lo .. lo + n - 1 where rounded::recip_sqrt(s) and
/// div(1, sqrt(s)) differ.
void launch_recip_sqrt_mismatches(unsigned lo, unsigned long long n, unsigned long long* count,
                                  StreamView s);

}  // namespace glint::gpu::tvk
