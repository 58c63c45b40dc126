// The daemon library in-process: control commands and the run state machine over loopback.
#include <gtest/gtest.h>

#include <fstream>
#include <thread>

#include <fmt/format.h>

#include "../pipeline/stream_test_util.hpp"
#include "control_client.hpp"
#include "glint/config/config.hpp"
#include "glint/daemon/control_request.hpp"
#include "glint/daemon/daemon.hpp"
#include "glint/gpu/device.hpp"
#include "glint/pipeline/pixel_mask.hpp"
#include "glint/pipeline/run_file.hpp"
#include "glint/pipeline/stream_simulator.hpp"

using namespace glint;
using namespace std::chrono_literals;
using nlohmann::json;
using glint::testing::control;
using glint::testing::wait_status;
namespace fs = std::filesystem;

namespace {

struct Rigging {
  config::Config cfg;
  pipeline::SimOptions sim;
};

Rigging setup(const std::string& name) {
  Rigging s;
  s.cfg = config::load(fs::path(GLINT_SOURCE_DIR) / "config/glintd.example.yaml");
  s.cfg.detector.rows = 32;
  s.cfg.detector.cols = 48;
  const std::string ep = glint::testing::loopback(glint::testing::free_tcp_port());
  s.cfg.ingest.endpoints = {ep};
  s.cfg.pedestal.dark_frames = 10;
  s.cfg.pedestal.window = 10;
  s.cfg.finder.backend = "cpu";
  s.cfg.output.directory = glint::testing::fresh_dir(name);
  s.cfg.output.run_name = name;
  s.cfg.output.allowed_roots = {fs::temp_directory_path()};  // where the tests' directories are
  s.cfg.control.endpoint = "tcp://127.0.0.1:*";
  s.cfg.preview.endpoint = "tcp://127.0.0.1:*";
  s.sim.endpoints = {ep};
  s.sim.image.rows = 32;
  s.sim.image.cols = 48;
  s.sim.image.photons = 8;
  s.sim.dark_frames = 10;
  s.sim.frames = 40;
  return s;
}

bool idle_after(const json& r, uint64_t runs) {
  return r["state"] != "pedestal" && r["state"] != "acquiring" && r["state"] != "finishing" &&
         r.value("runs_completed", 0u) >= runs;
}

}  // namespace

