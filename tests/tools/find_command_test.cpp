// `glint synth`, `glint find` and `glint bench find`, run as a user runs them.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <algorithm>
#include <fstream>
#include <string>

#include "glint/gpu/device.hpp"
#include "tool_test.hpp"
#include "glint/cluster_finder.hpp"
#include "glint/pipeline/run_file.hpp"
#include "test_data.hpp"

using glint::testing::expect_failure;
using glint::testing::file_sha256;
using glint::testing::run_glint;
using glint::testing::ToolResult;

namespace {

class GlintFind : public glint::testing::ScratchDirTest {
 protected:
  GlintFind() : ScratchDirTest("glint_find_test") {}
};

// From tests/core/data/reference_digests.txt: outputs verified against aare's ClusterFinder.
constexpr const char* kAareS3 = "0b40672ece9d965e8f6f82cd8319564fa2cbf5be8e5500b1cff14fe3a5f69860";
constexpr const char* kAareS5 = "4d992a3b9f42ffc438c43c86a1b5c8305036eb96f7f5723c59b91b71c6e6bf86";

}  // namespace

TEST_F(GlintFind, MatchesAareByteForByteAtOneAndManyThreads) {
  const auto s3 = path("s3.h5"), s5 = path("s5.h5");
  ASSERT_EQ(run_glint("synth -q -o " + s3 + " --rows 64 --cols 48 --frames 120 --seed 11 --photons 40")
                .status, 0);
  ASSERT_EQ(run_glint("synth -q -o " + s5 + " --rows 37 --cols 53 --frames 120 --seed 14 --photons 60")
                .status, 0);
  for (const char* threads : {"1", "7"}) {
    const auto c3 = path(std::string("s3_") + threads + ".clust");
    const auto c5 = path(std::string("s5_") + threads + ".clust");
    const ToolResult r3 =
        run_glint("find -i " + s3 + " --backend cpu --threads " + threads + " --clust " + c3);
    ASSERT_EQ(r3.status, 0) << r3.output;
    EXPECT_NE(r3.output.find("1120 frames (1000 dark, 120 data), 4956 clusters"),
              std::string::npos) << r3.output;
    EXPECT_EQ(file_sha256(c3), kAareS3) << "threads " << threads;
    const ToolResult r5 = run_glint("find -i " + s5 + " --dataset /data --dark 1000 --n-sigma 5 "
                            "--cluster-size 5 --backend cpu --threads " + threads + " --clust " + c5);
    ASSERT_EQ(r5.status, 0) << r5.output;
    EXPECT_EQ(file_sha256(c5), kAareS5) << "threads " << threads;
  }
}

TEST_F(GlintFind, RunFileHoldsFramesClustersAndPedestal) {
  const auto in = path("in.h5"), out = path("out.h5");
  ASSERT_EQ(run_glint("synth -q -o " + in + " --rows 30 --cols 41 --dark 1000 --frames 50 --seed 3 "
                  "--photons 20").status, 0);
  const ToolResult r = run_glint("find -q -i " + in + " --backend cpu --threads 3 --output " + out);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(r.output.empty()) << r.output;  // --quiet: no summary

  const glint::testing::SyntheticRun run({.shape = {30, 41}, .seed = 3, .photons = 20}, 50);
  auto ref = glint::make_reference_finder({.shape = run.config.shape});
  ref->push_dark(run.dark());
  const auto start = ref->pedestal();
  glint::ClusterTable expected(3);
  ref->find(run.data(), run.data_numbers(), expected);

  const auto f = glint::pipeline::read_run_file(out);
  ASSERT_EQ(f.frames.size(), 1050u);
  EXPECT_EQ(f.frames[0].flags, glint::pipeline::kFlagDark);
  EXPECT_EQ(f.frames[999].frame_number, 999u);
  EXPECT_EQ(f.frames[1000].frame_number, 1000u);
  EXPECT_EQ(f.frames[1000].flags, 0);
  EXPECT_EQ(f.clusters.n_clusters(), expected.n_clusters());
  // The file holds a record for every frame (dark ones too): compare the cluster rows.
  EXPECT_TRUE(std::ranges::equal(f.clusters.x(), expected.x()));
  EXPECT_TRUE(std::ranges::equal(f.clusters.y(), expected.y()));
  EXPECT_TRUE(std::ranges::equal(f.clusters.data(), expected.data()));
  EXPECT_EQ(f.shape, (glint::FrameShape{30, 41}));
  EXPECT_EQ(f.cluster_size, 3);
  EXPECT_EQ(f.start_mean, start.means());
  ASSERT_TRUE(f.end_state.has_value());
  EXPECT_EQ(*f.end_state, ref->pedestal());
  EXPECT_NE(f.backend.find("cpu"), std::string::npos);
}

