// The GPU TV solver against the CPU reference and its variants against each other.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "glint/gpu/tv_solver.hpp"
#include "glint/recon/cpu_solver.hpp"
#include "glint/recon/forward_model.hpp"
#include "glint/recon/phantom.hpp"
#include "gpu_test.hpp"

using glint::tv::Dims;
using glint::tv::Variant;

namespace {

std::vector<float> random_volume(std::size_t n, unsigned seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (auto& f : v) f = u(rng);
  return v;
}

/// Number of elements whose bits differ (so -0 == +0 counts as equal only if bits match).
std::size_t bit_mismatches(const std::vector<float>& a, const std::vector<float>& b) {
  std::size_t n = 0;
  for (std::size_t i = 0; i < a.size(); ++i) n += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  return n;
}

double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

// Odd sizes: partial tiles on every axis, and more z planes than one marching chunk.
const Dims kOdd{37, 19, 21};
const Dims kChunked{70, 41, 35};
// 230 columns: the two-column kernels' regions are 56, 56, 60 and 60 columns wide
// (tv_pair_regions).
const Dims kRegions{230, 45, 9};

using glint::gpu::TvTuning;
using Kernel = glint::gpu::TvTuning::Kernel;

/// The settings of `t` that differ from the defaults, "name=value ...", to name the setting in a
/// failure.
std::string describe(const TvTuning& t) {
  const TvTuning def;
  std::string d;
  auto add = [&](const char* name, const std::string& value) {
    if (!d.empty()) d += ' ';
    d.append(name).append("=").append(value);
  };
  auto add_number = [&](const char* name, long long value, long long def_value) {
    if (value != def_value) add(name, std::to_string(value));
  };
  const char* kernels[] = {"planned", "march", "staged", "pair"};
  if (t.kernel != def.kernel) add("kernel", kernels[static_cast<int>(t.kernel)]);
  add_number("zrun", t.zrun, def.zrun);
  add_number("shuffle", t.shuffle, def.shuffle);
  add_number("rows", t.rows, def.rows);
  add_number("ahead", t.ahead, def.ahead);
  add_number("warps", t.warps, def.warps);
  add_number("blocks", t.blocks, def.blocks);
  add_number("cols", t.cols, def.cols);
  add_number("chunk", t.chunk, def.chunk);
  add_number("group", t.group, def.group);
  add_number("first", t.first, def.first);
  add_number("ox", t.ox, def.ox);
  add_number("pitch", t.pitch, def.pitch);
  return d.empty() ? "default kernels" : d;
}

/// A CPU reference denoise: random b and p0 on volume d, `steps` FGP steps with or without
/// x >= 0, and the CPU's result (pc, xc).
struct CpuCase {
  const Dims& d;
  const std::vector<float>& b;
  const std::vector<float>& p0;
  int steps;
  bool nonneg;
  const std::vector<float>& pc;
  const std::vector<float>& xc;
};

/// Calls check(c) for the CPU reference case of each test volume (kOdd, kChunked unless given),
/// each x >= 0 choice and each step count; b and p0 come from seeds `seed` and seed + 1.
template <class F>
void for_each_cpu_case(unsigned seed, std::initializer_list<bool> nonnegs,
                       std::initializer_list<int> step_counts, F&& check,
                       std::initializer_list<Dims> volumes = {kOdd, kChunked}) {
  for (const Dims& d : volumes) {
    const std::size_t n = d.voxels();
    const auto b = random_volume(n, seed, -0.5f, 1.5f);
    const auto p0 = random_volume(3 * n, seed + 1, -0.5f, 0.5f);
    glint::recon::CpuReconstructor cpu(d, 2);
    for (bool nonneg : nonnegs)
      for (int steps : step_counts) {
        std::vector<float> pc(p0), xc(n);
        cpu.denoise(b, 0.08f, steps, nonneg, pc, xc);
        check(CpuCase{d, b, p0, steps, nonneg, pc, xc});
      }
  }
}

/// The GPU denoise of the case's (b, p0) by variant v with tuning t against the CPU's result, bit
/// for bit (p and x).
void expect_denoise_is_cpus(const CpuCase& c, Variant v, const TvTuning& t = {}) {
  const std::string what = describe(t);
  glint::gpu::GpuReconstructor gpu(c.d, v, false, 0, false, t);
  std::vector<float> pg(c.p0), xg(c.d.voxels(), std::numeric_limits<float>::quiet_NaN());
  gpu.denoise(c.b, 0.08f, c.steps, c.nonneg, pg, xg);
  EXPECT_EQ(bit_mismatches(pg, c.pc), 0u) << glint::tv::variant_name(v) << " " << what
                                           << " steps " << c.steps << " nonneg " << c.nonneg;
  EXPECT_EQ(bit_mismatches(xg, c.xc), 0u) << glint::tv::variant_name(v) << " " << what
                                           << " steps " << c.steps << " nonneg " << c.nonneg;
}

/// The two-column marching kernels with tuning t, bit for bit against the CPU: the two-step
/// kernel (temporal), then the staged one-step kernel (fused, two-state and temporal's odd last
/// step).
void expect_pair_kernels_are_cpus(const CpuCase& c, TvTuning t) {
  expect_denoise_is_cpus(c, Variant::temporal, t);
  t.kernel = Kernel::staged;
  for (Variant v : {Variant::fused, Variant::two_state, Variant::temporal})
    expect_denoise_is_cpus(c, v, t);
}

}  // namespace

