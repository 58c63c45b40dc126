#pragma once
// How a frame is divided among the GPUs and their find blocks: each GPU (lane) computes a band of
// rows, cut into one segment of consecutive pixels per resident find block. Internal to the GPU
// finder.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "glint/cluster_finder.hpp"
#include "glint/gpu/find_tuning.hpp"

namespace glint::gpu::detail {

struct LanePlan {
  int device = 0;
  uint32_t r0 = 0, r1 = 0;               ///< band computed here
  uint32_t fr0 = 0, fr1 = 0;             ///< frame rows uploaded here (band plus halo)
  uint32_t segment_max = 1, blocks = 0;  ///< pixels per find block (most), find blocks
  bool resident = true;                  ///< find blocks keep their pixels' state in shared memory

  uint32_t frame_rows() const { return fr1 - fr0; }
};

/// One lane per device, in row order: equal bands, each cut into as many segments as find blocks
/// fit on its GPU at once (at most `tuning.max_segments`), each segment at least one window halo
/// long; the state stays in shared memory where it fits (and `tuning.resident`), at the same
/// number of blocks per multiprocessor before fewer are tried. Throws std::invalid_argument when
/// the frame's rows cannot be shared this way.
std::vector<LanePlan> plan_lanes(const FinderParams& params, std::span<const int> devices,
                                 const FindTuning& tuning);

/// Lets each lane's GPU read its neighbours' memory (the bands wait for each other's progress
/// through peer memory). Throws std::invalid_argument where a GPU cannot.
void enable_peer_access(std::span<const LanePlan> lanes);

}  // namespace glint::gpu::detail
