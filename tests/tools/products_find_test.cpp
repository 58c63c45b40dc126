// `glint find --products` against a glintd run on the same frames (the same products to the
// byte), on calibrated JUNGFRAU frames (keV), with other worker counts and batches, and its
// usage errors.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <algorithm>
#include <array>
#include <numeric>
#include <vector>

#include <fmt/format.h>

#include "../common/products_check.hpp"
#include "../pipeline/simulated_run.hpp"
#include "glint/pipeline/acquisition.hpp"
#include "glint/pipeline/run_file.hpp"
#include "glint/pipeline/stream_simulator.hpp"
#include "glint/products/eta_calibration_file.hpp"
#include "sim_frames.hpp"
#include "tool_test.hpp"

using glint::testing::run_glint;
using glint::testing::ToolResult;
using namespace glint;
using namespace glint::pipeline;
using namespace std::chrono_literals;

namespace {

class GlintFindProducts : public glint::testing::ScratchDirTest {
 protected:
  GlintFindProducts() : ScratchDirTest("glint_find_products_test") {}
};

constexpr uint32_t kRows = 48, kCols = 64, kDark = 1000;  // glint find's pedestal window

void expect_same_products(const ProductsContents& a, const ProductsContents& b) {
  EXPECT_EQ(a.energy_kind, b.energy_kind);
  EXPECT_EQ(a.energy_window, b.energy_window);
  EXPECT_EQ(a.clusters, b.clusters);
  EXPECT_EQ(a.frames, b.frames);
  EXPECT_EQ(a.hitmap, b.hitmap);
  EXPECT_EQ(a.energy_image, b.energy_image);
  EXPECT_EQ(a.slices, b.slices);
  EXPECT_EQ(a.spectrum, b.spectrum);
  EXPECT_EQ(a.spectrum_edges, b.spectrum_edges);
  EXPECT_EQ(a.underflow, b.underflow);
  EXPECT_EQ(a.overflow, b.overflow);
  EXPECT_EQ(a.pixel_spectra, b.pixel_spectra);
  EXPECT_EQ(a.eta2, b.eta2);
  EXPECT_EQ(a.eta3, b.eta3);
  EXPECT_EQ(a.eta2_outside, b.eta2_outside);
  EXPECT_EQ(a.eta3_outside, b.eta3_outside);
  EXPECT_EQ(a.subpixel, b.subpixel);
  EXPECT_EQ(a.subpixel_x, b.subpixel_x);
  EXPECT_EQ(a.subpixel_y, b.subpixel_y);
  EXPECT_EQ(a.subpixel_factor, b.subpixel_factor);
  EXPECT_EQ(a.subpixel_calibration, b.subpixel_calibration);
  EXPECT_EQ(a.subpixel_outside, b.subpixel_outside);
  EXPECT_EQ(a.subpixel_off_detector, b.subpixel_off_detector);
}

/// An eta calibration made from the command line: a flat field of isolated photons (glint synth
/// --photon-grid), its clusters (glint find) and glint eta-calibrate, in directory `dir` (ending
/// in '/'). Returns its path.
std::string flat_field_calibration(const std::string& dir, uint32_t rows, uint32_t cols) {
  const std::string flat = dir + "flat.h5", run = dir + "flat_run.h5", eta = dir + "eta.h5";
  EXPECT_EQ(run_glint(fmt::format("synth -q -o {} --rows {} --cols {} --dark 1000 --frames 400 "
                                  "--photon-grid 5 --seed 7",
                                  flat, rows, cols))
                .status,
            0);
  ToolResult r = run_glint("find -q -i " + flat + " --backend cpu -o " + run);
  EXPECT_EQ(r.status, 0) << r.output;
  r = run_glint("eta-calibrate -q " + run + " -o " + eta + " --bins 20 --energy-bins 2");
  EXPECT_EQ(r.status, 0) << r.output;
  return eta;
}

}  // namespace

