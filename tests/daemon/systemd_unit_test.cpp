// The shipped unit: systemd-analyze verify and security, where systemd-analyze exists.
#include <gtest/gtest.h>

#include <sys/socket.h>
#include <sys/un.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <regex>
#include <sstream>

#include "../pipeline/stream_test_util.hpp"
#include "process.hpp"

namespace fs = std::filesystem;

namespace {

std::string unit_text() {
  std::ifstream in(fs::path(GLINT_SOURCE_DIR) / "systemd/glintd.service");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// The unit with ExecStart pointing at the built glintd (verify checks that it exists).
fs::path unit_for_build() {
  const fs::path dir = glint::testing::fresh_dir("unit");
  std::string text = unit_text();
  text = std::regex_replace(text, std::regex("/usr/local/bin/glintd"), glint::testing::bin("glintd").string());
  const fs::path p = dir / "glintd.service";
  std::ofstream(p) << text;
  return p;
}

std::pair<int, std::string> run(const std::string& cmd) {
  std::string out;
  FILE* f = ::popen((cmd + " 2>&1").c_str(), "r");
  if (!f) return {-1, ""};
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, f)) out.append(buf, n);
  const int st = ::pclose(f);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

bool have_systemd_analyze() { return run("command -v systemd-analyze").first == 0; }

}  // namespace

TEST(SystemdUnit, DeclaresWhatTheServiceNeeds) {
  const std::string u = unit_text();
  for (const char* line : {"Type=notify", "WatchdogSec=", "Restart=on-failure", "User=glint", "LimitMEMLOCK=infinity",
                           "NoNewPrivileges=yes", "ProtectSystem=strict", "ExecReload=/bin/kill -HUP $MAINPID",
                           "StateDirectory=glint"})
    EXPECT_NE(u.find(line), std::string::npos) << line;
}

TEST(SystemdUnit, Verifies) {
  if (!have_systemd_analyze()) GTEST_SKIP() << "systemd-analyze not installed";
  const auto [rc, out] = run("systemd-analyze verify " + unit_for_build().string());
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(out.find("glintd.service:"), std::string::npos) << out;
}

TEST(SystemdUnit, SecurityExposureIsLow) {
  if (!have_systemd_analyze()) GTEST_SKIP() << "systemd-analyze not installed";
  // --offline judges the file alone; exposure is 0 (locked down) .. 10 (unprotected).
  const auto [rc, out] = run("systemd-analyze security --offline=yes --threshold=25 " + unit_for_build().string());
  EXPECT_EQ(rc, 0) << out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(out, m, std::regex("Overall exposure level for glintd.service: ([0-9.]+)"))) << out;
  EXPECT_LE(std::stod(m[1]), 2.5) << out;
}

TEST(SystemdNotify, ReadyStatusWatchdogAndStopping) {
  // glintd talks to $NOTIFY_SOCKET like it does to systemd: a unix datagram socket.
  const fs::path dir = glint::testing::fresh_dir("notify");
  const fs::path sock_path = dir / "notify.sock";
  const int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, sock_path.c_str(), sizeof(addr.sun_path) - 1);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  timeval tv{0, 100000};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);

  const std::string control = glint::testing::loopback(glint::testing::free_tcp_port());
  std::ofstream(dir / "glintd.yaml") << "output: {directory: \"" << (dir / "runs").string() << "\"}\n"
                                     << "ingest: {endpoints: [\""
                                     << glint::testing::loopback(glint::testing::free_tcp_port()) << "\"]}\n"
                                     << "control: {endpoint: \"" << control << "\"}\n"
                                     << "preview: {endpoint: \"tcp://127.0.0.1:*\"}\n"
                                     << "finder: {backend: cpu}\n";
  glint::testing::Process d({glint::testing::bin("glintd").string(), "--config", (dir / "glintd.yaml").string()},
                            dir / "glintd.log", {"NOTIFY_SOCKET=" + sock_path.string(), "WATCHDOG_USEC=300000"});
  std::string all;
  auto read_for = [&](std::chrono::milliseconds dt) {
    const auto until = std::chrono::steady_clock::now() + dt;
    char buf[4096];
    while (std::chrono::steady_clock::now() < until) {
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n > 0) all.append(buf, static_cast<std::size_t>(n)).append("\n");
    }
  };
  read_for(std::chrono::milliseconds(1500));
  EXPECT_NE(all.find("READY=1"), std::string::npos) << all << d.log();
  EXPECT_NE(all.find("STATUS=idle"), std::string::npos) << all;
  EXPECT_NE(all.find("MAINPID="), std::string::npos) << all;
  // 300 ms watchdog: fed about every 100 ms while the service thread runs.
  std::size_t pings = 0;
  for (auto p = all.find("WATCHDOG=1"); p != std::string::npos; p = all.find("WATCHDOG=1", p + 1)) ++pings;
  EXPECT_GE(pings, 4u) << all;
  d.signal(SIGTERM);
  read_for(std::chrono::milliseconds(500));
  EXPECT_EQ(d.wait_exit(std::chrono::seconds(10)), 0) << d.log();
  EXPECT_NE(all.find("STOPPING=1"), std::string::npos) << all;
  ::close(fd);
}
