// Launchers of the TV solver's kernels (tv_launch.hpp): the kernel shapes that are built, their
// occupancy and shared memory, and the launches. Everything else of the solver is host code
// (tv_solver.cpp).
#include <algorithm>
#include <type_traits>
#include <utility>

#include "check.cuh"
#include "glint/rounded.hpp"
#include "tv_kernels.cuh"
#include "tv_launch.hpp"

namespace glint::gpu::tvk {

namespace {

using glint::detail::ceil_div;

dim3 dim(const MarchGrid& g) { return dim3(g.x, g.y, g.z); }

/// Resident blocks per SM of `kernel` with `warps` warps per block and `smem` bytes of dynamic
/// shared memory (the occupancy calculator).
template <class K>
int resident_per_sm(K kernel, int warps, int smem = 0) {
  int per_sm = 1;
  GLINT_CUDA_CHECK(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, 32 * warps, smem));
  return std::max(1, per_sm);
}

/// Allows a kernel `smem` bytes of dynamic shared memory (above the default 48 KiB a kernel
/// needs that consent) if they fit a block together with its static shared memory in
/// smem_optin bytes; false (and nothing allowed) if they do not.
template <class K>
bool allow_smem(K kernel, int smem, std::size_t smem_optin) {
  cudaFuncAttributes fa{};
  GLINT_CUDA_CHECK(cudaFuncGetAttributes(&fa, kernel));
  if (fa.sharedSizeBytes + static_cast<std::size_t>(smem) > smem_optin) return false;
  GLINT_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  return true;
}

/// The one-voxel kernels' block and grid over `width` threads across x.
dim3 block() { return dim3(kTX, kTY, 1); }
dim3 grid(const Geom& g, long long width) {
  return dim3(ceil_div(width, kTX), ceil_div(g.ny, kTY), g.nz);
}

template <int K, int D, int W, int B, int C = 1>
struct Shape {
  static constexpr MarchShape v{K, D, W, B, C};
};

/// The shapes that are built: f(kernel, K, W, dynamic shared memory bytes, pair) is called for
/// the one equal to `s`; false if none. pair: std::true_type for the two-column kernel (regions
/// across x as TvPairRegions, its last argument), std::false_type for the one-column kernel (28
/// output columns per block).
template <class S, class F>
bool with_temporal_one(const MarchShape& s, F& f) {
  if (!(s == S::v)) return false;
  if constexpr (S::v.cols == 2)
    f(march_pair_kernel<S::v.warps, S::v.blocks, S::v.ahead>, 1, S::v.warps,
      march_pair_bytes(S::v.warps, S::v.ahead, 2), std::true_type{});
  else
    f(temporal_march_kernel<S::v.rows, S::v.ahead, S::v.warps, S::v.blocks>, S::v.rows,
      S::v.warps, 0, std::false_type{});
  return true;
}
template <class... S, class F>
bool with_temporal_shape(const MarchShape& s, F&& f) {
  return (with_temporal_one<S>(s, f) || ...);
}
template <class F>
bool with_temporal_kernel(const MarchShape& s, F&& f) {
  return with_temporal_shape<Shape<3, 1, 8, 2>, Shape<3, 2, 8, 2>, Shape<2, 1, 8, 2>,
                             Shape<2, 2, 8, 2>, Shape<2, 1, 8, 3>, Shape<2, 1, 8, 4>,
                             Shape<2, 1, 12, 2>, Shape<2, 1, 16, 2>, Shape<1, 1, 16, 2>,
                             Shape<1, 1, 16, 3>, Shape<1, 1, 24, 2>, Shape<1, 1, 32, 1>,
                             Shape<1, 1, 16, 1, 2>, Shape<1, 1, 24, 1, 2>,
                             Shape<1, 2, 24, 1, 2>>(
      s, std::forward<F>(f));
}
template <class Src, class... S, class F>
bool with_step_shape(const MarchShape& s, F&& f) {
  return ((s == S::v ? (f(march_step_kernel<Src, S::v.rows, S::v.ahead, S::v.warps,
                                            S::v.blocks>,
                          S::v.rows, S::v.warps),
                        true)
                     : false) ||
          ...);
}
/// The one-step kernel's shapes (two-state or stored r as Src).
template <class Src, class F>
bool with_step_kernel(const MarchShape& s, F&& f) {
  return with_step_shape<Src, Shape<3, 1, 8, 0>, Shape<3, 2, 8, 0>, Shape<2, 1, 8, 0>,
                         Shape<2, 2, 8, 0>, Shape<2, 1, 16, 1>, Shape<2, 2, 16, 1>,
                         Shape<2, 2, 16, 2>, Shape<1, 1, 16, 2>, Shape<1, 2, 16, 2>,
                         Shape<1, 1, 32, 1>, Shape<1, 2, 32, 1>>(s, std::forward<F>(f));
}

/// The staged one-step kernel (march_pair_kernel, one step per pass) with W warps per block,
/// W = 16, 24 or 32, staging `ahead` = 1 or 2 planes ahead (else false): f(kernel, W, dynamic
/// shared memory bytes).
template <bool kStored, class F>
bool with_staged_step(int warps, int ahead, F&& f) {
  auto one = [&](auto wc, auto dc) {
    constexpr int W = decltype(wc)::value, D = decltype(dc)::value;
    if (warps != W || ahead != D) return false;
    f(march_pair_kernel<W, 1, D, 1, kStored>, W, march_pair_bytes(W, D, 1, kStored));
    return true;
  };
  using I1 = std::integral_constant<int, 1>;
  using I2 = std::integral_constant<int, 2>;
  return one(std::integral_constant<int, 24>{}, I1{}) ||
         one(std::integral_constant<int, 24>{}, I2{}) ||
         one(std::integral_constant<int, 16>{}, I1{}) ||
         one(std::integral_constant<int, 16>{}, I2{}) ||
         one(std::integral_constant<int, 32>{}, I1{}) ||
         one(std::integral_constant<int, 32>{}, I2{});
}

template <class R, bool kTwoState>
void fused(const FusedShape& shape, const Geom& g, const float* b, R r, Dual p, Dual out, float w,
           bool nonneg, float cst, float mom, cudaStream_t s) {
  auto go = [&](auto kernel, int zr) {
    const dim3 gr(ceil_div(g.nx, 2 * kTX), ceil_div(g.ny, kTY), ceil_div(g.nz, zr));
    kernel<<<gr, block(), 0, s>>>(g, b, r, p, out, w, nonneg, cst, mom);
  };
  if (shape.shuffle) {
    switch (shape.zrun) {
      case 1: go(fused_pair_shfl_kernel<R, kTwoState, 1>, 1); break;
      case 4: go(fused_pair_shfl_kernel<R, kTwoState, 4>, 4); break;
      case 8: go(fused_pair_shfl_kernel<R, kTwoState, 8>, 8); break;
      default: go(fused_pair_shfl_kernel<R, kTwoState, 2>, 2); break;
    }
  } else {
    switch (shape.zrun) {
      case 1: go(fused_pair_kernel<R, kTwoState, 1>, 1); break;
      case 4: go(fused_pair_kernel<R, kTwoState, 4>, 4); break;
      case 8: go(fused_pair_kernel<R, kTwoState, 8>, 8); break;
      default: go(fused_pair_kernel<R, kTwoState, 2>, 2); break;
    }
  }
  GLINT_CUDA_CHECK_LAUNCH();
}

template <class S>
void march_step(const MarchShape& shape, int chunk, const Geom& g, const float* b, S src, Dual p,
                Dual out, float w, bool nonneg, float cst, float mom, cudaStream_t s) {
  with_step_kernel<S>(shape, [&](auto kernel, int rws, int wps) {
    kernel<<<dim(step_grid(g, rws, wps, chunk)), dim3(32, wps), 0, s>>>(g, b, src, p, out, w,
                                                                       nonneg, cst, mom, chunk);
  });
  GLINT_CUDA_CHECK_LAUNCH();
}

template <bool kStored>
void staged(int warps, int ahead, const TvPairOrder& order, const TvPairRegions& rg,
            const Geom& g, const float* b, CDual in1, CDual in2, Dual out1, Dual out2, float w,
            bool nonneg, float cst, float ma, float mb, cudaStream_t s) {
  with_staged_step<kStored>(warps, ahead, [&](auto kernel, int wps, int smem) {
    kernel<<<order.blocks(), dim3(32, wps), smem, s>>>(g, b, in1, in2, out1, out2, w, nonneg, cst,
                                                       ma, mb, true, rg, order);
  });
  GLINT_CUDA_CHECK_LAUNCH();
}

__global__ void recip_sqrt_mismatch_kernel(unsigned lo, unsigned long long n,
                                           unsigned long long* count) {
  unsigned long long bad = 0;
  for (unsigned long long k = blockIdx.x * static_cast<unsigned long long>(blockDim.x) +
                              threadIdx.x;
       k < n; k += static_cast<unsigned long long>(gridDim.x) * blockDim.x) {
    const float s = __uint_as_float(lo + static_cast<unsigned>(k));
    bad += __float_as_uint(glint::rounded::recip_sqrt(s)) !=
           __float_as_uint(glint::rounded::div(1.0f, glint::rounded::sqrt(s)));
  }
  if (bad) atomicAdd(count, bad);
}

}  // namespace

