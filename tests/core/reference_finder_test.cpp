#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "glint/cluster_finder.hpp"
#include "glint/cluster_math.hpp"

namespace {

glint::FinderParams params(uint32_t rows, uint32_t cols, int size = 3) {
  glint::FinderParams p;
  p.shape = {rows, cols};
  p.cluster_size = size;
  p.n_sigma = 5.0;
  return p;
}

// 1000 dark frames alternating 100 and 102: mean 101, rms exactly 1 everywhere.
void push_flat_dark(glint::ClusterFinder& f) {
  const auto np = f.params().shape.pixels();
  std::vector<uint16_t> dark(np * 1000);
  for (std::size_t k = 0; k < 1000; ++k)
    std::fill_n(dark.begin() + k * np, np, static_cast<uint16_t>(k % 2 ? 102 : 100));
  f.push_dark(dark);
}

}  // namespace

TEST(ReferenceFinder, RejectsUnsupportedClusterSize) {
  EXPECT_THROW(glint::make_reference_finder(params(8, 8, 4)), std::invalid_argument);
}

TEST(ReferenceFinder, FlatDarkGivesMeanAndNoise) {
  auto f = glint::make_reference_finder(params(4, 5));
  push_flat_dark(*f);
  const auto ped = f->pedestal();
  for (std::size_t i = 0; i < ped.shape.pixels(); ++i) {
    EXPECT_EQ(ped.count[i], 1000u);
    EXPECT_EQ(ped.mean(i), 101.0);
    EXPECT_EQ(ped.noise(i), 1.0);
  }
}

TEST(ReferenceFinder, SinglePhotonGivesOneClusterWithExactValues) {
  auto f = glint::make_reference_finder(params(10, 12));
  push_flat_dark(*f);
  std::vector<uint16_t> frame(120, 101);
  frame[5 * 12 + 7] = 200;  // photon at x=7, y=5
  frame[5 * 12 + 8] = 110;  // charge shared to the right; above n*rms but not the window max
  glint::ClusterTable out(3);
  const std::vector<uint64_t> numbers{1000};
  f->find(frame, numbers, out);
  ASSERT_EQ(out.n_frames(), 1u);
  EXPECT_EQ(out.frames()[0].frame_number, 1000u);
  ASSERT_EQ(out.n_clusters(), 1u);  // (8,5) is not the window max: no second cluster
  EXPECT_EQ(out.x()[0], 7);
  EXPECT_EQ(out.y()[0], 5);
  const std::vector<int32_t> expected{0, 0, 0, 0, 99, 9, 0, 0, 0};
  EXPECT_EQ(std::vector<int32_t>(out.cluster_data(0).begin(), out.cluster_data(0).end()),
            expected);
}

TEST(ReferenceFinder, BorderClusterZeroFillsOutsideTheFrame) {
  auto f = glint::make_reference_finder(params(6, 6));
  push_flat_dark(*f);
  std::vector<uint16_t> frame(36, 101);
  frame[0] = 150;
  glint::ClusterTable out(3);
  const std::vector<uint64_t> numbers{7};
  f->find(frame, numbers, out);
  ASSERT_EQ(out.n_clusters(), 1u);
  EXPECT_EQ(out.x()[0], 0);
  EXPECT_EQ(out.y()[0], 0);
  const std::vector<int32_t> expected{0, 0, 0, 0, 49, 0, 0, 0, 0};
  EXPECT_EQ(std::vector<int32_t>(out.cluster_data(0).begin(), out.cluster_data(0).end()),
            expected);
}

// ---- The semantics case by case, for the reference and the fast CPU backend alike ----

