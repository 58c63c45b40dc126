// The products of a whole run, in-process over loopback: the simulator publishes, an Acquisition
// finds and hands the clusters to the products' workers; the run file's product groups are
// checked against the plain computation from the clusters read back from the same file.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>

#include "../common/products_check.hpp"
#include "glint/config/config.hpp"
#include "glint/pipeline/acquisition.hpp"
#include "glint/pipeline/products_consumer.hpp"
#include "glint/pipeline/run_file.hpp"
#include "glint/pipeline/stream_simulator.hpp"
#include "glint/products/eta_calibration_file.hpp"
#include "simulated_run.hpp"
#include "stream_test_util.hpp"

using namespace glint;
using namespace glint::pipeline;
using namespace std::chrono_literals;

namespace {

using Case = glint::testing::SimulatedRun;
constexpr uint32_t kRows = 48, kCols = 64, kDark = 20;

Case make_case(const std::string& name) {
  Case c = glint::testing::simulated_run(name, kRows, kCols, kDark, /*batch_frames=*/16);
  c.sim.image.photons = 25;
  c.sim.frames = 90;
  c.sim.rate_hz = 5000;
  c.cfg.ingest.queue_frames = 1200;
  return c;
}

struct Result {
  RunStats stats;
  RunFileContents file;
  std::vector<PreviewImage> preview;
};

Result run_case(const Case& c) {
  Acquisition run(c.cfg, 1, std::nullopt);
  run_stream_simulator(c.sim);
  EXPECT_TRUE(run.wait(30s)) << "the run did not end on the end message";
  Result r{run.stats(), read_run_file(run.file()), run.products().preview_images()};
  EXPECT_EQ(r.stats.error, "");
  return r;
}

}  // namespace

// The default configuration: hit map, energy image, spectrum and the clusters' energies.
TEST(ProductsRun, DefaultProductsMatchThePlainComputationFromTheFile) {
  const Result r = run_case(make_case("products_default"));
  ASSERT_GT(r.file.clusters.n_clusters(), 1000u);
  glint::testing::expect_cluster_energies(r.file);
  glint::testing::PlainProductParams p;
  glint::testing::expect_file_products(r.file, p);
  EXPECT_EQ(r.file.products.hitmap.size(), kRows * kCols);
  EXPECT_TRUE(r.file.products.pixel_spectra.empty());
  EXPECT_TRUE(r.file.products.eta2.empty());
  EXPECT_TRUE(r.file.products.slices.empty());
  EXPECT_EQ(r.file.products.clusters, r.stats.clusters);
  EXPECT_EQ(r.file.products.frames, 90u);

  // The live view's images, after the end: the file's hit map, energy image and spectrum.
  ASSERT_EQ(r.preview.size(), 3u);
  EXPECT_EQ(r.preview[0].what, "hitmap");
  EXPECT_EQ(r.preview[0].rows, kRows);
  EXPECT_EQ(r.preview[0].cols, kCols);
  EXPECT_EQ(r.preview[0].frames, 90u);
  for (std::size_t i = 0; i < r.file.products.hitmap.size(); ++i)
    ASSERT_EQ(r.preview[0].values[i], static_cast<double>(r.file.products.hitmap[i]));
  EXPECT_EQ(r.preview[1].what, "energy");
  EXPECT_EQ(r.preview[1].units, "ADU");
  EXPECT_EQ(r.preview[1].values, r.file.products.energy_image);
  EXPECT_EQ(r.preview[2].what, "spectrum");
  EXPECT_EQ(r.preview[2].rows, 1u);
  EXPECT_EQ(r.preview[2].cols, 500u);
  EXPECT_EQ(r.preview[2].x_min, 0.0);
  EXPECT_EQ(r.preview[2].x_max, 2000.0);
  for (std::size_t i = 0; i < 500; ++i)
    ASSERT_EQ(r.preview[2].values[i], static_cast<double>(r.file.products.spectrum[i]));
}

// Everything on: the 2x2 energy in a window, slices of 25 frames (the last partial), per-pixel
// spectra, eta, three workers.
TEST(ProductsRun, AllProductsInAWindowWithSlicesMatchThePlainComputation) {
  Case c = make_case("products_all");
  auto& p = c.cfg.products;
  p.energy = "2x2";
  p.energy_window = {150, 1200};
  p.slice_frames = 25;
  p.pixel_spectra = true;
  p.eta = true;
  p.eta_bins = 50;
  p.spectrum_bins = 120;
  p.spectrum_max = 1500;
  p.threads = 3;
  const Result r = run_case(c);
  glint::testing::PlainProductParams want;
  want.quadrant = true;
  want.emin = 150;
  want.emax = 1200;
  want.slice_frames = 25;
  want.spectrum_hi = 1500;
  want.spectrum_bins = 120;
  want.eta_bins = 50;
  glint::testing::expect_file_products(r.file, want);
  EXPECT_EQ(r.file.products.slice_frame_start.size(), 4u);  // 90 frames: 25, 25, 25, 15
  EXPECT_EQ(r.file.products.slice_frame_start[0], kDark + 1);  // the first data frame
  EXPECT_EQ(r.file.products.pixel_spectra.size(), std::size_t{kRows} * kCols * 120);
  EXPECT_GT(r.file.products.clusters, 500u);
  EXPECT_LT(r.file.products.clusters, r.stats.clusters);
}

// A sub-pixel calibration that cannot be used fails the start, naming the key and the file,
// before any frame: one that is missing, and one made from clusters of another size.
TEST(ProductsRun, AnUnusableSubpixelCalibrationFailsTheStartNamingTheKeyAndFile) {
  Case c = make_case("products_subpixel");
  c.cfg.products.subpixel_calibration = "/nonexistent/eta.h5";
  {
    Acquisition run(c.cfg, 1, std::nullopt);
    ASSERT_TRUE(run.wait(20s));
    const std::string error = run.stats().error;
    EXPECT_TRUE(error.starts_with("products.subpixel.calibration: ")) << error;
    EXPECT_NE(error.find("/nonexistent/eta.h5"), std::string::npos) << error;
    EXPECT_EQ(error.find('\n'), std::string::npos) << error;
  }
  // A 5 x 5 calibration for a run of 3 x 3 clusters.
  const auto path = std::filesystem::temp_directory_path() /
                    ("products_subpixel_" + std::to_string(::getpid()) + "_eta5.h5");
  auto cube = products::EtaCube::regular(4, 0.0, 1.0, 1, 0.0, 1000.0);
  cube.add(0.5, 0.5, 300.0);
  products::write_eta_calibration(
      path, {cube, products::EtaCalibration(cube, products::EtaMethod::cdf), 5, 1, {"x.h5"}},
      true);
  c.cfg.products.subpixel_calibration = path.string();
  {
    Acquisition run(c.cfg, 2, std::nullopt);
    ASSERT_TRUE(run.wait(20s));
    EXPECT_EQ(run.stats().error,
              "products.subpixel.calibration: '" + path.string() +
                  "': made from 5 x 5 clusters, this run finds 3 x 3 clusters (allowed: a "
                  "calibration of the run's finder.cluster_size)");
  }
  std::filesystem::remove(path);
}
