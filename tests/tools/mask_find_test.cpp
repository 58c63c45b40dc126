// `glint find --mask --mask-from-dark` against a glintd run on the same frames: the same mask,
// the same clusters removed, bit for bit.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <algorithm>
#include <vector>

#include "../pipeline/simulated_run.hpp"
#include "glint/pipeline/acquisition.hpp"
#include "glint/pipeline/pixel_mask.hpp"
#include "glint/pipeline/run_file.hpp"
#include "glint/pipeline/stream_simulator.hpp"
#include "sim_frames.hpp"
#include "tool_test.hpp"

using glint::testing::run_glint;
using glint::testing::ToolResult;
using namespace glint;
using namespace glint::pipeline;
using namespace std::chrono_literals;

namespace {

class GlintFindMask : public glint::testing::ScratchDirTest {
 protected:
  GlintFindMask() : ScratchDirTest("glint_find_mask_test") {}
};

constexpr uint32_t kRows = 48, kCols = 64, kDark = 1000;  // glint find's pedestal window

}  // namespace

TEST_F(GlintFindMask, SameMaskAndClustersAsAGlintdRunOnTheSameFrames) {
  glint::testing::SimulatedRun c =
      glint::testing::simulated_run("find_mask", kRows, kCols, kDark, /*batch_frames=*/32);
  c.sim.image.photons = 15;
  c.sim.frames = 100;
  c.sim.rate_hz = 10000;               // the run keeps up: no frame is dropped
  c.cfg.ingest.queue_frames = 1200;
  c.sim.image.stuck_pixels = {7 * kCols + 9};
  c.sim.image.noisy_pixels = {33 * kCols + 50};
  // A user-masked block, and the dark frames' dead and noisy pixels on top.
  std::vector<uint32_t> mask(kRows * kCols, 0);
  for (uint32_t y = 20; y < 28; ++y)
    for (uint32_t x = 30; x < 40; ++x) mask[y * kCols + x] = kMaskUser;
  const std::string mask_file = path("mask.h5");
  write_mask_file(mask_file, "/entry/mask", mask, {kRows, kCols});
  c.cfg.mask.file = mask_file + ":/entry/mask";
  c.cfg.mask.from_dark = true;

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
  const ToolResult r = run_glint("find -i " + frames + " --dark 1000 --backend cpu --mask " +
                                 mask_file + ":/entry/mask --mask-from-dark -o " + out);
  ASSERT_EQ(r.status, 0) << r.output;
  const RunFileContents f = read_run_file(out);

  // The mask: the file's block, the stuck pixel dead, the noisy pixel noisy (and the
  // generator's own defects): the same in both.
  ASSERT_EQ(f.pixel_mask.size(), mask.size());
  EXPECT_EQ(f.pixel_mask, daemon_file.pixel_mask);
  EXPECT_EQ(f.pixel_mask[7 * kCols + 9], kMaskDead);
  EXPECT_EQ(f.pixel_mask[33 * kCols + 50], kMaskNoisy);
  EXPECT_EQ(f.pixel_mask[20 * kCols + 30] & kMaskUser, kMaskUser);

  // The clusters, frame by frame, and what was removed.
  ASSERT_EQ(f.frames.size(), daemon_file.frames.size());
  for (std::size_t k = 0; k < f.frames.size(); ++k)
    EXPECT_EQ(f.frames[k].n_clusters, daemon_file.frames[k].n_clusters) << "row " << k;
  EXPECT_TRUE(std::ranges::equal(f.clusters.x(), daemon_file.clusters.x()));
  EXPECT_TRUE(std::ranges::equal(f.clusters.y(), daemon_file.clusters.y()));
  EXPECT_TRUE(std::ranges::equal(f.clusters.data(), daemon_file.clusters.data()));
  EXPECT_EQ(f.frame_masked_clusters, daemon_file.frame_masked_clusters);
  ASSERT_TRUE(f.masked_clusters && daemon_file.masked_clusters);
  EXPECT_EQ(*f.masked_clusters, *daemon_file.masked_clusters);
  EXPECT_GT(*f.masked_clusters, 20u);
  for (std::size_t i = 0; i < f.clusters.n_clusters(); ++i)
    EXPECT_EQ(f.pixel_mask[std::size_t{f.clusters.y()[i]} * kCols + f.clusters.x()[i]], 0u);
  EXPECT_NE(r.output.find(fmt::format("{} clusters centred on them removed",
                                      *f.masked_clusters)),
            std::string::npos)
      << r.output;
}

