// glint master: the command's summary, exit codes and one-line errors (the master file's
// contents: tests/pipeline/master_file_test.cpp).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "glint/pipeline/run_file.hpp"
#include "module_runs.hpp"
#include "tool_test.hpp"

namespace fs = std::filesystem;
using glint::testing::expect_failure;
using glint::testing::half_of_four_modules;
using glint::testing::ModuleRun;
using glint::testing::run_glint;
using glint::testing::write_module_run;

namespace {

class MasterCommand : public glint::testing::ScratchDirTest {
 protected:
  MasterCommand() : ScratchDirTest("glint_master_cmd") {}
  void SetUp() override {
    ScratchDirTest::SetUp();
    for (int k : {0, 1}) write_module_run(path(k == 0 ? "top.h5" : "bottom.h5"),
                                          half_of_four_modules(k));
  }
};

/// Lines of `text` holding `needle`.
int lines_with(const std::string& text, const std::string& needle) {
  int n = 0;
  for (std::size_t at = text.find(needle); at != std::string::npos;
       at = text.find(needle, at + 1))
    ++n;
  return n;
}

}  // namespace

TEST_F(MasterCommand, JoinsTheRunsAndSaysWhat) {
  const auto top = glint::pipeline::read_run_file(path("top.h5"));
  const auto bottom = glint::pipeline::read_run_file(path("bottom.h5"));
  const uint64_t n = top.clusters.n_clusters() + bottom.clusters.n_clusters();
  const auto r = run_glint("master " + path("bottom.h5") + " " + path("top.h5") + " --output " +
                           path("master.h5"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("4 modules, detector 8 x 6, " + std::to_string(n) + " clusters"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("/entry/runs/top -> " + path("top.h5") + ": modules 0,1, image 4 x 6 "
                          "at (0, 0), " + std::to_string(top.clusters.n_clusters()) +
                          " clusters"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("/entry/runs/bottom -> " + path("bottom.h5") + ": modules 2,3, image "
                          "4 x 6 at (4, 0), " + std::to_string(bottom.clusters.n_clusters()) +
                          " clusters"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("/entry/hitmap/counts"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("/entry/pedestal/start_mean"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("/entry/clusters: frame_number x y module data energy energy_2x2"),
            std::string::npos)
      << r.output;
  EXPECT_TRUE(fs::exists(path("master.h5")));
  // The output is never replaced without --overwrite.
  expect_failure("master " + path("top.h5") + " " + path("bottom.h5") + " -o " +
                     path("master.h5"),
                 2, "master.h5: exists (pass --overwrite to replace it)");
  const auto again = run_glint("master -q --overwrite " + path("top.h5") + " " +
                               path("bottom.h5") + " -o " + path("master.h5"));
  EXPECT_EQ(again.status, 0) << again.output;
  EXPECT_EQ(again.output, "");
}

TEST_F(MasterCommand, BadInputsAreOneLineErrorsWithExitStatusTwo) {
  const std::string out = " -o " + path("m.h5");
  expect_failure("master " + path("top.h5") + " " + path("nope.h5") + out, 2,
                 "glint master: " + path("nope.h5") + ": no such file");
  std::ofstream(path("text.h5")) << "text\n";
  expect_failure("master " + path("text.h5") + out, 2, "not a glint run file");
  ModuleRun again = half_of_four_modules(0);
  again.layout.first_module = 5;
  write_module_run(path("again.h5"), again);
  expect_failure("master " + path("top.h5") + " " + path("again.h5") + out, 2,
                 path("top.h5") + " and " + path("again.h5") + " overlap");
  ModuleRun twin = half_of_four_modules(1);
  twin.layout.first_module = 0;
  write_module_run(path("twin.h5"), twin);
  expect_failure("master " + path("top.h5") + " " + path("twin.h5") + out, 2,
                 "both hold module 0");
  ModuleRun wide = half_of_four_modules(1);
  wide.layout.detector_cols = 12;
  write_module_run(path("wide.h5"), wide);
  expect_failure("master " + path("top.h5") + " " + path("wide.h5") + out, 2,
                 "parts of different detectors");
  // A run still being written (no end_time yet, as after a crash).
  {
    ModuleRun crashed = half_of_four_modules(1);
    crashed.close = false;
    auto writer = write_module_run(path("crashed.h5"), crashed);
    const auto r = run_glint("master " + path("top.h5") + " " + path("crashed.h5") + out);
    EXPECT_EQ(r.status, 2) << r.output;
    EXPECT_NE(r.output.find(path("crashed.h5") + ": the run never closed (no end_time)"),
              std::string::npos)
        << r.output;
    EXPECT_EQ(lines_with(r.output, "\n"), 1) << r.output;
    EXPECT_FALSE(fs::exists(path("m.h5")));  // nothing made by any refusal
    const auto allowed = run_glint("master --allow-open " + path("top.h5") + " " +
                                   path("crashed.h5") + out);
    EXPECT_EQ(allowed.status, 0) << allowed.output;
    EXPECT_NE(allowed.output.find("(run still open)"), std::string::npos) << allowed.output;
  }
  const auto usage = run_glint("master " + path("top.h5"));
  EXPECT_EQ(usage.status, 2) << usage.output;
  EXPECT_NE(usage.output.find("--output"), std::string::npos) << usage.output;
}
