#include "glint/synthetic.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "test_data.hpp"

namespace {

using glint::synth::Config;
using glint::synth::Generator;

Config small() {
  Config c;
  c.shape = {64, 48};
  c.seed = 1;
  c.photons = 40;
  return c;
}

std::vector<uint16_t> frame(const Generator& g, uint64_t index) {
  std::vector<uint16_t> f(g.config().shape.pixels());
  g.fill(index, f);
  return f;
}

}  // namespace

TEST(Synthetic, SameSeedSameFramesInAnyOrder) {
  const Generator a(small()), b(small());
  const auto late = frame(b, 1049);  // b fills out of order
  EXPECT_EQ(frame(a, 1000), frame(b, 1000));
  EXPECT_EQ(frame(a, 1049), late);
  EXPECT_EQ(frame(a, 3), frame(b, 3));
}

TEST(Synthetic, OtherSeedOtherFrames) {
  Config c = small();
  c.seed = 2;
  EXPECT_NE(frame(Generator(small()), 1000), frame(Generator(c), 1000));
}

TEST(Synthetic, FillManyMatchesFillAtAnyThreadCount) {
  const Generator g(small());
  const std::size_t np = g.config().shape.pixels();
  std::vector<uint16_t> one(5 * np), four(5 * np);
  g.fill_many(998, 5, one, 1);
  g.fill_many(998, 5, four, 4);
  EXPECT_EQ(one, four);
  for (int k = 0; k < 5; ++k)
    EXPECT_TRUE(std::equal(one.begin() + k * np, one.begin() + (k + 1) * np,
                           frame(g, 998 + k).begin()));
}

// The generator uses integer arithmetic and exactly rounded double + and * only; these digests
// pin its output so that a change of platform or of the code shows up here first (the verified
// reference digests depend on them).
TEST(Synthetic, PinnedDigests) {
  const Generator g(small());
  EXPECT_EQ(glint::testing::sha256(frame(g, 0)),
            "b24f3b949b00099be69d0a6a724c6b341dd38f49c96a51e6b63d2a27c8d46224");
  EXPECT_EQ(glint::testing::sha256(frame(g, 1000)),
            "03495e8f4b1fe62ee762863b5e7e89aa4e94ea5f559efc7a3cd5570b1acb183a");
  EXPECT_EQ(glint::testing::sha256(frame(g, 1049)),
            "6753fc0159da5cec7de631dac42c75199f7af6a52ee1f4763314de087ec183bb");
}

TEST(Synthetic, DarkFramesFollowPedestalAndNoise) {
  Config c = small();
  c.shape = {40, 40};
  const Generator g(c);
  // Mean over 200 dark frames within a few noise rms/sqrt(200) of the generator's pedestal.
  std::vector<double> mean(c.shape.pixels(), 0.0);
  for (uint64_t k = 0; k < 200; ++k) {
    const auto f = frame(g, k);
    for (std::size_t i = 0; i < f.size(); ++i) mean[i] += f[i] / 200.0;
  }
  std::size_t far = 0;
  for (std::size_t i = 0; i < mean.size(); ++i)
    if (std::abs(mean[i] - g.pedestal(100, i)) > 8.0 * 16.0 / std::sqrt(200.0) + 0.5) ++far;
  EXPECT_LE(far, 3u);  // noisy pixels (8x rms) may stray further
}

TEST(Synthetic, DataFramesCarryPhotonsAndCrowdedFramesMore) {
  Config c = small();
  const Generator g(c);
  auto excess = [&](uint64_t index) {
    const auto f = frame(g, index);
    std::size_t n = 0;
    for (std::size_t i = 0; i < f.size(); ++i)
      if (f[i] > g.pedestal(index, i) + 100.0) ++n;
    return n;
  };
  EXPECT_EQ(excess(10), 0u);                   // dark: noise stays below 100 ADU (6 sigma max)
  const std::size_t normal = excess(1000);
  const std::size_t crowded = excess(1049);    // the 50th data frame
  EXPECT_GT(normal, 20u);
  EXPECT_GT(crowded, 5 * normal);
}

TEST(Synthetic, TwinPixelsGiveExactTiesAndBordersGetPhotons) {
  Config c = small();
  c.photons = 400;
  const Generator g(c);
  const auto dark = frame(g, 5);
  // Twin pairs share every noise sample: count equal horizontal neighbours (chance equality of
  // two noisy pixels is rare, ~1/50).
  std::size_t equal = 0;
  for (std::size_t i = 0; i + 1 < dark.size(); ++i)
    if (dark[i] == dark[i + 1]) ++equal;
  EXPECT_GT(equal, dark.size() / 200);
  std::size_t border_hits = 0;
  for (uint64_t k = 1000; k < 1010; ++k) {
    const auto f = frame(g, k);
    for (uint32_t x = 0; x < c.shape.cols; ++x) {
      if (f[x] > g.pedestal(k, x) + 100.0) ++border_hits;
      const std::size_t last = (c.shape.rows - 1) * c.shape.cols + x;
      if (f[last] > g.pedestal(k, last) + 100.0) ++border_hits;
    }
  }
  EXPECT_GT(border_hits, 10u);
}

TEST(Synthetic, RejectsBadConfig) {
  Config c = small();
  c.shape = {0, 10};
  EXPECT_THROW(Generator{c}, std::invalid_argument);
  c = small();
  c.noise_min = 5;
  c.noise_max = 1;
  EXPECT_THROW(Generator{c}, std::invalid_argument);
  const Generator g(small());
  std::vector<uint16_t> wrong(10);
  EXPECT_THROW(g.fill(0, wrong), std::invalid_argument);
}

// photon_grid_x/y put every grid photon at one place in its pixel (glint synth --photon-at);
// the energies are those of the uniform grid (the same draws are made).
TEST(Synthetic, GridPhotonsAtAFixedPlaceInTheirPixel) {
  glint::synth::Config c;
  c.shape = {20, 24};
  c.dark_frames = 2;
  c.photon_grid = 4;
  const glint::synth::Generator uniform(c);
  c.photon_grid_x = 0.15;
  c.photon_grid_y = 0.85;
  const glint::synth::Generator fixed(c);
  const auto u = uniform.photons(3), f = fixed.photons(3);
  ASSERT_EQ(f.size(), 5u * 6u);  // one per 4 x 4 cell
  ASSERT_EQ(u.size(), f.size());
  for (std::size_t k = 0; k < f.size(); ++k) {
    const double x0 = static_cast<double>(k % 6 * 4 + 2), y0 = static_cast<double>(k / 6 * 4 + 2);
    EXPECT_EQ(f[k].x, x0 + 0.15) << k;
    EXPECT_EQ(f[k].y, y0 + 0.85) << k;
    EXPECT_EQ(f[k].energy, u[k].energy) << k;
    EXPECT_NE(u[k].x, f[k].x) << k;
  }
  c.photon_grid_x = 1.0;
  EXPECT_THROW(glint::synth::validate(c), std::invalid_argument);
}
