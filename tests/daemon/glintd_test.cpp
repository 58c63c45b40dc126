// The real glintd and glint binaries over loopback: a run end to end, signals, a sender
// restarted mid-run, configuration reload, `glint ctl`.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <memory>
#include <sstream>

#include "../pipeline/stream_test_util.hpp"
#include "control_client.hpp"
#include "glintd_rig.hpp"
#include "glint/pipeline/run_file.hpp"
#include "process.hpp"

using namespace glint;
using namespace glint::testing::glintd_names;

namespace {

constexpr uint32_t kDark = 20;

struct Rig : glint::testing::GlintdRig {
  std::string photons = "10";

  explicit Rig(const std::string& name, bool auto_start = true, uint32_t size = 40)
      : GlintdRig(name, size, kDark) {
    write_config(name, auto_start);
  }
  void write_config(const std::string& name, bool auto_start, const std::string& more = "") const {
    glint::testing::GlintdConfig c = *this;
    c.run_name = name;
    c.auto_start = auto_start;
    c.extra = more;
    glint::testing::write_glintd_config(config, c);
  }
  std::vector<std::string> sim(uint64_t frames, double rate, const std::vector<std::string>& more = {}) const {
    std::vector<std::string> a = glint::testing::sim_argv(*this, frames, std::to_string(rate), photons, "7");
    a.insert(a.end(), more.begin(), more.end());
    return a;
  }
  fs::path file(uint64_t index, const std::string& name = "") const {
    return pipeline::run_file_path(runs, name.empty() ? run_name : name, index);
  }
  /// Polls glintd's status (up to 10 s) until it names a run; whether it did.
  bool run_started() const {
    return wait_status(control_ep, [](const json& j) { return j.contains("run_index"); }, 10s)
        .contains("run_index");
  }
  void expect_clusters_match(const pipeline::RunFileContents& f) const {
    const auto want = glint::testing::expected_clusters(f, image(), 1, kDark, params());
    EXPECT_EQ(f.clusters.n_clusters(), want.n_clusters());
    EXPECT_TRUE(f.clusters == want) << "clusters differ from the reference finder";
  }
};

bool run_done(const json& r, uint64_t runs) { return r.value("runs_completed", 0u) >= runs; }

void expect_contiguous(const pipeline::RunFileContents& f) {
  for (std::size_t i = 1; i < f.frames.size(); ++i)
    ASSERT_EQ(f.frames[i].frame_number, f.frames[i - 1].frame_number + 1) << i;
}

}  // namespace

