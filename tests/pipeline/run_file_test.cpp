#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <unistd.h>

#include "glint/pipeline/run_file.hpp"

namespace fs = std::filesystem;
using namespace glint;
using namespace glint::pipeline;

namespace {

fs::path temp_dir() {
  fs::path d = fs::temp_directory_path() /
               ("glint_run_file_" + std::to_string(::getpid()) + "_" +
                ::testing::UnitTest::GetInstance()->current_test_info()->name());
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

RunMetadata metadata() {
  RunMetadata m;
  m.finder.shape = {4, 6};
  m.finder.cluster_size = 3;
  m.finder.n_sigma = 5.0;
  m.config_yaml = "detector:\n  rows: 4\n";
  m.detector_type = "MOENCH";
  m.source = "test";
  m.backend = "cpu reference";
  return m;
}

ClusterTable two_frames() {
  ClusterTable t(3);
  t.begin_frame(1000);
  const std::vector<int32_t> a{1, 2, 3, 4, 99, 6, 7, 8, 9};
  const std::vector<int32_t> b{-1, 0, 0, 0, 50, 0, 0, 0, -7};
  t.add_cluster(2, 1, a);
  t.add_cluster(5, 3, b);
  t.begin_frame(1001);
  t.begin_frame(1002);
  t.add_cluster(0, 0, b);
  return t;
}

PedestalState pedestal(FrameShape s, double base) {
  PedestalState p(s, 1000);
  for (std::size_t i = 0; i < s.pixels(); ++i) {
    p.count[i] = 1000;
    p.sum[i] = (base + i) * 1000.0;
    p.sum2[i] = (base + i) * (base + i) * 1000.0 + 4000.0;  // noise 2
  }
  return p;
}

}  // namespace

TEST(RunFile, PathHasRunNameAndSixDigitIndex) {
  EXPECT_EQ(run_file_path("/data", "sample", 42), fs::path("/data/sample_000042.h5"));
}

TEST(RunFile, RoundTripsFramesClustersAndPedestals) {
  const fs::path dir = temp_dir();
  const fs::path file = dir / "run_000001.h5";
  const RunMetadata meta = metadata();
  const ClusterTable table = two_frames();
  {
    RunFileWriter w(file, meta);
    w.write_start_pedestal(pedestal(meta.finder.shape, 100.0));
    const std::vector<uint64_t> ts{10, 20, 30};
    const std::vector<uint8_t> flags{0, kFlagIncomplete, 0};
    w.append(table, ts, flags);
    const std::vector<FrameRow> missing{{1003, 0, 0, 0, kFlagMissing}};
    w.append_empty_frames(missing);
    w.append(table);
    EXPECT_EQ(w.frames_written(), 7u);
    EXPECT_EQ(w.clusters_written(), 6u);
    const auto end = pedestal(meta.finder.shape, 200.0);
    w.close(&end);
    EXPECT_FALSE(w.is_open());
  }
  const RunFileContents r = read_run_file(file);
  EXPECT_EQ(r.shape, meta.finder.shape);
  EXPECT_EQ(r.cluster_size, 3);
  EXPECT_EQ(r.n_sigma, 5.0);
  EXPECT_EQ(r.pedestal_window, 1000u);
  EXPECT_EQ(r.config_yaml, meta.config_yaml);
  EXPECT_EQ(r.backend, "cpu reference");
  EXPECT_FALSE(r.start_time.empty());
  EXPECT_FALSE(r.end_time.empty());
  ASSERT_EQ(r.frames.size(), 7u);
  EXPECT_EQ(r.frames[0], (FrameRow{1000, 10, 0, 2, 0}));
  EXPECT_EQ(r.frames[1], (FrameRow{1001, 20, 2, 0, kFlagIncomplete}));
  EXPECT_EQ(r.frames[2], (FrameRow{1002, 30, 2, 1, 0}));
  EXPECT_EQ(r.frames[3], (FrameRow{1003, 0, 3, 0, kFlagMissing}));
  EXPECT_EQ(r.frames[4], (FrameRow{1000, 0, 3, 2, 0}));
  EXPECT_EQ(r.frames[6], (FrameRow{1002, 0, 5, 1, 0}));
  ASSERT_EQ(r.clusters.n_clusters(), 6u);
  for (std::size_t k = 0; k < 2; ++k)
    for (std::size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(r.clusters.x()[k * 3 + i], table.x()[i]);
      EXPECT_EQ(r.clusters.y()[k * 3 + i], table.y()[i]);
      const auto got = r.clusters.cluster_data(k * 3 + i);
      const auto want = table.cluster_data(i);
      EXPECT_TRUE(std::equal(got.begin(), got.end(), want.begin(), want.end()));
    }
  ASSERT_EQ(r.start_mean.size(), 24u);
  EXPECT_EQ(r.start_mean[5], 105.0);
  EXPECT_EQ(r.start_noise[5], 2.0);
  EXPECT_EQ(r.end_mean[0], 200.0);
  ASSERT_TRUE(r.end_state.has_value());
  EXPECT_EQ(*r.end_state, pedestal(meta.finder.shape, 200.0));
  fs::remove_all(dir);
}

TEST(RunFile, VisibleToAReaderWhileWrittenAndAfterAnUncleanEnd) {
  const fs::path dir = temp_dir();
  const fs::path file = dir / "run_000002.h5";
  RunFileWriter w(file, metadata());
  w.append(two_frames());
  w.flush();
  // Read while the writer holds the file open (SWMR).
  const RunFileContents live = read_run_file(file);
  EXPECT_EQ(live.frames.size(), 3u);
  EXPECT_EQ(live.clusters.n_clusters(), 3u);
  EXPECT_TRUE(live.end_time.empty());
  EXPECT_TRUE(std::isnan(live.end_mean[0]));
  EXPECT_FALSE(live.end_state.has_value());
  w.close(nullptr);
  const RunFileContents done = read_run_file(file);
  EXPECT_FALSE(done.end_time.empty());
  EXPECT_EQ(done.frames.size(), 3u);
  fs::remove_all(dir);
}

TEST(RunFile, RefusesToOverwriteAndNamesTheFile) {
  const fs::path dir = temp_dir();
  const fs::path file = dir / "run_000003.h5";
  { RunFileWriter w(file, metadata()); }
  try {
    RunFileWriter again(file, metadata());
    FAIL() << "an existing run file was overwritten";
  } catch (const OutputError& e) {
    EXPECT_NE(std::string(e.what()).find(file.string()), std::string::npos);
  }
  EXPECT_NO_THROW(RunFileWriter(file, metadata(), /*overwrite=*/true));
  fs::remove_all(dir);
}

TEST(RunFile, MissingDirectoryIsAClearError) {
  const fs::path file = fs::temp_directory_path() / "glint_no_such_dir_x" / "run.h5";
  EXPECT_THROW(RunFileWriter(file, metadata()), OutputError);
}

TEST(RunFile, ReadableByH5py) {
  if (std::system("/usr/bin/python3 -c 'import h5py' >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "h5py is not installed (scripts/setup.sh installs python3-h5py)";
  const fs::path dir = temp_dir();
  const fs::path file = dir / "run_000004.h5";
  {
    RunFileWriter w(file, metadata());
    w.append(two_frames());
    w.close(nullptr);
  }
  const fs::path script = dir / "check.py";
  std::ofstream(script) << "import h5py, sys\n"
                           "f = h5py.File(sys.argv[1], 'r')\n"
                           "assert f['entry'].attrs['NX_class'] == 'NXentry'\n"
                           "assert list(f['entry/frames/n_clusters'][:]) == [2, 0, 1]\n"
                           "assert f['entry/clusters/data'].shape == (3, 3, 3)\n"
                           "assert f['entry/clusters/data'][0, 1, 1] == 99\n"
                           "assert list(f['entry/clusters/x'][:]) == [2, 5, 0]\n";
  const std::string cmd = "/usr/bin/python3 " + script.string() + " " + file.string();
  EXPECT_EQ(std::system(cmd.c_str()), 0);
  fs::remove_all(dir);
}

namespace {

ReconstructionVolume recon_volume(uint64_t first, uint32_t nz, float scale) {
  ReconstructionVolume v;
  v.first_frame = first;
  v.last_frame = first + 10 * nz - 1;
  v.nx = 6;
  v.ny = 4;
  v.nz = nz;
  for (uint32_t i = 0; i < v.nx * v.ny * v.nz; ++i) {
    v.input.push_back(scale * float(i % 7));
    v.output.push_back(scale * float(i % 7) * 0.5f + 0.25f);
  }
  v.lambda = 0.125;
  v.outer = 20;
  v.tv_inner = 10;
  v.warm_start = false;
  v.nonneg = true;
  v.forward = "gaussian:1,1,0.5";
  v.variant = "two-state";
  v.backend = "cpu";
  v.solve_seconds = 0.003;
  return v;
}

}  // namespace

TEST(RunFile, ReconstructionIsWrittenAtCloseAndReadBack) {
  const fs::path dir = temp_dir();
  const fs::path file = dir / "run_000005.h5";
  const fs::path spill = dir / "run_000005.h5.recon.tmp";
  const ReconstructionVolume v0 = recon_volume(100, 3, 1.0f), v1 = recon_volume(130, 2, 2.0f);
  ReconstructionSummary sum;
  sum.weight = "signal";
  sum.frames_per_slice = 10;
  sum.slices = 3;
  sum.frames = 50;
  sum.volumes_done = 2;
  sum.volumes_dropped = 1;
  sum.volumes_failed = 0;
  {
    RunFileWriter w(file, metadata());
    w.append(two_frames());
    // Handed over from another thread, as the reconstruction stage does.
    std::thread t([&] {
      w.add_reconstruction(v0);
      w.add_reconstruction(v1);
    });
    t.join();
    EXPECT_TRUE(fs::exists(spill)) << "volumes are kept on disk until close, not in memory";
    w.flush();
    // While the run is written (SWMR) the group does not exist yet.
    const RunFileContents live = read_run_file(file);
    EXPECT_FALSE(live.reconstruction_summary.has_value());
    EXPECT_TRUE(live.reconstruction.empty());
    w.set_reconstruction_summary(sum);
    w.close(nullptr);
    EXPECT_THROW(w.add_reconstruction(v0), OutputError);
  }
  EXPECT_FALSE(fs::exists(spill)) << "the side file must be removed at close";
  const RunFileContents r = read_run_file(file);
  EXPECT_FALSE(r.end_time.empty());
  EXPECT_EQ(r.clusters.n_clusters(), 3u);
  ASSERT_TRUE(r.reconstruction_summary.has_value());
  EXPECT_EQ(r.reconstruction_summary->weight, "signal");
  EXPECT_EQ(r.reconstruction_summary->frames_per_slice, 10u);
  EXPECT_EQ(r.reconstruction_summary->slices, 3u);
  EXPECT_EQ(r.reconstruction_summary->frames, 50u);
  EXPECT_EQ(r.reconstruction_summary->volumes_done, 2u);
  EXPECT_EQ(r.reconstruction_summary->volumes_dropped, 1u);
  EXPECT_EQ(r.reconstruction_summary->volumes_failed, 0u);
  ASSERT_EQ(r.reconstruction.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    const ReconstructionVolume& want = i == 0 ? v0 : v1;
    const ReconstructionVolume& got = r.reconstruction[i];
    EXPECT_EQ(got.first_frame, want.first_frame);
    EXPECT_EQ(got.last_frame, want.last_frame);
    EXPECT_EQ(got.nx, 6u);
    EXPECT_EQ(got.ny, 4u);
    EXPECT_EQ(got.nz, want.nz);
    EXPECT_EQ(got.input, want.input);
    EXPECT_EQ(got.output, want.output);
    EXPECT_EQ(got.lambda, 0.125);
    EXPECT_EQ(got.outer, 20u);
    EXPECT_EQ(got.tv_inner, 10u);
    EXPECT_FALSE(got.warm_start);
    EXPECT_TRUE(got.nonneg);
    EXPECT_EQ(got.forward, "gaussian:1,1,0.5");
    EXPECT_EQ(got.variant, "two-state");
    EXPECT_EQ(got.backend, "cpu");
    EXPECT_EQ(got.solve_seconds, 0.003);
  }
  fs::remove_all(dir);
}

TEST(RunFile, NoReconstructionGroupWithoutTheStage) {
  const fs::path dir = temp_dir();
  const fs::path file = dir / "run_000006.h5";
  {
    RunFileWriter w(file, metadata());
    w.append(two_frames());
    w.close(nullptr);
  }
  const RunFileContents r = read_run_file(file);
  EXPECT_FALSE(r.reconstruction_summary.has_value());
  EXPECT_TRUE(r.reconstruction.empty());
  fs::remove_all(dir);
}

TEST(RunFile, ReconstructionVolumeOfTheWrongSizeIsRejected) {
  const fs::path dir = temp_dir();
  RunFileWriter w(dir / "run_000007.h5", metadata());
  ReconstructionVolume v = recon_volume(0, 2, 1.0f);
  v.output.pop_back();
  EXPECT_THROW(w.add_reconstruction(v), std::invalid_argument);
  w.close(nullptr);
  fs::remove_all(dir);
}

TEST(RunFile, ReconstructionReadableByH5py) {
  if (std::system("/usr/bin/python3 -c 'import h5py' >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "h5py is not installed (scripts/setup.sh installs python3-h5py)";
  const fs::path dir = temp_dir();
  const fs::path file = dir / "run_000008.h5";
  {
    RunFileWriter w(file, metadata());
    w.add_reconstruction(recon_volume(7, 3, 1.0f));
    w.set_reconstruction_summary(ReconstructionSummary{"centres", 10, 3, 30, 1, 0, 0});
    w.close(nullptr);
  }
  const fs::path script = dir / "check.py";
  std::ofstream(script) << "import h5py, sys\n"
                           "f = h5py.File(sys.argv[1], 'r')\n"
                           "g = f['entry/reconstruction']\n"
                           "assert g.attrs['NX_class'] == 'NXprocess'\n"
                           "v = g['volume_000000']\n"
                           "assert v['input'].shape == (3, 4, 6) and v['input'].dtype == 'float32'\n"
                           "assert v['output'].shape == (3, 4, 6) and v['output'].dtype == 'float32'\n"
                           "assert v['input'][0, 0, 1] == 1.0 and v['output'][0, 0, 1] == 0.75\n"
                           "assert v.attrs['first_frame'] == 7 and v.attrs['iterations'] == 200\n";
  const std::string cmd = "/usr/bin/python3 " + script.string() + " " + file.string();
  EXPECT_EQ(std::system(cmd.c_str()), 0);
  fs::remove_all(dir);
}
