// The pixel mask through the whole run, in-process over loopback: the simulator publishes, an
// Acquisition finds, masks and writes; the run file is read back.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "glint/config/config.hpp"
#include "glint/pipeline/acquisition.hpp"
#include "glint/pipeline/pixel_mask.hpp"
#include "glint/pipeline/run_file.hpp"
#include "glint/pipeline/stream_simulator.hpp"
#include "simulated_run.hpp"
#include "stream_test_util.hpp"

using namespace glint;
using namespace glint::pipeline;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

using Case = glint::testing::SimulatedRun;
constexpr uint32_t kRows = 48, kCols = 64, kDark = 20;

Case make_case(const std::string& name) {
  Case c = glint::testing::simulated_run(name, kRows, kCols, kDark, /*batch_frames=*/16);
  c.sim.image.photons = 15;
  c.sim.frames = 60;
  return c;
}

struct Result {
  RunStats stats;
  RunFileContents file;
};

Result run_case(const Case& c) {
  Acquisition run(c.cfg, 1, std::nullopt);
  run_stream_simulator(c.sim);
  EXPECT_TRUE(run.wait(20s)) << "the run did not end on the end message";
  Result r{run.stats(), read_run_file(run.file())};
  EXPECT_EQ(r.stats.error, "");
  return r;
}

/// `t` without the clusters centred on a pixel with a bit set in `mask`; `removed` per frame.
ClusterTable without_masked(const ClusterTable& t, const std::vector<uint32_t>& mask,
                            std::vector<uint32_t>& removed) {
  ClusterTable out(t.cluster_size());
  removed.clear();
  for (const FrameRecord& r : t.frames()) {
    out.begin_frame(r.frame_number);
    removed.push_back(0);
    for (uint64_t i = r.first_cluster; i < r.first_cluster + r.n_clusters; ++i) {
      if (mask[std::size_t{t.y()[i]} * kCols + t.x()[i]] != 0) {
        ++removed.back();
        continue;
      }
      out.add_cluster(t.x()[i], t.y()[i], t.cluster_data(i));
    }
  }
  return out;
}

void expect_same_clusters(const ClusterTable& got, const ClusterTable& want) {
  ASSERT_EQ(got.n_frames(), want.n_frames());
  for (std::size_t k = 0; k < got.n_frames(); ++k)
    EXPECT_EQ(got.frames()[k].n_clusters, want.frames()[k].n_clusters) << "frame row " << k;
  EXPECT_TRUE(std::ranges::equal(got.x(), want.x()));
  EXPECT_TRUE(std::ranges::equal(got.y(), want.y()));
  EXPECT_TRUE(std::ranges::equal(got.data(), want.data()));
}

}  // namespace

// A mask file removes exactly the clusters whose centre it masks (the unmasked run's clusters
// minus those), and the counts agree in the stats, the frame rows and /entry.
TEST(MaskRun, MaskFileRemovesExactlyTheClustersCentredOnMaskedPixels) {
  const Result plain = run_case(make_case("mask_plain"));
  const ClusterTable& all = plain.file.clusters;
  ASSERT_GT(all.n_clusters(), 200u);
  EXPECT_TRUE(plain.file.pixel_mask.empty());

  // Mask the centres of every fourth cluster found, and a corner nothing hits.
  std::vector<uint32_t> mask(kRows * kCols, 0);
  for (std::size_t i = 0; i < all.n_clusters(); i += 4)
    mask[std::size_t{all.y()[i]} * kCols + all.x()[i]] = kMaskUser;
  mask[0] = kMaskGap;
  std::vector<uint32_t> removed;
  const ClusterTable want = without_masked(all, mask, removed);
  uint64_t total = 0;
  for (uint32_t n : removed) total += n;
  ASSERT_GT(total, 50u);

  Case c = make_case("mask_file");
  const fs::path file = c.cfg.output.directory / "mask.h5";
  write_mask_file(file.string(), "/detector/pixel_mask", mask, {kRows, kCols});
  c.cfg.mask.file = file.string() + ":/detector/pixel_mask";
  const Result r = run_case(c);
  expect_same_clusters(r.file.clusters, want);
  EXPECT_EQ(r.file.pixel_mask, mask);
  EXPECT_EQ(r.stats.masked_clusters, total);
  EXPECT_EQ(r.stats.clusters, all.n_clusters() - total);
  EXPECT_EQ(r.stats.masked_pixels,
            static_cast<uint64_t>(std::count_if(mask.begin(), mask.end(),
                                                [](uint32_t m) { return m != 0; })));
  ASSERT_TRUE(r.file.masked_clusters.has_value());
  EXPECT_EQ(*r.file.masked_clusters, total);
  EXPECT_EQ(r.file.frame_masked_clusters, removed);  // 0 on the dark rows
}

