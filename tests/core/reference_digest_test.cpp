// The reference and the fast CPU backend against outputs verified byte for byte with aare's
// single-threaded ClusterFinder (tests/core/data/reference_digests.txt says how).
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "glint/clust_file.hpp"
#include "glint/cluster_finder.hpp"
#include "test_data.hpp"

namespace fs = std::filesystem;

namespace {

struct Case {
  int size;
  uint32_t rows, cols;
  double n_sigma;
  uint64_t dark, data, seed;
  double photons;
  std::size_t clusters;
  std::string clust_sha, mean_sha, noise_sha;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << "S=" << c.size << " " << c.rows << "x" << c.cols << " n_sigma=" << c.n_sigma
      << " seed=" << c.seed;
}

std::vector<Case> load_cases() {
  std::ifstream in(fs::path(GLINT_SOURCE_DIR) / "tests/core/data/reference_digests.txt");
  std::vector<Case> cases;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream s(line);
    Case c;
    s >> c.size >> c.rows >> c.cols >> c.n_sigma >> c.dark >> c.data >> c.seed >> c.photons >>
        c.clusters >> c.clust_sha >> c.mean_sha >> c.noise_sha;
    if (s) cases.push_back(c);
  }
  return cases;
}

std::string clust_digest(const glint::ClusterTable& t) {
  const auto path = fs::temp_directory_path() /
                    ("glint_digest_" + std::to_string(::getpid()) + ".clust");
  {
    glint::ClustWriter w(path, t.cluster_size());
    w.write(t);
  }
  const std::string digest = glint::testing::file_sha256(path);
  fs::remove(path);
  return digest;
}

void check(glint::ClusterFinder& finder, const glint::testing::SyntheticRun& run, const Case& c,
           std::size_t chunk) {
  const auto table = glint::testing::run_finder(finder, run, chunk);
  EXPECT_EQ(table.n_clusters(), c.clusters);
  EXPECT_EQ(clust_digest(table), c.clust_sha);
  const auto ped = finder.pedestal();
  EXPECT_EQ(glint::testing::sha256(ped.means()), c.mean_sha);
  EXPECT_EQ(glint::testing::sha256(ped.noises()), c.noise_sha);
}

class VerifiedOutputs : public ::testing::TestWithParam<Case> {};

glint::testing::SyntheticRun make_run(const Case& c) {
  glint::synth::Config cfg;
  cfg.shape = {c.rows, c.cols};
  cfg.seed = c.seed;
  cfg.photons = c.photons;
  cfg.dark_frames = c.dark;
  return glint::testing::SyntheticRun(cfg, c.data);
}

glint::FinderParams params_of(const Case& c) {
  glint::FinderParams p;
  p.shape = {c.rows, c.cols};
  p.cluster_size = c.size;
  p.n_sigma = c.n_sigma;
  return p;
}

}  // namespace

TEST(VerifiedOutputsFile, HasEveryClusterSizeAndBothThresholds) {
  const auto cases = load_cases();
  ASSERT_GE(cases.size(), 10u);
  for (int S : {3, 5, 7, 9})
    for (double n : {3.0, 5.0})
      EXPECT_TRUE(std::any_of(cases.begin(), cases.end(),
                              [&](const Case& c) { return c.size == S && c.n_sigma == n; }))
          << "S=" << S << " n_sigma=" << n;
}

TEST_P(VerifiedOutputs, ReferenceFinder) {
  const Case& c = GetParam();
  const auto run = make_run(c);
  auto finder = glint::make_reference_finder(params_of(c));
  check(*finder, run, c, 1u << 30);
}

TEST_P(VerifiedOutputs, CpuFinderOneThread) {
  const Case& c = GetParam();
  const auto run = make_run(c);
  auto finder = glint::make_cpu_finder(params_of(c), 1);
  check(*finder, run, c, 1u << 30);
}

TEST_P(VerifiedOutputs, CpuFinderThreeThreadsInChunks) {
  const Case& c = GetParam();
  const auto run = make_run(c);
  auto finder = glint::make_cpu_finder(params_of(c), 3);
  check(*finder, run, c, 7);
}

INSTANTIATE_TEST_SUITE_P(Aare, VerifiedOutputs, ::testing::ValuesIn(load_cases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           const Case& c = info.param;
                           return fmt::format("S{}_{}x{}_n{}_seed{}", c.size, c.rows, c.cols,
                                              static_cast<int>(c.n_sigma), c.seed);
                         });
