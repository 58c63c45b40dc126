// End-to-end over loopback, in-process: the simulator publishes, an Acquisition ingests, finds
// and writes; the run file is read back and compared with the reference finder.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <algorithm>
#include <fstream>

#include <fmt/format.h>
#include <thread>

#include "glint/config/config.hpp"
#include "glint/pipeline/acquisition.hpp"
#include "glint/pipeline/frame_assembler.hpp"
#include "glint/pipeline/ingest.hpp"
#include "glint/pipeline/run_file.hpp"
#include "glint/pipeline/stream_simulator.hpp"
#include "gpu_test.hpp"
#include "simulated_run.hpp"
#include "stream_test_util.hpp"

using namespace glint;
using namespace glint::pipeline;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

using Case = glint::testing::SimulatedRun;

/// A small detector and run on fresh loopback ports; `ports` ports per image.
Case make_case(const std::string& name, uint32_t ports_x = 1, uint32_t ports_y = 1, uint32_t endpoints = 1) {
  return glint::testing::small_detector_run(name, ports_x, ports_y, endpoints);
}

FinderParams params_of(const config::Config& c) {
  FinderParams p;
  p.shape = {c.detector.rows, c.detector.cols};
  p.cluster_size = c.finder.cluster_size;
  p.n_sigma = c.finder.n_sigma;
  p.pedestal_window = c.pedestal.window;
  return p;
}

struct Result {
  RunStats stats;
  RunFileContents file;
  SimReport sent;
};

Result run_case(const Case& c, std::optional<PedestalState> previous = std::nullopt) {
  Acquisition run(c.cfg, 1, std::move(previous));
  const SimReport sent = run_stream_simulator(c.sim);
  EXPECT_TRUE(sent.subscribers_seen);
  EXPECT_TRUE(run.wait(20s)) << "the run did not end on the end message";
  Result r{run.stats(), read_run_file(run.file()), sent};
  EXPECT_EQ(r.stats.error, "");
  return r;
}

void expect_clusters_match(const Case& c, const Result& r) {
  const ClusterTable want = glint::testing::expected_clusters(r.file, c.sim.image, c.sim.first_frame_number,
                                                              c.sim.dark_frames, params_of(c.cfg), c.sim.bitmode);
  EXPECT_EQ(r.file.clusters.frames().size(), want.frames().size());
  EXPECT_EQ(r.file.clusters.n_clusters(), want.n_clusters());
  EXPECT_TRUE(r.file.clusters == want) << "clusters differ from the reference finder";
}

}  // namespace

TEST(Acquisition, OnePortClustersEqualTheReferenceFinder) {
  Case c = make_case("one_port");
  c.cfg.ingest.copy_threads = 3;  // images copied into the finder's input on three threads
  const Result r = run_case(c);
  ASSERT_EQ(r.file.frames.size(), 80u);
  for (std::size_t i = 0; i < r.file.frames.size(); ++i) {
    EXPECT_EQ(r.file.frames[i].frame_number, 1000 + i);
    EXPECT_EQ(r.file.frames[i].flags, i < 20 ? kFlagDark : 0) << i;
    EXPECT_EQ(r.file.frames[i].timestamp, (1000 + i) * 10000);
  }
  EXPECT_EQ(r.stats.dark_frames, 20u);
  EXPECT_EQ(r.stats.data_frames, 60u);
  EXPECT_EQ(r.stats.end_reason, "end of acquisition");
  EXPECT_GT(r.stats.clusters, 60u * 5);  // ~12 photons per frame
  EXPECT_EQ(r.stats.clusters, r.file.clusters.n_clusters());
  EXPECT_TRUE(r.stats.module_clusters.empty()) << "one module: no per-module counts";
  EXPECT_FALSE(r.file.end_time.empty());
  EXPECT_NE(r.file.config_yaml.find("detector"), std::string::npos);
  ASSERT_TRUE(r.file.end_state.has_value());
  expect_clusters_match(c, r);
}

TEST(Acquisition, FourPortsOnTwoEndpointsAssembleLikeOneImage) {
  Case c = make_case("four_ports", 2, 2, 2);
  // Two ingest threads on two cores can drift apart by many frames in an unthrottled burst:
  // let images wait for their parts (time-out or end of data) rather than count-evict them.
  c.cfg.ingest.reorder_frames = 200;
  c.cfg.ingest.copy_threads = 2;
  const Result r = run_case(c);
  ASSERT_EQ(r.file.frames.size(), 80u);
  EXPECT_EQ(r.stats.late_parts, 0u);
  EXPECT_EQ(r.stats.parts, 320u);
  EXPECT_EQ(r.stats.incomplete, 0u);
  EXPECT_EQ(glint::testing::count_rows(r.file, 0), 60u);
  expect_clusters_match(c, r);
}

