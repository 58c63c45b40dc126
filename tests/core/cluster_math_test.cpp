#include <gtest/gtest.h>

#include <cmath>
#include <span>
#include <utility>
#include <vector>

#include "glint/cluster_math.hpp"
#include "glint/cluster_table.hpp"

namespace cm = glint::cluster_math;

TEST(ClusterMath, DarkPushAccumulatesUntilTheWindowIsFull) {
  double sum = 0, sum2 = 0;
  uint32_t count = 0;
  EXPECT_EQ(cm::dark_push(sum, sum2, count, 10.0, 4), 10.0);
  EXPECT_EQ(cm::dark_push(sum, sum2, count, 12.0, 4), 11.0);
  EXPECT_EQ(sum, 22.0);
  EXPECT_EQ(sum2, 244.0);
  EXPECT_EQ(count, 2u);
  EXPECT_EQ(cm::noise_of(sum2, count, 11.0), 1.0);
  cm::dark_push(sum, sum2, count, 14.0, 4);
  cm::dark_push(sum, sum2, count, 16.0, 4);
  EXPECT_EQ(count, 4u);
  EXPECT_EQ(sum, 52.0);
  // Window full: sum += v - sum/N, count stays.
  EXPECT_EQ(cm::dark_push(sum, sum2, count, 20.0, 4), (52.0 + (20.0 - 13.0)) / 4.0);
  EXPECT_EQ(count, 4u);
  EXPECT_EQ(sum2, 100.0 + 144.0 + 196.0 + 256.0 + (400.0 - 696.0 / 4.0));
}

TEST(ClusterMath, FastPushKeepsCountAndReturnsSumOverWindow) {
  double sum = 101000.0, sum2 = 101.0 * 101.0 * 1000.0 + 1000.0;
  EXPECT_EQ(cm::fast_push(sum, sum2, 111.0, 1000), (101000.0 + (111.0 - 101.0)) / 1000.0);
}

TEST(ClusterMath, NegativeVarianceGivesNaNNoiseAndEmptyPixelZero) {
  EXPECT_EQ(cm::noise_of(0.0, 0, 0.0), 0.0);
  EXPECT_TRUE(std::isnan(cm::noise_of(99.0, 1, 10.0)));
}

TEST(ClusterMath, ClusterValueRoundsHalvesAwayFromZero) {
  EXPECT_EQ(cm::cluster_value(2.5), 3);
  EXPECT_EQ(cm::cluster_value(-2.5), -3);
  EXPECT_EQ(cm::cluster_value(0.499), 0);
  EXPECT_EQ(cm::cluster_value(-0.5), -1);
}

TEST(ClusterMath, ClassifyFollowsTheSpecificationBranches) {
  const auto t = cm::make_thresholds(5.0, 3);
  EXPECT_EQ(t.c3_n, 15.0);
  EXPECT_TRUE(cm::is_negative_outlier(-5.1, 1.0, t));
  EXPECT_FALSE(cm::is_negative_outlier(-5.0, 1.0, t));
  // A window pixel above n*rms and larger than this one.
  EXPECT_EQ(cm::classify(4.0, 1.0, 10.0, 6.0, t), cm::PixelAction::skip_not_max);
  EXPECT_EQ(cm::classify(6.0, 1.0, 10.0, 6.0, t), cm::PixelAction::candidate);
  // Charge shared below n*rms per pixel but above c3*n*rms in total.
  EXPECT_EQ(cm::classify(4.0, 1.0, 15.5, 4.5, t), cm::PixelAction::candidate);
  EXPECT_EQ(cm::classify(4.0, 1.0, 15.0, 4.5, t), cm::PixelAction::update);
  // NaN noise: every comparison is false, so the pixel takes the update branch.
  EXPECT_EQ(cm::classify(100.0, std::nan(""), 500.0, 100.0, t), cm::PixelAction::update);
}

TEST(SplitByClusters, RangesOfAboutEqualClustersCoverEveryFrameOnce) {
  std::vector<glint::FrameRecord> frames;
  for (uint32_t k = 0; k < 10; ++k) frames.push_back({k, 0, k == 3 ? 600u : 100u});  // 1500
  const auto parts = glint::split_by_clusters(frames, 3, 400);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[0], (std::pair<std::size_t, std::size_t>{0, 4}));  // 900 >= 1500 / 3
  EXPECT_EQ(parts[1], (std::pair<std::size_t, std::size_t>{4, 5}));  // 1000 >= 2 x 1500 / 3
  EXPECT_EQ(parts[2], (std::pair<std::size_t, std::size_t>{5, 10}));
  // Few clusters: one part; more parts asked than frames: one per frame at most.
  EXPECT_EQ(glint::split_by_clusters(frames, 8, 2000).size(), 1u);
  EXPECT_EQ(glint::split_by_clusters(std::span(frames).first(2), 8, 1).size(), 2u);
  EXPECT_TRUE(glint::split_by_clusters({}, 4, 1).empty());
}
