#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>

#include "glint/gpu/error.hpp"
#include "glint/gpu/transfer.hpp"
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

TEST(Transfer, WithoutAGpuTheFloorsSayWhy) {
  if (glint::gpu::device_count() > 0) GTEST_SKIP() << "a GPU is present";
  EXPECT_THROW(glint::gpu::measure_h2d_bytes_per_second(1 << 20, 3), glint::gpu::CudaError);
  EXPECT_THROW(glint::gpu::measure_duplex_seconds(1 << 20, 1 << 20, 3), glint::gpu::CudaError);
}

TEST(Transfer, TheDuplexFloorWaitsForTheLaterCopyAndIsTheUploadAloneWithNothingToBringBack) {
  GLINT_REQUIRE_GPU();
  const std::size_t big = std::size_t{64} << 20, small = std::size_t{8} << 20;
  const double bps = glint::gpu::measure_h2d_bytes_per_second(big, 9);
  EXPECT_GT(bps, 1e9);  // any PCIe link of a GPU that runs glint moves more than 1 GB/s
  const double alone = static_cast<double>(big) / bps;
  const double up_only = glint::gpu::measure_duplex_seconds(big, 0, 9);
  const double down_only = glint::gpu::measure_duplex_seconds(0, big, 9);
  // Medians of 9 copies, with half of slack for a host whose link moves between calls: the checks
  // are for the method (a wrong unit, or a copy not waited for, is off by 8x or more).
  EXPECT_NEAR(up_only, alone, 0.5 * alone);
  // No host link moves a terabyte a second: a copy timed in the wrong unit or not waited for
  // comes out below this.
  EXPECT_GT(down_only, static_cast<double>(big) / 1e12);
  EXPECT_GT(up_only, static_cast<double>(big) / 1e12);
  EXPECT_GT(glint::gpu::measure_duplex_seconds(small, big, 9), 0.5 * down_only);
  EXPECT_GT(glint::gpu::measure_duplex_seconds(big, small, 9), 0.5 * up_only);
}