void launch_init(const Geom& g, const float* y, bool nonneg, float* x, float* xprev,
                 StreamView s) {
  init_kernel<<<grid(g, g.nx), block(), 0, s>>>(g, y, nonneg, x, xprev);
  GLINT_CUDA_CHECK_LAUNCH();
}

void launch_extrapolate(const Geom& g, const float* x, const float* xprev, float mom, float* out,
                        StreamView s) {
  extrapolate_pair_kernel<<<grid(g, (g.nx + 1) / 2), block(), 0, s>>>(g, x, xprev, mom, out);
  GLINT_CUDA_CHECK_LAUNCH();
}

void launch_setup_spectrum(long long n, float inv_n, float* y_hat, float* h, StreamView s) {
  setup_spectrum_kernel<<<static_cast<unsigned>(ceil_div(n, 256)), 256, 0, s>>>(
      n, inv_n, reinterpret_cast<float2*>(y_hat), h);
  GLINT_CUDA_CHECK_LAUNCH();
}

void launch_spectrum(long long n, const float* hy, const float* h2n, float* spec,
                     StreamView s) {
  spectrum_kernel<<<static_cast<unsigned>(ceil_div(n, 256)), 256, 0, s>>>(
      n, reinterpret_cast<const float2*>(hy), h2n, reinterpret_cast<float2*>(spec));
  GLINT_CUDA_CHECK_LAUNCH();
}