namespace {

using Factory = std::function<std::unique_ptr<glint::ClusterFinder>(const glint::FinderParams&)>;

std::vector<std::pair<std::string, Factory>> all_finders() {
  return {
      {"reference", [](const glint::FinderParams& p) { return glint::make_reference_finder(p); }},
      {"cpu 1 thread", [](const glint::FinderParams& p) { return glint::make_cpu_finder(p, 1); }},
      {"cpu 3 threads", [](const glint::FinderParams& p) { return glint::make_cpu_finder(p, 3); }},
  };
}

/// Every pixel: the given mean (sum = 1000 * mean, count 1000) and an rms of about 1.
glint::PedestalState uniform_pedestal(glint::FrameShape shape, double mean) {
  glint::PedestalState s(shape, 1000);
  for (std::size_t i = 0; i < shape.pixels(); ++i) {
    s.sum[i] = 1000.0 * mean;
    s.count[i] = 1000;
    const double m = s.sum[i] / 1000.0;
    s.sum2[i] = (1.0 + m * m) * 1000.0;
  }
  return s;
}

std::vector<int32_t> values(const glint::ClusterTable& t, std::size_t i) {
  return {t.cluster_data(i).begin(), t.cluster_data(i).end()};
}

struct OneFrame {
  glint::ClusterTable clusters{3};
  glint::PedestalState before, after;
};

OneFrame run_one(const Factory& make, const glint::PedestalState& ped,
                 const std::vector<uint16_t>& frame) {
  glint::FinderParams p;
  p.shape = ped.shape;
  auto f = make(p);
  f->load_pedestal(ped);
  OneFrame r;
  r.before = f->pedestal();
  const std::vector<uint64_t> n{42};
  f->find(frame, n, r.clusters);
  r.after = f->pedestal();
  return r;
}

/// Clusters a finder would store if it applied this frame's pedestal updates only after the frame
/// (the scheme docs/cluster-finding.md rules out): every pixel sees frame-start means.
std::size_t deferred_update_cluster_count(const glint::PedestalState& ped,
                                          const std::vector<uint16_t>& frame, double n_sigma) {
  namespace cm = glint::cluster_math;
  const auto t = cm::make_thresholds(n_sigma, 3);
  const int rows = static_cast<int>(ped.shape.rows), cols = static_cast<int>(ped.shape.cols);
  std::size_t stored = 0;
  for (int y = 0; y < rows; ++y)
    for (int x = 0; x < cols; ++x) {
      const std::size_t i = static_cast<std::size_t>(y) * cols + x;
      const double rms = ped.noise(i), v = frame[i] - ped.mean(i);
      if (cm::is_negative_outlier(v, rms, t)) continue;
      double total = 0.0, max = 0.0;
      for (int yy = y - 1; yy <= y + 1; ++yy)
        for (int xx = x - 1; xx <= x + 1; ++xx) {
          if (yy < 0 || yy >= rows || xx < 0 || xx >= cols) continue;
          const std::size_t j = static_cast<std::size_t>(yy) * cols + xx;
          const double d = frame[j] - ped.mean(j);
          total += d;
          if (max < d) max = d;
        }
      if (cm::classify(v, rms, total, max, t) == cm::PixelAction::candidate && v == max) ++stored;
    }
  return stored;
}

}  // namespace

TEST(FinderSemantics, NegativeOutlierAndNotMaxPixelsKeepTheirPedestal) {
  const glint::FrameShape shape{8, 9};
  for (const auto& [name, make] : all_finders()) {
    std::vector<uint16_t> frame(shape.pixels(), 101);
    frame[1 * 9 + 1] = 90;   // d = -11 < -5 rms: negative outlier
    frame[5 * 9 + 5] = 160;  // photon
    frame[5 * 9 + 6] = 120;  // above 5 rms, but not the window max
    frame[7 * 9 + 0] = 103;  // ordinary pixel: updates
    const auto r = run_one(make, uniform_pedestal(shape, 101.0), frame);
    ASSERT_EQ(r.clusters.n_clusters(), 1u) << name;
    EXPECT_EQ(r.clusters.x()[0], 5) << name;
    EXPECT_EQ(r.clusters.y()[0], 5) << name;
    EXPECT_EQ(r.after.sum[1 * 9 + 1], r.before.sum[1 * 9 + 1]) << name;
    EXPECT_EQ(r.after.sum[5 * 9 + 6], r.before.sum[5 * 9 + 6]) << name;
    EXPECT_EQ(r.after.sum[5 * 9 + 5], r.before.sum[5 * 9 + 5]) << name;  // candidate: no update
    EXPECT_EQ(r.after.sum[7 * 9 + 0], 101000.0 + (103.0 - 101.0)) << name;
    EXPECT_EQ(r.after.sum2[7 * 9 + 0],
              r.before.sum2[7 * 9 + 0] + (103.0 * 103.0 - r.before.sum2[7 * 9 + 0] / 1000.0))
        << name;
  }
}

TEST(FinderSemantics, SpreadChargeIsACandidateByTotalAndTiesGiveOneClusterEach) {
  const glint::FrameShape shape{7, 8};
  for (const auto& [name, make] : all_finders()) {
    // A 2x2 block of d = 4: no pixel exceeds 5 rms, but every window total is 16 > 15 rms and
    // every block pixel equals its window's max: four clusters (exact ties).
    std::vector<uint16_t> frame(shape.pixels(), 101);
    for (int y : {3, 4})
      for (int x : {3, 4}) frame[y * 8 + x] = 105;
    const auto r = run_one(make, uniform_pedestal(shape, 101.0), frame);
    ASSERT_EQ(r.clusters.n_clusters(), 4u) << name;
    EXPECT_EQ(r.clusters.x()[0], 3);
    EXPECT_EQ(r.clusters.y()[0], 3);
    EXPECT_EQ(r.clusters.x()[3], 4);
    EXPECT_EQ(r.clusters.y()[3], 4);
    EXPECT_EQ(values(r.clusters, 0), (std::vector<int32_t>{0, 0, 0, 0, 4, 4, 0, 4, 4})) << name;
    // Raising one block pixel to d = 5 (still not above 5 rms) leaves a single stored cluster; the
    // other three are candidates that are not the max: not stored, not updated.
    frame[4 * 8 + 3] = 106;
    const auto r2 = run_one(make, uniform_pedestal(shape, 101.0), frame);
    ASSERT_EQ(r2.clusters.n_clusters(), 1u) << name;
    EXPECT_EQ(r2.clusters.x()[0], 3);
    EXPECT_EQ(r2.clusters.y()[0], 4);
    EXPECT_EQ(r2.after.sum[3 * 8 + 3], r2.before.sum[3 * 8 + 3]) << name;
  }
}

