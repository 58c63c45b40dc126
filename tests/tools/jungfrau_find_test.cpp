// `glint synth --jungfrau` and `glint find --detector jungfrau`, run as a user runs them.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "glint/cluster_finder.hpp"
#include "glint/clust_file.hpp"
#include "glint/jungfrau.hpp"
#include "glint/pipeline/run_file.hpp"
#include "test_data.hpp"
#include "tool_test.hpp"

using glint::testing::expect_failure;
using glint::testing::file_sha256;
using glint::testing::run_glint;
using glint::testing::ToolResult;

namespace {

class GlintFindJungfrau : public glint::testing::ScratchDirTest {
 protected:
  GlintFindJungfrau() : ScratchDirTest("glint_find_jungfrau_test") {}
  void synth(const std::string& extra = "") {
    const ToolResult r = run_glint(
        "synth -q -o " + path("jf.h5") + " --rows 128 --cols 256 --dark 1000 --frames 300 "
        "--photons 60 --jungfrau --gain-switch-rate 2e-3 --dark-switch-rate 2e-4 "
        "--invalid-gain-rate 1e-4 --seed 21 --gain-file " + path("gain.bin") +
        " --pedestal-file " + path("ped.bin") + " " + extra);
    ASSERT_EQ(r.status, 0) << r.output;
  }
};

// aare's apply_calibration + ClusterFinder<Cluster<float, 3, 3>, double, double> on these frames
// (docs/cluster-finding.md).
constexpr const char* kAareCalibratedS3 = glint::testing::kAareJungfrauDigests[0].sha;

}  // namespace

TEST_F(GlintFindJungfrau, CalibratedClustersMatchAare) {
  synth();
  for (const char* threads : {"1", "5"}) {
    const auto clust = path(std::string("cal_") + threads + ".clust");
    const ToolResult r =
        run_glint("find -i " + path("jf.h5") + " --detector jungfrau --gain-file " +
                  path("gain.bin") + " --pedestal-file " + path("ped.bin") +
                  " --backend auto --threads " + threads + " --clust " + clust);
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_EQ(file_sha256(clust), kAareCalibratedS3) << threads << "\n" << r.output;
  }
}

TEST_F(GlintFindJungfrau, GainBitsAreNotPhotonsAndAreCountedInTheRunFile) {
  synth();
  // Read as raw ADC (what glint did before JUNGFRAU mode): the switched pixels are clusters.
  const ToolResult raw = run_glint("find -i " + path("jf.h5") + " --backend cpu --output " +
                                   path("raw.h5"));
  ASSERT_EQ(raw.status, 0) << raw.output;
  const auto raw_run = glint::pipeline::read_run_file(path("raw.h5"));
  const ToolResult r = run_glint("find -i " + path("jf.h5") +
                                 " --detector jungfrau --backend cpu --output " + path("g0.h5"));
  ASSERT_EQ(r.status, 0) << r.output;
  const auto run = glint::pipeline::read_run_file(path("g0.h5"));
  ASSERT_EQ(run.gain_switched.size(), 1300u);
  ASSERT_EQ(run.gain_invalid.size(), 1300u);
  ASSERT_TRUE(raw_run.gain_switched.empty());

  // Count the switched pixels and the clusters centred on them from the frames themselves.
  const glint::synth::Generator gen(glint::testing::aare_jungfrau_frames());
  std::vector<uint16_t> frame(128 * 256);
  uint64_t switched = 0, switched_g12 = 0, raw_on_switched = 0, on_switched = 0;
  for (uint64_t k = 1000; k < 1300; ++k) {
    gen.fill(k, frame);
    const auto g = glint::jungfrau::count_gains(frame);
    EXPECT_EQ(run.gain_switched[k], g.g1 + g.g2) << k;
    EXPECT_EQ(run.gain_invalid[k], g.invalid) << k;
    switched += g.switched();
    switched_g12 += g.g1 + g.g2;
    auto count_on = [&](const glint::pipeline::RunFileContents& c) {
      uint64_t n = 0;
      const auto& rec = c.clusters.frames()[k];
      for (uint64_t i = rec.first_cluster; i < rec.first_cluster + rec.n_clusters; ++i)
        n += glint::jungfrau::in_g0(frame[c.clusters.y()[i] * 256u + c.clusters.x()[i]]) ? 0 : 1;
      return n;
    };
    raw_on_switched += count_on(raw_run);
    on_switched += count_on(run);
  }
  EXPECT_GT(switched, 10000u);
  EXPECT_NE(r.output.find(std::to_string(switched_g12) + " pixels in G1/G2, " +
                          std::to_string(switched - switched_g12) + " with the invalid gain code"),
            std::string::npos)
      << r.output;
  EXPECT_GT(raw_on_switched, 5000u);
  EXPECT_EQ(on_switched, 0u);
  EXPECT_LT(run.clusters.n_clusters(), raw_run.clusters.n_clusters());
}

TEST_F(GlintFindJungfrau, CalibratedRunFileHoldsFloatClusters) {
  synth();
  const ToolResult r = run_glint("find -q -i " + path("jf.h5") +
                                 " --detector jungfrau --backend cpu --gain-file " +
                                 path("gain.bin") + " --pedestal-file " + path("ped.bin") +
                                 " --output " + path("cal.h5") + " --clust " + path("cal.clust"));
  ASSERT_EQ(r.status, 0) << r.output;
  const auto run = glint::pipeline::read_run_file(path("cal.h5"));
  EXPECT_EQ(run.clusters.value_type(), glint::ClusterValues::float32);
  const glint::ClusterTable clust = glint::read_clust(path("cal.clust"), 3);
  ASSERT_EQ(run.clusters.n_clusters(), clust.n_clusters());
  EXPECT_TRUE(std::equal(clust.data().begin(), clust.data().end(), run.clusters.data().begin()));
}