TEST_F(GlintFindProducts, SameProductsAsAGlintdRunOnTheSameFrames) {
  glint::testing::SimulatedRun c =
      glint::testing::simulated_run("find_products", kRows, kCols, kDark, /*batch_frames=*/32);
  c.sim.image.photons = 20;
  c.sim.frames = 100;
  c.sim.rate_hz = 10000;  // the run keeps up: no frame is dropped
  c.cfg.ingest.queue_frames = 1200;
  auto& p = c.cfg.products;
  p.energy = "2x2";
  p.energy_window = {150, 1200};
  p.slice_frames = 30;
  p.pixel_spectra = true;
  p.eta = true;
  const std::string eta = flat_field_calibration(path(""), kRows, kCols);
  p.subpixel_calibration = eta;
  p.subpixel_factor = 3;
  RunFileContents daemon_file;
  {
    Acquisition run(c.cfg, 1, std::nullopt);
    run_stream_simulator(c.sim);
    ASSERT_TRUE(run.wait(60s));
    ASSERT_EQ(run.stats().error, "");
    ASSERT_EQ(run.stats().dropped, 0u);
    daemon_file = read_run_file(run.file());
  }
  const std::string frames = path("frames.h5"), out = path("out.h5");
  glint::testing::write_sim_frames(frames, SimImageSource(c.sim.image, kDark),
                                   kDark + c.sim.frames, kRows, kCols);
  const ToolResult r = run_glint("find -q -i " + frames + " --dark 1000 --backend cpu -o " + out +
                                 " --products all,slices:30,subpixel --energy-window 150,1200 "
                                 "--energy 2x2 --eta-calibration " + eta + " --subpixel 3");
  ASSERT_EQ(r.status, 0) << r.output;
  const RunFileContents f = read_run_file(out);
  ASSERT_TRUE(std::ranges::equal(f.clusters.data(), daemon_file.clusters.data()));
  EXPECT_EQ(f.cluster_energy, daemon_file.cluster_energy);
  EXPECT_EQ(f.cluster_energy_2x2, daemon_file.cluster_energy_2x2);
  expect_same_products(f.products, daemon_file.products);
  EXPECT_GT(f.products.clusters, 300u);
  EXPECT_EQ(f.products.frames, 100u);
  // glintd's frames are numbered from 1, find's from 0 (the index in the dataset): the slices
  // start at each run's first data frame.
  ASSERT_EQ(f.products.slice_frame_start.size(), 4u);
  for (std::size_t k = 0; k < 4; ++k) {
    EXPECT_EQ(f.products.slice_frame_start[k], kDark + 30 * k);
    EXPECT_EQ(daemon_file.products.slice_frame_start[k], kDark + 1 + 30 * k);
  }
  glint::testing::PlainProductParams want;
  want.quadrant = true;
  want.emin = 150;
  want.emax = 1200;
  want.slice_frames = 30;
  const auto calibration = products::read_eta_calibration(eta).calibration;
  want.calibration = &calibration;
  want.subpixel_factor = 3;
  glint::testing::expect_file_products(f, want);
  EXPECT_EQ(f.products.subpixel_calibration, eta);
  EXPECT_GT(std::accumulate(f.products.subpixel.begin(), f.products.subpixel.end(), uint64_t{0}),
            f.products.clusters / 2);
}

// Photons at a known place in their pixels (x = k + 0.15, y = r + 0.85: glint synth
// --photon-grid --photon-at) through an eta calibration of a flat field: with 5 sub-pixels per
// pixel, most counts are in sub-pixel column 0 ([0, 0.2)) and row 4 ([0.8, 1)) of their pixel.
// (The generator's charge cloud reaches 0.3 px across an edge: only such positions share charge
// and so have an eta that tells where they are; 13,511 of 15,966 land there.)
TEST_F(GlintFindProducts, GridPhotonsPeakAtTheirKnownSubpixel) {
  const std::string eta = flat_field_calibration(path(""), 40, 50);
  ASSERT_EQ(run_glint("synth -q -o " + path("grid.h5") + " --rows 40 --cols 50 --dark 1000 "
                      "--frames 200 --photon-grid 5 --photon-at 0.15,0.85 --seed 9")
                .status,
            0);
  const ToolResult r = run_glint("find -q -i " + path("grid.h5") + " --backend cpu -o " +
                                 path("grid_run.h5") + " --products hitmap,subpixel "
                                 "--eta-calibration " + eta + " --subpixel 5");
  ASSERT_EQ(r.status, 0) << r.output;
  const RunFileContents f = read_run_file(path("grid_run.h5"));
  ASSERT_EQ(f.products.subpixel.size(), 40u * 5 * 50 * 5);
  EXPECT_EQ(f.products.subpixel_factor, 5u);
  // 8 x 10 grid cells, one photon each per frame: 16000 photons.
  EXPECT_GT(f.products.clusters, 15000u);
  glint::testing::PlainProductParams want;
  const auto calibration = products::read_eta_calibration(eta).calibration;
  want.calibration = &calibration;
  want.subpixel_factor = 5;
  glint::testing::expect_file_products(f, want);
  // The counts folded onto one pixel's 5 x 5 sub-pixels.
  std::array<uint64_t, 25> folded{};
  uint64_t total = 0;
  for (std::size_t r5 = 0; r5 < 200; ++r5)
    for (std::size_t c5 = 0; c5 < 250; ++c5) {
      const uint64_t n = f.products.subpixel[r5 * 250 + c5];
      folded[(r5 % 5) * 5 + c5 % 5] += n;
      total += n;
    }
  const auto peak = std::max_element(folded.begin(), folded.end()) - folded.begin();
  EXPECT_EQ(peak, 4 * 5 + 0) << "sub-pixel row " << peak / 5 << ", column " << peak % 5;
  EXPECT_GT(folded[4 * 5 + 0] * 4, total * 3) << "most counts in the known sub-pixel";
  // Each photon's pixel: the grid cells' central pixels (2 + 5 i, 2 + 5 j) hold them all.
  uint64_t at_centres = 0;
  for (std::size_t y = 2; y < 40; y += 5)
    for (std::size_t x = 2; x < 50; x += 5)
      for (std::size_t k = 0; k < 25; ++k)
        at_centres += f.products.subpixel[(y * 5 + k / 5) * 250 + x * 5 + k % 5];
  EXPECT_GT(at_centres * 10, total * 9);
}

