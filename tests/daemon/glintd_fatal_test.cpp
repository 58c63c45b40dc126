// A sticky CUDA error is fatal for glintd: the run's file is closed with every row written
// before the fault, the control socket reports the error, no new run is tried, and the process
// exits with status 3 so that systemd (Restart=on-failure) starts it afresh. The fault comes from
// a test-only finder (sticky_fault.hpp) in a glintd built for the test: it runs without a GPU.
#include <gtest/gtest.h>

#include <regex>

#include "../pipeline/stream_test_util.hpp"
#include "control_client.hpp"
#include "glint/daemon/glintd_main.hpp"
#include "glint/pipeline/run_file.hpp"
#include "glintd_rig.hpp"
#include "process.hpp"

using namespace glint;
using namespace glint::testing::glintd_names;

TEST(GlintdFatal, StickyDeviceErrorClosesTheFileReportsAndExitsNonZero) {
  glint::testing::GlintdRig c("sticky");
  c.finder = "backend: cpu, batch_frames: 8";
  c.auto_start = true;
  c.write();

  Process d(c.glintd("glintd_sticky_fault"), c.dir / "glintd.log", {"GLINT_TEST_FAIL_AT=4"});
  ASSERT_TRUE(d.started());
  ASSERT_TRUE(wait_status(c.control_ep, [](const json& j) { return j.contains("run_index"); }, 10s)
                  .contains("run_index"))
      << d.log();
  Process s(glint::testing::sim_argv(c, 300, "0", "10", "7"), c.dir / "sim.log");

  // Reported on the control socket while the service lingers, and no new run is started.
  const json r =
      wait_status(c.control_ep, [](const json& j) { return j.value("fatal", false); }, 20s);
  ASSERT_TRUE(r.value("fatal", false)) << r.dump() << d.log();
  EXPECT_EQ(r["state"], "error");
  EXPECT_NE(r["error"].get<std::string>().find("cudaErrorIllegalAddress"), std::string::npos)
      << r.dump();
  const json start = control(c.control_ep, "start");
  EXPECT_FALSE(start.value("ok", true)) << start.dump();
  EXPECT_NE(start.value("error", std::string()).find("fatal error"), std::string::npos)
      << start.dump();

  const json stats = control(c.control_ep, "stats");
  ASSERT_TRUE(stats.value("ok", false)) << stats.dump();
  ASSERT_EQ(stats["consumers"].size(), 2u) << stats.dump();
  EXPECT_EQ(stats["consumers"][0]["name"], "run file");
  EXPECT_EQ(stats["consumers"][1]["name"], "products");
  const uint64_t rows_reported = stats["consumers"][0]["frames"].get<uint64_t>();

  EXPECT_EQ(d.wait_exit(20s), daemon::kExitFatal) << d.log();
  const std::string log = d.log();
  EXPECT_NE(log.find("failed fatally"), std::string::npos) << log;
  EXPECT_NE(log.find("exiting after a fatal error"), std::string::npos) << log;

  // The file is closed and readable: the dark frames and every data frame found before the
  // fault, with the reference finder's clusters.
  std::smatch m;
  const std::regex injected("sticky fault injected after (\\d+) data frames");
  ASSERT_TRUE(std::regex_search(log, m, injected)) << log;
  const uint64_t data_ok = std::stoull(m[1]);
  EXPECT_GE(data_ok, 3u) << "three batches of at least one frame went through";
  const auto f = pipeline::read_run_file(c.file(1));
  EXPECT_FALSE(f.end_time.empty());
  EXPECT_FALSE(f.end_state.has_value()) << "the pedestal cannot be read from a lost context";
  EXPECT_EQ(glint::testing::count_rows(f, pipeline::kFlagDark), c.dark);
  EXPECT_EQ(glint::testing::count_rows(f, 0), data_ok);
  EXPECT_EQ(f.frames.size(), c.dark + data_ok);
  EXPECT_EQ(rows_reported, f.frames.size());
  const ClusterTable want = glint::testing::expected_clusters(f, c.image(), 1, c.dark, c.params());
  EXPECT_EQ(f.clusters.n_clusters(), want.n_clusters());
  EXPECT_TRUE(f.clusters == want);
  EXPECT_FALSE(fs::exists(c.file(2)))
      << "no run was retried on the lost device";
}
