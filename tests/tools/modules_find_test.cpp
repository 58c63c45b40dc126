// `glint find --modules X,Y`: each module of the frames found with its own pedestal and finder,
// so each module's clusters are those of `glint find` on that module's frames alone.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

#include "glint/clust_file.hpp"
#include "glint/modular_finder.hpp"
#include "glint/pipeline/run_file.hpp"
#include "glint/synthetic.hpp"
#include "sim_frames.hpp"
#include "test_data.hpp"
#include "tool_test.hpp"

using glint::testing::run_glint;
using glint::testing::ToolResult;

namespace {

class GlintFindModules : public glint::testing::ScratchDirTest {
 protected:
  GlintFindModules() : ScratchDirTest("glint_find_modules_test") {}

  /// `n` synthetic frames of `shape` (`dark` of them dark, then ~`photons` per frame), written
  /// to `name` in the scratch directory; returned.
  std::vector<uint16_t> synth_file(const std::string& name, glint::FrameShape shape,
                                   uint64_t seed, uint64_t dark, std::size_t n,
                                   double photons = 0) {
    glint::synth::Config c;
    c.shape = shape;
    c.seed = seed;
    c.dark_frames = dark;
    if (photons > 0) c.photons = photons;
    std::vector<uint16_t> frames(n * shape.pixels());
    glint::synth::Generator(c).fill_many(0, n, frames, 2);
    glint::testing::write_frames(path(name), frames, n, shape.rows, shape.cols);
    return frames;
  }

  /// Module k (`m` of `image`) of the `n` frames, found alone by `glint find` (1000 dark).
  glint::ClusterTable found_alone(std::size_t k, const glint::ModuleRegion& m,
                                  glint::FrameShape image, std::span<const uint16_t> frames,
                                  std::size_t n) {
    std::vector<uint16_t> mine(n * m.shape.pixels());
    glint::extract_module(image, m, frames, n, mine);
    const std::string file = path(fmt::format("module{}.h5", k));
    glint::testing::write_frames(file, mine, n, m.shape.rows, m.shape.cols);
    const std::string clust = path(fmt::format("module{}.clust", k));
    const ToolResult r =
        run_glint(fmt::format("find -q -i {} --dark 1000 --backend cpu --clust {}", file, clust));
    EXPECT_EQ(r.status, 0) << r.output;
    return glint::read_clust(clust, 3);
  }
};

}  // namespace

TEST_F(GlintFindModules, EachModuleAsFoundAlone) {
  const glint::FrameShape shape{40, 60};
  const std::size_t n = 1060;
  const std::vector<uint16_t> frames = synth_file("all.h5", shape, 77, 1000, n, 25);
  const std::string all = path("all.h5");

  ToolResult r = run_glint(fmt::format("find -q -i {} --dark 1000 --backend cpu --modules 2,2 "
                                       "--clust {} -o {}",
                                       all, path("all.clust"), path("run.h5")));
  ASSERT_EQ(r.status, 0) << r.output;
  const glint::ClusterTable found = glint::read_clust(path("all.clust"), 3);
  ASSERT_EQ(found.n_frames(), 60u);
  std::size_t total = 0;
  const auto regions = glint::module_grid(shape, 2, 2);
  for (std::size_t k = 0; k < regions.size(); ++k) {
    const auto& m = regions[k];
    const glint::ClusterTable alone = found_alone(k, m, shape, frames, n);
    ASSERT_GT(alone.n_clusters(), 100u);
    // The module's clusters in the whole run, moved to the module's coordinates.
    const glint::ClusterTable got = glint::testing::clusters_in(found, m);
    EXPECT_TRUE(got == alone) << "module " << k << ": " << got.n_clusters() << " clusters, "
                              << alone.n_clusters() << " alone";
    total += alone.n_clusters();
  }
  EXPECT_EQ(found.n_clusters(), total);

  // The run file records the modules: each cluster's module and its position in the module;
  // in image coordinates they are the .clust file's clusters.
  const auto run = glint::pipeline::read_run_file(path("run.h5"));
  ASSERT_EQ(run.cluster_module.size(), found.n_clusters());
  for (std::size_t i = 0; i < found.n_clusters(); ++i) {
    const uint32_t k = (found.y()[i] / 20) * 2 + found.x()[i] / 30;
    ASSERT_EQ(run.cluster_module[i], k) << i;
    ASSERT_EQ(run.clusters.x()[i], found.x()[i] % 30) << i;
    ASSERT_EQ(run.clusters.y()[i], found.y()[i] % 20) << i;
  }
  const glint::ClusterTable image = glint::pipeline::image_clusters(run);
  EXPECT_TRUE(std::ranges::equal(image.x(), found.x()));
  EXPECT_TRUE(std::ranges::equal(image.y(), found.y()));
  EXPECT_TRUE(std::ranges::equal(image.data(), found.data()));

  r = run_glint(fmt::format("find -q -i {} --dark 1000 --modules 7,1 --clust {}", all,
                            path("bad.clust")));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("--modules"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("7 x 1 modules"), std::string::npos) << r.output;
}

