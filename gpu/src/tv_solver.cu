// The GPU TV solver: FISTA outer loop with cuFFT in-place real transforms, FGP inner steps by the
// selected kernel variant (tv_kernels.cuh). All work goes to one explicit stream; memory is planned
// and checked against the device's free memory before anything is allocated.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <stdexcept>
#include <utility>
#include <vector>

#include "check.cuh"
#include "cuda_owners.hpp"
#include "glint/detail/ceil_div.hpp"
#include "glint/detail/env.hpp"
#include "glint/gpu/tv_solver.hpp"
#include "tv_kernels.cuh"

namespace glint::gpu {

namespace {

using tv::Dims;
using tv::Variant;

// ---- move-only owners (cuda_owners.hpp; the cuFFT plan below) ------------------------------

using DeviceBuffer = detail::DeviceBuffer<float>;
using detail::Event;
using detail::Stream;
using detail::StreamPriority;

/// A cuFFT plan whose work area is supplied by the owner of several plans (one shared area).
class FftPlan {
 public:
  FftPlan() = default;
  /// The out-of-place real transform (R2C or C2R) between a volume whose rows are `pitch` floats
  /// apart and a spectrum in cuFFT's natural layout (rows of nx/2 + 1 complex values).
  FftPlan(const Dims& d, long long pitch, cufftType type) {
    GLINT_CUFFT_CHECK(cufftCreate(&h_));
    GLINT_CUFFT_CHECK(cufftSetAutoAllocation(h_, 0));
    long long n[3] = {d.nz, d.ny, d.nx};
    long long real[3] = {d.nz, d.ny, pitch}, cplx[3] = {d.nz, d.ny, d.nx / 2 + 1};
    const bool r2c = type == CUFFT_R2C;
    const long long rdist = pitch * d.ny * d.nz, cdist = (d.nx / 2 + 1) * d.ny * d.nz;
    GLINT_CUFFT_CHECK(cufftMakePlanMany64(h_, 3, n, r2c ? real : cplx, 1, r2c ? rdist : cdist,
                                          r2c ? cplx : real, 1, r2c ? cdist : rdist, type, 1,
                                          &work_));
  }
  ~FftPlan() {
    if (h_) {
      const cufftResult r = cufftDestroy(h_);
      if (r != CUFFT_SUCCESS)
        glint::log::write(glint::log::Level::error,
                          "cufftDestroy failed: cuFFT error " + std::to_string(int(r)));
    }
  }
  FftPlan(FftPlan&& o) noexcept : h_(std::exchange(o.h_, 0)), work_(o.work_) {}
  FftPlan& operator=(FftPlan&& o) noexcept {
    std::swap(h_, o.h_);
    std::swap(work_, o.work_);
    return *this;
  }
  cufftHandle get() const { return h_; }
  std::size_t work_bytes() const { return work_; }

