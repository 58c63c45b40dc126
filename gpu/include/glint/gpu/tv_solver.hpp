#pragma once
// The GPU TV solver behind glint::tv::Reconstructor (cuFFT + the FGP kernel variants). Header free
// of CUDA; without a CUDA build the constructor throws std::runtime_error.
#include <cstddef>
#include <memory>
#include <string>

#include "glint/detail/ceil_div.hpp"
#include "glint/detail/hd.hpp"
#include "glint/tv/reconstructor.hpp"

namespace glint::gpu {

/// Device memory of one solver, planned before anything is allocated.
struct TvMemoryPlan {
  tv::Dims dims;
  tv::Variant variant = tv::Variant::two_state;
  bool fft = true;
  std::size_t row_floats = 0;     ///< row pitch: tv_row_pitch(nx, variant) unless set
  std::size_t volume_bytes = 0;   ///< one padded volume
  double volumes = 0;             ///< padded volumes
  std::size_t spectra_bytes = 0;  ///< H Y / N, the residual's spectrum, H^2 / N (with FFT)
  std::size_t fft_work_bytes = 0;
  std::size_t total_bytes = 0;
  std::size_t free_bytes = 0;     ///< free on the device when planned
  std::string describe() const;
};

/// Floats per row of the solver's padded volumes: nx rounded up to 32, so that rows are 128-byte
/// aligned, a warp's 64-column pair row is two whole cache lines and no store writes part of a
/// 32-byte sector; then 64 more where that is a multiple of 512 (rows of a multiple of 2 KiB),
/// and for the temporal variant 32 more where it is another multiple of 256 (1 KiB). Measured on
/// the H200 (docs/performance.md): temporal step at 512^3 2.6 % faster at 576 floats than at 512
/// (544: 1.8 %; two-state 0.4 %); at 256^3 2.5 % faster at 288 than at 256 (320: slower), where
/// two-state and fused are 1.4 % and 3.5 % slower at 288, so they keep 256; 768 x 768 x 64
/// temporal 1.2 % faster at 800 than at 768 (864: no faster); 1024 x 512 x 16 temporal within
/// 1 % at 1024, 1088 and 1152.
long long tv_row_pitch(int nx, tv::Variant variant);

/// Dual sets (three padded volumes each) a variant keeps: separate 2 (p, r), fused 3 (p, r in,
/// r out), two-state 3 (rotating p), temporal 4 (two pairs of p).
int tv_dual_sets(tv::Variant variant);

/// Padded volumes the solver needs for a variant (without the spectra and the cuFFT work area).
double tv_volumes_needed(tv::Variant variant, bool fft);

/// The spectra of the transforms (cuFFT's natural layout, nx/2 + 1 values per row), in floats
/// per value: H Y / N and the residual's spectrum (complex), H^2 / N (real).
struct TvSpectra {
  static constexpr std::size_t kHy = 2, kResidual = 2, kH2n = 1;
  static constexpr std::size_t kFloats = kHy + kResidual + kH2n;
};

/// Bytes of the spectra (TvSpectra); 0 without FFT.
std::size_t tv_spectra_bytes(const tv::Dims& dims, bool fft);

/// The launch order of a two-column marching kernel (march_pair_kernel), one block per entry of a
/// one-dimensional grid:
/// - first, the `first` regions of a plane (in the regions' order: across x, then y), one block
///   each for all nz planes;
/// - then the other regions `group` at a time (0: all of them), every chunk of `chunk` planes of
///   one group, chunk after chunk, before the next group.
struct TvPairOrder {
  int nreg = 1;   ///< regions across x
  int tiles = 1;  ///< regions of a plane
  int nz = 1;
  int chunk = 1;  ///< planes per block after the first regions
  int group = 0;
  int first = 0;
  GLINT_HD int chunks() const { return glint::detail::ceil_div(nz, chunk); }
  GLINT_HD int blocks() const { return first + (tiles - first) * chunks(); }
};

/// What block `id` of a TvPairOrder computes: region bx across x, by across y, planes
/// z0 .. zend - 1. The kernel and the planner's simulation of the launch both call it.
struct TvPairBlock {
  int bx, by, z0, zend;
};
GLINT_HD TvPairBlock tv_pair_block(const TvPairOrder& o, int id) {
  if (id < o.first) return TvPairBlock{id % o.nreg, id / o.nreg, 0, o.nz};
  id -= o.first;
  const int rest = o.tiles - o.first, group = o.group > 0 && o.group < rest ? o.group : rest;
  const int nch = o.chunks(), g0 = id / (group * nch) * group;
  const int tg = group < rest - g0 ? group : rest - g0, l = id - g0 * nch;
  const int t = o.first + g0 + l % tg, z0 = l / tg * o.chunk;
  return TvPairBlock{t % o.nreg, t / o.nreg, z0, z0 + o.chunk < o.nz ? z0 + o.chunk : o.nz};
}

/// When the last block of `order` ends, each block started in launch order on the first of
/// `resident` slots to come free and taking its planes and the `halo` planes on either side
/// (time in planes). stop >= 0: the simulation stops once the end reaches it (a candidate that
/// can no longer end sooner), returning an end of at least stop.
long long tv_march_end(const TvPairOrder& order, long long resident, int halo,
                       long long stop = -1);

/// Planes per block (chunk) of a marching kernel: nz planes, `tiles` blocks across each plane,
/// per_sm blocks resident on each of `sms` SMs, `halo` planes read on either side of a chunk,
/// chunks of min_chunk .. max_chunk planes (nz if that is less).
/// - One block per SM: the chunk whose grid finishes first when each block takes its planes and
///   the `halo` planes on either side, and the blocks start in launch order on the first SM to
///   come free; the shortest of equals. The launch order takes the regions `group` at a time
///   (tv_launch_group) and, within a group, every region of the first chunk, then of the next;
///   group 0 is one group of all regions. Where n >= 1 chunks of every region fit the resident
///   blocks at once, nz / n planes (one wave) are a candidate too, even above max_chunk.
///   Measured on the H200 (docs/performance.md), this picks the fastest of the chunks timed at
///   256^3 (two-state's staged kernel 23 or 24 planes, temporal 128 in one wave), 512^3 and
///   400 x 400 x 64.
/// - Several: about four waves of resident blocks. Blocks sharing an SM do not run as
///   independent slots; the simulation picked 28 planes for the one-step register kernel at
///   256^3, 2% slower than these 21.
/// - `first` > 0 (one block per SM): the first regions take all planes (TvPairOrder), the
///   chunk is that of the others.
int tv_march_chunk(int nz, long long tiles, int per_sm, int sms, int halo, int min_chunk,
                   int max_chunk, long long group = 0, int first = 0);

/// Regions per group of a two-column marching kernel's launch order (march_pair_kernel runs every
/// chunk of planes of one group of regions before the next group): the fewest groups of at most
/// `resident` regions, of equal size (the last one may be smaller by less than the number of
/// groups), where they hold at least 3/4 of the resident blocks; else 0 (one group, chunk after
/// chunk). A block then starts a region's next chunk at most a quarter of a block's time before
/// the region's previous chunk ends, so both read the planes they share while those are still
/// in L2. Measured on the H200 (docs/performance.md): at 512^3 (groups of 117 and 108 for 132
/// resident blocks) 4-5% less read from DRAM and 1% less time; at 400 x 400 x 64 groups of 70
/// and 67 were 1-2% slower, and groups of 132 and 8 left the last 8 regions to run alone (10%
/// slower).
long long tv_launch_group(long long tiles, long long resident);

/// The most planes for which tv_pair_order lets regions take all planes first. Measured on the
/// H200 (docs/performance.md): at 400 x 400 x 64 that made the temporal step 4 % faster, but at
/// 384^3 and 512^3 the temporal step 3-5 % and two-state 6 % slower, although the simulation
/// has those orders end first: marches of hundreds of planes lose L2 hits, as chunks of more
/// than about 48 planes do. 128: the longest march measured to keep them (256^3's one wave of
/// 128-plane chunks).
inline constexpr int kTvLongestFirstMarch = 128;

/// The launch order of a two-column marching kernel over nz planes with nreg x (tiles / nreg)
/// regions per plane, per_sm blocks resident on each of `sms` SMs, `halo` planes read on either
/// side of a chunk, chunks of 16 .. max_chunk planes (tv_march_chunk).
/// - first: with one block per SM, more regions than resident blocks and at most
///   kTvLongestFirstMarch planes, the resident blocks' worth of regions take all planes first
///   where that order ends first (tv_march_end), else 0. Those blocks march side by side from
///   the first plane to the last, with no halo planes between chunks; the others fill the rest
///   of the time in chunks.
/// - group: tv_launch_group of the regions after the first.
/// group >= 0 or first >= 0 (TvTuning::group and TvTuning::first) set them instead; first is
/// clamped to `tiles`.
TvPairOrder tv_pair_order(int nz, int nreg, int tiles, int per_sm, int sms, int halo,
                          int max_chunk, long long group = -1, int first = -1);

/// The regions across x of the two-column marching kernels, left to right: n56 of 56 output
/// columns (224 bytes: their stores fill whole 32-byte sectors), then n60 of 60. Each computes 64
/// columns: its outputs and the halo on either side.
struct TvPairRegions {
  int n56 = 0, n60 = 0;
  int count() const { return n56 + n60; }
  bool operator==(const TvPairRegions&) const = default;
};

/// The fewest regions across nx columns (60 columns at most each), as many of them of 56 columns
/// as that allows: at 512 columns seven of 56 and two of 60 instead of ten of 56.
TvPairRegions tv_pair_regions(int nx);

/// Regions of `ox` (56 or 60) output columns each across nx columns.
TvPairRegions tv_pair_regions_uniform(int nx, int ox);

/// The GPU TV solver's kernel choices and launch shapes beyond the variant. The defaults are the
/// settings measured fastest on the H200 (docs/performance.md), planned per volume and GPU where
/// they depend on them; every setting computes the same bits. The solver never reads the
/// environment: the tools and the daemon fill this from the GLINT_TV_* variables
/// (docs/tuning.md). A value that is not allowed keeps the default, with a warning in the log.
struct TvTuning {
  /// planned: two-state takes the staged one-step kernel where its grid fills at least three
  /// waves of resident blocks, the pair kernel elsewhere; fused its pair kernel. march: two-state
  /// runs the one-step register-marching kernel. staged: fused, two-state and temporal's odd last
  /// step run the staged one-step kernel. pair: two-state runs the pair kernel.
  enum class Kernel { planned, march, staged, pair };
  Kernel kernel = Kernel::planned;
  int zrun = 4;      ///< planes per thread of the one-voxel kernels: 1, 2, 4 or 8
  int shuffle = -1;  ///< pair kernel: 1 lane shuffles, 0 loads; -1: fused 1, two-state 0
  /// The register-marching kernels' shape (MarchShape: rows per warp, planes loaded ahead, warps
  /// per block, blocks per SM, columns per lane); -1: the variant's default. A shape that is not
  /// built keeps the default. warps and ahead also pick the staged one-step kernel's (16, 24 or
  /// 32 warps; 1 or 2 planes ahead; default 24 and 1).
  int rows = -1, ahead = -1, warps = -1, blocks = -1, cols = -1;
  int chunk = 0;         ///< planes per block of every marching kernel; 0: planned
  long long group = -1;  ///< regions per launch group (tv_pair_order); -1: planned
  int first = -1;        ///< regions that take all planes first (tv_pair_order); -1: planned
  int ox = 0;            ///< output columns of every two-column region, 56 or 60; 0: planned
  long long pitch = 0;   ///< floats per row, even and at least nx; 0: tv_row_pitch
};

class GpuReconstructor final : public tv::Reconstructor {
 public:
  /// Plans and allocates everything for `dims`; throws std::runtime_error naming the sizes when
  /// the volume does not fit on the device (before allocating anything), CudaError on CUDA
  /// failures. with_fft = false serves only the identity forward model. low_priority: all work
  /// goes to a stream of the device's lowest priority (reconstruction beside cluster finding).
  GpuReconstructor(const tv::Dims& dims, tv::Variant variant, bool with_fft, int device = 0,
                   bool low_priority = false, const TvTuning& tuning = {});
  ~GpuReconstructor() override;
  GpuReconstructor(const GpuReconstructor&) = delete;
  GpuReconstructor& operator=(const GpuReconstructor&) = delete;

  std::string name() const override;
  tv::Dims dims() const override;
  const TvMemoryPlan& memory_plan() const;
  tv::SolveReport solve(std::span<const float> y, const tv::TransferFunction& H,
                        const tv::SolverOptions& options, std::span<float> x,
                        const tv::Progress& progress = {}) override;
  void denoise(std::span<const float> b, float w, int steps, bool nonneg, std::span<float> p,
               std::span<float> x) override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Device-to-device copy bandwidth in GB/s (bytes read + written), median of `reps` copies of
/// `bytes` with cudaMemcpyAsync timed by events: the floor that TV step figures are quoted against.
double measure_copy_bandwidth(std::size_t bytes, int reps = 10, int device = 0);

/// Checks on the device that the projection's two forms take the same reciprocal: counts the
/// floats s of [lo, hi] (bit patterns, lo <= hi) where rounded::recip_sqrt(s) and
/// div(1, sqrt(s)) differ in any bit.
unsigned long long count_recip_sqrt_mismatches(float lo, float hi, int device = 0);

}  // namespace glint::gpu
