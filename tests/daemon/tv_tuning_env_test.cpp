// The tuning variables of docs/tuning.md are read in one place (glint/daemon/tuning_env.hpp)
// into the engines' tuning structs.
#include <gtest/gtest.h>

#include <utility>

#include "glint/daemon/tuning_env.hpp"
#include "scoped_environment.hpp"

namespace {

using glint::gpu::TvTuning;
using glint::daemon::tv_tuning_from_environment;

constexpr const char* kTvVariables[] = {
    "GLINT_TV_KERNEL", "GLINT_TV_ZRUN",   "GLINT_TV_SHUFFLE", "GLINT_TV_ROWS", "GLINT_TV_AHEAD",
    "GLINT_TV_WARPS",  "GLINT_TV_BLOCKS", "GLINT_TV_COLS",    "GLINT_TV_CHUNK", "GLINT_TV_GROUP",
    "GLINT_TV_FIRST",  "GLINT_TV_OX",     "GLINT_TV_PITCH"};

/// Sets the given variables (every other GLINT_TV_* unset) for its lifetime.
struct Environment : glint::testing::ScopedEnvironment {
  Environment(std::initializer_list<std::pair<const char*, const char*>> vars)
      : ScopedEnvironment(kTvVariables, vars) {}
};

TEST(TvTuningEnvironment, UnsetLeavesTheSolversDefaults) {
  Environment env({});
  const TvTuning t = tv_tuning_from_environment(), def;
  EXPECT_EQ(t.kernel, def.kernel);
  EXPECT_EQ(t.zrun, 4);
  EXPECT_EQ(t.shuffle, -1);
  EXPECT_EQ(t.rows, -1);
  EXPECT_EQ(t.ahead, -1);
  EXPECT_EQ(t.warps, -1);
  EXPECT_EQ(t.blocks, -1);
  EXPECT_EQ(t.cols, -1);
  EXPECT_EQ(t.chunk, 0);
  EXPECT_EQ(t.group, -1);
  EXPECT_EQ(t.first, -1);
  EXPECT_EQ(t.ox, 0);
  EXPECT_EQ(t.pitch, 0);
}

TEST(TvTuningEnvironment, EveryVariableSetsItsField) {
  Environment env({{"GLINT_TV_KERNEL", "staged"}, {"GLINT_TV_ZRUN", "8"},
                   {"GLINT_TV_SHUFFLE", "1"}, {"GLINT_TV_ROWS", "2"}, {"GLINT_TV_AHEAD", "2"},
                   {"GLINT_TV_WARPS", "16"}, {"GLINT_TV_BLOCKS", "3"}, {"GLINT_TV_COLS", "1"},
                   {"GLINT_TV_CHUNK", "5"}, {"GLINT_TV_GROUP", "0"}, {"GLINT_TV_FIRST", "132"},
                   {"GLINT_TV_OX", "56"}, {"GLINT_TV_PITCH", "288"}});
  const TvTuning t = tv_tuning_from_environment();
  EXPECT_EQ(t.kernel, TvTuning::Kernel::staged);
  EXPECT_EQ(t.zrun, 8);
  EXPECT_EQ(t.shuffle, 1);
  EXPECT_EQ(t.rows, 2);
  EXPECT_EQ(t.ahead, 2);
  EXPECT_EQ(t.warps, 16);
  EXPECT_EQ(t.blocks, 3);
  EXPECT_EQ(t.cols, 1);
  EXPECT_EQ(t.chunk, 5);
  EXPECT_EQ(t.group, 0);
  EXPECT_EQ(t.first, 132);
  EXPECT_EQ(t.ox, 56);
  EXPECT_EQ(t.pitch, 288);
}

TEST(TvTuningEnvironment, KernelWords) {
  constexpr std::pair<const char*, TvTuning::Kernel> kWords[] = {
      {"march", TvTuning::Kernel::march},
      {"staged", TvTuning::Kernel::staged},
      {"pair", TvTuning::Kernel::pair}};
  for (const auto& [word, kernel] : kWords) {
    Environment env({{"GLINT_TV_KERNEL", word}});
    EXPECT_EQ(tv_tuning_from_environment().kernel, kernel) << word;
  }
}

TEST(TvTuningEnvironment, ValuesOutsideTheRangeLeaveTheDefault) {
  // Words not listed (classic: the removed shared-memory kernels) and numbers out of range.
  Environment env({{"GLINT_TV_KERNEL", "classic"}, {"GLINT_TV_ZRUN", "9"},
                   {"GLINT_TV_SHUFFLE", "yes"}, {"GLINT_TV_ROWS", "-1"},
                   {"GLINT_TV_CHUNK", "0"}, {"GLINT_TV_GROUP", "x"}, {"GLINT_TV_FIRST", "-3"}});
  const TvTuning t = tv_tuning_from_environment();
  EXPECT_EQ(t.kernel, TvTuning::Kernel::planned);
  EXPECT_EQ(t.zrun, 4);
  EXPECT_EQ(t.shuffle, -1);
  EXPECT_EQ(t.rows, -1);
  EXPECT_EQ(t.chunk, 0);
  EXPECT_EQ(t.group, -1);
  EXPECT_EQ(t.first, -1);
}

TEST(TvTuningEnvironment, RegionsAndPitchThatAreNotNumbersReachTheSolverAsRefused) {
  // The solver checks these against the volume and warns; -1 is a value it refuses.
  Environment env({{"GLINT_TV_OX", "wide"}, {"GLINT_TV_PITCH", "576 floats"}});
  const TvTuning t = tv_tuning_from_environment();
  EXPECT_EQ(t.ox, -1);
  EXPECT_EQ(t.pitch, -1);
}

}  // namespace