TEST_F(GlintFindProducts, CalibratedFramesGiveProductsInKeV) {
  ToolResult r = run_glint(
      "synth -q -o " + path("jf.h5") + " --rows 64 --cols 128 --dark 1000 --frames 200 "
      "--photons 60 --jungfrau --gain-switch-rate 2e-3 --seed 23 --gain-file " +
      path("gain.bin") + " --pedestal-file " + path("ped.bin"));
  ASSERT_EQ(r.status, 0) << r.output;
  r = run_glint("find -q -i " + path("jf.h5") + " --detector jungfrau --backend cpu --gain-file " +
                path("gain.bin") + " --pedestal-file " + path("ped.bin") + " -o " +
                path("cal.h5") + " --products all,slices:64 --energy-window 2.5,40");
  ASSERT_EQ(r.status, 0) << r.output;
  const RunFileContents f = read_run_file(path("cal.h5"));
  ASSERT_EQ(f.clusters.value_type(), ClusterValues::float32);
  ASSERT_GT(f.clusters.n_clusters(), 5000u);
  glint::testing::expect_cluster_energies(f);
  glint::testing::PlainProductParams want;
  want.calibrated = true;
  want.emin = 2.5;
  want.emax = 40;
  want.spectrum_hi = 50;  // keV
  want.slice_frames = 64;
  glint::testing::expect_file_products(f, want);
  EXPECT_EQ(f.products.units, "keV");
  EXPECT_GT(f.products.clusters, 3000u);
  EXPECT_LT(f.products.clusters, f.clusters.n_clusters());
}

TEST_F(GlintFindProducts, WorkerCountAndBatchSizeChangeNothing) {
  ASSERT_EQ(run_glint("synth -q -o " + path("in.h5") + " --rows 40 --cols 50 --dark 1000 "
                      "--frames 300 --photons 40 --seed 3").status, 0);
  const std::string common = "find -q -i " + path("in.h5") + " --backend cpu " +
                             " --products all,slices:17 -o ";
  ToolResult r = run_glint(common + path("a.h5") + " --products-threads 1 --batch 256");
  ASSERT_EQ(r.status, 0) << r.output;
  r = run_glint(common + path("b.h5") + " --products-threads 4 --batch 7");
  ASSERT_EQ(r.status, 0) << r.output;
  const RunFileContents a = read_run_file(path("a.h5")), b = read_run_file(path("b.h5"));
  EXPECT_GT(a.products.clusters, 5000u);
  expect_same_products(a.products, b.products);
  EXPECT_EQ(a.products.slice_frame_start, b.products.slice_frame_start);
  EXPECT_EQ(a.products.slice_frame_start.size(), 18u);  // 300 frames: 17 x 17 + 11
}

TEST_F(GlintFindProducts, BadProductOptionsAreOneLineUsageErrors) {
  ASSERT_EQ(run_glint("synth -q -o " + path("in.h5") + " --rows 20 --cols 30 --dark 1000 "
                      "--frames 2 --seed 3").status, 0);
  const std::string in = "find -q -i " + path("in.h5") + " -o " + path("o.h5");
  glint::testing::expect_failure(in + " --products hitmap,colour", 2,
                                 "--products hitmap,colour: 'colour' is not allowed");
  glint::testing::expect_failure(in + " --products slices:0", 2, "slices:N with N > 0");
  glint::testing::expect_failure(in + " --products all --energy-window 5,1", 2,
                                 "--energy-window 5,1: expected EMIN,EMAX with EMIN < EMAX");
  glint::testing::expect_failure(in + " --products all --energy 3x3", 2,
                                 "--energy 3x3: allowed are sum");
  glint::testing::expect_failure(in + " --energy-window 1,2", 2,
                                 "--energy-window and --energy need --products");
  glint::testing::expect_failure("find -q -i " + path("in.h5") + " --products all", 2,
                                 "--products needs -o/--output");
  glint::testing::expect_failure(in + " --products subpixel", 2,
                                 "subpixel needs --eta-calibration FILE");
  glint::testing::expect_failure(in + " --eta-calibration " + path("in.h5"), 2,
                                 "--eta-calibration needs --products");
  // A frame file is not an eta calibration: the key and the file are named.
  glint::testing::expect_failure(in + " --products hitmap --eta-calibration " + path("in.h5"), 2,
                                 "products.subpixel.calibration: eta calibration file " +
                                     path("in.h5") + ": not an eta calibration file");
}