TEST_F(GlintFindMask, BadMaskOptionsAreOneLineUsageErrors) {
  const std::string frames = path("frames.h5");
  const SimImageParams img{.rows = kRows, .cols = kCols};
  glint::testing::write_sim_frames(frames, SimImageSource(img, kDark), kDark + 2, kRows,
                                   kCols);
  const std::string small = path("small.h5");
  write_mask_file(small, "/m", std::vector<uint32_t>(4, 0), {2, 2});
  glint::testing::expect_failure("find -q -i " + frames + " --mask " + small + ":/m", 2,
                                 "--mask: mask file " + small +
                                     ":/m: shape [2, 2], expected [48, 64]");
  glint::testing::expect_failure("find -q -i " + frames + " --mask " + small, 2,
                                 "expected FILE.h5:/dataset");
  glint::testing::expect_failure("find -q -i " + frames + " --mask " + small + ":/none", 2,
                                 "no dataset '/none'");
  glint::testing::expect_failure(
      "find -q -i " + frames + " --mask-from-dark --noisy-factor 0.5", 2, "--noisy-factor");
  glint::testing::expect_failure("find -q -i " + frames + " --noisy-factor 3", 2,
                                 "--noisy-factor needs --mask-from-dark");
}

// Defect pixels given to `glint synth` are found by `glint find --mask-from-dark`, exactly: the stuck
// one dead, the noisy one noisy, the JUNGFRAU one switching gain in the dark over-responding.
TEST_F(GlintFindMask, SynthDefectsAreFoundInTheDarkFrames) {
  const std::string frames = path("defects.h5"), out = path("defects_out.h5");
  // 40 x 50 frames: pixel 123 stuck, 1234 noisy, 777 in G1 in odd dark frames.
  ToolResult r = run_glint("synth -q -o " + frames + " --rows 40 --cols 50 --dark 1000 "
                           "--frames 20 --seed 5 --jungfrau --gain-switch-rate 0 "
                           "--stuck-pixels 123 --noisy-pixels 1234 --dark-g1-pixels 777");
  ASSERT_EQ(r.status, 0) << r.output;
  r = run_glint("find -i " + frames + " --detector jungfrau --backend cpu --mask-from-dark -o " +
                out);
  ASSERT_EQ(r.status, 0) << r.output;
  const RunFileContents f = read_run_file(out);
  // The generator's own random defects are drawn from the seed too: with seed 5, one
  // stuck pixel (582, synth::Config::stuck_fraction): dead; nothing else is flagged.
  ASSERT_EQ(f.pixel_mask.size(), 40u * 50u);
  EXPECT_EQ(f.pixel_mask[582], kMaskDead);
  EXPECT_EQ(f.pixel_mask[123], kMaskDead);
  EXPECT_EQ(f.pixel_mask[1234], kMaskNoisy);
  EXPECT_EQ(f.pixel_mask[777], kMaskOverResponding);
  std::vector<std::size_t> flagged;
  for (std::size_t i = 0; i < f.pixel_mask.size(); ++i)
    if (f.pixel_mask[i] != 0) flagged.push_back(i);
  EXPECT_EQ(flagged, (std::vector<std::size_t>{123, 582, 777, 1234})) << r.output;
  EXPECT_NE(r.output.find("pixel mask: 4 pixels masked"), std::string::npos) << r.output;
}