// The FGP step: every variant and the CPU reference, same input, bit for bit (p and x), for one
// step, an odd number (temporal blocking's two-state tail) and ten, with and without x >= 0;
// with the default row pitch (128-byte aligned rows) and with rows of 2 (nx/2 + 1) floats.
TEST(TvGpu, FgpStepsAreBitIdenticalToTheCpuReference) {
  GLINT_REQUIRE_GPU();
  for_each_cpu_case(1, {true, false}, {1, 7, 10}, [](const CpuCase& c) {
    for (Variant v : glint::tv::kAllVariants) expect_denoise_is_cpus(c, v);
    const TvTuning t{.pitch = 2 * (c.d.nx / 2 + 1)};
    for (Variant v : glint::tv::kAllVariants) expect_denoise_is_cpus(c, v, t);
  });
}

// The kernel choices of TvTuning (kernel, rows per warp, loads ahead, planes per block, planes
// per thread, the pair kernels' lane shuffles) compute the same bits as the CPU reference too:
// two-state's register-marching kernel, chunks of 1 and 3 planes, and each pair kernel for both
// fused and two-state.
TEST(TvGpu, EveryKernelChoiceIsBitIdenticalToTheCpuReference) {
  GLINT_REQUIRE_GPU();
  const Kernel march = Kernel::march;
  const TvTuning settings[] = {{.kernel = march, .rows = 3, .ahead = 2},
                               {.kernel = march, .rows = 2, .ahead = 1, .chunk = 3},
                               {.kernel = march, .rows = 2, .ahead = 2, .chunk = 1},
                               {.kernel = march, .zrun = 1, .rows = 3, .ahead = 1, .chunk = 5},
                               {.zrun = 8},
                               {.zrun = 1, .shuffle = 1},
                               {.zrun = 2, .shuffle = 1},
                               {.zrun = 4, .shuffle = 1},
                               {.zrun = 8, .shuffle = 1},
                               {.zrun = 2, .shuffle = 0}};
  for_each_cpu_case(11, {true}, {2, 7}, [&](const CpuCase& c) {
    for (const TvTuning& t : settings)
      for (Variant v : glint::tv::kAllVariants) expect_denoise_is_cpus(c, v, t);
  });
}

