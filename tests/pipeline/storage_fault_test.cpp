// Storage faults on real small file systems (tmpfs): a run file on a filling disk ends cleanly
// (disk_low) and opens normally; a write that fails anyway leaves the file readable with every
// row of its last flush; a file is never written through an existing name.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <hdf5.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "glint/pipeline/run_file.hpp"
#include "tmpfs_mount.hpp"

namespace fs = std::filesystem;
using namespace glint;
using namespace glint::pipeline;
using glint::testing::TmpfsMount;

namespace {

constexpr uint64_t kMiB = 1024 * 1024;
constexpr uint64_t kFirstFrame = 5000;

RunMetadata metadata() {
  RunMetadata m;
  m.finder.shape = {48, 64};
  m.finder.cluster_size = 3;
  m.finder.n_sigma = 5.0;
  m.finder.pedestal_window = 100;
  m.config_yaml = "detector:\n  rows: 48\n";
  m.detector_type = "MOENCH";
  m.source = "storage test";
  m.backend = "cpu reference";
  return m;
}

/// Clusters of frame `fn`: a count and values that depend on the frame number only.
uint32_t clusters_of(uint64_t fn, uint32_t per_frame) { return uint32_t(fn % (2 * per_frame + 1)); }
int32_t value_of(uint64_t fn, uint32_t k, uint32_t i) { return int32_t(fn * 31 + k * 7 + i); }

ClusterTable frames_from(uint64_t first, uint32_t n, uint32_t per_frame) {
  ClusterTable t(3);
  std::vector<int32_t> d(9);
  for (uint64_t fn = first; fn < first + n; ++fn) {
    t.begin_frame(fn);
    for (uint32_t k = 0; k < clusters_of(fn, per_frame); ++k) {
      for (uint32_t i = 0; i < 9; ++i) d[i] = value_of(fn, k, i);
      t.add_cluster(uint16_t(k % 64), uint16_t(fn % 48), d);
    }
  }
  return t;
}

PedestalState pedestal(FrameShape s) {
  PedestalState p(s, 100);
  for (std::size_t i = 0; i < s.pixels(); ++i) {
    p.count[i] = 100;
    p.sum[i] = (500.0 + i) * 100.0;
    p.sum2[i] = (500.0 + i) * (500.0 + i) * 100.0 + 900.0;
  }
  return p;
}

/// Every row of `r` is frame kFirstFrame + i with exactly its clusters (the first difference
/// fails the test).
void expect_rows_intact(const RunFileContents& r, uint32_t per_frame) {
  uint64_t c = 0;
  for (std::size_t i = 0; i < r.frames.size(); ++i) {
    const uint64_t fn = kFirstFrame + i;
    const FrameRow& row = r.frames[i];
    ASSERT_EQ(row.frame_number, fn) << "row " << i;
    ASSERT_EQ(row.n_clusters, clusters_of(fn, per_frame)) << "row " << i;
    ASSERT_EQ(row.cluster_offset, c) << "row " << i;
    for (uint32_t k = 0; k < row.n_clusters; ++k, ++c) {
      ASSERT_EQ(r.clusters.x()[c], k % 64);
      ASSERT_EQ(r.clusters.y()[c], fn % 48);
      const auto d = r.clusters.cluster_data(c);
      for (uint32_t i2 = 0; i2 < 9; ++i2) ASSERT_EQ(d[i2], value_of(fn, k, i2)) << "row " << i;
    }
  }
  EXPECT_EQ(r.clusters.n_clusters(), c);
}

/// Opens `file` as h5py and h5dump do by default (no SWMR): true when HDF5 accepts it.
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

bool tool(const std::string& name) { return fs::exists("/usr/bin/" + name); }

int run(const std::string& cmd) { return std::system((cmd + " >/dev/null 2>&1").c_str()); }

struct Trial {
  uint64_t fs_bytes;        ///< tmpfs size
  uint64_t free_at_start;   ///< left free by the filler before the run file is created
  uint32_t batch_frames;    ///< frames per append
  uint32_t appends_per_flush;
  uint32_t per_frame;       ///< clusters per frame, on average
};

class StorageFault : public ::testing::Test {
 protected:
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(base(), ec);  // the mounts in it are gone by now
  }
  fs::path base() const {
    return fs::temp_directory_path() /
           ("glint_storage_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
  }
};

}  // namespace

