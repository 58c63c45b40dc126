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
