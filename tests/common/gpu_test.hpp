#pragma once
// GPU tests skip cleanly where there is no GPU and run wherever there is one.
#include <gtest/gtest.h>

#include "glint/gpu/device.hpp"

#define GLINT_REQUIRE_GPU()                                                            \
  do {                                                                                 \
    if (::glint::gpu::device_count() == 0)                                             \
      GTEST_SKIP() << "no GPU: " << ::glint::gpu::unavailable_reason();                \
  } while (0)