// Every built shape of the register-marching kernels (rows per warp, loads ahead, warps per block,
// blocks per SM, columns per lane; the one-step kernel for fused-march and two-state, the
// two-step kernel for temporal) computes the same bits as the CPU reference, with whole and
// 3-plane chunks.
TEST(TvGpu, EveryMarchingShapeIsBitIdenticalToTheCpuReference) {
  GLINT_REQUIRE_GPU();
  struct Shape {
    int rows, ahead, warps, blocks;
    int chunk;     // 0: planned
    int cols = 1;  // set always: the temporal default has two columns per lane
    TvTuning tuning() const {
      return {.kernel = Kernel::march, .rows = rows, .ahead = ahead, .warps = warps,
              .blocks = blocks, .cols = cols, .chunk = chunk};
    }
  };
  const Shape step_shapes[] = {{2, 1, 16, 1, 0}, {2, 2, 16, 1, 3}, {2, 2, 16, 2, 0},
                               {1, 1, 16, 2, 3}, {1, 2, 16, 2, 0}, {1, 1, 32, 1, 0},
                               {1, 2, 32, 1, 3}};
  const Shape temporal_shapes[] = {{2, 1, 8, 3, 0},     {2, 1, 8, 4, 3},     {2, 1, 12, 2, 0},
                                   {2, 1, 16, 2, 3},    {1, 1, 16, 2, 0},    {1, 1, 16, 3, 3},
                                   {1, 1, 24, 2, 0},    {1, 1, 32, 1, 3},    {1, 1, 16, 1, 3, 2},
                                   {1, 1, 24, 1, 0, 2}, {1, 1, 24, 1, 3, 2}, {1, 2, 24, 1, 0, 2},
                                   {1, 2, 24, 1, 3, 2}};
  for_each_cpu_case(21, {true}, {2, 7}, [&](const CpuCase& c) {
    auto check = [&](const Shape& sh, Variant v) { expect_denoise_is_cpus(c, v, sh.tuning()); };
    for (const Shape& sh : step_shapes)
      for (Variant v : {Variant::fused_march, Variant::two_state}) check(sh, v);
    for (const Shape& sh : temporal_shapes) check(sh, Variant::temporal);
    // The staged one-step kernel (Kernel::staged) of fused, two-state and temporal's last odd
    // step, at each built block size and staging depth, whole and 3-plane chunks.
    for (int warps : {16, 24, 32})
      for (int ahead : {1, 2})
        for (int chunk : {0, 3}) {
          const TvTuning t{.kernel = Kernel::staged, .ahead = ahead, .warps = warps,
                           .chunk = chunk};
          for (Variant v : {Variant::fused, Variant::two_state, Variant::temporal})
            expect_denoise_is_cpus(c, v, t);
        }
  });
}

// The two-column kernels' regions across x, each layout bit for bit against the CPU: the default
// (regions of 56 and 60 columns at 230 columns, two of 56 at 70) and uniform regions of 56 or
// 60 columns; for the two-step kernel and the staged one-step kernel, whole and 3-plane chunks.
TEST(TvGpu, EveryRegionLayoutIsBitIdenticalToTheCpuReference) {
  GLINT_REQUIRE_GPU();
  for_each_cpu_case(
      31, {true, false}, {2, 5},
      [&](const CpuCase& c) {
        for (int ox : {0, 56, 60})
          for (int chunk : {0, 3})
            expect_pair_kernels_are_cpus(c, TvTuning{.chunk = chunk, .ox = ox});
      },
      {kRegions, kChunked});
}

// The two-column kernels' launch order (TvPairOrder) changes which block computes what, never
// the result. TvTuning::group: groups of one region and of four (6 regions per plane at 70 x 41
// and 12 at 230 x 45 for the two-step kernel, so a smaller last group at 70 x 41); ::first:
// the first 2 or 5 regions with all planes in one block each, then the others in chunks (and in
// groups of one), or every region with all planes (100, clamped). 3-plane chunks, the two-step
// kernel and the staged one-step kernel, bit for bit.
TEST(TvGpu, EveryLaunchOrderIsBitIdenticalToTheCpuReference) {
  GLINT_REQUIRE_GPU();
  using Knobs = std::pair<int, int>;  // group, first (-1: planned)
  for_each_cpu_case(
      41, {true}, {2, 5},
      [&](const CpuCase& c) {
        for (const auto& [group, first] : {Knobs{1, -1}, Knobs{4, -1}, Knobs{-1, 2},
                                           Knobs{1, 5}, Knobs{-1, 100}}) {
          expect_pair_kernels_are_cpus(c, TvTuning{.chunk = 3, .group = group, .first = first});
        }
      },
      {kChunked, kRegions});
}

// The two-step kernel's projection (m::project<true>) scales q by rounded::recip_sqrt, which
// must be div(1, sqrt(s)) bit for bit wherever it is used: every float s of [1, FLT_MAX] (to
// 2^126, where sqrt.rn itself takes its fast path, and above, where it does not but
// recip_sqrt's sequence still holds) and infinity.
TEST(TvGpu, ProjectionReciprocalIsCorrectlyRounded) {
  GLINT_REQUIRE_GPU();
  using glint::gpu::count_recip_sqrt_mismatches;
  EXPECT_EQ(count_recip_sqrt_mismatches(1.0f, 0x1p126f), 0u);
  EXPECT_EQ(count_recip_sqrt_mismatches(std::nextafter(0x1p126f, 1e38f),
                                        std::numeric_limits<float>::max()),
            0u);
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(count_recip_sqrt_mismatches(inf, inf), 0u);
}

