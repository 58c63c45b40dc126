// The multi-threaded CPU backend gives the reference's bits at any thread count.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "glint/cluster_finder.hpp"
#include "test_data.hpp"

namespace {

using glint::testing::run_finder;
using glint::testing::SyntheticRun;

glint::FinderParams params(glint::FrameShape shape, int size, double n_sigma) {
  return glint::testing::finder_params(shape, size, n_sigma);
}

void expect_same_as_reference(const SyntheticRun& run, const glint::FinderParams& p,
                              std::initializer_list<unsigned> thread_counts, std::size_t chunk) {
  auto ref = glint::make_reference_finder(p);
  const auto expected = run_finder(*ref, run);
  const auto expected_ped = ref->pedestal();
  ASSERT_GT(expected.n_clusters(), 0u);
  for (unsigned t : thread_counts) {
    auto cpu = glint::make_cpu_finder(p, t);
    const auto got = run_finder(*cpu, run, chunk);
    EXPECT_EQ(got, expected) << "threads=" << t << " S=" << p.cluster_size;
    EXPECT_EQ(cpu->pedestal(), expected_ped) << "threads=" << t << " S=" << p.cluster_size;
  }
}

}  // namespace

class CpuFinderMatchesReference : public ::testing::TestWithParam<int> {};

TEST_P(CpuFinderMatchesReference, OddFrameSizeAndThreadCounts) {
  const int S = GetParam();
  glint::synth::Config c;
  c.shape = {47, 33};  // odd sizes; 16 threads give bands of 2-3 rows, narrower than a 9x9 window
  c.seed = 100 + S;
  c.photons = 25;
  const SyntheticRun run(c, 60);
  for (double n : {5.0, 3.0})
    expect_same_as_reference(run, params(c.shape, S, n), {1, 2, 3, 7, 16}, 9);
}

INSTANTIATE_TEST_SUITE_P(ClusterSizes, CpuFinderMatchesReference, ::testing::Values(3, 5, 7, 9),
                         [](const auto& info) { return fmt::format("S{}", info.param); });

TEST(CpuFinder, CrowdedFramesAndMoreThreadsThanRows) {
  glint::synth::Config c;
  c.shape = {5, 61};
  c.seed = 7;
  c.photons = 30;
  c.crowded_every = 3;
  const SyntheticRun run(c, 30);
  expect_same_as_reference(run, params(c.shape, 3, 3.0), {1, 4, 16}, 4);
  expect_same_as_reference(run, params(c.shape, 5, 5.0), {2, 16}, 30);
}

TEST(CpuFinder, SingleRowAndSingleColumn) {
  for (glint::FrameShape shape : {glint::FrameShape{1, 50}, glint::FrameShape{50, 1}}) {
    glint::synth::Config c;
    c.shape = shape;
    c.photons = 3;
    const SyntheticRun run(c, 40);
    expect_same_as_reference(run, params(shape, 3, 5.0), {1, 3}, 5);
  }
}

TEST(CpuFinder, FewerDarkFramesThanTheWindowStillMatches) {
  // Not a sensible run (the first fast push corrupts the pedestal), but the semantics are defined
  // and the backend must keep them: here counts stay below N and mean = sum/N after a push.
  glint::synth::Config c;
  c.shape = {21, 26};
  c.dark_frames = 40;
  c.photons = 10;
  const SyntheticRun run(c, 20);
  expect_same_as_reference(run, params(c.shape, 3, 5.0), {1, 3}, 6);
}

TEST(CpuFinder, LoadPedestalWithNaNNoiseMatches) {
  // A pixel whose variance rounds below zero has NaN noise: every comparison is false and the
  // pixel always updates. Build such a state and check both finders agree on it.
  glint::FinderParams p = params({9, 11}, 3, 5.0);
  glint::PedestalState s(p.shape, 1000);
  for (std::size_t i = 0; i < p.shape.pixels(); ++i) {
    s.sum[i] = 1000.0 * 1000.3;
    s.count[i] = 1000;
    const double mean = s.sum[i] / 1000.0;
    s.sum2[i] = (4.0 + mean * mean) * 1000.0;  // rms about 2
  }
  const std::size_t nan_pixel = 4 * 11 + 5;
  double& q = s.sum2[nan_pixel];
  q = s.sum[nan_pixel] / 1000.0 * (s.sum[nan_pixel] / 1000.0) * 1000.0;
  while (!(s.sum2[nan_pixel] / 1000.0 - s.mean(nan_pixel) * s.mean(nan_pixel) < 0.0))
    q = std::nextafter(q, 0.0);
  ASSERT_TRUE(std::isnan(s.noise(nan_pixel)));

  std::vector<uint16_t> frames(3 * p.shape.pixels(), 1000);
  frames[nan_pixel] = 1400;                          // would be a photon with real noise
  frames[p.shape.pixels() + 2 * 11 + 2] = 1100;      // a photon elsewhere
  frames[2 * p.shape.pixels() + nan_pixel + 1] = 990;
  const std::vector<uint64_t> numbers{5, 6, 7};
  auto ref = glint::make_reference_finder(p);
  ref->load_pedestal(s);
  glint::ClusterTable expected(3);
  ref->find(frames, numbers, expected);
  for (unsigned t : {1u, 2u, 4u}) {
    auto cpu = glint::make_cpu_finder(p, t);
    cpu->load_pedestal(s);
    glint::ClusterTable got(3);
    cpu->find(frames, numbers, got);
    EXPECT_EQ(got, expected) << t;
    EXPECT_EQ(cpu->pedestal(), ref->pedestal()) << t;
  }
  // the NaN pixel updated (sum changed) rather than forming a cluster
  EXPECT_NE(ref->pedestal().sum[nan_pixel], s.sum[nan_pixel]);
}

TEST(CpuFinder, DescriptionAndValidation) {
  auto f = glint::make_cpu_finder(params({40, 40}, 3, 5.0), 4);
  EXPECT_EQ(f->description(), "cpu (4 threads)");
  EXPECT_EQ(glint::make_cpu_finder(params({3, 40}, 3, 5.0), 16)->description(), "cpu (3 threads)");
  EXPECT_THROW(glint::make_cpu_finder(params({40, 40}, 4, 5.0), 1), std::invalid_argument);
  EXPECT_THROW(glint::make_cpu_finder(params({0, 40}, 3, 5.0), 1), std::invalid_argument);
  std::vector<uint16_t> partial(40 * 40 + 1);
  EXPECT_THROW(f->push_dark(partial), std::invalid_argument);
  glint::ClusterTable wrong_size(5);
  std::vector<uint16_t> one(40 * 40);
  const std::vector<uint64_t> n{1};
  EXPECT_THROW(f->find(one, n, wrong_size), std::invalid_argument);
}
