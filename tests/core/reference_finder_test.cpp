#include <gtest/gtest.h>

#include <vector>

#include "glint/cluster_finder.hpp"

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
