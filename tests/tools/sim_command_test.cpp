// `glint sim`: its arguments are checked before any socket is bound.
#include <gtest/gtest.h>

#include <string>

#include "tool_test.hpp"

using glint::testing::run_glint;
using glint::testing::ToolResult;

TEST(GlintSim, RejectsABadFaultPeriod) {
  for (const std::string every : {"x", "-1", "0", "", "3x"}) {
    const ToolResult r = run_glint("sim --frames 1 --fault gap:" + every);
    EXPECT_EQ(r.status, 2) << every << ": " << r.output;
    EXPECT_NE(r.output.find("--fault gap:" + every + ": EVERY must be a whole number >= 1"),
              std::string::npos)
        << r.output;
  }
  const ToolResult r = run_glint("sim --frames 1 --fault nonsense");
  EXPECT_EQ(r.status, 2) << r.output;
}
