#include "lane_plan.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "cuda_owners.hpp"
#include "find_kernels.hpp"
#include "glint/log.hpp"

namespace glint::gpu::detail {
namespace {

/// Cuts the lane's band into segments (on the lane's device, current).
void choose_segments(const FinderParams& params, const FindTuning& tuning, LanePlan& lane) {
  const uint64_t cols = params.shape.cols;
  const uint64_t band_px = static_cast<uint64_t>(lane.r1 - lane.r0) * cols;
  const uint64_t h = static_cast<uint64_t>(params.cluster_size / 2);
  const uint64_t halo = std::max<uint64_t>(1, h * cols + h);
  const long long cap = tuning.max_segments;
  int sms = 0;
  GLINT_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, lane.device));
  const uint64_t by_halo = band_px / halo;
  for (const uint64_t limit : {cap > 0 ? static_cast<uint64_t>(cap) : by_halo, by_halo}) {
    for (int per_sm = 4; per_sm >= 1 && lane.blocks == 0; --per_sm) {
      const uint64_t blocks = std::min({static_cast<uint64_t>(per_sm) * sms, by_halo, limit});
      if (blocks == 0) break;
      const uint64_t seg = (band_px + blocks - 1) / blocks;
      for (const bool resident : {true, false}) {
        if (resident && !tuning.resident) continue;
        const int fit = find_blocks_per_sm(params.shape.cols, static_cast<uint32_t>(seg),
                                           params.cluster_size, resident, tuning.find_threads);
        if (fit >= per_sm || (fit >= 1 && blocks <= static_cast<uint64_t>(fit) * sms)) {
          lane.blocks = static_cast<uint32_t>(blocks);
          lane.segment_max = static_cast<uint32_t>(seg);
          lane.resident = resident;
          break;
        }
      }
    }
    if (lane.blocks != 0) break;
  }
  if (lane.blocks == 0)
    throw std::invalid_argument(
        "GPU finder: frames of " + std::to_string(params.shape.cols) + " columns with " +
        std::to_string(params.cluster_size) + "x" + std::to_string(params.cluster_size) +
        " clusters do not fit the GPU's shared memory, or GPU band too small (" +
        std::to_string(lane.r1 - lane.r0) + " rows)");
  log::write(log::Level::debug, "GPU finder: GPU " + std::to_string(lane.device) + " rows " +
                                    std::to_string(lane.r0) + ".." + std::to_string(lane.r1) +
                                    " in " + std::to_string(lane.blocks) + " segments of <= " +
                                    std::to_string(lane.segment_max) + " pixels, " +
                                    std::to_string(tuning.find_threads) + " threads each, state " +
                                    (lane.resident ? "in shared memory" : "in global memory"));
}

}  // namespace

std::vector<LanePlan> plan_lanes(const FinderParams& params, std::span<const int> devices,
                                 const FindTuning& tuning) {
  const uint32_t rows = params.shape.rows;
  const uint32_t h = static_cast<uint32_t>(params.cluster_size / 2);
  const std::size_t n_lanes = devices.size();
  std::vector<LanePlan> lanes(n_lanes);
  for (std::size_t li = 0; li < n_lanes; ++li) {
    LanePlan& lane = lanes[li];
    lane.device = devices[li];
    lane.r0 = static_cast<uint32_t>(rows * li / n_lanes);
    lane.r1 = static_cast<uint32_t>(rows * (li + 1) / n_lanes);
    lane.fr0 = lane.r0 >= h ? lane.r0 - h : 0;
    lane.fr1 = std::min(rows, lane.r1 + h);
    DeviceGuard g(lane.device);
    choose_segments(params, tuning, lane);
  }
  return lanes;
}

void enable_peer_access(std::span<const LanePlan> lanes) {
  const std::size_t n_lanes = lanes.size();
  if (n_lanes < 2) return;
  for (std::size_t li = 0; li < n_lanes; ++li) {
    DeviceGuard g(lanes[li].device);
    for (std::size_t lj : {li - 1, li + 1}) {
      if (lj >= n_lanes || lanes[lj].device == lanes[li].device) continue;
      int ok = 0;
      GLINT_CUDA_CHECK(cudaDeviceCanAccessPeer(&ok, lanes[li].device, lanes[lj].device));
      if (!ok)
        throw std::invalid_argument("GPU finder: GPU " + std::to_string(lanes[li].device) +
                                    " cannot access GPU " + std::to_string(lanes[lj].device) +
                                    "'s memory (peer access is needed across GPUs)");
      const cudaError_t e = cudaDeviceEnablePeerAccess(lanes[lj].device, 0);
      if (e == cudaErrorPeerAccessAlreadyEnabled)
        (void)cudaGetLastError();
      else
        GLINT_CUDA_CHECK(e);
    }
  }
}

}  // namespace glint::gpu::detail