TEST(Glintd, EndToEndWithCtlAndReload) {
  Rig rig("e2e", /*auto_start=*/false);
  Process d(rig.glintd(), rig.dir / "glintd.log");
  ASSERT_TRUE(d.started());
  ASSERT_EQ(wait_status(rig.control_ep, [](const json&) { return true; }, 10s)["state"], "idle") << d.log();
  auto ctl = [&](const std::vector<std::string>& args, const std::string& log) {
    std::vector<std::string> a{bin("glint").string(), "ctl", "--endpoint", rig.control_ep};
    a.insert(a.end(), args.begin(), args.end());
    auto p = std::make_unique<Process>(a, rig.dir / log);
    return p;
  };
  {
    auto start = ctl({"start"}, "ctl_start.log");
    ASSERT_EQ(start->wait_exit(10s), 0) << start->log();
    EXPECT_NE(start->log().find(rig.file(1).string()), std::string::npos) << start->log();
    auto again = ctl({"start"}, "ctl_again.log");
    EXPECT_EQ(again->wait_exit(10s), 1) << "a second start must fail while a run is in progress";
    EXPECT_NE(again->log().find("in progress"), std::string::npos) << again->log();
  }
  {
    Process s(rig.sim(120, 0), rig.dir / "sim.log");
    ASSERT_EQ(s.wait_exit(30s), 0) << s.log();
  }
  json r = wait_status(rig.control_ep, [](const json& j) { return run_done(j, 1); }, 20s);
  ASSERT_TRUE(run_done(r, 1)) << r.dump() << d.log();

  {
    auto stats = ctl({"stats"}, "ctl_stats.log");
    ASSERT_EQ(stats->wait_exit(10s), 0) << stats->log();
    EXPECT_NE(stats->log().find("received 140  processed 140  dark 20  data 120"), std::string::npos) << stats->log();
    EXPECT_NE(stats->log().find("stream     stride 1  restarts 0  missing rows not written 0  "
                                "outside a run 0  held for the next run 0"),
              std::string::npos) << stats->log();
    auto status = ctl({"status", "--json"}, "ctl_status.log");
    ASSERT_EQ(status->wait_exit(10s), 0) << status->log();
    const json st = json::parse(status->log());
    EXPECT_EQ(st["state"], "idle");
    EXPECT_EQ(st["last_run"]["frames"], 140);
    EXPECT_EQ(st["last_run"]["file"], rig.file(1).string());
    auto ped = ctl({"pedestal"}, "ctl_ped.log");
    ASSERT_EQ(ped->wait_exit(10s), 0) << ped->log();
    EXPECT_NE(ped->log().find("20 frames (window 20)"), std::string::npos) << ped->log();
    auto stop = ctl({"stop"}, "ctl_stop.log");
    EXPECT_EQ(stop->wait_exit(10s), 1) << "stop without a run must fail";
    auto watch = ctl({"watch", "--count", "2", "--interval", "0.05", "--json"}, "ctl_watch.log");
    ASSERT_EQ(watch->wait_exit(10s), 0) << watch->log();
    const std::string lines = watch->log();
    EXPECT_EQ(std::count(lines.begin(), lines.end(), '\n'), 2) << lines;
  }
  const auto f = pipeline::read_run_file(rig.file(1));
  ASSERT_EQ(f.frames.size(), 140u);
  EXPECT_EQ(glint::testing::count_rows(f, pipeline::kFlagDark), kDark);
  EXPECT_EQ(glint::testing::count_rows(f, 0), 120u);
  rig.expect_clusters_match(f);

  // SIGHUP: the next run uses the new configuration.
  rig.write_config("reloaded", false);
  d.signal(SIGHUP);
  const auto until = std::chrono::steady_clock::now() + 10s;
  std::string file;
  while (std::chrono::steady_clock::now() < until && file.find("reloaded") == std::string::npos) {
    std::this_thread::sleep_for(50ms);
    r = control(rig.control_ep, "start");
    file = r.value("file", std::string());
    if (r.value("ok", false) && file.find("reloaded") == std::string::npos) control(rig.control_ep, "abort");
    wait_status(rig.control_ep, [](const json& j) { return !j.contains("run_index") || j.value("file", std::string()).find("reloaded") != std::string::npos; }, 5s);
  }
  EXPECT_EQ(file, rig.file(1, "reloaded").string()) << d.log();

  d.signal(SIGTERM);
  EXPECT_EQ(d.wait_exit(20s), 0) << d.log();
  EXPECT_FALSE(pipeline::read_run_file(rig.file(1, "reloaded")).end_time.empty());
}

TEST(Glintd, SigtermMidRunDrainsWritesClosesAndExitsZero) {
  Rig rig("sigterm");
  Process d(rig.glintd(), rig.dir / "glintd.log");
  ASSERT_TRUE(rig.run_started());
  Process s(rig.sim(100000, 400), rig.dir / "sim.log");
  const json r = wait_status(rig.control_ep, [](const json& j) { return j.value("frames", 0u) >= 60; }, 20s);
  ASSERT_GE(r.value("frames", 0u), 60u) << r.dump();
  d.signal(SIGTERM);
  EXPECT_EQ(d.wait_exit(20s), 0) << d.log();
  const auto f = pipeline::read_run_file(rig.file(1));
  EXPECT_FALSE(f.end_time.empty());
  EXPECT_TRUE(f.end_state.has_value());
  EXPECT_GE(f.frames.size(), 60u);
  expect_contiguous(f);
  rig.expect_clusters_match(f);
  EXPECT_NE(d.log().find("ended (shutdown)"), std::string::npos) << d.log();
}

