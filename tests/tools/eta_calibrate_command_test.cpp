// `glint eta-calibrate`, run as a user runs it, on run files written by `glint find`.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "glint/pipeline/run_file.hpp"
#include "glint/products/eta_calibration_file.hpp"
#include "glint/products/table_eta.hpp"
#include "tool_test.hpp"

using glint::testing::expect_failure;
using glint::testing::run_glint;
using glint::testing::ToolResult;

namespace {

namespace gp = glint::products;

class GlintEtaCalibrate : public glint::testing::ScratchDirTest {
 protected:
  GlintEtaCalibrate() : ScratchDirTest("glint_eta_calibrate_test") {}
  /// A raw run file of S x S clusters.
  std::string raw_run(int size) {
    const std::string frames = path("raw.h5"), run = path("run" + std::to_string(size) + ".h5");
    if (!std::filesystem::exists(frames)) {
      const ToolResult s = run_glint("synth -q -o " + frames +
                                     " --rows 64 --cols 80 --frames 200 --photons 25 --seed 5");
      EXPECT_EQ(s.status, 0) << s.output;
    }
    const ToolResult f = run_glint("find -q -i " + frames + " --backend cpu --cluster-size " +
                                   std::to_string(size) + " --output " + run);
    EXPECT_EQ(f.status, 0) << f.output;
    return run;
  }
};

std::vector<double> vec(std::span<const double> s) { return {s.begin(), s.end()}; }

/// The cube glint eta-calibrate should build from these tables.
template <class EtaOf>
void fill(gp::EtaCube& cube, const glint::ClusterTable& t, EtaOf eta_of) {
  for (std::size_t i = 0; i < t.n_clusters(); ++i) cube.add(eta_of(t, i));
}

TEST_F(GlintEtaCalibrate, RawRunDefaultsFromTheData) {
  const std::string run = raw_run(3);
  const ToolResult r = run_glint("eta-calibrate " + run + " -o " + path("eta.h5"));
  ASSERT_EQ(r.status, 0) << r.output;

  const auto c = glint::pipeline::read_run_file(run).clusters;
  ASSERT_GT(c.n_clusters(), 1000u);
  int32_t lo = std::numeric_limits<int32_t>::max(), hi = std::numeric_limits<int32_t>::min();
  for (std::size_t i = 0; i < c.n_clusters(); ++i) {
    lo = std::min(lo, gp::eta2_int(c, i).sum);
    hi = std::max(hi, gp::eta2_int(c, i).sum);
  }
  // Default: 100 bins over [-0.1, 1.1], one energy bin over [min, max + 1) of the 2 x 2 sums.
  gp::EtaCube want = gp::EtaCube::regular(100, -0.1, 1.1, 1, lo, hi + 1.0);
  fill(want, c, gp::eta2_int);
  const gp::EtaCalibration cal(want, gp::EtaMethod::cdf);

  const gp::EtaCalibrationFile f = gp::read_eta_calibration(path("eta.h5"));
  EXPECT_EQ(vec(f.cube.energy().edges()), (std::vector<double>{double(lo), hi + 1.0}));
  EXPECT_EQ(vec(f.cube.eta_x().edges()), gp::regular_edges(-0.1, 1.1, 100));
  EXPECT_EQ(vec(f.cube.counts()), vec(want.counts()));
  EXPECT_EQ(vec(f.calibration.ietax()), vec(cal.ietax()));
  EXPECT_EQ(vec(f.calibration.ietay()), vec(cal.ietay()));
  EXPECT_EQ(f.calibration.method(), gp::EtaMethod::cdf);
  EXPECT_EQ(f.cluster_size, 3);
  EXPECT_EQ(f.clusters, want.added());
  EXPECT_EQ(f.sources, std::vector<std::string>{run});
  EXPECT_GT(want.outside(), 0u);  // eta beyond [-0.1, 1.1)
  EXPECT_NE(r.output.find(std::to_string(c.n_clusters()) + " clusters (3 x 3, raw) from 1 run "
                          "file(s); " + std::to_string(want.added()) + " in the cube, " +
                          std::to_string(want.outside()) + " outside it"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("method cdf, written to " + path("eta.h5")), std::string::npos)
      << r.output;
}

TEST_F(GlintEtaCalibrate, GivenRangesTwoRunsRosenblatt) {
  const std::string run = raw_run(5);
  const ToolResult r =
      run_glint("eta-calibrate -q " + run + " " + run + " -o " + path("eta.h5") +
                " --bins 40 --eta-min 0 --eta-max 1 --energy-bins 3 --emin 200 --emax 380 "
                "--method rosenblatt");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(r.output.empty()) << r.output;
  const auto c = glint::pipeline::read_run_file(run).clusters;
  gp::EtaCube want = gp::EtaCube::regular(40, 0.0, 1.0, 3, 200.0, 380.0);
  fill(want, c, gp::eta2_int);
  fill(want, c, gp::eta2_int);
  const gp::EtaCalibration cal(want, gp::EtaMethod::rosenblatt);
  const gp::EtaCalibrationFile f = gp::read_eta_calibration(path("eta.h5"));
  EXPECT_EQ(vec(f.cube.counts()), vec(want.counts()));
  EXPECT_EQ(vec(f.calibration.ietax()), vec(cal.ietax()));
  EXPECT_EQ(vec(f.calibration.ietay()), vec(cal.ietay()));
  EXPECT_EQ(f.cluster_size, 5);
  EXPECT_EQ(f.clusters, want.added());
  EXPECT_EQ(f.sources, (std::vector<std::string>{run, run}));
}

TEST_F(GlintEtaCalibrate, CalibratedRun) {
  const ToolResult s = run_glint(
      "synth -q -o " + path("jf.h5") + " --rows 64 --cols 64 --dark 1000 --frames 100 "
      "--photons 30 --jungfrau --seed 4 --gain-file " + path("gain.bin") + " --pedestal-file " +
      path("ped.bin"));
  ASSERT_EQ(s.status, 0) << s.output;
  const ToolResult f = run_glint("find -q -i " + path("jf.h5") + " --detector jungfrau "
                                 "--backend cpu --gain-file " + path("gain.bin") +
                                 " --pedestal-file " + path("ped.bin") + " --output " +
                                 path("run.h5"));
  ASSERT_EQ(f.status, 0) << f.output;
  const ToolResult r = run_glint("eta-calibrate " + path("run.h5") + " -o " + path("eta.h5"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("(3 x 3, calibrated)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(" keV)"), std::string::npos) << r.output;

  const auto c = glint::pipeline::read_run_file(path("run.h5")).clusters;
  ASSERT_EQ(c.value_type(), glint::ClusterValues::float32);
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (std::size_t i = 0; i < c.n_clusters(); ++i) {
    lo = std::min(lo, static_cast<double>(gp::eta2_float(c, i).sum));
    hi = std::max(hi, static_cast<double>(gp::eta2_float(c, i).sum));
  }
  const double top = std::nextafter(hi, std::numeric_limits<double>::infinity());
  gp::EtaCube want = gp::EtaCube::regular(100, -0.1, 1.1, 1, lo, top);
  fill(want, c, gp::eta2_float);
  const gp::EtaCalibrationFile file = gp::read_eta_calibration(path("eta.h5"));
  EXPECT_EQ(vec(file.cube.energy().edges()), (std::vector<double>{lo, top}));
  EXPECT_EQ(vec(file.cube.counts()), vec(want.counts()));
  EXPECT_EQ(vec(file.calibration.ietax()),
            vec(gp::EtaCalibration(want, gp::EtaMethod::cdf).ietax()));
}

TEST_F(GlintEtaCalibrate, BadInputIsNamed) {
  const std::string run3 = raw_run(3), run5 = raw_run(5);
  expect_failure("eta-calibrate " + run3 + " " + run5 + " -o " + path("eta.h5"), 2,
                 run5 + ": clusters of 5 x 5, the first run file has 3 x 3");
  expect_failure("eta-calibrate " + path("raw.h5") + " -o " + path("eta.h5"), 2,
                 "glint eta-calibrate: " + path("raw.h5") +
                     ": not a glint run or pedestal file (no group /entry)");
  expect_failure("eta-calibrate " + run3 + " -o " + path("eta.h5") + " --method spline", 2,
                 "eta calibration method 'spline': allowed are cdf, rosenblatt");
  expect_failure("eta-calibrate " + run3 + " -o " + path("eta.h5") + " --emin 5 --emax 5", 2,
                 "--emin 5 must be below --emax 5");
  expect_failure("eta-calibrate " + run3 + " -o " + path("eta.h5") + " --bins 0", 2,
                 "--bins and --energy-bins must be >= 1");
  expect_failure("eta-calibrate " + path("none.h5") + " -o " + path("eta.h5"), 2,
                 "File does not exist");
  ASSERT_EQ(run_glint("eta-calibrate -q " + run3 + " -o " + path("eta.h5")).status, 0);
  expect_failure("eta-calibrate " + run3 + " -o " + path("eta.h5"), 2,
                 "exists already (use --overwrite to replace it)");
  EXPECT_EQ(run_glint("eta-calibrate -q " + run3 + " -o " + path("eta.h5") + " --overwrite")
                .status, 0);
}

}  // namespace