TEST_F(GlintFindModules, FlippedModulesFoundNativeShownFlipped) {
  // Modules 1 (flip_rows) and 2 (rotate_180) of a 2 x 2 grid mounted flipped: each module's
  // clusters are still `glint find` on its frames alone; the image shows them flipped.
  const glint::FrameShape shape{40, 60};
  const std::size_t n = 1040;
  const std::vector<uint16_t> frames = synth_file("all.h5", shape, 78, 1000, n, 25);
  const std::string all = path("all.h5");

  ToolResult r = run_glint(fmt::format(
      "find -q -i {} --dark 1000 --backend cpu --modules 2,2 "
      "--module-orientation normal,flip_rows,rotate_180,normal --clust {} -o {}",
      all, path("all.clust"), path("run.h5")));
  ASSERT_EQ(r.status, 0) << r.output;
  const glint::ClusterTable found = glint::read_clust(path("all.clust"), 3);
  using O = glint::ModuleOrientation;
  const auto regions = glint::module_grid(
      shape, 2, 2, std::vector<O>{O::normal, O::flip_rows, O::rotate_180, O::normal});
  const auto run = glint::pipeline::read_run_file(path("run.h5"));
  ASSERT_EQ(run.modules.size(), 4u);
  for (std::size_t k = 0; k < regions.size(); ++k) {
    const auto& m = regions[k];
    EXPECT_EQ(run.modules[k].orientation, m.orientation);
    const glint::ClusterTable alone = found_alone(k, m, shape, frames, n);
    ASSERT_GT(alone.n_clusters(), 10u);
    // Mapped back to the module's native coordinates and windows: those found alone.
    const glint::ClusterTable got = glint::testing::clusters_in(found, m);
    EXPECT_TRUE(got == alone) << "module " << k << ": " << got.n_clusters() << " clusters, "
                              << alone.n_clusters() << " alone";
  }
  // Module 1 (rows 0-19, columns 30-59, upside down): in the run file native, in the image
  // flipped; image_clusters() gives the .clust file's clusters back.
  std::size_t seen = 0;
  for (std::size_t i = 0; i < found.n_clusters(); ++i) {
    if (run.cluster_module[i] != 1) continue;
    ASSERT_EQ(found.x()[i], 30 + run.clusters.x()[i]) << i;
    ASSERT_EQ(found.y()[i], 19 - run.clusters.y()[i]) << i;
    ++seen;
  }
  EXPECT_GT(seen, 0u);
  const glint::ClusterTable image = glint::pipeline::image_clusters(run);
  EXPECT_TRUE(std::ranges::equal(image.x(), found.x()));
  EXPECT_TRUE(std::ranges::equal(image.y(), found.y()));
  EXPECT_TRUE(std::ranges::equal(image.data(), found.data()));

  r = run_glint(fmt::format("find -q -i {} --dark 1000 --modules 2,2 --module-orientation "
                            "flip_rows,normal --clust {}",
                            all, path("bad.clust")));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("--module-orientation"), std::string::npos) << r.output;
  r = run_glint(fmt::format("find -q -i {} --dark 1000 --modules 2,2 --module-orientation "
                            "sideways --clust {}",
                            all, path("bad.clust")));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("'sideways' is not an orientation"), std::string::npos) << r.output;
}

TEST_F(GlintFindModules, PedestalFileOfFlippedModulesIsTheImage) {
  // glint pedestal --module-orientation writes the image's pedestal (each module as the image
  // shows it), which glint find --pedestal loads as glintd does.
  const glint::FrameShape shape{20, 30};
  const std::size_t n = 200;
  const std::vector<uint16_t> frames = synth_file("dark.h5", shape, 79, 200, n);
  const std::string all = path("dark.h5");
  ToolResult r = run_glint(fmt::format("pedestal -q -i {} --dark 200 --window 200 -o {}", all,
                                       path("raw.h5")));
  ASSERT_EQ(r.status, 0) << r.output;
  r = run_glint(fmt::format("pedestal -q -i {} --dark 200 --window 200 --modules 2,1 "
                            "--module-orientation flip_cols,rotate_180 -o {}",
                            all, path("image.h5")));
  ASSERT_EQ(r.status, 0) << r.output;
  const auto raw = glint::pipeline::read_pedestal_state(path("raw.h5"));
  const auto image = glint::pipeline::read_pedestal_state(path("image.h5"));
  ASSERT_EQ(image.shape, shape);
  for (uint32_t y = 0; y < 20; ++y)
    for (uint32_t x = 0; x < 15; ++x) {
      // Module 0 (columns 0-14) mirrored left-right; module 1 (15-29) turned by 180 degrees.
      ASSERT_EQ(image.sum[y * 30 + (14 - x)], raw.sum[y * 30 + x]) << y << " " << x;
      ASSERT_EQ(image.sum[(19 - y) * 30 + (29 - x)], raw.sum[y * 30 + 15 + x]) << y << " " << x;
      ASSERT_EQ(image.count[(19 - y) * 30 + (29 - x)], raw.count[y * 30 + 15 + x]);
    }
  EXPECT_NE(image.sum, raw.sum);
  r = run_glint(fmt::format("pedestal -q -i {} --dark 200 --window 200 --modules 2,1 "
                            "--module-orientation upside -o {}",
                            all, path("bad.h5")));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("'upside' is not an orientation"), std::string::npos) << r.output;
}
