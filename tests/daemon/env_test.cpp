// Tuning variables are read one way everywhere (glint/daemon/env.hpp, docs/tuning.md): a value
// that is not a whole number in range leaves the default.
#include <gtest/gtest.h>

#include <cstdlib>

#include "glint/daemon/env.hpp"

namespace {

using glint::daemon::env_int;
using glint::daemon::env_is;
using glint::daemon::env_set;
using glint::daemon::env_text;

constexpr const char* kName = "GLINT_TEST_TUNING_VARIABLE";

long long read_as(const char* value) {
  if (value) setenv(kName, value, 1);
  else unsetenv(kName);
  const long long v = env_int(kName, 8, 1, 1024);
  unsetenv(kName);
  return v;
}

TEST(TuningEnv, WholeNumbersInRangeAreTaken) {
  EXPECT_EQ(read_as("32"), 32);
  EXPECT_EQ(read_as("1"), 1);
  EXPECT_EQ(read_as("1024"), 1024);
  EXPECT_EQ(read_as("-5"), 8);
}

TEST(TuningEnv, AnythingElseLeavesTheDefault) {
  EXPECT_EQ(read_as(nullptr), 8);
  EXPECT_EQ(read_as(""), 8);
  EXPECT_EQ(read_as("0"), 8);
  EXPECT_EQ(read_as("1025"), 8);
  EXPECT_EQ(read_as("abc"), 8);
  EXPECT_EQ(read_as("16k"), 8);
  EXPECT_EQ(read_as("99999999999999999999999"), 8);
}

TEST(TuningEnv, WordsAndText) {
  unsetenv(kName);
  EXPECT_FALSE(env_set(kName));
  EXPECT_FALSE(env_is(kName, "0"));
  EXPECT_EQ(env_text(kName), "");
  setenv(kName, "mapped", 1);
  EXPECT_TRUE(env_set(kName));
  EXPECT_TRUE(env_is(kName, "mapped"));
  EXPECT_FALSE(env_is(kName, "map"));
  EXPECT_EQ(env_text(kName), "mapped");
  unsetenv(kName);
}

}  // namespace
