// The GPU TV solver: FISTA outer loop with cuFFT out-of-place real transforms, FGP inner steps by
// the selected kernel variant. Host code only: the kernels sit behind the launchers of
// tv_launch.hpp. All work goes to one explicit stream; memory is planned and checked against the
// device's free memory before anything is allocated.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <utility>
#include <vector>

#include "check.cuh"
#include "cuda_owners.hpp"
#include "glint/detail/ceil_div.hpp"
#include "glint/gpu/tv_solver.hpp"
#include "tv_launch.hpp"

namespace glint::gpu {

namespace {

using tv::Dims;
using tv::Variant;
using tvk::MarchShape;

// ---- move-only owners (cuda_owners.hpp; the cuFFT plan below) ------------------------------

using DeviceBuffer = detail::DeviceBuffer<float>;
using detail::Event;
using detail::Stream;
using detail::StreamPriority;
using detail::StreamView;

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

/// Planes per thread of the one-voxel kernels (fused, two-state): TvTuning::zrun where it is 1,
/// 2, 4 or 8, else the default. Default measured on the H200 (docs/performance.md): 4 planes for
/// both (fused, with its lane-shuffle kernel, took 2 before rows were 128-byte aligned).
int zrun_of(const TvTuning& t) {
  const int z = t.zrun;
  return (z == 1 || z == 2 || z == 4 || z == 8) ? z : 4;
}

/// A tuning value, or `fallback` where it is unset (negative). A kernel-shape value: an unbuilt
/// shape keeps the default (the constructor decides).
int or_default(int value, int fallback) { return value >= 0 ? value : fallback; }

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
/// each of `sms` SMs, chunks of at most max_chunk planes; group and first: TvTuning's (-1:
/// planned).
TvPairOrder pair_order(const Dims& d, const TvPairRegions& rg, int warps, int halo, int per_sm,
                       int sms, int max_chunk, long long group, int first) {
  const int tiles = rg.count() * ceil_div(d.ny, warps - 2 * halo);
  return tv_pair_order(d.nz, rg.count(), tiles, per_sm, sms, halo, max_chunk, group, first);
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
  // The one-voxel kernels of fused and two-state: the neighbours across pairs from the
  // neighbouring lanes or loaded, planes per thread.
  tvk::FusedShape fused_shape;
  // Register-marching kernels for fused-march and temporal, and for two-state with
  // TvTuning::Kernel::march (its one-voxel pair kernel is faster on the H200). `rows` rows per
  // warp, loads `ahead` planes ahead, chunks of chunk1 (one step per pass) and chunk2 (two
  // steps, the one-column kernel; the two-column one's: temporal_order) planes per block.
  // `step` and `temporal`: the shapes of the one-step and the two-step kernel.
  bool twostate_march = false;
  MarchShape step{3, 2, tvk::kWarps, 0}, temporal{1, 1, 24, 1, 2};
  int chunk1 = 16, chunk2 = 16;
  // `staged`: two-state (chosen by the volume's size, see the constructor) or, with
  // TvTuning::Kernel::staged, fused too run the staged one-step kernel (inputs copied into
  // shared memory a plane ahead, neighbour-only synchronisation) with `staged_warps` warps per
  // block.
  bool staged = false;
  int staged_warps = 24, staged_ahead = 1;
  // The two-column kernels' launch orders (TvPairOrder, planned by tv_pair_order): the staged
  // one-step kernel's and the two-step kernel's. Regions per group by default tv_launch_group:
  // equal groups of at most, and nearly, the resident blocks, so that a region's next chunk
  // starts about as its previous one ends, on planes that one read last (measured on the H200,
  // docs/performance.md); TvTuning::group sets both. TvTuning::first sets both orders' regions
  // that take all planes first.
  TvPairOrder staged_order, temporal_order;
  // Regions across x of the two-column marching kernels (march_pair_kernel), both kernels: the
  // fewest, as many of 56 columns as that allows (tv_pair_regions; measured on the H200,
  // docs/performance.md). TvTuning::ox = 56 or 60 makes them all that wide.
  TvPairRegions pair_rg;

  StreamView s() const { return stream->get(); }
  tvk::Dual dual(int k) const {
    float* p = sets[k].get();
    return {p, p + V, p + 2 * V};
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

  void two_state_step(const float* b, float w, bool nonneg, float cst, float mi) {
    const int out = free_set(cur, prev);
    if (staged) {
      tvk::launch_staged(false, staged_warps, staged_ahead, staged_order, pair_rg, g, b,
                         tvk::c(dual(cur)), tvk::c(dual(prev)), dual(out), dual(out), w, nonneg,
                         cst, mi, 0.f, s());
    } else if (twostate_march) {
      tvk::launch_march_step_two_state(step, chunk1, g, b, tvk::c(dual(cur)), tvk::c(dual(prev)),
                                       mi, dual(cur), dual(out), w, nonneg, cst, 0.f, s());
    } else {
      tvk::launch_fused_two_state(fused_shape, g, b, tvk::c(dual(cur)), tvk::c(dual(prev)), mi,
                                  dual(cur), dual(out), w, nonneg, cst, 0.f, s());
    }
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
          tvk::launch_primal(g, b, tvk::c(dual(1)), w, nonneg, zb.get(), s());
          tvk::launch_dual(g, zb.get(), dual(1), dual(0), dual(1), cst, m_out(k), s());
        }
        break;
      case Variant::fused:
      case Variant::fused_cube:
      case Variant::fused_march:
        for (int k = 1; k <= steps; ++k) {
          const int rout = 3 - rcur;
          if (variant == Variant::fused && staged) {
            tvk::launch_staged(true, staged_warps, staged_ahead, staged_order, pair_rg, g, b,
                               tvk::c(dual(rcur)), tvk::c(dual(0)), dual(0), dual(rout), w,
                               nonneg, cst, 0.f, m_out(k), s());
          } else if (variant == Variant::fused) {
            tvk::launch_fused_stored(fused_shape, g, b, tvk::c(dual(rcur)), dual(0), dual(rout),
                                     w, nonneg, cst, m_out(k), s());
          } else if (variant == Variant::fused_cube) {
            tvk::launch_fused_cube(g, b, tvk::c(dual(rcur)), dual(0), dual(rout), w, nonneg, cst,
                                   m_out(k), s());
          } else {
            tvk::launch_march_step_stored(step, chunk1, g, b, tvk::c(dual(rcur)), dual(0),
                                          dual(0), dual(rout), w, nonneg, cst, m_out(k), s());
          }
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
        while (k + 2 <= steps) {
          const int n1 = free_set(cur, prev), n2 = free_set(cur, prev, n1);
          // The last pass (no odd step after it) need not write p_{k+1}: the proximal step
          // ends with p_{k+2}, and the next one starts from it alone.
          const bool keep1 = k + 2 < steps;
          tvk::launch_temporal(temporal, temporal_order, pair_rg, chunk2, g, b,
                               tvk::c(dual(cur)), tvk::c(dual(prev)), dual(n1), dual(n2), w,
                               nonneg, cst, m_in(k + 1), m_in(k + 2), keep1, s());
          prev = n1;
          cur = n2;
          k += 2;
        }
        if (k < steps) two_state_step(b, w, nonneg, cst, m_in(k + 1));
        pset = cur;
        break;
      }
    }
    tvk::launch_primal_pair(g, b, tvk::c(dual(pset)), w, nonneg, out, s());
    // The next proximal step starts from this dual (r_1 = p_0): the fused variants' r already
    // holds p (the last step wrote r with m = 0); the two-state ones restart with prev = cur.
    prev = cur;
  }
};

GpuReconstructor::GpuReconstructor(const Dims& dims, Variant variant, bool with_fft, int device,
                                   bool low_priority, const TvTuning& tuning)
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
  // room for nx/2 + 1 complex values). TvTuning::pitch (floats, even, at least nx) sets another
  // pitch.
  {
    long long pitch = tv_row_pitch(dims.nx, variant);
    if (const long long e = tuning.pitch; e >= dims.nx && e % 2 == 0)
      pitch = e;
    else if (e != 0)
      glint::log::write(glint::log::Level::warn,
                        "TV solver: the row pitch must be an even number of floats of at least "
                        "nx = " + std::to_string(dims.nx) + ", not " + std::to_string(e) +
                            "; using " + std::to_string(pitch));
    m.g = tvk::Geom{dims.nx, dims.ny, dims.nz, pitch, pitch * dims.ny};
    m.V = static_cast<std::size_t>(m.g.plane) * dims.nz;
  }
  m.pair_rg = tv_pair_regions(dims.nx);
  if (const int ox = tuning.ox; ox == 56 || ox == 60)
    m.pair_rg = tv_pair_regions_uniform(dims.nx, ox);
  else if (ox != 0)
    glint::log::write(glint::log::Level::warn,
                      "TV solver: the regions' output columns must be 56 or 60, not " +
                          std::to_string(ox) + "; using the default regions");
  using Kernel = TvTuning::Kernel;
  m.twostate_march = tuning.kernel == Kernel::march;
  const bool force_staged = tuning.kernel == Kernel::staged;
  const bool force_pair = tuning.kernel == Kernel::pair;
  const bool staged_kind = variant == Variant::fused || variant == Variant::two_state ||
                           variant == Variant::temporal;
  const std::size_t smem_optin = prop.sharedMemPerBlockOptin;
  int staged_per_sm = 0;  // resident blocks of the staged kernel per SM (0: it does not fit)
  int temporal_per_sm = 0;
  // Defaults measured on the H200 (docs/performance.md): fused-march 2 rows per warp, loads two
  // planes ahead, 8 warps per block; two-state (marching) 3 rows, two ahead, 8 warps; temporal
  // the two-column kernel, 24 warps (one block of 768 threads per SM). TvTuning's rows, ahead,
  // warps (per block), blocks (per SM, which caps the registers per thread) and cols (columns
  // per lane) pick another built shape (tvk::step_shape_built, tvk::temporal_shape_built); an
  // unbuilt one keeps the default.
  if (variant == Variant::fused_march) m.step = MarchShape{2, 2, tvk::kWarps, 0};
  auto tuned = [&tuning](MarchShape def) {
    return MarchShape{or_default(tuning.rows, def.rows), or_default(tuning.ahead, def.ahead),
                      or_default(tuning.warps, def.warps), or_default(tuning.blocks, def.blocks),
                      or_default(tuning.cols, def.cols)};
  };
  auto unbuilt = [](const char* which, const MarchShape& s) {
    glint::log::write(glint::log::Level::warn, std::string("TV solver: ") + which +
                                                   " kernel shape " + s.str() +
                                                   " is not built; using the default");
  };
  if (const MarchShape s = tuned(m.step); tvk::step_shape_built(s))
    m.step = s;
  else if (variant == Variant::fused_march || (variant == Variant::two_state && m.twostate_march))
    unbuilt("one-step", s);
  if (const MarchShape s = tuned(m.temporal); tvk::temporal_shape_built(s))
    m.temporal = s;
  else if (variant == Variant::temporal)
    unbuilt("temporal", s);
  {
    const int sms = prop.multiProcessorCount;
    // The two-column kernels' launch orders (tv_pair_order), with TvTuning::group regions per
    // group and TvTuning::first regions taking all planes first where set.
    const long long group = tuning.group;
    const int first = tuning.first;
    // Planes per block from the occupancy of the shape loading one plane ahead (as measured).
    MarchShape s1 = m.step;
    s1.ahead = 1;
    if (!tvk::step_shape_built(s1)) s1 = m.step;
    m.chunk1 = march_chunk_for(dims, tvk::step_grid(m.g, s1.rows, s1.warps, m.chunk1).tiles(),
                               tvk::step_resident_per_sm(s1), sms, 32, 1);
    if (const int sw = or_default(tuning.warps, 24), sa = or_default(tuning.ahead, 1);
        staged_kind) {
      if (!tvk::staged_shape_built(sw, sa)) {
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
      // The form the variant runs: stored r for fused, two-state for the others.
      staged_per_sm = tvk::staged_prepare(variant == Variant::fused, m.staged_warps,
                                          m.staged_ahead, smem_optin);
      if (staged_per_sm > 0)
        m.staged_order = pair_order(dims, m.pair_rg, m.staged_warps, 1, staged_per_sm, sms, 32,
                                    group, first);
      else if (force_staged)
        glint::log::write(glint::log::Level::warn,
                          "TV solver: the staged kernel needs more shared memory than " +
                              m.device_name + " has per block; not used");
    }
    auto temporal_setup = [&] {
      temporal_per_sm = tvk::temporal_prepare(m.temporal, smem_optin);
      if (temporal_per_sm == 0) return;
      if (m.temporal.cols == 2)
        m.temporal_order = pair_order(dims, m.pair_rg, m.temporal.warps, 2, temporal_per_sm, sms,
                                      48, group, first);
      else
        m.chunk2 = march_chunk_for(
            dims, tvk::temporal_grid(m.g, m.temporal.rows, m.temporal.warps, m.chunk2).tiles(),
            temporal_per_sm, sms, 48, 2);
    };
    temporal_setup();
    if (temporal_per_sm == 0) {
      // A GPU with less shared memory per block than the two-column kernel needs: the register
      // kernel with one column per lane (no dynamic shared memory) instead.
      glint::log::write(glint::log::Level::info,
                        "TV solver: temporal kernel shape " + m.temporal.str() +
                            " needs more shared memory than " + m.device_name +
                            " has per block; using rows 1, ahead 1, warps 32, blocks 1, "
                            "columns 1");
      m.temporal = MarchShape{1, 1, 32, 1, 1};
      temporal_setup();
    }
  }
  if (const int c = tuning.chunk; c > 0)
    m.chunk1 = m.chunk2 = m.staged_order.chunk = m.temporal_order.chunk = c;  // planes per block
  // Two-state (and temporal's odd last step) run the staged one-step kernel where its grid fills
  // at least three waves of resident blocks, the pair kernel elsewhere: measured on the H200
  // (docs/performance.md), the staged kernel is 3% faster at 256^3 and 6% at 512^3, but a grid
  // of about one wave (400 x 400 x 16) leaves SMs idle. Fused keeps its pair kernel (the staged
  // one is slower for it). TvTuning::Kernel::staged or ::pair forces either.
  if (staged_kind && !m.twostate_march) {
    const long long blocks = m.staged_order.blocks();
    const long long wave = static_cast<long long>(staged_per_sm) *
                           prop.multiProcessorCount;
    m.staged = staged_per_sm > 0 && (force_staged || (!force_pair && variant != Variant::fused &&
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
  // Measured on the H200 (docs/performance.md): the lane-shuffle pair kernel is faster for fused,
  // the loading one for two-state. TvTuning::shuffle = 0 or 1 overrides.
  m.fused_shape = tvk::FusedShape{
      tuning.shuffle < 0 ? variant == Variant::fused : tuning.shuffle != 0, zrun_of(tuning)};
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
  const long long S = static_cast<long long>(d.spectrum_size());
  if (!identity) {
    // x_0 from y, then H Y / N and H^2 / N.
    tvk::launch_init(m.g, m.buf.get(), o.nonneg, m.x.get(), m.xprev.get(), m.s());
    GLINT_CUFFT_CHECK(cufftExecR2C(m.r2c.get(), m.buf.get(),
                                   reinterpret_cast<cufftComplex*>(m.hy.get())));
    tvk::launch_setup_spectrum(S, tv::inverse_size(d), m.hy.get(), m.h2n.get(), m.s());
  } else {
    tvk::launch_init(m.g, m.yv.get(), o.nonneg, m.x.get(), m.xprev.get(), m.s());
  }
  m.reset_dual();

  for (int it = 1; it <= o.outer; ++it) {
    const float mom = it >= 2 ? F[it - 2] : 0.0f;
    if (!identity) {
      tvk::launch_extrapolate(m.g, m.x.get(), m.xprev.get(), mom, m.buf.get(), m.s());
      GLINT_CUFFT_CHECK(cufftExecR2C(m.r2c.get(), m.buf.get(),
                                     reinterpret_cast<cufftComplex*>(m.spec.get())));
      tvk::launch_spectrum(S, m.hy.get(), m.h2n.get(), m.spec.get(), m.s());
      GLINT_CUFFT_CHECK(cufftExecC2R(m.c2r.get(), reinterpret_cast<cufftComplex*>(m.spec.get()),
                                     m.buf.get()));
    }
    tvk::launch_gradient_step(m.g, m.x.get(), m.xprev.get(), mom, t,
                              identity ? m.yv.get() : nullptr, m.buf.get(), m.s());
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
  tvk::launch_recip_sqrt_mismatches(lb, hb - lb + 1ULL, c, st.get());
  unsigned long long host = 0;
  GLINT_CUDA_CHECK(cudaMemcpyAsync(&host, c, sizeof host, cudaMemcpyDeviceToHost, st.get()));
  GLINT_CUDA_CHECK(cudaStreamSynchronize(st.get()));
  return host;
}

}  // namespace glint::gpu
