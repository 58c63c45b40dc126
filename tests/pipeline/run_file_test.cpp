#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include "glint/jungfrau.hpp"
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

/// Every test gets a fresh directory `dir`, removed afterwards (also when an assertion fails).
class RunFile : public ::testing::Test {
 protected:
  void SetUp() override { dir = temp_dir(); }
  void TearDown() override { fs::remove_all(dir); }
  fs::path dir;
};

TEST_F(RunFile, PathHasRunNameAndSixDigitIndex) {
  EXPECT_EQ(run_file_path("/data", "sample", 42), fs::path("/data/sample_000042.h5"));
}

TEST_F(RunFile, RoundTripsFramesClustersAndPedestals) {
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
}

TEST_F(RunFile, VisibleToAReaderWhileWrittenAndAfterAnUncleanEnd) {
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
}

// A reader with the file open in SWMR mode (a live h5py session) holds HDF5's shared lock on it
// (flock, LOCK_SH). The end of the run still writes its end time, end reason and products.
TEST_F(RunFile, ClosesCompletelyWhileAReaderHoldsTheFileOpen) {
  const fs::path file = dir / "run_000003.h5";
  const RunMetadata meta = metadata();
  RunFileWriter w(file, meta);
  w.append(two_frames());
  products::ProductSettings settings;
  settings.rows = meta.finder.shape.rows;
  settings.cols = meta.finder.shape.cols;
  auto sums = std::make_shared<products::ProductSums>(settings);
  sums->add(two_frames());
  w.set_products(sums);
  w.set_end_reason("end of acquisition");
  w.flush();
  const int reader = ::open(file.c_str(), O_RDONLY);
  ASSERT_GE(reader, 0);
  ASSERT_EQ(::flock(reader, LOCK_SH | LOCK_NB), 0);
  ASSERT_NO_THROW(w.close(nullptr));
  ::close(reader);
  const RunFileContents done = read_run_file(file);
  EXPECT_FALSE(done.end_time.empty());
  EXPECT_EQ(done.end_reason, "end of acquisition");
  EXPECT_EQ(done.frames.size(), 3u);
  ASSERT_TRUE(done.products.present);
  EXPECT_EQ(done.products.clusters, 3u);
  ASSERT_EQ(done.products.hitmap.size(), 24u);
  EXPECT_EQ(done.products.hitmap[1 * 6 + 2], 1u);  // the cluster at (x 2, y 1)
}

TEST_F(RunFile, RefusesToOverwriteAndNamesTheFile) {
  const fs::path file = dir / "run_000003.h5";
  { RunFileWriter w(file, metadata()); }
  try {
    RunFileWriter again(file, metadata());
    FAIL() << "an existing run file was overwritten";
  } catch (const OutputError& e) {
    EXPECT_NE(std::string(e.what()).find(file.string()), std::string::npos);
  }
  EXPECT_NO_THROW(RunFileWriter(file, metadata(), /*overwrite=*/true));
}

