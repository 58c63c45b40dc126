// Storage faults during a real run over loopback (simulator -> Acquisition -> run file): a disk
// that fills ends the run cleanly (disk_low); one filled between two checks fails the run but
// keeps every flushed row; a removed directory or replaced file ends the run within a flush.
#include <gtest/gtest.h>

#include <hdf5.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <thread>

#include "glint/config/config.hpp"
#include "glint/pipeline/acquisition.hpp"
#include "glint/pipeline/run_file.hpp"
#include "glint/pipeline/stream_simulator.hpp"
#include "stream_test_util.hpp"
#include "tmpfs_mount.hpp"

using namespace glint;
using namespace glint::pipeline;
using namespace std::chrono_literals;
namespace fs = std::filesystem;
using glint::testing::TmpfsMount;

namespace {

constexpr uint64_t kMiB = 1024 * 1024;

struct Case {
  config::Config cfg;
  SimOptions sim;
};

/// A 48 x 64 detector with many photons per frame (about 2 KB of clusters a frame), frames
/// sent as fast as they are generated until the test stops the sender.
Case make_case(const std::string& name, const fs::path& dir) {
  Case c;
  c.cfg = config::load(fs::path(GLINT_SOURCE_DIR) / "config/glintd.example.yaml");
  c.cfg.detector.rows = 48;
  c.cfg.detector.cols = 64;
  const auto ep = glint::testing::loopback(glint::testing::free_tcp_port());
  c.cfg.ingest.endpoints = {ep};
  c.sim.endpoints = {ep};
  c.cfg.pedestal.dark_frames = 20;
  c.cfg.pedestal.window = 20;
  c.cfg.finder.backend = "cpu";
  c.cfg.finder.batch_frames = 16;
  c.cfg.output.directory = dir;
  c.cfg.output.run_name = name;
  c.cfg.output.flush_interval_ms = 100;
  c.sim.image.rows = 48;
  c.sim.image.cols = 64;
  c.sim.image.photons = 40;
  c.sim.dark_frames = 20;
  c.sim.frames = 1'000'000;
  c.sim.first_frame_number = 1;
  c.sim.send_end = false;
  c.sim.wait_subscribers_ms = 5000;
  return c;
}

FinderParams params_of(const config::Config& c) {
  FinderParams p;
  p.shape = {c.detector.rows, c.detector.cols};
  p.cluster_size = c.finder.cluster_size;
  p.n_sigma = c.finder.n_sigma;
  p.pedestal_window = c.pedestal.window;
  return p;
}

void expect_reference_clusters(const Case& c, const RunFileContents& f) {
  const ClusterTable want = glint::testing::expected_clusters(
      f, c.sim.image, c.sim.first_frame_number, c.sim.dark_frames, params_of(c.cfg));
  EXPECT_EQ(f.clusters.n_clusters(), want.n_clusters());
  EXPECT_TRUE(f.clusters == want) << "clusters differ from the reference finder";
}

bool opens_plainly(const fs::path& file) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  const hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  H5Pset_libver_bounds(fapl, H5F_LIBVER_LATEST, H5F_LIBVER_LATEST);
  const hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, fapl);
  H5Pclose(fapl);
  if (f < 0) return false;
  H5Fclose(f);
  return true;
}

fs::path test_dir() {
  return fs::temp_directory_path() /
         ("glint_storage_run_" + std::to_string(::getpid()) + "_" +
          ::testing::UnitTest::GetInstance()->current_test_info()->name());
}

/// Waits until `pred()` or the timeout; returns pred().
template <class P>
bool wait_for(P pred, std::chrono::milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (!pred() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(5ms);
  return pred();
}

}  // namespace

// The disk fills during the run: at the first flush below the reserve the run ends cleanly
// with end reason disk_low (not an error), in the stats and in the file, which opens as any
// closed file does and holds every row written, with the reference finder's clusters.
TEST(StorageRun, DiskLowEndsTheRunCleanly) {
  for (const uint64_t size : {12 * kMiB, 20 * kMiB}) {
    TmpfsMount mnt(test_dir() / std::to_string(size), size);
    if (!mnt.mounted()) GTEST_SKIP() << mnt.why_not();
    const Case c = make_case("disk_low", mnt.dir());
    std::atomic<bool> stop{false};
    RunStats s;
    fs::path file;
    {
      Acquisition run(c.cfg, 1, std::nullopt);
      std::jthread sender([&] { run_stream_simulator(c.sim, &stop); });
      EXPECT_TRUE(run.wait(120s)) << "the run did not end on a filling disk";
      stop = true;
      s = run.stats();
      file = run.file();
    }
    EXPECT_EQ(s.error, "");
    EXPECT_EQ(s.state, RunState::idle);
    EXPECT_EQ(s.end_reason, "disk_low");
    EXPECT_LT(s.disk_free_bytes, s.disk_reserve_bytes);
    ASSERT_TRUE(opens_plainly(file));
    const RunFileContents f = read_run_file(file);
    std::printf("tmpfs %llu MiB: disk_low with %.2f MiB free (reserve %.2f MiB), %.2f MiB free "
                "after close; %llu rows written, %zu readable, %llu clusters\n",
                (unsigned long long)(size / kMiB), s.disk_free_bytes / double(kMiB),
                s.disk_reserve_bytes / double(kMiB), mnt.free_bytes() / double(kMiB),
                (unsigned long long)s.rows_written, f.frames.size(),
                (unsigned long long)f.clusters.n_clusters());
    EXPECT_GT(s.rows_written, 1000u);
    EXPECT_EQ(f.frames.size(), s.rows_written);
    EXPECT_EQ(f.clusters.n_clusters(), s.clusters);
    EXPECT_EQ(f.end_reason, "disk_low");
    EXPECT_FALSE(f.end_time.empty());
    EXPECT_TRUE(f.end_state.has_value());
    expect_reference_clusters(c, f);
  }
  fs::remove_all(test_dir());
}