// Regions across x of the two-column kernels: the fewest of at most 60 columns, as many of them
// of 56 as that allows.
TEST(TvGpu, PairRegionsAreTheFewestWithTheMostOf56Columns) {
  using glint::gpu::TvPairRegions;
  using glint::gpu::tv_pair_regions;
  EXPECT_EQ(tv_pair_regions(256), (TvPairRegions{5, 0}));   // 280 columns: five are needed
  EXPECT_EQ(tv_pair_regions(512), (TvPairRegions{7, 2}));   // 392 + 120 = 512: 9, not 10
  EXPECT_EQ(tv_pair_regions(400), (TvPairRegions{5, 2}));   // 280 + 120 = 400: 7, not 8
  EXPECT_EQ(tv_pair_regions(1024), (TvPairRegions{14, 4}));  // 784 + 240 = 1024: 18, not 19
  // The region-layout test's volume: 112 + 120 = 232, both widths.
  EXPECT_EQ(tv_pair_regions(kRegions.nx), (TvPairRegions{2, 2}));
  EXPECT_EQ(tv_pair_regions(37), (TvPairRegions{1, 0}));
  EXPECT_EQ(tv_pair_regions(60), (TvPairRegions{0, 1}));
  EXPECT_EQ(tv_pair_regions(1), (TvPairRegions{1, 0}));
  EXPECT_EQ(glint::gpu::tv_pair_regions_uniform(512, 56), (TvPairRegions{10, 0}));
  EXPECT_EQ(glint::gpu::tv_pair_regions_uniform(512, 60), (TvPairRegions{0, 9}));
}

// Denoising (identity, no FFT): the whole solve is the shared arithmetic only, so CPU and every
// GPU variant agree bit for bit, warm and cold, also in a second solve on the same solver (whose
// dual sets then hold the first solve's values: only those read first are reset).
TEST(TvGpu, IdentitySolveIsBitIdenticalToTheCpu) {
  GLINT_REQUIRE_GPU();
  const Dims d = kChunked;
  const auto y = random_volume(d.voxels(), 4, -0.2f, 1.2f);
  glint::tv::TransferFunction id;
  glint::recon::CpuReconstructor cpu(d, 2);
  for (bool warm : {true, false}) {
    glint::tv::SolverOptions o;
    o.lambda = 0.1f;
    o.outer = 5;
    o.tv_inner = 7;
    o.warm_start = warm;
    std::vector<float> xc(d.voxels());
    cpu.solve(y, id, o, xc);
    for (Variant v : glint::tv::kAllVariants) {
      o.variant = v;
      glint::gpu::GpuReconstructor gpu(d, v, false);
      for (int run = 0; run < 2; ++run) {
        std::vector<float> xg(d.voxels(), std::numeric_limits<float>::quiet_NaN());
        gpu.solve(y, id, o, xg);
        EXPECT_EQ(bit_mismatches(xg, xc), 0u)
            << glint::tv::variant_name(v) << " warm " << warm << " run " << run;
      }
    }
  }
}