void launch_gradient_step(const Geom& g, const float* x, const float* xprev, float mom, float t,
                          const float* y, float* res, StreamView s) {
  gradient_step_kernel<<<grid(g, (g.nx + 1) / 2), block(), 0, s>>>(g, x, xprev, mom, t, y, res);
  GLINT_CUDA_CHECK_LAUNCH();
}

void launch_primal(const Geom& g, const float* b, CDual r, float w, bool nonneg, float* zb,
                   StreamView s) {
  primal_kernel<<<grid(g, g.nx), block(), 0, s>>>(g, b, r, w, nonneg, zb);
  GLINT_CUDA_CHECK_LAUNCH();
}

void launch_dual(const Geom& g, const float* zb, Dual rin, Dual p, Dual rout, float cst,
                 float mom, StreamView s) {
  dual_kernel<<<grid(g, g.nx), block(), 0, s>>>(g, zb, rin, p, rout, cst, mom);
  GLINT_CUDA_CHECK_LAUNCH();
}

void launch_primal_pair(const Geom& g, const float* b, CDual p, float w, bool nonneg, float* out,
                        StreamView s) {
  primal_pair_kernel<<<grid(g, (g.nx + 1) / 2), block(), 0, s>>>(g, b, p, w, nonneg, out);
  GLINT_CUDA_CHECK_LAUNCH();
}

void launch_fused_stored(const FusedShape& shape, const Geom& g, const float* b, CDual r, Dual p,
                         Dual rout, float w, bool nonneg, float cst, float mom, StreamView s) {
  fused<StoredR, false>(shape, g, b, StoredR{r}, p, rout, w, nonneg, cst, mom, s);
}

void launch_fused_two_state(const FusedShape& shape, const Geom& g, const float* b, CDual cur,
                            CDual prev, float mi, Dual p, Dual out, float w, bool nonneg,
                            float cst, float mom, StreamView s) {
  fused<TwoStateR, true>(shape, g, b, TwoStateR{cur, prev, mi}, p, out, w, nonneg, cst, mom, s);
}

void launch_fused_cube(const Geom& g, const float* b, CDual r, Dual p, Dual rout, float w,
                       bool nonneg, float cst, float mom, StreamView s) {
  const dim3 cb(kCX, kCY, kCZ);
  const dim3 cg(ceil_div(g.nx, kCX), ceil_div(g.ny, kCY), ceil_div(g.nz, kCZ));
  fused_cube_kernel<<<cg, cb, 0, s>>>(g, b, r, p, rout, w, nonneg, cst, mom);
  GLINT_CUDA_CHECK_LAUNCH();
}

