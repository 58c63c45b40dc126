// The real glintd and glint binaries against hostile control requests: run names and directories
// that would escape, requests too large or too deep to parse, CURVE keys on the control socket.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <map>
#include <memory>
#include <sstream>

#include "../pipeline/stream_test_util.hpp"
#include "control_client.hpp"
#include "glintd_rig.hpp"
#include "glint/pipeline/run_file.hpp"
#include "process.hpp"

using namespace glint;
using namespace glint::testing::glintd_names;
using glint::testing::control_raw;
using glint::testing::CurveClient;

namespace {

constexpr uint32_t kDark = 20;

struct Rig : glint::testing::GlintdRig {
  explicit Rig(const std::string& name, const std::string& control_keys = "")
      : GlintdRig(name, 40, kDark) {
    fs::create_directories(runs);
    control_extra = control_keys;
    write();
  }
  std::vector<std::string> sim(uint64_t frames, int rate) const {
    return glint::testing::sim_argv(*this, frames, std::to_string(rate), "10", "7");
  }
};

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// "public: KEY" / "secret: KEY" lines of a key file written by `glint ctl keygen`.
std::map<std::string, std::string> read_keys(const fs::path& p) {
  std::map<std::string, std::string> out;
  std::istringstream in(read_text(p));
  std::string line;
  while (std::getline(in, line))
    if (const auto c = line.find(": "); c != std::string::npos && line[0] != '#')
      out[line.substr(0, c)] = line.substr(c + 2);
  return out;
}

}  // namespace

TEST(GlintdSecurity, NulInRunNameIsRefusedOverTheSocketAndByCheck) {
  Rig rig("nulname");
  // An earlier run's data that the issue's request overwrote with an empty run file.
  std::ofstream(rig.file(1)) << "precious run data";
  std::ofstream(rig.dir / "notes.txt") << "unrelated text";
  Process d(rig.glintd(), rig.dir / "glintd.log");
  ASSERT_EQ(wait_status(
                rig.control_ep, [](const json&) { return true; }, 10s)["state"],
            "idle")
      << d.log();
  const std::string nul_name = rig.file(1).filename().string() + std::string(1, '\0');
  json r =
      control(rig.control_ep,
              json{{"command", "start"},
                   {"overrides", {{"output", {{"run_name", nul_name}, {"overwrite", true}}}}}});
  EXPECT_FALSE(r.value("ok", true)) << r.dump();
  EXPECT_NE(r.value("error", "")
                .find("output.run_name: 'nulname_000001.h5\\x00' is not allowed: it contains "
                      "'\\x00' (allowed: 1 to 64 characters of A-Z a-z 0-9 . _ -"),
            std::string::npos)
      << r.dump();
  // The same with the JSON text exactly as an attacker sends it.
  r = control_raw(rig.control_ep, R"({"command": "start", "overrides": {"output": {"run_name": )"
                                  R"("nulname_000001.h5\u0000", "overwrite": true}}})");
  EXPECT_FALSE(r.value("ok", true)) << r.dump();
  // A name reaching into another directory.
  r = control(
      rig.control_ep,
      json{{"command", "start"},
           {"overrides", {{"output", {{"run_name", "../notes.txt\n"}, {"overwrite", true}}}}}});
  EXPECT_FALSE(r.value("ok", true)) << r.dump();
  r = control(
      rig.control_ep,
      json{{"command", "start"},
           {"overrides", {{"output", {{"directory", rig.dir.string()}, {"overwrite", true}}}}}});
  EXPECT_NE(r.value("error", "")
                .find("output.directory: '" + rig.dir.string() +
                      "' is not within "
                      "output.allowed_roots"),
            std::string::npos)
      << r.dump();
  EXPECT_EQ(read_text(rig.file(1)), "precious run data");
  EXPECT_EQ(read_text(rig.dir / "notes.txt"), "unrelated text");
  EXPECT_EQ(std::distance(fs::directory_iterator(rig.runs), fs::directory_iterator()), 1);
  r = control(rig.control_ep, "status");
  EXPECT_EQ(r["state"], "idle");
  EXPECT_EQ(r["runs_completed"], 0);
  d.signal(SIGTERM);
  EXPECT_EQ(d.wait_exit(10s), 0) << d.log();

  // The same value in a configuration file: `glintd --check` refuses it, naming key and line.
  std::ofstream(rig.dir / "nul.yaml")
      << "output:\n  directory: /tmp\n  run_name: \"run_000001.h5\\0\"\n";
  Process check({bin("glintd").string(), "--check", "--config", (rig.dir / "nul.yaml").string()},
                rig.dir / "check.log");
  EXPECT_EQ(check.wait_exit(10s), 2) << check.log();
  EXPECT_NE(check.log().find("nul.yaml:3: output.run_name: 'run_000001.h5\\x00' is not allowed"),
            std::string::npos)
      << check.log();
  // And a run beyond the memory budget: the issue's 4096 x 4096 detector with a 1M-frame queue.
  std::ofstream(rig.dir / "big.yaml") << "detector: {rows: 4096, cols: 4096}\n"
                                         "ingest: {queue_frames: 1048576}\n";
  Process big({bin("glintd").string(), "--check", "--config", (rig.dir / "big.yaml").string()},
              rig.dir / "big.log");
  EXPECT_EQ(big.wait_exit(10s), 2) << big.log();
  EXPECT_NE(
      big.log().find("run.memory_budget_mb: the run needs 35232825 MB (assembler 35188668 MB"),
      std::string::npos)
      << big.log();
  EXPECT_NE(big.log().find("but the budget is 8192 MB"), std::string::npos) << big.log();
}

