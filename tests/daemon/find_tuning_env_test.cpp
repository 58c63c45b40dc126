// The GPU finder's tuning comes from the environment in one place, read as docs/tuning.md says:
// a value that is not a whole number in range, or not an accepted word, leaves the default.
#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "glint/daemon/tuning_env.hpp"
#include "scoped_environment.hpp"

namespace {

using glint::gpu::FindTuning;
using glint::daemon::find_tuning_from_environment;

constexpr const char* kNames[] = {"GLINT_FIND_THREADS",  "GLINT_FIND_CHUNK",
                                  "GLINT_FIND_RESIDENT", "GLINT_FIND_NARROW",
                                  "GLINT_FIND_SEGMENTS",
                                  "GLINT_FIND_PROFILE",  "GLINT_FIND_TIMELINE",
                                  "GLINT_FIND_TRACE"};

/// Sets the given variables (and unsets the others) for its lifetime.
struct Environment : glint::testing::ScopedEnvironment {
  Environment(std::initializer_list<std::pair<const char*, const char*>> vars)
      : ScopedEnvironment(kNames, vars) {}
};

TEST(FindTuningFromEnvironment, NothingSetGivesTheEngineDefaults) {
  Environment env({});
  const FindTuning t = find_tuning_from_environment();
  const FindTuning d;
  EXPECT_EQ(t.find_threads, 0);  // the engine's measured sizes
  EXPECT_EQ(t.find_threads, d.find_threads);
  EXPECT_EQ(t.out_chunk, 32);
  EXPECT_TRUE(t.resident);
  EXPECT_TRUE(t.narrow);
  EXPECT_EQ(t.max_segments, 0);
  EXPECT_FALSE(t.profile);
  EXPECT_EQ(t.timeline, "");
  EXPECT_EQ(t.trace, "");
  EXPECT_NO_THROW(glint::gpu::validate(t));
}

TEST(FindTuningFromEnvironment, EveryVariableReachesItsField) {
  Environment env({{"GLINT_FIND_THREADS", "256"},
                   {"GLINT_FIND_CHUNK", "1"},
                   {"GLINT_FIND_RESIDENT", "0"},
                   {"GLINT_FIND_NARROW", "0"},
                   {"GLINT_FIND_SEGMENTS", "7"},
                   {"GLINT_FIND_PROFILE", ""},
                   {"GLINT_FIND_TIMELINE", "/tmp/timeline.csv"},
                   {"GLINT_FIND_TRACE", "/tmp/trace.csv"}});
  const FindTuning t = find_tuning_from_environment();
  EXPECT_EQ(t.find_threads, 256);
  EXPECT_EQ(t.out_chunk, 1);
  EXPECT_FALSE(t.resident);
  EXPECT_FALSE(t.narrow);
  EXPECT_EQ(t.max_segments, 7);
  EXPECT_TRUE(t.profile);  // set to anything, also empty
  EXPECT_EQ(t.timeline, "/tmp/timeline.csv");
  EXPECT_EQ(t.trace, "/tmp/trace.csv");
  EXPECT_NO_THROW(glint::gpu::validate(t));
}

TEST(FindTuningFromEnvironment, UnusableValuesLeaveTheDefaults) {
  constexpr std::pair<const char*, const char*> kUnusable[] = {
      {"GLINT_FIND_THREADS", "500"},  // not a multiple of 32
      {"GLINT_FIND_THREADS", "96"},   // below 128
      {"GLINT_FIND_CHUNK", "65537"},
      {"GLINT_FIND_CHUNK", "0"},
      {"GLINT_FIND_CHUNK", "x"},
      {"GLINT_FIND_RESIDENT", "off"},  // only 0 turns it off
      {"GLINT_FIND_NARROW", "no"},     // likewise
      {"GLINT_FIND_SEGMENTS", "0"}};
  const FindTuning d;
  for (const auto& [name, value] : kUnusable) {
    SCOPED_TRACE(std::string(name) + "=" + value);
    Environment env({{name, value}});
    const FindTuning t = find_tuning_from_environment();
    EXPECT_EQ(t.find_threads, d.find_threads);
    EXPECT_EQ(t.out_chunk, d.out_chunk);
    EXPECT_EQ(t.resident, d.resident);
    EXPECT_EQ(t.narrow, d.narrow);
    EXPECT_EQ(t.max_segments, d.max_segments);
  }
}

TEST(RunTuningFromEnvironment, ReadsTheFinderAndTheSolverVariables) {
  constexpr const char* kZrun[] = {"GLINT_TV_ZRUN"};
  Environment env({{"GLINT_FIND_THREADS", "256"}});
  glint::testing::ScopedEnvironment tv(kZrun, {{"GLINT_TV_ZRUN", "8"}});
  const glint::pipeline::RunTuning r = glint::daemon::run_tuning_from_environment();
  EXPECT_EQ(r.find.find_threads, 256);
  EXPECT_EQ(r.tv.zrun, 8);
}

TEST(FindTuning, ValidateNamesTheFieldAndTheAllowedValues) {
  FindTuning t;
  t.find_threads = 100;
  try {
    glint::gpu::validate(t);
    FAIL() << "find_threads 100 accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("find_threads 100"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("multiple of 32"), std::string::npos) << e.what();
  }
  t = FindTuning{};
  t.out_chunk = 0;
  EXPECT_THROW(glint::gpu::validate(t), std::invalid_argument);
  t = FindTuning{};
  t.max_segments = -1;
  EXPECT_THROW(glint::gpu::validate(t), std::invalid_argument);
  t = FindTuning{};
  t.find_threads = 1024;
  EXPECT_NO_THROW(glint::gpu::validate(t));
}

}  // namespace
