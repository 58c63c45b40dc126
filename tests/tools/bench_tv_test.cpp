// `glint bench tv`: its arguments are checked before any GPU is needed.
#include <gtest/gtest.h>

#include <string>

#include "tool_test.hpp"

using glint::testing::expect_failure;

// The volume extent: bad --shape texts are usage errors (exit 2).
TEST(GlintBenchTv, BadShapeIsAUsageError) {
  for (const std::string shape : {"400,400", "400,400,x", "400,400,16,3", "400,3,16", ",400,16"})
    expect_failure("bench tv --shape " + shape, 2, "NX,NY,NZ");
}
