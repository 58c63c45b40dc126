// glintd with run.auto_start when runs cannot start: it backs off (2 s doubling), creates no
// files while failing, and says so in `status`.
#include <gtest/gtest.h>

#include <sys/mount.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "control_client.hpp"
#include "glint/pipeline/run_file.hpp"
#include "glintd_rig.hpp"
#include "process.hpp"
#include "../pipeline/stream_test_util.hpp"

using namespace glint::testing::glintd_names;

namespace {

std::size_t count_lines(const std::string& text, const std::string& needle) {
  std::size_t n = 0;
  for (auto p = text.find(needle); p != std::string::npos; p = text.find(needle, p + 1)) ++n;
  return n;
}

std::size_t files_in(const fs::path& dir) {
  std::error_code ec;
  std::size_t n = 0;
  for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator();
       it.increment(ec))
    ++n;
  return n;
}

struct FailingStart {
  fs::path dir, config, runs;
  glint::testing::GlintdConfig c;
  explicit FailingStart(const std::string& name) {
    dir = glint::testing::fresh_dir(name);
    runs = dir / "runs";
    c.data_ep = glint::testing::loopback(glint::testing::free_tcp_port());
    c.control_ep = glint::testing::loopback(glint::testing::free_tcp_port());
    c.finder = "backend: cpu, batch_frames: 32";
    c.runs = runs;
    c.run_name = name;
    c.auto_start = true;
    config = dir / "glintd.yaml";
  }
  ~FailingStart() {
    ::umount2(runs.c_str(), MNT_DETACH);
    std::error_code ec;
    fs::remove_all(dir, ec);
  }

  /// Runs glintd for `seconds` and checks that it backed off: at most `max_attempts` run
  /// starts, no file left in the output directory, `status` naming the error and the wait.
  void expect_back_off(double seconds, std::size_t max_attempts, const std::string& error) {
    glint::testing::write_glintd_config(config, c);
    Process d({bin("glintd").string(), "--config", config.string()}, dir / "glintd.log");
    ASSERT_TRUE(wait_status(c.control_ep, [](const json& j) { return j.contains("retry_in_s"); },
                            10s)
                    .contains("retry_in_s"))
        << d.log();
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    const json st = control(c.control_ep, "status");
    const std::string log = d.log();
    const std::size_t attempts = count_lines(log, "starting: ");
    std::printf("%.0f s of failing automatic runs: %zu attempts, %zu files; status %s\n", seconds,
                attempts, files_in(runs), st.dump().c_str());
    EXPECT_GE(attempts, 2u) << log;
    EXPECT_LE(attempts, max_attempts) << log;
    EXPECT_EQ(files_in(runs), 0u);
    EXPECT_EQ(st["state"], "error") << st.dump();
    EXPECT_NE(st["error"].get<std::string>().find(error), std::string::npos) << st.dump();
    ASSERT_TRUE(st.contains("retry_in_s")) << st.dump();
    EXPECT_GT(st["retry_in_s"].get<double>(), 0.0);
    EXPECT_LE(st["retry_in_s"].get<double>(), 60.0);
    EXPECT_EQ(st["failed_runs_in_a_row"].get<std::size_t>(), attempts) << st.dump();
    d.signal(SIGTERM);
    EXPECT_EQ(d.wait_exit(20s), 0) << d.log();
  }
};

}  // namespace

// A full disk (a 1 MiB tmpfs: less than a run file needs to start and close): attempts at
// about 0, 2, 6 s (then 14 s), and no file; before, a broken file every 2 s.
TEST(GlintdStorage, AutoStartOnAFullDiskBacksOffAndCreatesNoFiles) {
  FailingStart f("autostart_full");
  fs::create_directories(f.runs);
  if (::mount("tmpfs", f.runs.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, "size=1m") != 0)
    GTEST_SKIP() << "mounting a tmpfs is not permitted here: " << std::strerror(errno);
  f.expect_back_off(9.0, 4, "disk low");
}