// Deconvolution (cuFFT vs FFTW): every GPU variant bit-identical to the GPU separate variant;
// GPU vs CPU within the float32 FFT error. A pair of float32 3D transforms has a relative error
// of about eps * log2(N) (eps = 2^-24) each; 20 outer iterations of a non-expansive map (FISTA's
// momentum adds at most a factor ~2) and two transforms each give tol = 2 * 2 * 20 * eps *
// log2(N), times a safety factor of 4.
TEST(TvGpu, DeconvolutionMatchesTheCpuWithinFftError) {
  GLINT_REQUIRE_GPU();
  const int n = 40;
  const Dims d{n, n, n};
  const auto truth = glint::recon::make_phantom(n);
  const auto fm = glint::recon::make_forward_model("gaussian:1.2,1.2,1.2", d);
  auto y = glint::recon::apply_forward(fm.H, d, truth, 2);
  glint::recon::add_noise(y, 0.05, 9);
  glint::tv::SolverOptions o;
  o.lambda = 0.02f;
  glint::recon::CpuReconstructor cpu(d, 2);
  std::vector<float> xc(d.voxels());
  cpu.solve(y, fm.H, o, xc);
  std::vector<float> xs;
  for (Variant v : glint::tv::kAllVariants) {
    o.variant = v;
    glint::gpu::GpuReconstructor gpu(d, v, true);
    std::vector<float> xg(d.voxels());
    gpu.solve(y, fm.H, o, xg);
    if (v == Variant::separate) {
      xs = xg;
      const double eps = std::ldexp(1.0, -24), tol = 4 * 2 * 2 * 20 * eps * std::log2(d.voxels());
      const double err = rel_l2(xg, xc);
      std::printf("GPU vs CPU, 20x10 deconvolution 40^3: relative L2 difference %.3g (tol %.3g)\n",
                  err, tol);
      EXPECT_LT(err, tol);
      EXPECT_LT(glint::recon::rmse(xg, truth), glint::recon::rmse(y, truth));
    } else {
      EXPECT_EQ(bit_mismatches(xg, xs), 0u) << glint::tv::variant_name(v);
    }
  }
}

TEST(TvGpu, TooLargeVolumeIsRefusedBeforeAnythingRuns) {
  GLINT_REQUIRE_GPU();
  try {
    glint::gpu::GpuReconstructor gpu(Dims{4096, 4096, 2048}, Variant::temporal, true);
    ADD_FAILURE() << "a 4096x4096x2048 volume was accepted";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("does not fit"), std::string::npos) << what;
    EXPECT_NE(what.find("4096x4096x2048"), std::string::npos) << what;
  }
}

// The launch groups of the two-column kernels: the fewest groups of at most the resident blocks,
// of equal size, where they hold at least 3/4 of the resident blocks; else one group (0).
TEST(TvGpu, LaunchGroupsAreEqualAndNearlyFillTheGpu) {
  using glint::gpu::tv_launch_group;
  EXPECT_EQ(tv_launch_group(65, 132), 0);     // temporal at 256^3: all at once
  EXPECT_EQ(tv_launch_group(132, 132), 0);
  EXPECT_EQ(tv_launch_group(234, 132), 117);  // temporal at 512^3: two groups of 117
  EXPECT_EQ(tv_launch_group(216, 132), 108);  // two-state at 512^3: 108 + 108
  EXPECT_EQ(tv_launch_group(264, 132), 132);
  EXPECT_EQ(tv_launch_group(395, 132), 132);  // 132 + 132 + 131
  // Temporal and two-state at 400 x 400 x 64: 70 + 70 and 67 + 66 would hold about half the
  // resident blocks; and 3 x 89 for 265.
  EXPECT_EQ(tv_launch_group(140, 132), 0);
  EXPECT_EQ(tv_launch_group(133, 132), 0);
  EXPECT_EQ(tv_launch_group(265, 132), 0);
  EXPECT_EQ(tv_launch_group(10, 0), 1);  // no resident count: one region at a time
}

