// What an operator sees: `glintd --check` refusing what would fail at run start, --log-level
// across SIGHUP, `glint ctl --config`, and messages on one line.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <memory>

#include "control_client.hpp"
#include "glint/gpu/device.hpp"
#include "glintd_rig.hpp"
#include "process.hpp"

using namespace glint;
using namespace glint::testing::glintd_names;

namespace {

/// `glintd --check --config FILE`: its exit status and output.
std::pair<std::optional<int>, std::string> check(const fs::path& file, const fs::path& log) {
  Process p({bin("glintd").string(), "--check", "--config", file.string()}, log);
  const auto status = p.wait_exit(20s);
  return {status, p.log()};
}

/// A valid configuration for this machine (CPU finder, a writable directory), with `more`
/// (YAML lines) appended.
std::string base_config(const fs::path& dir, const std::string& more = "") {
  return "detector: {rows: 40, cols: 40}\n"
         "pedestal: {dark_frames: 20, window: 20}\n"
         "finder: {backend: cpu}\n"
         "output: {directory: \"" +
         (dir / "runs").string() + "\"}\n" + more;
}

}  // namespace

TEST(GlintdCheck, RefusesWhatWouldFailAtRunStartWithKeyAndLine) {
  const fs::path dir = glint::testing::fresh_dir("check_moment");
  {
    std::ofstream(dir / "good.yaml") << base_config(dir);
    const auto [status, out] = check(dir / "good.yaml", dir / "good.log");
    EXPECT_EQ(status, 0) << out;
  }
  std::ofstream(dir / "a_file") << "x";
  struct Case {
    std::string name, text, expect;
  };
  const std::vector<Case> cases = {
      {"dir", "", ""},  // the configuration is a directory (below)
      {"empty", "", "empty.yaml: (file): holds no configuration"},
      {"twice", base_config(dir, "detector: {rows: 80, cols: 80}\n"),
       "twice.yaml:5: detector: given twice (first on line 1)"},
      {"port",
       base_config(dir, "ingest:\n  endpoints: [\"tcp://127.0.0.1:99999\"]\n"),
       "port.yaml:6: ingest.endpoints: 'tcp://127.0.0.1:99999': port '99999' is out of range "
       "(allowed: tcp://HOST:PORT with PORT 1..65535, ipc://PATH)"},
      {"host",
       base_config(dir, "ingest:\n  endpoints: [\"tcp://no-such-host.invalid:30001\"]\n"),
       "host.yaml:6: ingest.endpoints: host 'no-such-host.invalid' of "
       "'tcp://no-such-host.invalid:30001' does not resolve"},
      {"unwritable",
       "detector: {rows: 40, cols: 40}\npedestal: {dark_frames: 20, window: 20}\n"
       "finder: {backend: cpu}\noutput:\n  directory: \"" +
           (dir / "a_file" / "runs").string() + "\"\n",
       "unwritable.yaml:5: output.directory: '" + (dir / "a_file" / "runs").string() +
           "' cannot take run files: " + (dir / "a_file").string() + " is not a directory"},
      {"mask",
       base_config(dir, "reconstruction:\n  enabled: true\n  forward: \"mask:" +
                            (dir / "none.h5").string() + ":/mask\"\n"),
       "mask.yaml:7: reconstruction.forward: mask file '" + (dir / "none.h5").string() +
           "' cannot be read (No such file or directory)"},
      {"pixel_mask",
       base_config(dir, "mask:\n  from_dark: true\n  file: \"" + (dir / "none.h5").string() +
                            ":/m\"\n"),
       "pixel_mask.yaml:7: mask.file: mask file " + (dir / "none.h5").string() +
           ": no such file (allowed: FILE.h5:/dataset"},
      {"subpixel",
       base_config(dir, "products:\n  subpixel: {calibration: \"" +
                            (dir / "none.h5").string() + "\"}\n"),
       "subpixel.yaml:6: products.subpixel.calibration: eta calibration file " +
           (dir / "none.h5").string() + ": does not exist (allowed: an eta calibration file "
           "made by glint eta-calibrate, or \"\")"},
      {"subpixel_not_hdf5",
       base_config(dir, "products:\n  subpixel: {calibration: \"" +
                            (dir / "a_file").string() + "\"}\n"),
       "subpixel_not_hdf5.yaml:6: products.subpixel.calibration: eta calibration file " +
           (dir / "a_file").string()},
      {"dark", base_config(dir, "").replace(base_config(dir, "").find("dark_frames: 20"), 15,
                                            "dark_frames: 5"),
       "dark.yaml:2: pedestal.dark_frames: 5 is fewer than pedestal.window = 20"},
  };
  for (const auto& c : cases) {
    fs::path file = dir / (c.name + ".yaml");
    if (c.name == "dir") {
      file = dir / "a_directory";
      fs::create_directories(file);
    } else {
      std::ofstream(file) << c.text;
    }
    const auto [status, out] = check(file, dir / (c.name + ".log"));
    EXPECT_EQ(status, 2) << c.name << ": " << out;
    const std::string expect =
        c.name == "dir" ? file.string() + ": (file): is a directory (expected a YAML file"
                        : c.expect;
    EXPECT_NE(out.find(expect), std::string::npos) << c.name << ": " << out;
    EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << c.name << ": " << out;
  }
  // The GPU backend on a machine without a GPU.
  if (gpu::device_count() == 0) {
    std::string text = base_config(dir);
    text.replace(text.find("backend: cpu"), 12, "backend: gpu");
    std::ofstream(dir / "gpu.yaml") << text;
    const auto [status, out] = check(dir / "gpu.yaml", dir / "gpu.log");
    EXPECT_EQ(status, 2) << out;
    EXPECT_NE(out.find("gpu.yaml:3: finder.backend: gpu: the GPU backend cannot run here: "),
              std::string::npos)
        << out;
    EXPECT_EQ(out.find("CUDA driver version is insufficient"), std::string::npos) << out;
  }
  // glintd itself refuses to start with such a file, as --check does.
  Process start({bin("glintd").string(), "--config", (dir / "host.yaml").string()},
                dir / "start.log");
  EXPECT_EQ(start.wait_exit(20s), 2) << start.log();
  EXPECT_NE(start.log().find("does not resolve"), std::string::npos) << start.log();
}

