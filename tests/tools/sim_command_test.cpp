// `glint sim`: its arguments are checked before any socket is bound.
#include <gtest/gtest.h>

#include <string>

#include "tool_test.hpp"

using glint::testing::expect_failure;

TEST(GlintSim, RejectsABadFaultPeriod) {
  for (const std::string every : {"x", "-1", "0", "", "3x"})
    expect_failure("sim --frames 1 --fault gap:" + every, 2,
                   "--fault gap:" + every + ": EVERY must be a whole number >= 1");
  expect_failure("sim --frames 1 --fault nonsense", 2, "unknown fault 'nonsense'");
}
