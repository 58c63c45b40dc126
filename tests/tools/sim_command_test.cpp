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

TEST(GlintSim, RejectsBadStreamFaultOptions) {
  for (const std::string v : {"x", "3", "3:", ":4", "3:4x"}) {
    expect_failure("sim --frames 1 --glitch " + v, 2,
                   "--glitch " + v + ": expected two whole numbers A:B");
    expect_failure("sim --frames 1 --port-delay " + v, 2,
                   "--port-delay " + v + ": expected two whole numbers A:B");
  }
  expect_failure("sim --frames 1 --jump 0:5", 2, "--jump: EVERY must be at least 1");
  expect_failure("sim --frames 1 --ports 2 1 --port-delay 2:100", 2,
                 "--port-delay 2:100: PORT must be below 2 (the ports)");
  expect_failure("sim --frames 1 --every 0", 2, "--every: N must be at least 1");
  expect_failure("sim --frames 1 --acquisitions 0", 2, "--acquisitions must be at least 1");
}