// The writer goes on past the reserve (as if the check were not there) until a write fails:
// at several fill points, in appends (chunks evicted from the cache) and in flushes (metadata
// and chunks written together). The file then holds every row of the last successful flush,
// with its clusters; it opens in SWMR read mode as it is and plainly after `h5clear -s`.
TEST_F(StorageFault, AFailedWriteKeepsEveryRowOfTheLastFlush) {
  const std::vector<Trial> trials{
      {12 * kMiB, 12 * kMiB, 64, 4, 8},   {12 * kMiB, 6 * kMiB, 64, 4, 8},
      {12 * kMiB, 5 * kMiB, 16, 16, 8},   {12 * kMiB, 4 * kMiB, 256, 1, 20},
      {20 * kMiB, 20 * kMiB, 32, 8, 12},  {20 * kMiB, 9 * kMiB, 512, 2, 4},
      {40 * kMiB, 40 * kMiB, 128, 4, 16}, {12 * kMiB, 7 * kMiB, 4, 64, 8},
      // Appends larger than the chunk cache: chunks go to the file within the append.
      {12 * kMiB, 12 * kMiB, 2048, 1, 30}, {20 * kMiB, 11 * kMiB, 8192, 1, 20},
      {40 * kMiB, 40 * kMiB, 16384, 1, 24},
  };
  int failed_in_flush = 0, failed_in_append = 0;
  for (std::size_t t = 0; t < trials.size(); ++t) {
    const Trial& tr = trials[t];
    TmpfsMount mnt(base() / std::to_string(t), tr.fs_bytes);
    if (!mnt.mounted()) GTEST_SKIP() << mnt.why_not();
    if (tr.free_at_start < tr.fs_bytes) mnt.fill_to(tr.free_at_start);
    const fs::path file = mnt.dir() / "run_000001.h5";
    uint64_t flushed = 0, next = kFirstFrame;
    bool in_flush = false;
    {
      RunFileWriter w(file, metadata());
      w.write_start_pedestal(pedestal(metadata().finder.shape));
      try {
        for (uint32_t a = 1;; ++a) {
          w.append(frames_from(next, tr.batch_frames, tr.per_frame));
          next += tr.batch_frames;
          if (a % tr.appends_per_flush == 0) {
            in_flush = true;
            (void)w.flush();  // the reserve is ignored here
            in_flush = false;
            flushed = w.frames_written();
          }
        }
      } catch (const OutputError& e) {
        EXPECT_NE(std::string(e.what()).find(file.string()), std::string::npos) << e.what();
      }
      EXPECT_TRUE(w.failed());
      const auto end = pedestal(metadata().finder.shape);
      EXPECT_NO_THROW(w.close(&end));  // after the failure: closed without writing more
    }
    (in_flush ? failed_in_flush : failed_in_append)++;
    const RunFileContents r = read_run_file(file);  // SWMR read: as it is
    std::printf("tmpfs %3llu MiB, %4.1f MiB free at start, %3u frames x %2u appends per flush: "
                "failed in %-6s after %6llu rows; %6llu flushed, %6zu readable, %7llu clusters\n",
                (unsigned long long)(tr.fs_bytes / kMiB), tr.free_at_start / double(kMiB),
                tr.batch_frames, tr.appends_per_flush, in_flush ? "flush" : "append",
                (unsigned long long)(next - kFirstFrame), (unsigned long long)flushed,
                r.frames.size(), (unsigned long long)r.clusters.n_clusters());
    EXPECT_GT(flushed, 0u);
    EXPECT_EQ(r.frames.size(), flushed) << "trial " << t;
    expect_rows_intact(r, tr.per_frame);
    EXPECT_TRUE(r.end_time.empty());
    EXPECT_EQ(r.start_mean[1], 501.0);
    // A plain open (h5py's default, h5dump) needs the SWMR-writing flag cleared first; in
    // place, on the full file system.
    EXPECT_FALSE(opens_plainly(file));
    if (tool("h5clear")) {
      ASSERT_EQ(run("/usr/bin/h5clear -s " + file.string()), 0) << "trial " << t;
      EXPECT_TRUE(opens_plainly(file)) << "trial " << t;
      if (tool("h5dump")) {
        EXPECT_EQ(run("/usr/bin/h5dump -H " + file.string()), 0);
      }
      const RunFileContents again = read_run_file(file);
      EXPECT_EQ(again.frames.size(), flushed);
    }
  }
  EXPECT_GT(failed_in_flush, 0) << "no trial failed during a flush (metadata and chunks)";
  EXPECT_GT(failed_in_append, 0) << "no trial failed during an append";
}