// The disk is filled from outside between two checks: the writes HDF5 makes until the next
// check land in blocks claimed beforehand (fallocate beyond the file's end), so none fails;
// that check cannot claim the next reserve and the run ends cleanly (disk_low) with every row
// it wrote in a file that opens normally. (Before the space was claimed, a write failed with
// ENOSPC here, and HDF5 1.10 at times corrupted the heap doing so.)
TEST(StorageRun, DiskFilledBetweenChecksKeepsEveryFlushedRow) {
  TmpfsMount mnt(test_dir(), 16 * kMiB);
  if (!mnt.mounted()) GTEST_SKIP() << mnt.why_not();
  Case c = make_case("disk_full", mnt.dir());
  c.cfg.output.flush_interval_ms = 300;
  std::atomic<bool> stop{false};
  RunStats s;
  fs::path file;
  {
    Acquisition run(c.cfg, 1, std::nullopt);
    std::jthread sender([&] { run_stream_simulator(c.sim, &stop); });
    // Once a flush has made data rows visible (SWMR read), fill the disk at once.
    ASSERT_TRUE(wait_for(
        [&] {
          try {
            return glint::testing::count_rows(read_run_file(run.file()), 0) > 0;
          } catch (const OutputError&) {
            return false;  // not created yet
          }
        },
        20s));
    mnt.fill_to(0);
    EXPECT_EQ(mnt.free_bytes(), 0u);
    EXPECT_TRUE(run.wait(30s));
    stop = true;
    s = run.stats();
    file = run.file();
  }
  EXPECT_EQ(s.error, "");
  EXPECT_EQ(s.state, RunState::idle);
  EXPECT_EQ(s.end_reason, "disk_low");
  ASSERT_TRUE(opens_plainly(file));
  const RunFileContents f = read_run_file(file);
  std::printf("tmpfs 16 MiB filled during the run: %llu rows written, %zu readable (%llu "
              "clusters)\n",
              (unsigned long long)s.rows_written, f.frames.size(),
              (unsigned long long)f.clusters.n_clusters());
  EXPECT_GT(f.frames.size(), 0u);
  EXPECT_EQ(f.frames.size(), s.rows_written);
  EXPECT_EQ(f.clusters.n_clusters(), s.clusters);
  EXPECT_EQ(f.end_reason, "disk_low");
  EXPECT_FALSE(f.end_time.empty());
  expect_reference_clusters(c, f);
}

// The output directory is removed mid-run: noticed at the next flush, the run ends with an
// error naming the file and what happened.
TEST(StorageRun, RemovedOutputDirectoryEndsTheRunWithinAFlush) {
  const fs::path dir = test_dir();
  fs::create_directories(dir);
  Case c = make_case("removed", dir / "out");
  c.cfg.output.flush_interval_ms = 200;
  c.sim.rate_hz = 2000;
  std::atomic<bool> stop{false};
  Acquisition run(c.cfg, 1, std::nullopt);
  std::jthread sender([&] { run_stream_simulator(c.sim, &stop); });
  ASSERT_TRUE(wait_for([&] { return run.stats().rows_written > 100; }, 20s));
  fs::remove_all(dir / "out");
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(run.wait(5s));
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  stop = true;
  const RunStats s = run.stats();
  EXPECT_LT(took, 0.2 * 2 + 0.3) << "noticed after " << took << " s";
  EXPECT_EQ(s.state, RunState::error);
  EXPECT_NE(s.error.find(run.file().string()), std::string::npos) << s.error;
  EXPECT_NE(s.error.find("output directory"), std::string::npos) << s.error;
  EXPECT_NE(s.error.find("is gone"), std::string::npos) << s.error;
  fs::remove_all(dir);
}

// The file is replaced by another under its name: the run ends with an error, and the file
// now at the path is left as it is (nothing written through the name at close).
TEST(StorageRun, ReplacedFileEndsTheRunAndTheNewFileIsUntouched) {
  const fs::path dir = test_dir();
  fs::remove_all(dir);
  fs::create_directories(dir);
  Case c = make_case("replaced", dir);
  c.cfg.output.flush_interval_ms = 200;
  c.sim.rate_hz = 2000;
  std::atomic<bool> stop{false};
  Acquisition run(c.cfg, 1, std::nullopt);
  std::jthread sender([&] { run_stream_simulator(c.sim, &stop); });
  ASSERT_TRUE(wait_for([&] { return run.stats().rows_written > 100; }, 20s));
  fs::rename(run.file(), dir / "moved.h5");
  const std::string text = "not a run file\n";
  std::ofstream(run.file()) << text;
  EXPECT_TRUE(run.wait(5s));
  stop = true;
  const RunStats s = run.stats();
  EXPECT_EQ(s.state, RunState::error);
  EXPECT_NE(s.error.find("names another file"), std::string::npos) << s.error;
  std::ifstream in(run.file());
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), text);
  fs::remove_all(dir);
}
