// The shipped unit: systemd-analyze verify and security, where systemd-analyze exists.
#include <gtest/gtest.h>

#include <cstdio>
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
