#pragma once
// Physical floors measured on the running machine, for benchmarks to quote ratios against.
#include <cstddef>

namespace glint::gpu {

/// Host-to-device bandwidth of one pinned bulk copy of `bytes` bytes to `device` (median of
/// `repeats` copies timed with device events), in bytes per second. Throws CudaError without a GPU.
double measure_h2d_bytes_per_second(std::size_t bytes, int repeats, int device = 0);

/// Seconds for `h2d_bytes` to `device` and `d2h_bytes` back from it, both pinned bulk copies on
/// their own streams started together, until the later one ends (median of `repeats`): the floor
/// of a batch whose frames go up while the results of the one before come down. Throws CudaError
/// without a GPU.
double measure_duplex_seconds(std::size_t h2d_bytes, std::size_t d2h_bytes, int repeats,
                              int device = 0);

}  // namespace glint::gpu