// The marching kernels' planes per block (host arithmetic): with one block per SM, the chunk
// whose grid of blocks, started in launch order on the SMs, finishes first (each block: its
// planes plus two halos); with several, about four waves. The cases are the volumes timed on the
// H200; each pick is the fastest chunk timed there.
TEST(TvGpu, MarchChunkFinishesTheGridFirst) {
  using glint::gpu::tv_march_chunk;
  // Two-state's staged kernel at 256^3: 5 x 12 regions per plane, 132 resident blocks, one halo
  // plane. 23 planes (12 chunks, the last of 3 planes) and 24 (11 chunks) both end at 130; 30
  // planes (the rule before) at 132 after a fifth, mostly empty wave; 32 planes at 136.
  EXPECT_EQ(tv_march_chunk(256, 60, 1, 132, 1, 16, 32), 23);
  // Temporal at 256^3: 5 x 13 regions, two halo planes, at most 48 planes. 43 planes: 6 chunks,
  // 390 blocks in 3 waves of 47 (141); 32 planes 4 waves of 36 (144); 48 planes leave a last
  // chunk of 16 planes after 3 waves of 52 (156). Two chunks of 128 planes: 130 blocks, one wave
  // of 132, first. Two-state's one wave (two chunks of 5 x 12 regions) ends at 130 too: the
  // shorter 23 stay.
  // With 66 regions two chunks still fit one wave; with 67 they do not (47 planes, ending at 153).
  EXPECT_EQ(tv_march_chunk(256, 65, 1, 132, 2, 16, 48), 128);
  EXPECT_EQ(tv_march_chunk(256, 66, 1, 132, 2, 16, 48), 128);
  EXPECT_EQ(tv_march_chunk(256, 67, 1, 132, 2, 16, 48), 47);
  // A 128^3 volume (3 x 7 regions): the one wave of 22 planes (26) is within the clamps and is
  // beaten by 21 planes (six chunks and a last one of 2 planes that fill the gaps: 25).
  EXPECT_EQ(tv_march_chunk(128, 21, 1, 132, 2, 16, 48), 21);
  // Temporal at 512^3 (9 x 26 regions; 10 x 26 with regions of 56 columns only): 46 planes
  // either way; two-state at 512^3 (9 x 24): 31.
  EXPECT_EQ(tv_march_chunk(512, 234, 1, 132, 2, 16, 48), 46);
  EXPECT_EQ(tv_march_chunk(512, 260, 1, 132, 2, 16, 48), 46);
  EXPECT_EQ(tv_march_chunk(512, 216, 1, 132, 1, 16, 32), 31);
  // Two-state at 400 x 400 x 64 (7 x 19 regions, one more than the resident blocks): 18 planes
  // (4 chunks, the last of 10) end at 84, 16 planes at 90.
  EXPECT_EQ(tv_march_chunk(64, 133, 1, 132, 1, 16, 32), 18);
  // Launched in groups of regions (TvTuning::group): temporal at 400 x 400 x 64 (7 x 20 regions)
  // in two groups of 70 keeps 19 planes (ending at 92, as in the grid's order); in groups of
  // 132 the last group of 8 regions runs alone at the end, and 16 planes end first, at 100.
  // Two-state there (7 x 19) in groups of 67: 18 planes, ending at 80.
  EXPECT_EQ(tv_march_chunk(64, 140, 1, 132, 2, 16, 48), 19);
  EXPECT_EQ(tv_march_chunk(64, 140, 1, 132, 2, 16, 48, 70), 19);
  EXPECT_EQ(tv_march_chunk(64, 140, 1, 132, 2, 16, 48, 132), 16);
  EXPECT_EQ(tv_march_chunk(64, 133, 1, 132, 1, 16, 32, 67), 18);
  // Temporal at 512^3 in two groups of 117: 46 planes as before.
  EXPECT_EQ(tv_march_chunk(512, 234, 1, 132, 2, 16, 48, 117), 46);
  // 100 planes of 60 regions: 47-plane chunks end at 49, before one wave of 50-plane chunks
  // (52). With 2 regions first (TvTuning::first), their 100 planes end the order at 102 whatever
  // the chunk, the one wave included (it is simulated like the other candidates), so the
  // shortest of equals stays.
  EXPECT_EQ(tv_march_chunk(100, 60, 1, 132, 1, 16, 48), 47);
  EXPECT_EQ(tv_march_chunk(100, 60, 1, 132, 1, 16, 48, 0, 2), 16);
  // Several blocks per SM (the one-step register kernel at 256^3: 9 x 19 regions, four per SM):
  // about four waves of resident blocks, 21 planes; at 512^3 (18 x 37) the most allowed, 32.
  EXPECT_EQ(tv_march_chunk(256, 171, 4, 132, 1, 16, 32), 21);
  EXPECT_EQ(tv_march_chunk(512, 666, 4, 132, 1, 16, 32), 32);
  // All blocks at once: the shortest chunk allowed.
  EXPECT_EQ(tv_march_chunk(100, 1, 1, 1000, 1, 16, 48), 16);
  // Fewer planes than the shortest chunk: one chunk of all of them.
  EXPECT_EQ(tv_march_chunk(10, 60, 1, 132, 2, 16, 48), 10);
  EXPECT_EQ(tv_march_chunk(1, 5, 1, 132, 1, 16, 32), 1);
}