TEST(Daemon, ControlCommandsAndARun) {
  Rigging s = setup("daemon_ctl");
  daemon::Daemon d(s.cfg);
  const std::string ep = d.control_endpoint();
  ASSERT_EQ(ep.rfind("tcp://127.0.0.1:", 0), 0u) << ep;

  json r = control(ep, "status");
  EXPECT_TRUE(r["ok"]);
  EXPECT_EQ(r["state"], "idle");
  EXPECT_EQ(r["runs_completed"], 0);

  r = control(ep, "config");
  EXPECT_TRUE(r["ok"]);
  EXPECT_NE(r["yaml"].get<std::string>().find("detector:"), std::string::npos);

  r = control(ep, "pedestal");
  EXPECT_TRUE(r["ok"]);
  EXPECT_FALSE(r["available"]);

  for (const char* cmd : {"stop", "abort"}) {
    r = control(ep, cmd);
    EXPECT_FALSE(r["ok"]) << cmd;
    EXPECT_NE(r["error"].get<std::string>().find("no run"), std::string::npos);
  }
  r = control(ep, "launch");
  EXPECT_FALSE(r["ok"]);
  EXPECT_NE(r["error"].get<std::string>().find("allowed: status"), std::string::npos);
  r = control(ep, json{{"command", 5}});
  EXPECT_FALSE(r["ok"]);
  r = control(ep, json{{"command", "start"}, {"overrides", {{"finder", {{"cluster_size", 4}}}}}});
  EXPECT_FALSE(r["ok"]);
  EXPECT_NE(r["error"].get<std::string>().find("finder.cluster_size"), std::string::npos) << r.dump();

  r = control(ep, json{{"command", "start"}, {"overrides", {{"output", {{"run_name", "renamed"}}}}}});
  ASSERT_TRUE(r["ok"]) << r.dump();
  EXPECT_EQ(r["run_index"], 1);
  const fs::path file = s.cfg.output.directory / "renamed_000001.h5";
  EXPECT_EQ(r["file"], file.string());
  r = control(ep, "start");
  EXPECT_FALSE(r["ok"]);
  EXPECT_NE(r["error"].get<std::string>().find("in progress"), std::string::npos);
  r = control(ep, "status");
  EXPECT_EQ(r["state"], "pedestal");

  const auto sent = pipeline::run_stream_simulator(s.sim);
  EXPECT_TRUE(sent.subscribers_seen);
  r = wait_status(ep, [](const json& j) { return idle_after(j, 1); }, 20s);
  EXPECT_EQ(r["state"], "idle") << r.dump();
  EXPECT_EQ(r["last_run"]["end_reason"], "end of acquisition");
  EXPECT_EQ(r["last_run"]["frames"], 50);

  r = control(ep, "stats");
  ASSERT_TRUE(r["ok"]);
  EXPECT_EQ(r["run"], "last");
  EXPECT_EQ(r["frames"]["received"], 50);
  EXPECT_EQ(r["frames"]["dark"], 10);
  EXPECT_EQ(r["frames"]["data"], 40);
  EXPECT_EQ(r["frames"]["missing"], 0);
  EXPECT_EQ(r["frames"]["dropped"], 0);
  EXPECT_EQ(r["malformed_total"], 0);
  EXPECT_EQ(r["malformed"].size(), pipeline::kBadInputKinds);
  EXPECT_TRUE(r["backend"].get<std::string>().rfind("cpu", 0) == 0) << r["backend"];
  EXPECT_EQ(r["queues"]["staging_total"], s.cfg.ingest.queue_frames);
  // Rates are of the current run only: none now, over no window.
  EXPECT_EQ(r["rates"]["window_s"].get<double>(), 0.0);
  EXPECT_EQ(r["rates"]["frames_per_s"].get<double>(), 0.0);
  const auto f = pipeline::read_run_file(file);
  EXPECT_EQ(r["clusters"], f.clusters.n_clusters());
  EXPECT_GT(f.clusters.n_clusters(), 40u);

  r = control(ep, "pedestal");
  EXPECT_TRUE(r["available"]);
  EXPECT_EQ(r["frames"], 10);
  EXPECT_NEAR(r["mean_adu"].get<double>(), 1000.0, 5.0);
  EXPECT_NEAR(r["noise_adu"].get<double>(), 10.0, 1.0);

  r = control(ep, "shutdown");
  EXPECT_TRUE(r["ok"]);
  EXPECT_TRUE(d.wait(5s));
}

TEST(Daemon, UnwritableDirectoryIsAnErrorAndTheDaemonStaysUp) {
  Rigging s = setup("daemon_err");
  s.cfg.output.directory = "/proc/glint/not/writable";
  daemon::Daemon d(s.cfg);
  const std::string ep = d.control_endpoint();
  // The start reply says so at once (the run fails as it opens its directory).
  json r = control(ep, "start");
  EXPECT_FALSE(r["ok"]) << r.dump();
  EXPECT_NE(r["error"].get<std::string>().find("/proc/glint/not/writable"), std::string::npos)
      << r.dump();
  r = wait_status(ep, [](const json& j) { return j["state"] == "error"; }, 5s);
  EXPECT_EQ(r["state"], "error");
  EXPECT_NE(r["error"].get<std::string>().find("/proc/glint/not/writable"), std::string::npos) << r.dump();
  // Still answering, and the next run (to a good directory) works.
  const fs::path good = glint::testing::fresh_dir("daemon_err_good");
  r = control(ep, json{{"command", "start"}, {"overrides", {{"output", {{"directory", good.string()}}}}}});
  ASSERT_TRUE(r["ok"]) << r.dump();
  pipeline::run_stream_simulator(s.sim);
  r = wait_status(ep, [](const json& j) { return idle_after(j, 2); }, 20s);
  EXPECT_EQ(r["state"], "idle") << r.dump();
  EXPECT_EQ(pipeline::read_run_file(good / "daemon_err_000001.h5").frames.size(), 50u);
}

