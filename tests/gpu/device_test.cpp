#include <gtest/gtest.h>

#include "gpu_test.hpp"

TEST(Device, CountIsNeverNegativeAndReasonMatches) {
  const int n = glint::gpu::device_count();
  EXPECT_GE(n, 0);
  EXPECT_EQ(n == 0, !glint::gpu::unavailable_reason().empty());
}

TEST(Device, PropertiesOfEveryDevice) {
  GLINT_REQUIRE_GPU();
  for (int i = 0; i < glint::gpu::device_count(); ++i) {
    const auto info = glint::gpu::device_info(i);
    EXPECT_EQ(info.id, i);
    EXPECT_FALSE(info.name.empty());
    EXPECT_GT(info.sm_count, 0);
    EXPECT_GT(info.total_memory, 0u);
  }
}