// --pedestal-source file:PATH starts from a pedestal file made by glint pedestal: every frame of
// the input is then a data frame (no --dark), and the file's window is the finder's.
TEST_F(GlintFind, PedestalSourceFileStartsFromAPedestalFile) {
  const auto in = path("in.h5"), ped = path("ped.h5"), out = path("out.h5");
  ASSERT_EQ(run_glint("synth -q -o " + in + " --rows 30 --cols 41 --dark 1000 --frames 50 --seed 3 "
                  "--photons 20").status, 0);
  ASSERT_EQ(run_glint("pedestal -q -i " + in + " --dark 1000 --window 50 -o " + ped).status, 0);
  const ToolResult r = run_glint("find -q -i " + in + " --backend cpu --threads 3 "
                                 "--pedestal-source file:" + ped + " --output " + out);
  ASSERT_EQ(r.status, 0) << r.output;

  const glint::PedestalState loaded = glint::pipeline::read_pedestal_state(ped);
  ASSERT_EQ(loaded.window, 50u);
  const glint::testing::SyntheticRun run({.shape = {30, 41}, .seed = 3, .photons = 20}, 50);
  auto ref = glint::make_reference_finder({.shape = run.config.shape, .pedestal_window = 50});
  ref->load_pedestal(loaded);
  std::vector<uint64_t> numbers(1050);
  for (uint64_t k = 0; k < numbers.size(); ++k) numbers[k] = k;
  glint::ClusterTable expected(3);
  ref->find(run.frames, numbers, expected);

  const auto f = glint::pipeline::read_run_file(out);
  EXPECT_EQ(f.pedestal_window, 50u);
  ASSERT_EQ(f.frames.size(), 1050u);
  EXPECT_TRUE(std::ranges::all_of(f.frames, [](const auto& row) { return row.flags == 0; }));
  EXPECT_EQ(f.start_mean, loaded.means());
  ASSERT_EQ(f.clusters.n_clusters(), expected.n_clusters());
  EXPECT_GT(expected.n_clusters(), 0u);
  EXPECT_TRUE(std::ranges::equal(f.clusters.x(), expected.x()));
  EXPECT_TRUE(std::ranges::equal(f.clusters.y(), expected.y()));
  EXPECT_TRUE(std::ranges::equal(f.clusters.data(), expected.data()));
  ASSERT_TRUE(f.end_state.has_value());
  EXPECT_EQ(*f.end_state, ref->pedestal());
  EXPECT_NE(f.config_yaml.find("source: 'file:" + ped + "'"), std::string::npos) << f.config_yaml;

  // Dark frames given as well continue the loaded pedestal.
  const auto out2 = path("out2.h5");
  ASSERT_EQ(run_glint("find -q -i " + in + " --backend cpu --dark 10 --pedestal-source file:" +
                      ped + " --output " + out2).status, 0);
  auto ref2 = glint::make_reference_finder({.shape = run.config.shape, .pedestal_window = 50});
  ref2->load_pedestal(loaded);
  ref2->push_dark(std::span(run.frames).first(10 * 30 * 41));
  const auto f2 = glint::pipeline::read_run_file(out2);
  ASSERT_EQ(f2.frames.size(), 1050u);
  EXPECT_EQ(f2.frames[9].flags, glint::pipeline::kFlagDark);
  EXPECT_EQ(f2.frames[10].flags, 0);
  EXPECT_EQ(f2.start_mean, ref2->pedestal().means());

  expect_failure("find -i " + in + " --pedestal-source previous", 2,
                 "--pedestal-source previous: allowed are dark (the first --dark frames) and "
                 "file:PATH");
  expect_failure("find -i " + in + " --pedestal-source file:" + path("missing.h5"), 2,
                 "--pedestal-source file:" + path("missing.h5") + ": " + path("missing.h5") +
                     ": cannot open: ");
  // Files that are not glint's are named as such (not by the HDF5 call that failed first).
  { std::ofstream(path("notes.txt")) << "pedestal taken on Monday\n"; }
  expect_failure("find -i " + in + " --pedestal-source file:" + path("notes.txt"), 2,
                 path("notes.txt") + ": not an HDF5 file (not a glint run or pedestal file)");
  expect_failure("find -i " + in + " --pedestal-source file:" + in, 2,
                 in + ": not a glint run or pedestal file (no group /entry)");
  const auto small = path("small.h5"), small_ped = path("small_ped.h5");
  ASSERT_EQ(run_glint("synth -q -o " + small + " --rows 8 --cols 9 --dark 20 --frames 1").status,
            0);
  ASSERT_EQ(run_glint("pedestal -q -i " + small + " --dark 20 --window 20 -o " + small_ped)
                .status, 0);
  expect_failure("find -i " + in + " --pedestal-source file:" + small_ped, 2,
                 "the pedestal is 8 x 9, the frames are 30 x 41");
}