TEST(Daemon, AbortClosesTheFileAndAutoStartBeginsTheNextRun) {
  Rigging s = setup("daemon_abort");
  s.cfg.run.auto_start = true;
  s.sim.frames = 100000;
  s.sim.rate_hz = 500;
  daemon::Daemon d(s.cfg);
  const std::string ep = d.control_endpoint();
  std::atomic<bool> stop_sender{false};
  std::jthread sender([&] { pipeline::run_stream_simulator(s.sim, &stop_sender); });
  json r = wait_status(ep, [](const json& j) { return j.value("frames", 0u) >= 30; }, 10s);
  ASSERT_GE(r.value("frames", 0u), 30u) << r.dump();
  r = control(ep, "abort");
  EXPECT_TRUE(r["ok"]);
  r = wait_status(ep, [](const json& j) { return j.value("runs_completed", 0u) >= 1; }, 10s);
  EXPECT_EQ(r["runs_completed"], 1);
  // auto_start: run 2 is already taking data.
  r = wait_status(ep, [](const json& j) { return j.value("run_index", 0u) == 2; }, 10s);
  EXPECT_EQ(r["run_index"], 2);
  const auto f = pipeline::read_run_file(s.cfg.output.directory / "daemon_abort_000001.h5");
  EXPECT_FALSE(f.end_time.empty()) << "the aborted run's file was not closed";
  EXPECT_GE(f.frames.size(), 10u);
  // While run 2 takes data, rates come from the samples kept (one a second, up to 5 s).
  json st;
  for (const auto until = std::chrono::steady_clock::now() + 10s; std::chrono::steady_clock::now() < until;) {
    st = control(ep, "stats");
    if (st["rates"]["window_s"].get<double>() > 0) break;
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_GE(st["rates"]["window_s"].get<double>(), 1.0) << st.dump();
  EXPECT_LE(st["rates"]["window_s"].get<double>(), 5.5) << st.dump();
  EXPECT_GT(st["rates"]["frames_per_s"].get<double>(), 0.0) << st.dump();
  stop_sender = true;
  // Stop via the control socket: the run ends gracefully, the daemon stays.
  r = control(ep, "stop");
  EXPECT_TRUE(r["ok"]);
  r = control(ep, json{{"command", "shutdown"}});
  EXPECT_TRUE(r["ok"]);
  EXPECT_TRUE(d.wait(10s));
  const auto f2 = pipeline::read_run_file(s.cfg.output.directory / "daemon_abort_000002.h5");
  EXPECT_FALSE(f2.end_time.empty());
}

TEST(Daemon, NextRunIndexFollowsExistingFiles) {
  const fs::path d = glint::testing::fresh_dir("run_index");
  EXPECT_EQ(daemon::next_run_index(d, "scan"), 1u);
  std::ofstream(d / "scan_000007.h5") << "x";
  std::ofstream(d / "scan_000003.h5") << "x";
  std::ofstream(d / "other_000009.h5") << "x";
  std::ofstream(d / "scan_00000x.h5") << "x";
  EXPECT_EQ(daemon::next_run_index(d, "scan"), 8u);
  std::ofstream(d / "scan_0000011.h5") << "x";  // not a name a run file gets
  EXPECT_EQ(daemon::next_run_index(d, "scan"), 8u);
  std::ofstream(d / "scan_1000000.h5") << "x";  // past six digits the name grows
  EXPECT_EQ(daemon::next_run_index(d, "scan"), 1000001u);
  EXPECT_EQ(daemon::next_run_index("/nonexistent/dir", "scan"), 1u);
}

TEST(Daemon, RunIndexDoesNotWedgeOnAHugeIndex) {
  const fs::path d = glint::testing::fresh_dir("run_index_huge");
  // 10^19 - 1: the next index, 10^19, gets a 20-digit name that the next scan would not read
  // back, so every start picked 10^19 again and failed with "file exists".
  std::ofstream(d / "run_9999999999999999999.h5") << "x";
  EXPECT_EQ(daemon::next_run_index(d, "run"), 1u);
  std::ofstream(d / "run_000002.h5") << "x";
  std::ofstream(d / "run_18446744073709551615.h5") << "x";  // 2^64 - 1
  std::ofstream(d / "run_99999999999999999999.h5") << "x";  // past 2^64
  std::ofstream(d / ("run_" + std::to_string(daemon::kMaxRunIndex + 1) + ".h5")) << "x";
  EXPECT_EQ(daemon::next_run_index(d, "run"), 3u);
  std::ofstream(d / ("run_" + std::to_string(daemon::kMaxRunIndex) + ".h5")) << "x";
  // The largest counted index: the next one is past it, and its name, taken (created above),
  // is stepped over.
  EXPECT_EQ(daemon::next_run_index(d, "run"), daemon::kMaxRunIndex + 2);
}

TEST(Daemon, StartRepliesWithTheRunsStateAfterItOpened) {
  Rigging s = setup("daemon_start_state");
  daemon::Daemon d(s.cfg);
  const std::string ep = d.control_endpoint();
  json r = control(ep, "start", 15000);
  ASSERT_TRUE(r["ok"]) << r.dump();
  EXPECT_EQ(r["state"], "pedestal");
  EXPECT_EQ(r["run_index"], 1);
  EXPECT_EQ(r["backend"].get<std::string>().rfind("cpu", 0), 0u) << r.dump();
  // The reply comes once the file exists.
  EXPECT_TRUE(fs::exists(r["file"].get<std::string>())) << r.dump();
  control(ep, "abort");
}

TEST(Daemon, StartFailingAtOnceRepliesTheErrorOnOneLine) {
  Rigging s = setup("daemon_start_fail");
  // A finder that cannot be built for lack of memory: the run fails on its thread at once.
  daemon::Daemon d(s.cfg, [](const FinderParams&, const pipeline::FinderOptions&)
                              -> std::unique_ptr<ClusterFinder> { throw std::bad_alloc(); });
  const std::string ep = d.control_endpoint();
  json r = control(ep, "start", 15000);
  EXPECT_FALSE(r["ok"]) << r.dump();
  const std::string error = r.value("error", std::string());
  EXPECT_EQ(error.rfind("out of memory setting up or running the run (32 x 48 images; the run "
                        "needs about ", 0),
            0u)
      << error;
  EXPECT_NE(error.find("lower detector.rows/cols, ingest.queue_frames"), std::string::npos)
      << error;
  r = control(ep, "status");
  EXPECT_EQ(r["state"], "error");
  EXPECT_EQ(r["error"], error);
  EXPECT_EQ(r["last_run"]["run_index"], 1);
  EXPECT_FALSE(r["last_run"]["file_written"]) << r.dump();  // it failed before creating it
  EXPECT_FALSE(fs::exists(r["last_run"]["file"].get<std::string>()));
}

TEST(Daemon, StartChecksWhatDependsOnTheMoment) {
  Rigging s = setup("daemon_start_checks");
  daemon::Daemon d(s.cfg);
  const std::string ep = d.control_endpoint();
  // An output directory below a regular file cannot be created.
  const fs::path blocker = s.cfg.output.directory / "a_file";
  std::ofstream(blocker) << "x";
  json r = control(
      ep, json{{"command", "start"},
               {"overrides", {{"output", {{"directory", (blocker / "runs").string()}}}}}});
  EXPECT_FALSE(r["ok"]) << r.dump();
  EXPECT_NE(r["error"].get<std::string>().find(
                "output.directory: '" + (blocker / "runs").string() + "' cannot take run files: " +
                blocker.string() + " is not a directory"),
            std::string::npos)
      << r.dump();
  r = control(ep, "status");
  EXPECT_EQ(r["state"], "error");
  EXPECT_EQ(r["runs_completed"], 0);
  EXPECT_FALSE(r["last_run"]["file_written"]);
  // 0 dark frames with keep_previous, and no previous pedestal.
  r = control(ep,
              json{{"command", "start"},
                   {"overrides", {{"pedestal", {{"dark_frames", 0}, {"keep_previous", true}}}}}});
  EXPECT_FALSE(r["ok"]) << r.dump();
  EXPECT_NE(r["error"].get<std::string>().find(
                "pedestal.dark_frames: 0 dark frames with keep_previous, but there is no previous "
                "pedestal of 32 x 48 pixels and window 10 to keep (allowed for this run: at least "
                "10 dark frames"),
            std::string::npos)
      << r.dump();
  // The GPU backend where there is no GPU (the message does not read as a version problem).
  if (gpu::device_count() == 0) {
    r = control(ep, json{{"command", "start"}, {"overrides", {{"finder", {{"backend", "gpu"}}}}}});
    EXPECT_FALSE(r["ok"]) << r.dump();
    const std::string e = r["error"].get<std::string>();
    EXPECT_NE(e.find("finder.backend: gpu: the GPU backend cannot run here: "), std::string::npos)
        << e;
    EXPECT_NE(e.find("(allowed here: cpu, or auto"), std::string::npos) << e;
    EXPECT_EQ(e.find("CUDA driver version is insufficient"), std::string::npos) << e;
  }
  // No run was made: the directory holds only the blocking file.
  EXPECT_EQ(std::distance(fs::directory_iterator(s.cfg.output.directory), fs::directory_iterator()),
            1);
}

TEST(ControlRequest, BoundedBeforeParsing) {
  using daemon::parse_control_request;
  auto r = parse_control_request(R"({"command": "status"})");
  EXPECT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.command, "status");
  EXPECT_EQ(parse_control_request("\"stats\"").command, "stats");
  EXPECT_EQ(parse_control_request("pedestal\n").command, "pedestal");
  for (const char* bad : {"", "{}", "[1, 2]", "5", "not a command", R"({"command": 5})",
                          R"({"command": ""})", "{\"command\": \"status\""}) {
    r = parse_control_request(bad);
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_TRUE(r.command.empty()) << bad;
  }
  // The issue's request: overrides nested 100,000 levels deep.
  std::string deep = R"({"command": "start", "overrides": )";
  for (int i = 0; i < 100000; ++i) deep += "{\"a\":";
  deep += "1";
  deep += std::string(100000, '}') + "}";
  r = parse_control_request(deep);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.error,
            fmt::format("request of {} bytes refused: larger than control.max_request_bytes "
                        "(65536 bytes)",
                        deep.size()));
  r = parse_control_request(deep, deep.size());  // within the size: the depth refuses it
  EXPECT_EQ(r.error, "request refused: JSON nested deeper than 32 levels");
  EXPECT_EQ(daemon::json_nesting_depth(deep, 32), 33u);
  // Exactly 32 levels pass; 33 do not; brackets inside strings do not count.
  auto nested = [](int levels) {
    std::string t = R"({"command": "status", "x": )";
    for (int i = 1; i < levels; ++i) t += "[";
    t += "\"[[[{{{\\\"[[\"";
    for (int i = 1; i < levels; ++i) t += "]";
    return t + "}";
  };
  EXPECT_EQ(daemon::json_nesting_depth(nested(32), 100), 32u);
  EXPECT_TRUE(parse_control_request(nested(32)).ok()) << parse_control_request(nested(32)).error;
  EXPECT_FALSE(parse_control_request(nested(33)).ok());
  EXPECT_EQ(parse_control_request(nested(33)).error,
            "request refused: JSON nested deeper than 32 levels");
  // The size bound is exact.
  std::string padded = R"({"command": "status", "pad": ")";
  padded += std::string(65536 - padded.size() - 2, 'x') + "\"}";
  ASSERT_EQ(padded.size(), 65536u);
  EXPECT_TRUE(parse_control_request(padded).ok());
  EXPECT_FALSE(parse_control_request(padded + " ").ok());
}