TEST(Acquisition, EveryBitmodeAndHeaderVersion4) {
  for (uint32_t bm : {4u, 8u, 32u}) {
    Case c = make_case("bitmode" + std::to_string(bm), 1, 2, 1);  // two ports, one endpoint
    c.sim.bitmode = bm;
    c.sim.jsonversion = 4;
    if (bm == 4) {  // values 0..15
      c.sim.image.pedestal = 4;
      c.sim.image.pedestal_spread = 1;
      c.sim.image.noise = 0.8;
      c.sim.image.photon_adu = 30;
    } else if (bm == 8) {
      c.sim.image.pedestal = 60;
      c.sim.image.pedestal_spread = 5;
      c.sim.image.noise = 3;
      c.sim.image.photon_adu = 150;
    } else {
      c.sim.image.pedestal = 40000;  // 32 bits carry what 16 bits hold
    }
    const Result r = run_case(c);
    EXPECT_EQ(r.file.frames.size(), 80u) << bm;
    EXPECT_EQ(r.stats.bad_total, 0u) << bm;
    expect_clusters_match(c, r);
  }
}

TEST(Acquisition, EveryBadInputKindIsCountedAndSkipped) {
  Case c = make_case("bad_input", 2, 1, 1);
  c.sim.frames = 80;
  using F = SimFault;
  c.sim.faults = {{F::malformed, 13},    {F::data_without_header, 17}, {F::wrong_shape, 7},
                  {F::unknown_bitmode, 9}, {F::size_mismatch, 11},       {F::missing_field, 19},
                  {F::unknown_port, 23},   {F::backwards, 29},           {F::drop_part, 31},
                  {F::gap, 37},            {F::incomplete, 41}};
  c.cfg.ingest.reorder_frames = 4;
  const Result r = run_case(c);
  const uint64_t n = 100;  // images 0..99
  auto every = [&](uint64_t k, bool need_previous = false) {
    uint64_t m = 0;
    for (uint64_t i = 0; i < n; ++i) m += (i % k == k - 1) && (!need_previous || i > 0);
    return m;
  };
  // Extra bad messages are not sent for gap images (the simulator skips those whole).
  auto every_not_gap = [&](uint64_t k) {
    uint64_t m = 0;
    for (uint64_t i = 0; i < n; ++i) m += (i % k == k - 1) && (i % 37 != 36);
    return m;
  };
  const auto& b = r.stats.bad;
  EXPECT_EQ(b[size_t(BadInput::malformed_json)], every_not_gap(13));
  EXPECT_EQ(b[size_t(BadInput::data_without_header)], every_not_gap(17));
  EXPECT_EQ(b[size_t(BadInput::wrong_shape)], every_not_gap(7));
  EXPECT_EQ(b[size_t(BadInput::unknown_bitmode)], every_not_gap(9));
  EXPECT_EQ(b[size_t(BadInput::size_mismatch)], every_not_gap(11));
  EXPECT_EQ(b[size_t(BadInput::missing_field)], every_not_gap(19));
  EXPECT_EQ(b[size_t(BadInput::unknown_port)], every_not_gap(23));
  EXPECT_EQ(b[size_t(BadInput::frame_backwards)], every_not_gap(29));
  (void)every;
  // The file: one row per frame number from first to last, in order, flagged as it happened.
  ASSERT_FALSE(r.file.frames.empty());
  for (std::size_t i = 1; i < r.file.frames.size(); ++i)
    EXPECT_EQ(r.file.frames[i].frame_number, r.file.frames[i - 1].frame_number + 1);
  for (const auto& row : r.file.frames) {
    const uint64_t i = row.frame_number - 1000;
    const bool gap = i % 37 == 36;
    const bool lost_part = i % 13 == 12 || i % 17 == 16 || i % 31 == 30 || i % 41 == 40;
    if (gap) EXPECT_EQ(row.flags, kFlagMissing) << i;
    else if (lost_part) EXPECT_EQ(row.flags, kFlagIncomplete) << i;
    else EXPECT_TRUE(row.flags == 0 || row.flags == kFlagDark) << i << " flags " << int(row.flags);
  }
  EXPECT_EQ(r.stats.missing, every(37));
  expect_clusters_match(c, r);
}