// Every launch order computes each plane of each region exactly once: the first regions in one
// block of all planes each, the others in chunks (the last one shorter), in groups or not.
TEST(TvGpu, PairOrderCoversEveryPlaneOfEveryRegionOnce) {
  using glint::gpu::TvPairOrder;
  for (const TvPairOrder& o : {TvPairOrder{7, 140, 64, 16, 0, 132},
                               TvPairOrder{9, 234, 512, 46, 117, 0},
                               TvPairOrder{3, 12, 10, 3, 5, 4}, TvPairOrder{3, 12, 10, 3, 0, 12},
                               TvPairOrder{4, 8, 7, 7, 0, 0}}) {
    SCOPED_TRACE(::testing::Message() << "regions " << o.nreg << " x " << o.tiles / o.nreg
                                      << ", " << o.nz << " planes, chunk " << o.chunk
                                      << ", group " << o.group << ", first " << o.first);
    std::vector<int> count(static_cast<std::size_t>(o.tiles) * o.nz, 0);
    for (int id = 0; id < o.blocks(); ++id) {
      const auto b = glint::gpu::tv_pair_block(o, id);
      ASSERT_TRUE(b.bx >= 0 && b.bx < o.nreg && b.by >= 0 && b.by * o.nreg + b.bx < o.tiles);
      ASSERT_TRUE(b.z0 >= 0 && b.z0 < b.zend && b.zend <= o.nz);
      // The first blocks take the first regions, all planes each; no other block takes more
      // than a chunk.
      if (id < o.first) {
        EXPECT_EQ(b.by * o.nreg + b.bx, id);
        EXPECT_EQ(b.zend - b.z0, o.nz);
      } else {
        EXPECT_GE(b.by * o.nreg + b.bx, o.first);
        EXPECT_LE(b.zend - b.z0, o.chunk);
      }
      for (int z = b.z0; z < b.zend; ++z) ++count[(b.by * o.nreg + b.bx) * o.nz + z];
    }
    EXPECT_EQ(std::count(count.begin(), count.end(), 1), static_cast<long>(count.size()));
  }
}

// The planned launch order: regions first with all planes only for short marches (temporal at
// 400 x 400 x 64: 7 x 20 regions, 132 of them first, the other 8 in chunks of 16 planes, ending
// at 88 against 92 for the chunked order), chunks in groups elsewhere (512^3: 46 planes in two
// groups of 117, as tv_march_chunk and tv_launch_group give; 384^3, where the simulation
// would have regions first, keeps 47-plane chunks); the knobs override both.
TEST(TvGpu, PairOrderTakesAllPlanesFirstOnlyForShortMarches) {
  using glint::gpu::tv_march_end;
  using glint::gpu::tv_pair_order;
  const auto small = tv_pair_order(64, 7, 140, 1, 132, 2, 48);
  EXPECT_EQ(small.first, 132);
  EXPECT_EQ(small.chunk, 16);
  EXPECT_EQ(small.group, 0);
  EXPECT_EQ(tv_march_end(small, 132, 2), 88);
  EXPECT_EQ(tv_march_end(tv_pair_order(64, 7, 140, 1, 132, 2, 48, -1, 0), 132, 2), 92);
  const auto big = tv_pair_order(512, 9, 234, 1, 132, 2, 48);
  EXPECT_EQ(big.first, 0);
  EXPECT_EQ(big.chunk, 46);
  EXPECT_EQ(big.group, 117);
  const auto mid = tv_pair_order(384, 7, 140, 1, 132, 2, 48);
  EXPECT_EQ(mid.first, 0);
  EXPECT_EQ(mid.chunk, 47);
  // ... although the simulation has regions first end sooner there (416 against 459): only the
  // march length keeps them out.
  EXPECT_EQ(tv_march_end(tv_pair_order(384, 7, 140, 1, 132, 2, 48, -1, 132), 132, 2), 416);
  EXPECT_EQ(tv_march_end(mid, 132, 2), 459);
  // Two-state at 400 x 400 x 64 (7 x 19 regions): regions first end no sooner (84), so none.
  EXPECT_EQ(tv_pair_order(64, 7, 133, 1, 132, 1, 32).first, 0);
  // Several blocks per SM: never regions first.
  EXPECT_EQ(tv_pair_order(64, 7, 140, 2, 132, 2, 48).first, 0);
  // TvTuning::group and ::first: as set, first clamped to the regions of a plane.
  const auto set = tv_pair_order(512, 9, 234, 1, 132, 2, 48, 5, 7);
  EXPECT_EQ(set.group, 5);
  EXPECT_EQ(set.first, 7);
  EXPECT_EQ(tv_pair_order(64, 7, 140, 1, 132, 2, 48, -1, 1000).first, 140);
  EXPECT_EQ(tv_pair_order(64, 7, 140, 1, 132, 2, 48, -1, 1000).blocks(), 140);
}