TEST(Glintd, LogLevelFromTheCommandLineSurvivesSighup) {
  glint::testing::GlintdRig rig("loglevel");
  rig.extra = "logging: {level: info}\n";
  rig.write();
  Process d({bin("glintd").string(), "--config", rig.config.string(), "--log-level", "warn"},
            rig.dir / "glintd.log");
  ASSERT_TRUE(wait_status(rig.control_ep, [](const json&) { return true; }, 10s)["ok"])
      << d.log();
  // A reload that changes something visible, and keeps logging.level: info in the file.
  rig.run_name = "reloaded";
  rig.write();
  d.signal(SIGHUP);
  json r;
  for (const auto until = std::chrono::steady_clock::now() + 10s;
       std::chrono::steady_clock::now() < until;) {
    r = control(rig.control_ep, "config");
    if (r.value("yaml", std::string()).find("run_name: reloaded") != std::string::npos) break;
    std::this_thread::sleep_for(50ms);
  }
  const std::string yaml = r.value("yaml", std::string());
  ASSERT_NE(yaml.find("run_name: reloaded"), std::string::npos) << yaml << d.log();
  EXPECT_NE(yaml.find("level: warn"), std::string::npos) << yaml;
  // Info lines (a run starting, the reload itself) stay out of the log at level warn.
  r = control(rig.control_ep, "start", 15000);
  ASSERT_TRUE(r["ok"]) << r.dump();
  control(rig.control_ep, "abort");
  wait_status(rig.control_ep, [](const json& j) { return !j.contains("run_index"); }, 10s);
  d.signal(SIGTERM);
  EXPECT_EQ(d.wait_exit(20s), 0) << d.log();
  EXPECT_EQ(d.log().find(" info "), std::string::npos) << d.log();
}

