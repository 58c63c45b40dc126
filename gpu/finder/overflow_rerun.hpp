#pragma once
// The exact re-run of a batch whose clusters did not fit its result buffers, or outgrew the result
// copy sized from the batches before it: from each GPU's start-of-batch snapshot, on separate
// state, into buffers sized from the true counts. The live state is already right (capacity never
// changes a decision). Internal to the GPU finder.
#include <cstdint>
#include <span>
#include <vector>

#include "cuda_owners.hpp"
#include "glint/gpu/gpu_finder.hpp"
#include "lane.hpp"

namespace glint::gpu::detail {

class OverflowRerun {
 public:
  /// Re-runs slot si's batch of n frames on frame buffer fb (already found once: the slot's
  /// results on the host hold the clusters its find blocks took, which the re-run's take again
  /// whatever the order) and waits for it. `bands` receives each lane's results, valid until the
  /// next run.
  void run(const FindSetup& setup, std::span<Lane> lanes, int si, int fb, int n, int batch,
           uint32_t chunk, std::vector<GpuBandView>& bands);

  /// Frees each lane's buffers with its device current.
  void release(std::span<const Lane> lanes);

  /// From the last run: the most clusters its find blocks took on one GPU.
  uint64_t max_handed_out() const { return max_handed_out_; }

 private:
  std::vector<PedestalBuffers> state_;  // per lane, allocated on first need
  std::vector<DeviceBuffer<unsigned char>> dout_;  // the find's output
  std::vector<PinnedBuffer<unsigned char>> out_;   // its copy on the host
  std::vector<OutLayout> layout_;
  uint64_t max_handed_out_ = 0;
};

}  // namespace glint::gpu::detail