TEST(Daemon, StartOverridesAreLimitedAndBudgeted) {
  Rigging s = setup("daemon_limits");
  s.cfg.run.memory_budget_mb = 3;  // the 32 x 48 run needs about 2 MB
  ASSERT_LT(config::run_memory(s.cfg).total(), 3000000u);
  daemon::Daemon d(s.cfg);
  const std::string ep = d.control_endpoint();
  json r = control(ep, json{{"command", "start"},
                            {"overrides", {{"ingest", {{"endpoints", {"tcp://10.1.2.3:1"}}}}}}});
  EXPECT_FALSE(r["ok"]);
  EXPECT_NE(
      r["error"].get<std::string>().find("ingest.endpoints: cannot be changed by a start override"),
      std::string::npos)
      << r.dump();
  r = control(
      ep, json{{"command", "start"}, {"overrides", {{"control", {{"endpoint", "tcp://*:1"}}}}}});
  EXPECT_NE(r["error"].get<std::string>().find("control.endpoint: cannot be changed"),
            std::string::npos)
      << r.dump();
  // A volume beyond the budget, with the figure.
  config::Config want = s.cfg;
  want.reconstruction.enabled = true;
  want.reconstruction.slices = 4096;
  r = control(ep, json{{"command", "start"},
                       {"overrides", {{"reconstruction", {{"enabled", true}, {"slices", 4096}}}}}});
  EXPECT_FALSE(r["ok"]);
  EXPECT_NE(r["error"].get<std::string>().find(
                fmt::format("run.memory_budget_mb: the run needs {} but the budget is 3 MB",
                            config::run_memory(want).describe())),
            std::string::npos)
      << r.dump();
  EXPECT_NE(r["error"].get<std::string>().find("reconstruction 353 MB"), std::string::npos)
      << r.dump();
  // A directory outside the roots.
  r = control(ep, json{{"command", "start"},
                       {"overrides", {{"output", {{"directory", "/etc/glint-attack-test"}}}}}});
  EXPECT_FALSE(r["ok"]);
  EXPECT_NE(
      r["error"].get<std::string>().find("output.directory: '/etc/glint-attack-test' is not within "
                                         "output.allowed_roots"),
      std::string::npos)
      << r.dump();
  EXPECT_FALSE(fs::exists("/etc/glint-attack-test"));
  // An unknown command is echoed printable and short.
  r = control(ep, json{{"command", std::string("x\n\0y", 4) + std::string(100, 'z')}});
  EXPECT_FALSE(r["ok"]);
  EXPECT_NE(
      r["error"].get<std::string>().find("unknown command 'x??y" + std::string(36, 'z') + "...'"),
      std::string::npos)
      << r.dump();
  r = control(ep, "status");
  EXPECT_EQ(r["state"], "idle");
  EXPECT_EQ(r["runs_completed"], 0);
  EXPECT_TRUE(fs::is_empty(s.cfg.output.directory));
}