TEST(Glintd, SighupWithAConfigurationThatCannotRunKeepsTheCurrentOne) {
  glint::testing::GlintdRig rig("reload_bad");
  rig.write();
  Process d(rig.glintd(), rig.dir / "glintd.log");
  ASSERT_TRUE(wait_status(rig.control_ep, [](const json&) { return true; }, 10s)["ok"])
      << d.log();
  std::ofstream(rig.dir / "a_file") << "x";
  const fs::path runs = rig.runs;
  rig.runs = rig.dir / "a_file" / "runs";
  rig.run_name = "never";
  rig.write();
  d.signal(SIGHUP);
  std::string log;
  for (const auto until = std::chrono::steady_clock::now() + 10s;
       std::chrono::steady_clock::now() < until &&
       (log = d.log()).find("configuration not reloaded") == std::string::npos;)
    std::this_thread::sleep_for(50ms);
  EXPECT_NE(log.find("SIGHUP: configuration not reloaded, keeping the current one: " +
                     rig.config.string() + ":5: output.directory: '" + rig.runs.string() +
                     "' cannot take run files"),
            std::string::npos)
      << log;
  const json r = control(rig.control_ep, "start", 15000);
  ASSERT_TRUE(r["ok"]) << r.dump();
  EXPECT_EQ(r["file"], pipeline::run_file_path(runs, "reload_bad", 1).string());
  control(rig.control_ep, "abort");
}

TEST(GlintCtl, ConfigGivesTheEndpointAndAFailedStartReadsAsOne) {
  glint::testing::GlintdRig rig("ctl_config");
  rig.write();
  // Nobody there yet: the error names the endpoint tried and how to choose another.
  Process none({bin("glint").string(), "ctl", "--config", rig.config.string(), "--timeout-ms",
                "300", "status"},
               rig.dir / "none.log");
  EXPECT_EQ(none.wait_exit(10s), 1) << none.log();
  EXPECT_NE(none.log().find("glint ctl: no answer from glintd at " + rig.control_ep +
                            " within 300 ms: is glintd running there? (--endpoint ENDPOINT or "
                            "--config GLINTD.yaml for its control.endpoint"),
            std::string::npos)
      << none.log();

  Process d(rig.glintd(), rig.dir / "glintd.log");
  ASSERT_TRUE(wait_status(rig.control_ep, [](const json&) { return true; }, 10s)["ok"])
      << d.log();
  Process st({bin("glint").string(), "ctl", "--config", rig.config.string(), "status"},
             rig.dir / "status.log");
  EXPECT_EQ(st.wait_exit(10s), 0) << st.log();
  EXPECT_EQ(st.log().rfind("idle; up ", 0), 0u) << st.log();

  // A start that fails at once: ctl says so (exit 1, one line), and status does not read as a
  // run that ended or name a file that was never written.
  Process start({bin("glint").string(), "ctl", "--config", rig.config.string(), "start",
                 "--overrides", R"({"pedestal": {"dark_frames": 0, "keep_previous": true}})"},
                rig.dir / "start.log");
  EXPECT_EQ(start.wait_exit(20s), 1) << start.log();
  EXPECT_EQ(start.log().rfind("glint ctl start: " + rig.config.string() +
                                  " + overrides: pedestal.dark_frames: 0 dark frames with "
                                  "keep_previous",
                              0),
            0u)
      << start.log();
  Process after({bin("glint").string(), "ctl", "--config", rig.config.string(), "status"},
                rig.dir / "after.log");
  EXPECT_EQ(after.wait_exit(10s), 0) << after.log();
  const std::string text = after.log();
  EXPECT_EQ(text.rfind("error; the last run could not start; error: ", 0), 0u) << text;
  EXPECT_EQ(text.find("ended ()"), std::string::npos) << text;
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1) << text;

  // A run name with a newline is refused on one line, echoed escaped.
  const json r = control(rig.control_ep,
                         json{{"command", "start"},
                              {"overrides", {{"output", {{"run_name", "x\n2026 info forged"}}}}}});
  EXPECT_FALSE(r["ok"]);
  const std::string e = r["error"].get<std::string>();
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  EXPECT_NE(e.find("'x\\x0a2026 info forged' is not allowed"), std::string::npos) << e;
  d.signal(SIGTERM);
  EXPECT_EQ(d.wait_exit(20s), 0) << d.log();
  const std::string log = d.log();
  EXPECT_EQ(log.find("\n2026 info forged"), std::string::npos) << log;
}