// Honouring the check: the run stops at the first flush below the reserve, and everything
// written, the end pedestal and the end reason are in a file that opens normally.
TEST_F(StorageFault, DiskLowEndsCleanlyWithEverythingWritten) {
  const std::vector<Trial> trials{
      {12 * kMiB, 12 * kMiB, 64, 4, 8},   {12 * kMiB, 4 * kMiB, 256, 1, 20},
      {20 * kMiB, 20 * kMiB, 512, 8, 12}, {12 * kMiB, 6 * kMiB, 1024, 2, 30},
      {40 * kMiB, 40 * kMiB, 128, 4, 16},
  };
  for (std::size_t t = 0; t < trials.size(); ++t) {
    const Trial& tr = trials[t];
    TmpfsMount mnt(base() / std::to_string(t), tr.fs_bytes);
    if (!mnt.mounted()) GTEST_SKIP() << mnt.why_not();
    if (tr.free_at_start < tr.fs_bytes) mnt.fill_to(tr.free_at_start);
    const fs::path file = mnt.dir() / "run_000001.h5";
    uint64_t next = kFirstFrame, written = 0;
    StorageCheck last;
    {
      RunFileWriter w(file, metadata());
      w.write_start_pedestal(pedestal(metadata().finder.shape));
      for (uint32_t a = 1;; ++a) {
        w.append(frames_from(next, tr.batch_frames, tr.per_frame));
        next += tr.batch_frames;
        if (a % tr.appends_per_flush == 0) {
          last = w.flush();
          ASSERT_NE(last.result, StorageCheck::Result::lost) << last.message;
          if (last.result == StorageCheck::Result::disk_low) break;
        }
      }
      written = w.frames_written();
      w.set_end_reason("disk_low");
      const auto end = pedestal(metadata().finder.shape);
      ASSERT_NO_THROW(w.close(&end));
      EXPECT_FALSE(w.failed());
    }
    EXPECT_NE(last.message.find(file.string()), std::string::npos) << last.message;
    EXPECT_LT(last.free_bytes, last.reserve_bytes);
    EXPECT_GE(last.reserve_bytes, StorageGuard::kMetadataReserve);
    ASSERT_TRUE(opens_plainly(file));
    if (tool("h5dump")) {
      EXPECT_EQ(run("/usr/bin/h5dump -H " + file.string()), 0);
    }
    const RunFileContents r = read_run_file(file);
    std::printf("tmpfs %3llu MiB, %4.1f MiB free at start, %4u frames x %u appends per flush: "
                "disk_low at %4.2f MiB free (reserve %4.2f MiB); %6llu rows written, %6zu "
                "readable, %7llu clusters; %.2f MiB left after close\n",
                (unsigned long long)(tr.fs_bytes / kMiB), tr.free_at_start / double(kMiB),
                tr.batch_frames, tr.appends_per_flush, last.free_bytes / double(kMiB),
                last.reserve_bytes / double(kMiB), (unsigned long long)written, r.frames.size(),
                (unsigned long long)r.clusters.n_clusters(), mnt.free_bytes() / double(kMiB));
    EXPECT_EQ(r.frames.size(), written);
    expect_rows_intact(r, tr.per_frame);
    EXPECT_EQ(r.end_reason, "disk_low");
    EXPECT_FALSE(r.end_time.empty());
    ASSERT_TRUE(r.end_state.has_value());
    EXPECT_EQ(*r.end_state, pedestal(metadata().finder.shape));
  }
}