TEST_F(GlintFind, ClearErrorsAndExitCodes) {
  const auto in = path("in.h5");
  ASSERT_EQ(run_glint("synth -q -o " + in + " --rows 8 --cols 9 --dark 1000 --frames 3").status, 0);

  expect_failure("find -i " + path("missing.h5"), 2, "does not exist");
  expect_failure("find -i " + in + " --dataset /frames", 2, "has no dataset '/frames'");
  expect_failure("find -i " + in + " --dark 500", 2,
                 "fewer dark frames than the pedestal window (1000)");
  expect_failure("find -i " + in + " --dark 2000", 2, "holds only 1003 frames");
  expect_failure("find -i " + in + " --cluster-size 4", 2, "cluster size 4 is not supported");
  expect_failure("find -i " + in + " --backend tpu", 2, "unknown backend 'tpu'");

  // A dataset of the wrong type.
  const auto wrong = path("wrong.h5");
  {
    const hid_t file = H5Fcreate(wrong.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    const hsize_t dims[3] = {2, 4, 4};
    const hid_t space = H5Screate_simple(3, dims, nullptr);
    const hid_t ds = H5Dcreate2(file, "/data", H5T_STD_I32LE, space, H5P_DEFAULT, H5P_DEFAULT,
                                H5P_DEFAULT);
    const hsize_t d2[2] = {4, 4};
    const hid_t s2 = H5Screate_simple(2, d2, nullptr);
    const hid_t flat = H5Dcreate2(file, "/flat", H5T_STD_U16LE, s2, H5P_DEFAULT, H5P_DEFAULT,
                                  H5P_DEFAULT);
    H5Dclose(flat);
    H5Sclose(s2);
    H5Dclose(ds);
    H5Sclose(space);
    H5Fclose(file);
  }
  expect_failure("find -i " + wrong, 2, "holds int32, expected uint16");
  expect_failure("find -i " + wrong + " --dataset /flat", 2, "has 2 dimensions, expected 3");

  // Not an HDF5 file.
  { std::ofstream(path("text.h5")) << "hello\n"; }
  expect_failure("find -i " + path("text.h5"), 2, "is not an HDF5 file");

  // Outputs are not overwritten by accident.
  const auto clust = path("o.clust");
  ASSERT_EQ(run_glint("find -q -i " + in + " --clust " + clust).status, 0);
  expect_failure("find -q -i " + in + " --clust " + clust, 2, "exists already");
  EXPECT_EQ(run_glint("find -q -i " + in + " --clust " + clust + " --overwrite").status, 0);

  // An unwritable output is a run-time failure.
  expect_failure("find -q -i " + in + " --clust /nonexistent/dir/o.clust", 1,
                 "/nonexistent/dir/o.clust");
}

TEST_F(GlintFind, SynthIsDeterministic) {
  const auto a = path("a.h5"), b = path("b.h5");
  ASSERT_EQ(run_glint("synth -q -o " + a + " --rows 16 --cols 12 --dark 1000 --frames 5 --seed 9").status, 0);
  ASSERT_EQ(run_glint("synth -q -o " + b + " --rows 16 --cols 12 --dark 1000 --frames 5 --seed 9").status, 0);
  // The same seed gives the same clusters.
  ASSERT_EQ(run_glint("find -q -i " + a + " --clust " + path("a.clust")).status, 0);
  ASSERT_EQ(run_glint("find -q -i " + b + " --clust " + path("b.clust")).status, 0);
  EXPECT_EQ(file_sha256(path("a.clust")), file_sha256(path("b.clust")));
  expect_failure("synth -q -o " + a + " --rows 16 --cols 12", 1, "exists already");
}

TEST(GlintBenchFind, CpuPrintsRateAndMatchesTheReference) {
  const ToolResult r = run_glint("bench find --backend cpu --size 48 --frames 30 --threads 2 --photons 20 "
                         "--reference");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("frames/s"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("us/frame"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("x the reference"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("DIFFER"), std::string::npos) << r.output;
  expect_failure("bench find --size 0", 2, "--size (1..65536)");
  expect_failure("bench find --cluster-size 6", 2, "cluster size 6 is not supported");
}

TEST(GlintBenchFind, ProductsDeviceChoosesWhereTheProductsAreAccumulated) {
  const std::string common = "bench find --backend cpu --size 48 --frames 30 --threads 2 "
                             "--photons 20 --products all ";
  ToolResult r = run_glint(common + "--products-device cpu --products-threads 2");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("products all (on 2 CPU worker threads)"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("for room in their queue"), std::string::npos) << r.output;
  const std::string why = glint::gpu::unavailable_reason();
  r = run_glint(common + "--products-device gpu");
  if (why.empty()) {
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_NE(r.output.find("products all (on the GPU)"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("for a free staging buffer"), std::string::npos) << r.output;
  } else {
    EXPECT_EQ(r.status, 1) << r.output;
    EXPECT_NE(r.output.find("products.device: GPU backend not available: " + why),
              std::string::npos)
        << r.output;
  }
  expect_failure(common + "--products-device cuda", 2, "--products-device");
}

TEST(GlintBenchFind, RowsAndColumnsGiveTheFrameShape) {
  const ToolResult r = run_glint("bench find --backend cpu --rows 24 --cols 40 --frames 10 "
                                 "--threads 2 --photons 10 --reference");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("24x40 frames"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("DIFFER"), std::string::npos) << r.output;
  expect_failure("bench find --rows 70000", 2, "--rows and --cols (at most 65536)");
}