TEST(FinderSemantics, ClusterValuesRoundHalvesAwayFromZero) {
  const glint::FrameShape shape{5, 5};
  for (const auto& [name, make] : all_finders()) {
    std::vector<uint16_t> frame(shape.pixels(), 100);  // d = -0.5 around the photon
    frame[2 * 5 + 2] = 149;                            // d = 48.5
    frame[2 * 5 + 3] = 101;                            // d = 0.5
    const auto r = run_one(make, uniform_pedestal(shape, 100.5), frame);
    ASSERT_EQ(r.clusters.n_clusters(), 1u) << name;
    // lround: 48.5 -> 49, 0.5 -> 1, -0.5 -> -1 (rint would give 48, 0, -0)
    EXPECT_EQ(values(r.clusters, 0), (std::vector<int32_t>{-1, -1, -1, -1, 49, 1, -1, -1, -1}))
        << name;
  }
}

TEST(FinderSemantics, InFrameDependencyUpdatedLeftNeighbourMakesTheCluster) {
  // Pixel A = (2,2) updates in this frame (d = 4, window total 12 < 15 rms), so its mean moves
  // from 101 to 101.004 before its right neighbour B = (2,3) is visited. B (mean 101.002,
  // d = 3.998) is a candidate by total (about 18 > 15 rms) and is stored only if it equals its
  // window's max: with A's updated value (3.996) it does, with A's frame-start value (4) it does
  // not. Applying updates only at the end of the frame would lose this cluster.
  const glint::FrameShape shape{6, 7};
  auto ped = uniform_pedestal(shape, 101.0);
  const std::size_t a = 2 * 7 + 2, b = 2 * 7 + 3;
  ped.sum[b] = 101002.0;
  ped.sum2[b] = (1.0 + (101002.0 / 1000.0) * (101002.0 / 1000.0)) * 1000.0;
  std::vector<uint16_t> frame(shape.pixels(), 101);
  frame[a] = 105;          // d = 4
  frame[b] = 105;          // d = 3.998
  frame[2 * 7 + 4] = 104;  // d = 3
  frame[3 * 7 + 2] = 103;  // d = 2
  frame[3 * 7 + 3] = 103;  // d = 2
  frame[3 * 7 + 4] = 104;  // d = 3

  for (const auto& [name, make] : all_finders()) {
    const auto r = run_one(make, ped, frame);
    ASSERT_EQ(r.clusters.n_clusters(), 1u) << name;
    EXPECT_EQ(r.clusters.x()[0], 3) << name;
    EXPECT_EQ(r.clusters.y()[0], 2) << name;
    EXPECT_EQ(values(r.clusters, 0), (std::vector<int32_t>{0, 0, 0, 4, 4, 3, 2, 2, 3})) << name;
    EXPECT_EQ(r.after.sum[a], 101000.0 + (105.0 - 101.0)) << name;  // A did update
  }

  // The same frame with updates deferred to the end of the frame (frame-start means throughout):
  // B's window max is A's 4 > 3.998, so B is not stored and no cluster is found.
  EXPECT_EQ(deferred_update_cluster_count(ped, frame, 5.0), 0u);
}

TEST(FinderArguments, EveryCpuBackendRejectsPartialFramesAndAWrongTable) {
  const auto p = params(4, 5);
  std::vector<std::unique_ptr<glint::ClusterFinder>> finders;
  finders.push_back(glint::make_reference_finder(p));
  finders.push_back(glint::make_cpu_finder(p, 2));
  for (auto& f : finders) {
    const std::vector<uint16_t> partial(19, 100);
    EXPECT_THROW(f->push_dark(partial), std::invalid_argument) << f->description();
    const std::vector<uint16_t> two(40, 100);
    const std::vector<uint64_t> one{1000};
    glint::ClusterTable out3(3), out5(5);
    EXPECT_THROW(f->find(two, one, out3), std::invalid_argument) << f->description();
    const std::vector<uint64_t> numbers{1000, 1001};
    EXPECT_THROW(f->find(two, numbers, out5), std::invalid_argument) << f->description();
    EXPECT_EQ(out3.n_frames(), 0u);
    EXPECT_EQ(out5.n_frames(), 0u);
  }
  EXPECT_EQ(glint::check_dark_frames(p, std::vector<uint16_t>(60, 0)), 3u);
}