TEST(Acquisition, KeepsThePreviousPedestal) {
  Case c = make_case("keep_pedestal");
  std::optional<PedestalState> end;
  {
    Acquisition run(c.cfg, 1, std::nullopt);
    run_stream_simulator(c.sim);
    ASSERT_TRUE(run.wait(20s));
    end = run.end_pedestal();
  }
  ASSERT_TRUE(end);
  Case d = make_case("keep_pedestal2");
  d.cfg.pedestal.keep_previous = true;
  d.sim.dark_frames = 0;
  d.sim.skip_images = 20;  // the same stream's photon frames, continued: no dark frames
  d.sim.dark_frames = 20;
  d.sim.image = c.sim.image;
  Acquisition run(d.cfg, 2, end);
  run_stream_simulator(d.sim);
  ASSERT_TRUE(run.wait(20s));
  const auto f = read_run_file(run.file());
  ASSERT_EQ(f.frames.size(), 60u);
  EXPECT_EQ(glint::testing::count_rows(f, kFlagDark), 0u);
  EXPECT_EQ(f.start_mean, end->means());
}

TEST(Acquisition, UnwritableDirectoryIsAnErrorNotACrash) {
  Case c = make_case("unwritable");
  c.cfg.output.directory = "/proc/glint_cannot_write_here";
  Acquisition run(c.cfg, 1, std::nullopt);
  ASSERT_TRUE(run.wait(5s));
  EXPECT_EQ(run.state(), RunState::error);
  EXPECT_NE(run.stats().error.find("/proc/glint_cannot_write_here"), std::string::npos) << run.stats().error;
}

// Storage faults (full disks on real tmpfs mounts, removed directories): storage_run_test.cpp.

TEST(Ingest, StopDoesNotWaitForTheReceiveTimeout) {
  // Nobody publishes on the endpoint: the port's thread waits in its receive (100 ms timeout).
  const Case c = make_case("ingest_stop");
  FrameAssembler assembler(c.cfg.detector, c.cfg.ingest);
  Ingest ingest(c.cfg, assembler);
  std::this_thread::sleep_for(30ms);
  const auto t0 = std::chrono::steady_clock::now();
  ingest.stop();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 50ms);
  EXPECT_EQ(ingest.counters().messages, 0u);
}

TEST(Acquisition, StopDrainsAndFrameLimitEnds) {
  Case c = make_case("limit");
  c.cfg.run.max_frames = 50;
  c.sim.send_end = false;
  const Result r = run_case(c);
  EXPECT_EQ(r.stats.end_reason, "frame limit");
  EXPECT_GE(r.file.frames.size(), 50u);
  EXPECT_EQ(r.file.frames.front().frame_number, 1000u);
  expect_clusters_match(c, r);
}

TEST(Acquisition, GpuBackendWritesTheReferenceClusters) {
  GLINT_REQUIRE_GPU();
  // Streamed batches (staging, submit, results through the sink) interleaved with rows that
  // carry no clusters: gaps and incomplete images force the batches to drain in order.
  for (int batch : {1, 16, 64}) {
    Case c = make_case("gpu" + std::to_string(batch), 2, 1, 1);
    c.cfg.finder.backend = "gpu";
    c.cfg.finder.batch_frames = batch;
    c.cfg.ingest.reorder_frames = 4;
    c.cfg.ingest.copy_threads = batch == 16 ? 0 : 4;
    c.sim.frames = 400;
    c.sim.image.photons = 30;
    c.sim.faults = {{SimFault::gap, 23}, {SimFault::drop_part, 41}};
    const Result r = run_case(c);
    EXPECT_EQ(r.stats.backend.rfind("gpu", 0), 0u) << r.stats.backend;
    EXPECT_EQ(r.file.frames.size(), 420u);
    EXPECT_GT(r.stats.missing, 0u);
    EXPECT_GT(r.stats.incomplete, 0u);
    EXPECT_EQ(r.stats.clusters, r.file.clusters.n_clusters());
    expect_clusters_match(c, r);
  }
}

