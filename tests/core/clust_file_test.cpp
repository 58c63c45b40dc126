#include "glint/clust_file.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <vector>

#include "glint/cluster_finder.hpp"
#include "test_data.hpp"

namespace fs = std::filesystem;

namespace {

fs::path temp_path(const std::string& name) {
  return fs::temp_directory_path() / ("glint_clust_test_" + std::to_string(::getpid()) + name);
}

std::vector<unsigned char> bytes_of(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

}  // namespace

TEST(ClustFile, WritesAaresLayoutByteForByte) {
  glint::ClusterTable t(3);
  t.begin_frame(1000);
  const std::vector<int32_t> a{1, 2, 3, 4, 500, -6, 7, 8, 9};
  t.add_cluster(7, 5, a);
  t.begin_frame(1001);  // a frame without clusters still gets its record
  t.begin_frame(0x1'0000'0005ULL);  // beyond int32: written modulo 2^32, as aare's int32 cast
  const auto path = temp_path("layout.clust");
  {
    glint::ClustWriter w(path, 3);
    w.write(t);
    w.close();
    EXPECT_EQ(w.frames_written(), 3u);
    EXPECT_EQ(w.clusters_written(), 1u);
  }
  const auto b = bytes_of(path);
  std::vector<unsigned char> expected{
      0xe8, 0x03, 0, 0, 1, 0, 0, 0,       // frame 1000, 1 cluster
      7, 0, 5, 0,                          // x = 7, y = 5
      1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0, 0xf4, 0x01, 0, 0,
      0xfa, 0xff, 0xff, 0xff, 7, 0, 0, 0, 8, 0, 0, 0, 9, 0, 0, 0,
      0xe9, 0x03, 0, 0, 0, 0, 0, 0,       // frame 1001, no clusters
      5, 0, 0, 0, 0, 0, 0, 0};            // frame 2^32 + 5 stored as 5
  EXPECT_EQ(b, expected);
  fs::remove(path);
}

TEST(ClustFile, RoundTripsEveryClusterSize) {
  for (int S : {3, 5, 7, 9}) {
    const glint::testing::SyntheticRun run({.shape = {23, 19}, .photons = 8}, 20);
    auto finder = glint::make_reference_finder({.shape = run.config.shape, .cluster_size = S});
    const auto table = glint::testing::run_finder(*finder, run);
    ASSERT_GT(table.n_clusters(), 20u);
    const auto path = temp_path("roundtrip.clust");
    {
      glint::ClustWriter w(path, S);
      w.write(table);
    }  // the destructor closes
    EXPECT_EQ(fs::file_size(path), 20u * 8 + table.n_clusters() * (4 + 4 * S * S));
    EXPECT_EQ(glint::read_clust(path, S), table) << "S=" << S;
    fs::remove(path);
  }
}

TEST(ClustFile, ReadsTheFileAareWrote) {
  // Written by aare's ClusterFile for the same synthetic frames (5x5, n_sigma 5).
  const fs::path aare = fs::path(GLINT_SOURCE_DIR) / "tests/core/data/s5_21x19_seed22.clust";
  const glint::testing::SyntheticRun run({.shape = {21, 19}, .seed = 22, .photons = 5}, 30);
  auto finder = glint::make_reference_finder({.shape = run.config.shape, .cluster_size = 5});
  const auto table = glint::testing::run_finder(*finder, run);
  const auto read = glint::read_clust(aare, 5);
  EXPECT_EQ(read.n_frames(), 30u);
  EXPECT_EQ(read.n_clusters(), 130u);
  EXPECT_EQ(read, table);
  // and glint writes the identical bytes
  const auto path = temp_path("aare.clust");
  {
    glint::ClustWriter w(path, 5);
    w.write(table);
  }
  EXPECT_EQ(bytes_of(path), bytes_of(aare));
  fs::remove(path);
}

TEST(ClustFile, ClearErrors) {
  EXPECT_THROW(glint::read_clust("/nonexistent/dir/x.clust", 3), std::runtime_error);
  EXPECT_THROW(glint::ClustWriter("/nonexistent/dir/x.clust", 3), std::runtime_error);
  const auto path = temp_path("trunc.clust");
  {
    std::ofstream out(path, std::ios::binary);
    const int32_t fn = 3;
    const uint32_t n = 2;  // announces 2 clusters, holds one
    out.write(reinterpret_cast<const char*>(&fn), 4);
    out.write(reinterpret_cast<const char*>(&n), 4);
    out.write(std::string(40, '\0').data(), 40);
  }
  try {
    glint::read_clust(path, 3);
    FAIL() << "no error for a truncated file";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(path.string()), std::string::npos) << e.what();
  }
  glint::ClustWriter w(path, 5);
  glint::ClusterTable three(3);
  EXPECT_THROW(w.write(three), std::invalid_argument);
  fs::remove(path);
}