bool step_shape_built(const MarchShape& shape) {
  return with_step_kernel<MarchTwoState>(shape, [](auto, int, int) {});
}

int step_resident_per_sm(const MarchShape& shape) {
  int per_sm = 0;
  with_step_kernel<MarchTwoState>(
      shape, [&](auto kernel, int, int wps) { per_sm = resident_per_sm(kernel, wps); });
  return per_sm;
}

void launch_march_step_stored(const MarchShape& shape, int chunk, const Geom& g, const float* b,
                              CDual r, Dual pold, Dual p, Dual out, float w, bool nonneg,
                              float cst, float mom, StreamView s) {
  march_step(shape, chunk, g, b, MarchStored{r, pold}, p, out, w, nonneg, cst, mom, s);
}

void launch_march_step_two_state(const MarchShape& shape, int chunk, const Geom& g,
                                 const float* b, CDual cur, CDual prev, float mi, Dual p,
                                 Dual out, float w, bool nonneg, float cst, float mom,
                                 StreamView s) {
  march_step(shape, chunk, g, b, MarchTwoState{cur, prev, mi}, p, out, w, nonneg, cst, mom, s);
}

bool staged_shape_built(int warps, int ahead) {
  return with_staged_step<false>(warps, ahead, [](auto, int, int) {});
}

int staged_prepare(bool stored, int warps, int ahead, std::size_t smem_optin) {
  int per_sm = 0;
  auto setup = [&](auto kernel, int wps, int smem) {
    if (allow_smem(kernel, smem, smem_optin)) per_sm = resident_per_sm(kernel, wps, smem);
  };
  if (stored)
    with_staged_step<true>(warps, ahead, setup);
  else
    with_staged_step<false>(warps, ahead, setup);
  return per_sm;
}

void launch_staged(bool stored, int warps, int ahead, const TvPairOrder& order,
                   const TvPairRegions& rg, const Geom& g, const float* b, CDual in1, CDual in2,
                   Dual out1, Dual out2, float w, bool nonneg, float cst, float ma, float mb,
                   StreamView s) {
  if (stored)
    staged<true>(warps, ahead, order, rg, g, b, in1, in2, out1, out2, w, nonneg, cst, ma, mb, s);
  else
    staged<false>(warps, ahead, order, rg, g, b, in1, in2, out1, out2, w, nonneg, cst, ma, mb,
                  s);
}

bool temporal_shape_built(const MarchShape& shape) {
  return with_temporal_kernel(shape, [](auto, int, int, int, auto) {});
}

int temporal_prepare(const MarchShape& shape, std::size_t smem_optin) {
  int per_sm = 0;
  with_temporal_kernel(shape, [&](auto kernel, int, int wps, int smem, auto) {
    if (allow_smem(kernel, smem, smem_optin)) per_sm = resident_per_sm(kernel, wps, smem);
  });
  return per_sm;
}

void launch_temporal(const MarchShape& shape, const TvPairOrder& order, const TvPairRegions& rg,
                     int chunk, const Geom& g, const float* b, CDual c0, CDual c1, Dual n1,
                     Dual n2, float w, bool nonneg, float cst, float ma, float mb, bool keep1,
                     StreamView s) {
  with_temporal_kernel(shape, [&](auto kernel, int rws, int wps, int smem, auto pair) {
    if constexpr (decltype(pair)::value)
      kernel<<<order.blocks(), dim3(32, wps), smem, s>>>(g, b, c0, c1, n1, n2, w, nonneg, cst, ma,
                                                         mb, keep1, rg, order);
    else
      kernel<<<dim(temporal_grid(g, rws, wps, chunk)), dim3(32, wps), smem, s>>>(
          g, b, c0, c1, n1, n2, w, nonneg, cst, ma, mb, keep1, chunk);
  });
  GLINT_CUDA_CHECK_LAUNCH();
}

void launch_recip_sqrt_mismatches(unsigned lo, unsigned long long n, unsigned long long* count,
                                  StreamView s) {
  recip_sqrt_mismatch_kernel<<<1024, 256, 0, s>>>(lo, n, count);
  GLINT_CUDA_CHECK_LAUNCH();
}

}  // namespace glint::gpu::tvk