// From the dark frames: a stuck pixel is dead, a pixel with 8x the noise is noisy, nothing else
// is flagged; clusters centred on them are gone.
TEST(MaskRun, FromDarkFlagsAStuckAndANoisyPixelExactly) {
  Case c = make_case("mask_dark");
  c.sim.image.defects = false;
  const uint32_t stuck = 10 * kCols + 20, noisy = 30 * kCols + 41;
  c.sim.image.stuck_pixels = {stuck};
  c.sim.image.noisy_pixels = {noisy};
  c.cfg.mask.from_dark = true;
  const Result r = run_case(c);
  std::vector<uint32_t> want_mask(kRows * kCols, 0);
  want_mask[stuck] = kMaskDead;
  want_mask[noisy] = kMaskNoisy;
  EXPECT_EQ(r.file.pixel_mask, want_mask);
  EXPECT_EQ(r.stats.masked_pixels, 2u);

  FinderParams p;
  p.shape = {kRows, kCols};
  p.pedestal_window = kDark;
  const ClusterTable all = glint::testing::expected_clusters(r.file, c.sim.image, 1, kDark, p);
  std::vector<uint32_t> removed;
  const ClusterTable want = without_masked(all, want_mask, removed);
  expect_same_clusters(r.file.clusters, want);
  uint64_t total = 0;
  for (uint32_t n : removed) total += n;
  EXPECT_EQ(r.stats.masked_clusters, total);
  EXPECT_EQ(r.file.frame_masked_clusters, removed);
}

// JUNGFRAU: pixels that leave G0 in dark frames are flagged over-responding (NXdetector bit 3),
// OR-ed with a mask file's bits.
TEST(MaskRun, JungfrauPixelsSwitchingGainInTheDarkAreFlagged) {
  Case c = make_case("mask_jungfrau");
  c.cfg.detector.type = "jungfrau";
  c.sim.image.jungfrau = true;
  c.sim.image.defects = false;
  c.sim.image.gain_switch_rate = 2e-3;
  const uint32_t a = 5 * kCols + 7, b = 40 * kCols + 60;
  c.sim.image.dark_g1_pixels = {a, b};
  std::vector<uint32_t> file_mask(kRows * kCols, 0);
  file_mask[a] = kMaskUser;
  file_mask[3] = kMaskGap;
  const fs::path file = c.cfg.output.directory / "jf_mask.h5";
  write_mask_file(file.string(), "/m", file_mask, {kRows, kCols});
  c.cfg.mask.file = file.string() + ":/m";
  c.cfg.mask.from_dark = true;
  const Result r = run_case(c);
  std::vector<uint32_t> want_mask = file_mask;
  want_mask[a] |= kMaskOverResponding;
  want_mask[b] |= kMaskOverResponding;
  EXPECT_EQ(r.file.pixel_mask, want_mask);
  EXPECT_EQ(r.stats.masked_pixels, 3u);

  FinderParams p;
  p.shape = {kRows, kCols};
  p.pedestal_window = kDark;
  p.pixels = PixelMode::jungfrau_g0;
  const ClusterTable all = glint::testing::expected_clusters(r.file, c.sim.image, 1, kDark, p);
  std::vector<uint32_t> removed;
  expect_same_clusters(r.file.clusters, without_masked(all, want_mask, removed));
  EXPECT_EQ(r.file.frame_masked_clusters, removed);
}

// A mask file that does not fit fails the run's start with one line naming the key.
TEST(MaskRun, ABadMaskFileFailsTheStartNamingTheKey) {
  Case c = make_case("mask_bad");
  const fs::path file = c.cfg.output.directory / "small.h5";
  write_mask_file(file.string(), "/m", std::vector<uint32_t>(4, 0), {2, 2});
  c.cfg.mask.file = file.string() + ":/m";
  Acquisition run(c.cfg, 1, std::nullopt);
  ASSERT_TRUE(run.wait(20s));
  EXPECT_EQ(run.stats().error, "mask.file: mask file " + file.string() +
                                   ":/m: shape [2, 2], expected [48, 64] (detector.rows, "
                                   "detector.cols)");
}