// The ADC pedestal the calibration subtracted is in the run file: G0 from the dark frames (aare's
// calculate_pedestal), G1 and G2 from the pedestal file; a G0-only run has none.
TEST_F(GlintFindJungfrau, CalibratedRunFileHoldsTheAdcPedestalOfEachGain) {
  synth();
  const ToolResult r = run_glint("find -q -i " + path("jf.h5") +
                                 " --detector jungfrau --backend cpu --gain-file " +
                                 path("gain.bin") + " --pedestal-file " + path("ped.bin") +
                                 " --output " + path("cal.h5"));
  ASSERT_EQ(r.status, 0) << r.output;
  const auto run = glint::pipeline::read_run_file(path("cal.h5"));
  constexpr std::size_t np = 128 * 256;
  ASSERT_EQ(run.calibration_pedestal.size(), 3 * np);

  const glint::synth::Config c = glint::testing::aare_jungfrau_frames();
  const glint::synth::Generator gen(c);
  glint::jungfrau::StagePedestal dark(c.shape);
  std::vector<uint16_t> frame(np);
  for (uint64_t k = 0; k < 1000; ++k) {
    gen.fill(k, frame);
    dark.add(frame);
  }
  const std::vector<double> from_dark = dark.means();
  const std::vector<double> from_file =
      glint::jungfrau::read_pedestal_file(path("ped.bin"), c.shape);
  const auto& got = run.calibration_pedestal;
  EXPECT_TRUE(std::equal(got.begin(), got.begin() + np, from_dark.begin()));
  EXPECT_TRUE(std::equal(got.begin() + np, got.end(), from_file.begin() + np));
  // The two sources differ, so the comparison above tells them apart.
  EXPECT_FALSE(std::equal(from_dark.begin(), from_dark.begin() + np, from_file.begin()));
  EXPECT_FALSE(std::equal(from_dark.begin() + np, from_dark.end(), from_file.begin() + np));

  ASSERT_EQ(run_glint("find -q -i " + path("jf.h5") + " --detector jungfrau --backend cpu "
                      "--output " + path("g0.h5")).status, 0);
  EXPECT_TRUE(glint::pipeline::read_run_file(path("g0.h5")).calibration_pedestal.empty());
}

TEST_F(GlintFindJungfrau, BadOptionsAreUsageErrors) {
  synth();
  const std::string in = " -i " + path("jf.h5");
  expect_failure("find" + in + " --gain-file " + path("gain.bin"), 2,
                 "need --detector jungfrau");
  expect_failure("find" + in + " --detector eiger", 2, "allowed are generic, jungfrau");
  expect_failure("find" + in + " --detector jungfrau --pedestal-file " + path("ped.bin"), 2,
                 "need --gain-file");
  expect_failure("find" + in + " --detector jungfrau --gain-file " + path("ped.bin") + " --hg0",
                 2, "has no HG0 array");
  expect_failure("find" + in + " --detector jungfrau --gain-file " + path("jf.h5"), 2,
                 "jf.h5");
  expect_failure("find" + in + " --detector jungfrau --gain-file " + path("gain.bin") +
                     " --pedestal-source file:" + path("jf.h5"),
                 2, "with --gain-file the pedestal comes from the dark frames");
  expect_failure("synth -o " + path("x.h5") + " --gain-file " + path("g2.bin"), 2,
                 "need --jungfrau");
}

// glint pedestal writes the finder's whole tracking state after the dark frames.
TEST_F(GlintFindJungfrau, PedestalFileFromDarkFrames) {
  ASSERT_EQ(run_glint("synth -q -o " + path("in.h5") + " --rows 20 --cols 30 --dark 100 "
                      "--frames 10 --seed 5 --jungfrau --dark-switch-rate 1e-2").status, 0);
  const ToolResult r = run_glint("pedestal -i " + path("in.h5") + " --dark 100 --window 50 "
                                 "--detector jungfrau -o " + path("ped.h5"));
  ASSERT_EQ(r.status, 0) << r.output;
  const glint::PedestalState got = glint::pipeline::read_pedestal_state(path("ped.h5"));
  glint::synth::Config c;
  c.shape = {20, 30};
  c.seed = 5;
  c.dark_frames = 100;
  c.jungfrau = true;
  c.dark_switch_rate = 1e-2;
  const glint::testing::SyntheticRun run(c, 0);
  glint::FinderParams p;
  p.shape = c.shape;
  p.pedestal_window = 50;
  p.pixels = glint::PixelMode::jungfrau_g0;
  auto ref = glint::make_reference_finder(p);
  ref->push_dark(run.dark());
  EXPECT_EQ(got, ref->pedestal());
  p.pixels = glint::PixelMode::raw;  // switched dark pixels were not pushed
  auto raw = glint::make_reference_finder(p);
  raw->push_dark(run.dark());
  EXPECT_NE(got.sum, raw->pedestal().sum);
  expect_failure("pedestal -i " + path("in.h5") + " --dark 100 -o " + path("ped.h5"), 2,
                 "exists already");
  expect_failure("pedestal -i " + path("in.h5") + " --dark 500 -o " + path("p2.h5"), 2,
                 "holds 110 frames");
}