TEST(Acquisition, ReconstructionBesideTheRunWritesItsVolumes) {
  Case c = make_case("recon");
  c.cfg.reconstruction.enabled = true;
  c.cfg.reconstruction.frames_per_slice = 10;
  c.cfg.reconstruction.slices = 3;
  c.cfg.reconstruction.outer = 3;
  c.cfg.reconstruction.tv_inner = 2;
  c.cfg.reconstruction.backend = "cpu";
  c.cfg.reconstruction.solve_partial = true;
  c.sim.frames = 75;  // two full volumes of 30 frames, then a partial one of 15
  const Result r = run_case(c);
  EXPECT_TRUE(r.stats.recon_enabled);
  EXPECT_EQ(r.stats.recon_frames, 75u);
  EXPECT_EQ(r.stats.recon_volumes_done + r.stats.recon_volumes_dropped, 3u);
  EXPECT_GE(r.stats.recon_volumes_done, 1u);
  EXPECT_EQ(r.stats.recon_volumes_failed, 0u);
  // No side files are left next to the run file.
  for (const auto& e : fs::directory_iterator(c.cfg.output.directory))
    EXPECT_EQ(e.path().extension(), ".h5") << e.path();
  ASSERT_TRUE(r.file.reconstruction_summary.has_value());
  EXPECT_EQ(r.file.reconstruction_summary->volumes_done, r.stats.recon_volumes_done);
  ASSERT_EQ(r.file.reconstruction.size(), r.stats.recon_volumes_done);
  // The hit images count the cluster centres of the data frames they cover.
  std::vector<uint64_t> clusters_of, numbers_of;  // per data frame, in order
  for (std::size_t i = 0; i < r.file.frames.size(); ++i)
    if (r.file.frames[i].flags == 0) {
      clusters_of.push_back(r.file.clusters.frames()[i].n_clusters);
      numbers_of.push_back(r.file.frames[i].frame_number);
    }
  ASSERT_EQ(clusters_of.size(), 75u);
  for (const auto& vol : r.file.reconstruction) {
    const auto v = static_cast<int>(
        std::find(numbers_of.begin(), numbers_of.end(), vol.first_frame) - numbers_of.begin());
    ASSERT_TRUE(v == 0 || v == 30 || v == 60) << vol.first_frame;
    EXPECT_EQ(vol.last_frame, numbers_of[std::min(74, v + 29)]);
    EXPECT_EQ(vol.nx, 64u);
    EXPECT_EQ(vol.ny, 48u);
    EXPECT_EQ(vol.nz, v < 60 ? 3u : 2u);  // the last, partial volume: 1.5 slices
    EXPECT_EQ(vol.partial, v == 60);
    EXPECT_EQ(vol.outer, 3u);
    EXPECT_EQ(vol.tv_inner, 2u);
    double hits = 0;
    for (float x : vol.input) hits += x;
    uint64_t want = 0;
    for (int f = v; f < std::min(75, v + 30); ++f) want += clusters_of[f];
    EXPECT_EQ(hits, static_cast<double>(want)) << "volume from " << vol.first_frame;
    double sum_out = 0;
    for (float x : vol.output) {
      EXPECT_GE(x, 0.0f);
      sum_out += x;
    }
    EXPECT_GT(sum_out, 0.0);
  }
}

TEST(Acquisition, ReconstructionThatCannotStartLeavesClusterFindingAlone) {
  Case c = make_case("recon_bad");
  c.cfg.reconstruction.enabled = true;
  c.cfg.reconstruction.forward = "mask:" + (c.cfg.output.directory / "no_such_mask.h5").string() + ":/mask";
  c.cfg.reconstruction.backend = "cpu";
  const Result r = run_case(c);
  EXPECT_TRUE(r.stats.error.empty()) << r.stats.error;
  EXPECT_EQ(r.stats.recon_volumes_failed, 1u);
  EXPECT_EQ(r.stats.recon_volumes_done, 0u);
  ASSERT_TRUE(r.file.reconstruction_summary.has_value());
  EXPECT_EQ(r.file.reconstruction_summary->volumes_failed, 1u);
  EXPECT_TRUE(r.file.reconstruction.empty());
  expect_clusters_match(c, r);
}

// Frame-number faults and acquisition boundaries, each as `glint sim` sends it.

