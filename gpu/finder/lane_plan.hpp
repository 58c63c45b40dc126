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
  uint32_t segment_max = 1;              ///< pixels per segment (most)
  uint32_t blocks = 0;                   ///< find blocks
  uint32_t chunks = 1;                   ///< segments per find block
  int threads = 512;                     ///< threads per find block
  bool resident = true;                  ///< find blocks keep their pixels' state in shared memory
  int spill = 0;                         ///< arrays in global scratch (find_kernels.hpp)
  std::size_t scratch_stride = 0;        ///< global scratch bytes per find block

  uint32_t frame_rows() const { return fr1 - fr0; }
  uint32_t segments() const { return blocks * chunks; }
  std::size_t scratch_bytes() const { return scratch_stride * blocks; }
};

/// One lane per device, in row order (fewer where the bands would be shorter than a window's
/// reach): equal bands, each cut into segments of consecutive pixels, each at least one window
/// halo long (or the whole band). First as many segments as find blocks fit on the GPU at once
/// (at most `tuning.max_segments`), one per block, the state in shared memory where it fits (and
/// `tuning.resident`); where a frame is too large for that, each block takes several segments in
/// turn, and the arrays that do not fit in shared memory move to a global scratch area. Never
/// refuses a shape the CPU backend accepts.
std::vector<LanePlan> plan_lanes(const FinderParams& params, std::span<const int> devices,
                                 const FindTuning& tuning);

/// Lets each lane's GPU read its neighbours' memory (the bands wait for each other's progress
/// through peer memory). Throws std::invalid_argument where a GPU cannot.
void enable_peer_access(std::span<const LanePlan> lanes);

}  // namespace glint::gpu::detail