TEST(GlintCtl, SeveralDaemonsAtOnceWithTotalsAndOneFailureNamed) {
  // Two glintd on one host, each on its own part of a detector, as one per receiver host is.
  glint::testing::GlintdRig a("ctl_multi_a"), b("ctl_multi_b");
  a.write();
  b.write();
  Process da(a.glintd(), a.dir / "glintd.log"), db(b.glintd(), b.dir / "glintd.log");
  for (const auto* rig : {&a, &b})
    ASSERT_TRUE(wait_status(rig->control_ep, [](const json&) { return true; }, 10s)["ok"])
        << da.log() << db.log();
  const std::vector<std::string> both{bin("glint").string(), "ctl", "--endpoint", a.control_ep,
                                      "--endpoint", b.control_ep};
  auto ctl = [&](std::vector<std::string> args, const fs::path& log) {
    std::vector<std::string> argv = both;
    argv.insert(argv.end(), args.begin(), args.end());
    return std::make_unique<Process>(argv, log);
  };
  auto start = ctl({"start"}, a.dir / "start.log");
  ASSERT_EQ(start->wait_exit(20s), 0) << start->log();
  for (const auto* rig : {&a, &b})
    EXPECT_NE(start->log().find("== glintd at " + rig->control_ep), std::string::npos)
        << start->log();

  Process sa(glint::testing::sim_argv(a, 60, "0", "10", "7"), a.dir / "sim.log");
  Process sb(glint::testing::sim_argv(b, 100, "0", "10", "8"), b.dir / "sim.log");
  ASSERT_EQ(sa.wait_exit(30s), 0) << sa.log();
  ASSERT_EQ(sb.wait_exit(30s), 0) << sb.log();
  for (const auto* rig : {&a, &b})
    ASSERT_EQ(wait_status(rig->control_ep,
                          [](const json& j) { return j.value("state", "") == "idle"; }, 20s)
                  ["state"],
              "idle");

  auto stats = ctl({"stats", "--json"}, a.dir / "stats.log");
  ASSERT_EQ(stats->wait_exit(10s), 0) << stats->log();
  const json s = json::parse(stats->log());
  EXPECT_TRUE(s["ok"]);
  ASSERT_EQ(s["daemons"].size(), 2u);
  EXPECT_EQ(s["daemons"][0]["endpoint"], a.control_ep);
  EXPECT_EQ(s["daemons"][0]["reply"]["frames"]["received"], 80);
  EXPECT_EQ(s["daemons"][1]["reply"]["frames"]["received"], 120);
  const json& t = s["total"];
  EXPECT_EQ(t["answered"], 2);
  EXPECT_EQ(t["frames"]["received"], 200);
  EXPECT_EQ(t["frames"]["dark"], 40);
  EXPECT_EQ(t["frames"]["data"], 160);
  EXPECT_EQ(t["clusters"], s["daemons"][0]["reply"]["clusters"].get<uint64_t>() +
                               s["daemons"][1]["reply"]["clusters"].get<uint64_t>());
  EXPECT_EQ(t["states"]["idle"], 2);
  auto text = ctl({"stats"}, a.dir / "stats_text.log");
  ASSERT_EQ(text->wait_exit(10s), 0) << text->log();
  EXPECT_NE(text->log().find("== total of 2 daemons\ndaemons    2 answered of 2  (idle 2)\n"
                             "frames     received 200  processed 200  dark 40  data 160\n"),
            std::string::npos)
      << text->log();

  // One daemon gone: the other still answers, the failure is one line naming its endpoint and
  // the command fails.
  db.signal(SIGTERM);
  ASSERT_EQ(db.wait_exit(20s), 0) << db.log();
  auto status = ctl({"status", "--timeout-ms", "300"}, a.dir / "status.log");
  EXPECT_EQ(status->wait_exit(10s), 1) << status->log();
  const std::string out = status->log();
  EXPECT_NE(out.find(a.control_ep + "  idle; last run 1 ended"), std::string::npos) << out;
  EXPECT_NE(out.find("glint ctl status: " + b.control_ep + ": no answer from glintd at " +
                     b.control_ep + " within 300 ms"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("glint ctl status: 1 of 2 daemons failed (" + b.control_ep + ")"),
            std::string::npos)
      << out;
  da.signal(SIGTERM);
  EXPECT_EQ(da.wait_exit(20s), 0) << da.log();
}