// An output directory that cannot be created (its parent is a file) is refused at start-up;
// one that becomes so while glintd runs gets the same back-off as a full disk.
TEST(GlintdStorage, AutoStartIntoAnImpossibleDirectoryBacksOff) {
  FailingStart f("autostart_nodir");
  std::ofstream(f.dir / "a_file") << "x";
  f.c.runs = f.dir / "a_file" / "runs";
  glint::testing::write_glintd_config(f.config, f.c);
  {
    Process refused({bin("glintd").string(), "--config", f.config.string()},
                    f.dir / "refused.log");
    EXPECT_EQ(refused.wait_exit(20s), 2) << refused.log();
    EXPECT_NE(refused.log().find("output.directory: '" + f.c.runs.string() +
                                 "' cannot take run files: " + (f.dir / "a_file").string() +
                                 " is not a directory"),
              std::string::npos)
        << refused.log();
  }
  // Below a directory that is replaced by a file while the first run waits for data.
  const fs::path parent = f.dir / "parent";
  fs::create_directories(parent);
  f.c.runs = parent / "runs";
  glint::testing::write_glintd_config(f.config, f.c);
  Process d({bin("glintd").string(), "--config", f.config.string()}, f.dir / "glintd.log");
  ASSERT_TRUE(wait_status(f.c.control_ep, [](const json& j) { return j.contains("run_index"); },
                          10s)
                  .contains("run_index"))
      << d.log();
  fs::remove_all(parent);
  std::ofstream(parent) << "x";
  ASSERT_TRUE(wait_status(f.c.control_ep, [](const json& j) { return j.contains("retry_in_s"); },
                          10s)
                  .contains("retry_in_s"))
      << d.log();
  std::this_thread::sleep_for(9s);
  const json st = control(f.c.control_ep, "status");
  const std::string log = d.log();
  // Run 1 failed (its file was removed), then the attempts at about 2 and 6 s failed their
  // check, each backing off further.
  const std::size_t refusals = count_lines(log, "run not started: ");
  EXPECT_GE(refusals, 1u) << log;
  EXPECT_LE(refusals, 3u) << log;
  EXPECT_EQ(count_lines(log, "starting: "), 1u) << log;
  EXPECT_EQ(st["state"], "error") << st.dump();
  EXPECT_NE(st["error"].get<std::string>().find("cannot take run files: " + parent.string() +
                                                " is not a directory"),
            std::string::npos)
      << st.dump();
  EXPECT_EQ(st["failed_runs_in_a_row"].get<std::size_t>(), refusals + 1) << st.dump();
  ASSERT_TRUE(st.contains("retry_in_s")) << st.dump();
  EXPECT_GT(st["retry_in_s"].get<double>(), 0.0);
  d.signal(SIGTERM);
  EXPECT_EQ(d.wait_exit(20s), 0) << d.log();
}

// glintd with run.auto_start writing to a small tmpfs until it fills: the run ends cleanly with
// disk_low, its file opens normally (h5dump) with every row the run wrote, and the next
// automatic run waits for free space instead of making a string of small files.
TEST(GlintdStorage, FillingDiskEndsTheRunCleanlyAndTheNextWaits) {
  for (const char* size : {"12m", "20m"}) {
    FailingStart f(std::string("autostart_fill_") + size);
    fs::create_directories(f.runs);
    const std::string opts = std::string("size=") + size;
    if (::mount("tmpfs", f.runs.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, opts.c_str()) != 0)
      GTEST_SKIP() << "mounting a tmpfs is not permitted here: " << std::strerror(errno);
    f.c.dark = 20;
    glint::testing::write_glintd_config(f.config, f.c);
    Process d({bin("glintd").string(), "--config", f.config.string()}, f.dir / "glintd.log");
    ASSERT_TRUE(wait_status(f.c.control_ep, [](const json& j) { return j.contains("run_index"); },
                            10s)
                    .contains("run_index"))
        << d.log();
    Process sim(glint::testing::sim_argv(f.c, 10'000'000, "0", "60", "7"), f.dir / "sim.log");
    // The run that fills the disk ends cleanly; the next automatic one waits for space.
    const json st = wait_status(
        f.c.control_ep,
        [](const json& j) {
          return j.value("auto_start_waiting", std::string()).starts_with("disk low:");
        },
        120s);
    sim.signal(SIGTERM);
    ASSERT_TRUE(st.contains("last_run")) << st.dump() << d.log();
    const std::string log = d.log();
    EXPECT_NE(log.find("ending the run (disk_low)"), std::string::npos) << log;
    EXPECT_EQ(st["state"], "idle") << st.dump();
    EXPECT_EQ(st["last_run"]["end_reason"], "disk_low") << st.dump();
    EXPECT_GT(st["retry_in_s"].get<double>(), 0.0) << st.dump();
    EXPECT_EQ(count_lines(log, "starting: "), 1u) << log;
    ASSERT_EQ(files_in(f.runs), 1u);
    const fs::path file = glint::pipeline::run_file_path(f.runs, f.c.run_name, 1);
    const auto contents = glint::pipeline::read_run_file(file);
    std::printf("tmpfs %s: disk_low after %zu rows (%llu clusters), end_reason \"%s\"\n", size,
                contents.frames.size(), (unsigned long long)contents.clusters.n_clusters(),
                contents.end_reason.c_str());
    EXPECT_EQ(contents.end_reason, "disk_low");
    EXPECT_FALSE(contents.end_time.empty());
    EXPECT_GT(contents.frames.size(), 1000u);
    EXPECT_EQ(contents.frames.size(), st["last_run"]["frames"].get<std::size_t>());
    EXPECT_EQ(contents.clusters.n_clusters(), st["last_run"]["clusters"].get<std::size_t>());
    EXPECT_EQ(std::system(("/usr/bin/h5dump -H " + file.string() + " >/dev/null 2>&1").c_str()),
              0);
    d.signal(SIGTERM);
    EXPECT_EQ(d.wait_exit(20s), 0) << d.log();
  }
}