TEST(Daemon, BackToBackAcquisitionsWithAutoStartEachBecomeAWholeRun) {
  // Three acquisitions 30 ms apart, each with its end message: every run starts with its
  // acquisition's first frame (the ingest stays subscribed and holds what comes between runs).
  Rigging s = setup("daemon_b2b");
  s.cfg.run.auto_start = true;
  s.sim.frames = 20;  // 30 images an acquisition, 10 of them dark
  s.sim.acquisitions = 3;
  s.sim.acquisition_pause_ms = 30;
  daemon::Daemon d(s.cfg);
  const std::string ep = d.control_endpoint();
  const auto sent = pipeline::run_stream_simulator(s.sim);
  EXPECT_EQ(sent.images, 90u);
  json r = wait_status(ep, [](const json& j) { return j.value("runs_completed", 0u) >= 3; }, 20s);
  ASSERT_GE(r.value("runs_completed", 0u), 3u) << r.dump();
  r = control(ep, "stats");
  EXPECT_EQ(r["ingest"]["frames_outside_run"], 0) << r.dump();
  control(ep, json{{"command", "shutdown"}, {"abort", true}});
  EXPECT_TRUE(d.wait(10s));
  for (uint64_t k = 0; k < 3; ++k) {
    const auto f = pipeline::read_run_file(s.cfg.output.directory /
                                           fmt::format("daemon_b2b_{:06}.h5", k + 1));
    EXPECT_EQ(f.end_reason, "end of acquisition") << k;
    ASSERT_EQ(f.frames.size(), 30u) << k;
    for (std::size_t i = 0; i < 30; ++i) {
      EXPECT_EQ(f.frames[i].frame_number, 1 + 30 * k + i) << k;
      EXPECT_EQ(f.frames[i].flags, i < 10 ? pipeline::kFlagDark : 0) << k << " " << i;
    }
  }
}