// The reserve is claimed, not just observed: while the file is written, at least the reserve
// of the last check is allocated beyond its end (st_blocks beyond st_size), its size stays what
// HDF5 wrote; after close the file takes no more blocks than its size rounded up to blocks.
TEST_F(StorageFault, TheReserveIsPreallocatedWhileWritingAndReleasedAtClose) {
  TmpfsMount mnt(base(), 40 * kMiB);
  if (!mnt.mounted()) GTEST_SKIP() << mnt.why_not();
  const fs::path file = mnt.dir() / "run_000001.h5";
  const auto allocated = [&] {
    struct stat st {};
    EXPECT_EQ(::stat(file.c_str(), &st), 0);
    return std::pair<uint64_t, uint64_t>{uint64_t(st.st_size), uint64_t(st.st_blocks) * 512};
  };
  uint64_t next = kFirstFrame;
  {
    RunFileWriter w(file, metadata());
    w.write_start_pedestal(pedestal(metadata().finder.shape));
    for (int f = 0; f < 6; ++f) {
      for (int a = 0; a < 4; ++a) {
        w.append(frames_from(next, 256, 10));
        next += 256;
      }
      const StorageCheck c = w.flush();
      ASSERT_EQ(c.result, StorageCheck::Result::ok) << c.message;
      const auto [size, blocks] = allocated();
      EXPECT_GE(blocks, size + c.reserve_bytes) << "flush " << f;
      EXPECT_GE(c.reserve_bytes, StorageGuard::kMetadataReserve);
      const StorageCheck between = w.check_storage();
      ASSERT_EQ(between.result, StorageCheck::Result::ok) << between.message;
      const auto [size2, blocks2] = allocated();
      EXPECT_GE(blocks2, size2 + between.reserve_bytes) << "check after flush " << f;
    }
    const auto end = pedestal(metadata().finder.shape);
    ASSERT_NO_THROW(w.close(&end));
    EXPECT_FALSE(w.failed());
  }
  const auto [size, blocks] = allocated();
  const uint64_t page = uint64_t(::sysconf(_SC_PAGESIZE));
  EXPECT_EQ(blocks, (size + page - 1) / page * page) << "size " << size;
  const RunFileContents r = read_run_file(file);
  EXPECT_EQ(r.frames.size(), next - kFirstFrame);
  expect_rows_intact(r, 10);
  ASSERT_TRUE(opens_plainly(file));
}

// A reader in the process writing the file shares HDF5's objects with the writer, which extends
// the datasets between the reader's calls: every read sees whole rows, never more than its
// buffer holds (a read of the whole dataset once overran its buffer here, corrupting the heap).
TEST_F(StorageFault, ReadingWhileWritingInTheSameProcess) {
  fs::create_directories(base());
  const fs::path file = base() / "run_000001.h5";
  std::atomic<bool> done{false};
  std::atomic<uint64_t> written{0};
  {
    RunFileWriter w(file, metadata());
    w.write_start_pedestal(pedestal(metadata().finder.shape));
    std::thread writer([&] {
      uint64_t next = kFirstFrame;
      for (int a = 0; a < 4000; ++a) {
        w.append(frames_from(next, 16, 6));
        next += 16;
        if (a % 4 == 3) (void)w.flush();
      }
      written = next - kFirstFrame;
      done = true;
    });
    std::size_t reads = 0, last = 0;
    while (!done.load()) {
      RunFileContents r = read_run_file(file);
      ASSERT_GE(r.frames.size(), last);
      last = r.frames.size();
      // Clusters are read after the rows: those of rows written since are left out here.
      const std::size_t c = r.frames.empty() ? 0
                                             : r.frames.back().cluster_offset +
                                                   r.frames.back().n_clusters;
      ASSERT_GE(r.clusters.n_clusters(), c);
      r.clusters.x_mut().resize(c);
      r.clusters.y_mut().resize(c);
      r.clusters.data_mut().resize(c * 9);
      expect_rows_intact(r, 6);
      ++reads;
    }
    writer.join();
    std::printf("%zu reads while writing, the last with %zu rows\n", reads, last);
    EXPECT_GT(reads, 0u);
    w.close(nullptr);
  }
  EXPECT_EQ(read_run_file(file).frames.size(), written.load());
}

// A disk without room for a run's file and its close: no file is created.
TEST_F(StorageFault, TooLittleSpaceToStartCreatesNoFile) {
  TmpfsMount mnt(base(), 4 * kMiB);
  if (!mnt.mounted()) GTEST_SKIP() << mnt.why_not();
  mnt.fill_to(kMiB);
  const fs::path file = mnt.dir() / "run_000001.h5";
  try {
    RunFileWriter w(file, metadata());
    FAIL() << "a run file was created with 1 MiB free";
  } catch (const OutputError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(file.string()), std::string::npos) << what;
    EXPECT_NE(what.find("disk low"), std::string::npos) << what;
  }
  EXPECT_FALSE(fs::exists(file));
}

// Creation that fails half way (here a layout HDF5 accepts but the writer refuses after the
// file exists) leaves nothing behind: a daemon retrying a failing start makes no empty files.
TEST_F(StorageFault, CreationFailingHalfWayLeavesNoFile) {
  const fs::path dir = base();
  fs::create_directories(dir);
  RunMetadata bad = metadata();
  bad.reconstruction = ReconstructionLayout{};  // 0 x 0 x 0 volumes
  const fs::path file = dir / "run_000001.h5";
  EXPECT_THROW(RunFileWriter(file, bad), OutputError);
  EXPECT_FALSE(fs::exists(file));
  fs::remove_all(dir);
}