TEST(Glintd, SecondSignalAbortsButClosesTheFile) {
  // 400x400 frames, one finder thread and a deep queue: the drain after the first signal takes
  // seconds, so the second one certainly arrives while the run is finishing.
  Rig rig("sigtwice", true, 400);
  rig.finder = "backend: cpu, threads: 1, batch_frames: 16";
  rig.ingest_extra = ", queue_frames: 512";
  rig.write_config("sigtwice", true);
  Process d(rig.glintd(), rig.dir / "glintd.log");
  ASSERT_TRUE(rig.run_started());
  Process s(rig.sim(100000, 0, {"--pool", "16"}), rig.dir / "sim.log");
  const auto until = std::chrono::steady_clock::now() + 30s;
  json st;
  while (std::chrono::steady_clock::now() < until) {
    st = control(rig.control_ep, "stats");
    if (st.value("ok", false) && st["queues"]["queued_images"].get<uint64_t>() >= 300) break;
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_GE(st["queues"]["queued_images"].get<uint64_t>(), 300u) << st.dump();
  d.signal(SIGINT);
  std::this_thread::sleep_for(100ms);
  d.signal(SIGINT);
  EXPECT_EQ(d.wait_exit(20s), 0) << d.log();
  const auto f = pipeline::read_run_file(rig.file(1));
  EXPECT_FALSE(f.end_time.empty());
  expect_contiguous(f);
  EXPECT_NE(d.log().find("again: aborting"), std::string::npos) << d.log();
  EXPECT_NE(d.log().find("run 1 ended ("), std::string::npos) << d.log();
  EXPECT_LT(f.frames.size(), 100000u + kDark) << "aborted: the stream was not drained to its end";
}

TEST(Glintd, SenderRestartedMidRun) {
  Rig rig("restart");
  Process d(rig.glintd(), rig.dir / "glintd.log");
  ASSERT_TRUE(rig.run_started());
  {
    Process a(rig.sim(1000, 500), rig.dir / "sim_a.log");
    wait_status(rig.control_ep, [](const json& j) { return j.value("frames", 0u) >= 50; }, 20s);
    a.signal(SIGKILL);  // the sender dies: no end message
    a.wait_exit(5s);
  }
  // Restarted, it continues the detector's frame numbers further on (image 400 on).
  {
    Process b(rig.sim(480, 0, {"--skip", "400"}), rig.dir / "sim_b.log");
    ASSERT_EQ(b.wait_exit(30s), 0) << b.log();
  }
  const json r = wait_status(rig.control_ep, [](const json& j) { return run_done(j, 1); }, 20s);
  ASSERT_TRUE(run_done(r, 1)) << r.dump() << d.log();
  const auto f = pipeline::read_run_file(rig.file(1));
  ASSERT_EQ(f.frames.size(), kDark + 480u);
  expect_contiguous(f);
  EXPECT_EQ(f.frames.front().frame_number, 1u);
  EXPECT_EQ(f.frames.back().frame_number, kDark + 480u);
  const std::size_t missing = glint::testing::count_rows(f, pipeline::kFlagMissing);
  EXPECT_GT(missing, 100u);
  EXPECT_EQ(glint::testing::count_rows(f, 0) + missing + kDark, f.frames.size());
  rig.expect_clusters_match(f);
  d.signal(SIGTERM);
  EXPECT_EQ(d.wait_exit(20s), 0);
}

/// Resident memory (kB) and open descriptors of a process, from /proc: sockets apart (a control
/// client's connection comes and goes on its own schedule).
struct Footprint {
  long rss_kb = -1;
  std::size_t fds = 0, sockets = 0;
};
Footprint footprint(pid_t pid) {
  Footprint f;
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmRSS:", 0) == 0) f.rss_kb = std::stol(line.substr(6));
  for (const auto& e : fs::directory_iterator("/proc/" + std::to_string(pid) + "/fd")) {
    std::error_code ec;
    if (fs::read_symlink(e.path(), ec).string().rfind("socket:", 0) == 0) ++f.sockets;
    else ++f.fds;
  }
  return f;
}

/// The footprint once a finished run's resources are released: the fewest descriptors seen over
/// a second (threads and files of the run that just ended may still be closing; a leaked
/// descriptor stays).
Footprint settled_footprint(pid_t pid) {
  Footprint f = footprint(pid);
  for (int i = 0; i < 50; ++i) {
    std::this_thread::sleep_for(20ms);
    const Footprint g = footprint(pid);
    f.fds = std::min(f.fds, g.fds);
    f.sockets = std::min(f.sockets, g.sockets);
    f.rss_kb = g.rss_kb;
  }
  return f;
}

TEST(Glintd, ManyRunsLeaveNoDescriptorsOpenAndMemoryFlat) {
  // Months on a beamline are many runs: back-to-back acquisitions, each a file of its own. Idle
  // between runs, after a warm-up, the daemon holds no more descriptors and hardly more memory.
  Rig rig("soak", /*auto_start=*/false);
  Process d(rig.glintd(), rig.dir / "glintd.log");
  ASSERT_TRUE(d.started());
  ASSERT_EQ(wait_status(rig.control_ep, [](const json&) { return true; }, 10s)["state"], "idle")
      << d.log();
  constexpr uint64_t kRuns = 24, kWarm = 6, kFrames = 30;
  Footprint warm, last;
  for (uint64_t i = 1; i <= kRuns; ++i) {
    const json started = control(rig.control_ep, "start");
    ASSERT_TRUE(started.value("ok", false)) << started.dump() << d.log();
    Process s(rig.sim(kFrames, 0), rig.dir / ("sim_" + std::to_string(i) + ".log"));
    ASSERT_EQ(s.wait_exit(30s), 0) << s.log();
    const json r = wait_status(rig.control_ep, [&](const json& j) {
      return run_done(j, i) && j.value("state", std::string()) == "idle";
    }, 20s);
    ASSERT_TRUE(run_done(r, i)) << r.dump() << d.log();
    if (i == kWarm) warm = settled_footprint(d.pid());
  }
  last = settled_footprint(d.pid());
  ASSERT_GT(warm.rss_kb, 0);
  EXPECT_EQ(last.fds, warm.fds) << "files, pipes and event descriptors when idle after run "
                                << kWarm << " and run " << kRuns;
  EXPECT_EQ(last.sockets, warm.sockets) << "sockets: " << warm.sockets << " after run "
                                            << kWarm << ", " << last.sockets << " after run " << kRuns;
  EXPECT_LT(last.rss_kb - warm.rss_kb, 8 * 1024)
      << "resident memory grew from " << warm.rss_kb << " kB to " << last.rss_kb << " kB";
  for (uint64_t i : {uint64_t{1}, kWarm, kRuns}) {
    const auto f = pipeline::read_run_file(rig.file(i));
    EXPECT_EQ(f.frames.size(), kDark + kFrames) << "run " << i;
    EXPECT_FALSE(f.end_time.empty()) << "run " << i;
  }
  d.signal(SIGTERM);
  EXPECT_EQ(d.wait_exit(20s), 0) << d.log();
}

TEST(Glintd, ConfigCheckAndErrors) {
  // The example, with its run directory where this process may write (--check also checks
  // that the machine can run the configuration).
  const fs::path ok_dir = glint::testing::fresh_dir("check");
  {
    std::ifstream in(fs::path(GLINT_SOURCE_DIR) / "config/glintd.example.yaml");
    std::stringstream text;
    text << in.rdbuf();
    std::string yaml = text.str();
    const std::string from = "  directory: /var/lib/glint/runs";
    ASSERT_NE(yaml.find(from), std::string::npos);
    yaml.replace(yaml.find(from), from.size(), "  directory: " + (ok_dir / "runs").string());
    std::ofstream(ok_dir / "example.yaml") << yaml;
  }
  Process ok({bin("glintd").string(), "--check", "--config", (ok_dir / "example.yaml").string()},
             ok_dir / "ok.log");
  EXPECT_EQ(ok.wait_exit(10s), 0) << ok.log();
  const fs::path dir = glint::testing::fresh_dir("check_bad");
  std::ofstream(dir / "bad.yaml") << "detector:\n  rows: 400\nfinder:\n  cluster_size: 6\n";
  Process bad({bin("glintd").string(), "--config", (dir / "bad.yaml").string()}, dir / "bad.log");
  EXPECT_EQ(bad.wait_exit(10s), 2);
  EXPECT_NE(bad.log().find("bad.yaml:4: finder.cluster_size"), std::string::npos) << bad.log();
  Process missing({bin("glintd").string(), "--config", (dir / "none.yaml").string()}, dir / "none.log");
  EXPECT_EQ(missing.wait_exit(10s), 2);
  EXPECT_NE(missing.log().find("none.yaml"), std::string::npos) << missing.log();
}

TEST(GlintBench, PipelineReportsBothLegsAndAccountsForEveryImage) {
  const fs::path dir = glint::testing::fresh_dir("bench_pipeline");
  Process b({bin("glint").string(), "bench", "pipeline", "--size", "64", "--frames", "300", "--dark", "20",
             "--backend", "cpu", "--json", "--output", (dir / "out").string()},
            dir / "bench.log");
  ASSERT_EQ(b.wait_exit(60s), 0) << b.log();
  const std::string text = b.log();
  const json j = json::parse(text.substr(text.find('{')));
  ASSERT_EQ(j["legs"].size(), 2u);
  for (const auto& leg : j["legs"]) {
    EXPECT_EQ(leg["images_sent"], 320) << leg.dump();
    EXPECT_EQ(leg["frames"].get<uint64_t>() + leg["lost"].get<uint64_t>(), 320u) << leg.dump();
    EXPECT_GT(leg["frames_per_s"].get<double>(), 0.0);
  }
  const auto& p = j["legs"][1]["extra"];
  EXPECT_EQ(p["dark"], 20);
  EXPECT_EQ(p["dark"].get<uint64_t>() + p["data"].get<uint64_t>() + p["dropped"].get<uint64_t>() +
                p["missing"].get<uint64_t>(),
            320u)
      << p.dump();
  EXPECT_GT(j["ratio_to_floor"].get<double>(), 0.0);
  EXPECT_FALSE(fs::exists(dir / "out")) << "the benchmark's run file is removed";
}

TEST(GlintBench, PipelineWithReconstructionComparesAThirdLeg) {
  const fs::path dir = glint::testing::fresh_dir("bench_pipeline_recon");
  // 300 data frames, volumes of 2 slices x 50 frames: three full volumes, nothing partial.
  Process b({bin("glint").string(), "bench", "pipeline", "--size", "32", "--frames", "300", "--dark", "20",
             "--backend", "cpu", "--recon-slices", "2", "--recon-frames-per-slice", "50", "--json",
             "--output", (dir / "out").string()},
            dir / "bench.log");
  ASSERT_EQ(b.wait_exit(60s), 0) << b.log();
  const std::string text = b.log();
  const json j = json::parse(text.substr(text.find('{')));
  ASSERT_EQ(j["legs"].size(), 3u);
  EXPECT_FALSE(j["legs"][1]["extra"].contains("reconstruction"));
  const auto& leg = j["legs"][2];
  EXPECT_EQ(leg["images_sent"], 320);
  EXPECT_EQ(leg["frames"].get<uint64_t>() + leg["lost"].get<uint64_t>(), 320u) << leg.dump();
  const auto& r = leg["extra"]["reconstruction"];
  EXPECT_EQ(r["frames"].get<uint64_t>(), leg["extra"]["data"].get<uint64_t>()) << r.dump();
  // Full volumes, plus the partial one at the end when it has two slices (a partial slice counts).
  const uint64_t data = leg["extra"]["data"].get<uint64_t>();
  const uint64_t volumes = data / 100 + (data % 100 > 50 ? 1 : 0);
  EXPECT_EQ(r["volumes_done"].get<uint64_t>() + r["volumes_dropped"].get<uint64_t>(), volumes)
      << r.dump();
  EXPECT_EQ(r["volumes_failed"], 0);
  EXPECT_GT(j["reconstruction_ratio"].get<double>(), 0.0);
  EXPECT_FALSE(fs::exists(dir / "out"));
}

TEST(Glintd, DiskFullPutsTheRunInErrorAndTheDaemonStaysUp) {
  // A 512 KiB tmpfs as the output directory (needs root); elsewhere an unwritable directory.
  Rig rig("diskfull", false);
  const fs::path runs = rig.dir / "runs";
  fs::create_directories(runs);
  const bool mounted =
      std::system(("mount -t tmpfs -o size=512k tmpfs " + runs.string() + " 2>/dev/null").c_str()) == 0;
  // Root writes to a read-only directory: without the mount there is nothing to fill up.
  if (!mounted && ::geteuid() == 0) GTEST_SKIP() << "root, and tmpfs could not be mounted";
  if (!mounted) {
    fs::permissions(runs, fs::perms::owner_read | fs::perms::owner_exec);
  }
  Process d(rig.glintd(), rig.dir / "glintd.log");
  ASSERT_EQ(wait_status(rig.control_ep, [](const json&) { return true; }, 10s)["state"], "idle") << d.log();
  // The run cannot start (no room for its file; without the mount, a directory it may not
  // write): the start reply says so, naming where.
  const json started = control(rig.control_ep, "start", 15000);
  EXPECT_FALSE(started["ok"]) << started.dump();
  EXPECT_NE(started.value("error", std::string()).find(runs.string()), std::string::npos)
      << started.dump();
  {
    rig.photons = "40";
    Process s(rig.sim(3000, 0), rig.dir / "sim.log");
    s.wait_exit(30s);
  }
  const json r = wait_status(rig.control_ep, [](const json& j) { return j["state"] == "error"; }, 20s);
  EXPECT_EQ(r["state"], "error") << r.dump() << d.log();
  EXPECT_EQ(r["error"], started["error"]) << r.dump();
  if (mounted) {
    EXPECT_NE(r["error"].get<std::string>().find(rig.file(1).string() + ": not created: disk low"),
              std::string::npos)
        << r.dump();
  }
  // Still answering; SIGTERM ends it cleanly.
  EXPECT_TRUE(control(rig.control_ep, "stats")["ok"]);
  d.signal(SIGTERM);
  EXPECT_EQ(d.wait_exit(20s), 0) << d.log();
  if (mounted) std::system(("umount " + runs.string()).c_str());
}

TEST(Glintd, BackToBackDecimatedAcquisitionsFromGlintSimEachBecomeAWholeRun) {
  // `glint sim` as a receiver with rx_zmqfreq 2 sends three acquisitions 30 ms apart, each with
  // one glitched frame number: every run holds its acquisition, stride 2, the glitch missing.
  Rig rig("b2b_stride", /*auto_start=*/true);
  Process d(rig.glintd(), rig.dir / "glintd.log");
  ASSERT_TRUE(d.started());
  ASSERT_TRUE(rig.run_started()) << d.log();
  {
    Process s(rig.sim(40, 0, {"--acquisitions", "3", "--pause-ms", "30", "--every", "2",
                              "--glitch", "10:1099511627776"}),
              rig.dir / "sim.log");
    ASSERT_EQ(s.wait_exit(30s), 0) << s.log();
  }
  json r = wait_status(rig.control_ep, [](const json& j) { return run_done(j, 3); }, 20s);
  ASSERT_TRUE(run_done(r, 3)) << r.dump() << d.log();
  d.signal(SIGTERM);
  EXPECT_EQ(d.wait_exit(20s), 0) << d.log();
  for (uint64_t k = 0; k < 3; ++k) {
    const auto f = pipeline::read_run_file(rig.file(k + 1));
    EXPECT_EQ(f.end_reason, "end of acquisition") << k;
    EXPECT_EQ(f.stream_stride, 2u) << k;
    ASSERT_EQ(f.frames.size(), 30u) << k;
    for (std::size_t j = 0; j < 30; ++j) {
      EXPECT_EQ(f.frames[j].frame_number, 1 + 60 * k + 2 * j) << k << " " << j;
      EXPECT_EQ(f.frames[j].flags == pipeline::kFlagMissing, j == 5) << k << " " << j;
    }
  }
}
