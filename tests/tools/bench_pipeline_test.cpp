// `glint bench pipeline`, run as a user runs it (CPU backend, small frames, loopback).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tool_test.hpp"

using glint::testing::expect_failure;
using glint::testing::run_glint;
using glint::testing::ToolResult;

namespace {

// The run files go to a directory of the test's own (the default one in /tmp is shared by every
// bench run on the machine).
class GlintBenchPipeline : public glint::testing::ScratchDirTest {
 protected:
  GlintBenchPipeline() : ScratchDirTest("glint_bench_pipeline_test") {}
};

}  // namespace

TEST_F(GlintBenchPipeline, RoundsReportEveryLegAndTheirMedians) {
  const ToolResult r = run_glint(
      "--log-level error bench pipeline --backend cpu --threads 2 --size 32 --dark 20 --frames 200 "
      "--photons 5 --repeat 3 --json --output " + path("runs"));
  ASSERT_EQ(r.status, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  ASSERT_EQ(j["rounds"].get<int>(), 3);
  ASSERT_EQ(j["round_legs"].size(), 3u);
  std::vector<double> floor_fps, pipeline_fps;
  for (const auto& legs : j["round_legs"]) {
    ASSERT_EQ(legs.size(), 2u);
    for (const auto& leg : legs) {
      // Every image sent is either counted or lost, never both, never neither.
      EXPECT_EQ(leg["frames"].get<uint64_t>() + leg["lost"].get<uint64_t>(), 220u) << leg.dump();
      EXPECT_EQ(leg["images_sent"].get<uint64_t>(), 220u);
      EXPECT_GT(leg["frames_per_s"].get<double>(), 0.0);
    }
    EXPECT_EQ(legs[0]["lost"].get<uint64_t>(), 0u);  // the floor only counts
    floor_fps.push_back(legs[0]["frames_per_s"].get<double>());
    pipeline_fps.push_back(legs[1]["frames_per_s"].get<double>());
  }
  std::sort(floor_fps.begin(), floor_fps.end());
  std::sort(pipeline_fps.begin(), pipeline_fps.end());
  EXPECT_DOUBLE_EQ(j["median_frames_per_s"][0].get<double>(), floor_fps[1]);
  EXPECT_DOUBLE_EQ(j["median_frames_per_s"][1].get<double>(), pipeline_fps[1]);
  EXPECT_DOUBLE_EQ(j["ratio_to_floor"].get<double>(), pipeline_fps[1] / floor_fps[1]);
  expect_failure("bench pipeline --repeat 0", 2, "--repeat: Value 0 not in range 1 to 100");
}

TEST_F(GlintBenchPipeline, ADetectorOfModulesOnManyPorts) {
  // Four modules of two ports each (8 streams), two side by side: a JUNGFRAU 2M's layout at a
  // small size. Every image is either counted or lost; the run names its modules.
  const ToolResult r = run_glint(
      "--log-level error bench pipeline --backend cpu --threads 2 --modules 4 "
      "--ports-per-module 2 --module-rows 16 --module-cols 32 --dark 20 --frames 100 --photons 5 "
      "--json --output " + path("runs"));
  ASSERT_EQ(r.status, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["modules"].get<int>(), 4);
  EXPECT_EQ(j["ports"].get<int>(), 8);
  EXPECT_EQ(j["rows"].get<int>(), 32);
  EXPECT_EQ(j["cols"].get<int>(), 64);
  const auto& legs = j["legs"];
  ASSERT_EQ(legs.size(), 2u);
  for (const auto& leg : legs)
    EXPECT_EQ(leg["frames"].get<uint64_t>() + leg["lost"].get<uint64_t>(), 120u) << leg.dump();
  EXPECT_EQ(legs[1]["extra"]["backend"].get<std::string>().rfind("4 modules: cpu", 0), 0u)
      << legs[1].dump();
  expect_failure("bench pipeline --modules 2 --ports-per-module 3 --module-rows 16", 2,
                 "--ports-per-module must divide --module-rows");
}