TEST(GlintdSecurity, HugeAndDeepRequestsAreRefusedAndTheRunSurvives) {
  Rig rig("deepreq");
  Process d(rig.glintd(), rig.dir / "glintd.log");
  ASSERT_EQ(wait_status(
                rig.control_ep, [](const json&) { return true; }, 10s)["state"],
            "idle")
      << d.log();
  json r = control(rig.control_ep, "start");
  ASSERT_TRUE(r.value("ok", false)) << r.dump();
  constexpr uint64_t kFrames = 600;
  Process s(rig.sim(kFrames, 300), rig.dir / "sim.log");
  ASSERT_TRUE(wait_status(
                  rig.control_ep, [](const json& j) { return j.value("frames", 0u) > kDark; }, 10s)
                  .value("frames", 0u) > kDark);

  // The issue's request: a start whose overrides nest 100,000 levels deep (it crashed glintd).
  std::string deep = R"({"command": "start", "overrides": )";
  for (int i = 0; i < 100000; ++i) deep += "{\"a\":";
  deep += "1" + std::string(100000, '}') + "}";
  r = control_raw(rig.control_ep, deep, 5000);
  EXPECT_FALSE(r.value("ok", true)) << r.dump();
  EXPECT_EQ(r.value("error", ""),
            "request of " + std::to_string(deep.size()) +
                " bytes refused: larger than control.max_request_bytes (65536 bytes)");
  // Deep but small: refused for its depth, unparsed.
  std::string small = R"({"command": "start", "overrides": )";
  for (int i = 0; i < 5000; ++i) small += "[";
  small += std::string(5000, ']') + "}";
  r = control_raw(rig.control_ep, small, 5000);
  EXPECT_EQ(r.value("error", ""), "request refused: JSON nested deeper than 32 levels") << r.dump();
  // Past ZMQ_MAXMSGSIZE (1 MiB) ZeroMQ drops the connection: no answer, nothing allocated.
  r = control_raw(rig.control_ep, std::string(8 << 20, '['), 1000);
  EXPECT_EQ(r.value("error", ""), "timeout");
  // Still serving, and the run goes on to its end with every frame.
  r = control(rig.control_ep, "status");
  ASSERT_TRUE(r.value("ok", false)) << r.dump() << d.log();
  EXPECT_EQ(r["state"], "acquiring") << r.dump();
  EXPECT_EQ(s.wait_exit(30s), 0) << s.log();
  r = wait_status(
      rig.control_ep, [](const json& j) { return j.value("runs_completed", 0u) >= 1; }, 20s);
  ASSERT_EQ(r.value("runs_completed", 0u), 1u) << r.dump() << d.log();
  EXPECT_EQ(r["last_run"]["end_reason"], "end of acquisition");
  EXPECT_EQ(r["last_run"]["frames"], kDark + kFrames);
  EXPECT_EQ(pipeline::read_run_file(rig.file(1)).frames.size(), kDark + kFrames);
  EXPECT_TRUE(d.running());
  d.signal(SIGTERM);
  EXPECT_EQ(d.wait_exit(10s), 0) << d.log();
}

