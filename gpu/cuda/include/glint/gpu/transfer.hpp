#pragma once
// Physical floors measured on the running machine, for benchmarks to quote ratios against.
#include <cstddef>

namespace glint::gpu {

/// Host-to-device bandwidth of one pinned bulk copy of `bytes` bytes to `device` (median of
/// `repeats` copies timed with device events), in bytes per second. Throws CudaError without a GPU.
double measure_h2d_bytes_per_second(std::size_t bytes, int repeats, int device = 0);

}  // namespace glint::gpu