 private:
  cufftHandle h_ = 0;
  std::size_t work_ = 0;
};

using glint::detail::ceil_div;

/// Resident blocks per SM of `kernel` with `warps` warps per block and `smem` bytes of dynamic
/// shared memory (the occupancy calculator).
template <class K>
int resident_per_sm(K kernel, int warps, int smem = 0) {
  int per_sm = 1;
  GLINT_CUDA_CHECK(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, 32 * warps, smem));
  return std::max(1, per_sm);
}

/// The grid of a marching kernel whose blocks output out_x x out_y points of a plane, over nz
/// planes in chunks of `chunk`.
dim3 march_grid(const Dims& d, int out_x, int out_y, int chunk) {
  return dim3(ceil_div(d.nx, out_x), ceil_div(d.ny, out_y), ceil_div(d.nz, chunk));
}
/// Blocks across a plane of a grid.
long long plane_tiles(const dim3& grid) { return static_cast<long long>(grid.x) * grid.y; }

/// Planes per block of the marching kernels: about four waves of resident blocks over the
/// device (fewer, longer chunks pay less warm-up; more, shorter ones leave a smaller last wave),
/// at least 8 planes so that each chunk's two planes of warm-up stay small.
template <class K>
int march_chunk(const Dims& d, K kernel, int sms) {
  static_assert(tvk::kTX * tvk::kTY % 32 == 0, "whole warps per block");
  const int per_sm = resident_per_sm(kernel, tvk::kTX * tvk::kTY / 32);
  const long long tiles = plane_tiles(march_grid(d, tvk::kTX, tvk::kTY, d.nz));
  const long long chunks = std::max<long long>(1, ceil_div(4LL * per_sm * sms, tiles));
  const int chunk = ceil_div(d.nz, chunks);
  return std::clamp(chunk, std::min(8, d.nz), std::max(1, d.nz));
}

/// Planes per thread of the one-voxel kernels (fused, two-state): GLINT_TV_ZRUN = 1, 2, 4 or 8
/// overrides the default (a tuning knob for benchmarks).
/// Default measured on the H200 (docs/performance.md): 4 planes for both (fused, with its
/// lane-shuffle kernel, took 2 before rows were 128-byte aligned).
int zrun_from_env() {
  const int fallback = 4;
  const int z = static_cast<int>(glint::detail::env_int("GLINT_TV_ZRUN", fallback, 1, 8));
  return (z == 1 || z == 2 || z == 4 || z == 8) ? z : fallback;
}

/// Planes per block of the one-column marching kernels (tv_march_chunk; the two-column kernels
/// plan theirs in pair_order), with `tiles` blocks across a plane, of which per_sm are resident
/// per SM, and which read `halo` planes on either side of their chunk: at least 16 planes (the
/// halo's share), at most max_chunk (longer chunks spread neighbouring blocks apart and lose L2
/// hits; measured on the H200: one step per pass 32, two steps 48) unless all chunks run in one
/// wave.
int march_chunk_for(const Dims& d, long long tiles, int per_sm, int sms, int max_chunk,
                    int halo) {
  return tv_march_chunk(d.nz, tiles, per_sm, sms, halo, 16, max_chunk);
}
/// The launch order of a two-column marching kernel (tv_pair_order): its regions across x,
/// blocks of `warps` rows with `halo` of them on either side across y; per_sm blocks resident on
/// each of `sms` SMs, chunks of at most max_chunk planes; group and first: the tuning knobs
/// (-1: planned).
TvPairOrder pair_order(const Dims& d, const TvPairRegions& rg, int warps, int halo, int per_sm,
                       int sms, int max_chunk, long long group, int first) {
  const int tiles = rg.count() * ceil_div(d.ny, warps - 2 * halo);
  return tv_pair_order(d.nz, rg.count(), tiles, per_sm, sms, halo, max_chunk, group, first);
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
    f(tvk::march_pair_kernel<S::v.warps, S::v.blocks, S::v.ahead>, 1, S::v.warps,
      tvk::march_pair_bytes(S::v.warps, S::v.ahead, 2), std::true_type{});
  else
    f(tvk::temporal_march_kernel<S::v.rows, S::v.ahead, S::v.warps, S::v.blocks>, S::v.rows,
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
  return ((s == S::v ? (f(tvk::march_step_kernel<Src, S::v.rows, S::v.ahead, S::v.warps,
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
    f(tvk::march_pair_kernel<W, 1, D, 1, kStored>, W, tvk::march_pair_bytes(W, D, 1, kStored));
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

/// An integer tuning knob from the environment (benchmarks), or `fallback`.
/// A kernel-shape variable: an unbuilt shape keeps the default (with_step_kernel and
/// with_temporal_kernel decide).
int env_int(const char* name, int fallback) {
  return static_cast<int>(glint::detail::env_int(name, fallback, 0, 1024));
}

}  // namespace

struct GpuReconstructor::Impl {
  Dims d;
  Variant variant;
  bool fft;
  int device;
  std::string device_name;
  TvMemoryPlan plan;
  tvk::Geom g{};
  std::size_t V = 0;  // floats per padded volume

  std::unique_ptr<Stream> stream;
  std::unique_ptr<Event> e0, e1;
  FftPlan r2c, c2r;
  DeviceBuffer work, x, xprev, buf, yv, hy, h2n, spec, zb;
  std::vector<DeviceBuffer> sets;
  int cur = 0, prev = 0, rcur = 1;
  int chunk = 8, chunk_march = 8, zrun = 4;
  bool pairs = true;  // fused and two-state: two x-neighbours per thread
  bool shuffle = true;  // ... and the neighbours across pairs from the neighbouring lanes
  // Register-marching kernels (tv_kernels.cuh) for fused-march and temporal, and for two-state
  // with GLINT_TV_KERNEL=march (its one-voxel pair kernel is faster on the H200);
  // GLINT_TV_KERNEL=classic selects the earlier shared-memory kernels of fused-march and
  // temporal. `rows` rows per warp, loads `ahead` planes ahead, chunks of chunk1 (one step per
  // pass) and chunk2 (two steps, the one-column kernel; the two-column one's: temporal_order)
  // planes per block.
  // `step` and `temporal`: the shapes of the one-step and the two-step kernel.
  bool regmarch = true, twostate_march = false;
  // Whether temporal's last two-step pass writes p_{k+1} all the same (GLINT_TV_KEEP1=1, for
  // comparisons; nothing reads it).
  bool keep_last1 = false;
  MarchShape step{3, 2, tvk::kWarps, 0}, temporal{1, 1, 24, 1, 2};
  int chunk1 = 16, chunk2 = 16;
  // `staged`: two-state (chosen by the volume's size, see the constructor) or, with
  // GLINT_TV_KERNEL=staged, fused too run the staged one-step kernel (inputs copied into shared
  // memory a plane ahead, neighbour-only synchronisation) with `staged_warps` warps per block.
  bool staged = false;
  int staged_warps = 24, staged_ahead = 1;
  // The two-column kernels' launch orders (TvPairOrder, planned by tv_pair_order): the staged
  // one-step kernel's and the two-step kernel's. Regions per group by default tv_launch_group:
  // equal groups of at most, and nearly, the resident blocks, so that a region's next chunk
  // starts about as its previous one ends, on planes that one read last (measured on the H200,
  // docs/performance.md); GLINT_TV_GROUP sets both. GLINT_TV_FIRST sets both orders' regions
  // that take all planes first.
  TvPairOrder staged_order, temporal_order;
  // Regions across x of the two-column marching kernels (march_pair_kernel), both kernels: the
  // fewest, as many of 56 columns as that allows (tv_pair_regions; measured on the H200,
  // docs/performance.md). GLINT_TV_OX = 56 or 60 makes them all that wide.
  TvPairRegions pair_rg;

  cudaStream_t s() const { return stream->get(); }
  tvk::Dual dual(int k) const {
    float* p = sets[k].get();
    return {p, p + V, p + 2 * V};
  }
  dim3 block() const { return dim3(tvk::kTX, tvk::kTY, 1); }
  dim3 grid(long long width) const {
    return dim3(ceil_div(width, tvk::kTX), ceil_div(d.ny, tvk::kTY), d.nz);
  }

  void upload(float* dst, const float* src) {
    GLINT_CUDA_CHECK(cudaMemcpy2DAsync(dst, g.px * sizeof(float), src,
                                       d.nx * sizeof(float), d.nx * sizeof(float),
                                       std::size_t(d.ny) * d.nz, cudaMemcpyHostToDevice, s()));
  }
  void download(float* dst, const float* src) {
    GLINT_CUDA_CHECK(cudaMemcpy2DAsync(dst, d.nx * sizeof(float), src,
                                       g.px * sizeof(float), d.nx * sizeof(float),
                                       std::size_t(d.ny) * d.nz, cudaMemcpyDeviceToHost, s()));
  }
  void zero(int set) {
    GLINT_CUDA_CHECK(cudaMemsetAsync(sets[set].get(), 0, 3 * V * sizeof(float), s()));
  }
  void copy_set(int dst, int src) {
    GLINT_CUDA_CHECK(cudaMemcpyAsync(sets[dst].get(), sets[src].get(), 3 * V * sizeof(float),
                                     cudaMemcpyDeviceToDevice, s()));
  }

  /// Whether the variant keeps r in a dual set of its own (p in set 0, r in sets 1 and 2); the
  /// two-state ones (two-state, temporal) rotate p_k and p_{k-1} through their sets instead.
  bool stores_r() const {
    return variant == Variant::separate || variant == Variant::fused ||
           variant == Variant::fused_cube || variant == Variant::fused_march;
  }

  /// Resets the dual to zero (cold start, or the start of a solve). Only the sets that the first
  /// step reads are zeroed: p (set 0), and for the variants that store r, r_1 = p_0 (set 1); the
  /// others are written in full (every voxel x < nx) before anything reads them. `all` zeroes
  /// every set (once, so that even their unused padding columns are defined).
  void reset_dual(bool all = false) {
    const std::size_t n =
        all ? sets.size() : std::min<std::size_t>(sets.size(), stores_r() ? 2 : 1);
    for (std::size_t k = 0; k < n; ++k) zero(int(k));
    cur = prev = 0;
    rcur = 1;
  }

  /// After the dual p was placed in set 0: make r_1 = p_0 for the variant.
  void dual_from_set0() {
    cur = prev = 0;
    rcur = 1;
    if (stores_r()) copy_set(1, 0);
  }

  int free_set(int a, int b, int avoid = -1) const {
    for (int k = 0; k < int(sets.size()); ++k)
      if (k != a && k != b && k != avoid) return k;
    return -1;
  }

  template <class R, bool kTwoState>
  void launch_fused(const float* b, R r, tvk::Dual p, tvk::Dual out, float w, bool nonneg,
                    float cst, float mom) {
    const int xw = pairs ? 2 * tvk::kTX : tvk::kTX;
    auto go = [&](auto kernel, int zr) {
      const dim3 gr(ceil_div(d.nx, xw), ceil_div(d.ny, tvk::kTY), ceil_div(d.nz, zr));
      kernel<<<gr, block(), 0, s()>>>(g, b, r, p, out, w, nonneg, cst, mom);
    };
    if (pairs && shuffle) {
      switch (zrun) {
        case 1: go(tvk::fused_pair_shfl_kernel<R, kTwoState, 1>, 1); break;
        case 4: go(tvk::fused_pair_shfl_kernel<R, kTwoState, 4>, 4); break;
        case 8: go(tvk::fused_pair_shfl_kernel<R, kTwoState, 8>, 8); break;
        default: go(tvk::fused_pair_shfl_kernel<R, kTwoState, 2>, 2); break;
      }
    } else if (pairs) {
      switch (zrun) {
        case 1: go(tvk::fused_pair_kernel<R, kTwoState, 1>, 1); break;
        case 4: go(tvk::fused_pair_kernel<R, kTwoState, 4>, 4); break;
        case 8: go(tvk::fused_pair_kernel<R, kTwoState, 8>, 8); break;
        default: go(tvk::fused_pair_kernel<R, kTwoState, 2>, 2); break;
      }
    } else {
      switch (zrun) {
        case 1: go(tvk::fused_kernel<R, kTwoState, 1>, 1); break;
        case 4: go(tvk::fused_kernel<R, kTwoState, 4>, 4); break;
        case 8: go(tvk::fused_kernel<R, kTwoState, 8>, 8); break;
        default: go(tvk::fused_kernel<R, kTwoState, 2>, 2); break;
      }
    }
  }

  /// One step of the register-marching kernel (two-state or stored r).
  template <class S>
  void launch_march_step(const float* b, S src, tvk::Dual p, tvk::Dual out, float w,
                         bool nonneg, float cst, float mom) {
    with_step_kernel<S>(step, [&](auto kernel, int rws, int wps) {
      kernel<<<step_grid(rws, wps), dim3(32, wps), 0, s()>>>(g, b, src, p, out, w, nonneg, cst,
                                                             mom, chunk1);
    });
  }

  /// The one-step register kernel's grid (K rows per warp, W warps): 30 x (K W - 2) outputs per
  /// block, chunk1 planes.
  dim3 step_grid(int rws, int wps) const { return march_grid(d, 30, wps * rws - 2, chunk1); }

  /// One step of the staged kernel: two-state (in1 = p_k, in2 = p_{k-1}, p' to out1) or stored r
  /// (in1 = r, in2 = p, p' to out1 = p in place, r' to out2).
  template <bool kStored>
  void launch_staged(const float* b, tvk::CDual in1, tvk::CDual in2, tvk::Dual out1,
                     tvk::Dual out2, float w, bool nonneg, float cst, float ma, float mb) {
    with_staged_step<kStored>(staged_warps, staged_ahead, [&](auto kernel, int wps, int smem) {
      kernel<<<staged_order.blocks(), dim3(32, wps), smem, s()>>>(
          g, b, in1, in2, out1, out2, w, nonneg, cst, ma, mb, true, pair_rg, staged_order);
    });
  }

  /// The one-column two-step kernel's grid (K rows per warp, W warps): 28 x (K W - 4) outputs
  /// per block, chunk2 planes.
  dim3 temporal_grid(int rws, int wps) const { return march_grid(d, 28, wps * rws - 4, chunk2); }

  /// Two two-state steps in one register-marching pass: p_{k+1} to n1 (unless keep1 is false)
  /// and p_{k+2} to n2.
  void launch_temporal_march(const float* b, tvk::CDual c0, tvk::CDual c1, tvk::Dual n1,
                             tvk::Dual n2, float w, bool nonneg, float cst, float ma, float mb,
                             bool keep1) {
    with_temporal_kernel(temporal, [&](auto kernel, int rws, int wps, int smem, auto pair) {
      if constexpr (decltype(pair)::value)
        kernel<<<temporal_order.blocks(), dim3(32, wps), smem, s()>>>(
            g, b, c0, c1, n1, n2, w, nonneg, cst, ma, mb, keep1, pair_rg, temporal_order);
      else
        kernel<<<temporal_grid(rws, wps), dim3(32, wps), smem, s()>>>(
            g, b, c0, c1, n1, n2, w, nonneg, cst, ma, mb, keep1, chunk2);
    });
  }

  void two_state_step(const float* b, float w, bool nonneg, float cst, float mi) {
    const int out = free_set(cur, prev);
    if (staged) {
      launch_staged<false>(b, tvk::c(dual(cur)), tvk::c(dual(prev)), dual(out), dual(out), w,
                           nonneg, cst, mi, 0.f);
    } else if (twostate_march) {
      launch_march_step(b, tvk::MarchTwoState{tvk::c(dual(cur)), tvk::c(dual(prev)), mi},
                        dual(cur), dual(out), w, nonneg, cst, 0.f);
    } else {
      tvk::TwoStateR r{tvk::c(dual(cur)), tvk::c(dual(prev)), mi};
      launch_fused<tvk::TwoStateR, true>(b, r, dual(cur), dual(out), w, nonneg, cst, 0.f);
    }
    GLINT_CUDA_CHECK_LAUNCH();
    prev = cur;
    cur = out;
  }

  /// The proximal step: `steps` FGP steps on b with weight w from the current dual; x' to out.
  void prox(const float* b, float w, int steps, bool nonneg, float* out) {
    if (!(w > 0)) steps = 0;  // no TV term: the proximal step is the projection max(b, 0)
    const float cst = tv::dual_step(w);
    const std::vector<float> M = tv::fgp_momenta(std::max(steps, 1));
    auto m_out = [&](int k) { return k == steps ? 0.0f : M[k - 1]; };  // r_{k+1} after step k
    auto m_in = [&](int k) { return k == 1 ? 0.0f : M[k - 2]; };       // r_k before step k
    int pset = 0;
    switch (variant) {
      case Variant::separate:
        for (int k = 1; k <= steps; ++k) {
          tvk::primal_kernel<<<grid(d.nx), block(), 0, s()>>>(g, b, tvk::c(dual(1)), w, nonneg,
                                                              zb.get());
          GLINT_CUDA_CHECK_LAUNCH();
          tvk::dual_kernel<<<grid(d.nx), block(), 0, s()>>>(g, zb.get(), dual(1), dual(0),
                                                            dual(1), cst, m_out(k));
          GLINT_CUDA_CHECK_LAUNCH();
        }
        break;
      case Variant::fused:
      case Variant::fused_cube:
      case Variant::fused_march:
        for (int k = 1; k <= steps; ++k) {
          const int rout = 3 - rcur;
          if (variant == Variant::fused && staged) {
            launch_staged<true>(b, tvk::c(dual(rcur)), tvk::c(dual(0)), dual(0), dual(rout), w,
                                nonneg, cst, 0.f, m_out(k));
          } else if (variant == Variant::fused) {
            launch_fused<tvk::StoredR, false>(b, tvk::StoredR{tvk::c(dual(rcur))}, dual(0),
                                              dual(rout), w, nonneg, cst, m_out(k));
          } else if (variant == Variant::fused_cube) {
            const dim3 cb(tvk::kCX, tvk::kCY, tvk::kCZ);
            const dim3 cg(ceil_div(d.nx, tvk::kCX), ceil_div(d.ny, tvk::kCY),
                          ceil_div(d.nz, tvk::kCZ));
            tvk::fused_cube_kernel<<<cg, cb, 0, s()>>>(g, b, tvk::c(dual(rcur)), dual(0),
                                                       dual(rout), w, nonneg, cst, m_out(k));
          } else if (regmarch) {
            launch_march_step(b, tvk::MarchStored{tvk::c(dual(rcur)), dual(0)}, dual(0),
                              dual(rout), w, nonneg, cst, m_out(k));
          } else {
            const dim3 mg(ceil_div(d.nx, tvk::kTX), ceil_div(d.ny, tvk::kTY),
                          ceil_div(d.nz, chunk_march));
            tvk::fused_march_kernel<<<mg, block(), 0, s()>>>(g, b, tvk::c(dual(rcur)), dual(0),
                                                             dual(rout), w, nonneg, cst,
                                                             m_out(k), chunk_march);
          }
          GLINT_CUDA_CHECK_LAUNCH();
          rcur = rout;
        }
        break;
      case Variant::two_state:
        prev = cur;
        for (int k = 1; k <= steps; ++k) two_state_step(b, w, nonneg, cst, m_in(k));
        pset = cur;
        break;
      case Variant::temporal: {
        prev = cur;
        int k = 0;  // steps done
        const dim3 mg(ceil_div(d.nx, tvk::kTX), ceil_div(d.ny, tvk::kTY), ceil_div(d.nz, chunk));
        while (k + 2 <= steps) {
          const int n1 = free_set(cur, prev), n2 = free_set(cur, prev, n1);
          // The last pass (no odd step after it) need not write p_{k+1}: the proximal step
          // ends with p_{k+2}, and the next one starts from it alone.
          const bool keep1 = keep_last1 || k + 2 < steps;
          if (regmarch)
            launch_temporal_march(b, tvk::c(dual(cur)), tvk::c(dual(prev)), dual(n1), dual(n2),
                                  w, nonneg, cst, m_in(k + 1), m_in(k + 2), keep1);
          else
            tvk::temporal_kernel<<<mg, block(), 0, s()>>>(g, b, tvk::c(dual(cur)),
                                                          tvk::c(dual(prev)), dual(n1),
                                                          dual(n2), w, nonneg, cst, m_in(k + 1),
                                                          m_in(k + 2), keep1, chunk);
          GLINT_CUDA_CHECK_LAUNCH();
          prev = n1;
          cur = n2;
          k += 2;
        }
        if (k < steps) two_state_step(b, w, nonneg, cst, m_in(k + 1));
        pset = cur;
        break;
      }
    }
    tvk::primal_pair_kernel<<<grid((d.nx + 1) / 2), block(), 0, s()>>>(g, b, tvk::c(dual(pset)),
                                                                        w, nonneg, out);
    GLINT_CUDA_CHECK_LAUNCH();
    // The next proximal step starts from this dual (r_1 = p_0): the fused variants' r already
    // holds p (the last step wrote r with m = 0); the two-state ones restart with prev = cur.
    prev = cur;
  }
};

GpuReconstructor::GpuReconstructor(const Dims& dims, Variant variant, bool with_fft, int device,
                                   bool low_priority)
    : impl_(std::make_unique<Impl>()) {
  if (dims.nx < 2 || dims.ny < 2 || dims.nz < 2)
    throw std::invalid_argument("TV solver: volume " + std::to_string(dims.nx) + "x" +
                                std::to_string(dims.ny) + "x" + std::to_string(dims.nz) +
                                " is too small (at least 2 voxels per axis)");
  auto& m = *impl_;
  m.d = dims;
  m.variant = variant;
  m.fft = with_fft;
  m.device = device;
  GLINT_CUDA_CHECK(cudaSetDevice(device));
  cudaDeviceProp prop{};
  GLINT_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  m.device_name = prop.name;
  // Rows of tv_row_pitch(nx, variant) floats (the transforms run out of place, so rows need no
  // room for nx/2 + 1 complex values). GLINT_TV_PITCH (floats, even, at least nx) sets another
  // pitch.
  {
    long long pitch = tv_row_pitch(dims.nx, variant);
    if (const long long e = glint::detail::env_int("GLINT_TV_PITCH", 0, 0, 1 << 20);
        e >= dims.nx && e % 2 == 0)
      pitch = e;
    else if (glint::detail::env_set("GLINT_TV_PITCH"))
      glint::log::write(glint::log::Level::warn,
                        "TV solver: GLINT_TV_PITCH must be an even number of floats of at least "
                        "nx = " + std::to_string(dims.nx) + "; using " + std::to_string(pitch));
    m.g = tvk::Geom{dims.nx, dims.ny, dims.nz, pitch, pitch * dims.ny};
    m.V = static_cast<std::size_t>(m.g.plane) * dims.nz;
  }
  m.pair_rg = tv_pair_regions(dims.nx);
  if (const int ox = env_int("GLINT_TV_OX", 0); ox == 56 || ox == 60)
    m.pair_rg = tv_pair_regions_uniform(dims.nx, ox);
  else if (glint::detail::env_set("GLINT_TV_OX"))
    glint::log::write(glint::log::Level::warn,
                      "TV solver: GLINT_TV_OX must be 56 or 60; using the default regions");
  m.chunk = march_chunk(dims, tvk::temporal_kernel, prop.multiProcessorCount);
  m.chunk_march = march_chunk(dims, tvk::fused_march_kernel, prop.multiProcessorCount);
  m.regmarch = !glint::detail::env_is("GLINT_TV_KERNEL", "classic");
  m.keep_last1 = glint::detail::env_int("GLINT_TV_KEEP1", 0, 0, 1) != 0;
  m.twostate_march = glint::detail::env_is("GLINT_TV_KERNEL", "march");
  const bool force_staged = glint::detail::env_is("GLINT_TV_KERNEL", "staged");
  const bool force_pair = glint::detail::env_is("GLINT_TV_KERNEL", "pair");
  const bool staged_kind = variant == Variant::fused || variant == Variant::two_state ||
                           variant == Variant::temporal;
  int staged_per_sm = 1;  // resident blocks of the staged kernel per SM
  bool staged_fits = false, temporal_fits = false;
  // Allows a kernel `smem` bytes of dynamic shared memory (above the default 48 KiB a kernel
  // needs that consent) if they fit a block on this GPU together with its static shared memory;
  // false (and nothing allowed) if they do not.
  auto allow_smem = [&](auto kernel, int smem) {
    cudaFuncAttributes fa{};
    GLINT_CUDA_CHECK(cudaFuncGetAttributes(&fa, kernel));
    if (fa.sharedSizeBytes + static_cast<std::size_t>(smem) > prop.sharedMemPerBlockOptin)
      return false;
    GLINT_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    return true;
  };
  // Defaults measured on the H200 (docs/performance.md): fused-march 2 rows per warp, loads two
  // planes ahead, 8 warps per block; two-state (marching) 3 rows, two ahead, 8 warps; temporal
  // the two-column kernel, 24 warps (one block of 768 threads per SM). GLINT_TV_ROWS,
  // GLINT_TV_AHEAD, GLINT_TV_WARPS (warps per block), GLINT_TV_BLOCKS (blocks per SM, which caps
  // the registers per thread) and GLINT_TV_COLS (columns per lane) pick another built shape
  // (with_step_kernel, with_temporal_kernel); an unbuilt one keeps the default.
  if (variant == Variant::fused_march) m.step = MarchShape{2, 2, tvk::kWarps, 0};
  auto from_env = [](MarchShape def) {
    return MarchShape{env_int("GLINT_TV_ROWS", def.rows), env_int("GLINT_TV_AHEAD", def.ahead),
                      env_int("GLINT_TV_WARPS", def.warps), env_int("GLINT_TV_BLOCKS", def.blocks),
                      env_int("GLINT_TV_COLS", def.cols)};
  };
  auto unbuilt = [](const char* which, const MarchShape& s) {
    glint::log::write(glint::log::Level::warn, std::string("TV solver: ") + which +
                                                   " kernel shape " + s.str() +
                                                   " is not built; using the default");
  };
  if (const MarchShape s = from_env(m.step);
      with_step_kernel<tvk::MarchTwoState>(s, [](auto, int, int) {}))
    m.step = s;
  else if (variant == Variant::fused_march || (variant == Variant::two_state && m.twostate_march))
    unbuilt("one-step", s);
  if (const MarchShape s = from_env(m.temporal);
      with_temporal_kernel(s, [](auto, int, int, int, auto) {}))
    m.temporal = s;
  else if (variant == Variant::temporal)
    unbuilt("temporal", s);
  {
    const int sms = prop.multiProcessorCount;
    // The two-column kernels' launch orders (tv_pair_order), with GLINT_TV_GROUP regions per
    // group and GLINT_TV_FIRST regions taking all planes first where set.
    const long long env_group = glint::detail::env_int("GLINT_TV_GROUP", -1, 0, 1 << 20);
    const int env_first =
        static_cast<int>(glint::detail::env_int("GLINT_TV_FIRST", -1, 0, 1 << 20));
    // Planes per block from the occupancy of the shape loading one plane ahead (as measured).
    MarchShape s1 = m.step;
    s1.ahead = 1;
    if (!with_step_kernel<tvk::MarchTwoState>(s1, [](auto, int, int) {})) s1 = m.step;
    with_step_kernel<tvk::MarchTwoState>(s1, [&](auto kernel, int rws, int wps) {
      m.chunk1 = march_chunk_for(dims, plane_tiles(m.step_grid(rws, wps)),
                                 resident_per_sm(kernel, wps), sms, 32, 1);
    });
    if (const int sw = env_int("GLINT_TV_WARPS", 24), sa = env_int("GLINT_TV_AHEAD", 1);
        staged_kind) {
      if (!with_staged_step<false>(sw, sa, [](auto, int, int) {})) {
        if (force_staged)
          glint::log::write(glint::log::Level::warn,
                            "TV solver: the staged kernel is built for 16, 24 or 32 warps per "
                            "block and 1 or 2 planes ahead, not " +
                                std::to_string(sw) + " and " + std::to_string(sa) +
                                "; using 24 and 1");
      } else {
        m.staged_warps = sw;
        m.staged_ahead = sa;
      }
      auto setup = [&](auto kernel, int wps, int smem) {
        if (!allow_smem(kernel, smem)) return;
        staged_per_sm = resident_per_sm(kernel, wps, smem);
        m.staged_order = pair_order(dims, m.pair_rg, wps, 1, staged_per_sm, sms, 32, env_group,
                                    env_first);
        staged_fits = true;
      };
      // The form the variant runs: stored r for fused, two-state for the others.
      if (variant == Variant::fused)
        with_staged_step<true>(m.staged_warps, m.staged_ahead, setup);
      else
        with_staged_step<false>(m.staged_warps, m.staged_ahead, setup);
      if (force_staged && !staged_fits)
        glint::log::write(glint::log::Level::warn,
                          "TV solver: the staged kernel needs more shared memory than " +
                              m.device_name + " has per block; not used");
    }
    auto temporal_setup = [&](auto kernel, int rws, int wps, int smem, auto pair) {
      if (!allow_smem(kernel, smem)) return;
      const int per_sm = resident_per_sm(kernel, wps, smem);
      if constexpr (decltype(pair)::value) {
        m.temporal_order = pair_order(dims, m.pair_rg, wps, 2, per_sm, sms, 48, env_group,
                                      env_first);
      } else {
        m.chunk2 = march_chunk_for(dims, plane_tiles(m.temporal_grid(rws, wps)), per_sm, sms, 48,
                                   2);
      }
      temporal_fits = true;
    };
    with_temporal_kernel(m.temporal, temporal_setup);
    if (!temporal_fits) {
      // A GPU with less shared memory per block than the two-column kernel needs: the register
      // kernel with one column per lane (no dynamic shared memory) instead.
      glint::log::write(glint::log::Level::info,
                        "TV solver: temporal kernel shape " + m.temporal.str() +
                            " needs more shared memory than " + m.device_name +
                            " has per block; using rows 1, ahead 1, warps 32, blocks 1, "
                            "columns 1");
      m.temporal = MarchShape{1, 1, 32, 1, 1};
      with_temporal_kernel(m.temporal, temporal_setup);
    }
  }
  if (const auto c = glint::detail::env_int("GLINT_TV_CHUNK", 0, 1, 1 << 20); c > 0)
    m.chunk = m.chunk_march = m.chunk1 = m.chunk2 = m.staged_order.chunk =
        m.temporal_order.chunk = static_cast<int>(c);  // planes per block
  // Two-state (and temporal's odd last step) run the staged one-step kernel where its grid fills
  // at least three waves of resident blocks, the pair kernel elsewhere: measured on the H200
  // (docs/performance.md), the staged kernel is 3% faster at 256^3 and 6% at 512^3, but a grid
  // of about one wave (400 x 400 x 16) leaves SMs idle. Fused keeps its pair kernel (the staged
  // one is slower for it). GLINT_TV_KERNEL=staged or =pair forces either.
  if (staged_kind && !m.twostate_march) {
    const long long blocks = m.staged_order.blocks();
    const long long wave = static_cast<long long>(staged_per_sm) *
                           prop.multiProcessorCount;
    m.staged = staged_fits && (force_staged || (!force_pair && variant != Variant::fused &&
                                                blocks >= 3 * wave));
  }
  auto order_str = [](const TvPairOrder& o) {
    return std::to_string(o.first) + " regions first with all planes, then chunks of " +
           std::to_string(o.chunk) + " planes in groups of " + std::to_string(o.group) +
           " regions (0: one group)";
  };
  glint::log::write(glint::log::Level::debug,
                    "TV solver: planes per block of the marching kernels: one step per pass " +
                        std::to_string(m.chunk1) + "; two steps: " +
                        (m.temporal.cols == 2 ? order_str(m.temporal_order)
                                              : std::to_string(m.chunk2) + " planes") +
                        (m.staged ? "; staged one-step kernel: " + order_str(m.staged_order)
                                  : std::string()));
  m.zrun = zrun_from_env();
  m.pairs = glint::detail::env_int("GLINT_TV_PAIRS", 1, 0, 1) != 0;
  // Measured on the H200 (docs/performance.md): the lane-shuffle pair kernel is faster for fused,
  // the loading one for two-state. GLINT_TV_SHUFFLE = 0 or 1 overrides.
  m.shuffle = glint::detail::env_int("GLINT_TV_SHUFFLE", variant == Variant::fused ? 1 : 0, 0,
                                     1) != 0;
  m.stream = std::make_unique<Stream>(low_priority ? StreamPriority::low : StreamPriority::normal);
  m.e0 = std::make_unique<Event>(/*timing=*/true);
  m.e1 = std::make_unique<Event>(/*timing=*/true);

  // Plan first: cuFFT tells its work size without allocating it.
  auto& p = m.plan;
  p.dims = dims;
  p.variant = variant;
  p.fft = with_fft;
  p.row_floats = static_cast<std::size_t>(m.g.px);
  p.volume_bytes = m.V * sizeof(float);
  p.volumes = tv_volumes_needed(variant, with_fft);
  if (with_fft) {
    m.r2c = FftPlan(dims, m.g.px, CUFFT_R2C);
    m.c2r = FftPlan(dims, m.g.px, CUFFT_C2R);
    p.fft_work_bytes = std::max(m.r2c.work_bytes(), m.c2r.work_bytes());
  }
  p.spectra_bytes = tv_spectra_bytes(dims, with_fft);
  p.total_bytes = std::size_t(std::ceil(p.volumes * double(p.volume_bytes))) + p.spectra_bytes +
                  p.fft_work_bytes;
  std::size_t free_b = 0, total_b = 0;
  GLINT_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  p.free_bytes = free_b;
  const std::size_t margin = 256ull << 20;  // context, kernels, fragmentation
  if (p.total_bytes + margin > free_b)
    throw std::runtime_error("TV solver: the volume does not fit on GPU " +
                             std::to_string(device) + " (" + m.device_name + "): " +
                             p.describe() + "; use a smaller volume or --backend cpu");
  glint::log::write(glint::log::Level::info, "TV solver on GPU " + std::to_string(device) + " (" +
                                                 m.device_name + "): " + p.describe());

  const std::size_t V = m.V;
  m.x = DeviceBuffer(V);
  m.xprev = DeviceBuffer(V);
  m.buf = DeviceBuffer(V);
  if (with_fft) {
    m.hy = DeviceBuffer(TvSpectra::kHy * dims.spectrum_size());
    m.spec = DeviceBuffer(TvSpectra::kResidual * dims.spectrum_size());
    m.h2n = DeviceBuffer(TvSpectra::kH2n * dims.spectrum_size());
    m.work = DeviceBuffer((p.fft_work_bytes + sizeof(float) - 1) / sizeof(float));
    GLINT_CUFFT_CHECK(cufftSetWorkArea(m.r2c.get(), m.work.get()));
    GLINT_CUFFT_CHECK(cufftSetWorkArea(m.c2r.get(), m.work.get()));
    GLINT_CUFFT_CHECK(cufftSetStream(m.r2c.get(), m.s()));
    GLINT_CUFFT_CHECK(cufftSetStream(m.c2r.get(), m.s()));
  } else {
    m.yv = DeviceBuffer(V);
  }
  if (variant == Variant::separate) m.zb = DeviceBuffer(V);
  for (int k = 0; k < tv_dual_sets(variant); ++k) m.sets.emplace_back(3 * V);
  // Padding columns are never written by the TV kernels: give them defined contents once.
  GLINT_CUDA_CHECK(cudaMemsetAsync(m.x.get(), 0, V * sizeof(float), m.s()));
  GLINT_CUDA_CHECK(cudaMemsetAsync(m.xprev.get(), 0, V * sizeof(float), m.s()));
  GLINT_CUDA_CHECK(cudaMemsetAsync(m.buf.get(), 0, V * sizeof(float), m.s()));
  if (!with_fft) GLINT_CUDA_CHECK(cudaMemsetAsync(m.yv.get(), 0, V * sizeof(float), m.s()));
  if (m.zb.get()) GLINT_CUDA_CHECK(cudaMemsetAsync(m.zb.get(), 0, V * sizeof(float), m.s()));
  m.reset_dual(/*all=*/true);
  GLINT_CUDA_CHECK(cudaStreamSynchronize(m.s()));
}

GpuReconstructor::~GpuReconstructor() = default;

std::string GpuReconstructor::name() const { return "gpu (" + impl_->device_name + ")"; }
tv::Dims GpuReconstructor::dims() const { return impl_->d; }
const TvMemoryPlan& GpuReconstructor::memory_plan() const { return impl_->plan; }

tv::SolveReport GpuReconstructor::solve(std::span<const float> y, const tv::TransferFunction& H,
                                        const tv::SolverOptions& o, std::span<float> xout,
                                        const tv::Progress& progress) {
  auto& m = *impl_;
  const Dims& d = m.d;
  tv::check_solve_arguments(d, y, H, o, xout);
  if (o.variant != m.variant)
    throw std::invalid_argument("TV solver: planned for variant " +
                                std::string(tv::variant_name(m.variant)) + ", asked for " +
                                std::string(tv::variant_name(o.variant)));
  if (!H.identity() && !m.fft)
    throw std::invalid_argument("TV solver: planned for the identity forward model only");
  GLINT_CUDA_CHECK(cudaSetDevice(m.device));
  const float t = tv::fista_step(H);
  const float w = tv::prox_weight(t, o.lambda);
  const std::vector<float> F = tv::fista_momenta(o.outer);

  // Inputs: y into buf (identity: into y), H into h2n; everything after this is timed.
  const bool identity = H.identity();
  m.upload(identity ? m.yv.get() : m.buf.get(), y.data());
  if (!identity)
    GLINT_CUDA_CHECK(cudaMemcpyAsync(m.h2n.get(), H.h.data(), H.h.size() * sizeof(float),
                                     cudaMemcpyHostToDevice, m.s()));
  GLINT_CUDA_CHECK(cudaEventRecord(m.e0->get(), m.s()));
  const dim3 blk = m.block();
  const long long S = static_cast<long long>(d.spectrum_size());
  const int sblocks = ceil_div(S, 256);
  if (!identity) {
    // x_0 from y, then H Y / N and H^2 / N.
    tvk::init_kernel<<<m.grid(d.nx), blk, 0, m.s()>>>(m.g, m.buf.get(), o.nonneg, m.x.get(),
                                                      m.xprev.get());
    GLINT_CUDA_CHECK_LAUNCH();
    GLINT_CUFFT_CHECK(cufftExecR2C(m.r2c.get(), m.buf.get(),
                                   reinterpret_cast<cufftComplex*>(m.hy.get())));
    tvk::setup_spectrum_kernel<<<sblocks, 256, 0, m.s()>>>(
        S, tv::inverse_size(d), reinterpret_cast<float2*>(m.hy.get()), m.h2n.get());
    GLINT_CUDA_CHECK_LAUNCH();
  } else {
    tvk::init_kernel<<<m.grid(d.nx), blk, 0, m.s()>>>(m.g, m.yv.get(), o.nonneg, m.x.get(),
                                                      m.xprev.get());
    GLINT_CUDA_CHECK_LAUNCH();
  }
  m.reset_dual();

  for (int it = 1; it <= o.outer; ++it) {
    const float mom = it >= 2 ? F[it - 2] : 0.0f;
    if (!identity) {
      tvk::extrapolate_pair_kernel<<<m.grid((d.nx + 1) / 2), blk, 0, m.s()>>>(
          m.g, m.x.get(), m.xprev.get(), mom, m.buf.get());
      GLINT_CUDA_CHECK_LAUNCH();
      GLINT_CUFFT_CHECK(cufftExecR2C(m.r2c.get(), m.buf.get(),
                                     reinterpret_cast<cufftComplex*>(m.spec.get())));
      tvk::spectrum_kernel<<<sblocks, 256, 0, m.s()>>>(
          S, reinterpret_cast<const float2*>(m.hy.get()), m.h2n.get(),
          reinterpret_cast<float2*>(m.spec.get()));
      GLINT_CUDA_CHECK_LAUNCH();
      GLINT_CUFFT_CHECK(cufftExecC2R(m.c2r.get(), reinterpret_cast<cufftComplex*>(m.spec.get()),
                                     m.buf.get()));
    }
    tvk::gradient_step_kernel<<<m.grid((d.nx + 1) / 2), blk, 0, m.s()>>>(
        m.g, m.x.get(), m.xprev.get(), mom, t, identity ? m.yv.get() : nullptr, m.buf.get());
    GLINT_CUDA_CHECK_LAUNCH();
    if (!o.warm_start && it > 1) m.reset_dual();
    m.prox(m.buf.get(), w, o.tv_inner, o.nonneg, m.xprev.get());
    std::swap(m.x, m.xprev);
    if (progress) {
      GLINT_CUDA_CHECK(cudaStreamSynchronize(m.s()));
      progress(it, o.outer);
    }
  }
  GLINT_CUDA_CHECK(cudaEventRecord(m.e1->get(), m.s()));
  m.download(xout.data(), m.x.get());
  GLINT_CUDA_CHECK(cudaStreamSynchronize(m.s()));
  float ms = 0;
  GLINT_CUDA_CHECK(cudaEventElapsedTime(&ms, m.e0->get(), m.e1->get()));
  return tv::SolveReport{ms / 1000.0, o.outer, o.tv_inner};
}

void GpuReconstructor::denoise(std::span<const float> b, float w, int steps, bool nonneg,
                               std::span<float> p, std::span<float> x) {
  auto& m = *impl_;
  const Dims& d = m.d;
  const std::size_t n = d.voxels();
  tv::check_denoise_arguments(d, b, p, x);
  GLINT_CUDA_CHECK(cudaSetDevice(m.device));
  m.upload(m.buf.get(), b.data());
  const tvk::Dual p0 = m.dual(0);
  m.upload(p0.x, p.data());
  m.upload(p0.y, p.data() + n);
  m.upload(p0.z, p.data() + 2 * n);
  m.dual_from_set0();
  m.prox(m.buf.get(), w, steps, nonneg, m.xprev.get());
  const int ps = m.stores_r() ? 0 : m.cur;
  const tvk::Dual pf = m.dual(ps);
  m.download(p.data(), pf.x);
  m.download(p.data() + n, pf.y);
  m.download(p.data() + 2 * n, pf.z);
  m.download(x.data(), m.xprev.get());
  GLINT_CUDA_CHECK(cudaStreamSynchronize(m.s()));
}

double measure_copy_bandwidth(std::size_t bytes, int reps, int device) {
  GLINT_CUDA_CHECK(cudaSetDevice(device));
  const std::size_t n = bytes / sizeof(float);
  DeviceBuffer a(n), b(n);
  Stream st;
  GLINT_CUDA_CHECK(cudaMemsetAsync(a.get(), 1, n * sizeof(float), st.get()));
  const double med = detail::median_copy_ms(b.get(), a.get(), n * sizeof(float),
                                            cudaMemcpyDeviceToDevice, st.get(), reps,
                                            /*warmups=*/2);
  return 2.0 * double(n * sizeof(float)) / (med * 1e-3) / 1e9;
}

namespace {
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

unsigned long long count_recip_sqrt_mismatches(float lo, float hi, int device) {
  if (!(lo >= 0.0f) || !(hi >= lo))
    throw std::invalid_argument("count_recip_sqrt_mismatches: need 0 <= lo <= hi");
  // Non-negative floats order as their bit patterns.
  const auto lb = std::bit_cast<unsigned>(lo), hb = std::bit_cast<unsigned>(hi);
  GLINT_CUDA_CHECK(cudaSetDevice(device));
  detail::DeviceBuffer<unsigned long long> count(1);
  auto* c = count.get();
  Stream st;
  GLINT_CUDA_CHECK(cudaMemsetAsync(c, 0, sizeof *c, st.get()));
  recip_sqrt_mismatch_kernel<<<1024, 256, 0, st.get()>>>(lb, hb - lb + 1ULL, c);
  GLINT_CUDA_CHECK_LAUNCH();
  unsigned long long host = 0;
  GLINT_CUDA_CHECK(cudaMemcpyAsync(&host, c, sizeof host, cudaMemcpyDeviceToHost, st.get()));
  GLINT_CUDA_CHECK(cudaStreamSynchronize(st.get()));
  return host;
}

}  // namespace glint::gpu