TEST(GlintdSecurity, CurveAllowsListedKeysOnlyAndAdminsAlone) {
  const fs::path keys = glint::testing::fresh_dir("curve_keys");
  for (const char* name : {"server", "admin", "operator", "stranger"}) {
    Process g({bin("glint").string(), "ctl", "keygen", "--output", (keys / name).string()},
              keys / (std::string(name) + ".log"));
    ASSERT_EQ(g.wait_exit(10s), 0) << g.log();
    struct stat st {};
    ASSERT_EQ(::stat((keys / name).c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u) << name;
    EXPECT_EQ(read_keys(keys / name).at("public"),
              read_keys(keys / (std::string(name) + ".pub")).at("public"));
    EXPECT_EQ(read_keys(keys / name).at("secret").size(), 40u);
    EXPECT_EQ(read_keys(keys / (std::string(name) + ".pub")).count("secret"), 0u);
  }
  // keygen never replaces a key.
  Process again({bin("glint").string(), "ctl", "keygen", "--output", (keys / "server").string()},
                keys / "again.log");
  EXPECT_EQ(again.wait_exit(10s), 1) << again.log();
  fs::create_directories(keys / "clients");
  fs::copy_file(keys / "admin.pub", keys / "clients" / "admin.pub");
  fs::copy_file(keys / "operator.pub", keys / "clients" / "operator.pub");

  // `glintd --check` reads the key files: a missing one, or a client list holding a secret key.
  auto check = [&](const std::string& control_keys, const std::string& tag) {
    Rig bad("curve_" + tag, control_keys);
    auto p = std::make_unique<Process>(std::vector<std::string>{bin("glintd").string(), "--check",
                                                                "--config", bad.config.string()},
                                       bad.dir / "check.log");
    EXPECT_EQ(p->wait_exit(10s), 2) << p->log();
    return p->log();
  };
  std::string log =
      check(", require_curve: true, curve_server_key: /nonexistent/server.key, curve_clients: \"" +
                (keys / "clients").string() + "\"",
            "missing");
  EXPECT_NE(log.find("control.curve_server_key: /nonexistent/server.key: cannot be opened"),
            std::string::npos)
      << log;
  log = check(", require_curve: true, curve_server_key: \"" + (keys / "server").string() +
                  "\", curve_clients: \"" + (keys / "admin").string() + "\"",
              "secret");
  EXPECT_NE(
      log.find("control.curve_clients: " + (keys / "admin").string() + ": holds a secret key"),
      std::string::npos)
      << log;

  Rig rig("curve", ", require_curve: true, curve_server_key: \"" + (keys / "server").string() +
                       "\", curve_clients: \"" + (keys / "clients").string() +
                       "\", curve_admins: \"" + (keys / "admin.pub").string() + "\"");
  Process d(rig.glintd(), rig.dir / "glintd.log");
  const std::string server = read_keys(keys / "server.pub").at("public");
  auto client = [&](const char* name) {
    const auto k = read_keys(keys / name);
    return CurveClient{k.at("public"), k.at("secret"), server};
  };
  const CurveClient admin = client("admin"), op = client("operator"), stranger = client("stranger");
  json r;
  for (const auto until = std::chrono::steady_clock::now() + 10s;
       std::chrono::steady_clock::now() < until;) {
    r = control_raw(rig.control_ep, R"({"command": "status"})", 500, &op);
    if (r.value("ok", false)) break;
  }
  ASSERT_TRUE(r.value("ok", false)) << r.dump() << d.log();
  EXPECT_EQ(r["state"], "idle");
  // No key, or a key not listed: the handshake fails, no answer.
  EXPECT_EQ(control(rig.control_ep, json{{"command", "status"}}, 1000)["error"], "timeout");
  EXPECT_EQ(control_raw(rig.control_ep, R"({"command": "shutdown"})", 1000, &stranger)["error"],
            "timeout");
  // A listed key that is not an admin cannot shut down or abort.
  r = control_raw(rig.control_ep, R"({"command": "shutdown"})", 3000, &op);
  EXPECT_FALSE(r.value("ok", true)) << r.dump();
  EXPECT_EQ(r.value("error", ""),
            "'shutdown' is not allowed for this client key (control.curve_admins)");
  r = control_raw(rig.control_ep, R"({"command": "abort"})", 3000, &op);
  EXPECT_EQ(r.value("error", ""),
            "'abort' is not allowed for this client key (control.curve_admins)");
  // glint ctl with a key file.
  auto ctl = [&](const std::string& key, const std::string& cmd, const std::string& log) {
    return std::make_unique<Process>(
        std::vector<std::string>{bin("glint").string(), "ctl", "--endpoint", rig.control_ep,
                                 "--key-file", (keys / key).string(), "--server-key",
                                 (keys / "server.pub").string(), "--timeout-ms", "2000", cmd},
        rig.dir / log);
  };
  auto st = ctl("operator", "status", "ctl_status.log");
  EXPECT_EQ(st->wait_exit(10s), 0) << st->log();
  EXPECT_EQ(st->log().rfind("idle", 0), 0u) << st->log();
  auto down = ctl("operator", "shutdown", "ctl_down.log");
  EXPECT_EQ(down->wait_exit(10s), 1) << down->log();
  EXPECT_NE(down->log().find("not allowed for this client key"), std::string::npos) << down->log();
  auto nokey = ctl("stranger", "status", "ctl_stranger.log");
  EXPECT_EQ(nokey->wait_exit(10s), 1) << nokey->log();
  EXPECT_NE(nokey->log().find("no answer"), std::string::npos) << nokey->log();
  EXPECT_TRUE(d.running());
  EXPECT_NE(d.log().find("refused a client"), std::string::npos) << d.log();
  // The admin may.
  auto admin_down = ctl("admin", "shutdown", "ctl_admin.log");
  EXPECT_EQ(admin_down->wait_exit(10s), 0) << admin_down->log();
  EXPECT_EQ(d.wait_exit(10s), 0) << d.log();
  (void)admin;
}

namespace {

/// The peak resident memory of a process (VmHWM), in kB.
long peak_rss_kb(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stol(line.substr(6));
  return -1;
}

}  // namespace

TEST(GlintdSecurity, HugeStreamHeadersDoNotGrowTheDaemon) {
  Rig rig("hugeheader");
  rig.auto_start = true;
  rig.write();
  Process d(rig.glintd(), rig.dir / "glintd.log");
  ASSERT_TRUE(wait_status(
                  rig.control_ep, [](const json& j) { return j.contains("run_index"); }, 10s)
                  .contains("run_index"))
      << d.log();
  {
    zmq::context_t ctx(1);
    zmq::socket_t pub(ctx, zmq::socket_type::pub);
    pub.set(zmq::sockopt::linger, 0);
    pub.bind(rig.data_ep);
    std::this_thread::sleep_for(500ms);  // the run's subscriber connects
    const long before = peak_rss_kb(d.pid());
    ASSERT_GT(before, 0);
    // The issue's attack: 400 MB JSON headers (with a payload part each), three times.
    std::string header = "{\"jsonversion\": 5, \"pad\": \"";
    header += std::string(400u << 20, 'x') + "\"}";
    for (int i = 0; i < 3; ++i) {
      pub.send(zmq::buffer(header), zmq::send_flags::sndmore);
      pub.send(zmq::buffer(std::string(3200, '\0')), zmq::send_flags::none);
      std::this_thread::sleep_for(700ms);
    }
    const long after = peak_rss_kb(d.pid());
    // ZMQ_MAXMSGSIZE (the 40 x 40 port's 32-bit image or a 64 KiB header, + 64 KiB) refuses them
    // as they arrive: glintd's peak memory does not grow by a header (it took 400 MB to receive
    // one, and the header parser kept as much).
    EXPECT_LT(after - before, 32 * 1024) << before << " kB -> " << after << " kB";
  }
  // The ingest connects again, and a real sender's run goes through whole.
  Process s(rig.sim(200, 0), rig.dir / "sim.log");
  EXPECT_EQ(s.wait_exit(30s), 0) << s.log();
  json r = wait_status(
      rig.control_ep, [](const json& j) { return j.value("runs_completed", 0u) >= 1; }, 20s);
  ASSERT_EQ(r.value("runs_completed", 0u), 1u) << r.dump() << d.log();
  EXPECT_EQ(r["last_run"]["frames"], kDark + 200) << r.dump();
  EXPECT_NE(d.log().find("connection lost"), std::string::npos) << d.log();
  d.signal(SIGTERM);
  EXPECT_EQ(d.wait_exit(20s), 0) << d.log();
}