TEST(Daemon, ADetectorRestartMidRunEndsItAndTheNextRunTakesTheNewAcquisition) {
  Rigging s = setup("daemon_restart");
  s.cfg.run.auto_start = true;
  s.sim.restart_image = 30;  // of 50 images: 20 after the restart, frames 1.. again
  daemon::Daemon d(s.cfg);
  const std::string ep = d.control_endpoint();
  pipeline::run_stream_simulator(s.sim);
  json r = wait_status(ep, [](const json& j) { return j.value("runs_completed", 0u) >= 2; }, 20s);
  ASSERT_GE(r.value("runs_completed", 0u), 2u) << r.dump();
  r = control(ep, "stats");
  EXPECT_EQ(r["ingest"]["restarts"], 1) << r.dump();
  EXPECT_EQ(r["ingest"]["frames_outside_run"], 0) << r.dump();
  control(ep, json{{"command", "shutdown"}, {"abort", true}});
  EXPECT_TRUE(d.wait(10s));
  const auto f1 = pipeline::read_run_file(s.cfg.output.directory / "daemon_restart_000001.h5");
  EXPECT_EQ(f1.end_reason, "detector restart");
  ASSERT_EQ(f1.frames.size(), 30u);
  EXPECT_EQ(f1.frames.back().frame_number, 30u);
  const auto f2 = pipeline::read_run_file(s.cfg.output.directory / "daemon_restart_000002.h5");
  EXPECT_EQ(f2.end_reason, "end of acquisition");
  ASSERT_EQ(f2.frames.size(), 20u);
  for (std::size_t i = 0; i < 20; ++i) EXPECT_EQ(f2.frames[i].frame_number, 1 + i);
  EXPECT_EQ(glint::testing::count_rows(f2, pipeline::kFlagMissing), 0u);
}