TEST(Acquisition, OneGlitchedFrameNumberIsBadInputAndTheRunGoesOn) {
  Case c = make_case("glitch");
  c.sim.glitch_image = 40;  // frame 1040 is sent as 1040 + 2^40
  c.sim.glitch_by = uint64_t{1} << 40;
  const Result r = run_case(c);
  EXPECT_EQ(r.stats.end_reason, "end of acquisition");
  EXPECT_EQ(r.stats.bad[size_t(BadInput::frame_jump)], 1u);
  EXPECT_EQ(r.stats.bad[size_t(BadInput::frame_backwards)], 0u);
  EXPECT_EQ(r.stats.bad_total, 1u);
  ASSERT_EQ(r.file.frames.size(), 80u);
  for (std::size_t i = 0; i < r.file.frames.size(); ++i) {
    EXPECT_EQ(r.file.frames[i].frame_number, 1000 + i);
    EXPECT_EQ(r.file.frames[i].flags, i == 40 ? kFlagMissing : i < 20 ? kFlagDark : 0) << i;
  }
  EXPECT_EQ(r.stats.missing, 1u);
  EXPECT_EQ(r.stats.data_frames, 59u);
  expect_clusters_match(c, r);
}

TEST(Acquisition, ACounterResetWithoutAnEndMessageEndsTheRunAtTheRestart) {
  Case c = make_case("restart");
  c.sim.restart_image = 50;  // images 50.. are frames 1000.. again, frameIndex from 0
  const Result r = run_case(c);
  EXPECT_EQ(r.stats.end_reason, "detector restart");
  EXPECT_EQ(r.stats.restarts, 1u);
  EXPECT_EQ(r.stats.bad_total, 0u);
  EXPECT_EQ(r.stats.missing, 0u);
  ASSERT_EQ(r.file.frames.size(), 50u);
  for (std::size_t i = 0; i < r.file.frames.size(); ++i)
    EXPECT_EQ(r.file.frames[i].frame_number, 1000 + i);
  EXPECT_EQ(r.file.end_reason, "detector restart");
  expect_clusters_match(c, r);
}

TEST(Acquisition, ACounterThatMovesForGoodWithoutFrameIndexIsANewAcquisition) {
  // The frame numbers jump far (beyond ingest.max_frame_jump) and stay there, frameIndex does
  // not restart: after kRebaseAfterRejects rejected frames the port is taken as restarted.
  Case c = make_case("rebase");
  c.sim.jump_every = 50;  // images 50.. are frames 1000 + i + 10^7
  c.sim.jump_by = 10000000;
  const Result r = run_case(c);
  EXPECT_EQ(r.stats.end_reason, "detector restart");
  EXPECT_EQ(r.stats.bad[size_t(BadInput::frame_jump)], kRebaseAfterRejects - 1);
  ASSERT_EQ(r.file.frames.size(), 50u);
  EXPECT_EQ(r.file.frames.back().frame_number, 1049u);
  EXPECT_EQ(r.stats.missing, 0u);
}

TEST(Acquisition, MissingRowsAreBoundedPerRun) {
  Case c = make_case("missing_bound");
  c.cfg.ingest.max_frame_jump = 1000;
  c.cfg.run.max_missing_rows = 5000;
  c.sim.jump_every = 4;  // 19 jumps of 900 frame numbers: 17,100 missing rows unbounded
  c.sim.jump_by = 900;
  const Result r = run_case(c);
  EXPECT_EQ(r.stats.end_reason, "missing_rows");
  EXPECT_EQ(r.stats.missing, 5000u);
  EXPECT_GE(r.stats.missing_unwritten, 400u);  // the sixth jump's rest, at least
  EXPECT_EQ(glint::testing::count_rows(r.file, kFlagMissing), 5000u);
  EXPECT_EQ(r.stats.bad_total, 0u);
  // The rows up to the bound: frames 1000..1023 (24 images, 5 jumps of 900) and 500 of the sixth.
  ASSERT_GE(r.file.frames.size(), 5000u + 24u);
  EXPECT_EQ(r.file.end_reason, "missing_rows");
}