// Rows are 128-byte aligned; 2 KiB multiples get 64 floats more, and for temporal other 1 KiB
// multiples 32 more.
TEST(TvGpu, RowPitchAvoidsMultiplesOf2KiBAndTemporalOf1KiB) {
  using glint::gpu::tv_row_pitch;
  for (Variant v : glint::tv::kAllVariants) {
    const bool temporal = v == Variant::temporal;
    const std::string name(glint::tv::variant_name(v));
    EXPECT_EQ(tv_row_pitch(64, v), 64) << name;
    EXPECT_EQ(tv_row_pitch(70, v), 96) << name;
    EXPECT_EQ(tv_row_pitch(250, v), temporal ? 288 : 256) << name;
    EXPECT_EQ(tv_row_pitch(256, v), temporal ? 288 : 256) << name;
    EXPECT_EQ(tv_row_pitch(257, v), 288) << name;
    EXPECT_EQ(tv_row_pitch(400, v), 416) << name;
    EXPECT_EQ(tv_row_pitch(500, v), 576) << name;
    EXPECT_EQ(tv_row_pitch(512, v), 576) << name;
    EXPECT_EQ(tv_row_pitch(768, v), temporal ? 800 : 768) << name;
    EXPECT_EQ(tv_row_pitch(990, v), 992) << name;
    EXPECT_EQ(tv_row_pitch(1000, v), 1088) << name;
    EXPECT_EQ(tv_row_pitch(1024, v), 1088) << name;
  }
}

TEST(TvGpu, MemoryPlanCountsTheVariantsVolumes) {
  EXPECT_EQ(glint::gpu::tv_volumes_needed(Variant::separate, true), 3 + 6 + 1);
  EXPECT_EQ(glint::gpu::tv_volumes_needed(Variant::two_state, false), 3 + 1 + 9);
  EXPECT_EQ(glint::gpu::tv_volumes_needed(Variant::temporal, true), 3 + 12);
  // H Y / N and the residual's spectrum (complex) and H^2 / N: 5 floats per value of the
  // half spectrum (nx/2 + 1 per row).
  EXPECT_EQ(glint::gpu::tv_spectra_bytes(Dims{64, 32, 16}, true), 5u * 33 * 32 * 16 * 4);
  EXPECT_EQ(glint::gpu::tv_spectra_bytes(Dims{64, 32, 16}, false), 0u);
  GLINT_REQUIRE_GPU();
  glint::gpu::GpuReconstructor gpu(Dims{64, 32, 16}, Variant::fused, true);
  const auto& plan = gpu.memory_plan();
  EXPECT_EQ(plan.row_floats, 64u);  // 64 floats: 256 bytes, a multiple of 128
  EXPECT_EQ(plan.volume_bytes, 64u * 32 * 16 * 4);
  glint::gpu::GpuReconstructor odd(Dims{70, 32, 16}, Variant::fused, true);
  EXPECT_EQ(odd.memory_plan().row_floats, 96u);  // 70 floats rounded up to 128 bytes
  // TvTuning::pitch sets the pitch if it is even and at least nx, else the default stays.
  for (const auto& [value, want] : {std::pair{130, 130u}, std::pair{65, 64u},
                                    std::pair{62, 64u}, std::pair{-1, 64u}}) {
    const TvTuning t{.pitch = value};
    glint::gpu::GpuReconstructor set(Dims{64, 32, 16}, Variant::fused, true, 0, false, t);
    EXPECT_EQ(set.memory_plan().row_floats, want) << describe(t);
  }
  EXPECT_EQ(plan.spectra_bytes, 5u * 33 * 32 * 16 * 4);
  EXPECT_GE(plan.total_bytes,
            std::size_t(plan.volumes * plan.volume_bytes) + plan.spectra_bytes);
  EXPECT_NE(plan.describe().find("64x32x16"), std::string::npos);
}