namespace {
std::string contents(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
}  // namespace

// output.overwrite replaces an earlier run file only: never another kind of file, never through
// a symlink, and never by truncating (a hard link to the old file keeps its data).
TEST_F(RunFile, OverwriteReplacesOnlyAnEarlierRunFile) {
  const fs::path file = dir / "run_000004.h5";
  const std::string text = "an unrelated text file\n";
  std::ofstream(file) << text;
  for (bool overwrite : {false, true}) {
    try {
      RunFileWriter w(file, metadata(), overwrite);
      FAIL() << "a text file was replaced by a run file (overwrite " << overwrite << ")";
    } catch (const OutputError& e) {
      EXPECT_NE(std::string(e.what()).find(file.string()), std::string::npos) << e.what();
    }
    EXPECT_EQ(contents(file), text);
  }

  // A symlink named like the run file, pointing elsewhere: not followed.
  fs::remove(file);
  const fs::path target = dir / "elsewhere.txt";
  std::ofstream(target) << text;
  fs::create_symlink(target, file);
  for (bool overwrite : {false, true}) {
    EXPECT_THROW(RunFileWriter(file, metadata(), overwrite), OutputError);
    EXPECT_EQ(contents(target), text);
    EXPECT_TRUE(fs::is_symlink(file));
  }
  // A dangling one: O_EXCL does not create its target either.
  fs::remove(file);
  fs::remove(target);
  fs::create_symlink(target, file);
  EXPECT_THROW(RunFileWriter(file, metadata()), OutputError);
  EXPECT_FALSE(fs::exists(target));

  // An earlier run file, also reachable through a hard link: replaced, the link keeps its data.
  fs::remove(file);
  {
    RunFileWriter w(file, metadata());
    w.append(two_frames());
    w.close(nullptr);
  }
  fs::create_hard_link(file, dir / "kept.h5");
  {
    RunFileWriter w(file, metadata(), /*overwrite=*/true);
    w.close(nullptr);
  }
  EXPECT_EQ(read_run_file(file).frames.size(), 0u);
  EXPECT_EQ(read_run_file(dir / "kept.h5").frames.size(), 3u);
}

TEST_F(RunFile, PathWithANulIsRefused) {
  std::string name = (dir / "run_000001.h5").string();
  name += std::string("\0x", 2);
  EXPECT_THROW(RunFileWriter(fs::path(name), metadata(), /*overwrite=*/true), OutputError);
  EXPECT_TRUE(fs::is_empty(dir));
}

TEST_F(RunFile, MissingDirectoryIsAClearError) {
  const fs::path file = fs::temp_directory_path() / "glint_no_such_dir_x" / "run.h5";
  EXPECT_THROW(RunFileWriter(file, metadata()), OutputError);
}

// HDF5 prints its error stack unless told not to, and that setting is per thread: a run file's
// errors on any thread (each run has its own, the reconstruction another) are thrown, naming
// the file, and never printed.
TEST_F(RunFile, ErrorsOnAnyThreadAreThrownNotPrinted) {
  testing::internal::CaptureStderr();
  std::thread([&] { EXPECT_THROW(read_run_file(dir / "missing.h5"), OutputError); }).join();
  std::thread([&] {
    EXPECT_THROW(RunFileWriter(dir / "no_such_dir" / "run.h5", metadata()), OutputError);
  }).join();
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(err.find("HDF5"), std::string::npos) << err;
}

TEST_F(RunFile, ReadableByH5py) {
  if (std::system("/usr/bin/python3 -c 'import h5py' >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "h5py is not installed (scripts/setup.sh installs python3-h5py)";
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
}

// /entry/clusters carries NXevent_data's fields, mapped from the frame and cluster tables: a
// cluster is an event at its centre pixel, a frame a pulse; /entry/instrument/events is the
// NXevent_data group that links them. Read while the run is written (SWMR) and after it closed.
TEST_F(RunFile, ClustersCarryTheNXeventDataFields) {
  if (std::system("/usr/bin/python3 -c 'import h5py' >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "h5py is not installed (scripts/setup.sh installs python3-h5py)";
  const fs::path file = dir / "run_000005.h5";
  const fs::path script = dir / "check.py";
  // Clusters (x, y) of two_frames(): (2, 1), (5, 3) in frame 1000, (0, 0) in frame 1002; cols 6.
  std::ofstream(script)
      << "import h5py, sys\n"
         "f = h5py.File(sys.argv[1], 'r', libver='latest', swmr=True)\n"
         "c = f['entry/clusters']\n"
         "assert c.attrs['NX_class'] == 'NXcollection'\n"
         "e = f['entry/instrument/events']\n"
         "assert e.attrs['NX_class'] == 'NXevent_data'\n"
         "for k in ('event_id', 'event_index', 'event_time_zero', 'event_time_offset'):\n"
         "    assert e[k] == c[k], k  # the same dataset (hard link)\n"
         "assert f['entry/start_time'][()].decode() == f['entry'].attrs['start_time']\n"
         "assert f['entry/program_name'].attrs['version'] == f['entry'].attrs['program_version']\n"
         "if int(sys.argv[2]) == 6:\n"
         "    assert f['entry/end_time'][()].decode() == f['entry'].attrs['end_time']\n"
         "else:\n"
         "    assert 'end_time' not in f['entry']\n"
         "n = int(sys.argv[2])\n"
         "ids = [8, 23, 0, 8, 23, 0][:n]\n"
         "assert list(c['event_id'][:]) == ids, list(c['event_id'][:])\n"
         "assert c['event_id'].dtype == 'uint32'\n"
         "assert list(c['event_time_offset'][:]) == [0] * n\n"
         "assert c['event_time_offset'].attrs['units'] == 'ns'\n"
         "assert list(c['event_index'][:]) == list(f['entry/frames/cluster_offset'][:])\n"
         "assert list(c['event_index'][:]) == [0, 2, 2, 3, 3, 5, 5][:len(c['event_index'])]\n"
         "assert list(c['event_time_zero'][:]) == [100 * t for t in "
         "f['entry/frames/timestamp'][:]]\n"
         "assert list(c['event_time_zero'][:]) == [1000, 2000, 3000, 123400, 4000, 5000, 6000]"
         "[:len(c['event_time_zero'])]\n"
         "assert c['event_time_zero'].attrs['units'] == 'ns'\n"
         "assert len(c['event_index']) == int(sys.argv[3])\n"
         "assert list(c['x'][:]) == [2, 5, 0, 2, 5, 0][:n]\n";
  auto check = [&](int clusters, int frames) {
    const std::string cmd = "/usr/bin/python3 " + script.string() + " " + file.string() + " " +
                            std::to_string(clusters) + " " + std::to_string(frames);
    return std::system(cmd.c_str());
  };
  RunFileWriter w(file, metadata());
  const std::vector<uint64_t> ts{10, 20, 30}, ts2{40, 50, 60};
  w.append(two_frames(), ts);
  const std::vector<FrameRow> missing{{1003, 1234, 0, 0, kFlagMissing}};
  w.append_empty_frames(missing);
  w.flush();
  EXPECT_EQ(check(3, 4), 0);  // while written
  w.append(two_frames(), ts2);
  w.close(nullptr);
  EXPECT_EQ(check(6, 7), 0);
  // The tables glint's readers use are unchanged.
  const RunFileContents r = read_run_file(file);
  ASSERT_EQ(r.frames.size(), 7u);
  EXPECT_EQ(r.frames[3], (FrameRow{1003, 1234, 3, 0, kFlagMissing}));
  EXPECT_EQ(r.clusters.n_clusters(), 6u);
}

TEST_F(RunFile, CalibrationPedestalOfEachGainRoundTrips) {
  RunMetadata meta = metadata();
  const std::size_t np = meta.finder.shape.pixels();
  auto cal = std::make_shared<jungfrau::Calibration>();
  cal->shape = meta.finder.shape;
  cal->gain.assign(3 * np, 40.0);
  cal->pedestal.assign(3 * np, 0.0);
  meta.finder.pixels = PixelMode::jungfrau_calibrated;
  meta.finder.calibration = cal;
  std::vector<double> adc(3 * np);
  for (std::size_t i = 0; i < adc.size(); ++i) adc[i] = 1000.0 * double(i / np) + 0.25 * i;
  const fs::path file = dir / "run_000006.h5";
  {
    RunFileWriter w(file, meta);
    w.flush();
    const RunFileContents before = read_run_file(file);  // created, not yet written: NaN
    ASSERT_EQ(before.calibration_pedestal.size(), 3 * np);
    EXPECT_TRUE(std::ranges::all_of(before.calibration_pedestal,
                                    [](double v) { return std::isnan(v); }));
    EXPECT_THROW(w.write_calibration_pedestal(std::span(adc).first(np)), std::invalid_argument);
    w.write_calibration_pedestal(adc);
    w.close(nullptr);
  }
  EXPECT_EQ(read_run_file(file).calibration_pedestal, adc);

  // Files of other pixel modes have no such dataset, and refuse to write one.
  const fs::path raw = dir / "run_000007.h5";
  RunFileWriter w(raw, metadata());
  try {
    w.write_calibration_pedestal(adc);
    ADD_FAILURE() << "no error";
  } catch (const OutputError& e) {
    EXPECT_NE(std::string(e.what()).find("run_000007.h5: the file was created without "
                                         "/entry/pedestal/calibration"),
              std::string::npos)
        << e.what();
  }
  w.close(nullptr);
  EXPECT_TRUE(read_run_file(raw).calibration_pedestal.empty());
}

namespace {

/// Volumes of 6 x 4 x up to 3 slices (the metadata's frame shape).
RunMetadata recon_metadata() {
  RunMetadata m = metadata();
  ReconstructionLayout l;
  l.nx = 6;
  l.ny = 4;
  l.slices = 3;
  l.frames_per_slice = 10;
  l.weight = "signal";
  l.lambda = 0.125;
  l.outer = 20;
  l.tv_inner = 10;
  l.warm_start = false;
  l.nonneg = true;
  l.forward = "gaussian:1,1,0.5";
  l.variant = "two-state";
  l.backend = "auto";
  l.solve_partial = true;
  m.reconstruction = l;
  return m;
}

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
  v.outer = 20;
  v.tv_inner = 10;
  v.backend = "cpu";
  v.solve_seconds = 0.003 * scale;
  return v;
}

/// A volume read back equals the one written, with the run-constant values of recon_metadata().
void expect_volume(const ReconstructionVolume& got, const ReconstructionVolume& want) {
  EXPECT_EQ(got.first_frame, want.first_frame);
  EXPECT_EQ(got.last_frame, want.last_frame);
  EXPECT_EQ(got.nx, 6u);
  EXPECT_EQ(got.ny, 4u);
  EXPECT_EQ(got.nz, want.nz);
  EXPECT_EQ(got.input, want.input);
  EXPECT_EQ(got.output, want.output);
  EXPECT_EQ(got.partial, want.nz < 3);
  EXPECT_EQ(got.lambda, 0.125);
  EXPECT_EQ(got.outer, 20u);
  EXPECT_EQ(got.tv_inner, 10u);
  EXPECT_FALSE(got.warm_start);
  EXPECT_TRUE(got.nonneg);
  EXPECT_EQ(got.forward, "gaussian:1,1,0.5");
  EXPECT_EQ(got.variant, "two-state");
  EXPECT_EQ(got.backend, want.backend);
  EXPECT_EQ(got.solve_seconds, want.solve_seconds);
}

std::vector<fs::path> files_in(const fs::path& dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

TEST_F(RunFile, ReconstructionIsAppendedInPlaceDuringTheRun) {
  const fs::path file = dir / "run_000005.h5";
  const ReconstructionVolume v0 = recon_volume(100, 3, 1.0f), v1 = recon_volume(130, 2, 2.0f);
  ReconstructionSummary sum;
  sum.frames = 50;
  sum.volumes_done = 2;
  sum.volumes_dropped = 1;
  sum.volumes_failed = 0;
  {
    RunFileWriter w(file, recon_metadata());
    w.append(two_frames());
    w.flush();
    // The group, its parameters and the empty tables exist from the start.
    const RunFileContents empty = read_run_file(file);
    ASSERT_TRUE(empty.reconstruction_layout.has_value());
    EXPECT_EQ(*empty.reconstruction_layout, *recon_metadata().reconstruction);
    ASSERT_TRUE(empty.reconstruction_summary.has_value());
    EXPECT_EQ(empty.reconstruction_summary->volumes_done, 0u);
    EXPECT_TRUE(empty.reconstruction.empty());
    // Handed over from another thread, as the reconstruction stage does.
    std::thread t([&] { w.add_reconstruction(v0); });
    t.join();
    const RunFileContents one = read_run_file(file);
    ASSERT_EQ(one.reconstruction.size(), 1u);
    expect_volume(one.reconstruction[0], v0);
    EXPECT_TRUE(one.end_time.empty());
    std::thread t2([&] { w.add_reconstruction(v1); });
    t2.join();
    EXPECT_EQ(files_in(dir), std::vector<fs::path>{"run_000005.h5"}) << "no side file";
    w.set_reconstruction_summary(sum);
    w.close(nullptr);
    EXPECT_THROW(w.add_reconstruction(v0), OutputError);
  }
  EXPECT_EQ(files_in(dir), std::vector<fs::path>{"run_000005.h5"});
  const RunFileContents r = read_run_file(file);
  EXPECT_FALSE(r.end_time.empty());
  EXPECT_EQ(r.clusters.n_clusters(), 3u);
  ASSERT_TRUE(r.reconstruction_layout.has_value());
  EXPECT_EQ(*r.reconstruction_layout, *recon_metadata().reconstruction);
  EXPECT_EQ(r.reconstruction_layout->weight, "signal");
  EXPECT_EQ(r.reconstruction_layout->frames_per_slice, 10u);
  EXPECT_EQ(r.reconstruction_layout->slices, 3u);
  ASSERT_TRUE(r.reconstruction_summary.has_value());
  EXPECT_EQ(r.reconstruction_summary->frames, 50u);
  EXPECT_EQ(r.reconstruction_summary->volumes_done, 2u);
  EXPECT_EQ(r.reconstruction_summary->volumes_dropped, 1u);
  EXPECT_EQ(r.reconstruction_summary->volumes_failed, 0u);
  ASSERT_EQ(r.reconstruction.size(), 2u);
  expect_volume(r.reconstruction[0], v0);
  expect_volume(r.reconstruction[1], v1);
  EXPECT_TRUE(r.reconstruction[1].partial);
}

// Volumes from the reconstruction thread while the run's thread appends frames and flushes.
TEST_F(RunFile, VolumesAndFramesWrittenConcurrently) {
  const fs::path file = dir / "run_000010.h5";
  std::vector<ReconstructionVolume> volumes;
  for (int i = 0; i < 24; ++i) volumes.push_back(recon_volume(30 * i, i % 4 == 3 ? 2 : 3, 1.0f + i));
  {
    RunFileWriter w(file, recon_metadata());
    std::thread recon([&] {
      for (const auto& v : volumes) w.add_reconstruction(v);
    });
    for (int i = 0; i < 300; ++i) {
      w.append(two_frames());
      if (i % 10 == 0) w.flush();
    }
    recon.join();
    w.close(nullptr);
  }
  const RunFileContents r = read_run_file(file);
  EXPECT_EQ(r.frames.size(), 900u);
  EXPECT_EQ(r.clusters.n_clusters(), 900u);
  EXPECT_EQ(r.frames.back(), (FrameRow{1002, 0, 899, 1, 0}));
  ASSERT_EQ(r.reconstruction.size(), volumes.size());
  for (std::size_t i = 0; i < volumes.size(); ++i) expect_volume(r.reconstruction[i], volumes[i]);
}

// A reader in another process (SWMR) sees each volume once it is appended, and the volumes stay
// readable when the writing process dies without closing the file.
TEST_F(RunFile, ReconstructionVisibleToAnotherProcessAndAfterACrash) {
  const fs::path file = dir / "run_000009.h5";
  const ReconstructionVolume v0 = recon_volume(0, 3, 1.0f), v1 = recon_volume(30, 3, 3.0f);
  int to_parent[2], to_child[2];
  ASSERT_EQ(::pipe(to_parent), 0);
  ASSERT_EQ(::pipe(to_child), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // The writer: no gtest here; the exit code says how far it got.
    ::close(to_parent[0]);
    ::close(to_child[1]);
    char c = 0;
    auto step = [&](char s) { return ::write(to_parent[1], &s, 1) == 1 && ::read(to_child[0], &c, 1) == 1; };
    try {
      auto* w = new RunFileWriter(file, recon_metadata());  // never closed nor destroyed
      w->append(two_frames());
      w->flush();
      if (!step('0')) ::_exit(10);
      w->add_reconstruction(v0);
      if (!step('1')) ::_exit(11);
      w->add_reconstruction(v1);
      if (!step('2')) ::_exit(12);
    } catch (...) {
      ::_exit(13);
    }
    ::_exit(0);  // as if killed: no close, no HDF5 shutdown
  }
  ::close(to_parent[1]);
  ::close(to_child[0]);
  std::vector<std::size_t> seen;
  for (char want : {'0', '1', '2'}) {
    char got = 0;
    ASSERT_EQ(::read(to_parent[0], &got, 1), 1);
    ASSERT_EQ(got, want);
    const RunFileContents live = read_run_file(file);
    seen.push_back(live.reconstruction.size());
    EXPECT_TRUE(live.end_time.empty());
    EXPECT_EQ(live.frames.size(), 3u);
    if (!live.reconstruction.empty()) expect_volume(live.reconstruction[0], v0);
    ASSERT_EQ(::write(to_child[1], &got, 1), 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(seen, (std::vector<std::size_t>{0, 1, 2}));
  // After the abrupt end: both volumes, the parameters, the count from the table.
  const RunFileContents r = read_run_file(file);
  EXPECT_TRUE(r.end_time.empty());
  ASSERT_EQ(r.reconstruction.size(), 2u);
  expect_volume(r.reconstruction[0], v0);
  expect_volume(r.reconstruction[1], v1);
  ASSERT_TRUE(r.reconstruction_summary.has_value());
  EXPECT_EQ(r.reconstruction_summary->volumes_done, 2u);
  ASSERT_TRUE(r.reconstruction_layout.has_value());
  EXPECT_EQ(*r.reconstruction_layout, *recon_metadata().reconstruction);
  EXPECT_EQ(files_in(dir), std::vector<fs::path>{"run_000009.h5"});
  ::close(to_parent[0]);
  ::close(to_child[1]);
}

TEST_F(RunFile, NoReconstructionGroupWithoutTheStage) {
  const fs::path file = dir / "run_000006.h5";
  {
    RunFileWriter w(file, metadata());
    w.append(two_frames());
    EXPECT_THROW(w.add_reconstruction(recon_volume(0, 2, 1.0f)), OutputError);
    EXPECT_THROW(w.set_reconstruction_summary(ReconstructionSummary{}), OutputError);
    w.close(nullptr);
  }
  const RunFileContents r = read_run_file(file);
  EXPECT_FALSE(r.reconstruction_summary.has_value());
  EXPECT_FALSE(r.reconstruction_layout.has_value());
  EXPECT_TRUE(r.reconstruction.empty());
}

TEST_F(RunFile, ReconstructionVolumeOfTheWrongSizeIsRejected) {
  RunFileWriter w(dir / "run_000007.h5", recon_metadata());
  ReconstructionVolume v = recon_volume(0, 2, 1.0f);
  v.output.pop_back();
  EXPECT_THROW(w.add_reconstruction(v), std::invalid_argument);
  ReconstructionVolume deep = recon_volume(0, 4, 1.0f);  // the file holds 3 slices
  EXPECT_THROW(w.add_reconstruction(deep), std::invalid_argument);
  ReconstructionVolume wide = recon_volume(0, 2, 1.0f);
  wide.nx = 12;
  wide.ny = 2;
  EXPECT_THROW(w.add_reconstruction(wide), std::invalid_argument);
  w.close(nullptr);
  EXPECT_TRUE(read_run_file(dir / "run_000007.h5").reconstruction.empty());
}

TEST_F(RunFile, ReconstructionReadableByH5pyDuringAndAfterTheRun) {
  if (std::system("/usr/bin/python3 -c 'import h5py' >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "h5py is not installed (scripts/setup.sh installs python3-h5py)";
  const fs::path file = dir / "run_000008.h5";
  const fs::path script = dir / "check.py";
  std::ofstream(script)
      << "import h5py, math, sys\n"
         "f = h5py.File(sys.argv[1], 'r', libver='latest', swmr=True)\n"
         "g = f['entry/reconstruction']\n"
         "assert g.attrs['NX_class'] == 'NXprocess'\n"
         "assert g.attrs['lambda'] == 0.125 and g.attrs['slices'] == 3\n"
         "assert g.attrs['forward'] == 'gaussian:1,1,0.5' and g.attrs['weight'] == 'signal'\n"
         "n = int(sys.argv[2])\n"
         "for name in ('input', 'output'):\n"
         "    assert g[name].shape == (n, 3, 4, 6), g[name].shape\n"
         "    assert g[name].dtype == 'float32'\n"
         "    assert g[name].chunks == (1, 1, 4, 6)\n"
         "assert len(g['first_frame']) == n and len(g['status']) == n\n"
         "assert g['input'][0, 0, 0, 1] == 1.0 and g['output'][0, 0, 0, 1] == 0.75\n"
         "assert g['first_frame'][0] == 7 and g['iterations'][0] == 200\n"
         "assert g['device'][0] == b'cpu' and g['status'][0] == 0\n"
         "if n > 1:\n"
         "    assert g['status'][1] == 1 and g['slices'][1] == 2\n"
         "    assert math.isnan(g['input'][1, 2, 0, 0])\n"
         "assert ('volumes_written' in g.attrs) == (sys.argv[3] == 'closed')\n";
  auto check = [&](int n, const char* state) {
    const std::string cmd = "/usr/bin/python3 " + script.string() + " " + file.string() + " " +
                            std::to_string(n) + " " + state;
    return std::system(cmd.c_str());
  };
  {
    RunFileWriter w(file, recon_metadata());
    w.add_reconstruction(recon_volume(7, 3, 1.0f));
    EXPECT_EQ(check(1, "open"), 0) << "h5py (SWMR) during the run";
    w.add_reconstruction(recon_volume(37, 2, 1.0f));
    w.set_reconstruction_summary(ReconstructionSummary{50, 2, 0, 0});
    w.close(nullptr);
  }
  EXPECT_EQ(check(2, "closed"), 0);
}