TEST(Acquisition, ADecimatedStreamIsRecordedWithItsStride) {
  Case c = make_case("stride");
  c.sim.send_every = 3;    // slsReceiver rx_zmqfreq 3
  c.sim.dark_frames = 60;  // 20 of them sent: the run's 20 dark frames
  c.sim.frames = 60;
  const Result r = run_case(c);
  EXPECT_EQ(r.stats.end_reason, "end of acquisition");
  EXPECT_EQ(r.stats.stream_stride, 3u);
  EXPECT_EQ(r.file.stream_stride, 3u);
  EXPECT_EQ(r.stats.missing, 0u);
  ASSERT_EQ(r.file.frames.size(), 40u);
  for (std::size_t i = 0; i < r.file.frames.size(); ++i) {
    EXPECT_EQ(r.file.frames[i].frame_number, 1000 + 3 * i);
    EXPECT_EQ(r.file.frames[i].flags, i < 20 ? kFlagDark : 0) << i;
  }
  expect_clusters_match(c, r);
}

TEST(Acquisition, ADecimatedStreamStillRecordsItsLostFrames) {
  Case c = make_case("stride_gap");
  c.sim.send_every = 2;
  c.sim.dark_frames = 40;
  c.sim.frames = 60;
  c.sim.faults = {{SimFault::gap, 25}};  // images 24, 74 (sent ones) are left out
  const Result r = run_case(c);
  EXPECT_EQ(r.stats.stream_stride, 2u);
  EXPECT_EQ(r.stats.missing, 2u);
  ASSERT_EQ(r.file.frames.size(), 50u);
  for (std::size_t i = 0; i < r.file.frames.size(); ++i) {
    EXPECT_EQ(r.file.frames[i].frame_number, 1000 + 2 * i);
    const bool gap = i == 12 || i == 37;
    EXPECT_EQ(r.file.frames[i].flags == kFlagMissing, gap) << i;
  }
}

TEST(Acquisition, ALostEndMessageEndsTheRunAfterIdleEndSeconds) {
  Case c = make_case("idle");
  c.sim.send_end = false;
  c.cfg.run.idle_end_seconds = 0.3;
  Acquisition run(c.cfg, 1, std::nullopt);
  run_stream_simulator(c.sim);
  ASSERT_TRUE(run.wait(5s)) << "the run did not end without its end message";
  const RunStats s = run.stats();
  EXPECT_EQ(s.end_reason, "idle");
  EXPECT_EQ(s.rows_written, 80u);
  EXPECT_EQ(read_run_file(run.file()).end_reason, "idle");
}

TEST(Acquisition, PortsOutOfStepByMoreThanThePartTimeoutLoseNothing) {
  Case c = make_case("skew", 2, 1, 1);
  c.cfg.ingest.part_timeout_ms = 150;
  c.sim.rate_hz = 200;
  c.sim.port_delay_ms = {0, 400};  // port 1 runs 400 ms behind port 0
  const Result r = run_case(c);
  EXPECT_EQ(r.stats.end_reason, "end of acquisition");
  EXPECT_EQ(r.stats.incomplete, 0u);
  EXPECT_EQ(r.stats.late_parts, 0u);
  EXPECT_EQ(r.stats.parts, 160u);
  ASSERT_EQ(r.file.frames.size(), 80u);
  EXPECT_EQ(glint::testing::count_rows(r.file, 0), 60u);
  expect_clusters_match(c, r);
}

TEST(Acquisition, APortBehindTheOthersAtTheEndIsWaitedForWhileItDelivers) {
  // Two receivers on two endpoints; the second runs 400 ms behind, its end message too: the
  // first one's end does not end the run while the second still delivers.
  Case c = make_case("skew_end", 2, 1, 2);
  c.cfg.ingest.part_timeout_ms = 150;
  c.sim.rate_hz = 200;
  c.sim.port_delay_ms = {0, 400};
  const Result r = run_case(c);
  EXPECT_EQ(r.stats.end_reason, "end of acquisition");
  EXPECT_EQ(r.stats.incomplete, 0u);
  EXPECT_EQ(r.stats.parts, 160u);
  ASSERT_EQ(r.file.frames.size(), 80u);
  EXPECT_EQ(glint::testing::count_rows(r.file, 0), 60u);
  expect_clusters_match(c, r);
}

