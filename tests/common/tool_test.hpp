#pragma once
// Running the real `glint` binary from a test, in a scratch directory of its own.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>

namespace glint::testing {

struct ToolResult {
  int status = -1;     ///< exit status, -1 when the process did not exit normally
  std::string output;  ///< stdout and stderr
};

/// Runs `build/bin/glint ARGS` through the shell and collects its output.
inline ToolResult run_glint(const std::string& args) {
  const std::string cmd = std::string(GLINT_BINARY_DIR) + "/bin/glint " + args + " 2>&1";
  ToolResult r;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  std::array<char, 4096> buf{};
  while (std::fgets(buf.data(), buf.size(), p) != nullptr) r.output += buf.data();
  const int s = ::pclose(p);
  r.status = WIFEXITED(s) ? WEXITSTATUS(s) : -1;
  return r;
}

/// Runs `glint ARGS` and expects it to end with `status` and to print `message`.
inline void expect_failure(const std::string& args, int status, const std::string& message) {
  const ToolResult r = run_glint(args);
  EXPECT_EQ(r.status, status) << "glint " << args << "\n" << r.output;
  EXPECT_NE(r.output.find(message), std::string::npos) << "glint " << args << "\n" << r.output;
}

/// A fixture with a fresh directory per test (removed afterwards); `prefix` names the suite.
class ScratchDirTest : public ::testing::Test {
 protected:
  explicit ScratchDirTest(std::string prefix) : prefix_(std::move(prefix)) {}
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           (prefix_ + "_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::filesystem::path dir_;

 private:
  std::string prefix_;
};

}  // namespace glint::testing