TEST(Daemon, FramesBetweenManualRunsAreCountedNotLostSilently) {
  Rigging s = setup("daemon_outside");
  daemon::Daemon d(s.cfg);
  const std::string ep = d.control_endpoint();
  ASSERT_TRUE(control(ep, "start")["ok"]);
  pipeline::run_stream_simulator(s.sim);
  json r = wait_status(ep, [](const json& j) { return idle_after(j, 1); }, 20s);
  ASSERT_EQ(r["state"], "idle") << r.dump();
  // No run, no automatic one: the ingest is still subscribed and counts what it gets.
  s.sim.first_frame_number = 1000;
  const auto sent = pipeline::run_stream_simulator(s.sim);
  EXPECT_TRUE(sent.subscribers_seen);
  for (const auto until = std::chrono::steady_clock::now() + 10s;
       std::chrono::steady_clock::now() < until;) {
    r = control(ep, "stats");
    if (r["ingest"]["frames_outside_run"] == 50) break;
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_EQ(r["ingest"]["frames_outside_run"], 50) << r.dump();
  EXPECT_EQ(r["ingest"]["held_parts"], 0);
  control(ep, "shutdown");
  EXPECT_TRUE(d.wait(10s));
}

TEST(Daemon, AReloadWithNewEndpointsSubscribesAfreshForTheNextRun) {
  Rigging s = setup("daemon_new_ep");
  daemon::Daemon d(s.cfg);
  const std::string ep = d.control_endpoint();
  ASSERT_TRUE(control(ep, "start")["ok"]);
  pipeline::run_stream_simulator(s.sim);
  ASSERT_EQ(wait_status(ep, [](const json& j) { return idle_after(j, 1); }, 20s)["state"], "idle");
  config::Config moved = s.cfg;
  const std::string ep2 = glint::testing::loopback(glint::testing::free_tcp_port());
  moved.ingest.endpoints = {ep2};
  d.request_reload(moved);
  json r;
  for (const auto until = std::chrono::steady_clock::now() + 5s;
       std::chrono::steady_clock::now() < until;) {
    r = control(ep, "config");
    if (r["yaml"].get<std::string>().find(ep2) != std::string::npos) break;
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_NE(r["yaml"].get<std::string>().find(ep2), std::string::npos);
  ASSERT_TRUE(control(ep, "start")["ok"]);
  s.sim.endpoints = {ep2};
  s.sim.wait_subscribers_ms = 5000;
  EXPECT_TRUE(pipeline::run_stream_simulator(s.sim).subscribers_seen);
  r = wait_status(ep, [](const json& j) { return idle_after(j, 2); }, 20s);
  EXPECT_EQ(r["last_run"]["frames"], 50) << r.dump();
  EXPECT_EQ(r["last_run"]["end_reason"], "end of acquisition");
  control(ep, "shutdown");
  EXPECT_TRUE(d.wait(10s));
}

TEST(Daemon, RunFileErrorsAreOneLineWithoutTheClock) {
  // HDF5's description of a failed open carries ctime()'s text and its newline; what the run
  // file's errors (and so status and the log) say is one line without it.
  const fs::path missing = glint::testing::fresh_dir("hdf5_message") / "none.h5";
  try {
    pipeline::read_run_file(missing);
    FAIL() << "a missing file was read";
  } catch (const std::exception& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    EXPECT_EQ(what.find("time = "), std::string::npos) << what;
    EXPECT_EQ(what.rfind(missing.string() + ": ", 0), 0u) << what;
    EXPECT_NE(what.find("unable to open file: name = '" + missing.string() + "'"),
              std::string::npos)
        << what;
  }
}

// A run with a pixel mask started with overrides: what the mask removed is in the stats reply,
// in the last run's summary and in the run file, and the clusters left avoid masked centres.
TEST(Daemon, MaskedClustersAreCountedInTheStats) {
  Rigging s = setup("daemon_mask");
  s.sim.image.photons = 20;
  s.sim.image.defects = false;  // no random defects: the mask is known exactly
  s.sim.image.stuck_pixels = {5 * 48 + 6};
  // Mask the left half: about half the clusters go.
  std::vector<uint32_t> mask(32 * 48, 0);
  for (uint32_t y = 0; y < 32; ++y)
    for (uint32_t x = 0; x < 24; ++x) mask[y * 48 + x] = pipeline::kMaskUser;
  const fs::path mask_file = s.cfg.output.directory / "mask.h5";
  pipeline::write_mask_file(mask_file.string(), "/mask", mask, {32, 48});
  daemon::Daemon d(s.cfg);
  const std::string ep = d.control_endpoint();
  json r = control(ep, json{{"command", "start"},
                            {"overrides", {{"mask", {{"file", mask_file.string() + ":/mask"},
                                                     {"from_dark", true}}}}}});
  ASSERT_TRUE(r["ok"]) << r.dump();
  pipeline::run_stream_simulator(s.sim);
  r = wait_status(ep, [](const json& j) { return idle_after(j, 1); }, 20s);
  ASSERT_EQ(r["state"], "idle") << r.dump();
  r = control(ep, "stats");
  ASSERT_TRUE(r["ok"]);
  const auto f = pipeline::read_run_file(r["file"].get<std::string>());
  ASSERT_TRUE(f.masked_clusters.has_value());
  EXPECT_GT(*f.masked_clusters, 20u);
  EXPECT_EQ(r["masked_clusters"], *f.masked_clusters);
  EXPECT_EQ(r["last_run"]["masked_clusters"], *f.masked_clusters);
  EXPECT_EQ(r["clusters"], f.clusters.n_clusters());
  EXPECT_EQ(r["masked_pixels"], 32 * 24);  // the stuck pixel is in the masked half already
  EXPECT_EQ(f.pixel_mask[5 * 48 + 6], pipeline::kMaskUser | pipeline::kMaskDead);
  uint64_t per_frame = 0;
  for (uint32_t n : f.frame_masked_clusters) per_frame += n;
  EXPECT_EQ(per_frame, *f.masked_clusters);
  for (std::size_t i = 0; i < f.clusters.n_clusters(); ++i) EXPECT_GE(f.clusters.x()[i], 24u);
}