TEST(Ingest, HoldsWhatArrivesBetweenRunsUpToItsBoundAndHandsItToTheNextRunInOrder) {
  Case c = make_case("ingest_hold");
  c.cfg.ingest.queue_frames = 30;  // the bound: 30 images' parts
  c.sim.dark_frames = 0;
  c.sim.frames = 50;
  Ingest ingest(c.cfg);  // no run attached
  ingest.set_hold(true);
  run_stream_simulator(c.sim);
  IngestCounters ic;
  for (const auto until = std::chrono::steady_clock::now() + 5s;
       std::chrono::steady_clock::now() < until;) {
    ic = ingest.counters();
    // The parts, and the end message after them (an end is counted once handled).
    if (ic.held_parts + ic.frames_outside_run == 50 && ic.end_messages == 1) break;
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(ic.end_messages, 1u);
  EXPECT_EQ(ic.held_parts, 30u);
  EXPECT_EQ(ic.frames_outside_run, 20u);
  FrameAssembler a(c.cfg.detector, c.cfg.ingest);
  ingest.attach(a);
  EXPECT_TRUE(ingest.all_ended()) << "the held acquisition's end message comes with it";
  for (uint64_t fn = 1000; fn < 1030; ++fn) {
    FramePtr f = a.pop(0ms);
    ASSERT_TRUE(f) << fn;
    EXPECT_EQ(f->frame_number, fn);
    EXPECT_FALSE(f->incomplete);
    a.release(std::move(f));
  }
  EXPECT_EQ(a.pop(0ms), nullptr);
  EXPECT_EQ(ingest.counters().held_parts, 0u);
  ingest.detach();

  // Held for a run that will not start: counted as outside a run.
  c.sim.first_frame_number = 5000;
  c.sim.frames = 10;
  ingest.set_hold(true);
  run_stream_simulator(c.sim);
  for (const auto until = std::chrono::steady_clock::now() + 5s;
       std::chrono::steady_clock::now() < until && ingest.counters().held_parts < 10;)
    std::this_thread::sleep_for(10ms);
  ingest.set_hold(false);
  EXPECT_EQ(ingest.counters().held_parts, 0u);
  EXPECT_EQ(ingest.counters().frames_outside_run, 30u);
}

// pedestal.source previous continues from the previous run file when the daemon has no pedestal
// in memory (a restart); file:PATH starts from a pedestal file; one that does not fit is an error
// naming pedestal.source.
TEST(Acquisition, PedestalSourcePreviousAfterARestartAndFile) {
  Case c = make_case("pedestal_source");
  {
    Acquisition run(c.cfg, 1, std::nullopt);
    run_stream_simulator(c.sim);
    ASSERT_TRUE(run.wait(20s));
  }
  const PedestalState end = read_pedestal_state(run_file_path(c.cfg.output.directory,
                                                              c.cfg.output.run_name, 1));
  EXPECT_EQ(end, *read_run_file(run_file_path(c.cfg.output.directory, c.cfg.output.run_name, 1))
                      .end_state);
  auto continued = [&](const std::string& name, const std::string& source, uint64_t index) {
    Case d = make_case(name);
    d.cfg.output.directory = c.cfg.output.directory;
    d.cfg.output.run_name = c.cfg.output.run_name;
    d.cfg.pedestal.source = source;
    d.sim.skip_images = 20;  // the same stream's photon frames, continued: no dark frames
    d.sim.dark_frames = 20;
    d.sim.image = c.sim.image;
    Acquisition run(d.cfg, index, std::nullopt);
    run_stream_simulator(d.sim);
    EXPECT_TRUE(run.wait(20s));
    EXPECT_EQ(run.stats().error, "");
    return read_run_file(run.file());
  };
  const auto f = continued("pedestal_source2", "previous", 2);
  ASSERT_EQ(f.frames.size(), 60u);
  EXPECT_EQ(glint::testing::count_rows(f, kFlagDark), 0u);
  EXPECT_EQ(f.start_mean, end.means());

  const auto file = c.cfg.output.directory / "dark.pedestal.h5";
  write_pedestal_file(file, end, "test", false);
  EXPECT_EQ(read_pedestal_state(file), end);
  const auto g = continued("pedestal_source3", "file:" + file.string(), 7);
  EXPECT_EQ(glint::testing::count_rows(g, kFlagDark), 0u);
  EXPECT_EQ(g.start_mean, end.means());

  Case e = make_case("pedestal_source4");
  e.cfg.pedestal.source = "file:" + file.string();
  e.cfg.pedestal.window = 21;
  Acquisition run(e.cfg, 1, std::nullopt);
  ASSERT_TRUE(run.wait(5s));
  EXPECT_EQ(run.state(), RunState::error);
  EXPECT_NE(run.stats().error.find("pedestal.source file:"), std::string::npos)
      << run.stats().error;
  EXPECT_NE(run.stats().error.find("window 20"), std::string::npos) << run.stats().error;
}
