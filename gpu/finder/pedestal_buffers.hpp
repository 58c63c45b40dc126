#pragma once
// The per-pixel pedestal state the find kernels work on, on one GPU (whole-frame arrays, indexed
// by pixel; each GPU uses its band and halo rows). Internal to the GPU finder.
#include <cstddef>
#include <cstdint>

#include "cuda_owners.hpp"
#include "find_kernels.hpp"

namespace glint::gpu::detail {

struct PedestalBuffers {
  DeviceBuffer<double> sum[2], sum2[2], mean[2], noise;
  DeviceBuffer<uint32_t> count;
  DeviceBuffer<unsigned long long> progress, frames_done;  ///< per segment; frames so far
  DeviceBuffer<unsigned int> blocks_done;
  DeviceBuffer<unsigned char> scratch;  ///< the find blocks' spilled arrays (LanePlan::spill)

  PedestalBuffers() = default;
  /// Zeroed state for `np` pixels and `segments` segments, `scratch_bytes` of scratch for the
  /// find blocks; cleared on stream `s`.
  PedestalBuffers(std::size_t np, uint32_t segments, std::size_t scratch_bytes, StreamView s) {
    for (int i = 0; i < 2; ++i) {
      sum[i] = DeviceBuffer<double>(np);
      sum2[i] = DeviceBuffer<double>(np);
      mean[i] = DeviceBuffer<double>(np);
      sum[i].zero(s);
      sum2[i].zero(s);
      mean[i].zero(s);
    }
    noise = DeviceBuffer<double>(np);
    noise.zero(s);
    count = DeviceBuffer<uint32_t>(np);
    count.zero(s);
    progress = DeviceBuffer<unsigned long long>(segments);
    progress.zero(s);
    frames_done = DeviceBuffer<unsigned long long>(1);
    frames_done.zero(s);
    blocks_done = DeviceBuffer<unsigned int>(1);
    blocks_done.zero(s);
    if (scratch_bytes > 0) scratch = DeviceBuffer<unsigned char>(scratch_bytes);
  }
  explicit operator bool() const { return progress.get() != nullptr; }

  /// The kernels' view; `count_override` replaces the count array (a re-run reads the live one).
  PedestalArrays arrays(uint32_t* count_override = nullptr) const {
    PedestalArrays a;
    for (int i = 0; i < 2; ++i) {
      a.sum[i] = sum[i].get();
      a.sum2[i] = sum2[i].get();
      a.mean[i] = mean[i].get();
    }
    a.noise = noise.get();
    a.count = count_override ? count_override : count.get();
    return a;
  }
};

/// A start-of-batch copy of the current-parity state (sum, sum2, mean, noise), from which a batch
/// that overflowed its result buffers is re-run.
struct PedestalSnapshot {
  DeviceBuffer<double> sum, sum2, mean, noise;

  PedestalSnapshot() = default;
  explicit PedestalSnapshot(std::size_t np)
      : sum(np), sum2(np), mean(np), noise(np) {}
  /// The kernels' view (buffer 0), with the live count array.
  PedestalArrays arrays(uint32_t* count) const {
    PedestalArrays a;
    a.sum[0] = sum.get();
    a.sum2[0] = sum2.get();
    a.mean[0] = mean.get();
    a.noise = noise.get();
    a.count = count;
    return a;
  }
};

}  // namespace glint::gpu::detail
